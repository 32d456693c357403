"""Time convrag's retrieval metric against pytrec_eval and ranx on large synthetic runs, side by side.

    python benchmarks/bench_retrieval_metric.py [--queries 10000 30000 100000] [--docs 100] [--seed 0]

For each size, all three score the same Python dicts, already built in this process (building them is not
timed): ``{query: {doc: score}}`` with random scores that are distinct even as 32-bit floats (ranx compares
64-bit scores and breaks ties differently from trec_eval, which compares 32-bit floats, then doc ids; so the run
has no ties in either sense) and graded qrels (grades 0-3, 1-10 judged documents per query, about half of them
retrieved, at least one relevant per query, so no library drops or excludes a query).

What is timed, for the same 5 measures: everything from the dicts to the per-query scores, i.e. each library's
reading of the dicts and its evaluation call: convrag ``score_run(run, qrels)``; pytrec_eval
``RelevanceEvaluator(qrels, measures).evaluate(run)``; ranx ``evaluate(Qrels(qrels), Run(run), measures)``.
The evaluate() wrapper of metrics/retrieval is not timed (it converts lists of objects first).
convrag and pytrec_eval alternate, ``--repeat`` times each, and the fastest wall-clock time of each counts (the
machine may be shared); their CPU times are printed too. ranx compiles its numba functions on first use: a small
warm-up runs first and is timed separately; ranx then runs once per size. The script checks that convrag equals
pytrec_eval on every query and measure to the bit and ranx's means to 1e-9, and says whether convrag is at least
2x faster than pytrec_eval at every size. It is a script, not a test; it needs the ``test`` extra
(pytrec-eval-terrier, ranx).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import time
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import numpy as np
import pytrec_eval
import ranx

from convrag.metrics.retrieval.compute import measure_names, score_run

# our name -> (pytrec_eval measure, its output key, ranx name)
MEASURES = {
    "nDCG@10": ("ndcg_cut.10", "ndcg_cut_10", "ndcg@10"),
    "Recall@10": ("recall.10", "recall_10", "recall@10"),
    "P@10": ("P.10", "P_10", "precision@10"),
    "MAP@10": ("map_cut.10", "map_cut_10", "map@10"),
    "MRR": ("recip_rank", "recip_rank", "mrr"),
}


def make_data(n_queries: int, n_docs: int, seed: int) -> tuple[dict, dict]:
    """A run of ``n_docs`` distinct docs per query and graded qrels, as plain Python dicts."""
    rng = np.random.default_rng(seed)
    corpus_size = 1_000_000
    names = [f"doc{i}" for i in range(corpus_size)]  # shared string objects keep memory down
    starts = rng.integers(0, corpus_size, n_queries)
    doc_index = (starts[:, None] + np.arange(n_docs) * 7_919) % corpus_size  # distinct within a query
    # distinct float32 values per query: a random permutation of a coarse grid plus a little noise
    grid = np.argsort(rng.random((n_queries, n_docs)), axis=1) / n_docs
    scores = grid + rng.random((n_queries, n_docs)) * (0.5 / n_docs)
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


TARGET = 2.0  # convrag must be at least this many times faster than pytrec_eval


def clock(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """``fn()``, its wall-clock and its CPU seconds (after a garbage collection that is not timed)."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def run_pytrec_eval(run: dict, qrels: dict) -> dict[str, dict[str, float]]:
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {spec for spec, _, _ in MEASURES.values()})
    return evaluator.evaluate(run)


def run_ranx(run: dict, qrels: dict) -> dict[str, float]:
    return ranx.evaluate(ranx.Qrels(qrels), ranx.Run(run), [name for _, _, name in MEASURES.values()])


def bench_size(n_queries: int, args: argparse.Namespace) -> dict[str, float]:
    """Time the three libraries on one size; print the times and the agreement; return the best times."""
    print(f"\n== {n_queries:,} queries x {args.docs} docs (seed {args.seed})")
    (run, qrels), t_build, _ = clock(lambda: make_data(n_queries, args.docs, args.seed))
    print(f"  building the Python dicts (not timed below)            {t_build:8.2f} s")
    names = list(MEASURES)
    walls: dict[str, list[float]] = {"convrag": [], "pytrec_eval": []}
    cpus: dict[str, list[float]] = {"convrag": [], "pytrec_eval": []}
    for _ in range(args.repeat):  # alternate, so that both see the same load on a shared machine
        ours, wall, cpu = clock(lambda: score_run(run, qrels, measures=names))
        walls["convrag"].append(wall)
        cpus["convrag"].append(cpu)
        ref, wall, cpu = clock(lambda: run_pytrec_eval(run, qrels))
        walls["pytrec_eval"].append(wall)
        cpus["pytrec_eval"].append(cpu)
    ranx_means, t_ranx, cpu_ranx = clock(lambda: run_ranx(run, qrels))
    for label, key in (("convrag score_run", "convrag"), ("pytrec_eval RelevanceEvaluator + evaluate", "pytrec_eval")):
        print(f"  {label:<42s} wall {min(walls[key]):6.3f} s  cpu {min(cpus[key]):6.3f} s  "
              f"(wall of each run: {', '.join(f'{t:.3f}' for t in walls[key])})")  # fmt: skip
    print(f"  {'ranx Qrels + Run + evaluate (1 run)':<42s} wall {t_ranx:6.3f} s  cpu {cpu_ranx:6.3f} s")
    all_names = measure_names((1, 3, 5, 10, 100), uncut=("MRR", "nDCG", "MAP"))
    _, t_all, _ = clock(lambda: score_run(run, qrels, measures=all_names))
    ranked = {q: [d for d, _ in sorted(r.items(), key=lambda item: -item[1])] for q, r in run.items()}
    _, t_lists, _ = clock(lambda: score_run(ranked, qrels, measures=names))
    print(f"  convrag, all {len(all_names)} measures: {t_all:.3f} s; ranked-list input: {t_lists:.3f} s (wall, 1 run)")

    exact = True
    worst = 0.0
    for name, (_, key, ranx_name) in MEASURES.items():
        theirs = np.array([ref[q][key] for q in ours.query_ids])
        exact &= bool(np.array_equal(ours.values[:, ours.measures.index(name)], theirs))
        worst = max(worst, abs(ours.scores[name] - float(np.mean(theirs))),
                    abs(ours.scores[name] - float(ranx_means[ranx_name])))  # fmt: skip
    print(f"  convrag equals pytrec_eval on every query and measure, to the bit: {exact} ({ours.num_queries:,} "
          f"queries scored)\n  means of all three agree to 1e-9: {worst <= 1e-9} (largest gap {worst:.1e})")
    if not exact or worst > 1e-9:
        raise SystemExit("convrag disagrees with pytrec_eval or ranx")
    return {"convrag": min(walls["convrag"]), "pytrec_eval": min(walls["pytrec_eval"]), "ranx": t_ranx,
            "convrag_cpu": min(cpus["convrag"]), "pytrec_eval_cpu": min(cpus["pytrec_eval"])}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    parser.add_argument("--docs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of convrag and of pytrec_eval per size")
    args = parser.parse_args()
    print(f"python {platform.python_version()}, numpy {np.__version__}, pytrec_eval-terrier "
          f"{version('pytrec-eval-terrier')}, ranx {version('ranx')}, numba {version('numba')}, "
          f"{os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"timed: {len(MEASURES)} measures ({', '.join(MEASURES)}), from the dicts in memory to the scores")
    small = make_data(50, args.docs, args.seed)
    _, t_compile, _ = clock(lambda: run_ranx(*small))
    print(f"warm-up, not counted: ranx numba compilation / cache load on 50 queries {t_compile:.2f} s")
    score_run(*small, measures=list(MEASURES))
    run_pytrec_eval(*small)

    results = {n: bench_size(n, args) for n in args.queries}
    print(f"\nsummary (wall-clock seconds, best of {args.repeat} for convrag and pytrec_eval; ratio = their time / "
          "convrag's time):")  # fmt: skip
    print(f"  {'queries':>9s} {'convrag':>8s} {'pytrec_eval':>11s} {'ranx':>8s} {'pytrec_eval/convrag':>20s} "
          f"{'ranx/convrag':>13s} {'cpu ratio':>10s}")  # fmt: skip
    for n, t in results.items():
        print(f"  {n:>9,d} {t['convrag']:8.3f} {t['pytrec_eval']:11.3f} {t['ranx']:8.3f} "
              f"{t['pytrec_eval'] / t['convrag']:19.2f}x {t['ranx'] / t['convrag']:12.2f}x "
              f"{t['pytrec_eval_cpu'] / t['convrag_cpu']:9.2f}x")  # fmt: skip
    low = min(t["pytrec_eval"] / t["convrag"] for t in results.values())
    print(f"target: convrag >= {TARGET:.0f}x pytrec_eval's speed at every size: {'yes' if low >= TARGET else 'no'} "
          f"(lowest ratio {low:.2f}x)")


if __name__ == "__main__":
    main()
