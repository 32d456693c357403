"""Run retrievers over an exported benchmark folder and score them.

``load_views`` reads the ``corpus`` / ``queries`` / ``qrels`` configs of a folder written by
``convrag build``; ``evaluate_systems`` runs baseline retrievers (and scores external runs), computes
per-query scores with the retrieval metric, then means with bootstrap CIs overall and per group, and paired
significance between every two systems. The benchmark's ``Profile`` says which measures the paper reports,
which query column groups queries, and whether queries rank only their own pool.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets

from convrag.errors import DataError
from convrag.evaluation.stats import bootstrap_ci, paired_test
from convrag.metrics.retrieval.compute import score_run
from convrag.retrievers import get_retriever

SPLIT_PREFERENCE = ("test", "validation", "dev", "train")


@dataclass(frozen=True)
class Profile:
    """How a benchmark is scored: measures (metric names), display labels, grouping and pool columns."""

    measures: tuple[str, ...]
    labels: dict[str, str] = field(default_factory=dict)
    group_field: str | None = None
    pool_field: str | None = None

    def label(self, measure: str) -> str:
        return self.labels.get(measure, measure)


PROFILES: dict[str, Profile] = {
    # StratRAG Tables 2 and 3: R@1, R@2, R@5, MRR (no cut-off), nDCG@5; pool-restricted; by question type.
    "stratrag": Profile(
        measures=("Recall@1", "Recall@2", "Recall@5", "MRR", "nDCG@5"),
        labels={"Recall@1": "R@1", "Recall@2": "R@2", "Recall@5": "R@5", "nDCG@5": "NDCG@5"},
        group_field="question_type",
        pool_field="pool",
    ),
}
DEFAULT_PROFILE = Profile(measures=("nDCG@10", "Recall@10", "MRR@10", "MAP@10"))


@dataclass
class RetrievalData:
    """One split of a benchmark's retrieval views."""

    split: str
    corpus: list[dict[str, Any]]
    queries: list[dict[str, Any]]
    qrels: dict[str, dict[str, int]]

    @property
    def query_text(self) -> dict[str, str]:
        return {q["_id"]: q["text"] for q in self.queries}


def _load(folder: str, config: str, split: str | None) -> datasets.Dataset:
    dd = datasets.load_dataset(folder, config)
    if split is None:
        split = next((s for s in SPLIT_PREFERENCE if s in dd), None) or next(iter(dd))
    if split not in dd:
        raise DataError(f"config {config!r} has no split {split!r} (has {sorted(dd)})", folder)
    return dd[split]


def load_views(folder: str | Path, split: str | None = None) -> RetrievalData:
    """Read and cross-check ``corpus``, ``queries`` and ``qrels`` of an exported folder."""
    folder = str(folder)
    queries_ds = _load(folder, "queries", split)
    split = str(queries_ds.split)
    corpus = _load(folder, "corpus", split).to_list()
    queries = queries_ds.to_list()
    qrels_rows = _load(folder, "qrels", split).to_list()
    for name, rows in (("corpus", corpus), ("queries", queries)):
        dupes = [k for k, n in Counter(r["_id"] for r in rows).items() if n > 1]
        if dupes:
            raise DataError(f"duplicate {name} ids {dupes[:5]}", f"{folder}/{name}")
    doc_ids = {d["_id"] for d in corpus}
    query_ids = {q["_id"] for q in queries}
    qrels: dict[str, dict[str, int]] = {}
    for line, row in enumerate(qrels_rows, start=1):
        qid, did = row["query-id"], row["corpus-id"]
        if qid not in query_ids or did not in doc_ids:
            what = f"query {qid!r}" if qid not in query_ids else f"document {did!r}"
            raise DataError(f"qrels row names unknown {what}", f"{folder}/qrels", line)
        if did in qrels.setdefault(qid, {}):
            raise DataError(f"duplicate qrels pair ({qid}, {did})", f"{folder}/qrels", line)
        qrels[qid][did] = int(row["score"])
    return RetrievalData(split=split, corpus=corpus, queries=queries, qrels=qrels)


def check_run(run: dict[str, dict[str, float]], data: RetrievalData, source: str) -> None:
    """Raise if a run names documents or queries the benchmark does not have."""
    doc_ids = {d["_id"] for d in data.corpus}
    query_ids = {q["_id"] for q in data.queries}
    for qid, ranking in run.items():
        if qid not in query_ids:
            raise DataError(f"run has unknown query id {qid!r}", source)
        unknown = [d for d in ranking if d not in doc_ids]
        if unknown:
            raise DataError(f"run for query {qid!r} has unknown doc ids {unknown[:5]}", source)


def run_retriever(spec: str, data: RetrievalData, profile: Profile, progress: bool = True, **options: Any):
    """Index the corpus with retriever ``spec`` and rank every query (its pool only, if the profile says)."""
    retriever = get_retriever(spec, **options)
    retriever.index(data.corpus, show_progress=progress)
    pools = None
    if profile.pool_field:
        pools = {q["_id"]: list(q[profile.pool_field]) for q in data.queries}
    run = retriever.search(data.query_text, top_k=None if pools else 100, pools=pools, show_progress=progress)
    return retriever, run


def evaluate_systems(
    data: RetrievalData,
    profile: Profile,
    retrievers: list[str],
    external_runs: dict[str, dict[str, dict[str, float]]] | None = None,
    retriever_options: dict[str, dict[str, Any]] | None = None,
    n_bootstrap: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    progress: bool = True,
) -> tuple[dict[str, Any], dict[str, dict[str, dict[str, float]]]]:
    """Score baseline retrievers and external runs on ``data``.

    Returns a JSON-ready results dict and the runs themselves ({system: {query: {doc: score}}}).
    """
    runs: dict[str, dict[str, dict[str, float]]] = {}
    configs: dict[str, dict[str, Any]] = {}
    seconds: dict[str, float] = {}
    for spec in retrievers:
        start = time.perf_counter()
        retriever, run = run_retriever(spec, data, profile, progress, **(retriever_options or {}).get(spec, {}))
        seconds[spec] = time.perf_counter() - start
        runs[spec] = run
        configs[spec] = retriever.describe()
    for name, run in (external_runs or {}).items():
        check_run(run, data, name)
        runs[name] = run
        configs[name] = {"type": "external run"}
    k_values = sorted({int(m.split("@")[1]) for m in profile.measures if "@" in m})
    groups = {q["_id"]: str(q[profile.group_field]) for q in data.queries} if profile.group_field else None
    per_query: dict[str, dict[str, dict[str, float]]] = {}
    excluded: list[str] = []
    for name, run in runs.items():
        result = score_run(run, data.qrels, k_values=k_values, measures=list(profile.measures))
        per_query[name] = result.per_query
        excluded = sorted(result.excluded)
    scored = sorted(next(iter(per_query.values()))) if per_query else []
    systems = {}
    for name in runs:
        pq = per_query[name]
        overall = {m: bootstrap_ci([pq[q][m] for q in scored], confidence, n_bootstrap, seed).to_dict()
                   for m in profile.measures}  # fmt: skip
        by_group: dict[str, Any] = {}
        if groups:
            for g in sorted({groups[q] for q in scored}):
                members = [q for q in scored if groups[q] == g]
                by_group[g] = {"n": len(members), **{
                    m: bootstrap_ci([pq[q][m] for q in members], confidence, n_bootstrap, seed).to_dict()
                    for m in profile.measures}}  # fmt: skip
        systems[name] = {"config": configs[name], "seconds": seconds.get(name), "overall": overall,
                         "groups": by_group}  # fmt: skip
    significance = [
        {"a": a, "b": b, "measure": m,
         **paired_test([per_query[a][q][m] for q in scored], [per_query[b][q][m] for q in scored],
                       seed=seed).to_dict()}
        for a, b in itertools.combinations(runs, 2) for m in profile.measures
    ]  # fmt: skip
    results = {
        "split": data.split,
        "n_queries": len(data.queries),
        "n_scored": len(scored),
        "excluded_queries": excluded,
        "measures": list(profile.measures),
        "labels": {m: profile.label(m) for m in profile.measures},
        "group_field": profile.group_field,
        "pool_restricted": bool(profile.pool_field),
        "confidence": confidence,
        "n_bootstrap": n_bootstrap,
        "seed": seed,
        "systems": systems,
        "significance": significance,
        "per_query": per_query,
    }
    return results, runs
