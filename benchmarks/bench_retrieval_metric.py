"""Time convrag's retrieval metric against pytrec_eval and ranx on one large synthetic run.

    python benchmarks/bench_retrieval_metric.py [--queries 100000] [--docs 100] [--seed 0]

All three score the same Python dicts in this process: ``{query: {doc: score}}`` with random scores that are
distinct even as 32-bit floats (ranx compares 64-bit scores and breaks ties differently from trec_eval, which
compares 32-bit floats, then doc ids; so the run has no ties in either sense) and graded qrels (grades 0-3, 1-10
judged documents per query, about half of them retrieved, at least one relevant per query, so no library
drops or excludes a query). Timings include each library's conversion of the dicts. ranx compiles its numba
functions on first use: a small warm-up call runs first and its time is printed separately. The script then
checks that the three agree on every timed measure (means to 1e-9, and ours vs pytrec_eval per query).
This is a script, not a test; it needs the ``test`` extra (pytrec-eval-terrier, ranx).
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


def timed(label: str, fn: Callable[[], Any], repeat: int = 1) -> tuple[Any, float]:
    """Run ``fn`` ``repeat`` times; print and return the fastest time (the machine may be shared)."""
    times = []
    for _ in range(repeat):
        out = None
        gc.collect()
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    runs = f"best of {repeat}: " + ", ".join(f"{t:.2f}" for t in times) if repeat > 1 else ""
    print(f"  {label:<52s} {min(times):8.2f} s  {runs}", flush=True)
    return out, min(times)


def run_pytrec_eval(run: dict, qrels: dict) -> dict[str, dict[str, float]]:
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {spec for spec, _, _ in MEASURES.values()})
    return evaluator.evaluate(run)


def run_ranx(run: dict, qrels: dict) -> dict[str, float]:
    return ranx.evaluate(ranx.Qrels(qrels), ranx.Run(run), [name for _, _, name in MEASURES.values()])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=100_000)
    parser.add_argument("--docs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"python {platform.python_version()}, numpy {np.__version__}, pytrec_eval-terrier "
          f"{version('pytrec-eval-terrier')}, ranx {version('ranx')}, numba {version('numba')}, "
          f"{os.cpu_count()} CPU cores")  # fmt: skip
    print(f"data: {args.queries:,} queries x {args.docs} docs (seed {args.seed})")
    (run, qrels), _ = timed("building the Python dicts (not part of any timing)", lambda: make_data(
        args.queries, args.docs, args.seed))  # fmt: skip
    ours_names = list(MEASURES)

    print("warm-up (not counted):")
    small = dict(list(run.items())[:50]), dict(list(qrels.items())[:50])
    timed("ranx numba compilation / cache load on 50 queries", lambda: run_ranx(*small))
    timed("pytrec_eval on 50 queries", lambda: run_pytrec_eval(*small))
    timed("convrag on 50 queries", lambda: score_run(*small, measures=ours_names))

    print(f"timed ({len(MEASURES)} measures: {', '.join(ours_names)}):")
    ours, t_ours = timed("convrag score_run", lambda: score_run(run, qrels, measures=ours_names), repeat=3)
    ref, t_pytrec = timed("pytrec_eval RelevanceEvaluator + evaluate", lambda: run_pytrec_eval(run, qrels), repeat=2)
    ranx_means, t_ranx = timed("ranx Qrels + Run + evaluate (compiled, 1 run)", lambda: run_ranx(run, qrels))
    all_names = measure_names((1, 3, 5, 10, 100), uncut=("MRR", "nDCG", "MAP"))
    _, t_all = timed(f"convrag score_run, all {len(all_names)} measures", lambda: score_run(
        run, qrels, measures=all_names), repeat=2)  # fmt: skip
    ranked = {q: [d for d, _ in sorted(r.items(), key=lambda item: -item[1])] for q, r in run.items()}
    _, t_lists = timed("convrag score_run, ranked-list input", lambda: score_run(
        ranked, qrels, measures=ours_names), repeat=2)  # fmt: skip

    print("ratios (the other library's time / convrag's time, same 5 measures, dict input):")
    print(f"  pytrec_eval / convrag = {t_pytrec / t_ours:6.2f}x")
    print(f"  ranx / convrag        = {t_ranx / t_ours:6.2f}x")
    print(f"  convrag with all {len(all_names)} measures / 5 measures = {t_all / t_ours:6.2f}x; "
          f"ranked lists / dicts = {t_lists / t_ours:6.2f}x")

    print("agreement (means over all queries):")
    worst = 0.0
    for name, (_, key, ranx_name) in MEASURES.items():
        mean_ref = float(np.mean([ref[q][key] for q in ours.query_ids]))
        per_query_gap = float(np.max(np.abs(ours.values[:, ours.measures.index(name)]
                                            - np.array([ref[q][key] for q in ours.query_ids]))))  # fmt: skip
        gaps = (abs(ours.scores[name] - mean_ref), abs(ours.scores[name] - float(ranx_means[ranx_name])))
        worst = max(worst, per_query_gap, *gaps)
        print(f"  {name:<10s} convrag {ours.scores[name]:.12f}  pytrec_eval {mean_ref:.12f}  "
              f"ranx {float(ranx_means[ranx_name]):.12f}  max per-query gap vs pytrec_eval {per_query_gap:.1e}")
    print(f"all three agree to 1e-9: {worst <= 1e-9} (largest difference {worst:.1e}); "
          f"scored {ours.num_queries:,} queries, excluded {len(ours.excluded)}")
    if worst > 1e-9:
        raise SystemExit("disagreement above 1e-9")


if __name__ == "__main__":
    main()
