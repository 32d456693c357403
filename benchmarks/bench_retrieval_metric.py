"""Time every entry to convrag's retrieval metric against pytrec_eval and ranx, on data with and without ties.

    python benchmarks/bench_retrieval_metric.py [--queries 10000 30000 100000] [--docs 100] [--trec-lines 1000000]

Data (built in this process, not timed): ``{query: {doc: score}}`` with ``--docs`` documents per query and graded
qrels (grades 0-3, 1-10 judged documents per query, about half of them retrieved, at least one relevant per
query). Two runs per size: *no ties* (scores distinct even as 32-bit floats) and *ties* (the same run with the
scores of every other query rounded to a grid of 1/20, so about 5 documents share each score: trec_eval then
orders them by doc id descending).

Paths timed, each from Python objects in memory to per-query scores, for the same 5 measures:
- ``core``: ``score_run(run, qrels)`` on the dicts;
- ``evaluate.load compute``: ``evaluate.load(convrag.metrics.path("retrieval")).compute(predictions=...,
  references=...)`` with lists of ``{"id", "score"}`` / ``{"id", "grade"}`` objects (as the README shows);
- ``add_batch``: the same objects given by ``add_batch`` in batches of 1,000 queries, then ``compute()``;
- ``pytrec_eval``: ``RelevanceEvaluator(qrels, measures).evaluate(run)`` on the dicts;
- ``ranx``: ``evaluate(Qrels(qrels), Run(run), measures)`` (numba compiled by a warm-up first; one run).
Time is CPU time (``time.process_time``), the minimum of ``--repeat`` runs, convrag's paths and pytrec_eval
interleaved; ratios are pytrec_eval's time / the path's time (above 1: faster than pytrec_eval).

The TREC-file path (``convrag evaluate --run FILE``): a run file of ``--trec-lines`` lines (tied data) is read
and scored by convrag (``trec.read_run`` + ``score_run``) and by pytrec_eval (``parse_run`` + evaluate), each in
a fresh subprocess (qrels from a JSON file), ``--repeat`` times; CPU time of reading + scoring, and the peak
resident memory of the whole subprocess (``VmHWM`` of ``/proc/self/status``, Linux; not ``getrusage``'s
``ru_maxrss``, which a child keeps from its parent across fork + exec): interpreter, imports and qrels included,
the same for both; ``(qrels only)`` shows that base. Checks: convrag's per-query values equal
pytrec_eval's to the bit (the evaluate paths' means equal the core's; ranx: means printed, to 1e-9 on the data
without ties, as ranx breaks ties otherwise). A script, not a test; it needs the ``test`` extra.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import numpy as np
import pytrec_eval

from convrag.metrics.retrieval.compute import score_run
from convrag.metrics.retrieval.trec import read_run, write_run

# our name -> (pytrec_eval measure, its output key, ranx name)
MEASURES = {
    "nDCG@10": ("ndcg_cut.10", "ndcg_cut_10", "ndcg@10"),
    "Recall@10": ("recall.10", "recall_10", "recall@10"),
    "P@10": ("P.10", "P_10", "precision@10"),
    "MAP@10": ("map_cut.10", "map_cut_10", "map@10"),
    "MRR": ("recip_rank", "recip_rank", "mrr"),
}
NAMES = list(MEASURES)
GOALS = {"core": 3.0, "evaluate.load compute": 2.0}  # times pytrec_eval's speed, on tied data
TREC_GOAL = 1.5  # the TREC path's CPU time and peak memory, at most this many times pytrec_eval's
BATCH = 1_000


def make_data(n_queries: int, n_docs: int, seed: int, ties: bool) -> tuple[dict, dict]:
    """A run of ``n_docs`` distinct docs per query and graded qrels, as plain Python dicts (see the docstring)."""
    rng = np.random.default_rng(seed)
    corpus_size = 1_000_000
    names = [f"doc{i}" for i in range(corpus_size)]  # shared string objects keep memory down
    starts = rng.integers(0, corpus_size, n_queries)
    doc_index = (starts[:, None] + np.arange(n_docs) * 7_919) % corpus_size  # distinct within a query
    grid = np.argsort(rng.random((n_queries, n_docs)), axis=1) / n_docs  # distinct float32 values per query
    scores = grid + rng.random((n_queries, n_docs)) * (0.5 / n_docs)
    if ties:
        scores[1::2] = np.round(scores[1::2] * 20) / 20
    run: dict[str, dict[str, float]] = {}
    qrels: dict[str, dict[str, int]] = {}
    for q in range(n_queries):
        qid = f"q{q}"
        row = doc_index[q].tolist()
        run[qid] = dict(zip([names[i] for i in row], scores[q].tolist(), strict=True))
        n_judged = int(rng.integers(1, 11))
        retrieved = rng.choice(row, size=(n_judged + 1) // 2, replace=False).tolist()
        others = rng.integers(0, corpus_size, n_judged // 2).tolist()
        grades = rng.integers(0, 4, n_judged)
        grades[0] = rng.integers(1, 4)
        judged = {names[i]: int(g) for i, g in zip(retrieved + others, grades.tolist(), strict=False)}
        qrels[qid] = judged if any(g > 0 for g in judged.values()) else {**judged, names[retrieved[0]]: 1}
    return run, qrels


def cpu(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and its CPU seconds (after a garbage collection that is not timed)."""
    gc.collect()
    start = time.process_time()
    out = fn()
    return out, time.process_time() - start


def run_pytrec_eval(run: dict, qrels: dict) -> dict[str, dict[str, float]]:
    return pytrec_eval.RelevanceEvaluator(qrels, {spec for spec, _, _ in MEASURES.values()}).evaluate(run)


def run_ranx(run: dict, qrels: dict) -> dict[str, float]:
    import ranx  # imported where used: the TREC subprocesses stay free of it (peak memory)

    return ranx.evaluate(ranx.Qrels(qrels), ranx.Run(run), [name for _, _, name in MEASURES.values()])


def run_added(metric: Any, preds: list, refs: list, qids: list[str]) -> dict[str, Any]:
    for start in range(0, len(preds), BATCH):
        metric.add_batch(predictions=preds[start:start + BATCH], references=refs[start:start + BATCH])
    return metric.compute(query_ids=qids, measures=NAMES)


def bench_data(label: str, run: dict, qrels: dict, metric: Any, repeat: int) -> dict:
    """CPU seconds of every path on one run (min of ``repeat``); checks that all agree with pytrec_eval."""
    qids = list(qrels)
    preds = [[{"id": d, "score": s} for d, s in run[q].items()] for q in qids]
    refs = [[{"id": d, "grade": g} for d, g in qrels[q].items()] for q in qids]
    paths: dict[str, Callable[[], Any]] = {
        "core": lambda: score_run(run, qrels, measures=NAMES),
        "evaluate.load compute": lambda: metric.compute(predictions=preds, references=refs, query_ids=qids,
                                                        measures=NAMES),  # fmt: skip
        "add_batch + compute": lambda: run_added(metric, preds, refs, qids),
        "pytrec_eval": lambda: run_pytrec_eval(run, qrels),
    }
    times: dict[str, list[float]] = {name: [] for name in paths}
    outs: dict[str, Any] = {}
    for _ in range(repeat):  # interleaved, so that every path sees the same load on a shared machine
        for name, fn in paths.items():
            outs[name], seconds = cpu(fn)
            times[name].append(seconds)
    ranx_means, times["ranx"] = cpu(lambda: run_ranx(run, qrels))
    ours, ref = outs["core"], outs["pytrec_eval"]
    exact = all(np.array_equal(ours.values[:, i], [ref[q][key] for q in ours.query_ids])
                for i, (_, key, _) in enumerate(MEASURES.values()))  # fmt: skip
    same = all(outs[path][m] == ours.scores[m] for path in ("evaluate.load compute", "add_batch + compute")
               for m in NAMES)  # fmt: skip
    gap = max(abs(ours.scores[m] - float(ranx_means[r])) for m, (_, _, r) in MEASURES.items())
    print(f"  {label}: core = pytrec_eval on every query and measure, to the bit: {exact}; evaluate paths = core: "
          f"{same}; ranx's means within {gap:.1e}")  # fmt: skip
    if not exact or not same:
        raise SystemExit("convrag disagrees with pytrec_eval")
    return {name: min(t) if isinstance(t, list) else t for name, t in times.items()}


def print_table(n_queries: int, label: str, best: dict[str, float]) -> None:
    base = best["pytrec_eval"]
    for name, seconds in best.items():
        print(f"  {n_queries:>8,d} {label:<9s} {name:<24s} {seconds:8.3f} s   x{base / seconds:5.2f} pytrec_eval")


def trec_child(path: str, qrels_path: str, tool: str) -> None:
    """In a subprocess: read the run file and score it with ``tool``; print CPU seconds and peak RSS (MiB)."""
    with open(qrels_path) as handle:
        qrels = json.load(handle)
    start = time.process_time()
    if tool == "convrag":
        score_run(read_run(path), qrels, measures=NAMES)
    elif tool == "pytrec_eval":
        with open(path) as handle:
            run_pytrec_eval(pytrec_eval.parse_run(handle), qrels)
    seconds = time.process_time() - start
    with open("/proc/self/status") as status:  # VmHWM: this process's peak RSS since exec (ru_maxrss keeps
        peak = next(line for line in status if line.startswith("VmHWM:"))  # the parent's across fork + exec)
    print(seconds, int(peak.split()[1]) / 1024)


def bench_trec(lines: int, docs: int, seed: int, repeat: int) -> dict[str, tuple[float, float]]:
    """(min CPU seconds, min peak MiB) of each tool on a TREC run file of ``lines`` lines (tied data)."""
    n_queries = lines // docs
    run, qrels = make_data(n_queries, docs, seed, ties=True)
    results: dict[str, list[tuple[float, float]]] = {"convrag": [], "pytrec_eval": [], "(qrels only)": []}
    with tempfile.TemporaryDirectory() as folder:
        path, qrels_path = os.path.join(folder, "run.trec"), os.path.join(folder, "qrels.json")
        write_run(run, path, tag="bench")
        with open(qrels_path, "w") as handle:
            json.dump(qrels, handle)
        del run, qrels
        for _ in range(repeat):
            for tool in results:
                out = subprocess.run([sys.executable, __file__, "--trec-child", path, qrels_path, tool], check=True,
                                     capture_output=True, text=True).stdout.split()  # fmt: skip
                results[tool].append((float(out[0]), float(out[1])))
    return {tool: (min(s for s, _ in r), min(m for _, m in r)) for tool, r in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, nargs="*", default=[10_000, 30_000, 100_000],
                        help="sizes of the in-memory runs (none: the TREC-file path only)")
    parser.add_argument("--docs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each path per size (the minimum counts)")
    parser.add_argument("--trec-lines", type=int, default=1_000_000, help="lines of the TREC run file (0: skip)")
    parser.add_argument("--trec-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trec_child:
        trec_child(*args.trec_child)
        return
    print(f"python {platform.python_version()}, numpy {np.__version__}, pytrec_eval-terrier "
          f"{version('pytrec-eval-terrier')}, ranx {version('ranx')}, evaluate {version('evaluate')}, "
          f"{os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"CPU seconds (time.process_time), min of {args.repeat}; x = pytrec_eval's time / the path's time; "
          f"measures: {', '.join(NAMES)}")  # fmt: skip
    import evaluate

    import convrag.metrics

    metric = evaluate.load(convrag.metrics.path("retrieval"))
    small = make_data(50, args.docs, args.seed, ties=True)
    run_ranx(*small)  # numba compilation / cache load, not counted
    score_run(*small, measures=NAMES)
    lowest: dict[str, float] = {}
    for n_queries in args.queries:
        print(f"\n== {n_queries:,} queries x {args.docs} docs")
        for label, ties in (("no ties", False), ("ties", True)):
            best = bench_data(label, *make_data(n_queries, args.docs, args.seed, ties), metric, args.repeat)
            print_table(n_queries, label, best)
            if ties:
                for name in GOALS:
                    lowest[name] = min(lowest.get(name, np.inf), best["pytrec_eval"] / best[name])
    if lowest:
        print("\ngoals on tied data (lowest ratio over the sizes):")
        for name, goal in GOALS.items():
            print(f"  {name:<24s} >= x{goal:.1f} pytrec_eval: {'yes' if lowest[name] >= goal else 'no'} "
                  f"(x{lowest[name]:.2f})")  # fmt: skip
    if args.trec_lines:
        trec = bench_trec(args.trec_lines, args.docs, args.seed, args.repeat)
        (ours, ours_mib), (theirs, theirs_mib) = trec["convrag"], trec["pytrec_eval"]
        print(f"\nTREC run file of {args.trec_lines:,} lines, read + scored, each in a fresh subprocess "
              f"(peak = VmHWM of the whole subprocess; min of {args.repeat}):")  # fmt: skip
        for tool, (seconds, mib) in trec.items():
            print(f"  {tool:<14s} cpu {seconds:6.3f} s   peak {mib:7.1f} MiB")
        met = max(ours / theirs, ours_mib / theirs_mib) <= TREC_GOAL
        print(f"  convrag / pytrec_eval: cpu x{ours / theirs:.2f}, peak memory x{ours_mib / theirs_mib:.2f} "
              f"(goal: both <= x{TREC_GOAL}: {'yes' if met else 'no'})")


if __name__ == "__main__":
    main()
