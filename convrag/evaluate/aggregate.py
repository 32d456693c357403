"""Aggregation rules of the evaluation profiles, from per-turn scores to the JSON results.

* ``mean``: per system (retriever, or ``retriever|strategy`` when several strategies run) the mean over scored
  turns with a percentile bootstrap CI, the same per value of every group field, and paired randomisation /
  t-tests between every two systems (StratRAG Tables 2-3, MTR-Bench Tables 3, 5, 11).
* ``domain-macro``: mean within each subset (domain), then the mean of the domain means, with a stratified
  bootstrap; RECOR's analyses (:mod:`convrag.benchmarks.recor.aggregate`).
* ``mtrag-official``: MTRAGEval Subtask A's weighted "all" row, with our labelled macro / micro beside it
  (:mod:`convrag.benchmarks.mtrag.scoring`); measures other than nDCG@k / Recall@k are extra columns of our rows.
"""

from __future__ import annotations

import itertools
from typing import Any

from convrag.core.stats import bootstrap_ci, paired_test
from convrag.evaluation.engine import Scored


def system_name(scored: Scored, system: str, strategy: str) -> str:
    """``system`` for a benchmark with one strategy (and for external runs), else ``system|strategy``."""
    return scored.display_name(system, strategy)


def _group_key(value: str) -> tuple[int, float, str]:
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)


def aggregate_mean(scored: Scored, n_bootstrap: int = 1000, confidence: float = 0.95, seed: int = 0) -> dict[str, Any]:
    """The ``mean`` rule (see module docstring); JSON-ready."""
    profile, measures = scored.profile, scored.measures
    info = scored.turn_info()
    per_query: dict[str, dict[str, dict[str, float]]] = {}
    origin: dict[str, tuple[str, str]] = {}
    for system, by_strategy in scored.per_turn.items():
        for strategy, pq in by_strategy.items():
            name = system_name(scored, system, strategy)
            per_query[name], origin[name] = pq, (system, strategy)
    qids = sorted(next(iter(per_query.values()))) if per_query else []
    if not qids:
        from convrag.core.errors import DataError

        raise DataError("no turn of the split has a relevant document: nothing to score")

    def stats(names: list[str], pq: dict[str, dict[str, float]]) -> dict[str, Any]:
        return {m: bootstrap_ci([pq[q][m] for q in names], confidence, n_bootstrap, seed).to_dict() for m in measures}

    systems = {}
    for name, pq in per_query.items():
        by_field: dict[str, dict[str, Any]] = {}
        for group in profile.groups:
            values = {q: str(info[q].get(group)) for q in qids}
            by_field[group] = {v: {"n": sum(1 for q in qids if values[q] == v),
                                   **stats([q for q in qids if values[q] == v], pq)}
                               for v in sorted(set(values.values()), key=_group_key)}  # fmt: skip
        system, strategy = origin[name]
        systems[name] = {"retriever": system, "strategy": strategy, "config": scored.configs.get(system, {}),
                         "seconds": scored.seconds.get(system), "overall": stats(qids, pq),
                         "groups": by_field.get(profile.groups[0], {}) if profile.groups else {},
                         "groups_by": by_field}  # fmt: skip
    significance = [
        {"a": a, "b": b, "measure": m,
         **paired_test([per_query[a][q][m] for q in qids], [per_query[b][q][m] for q in qids], seed=seed).to_dict()}
        for a, b in itertools.combinations(per_query, 2) for m in measures
    ]  # fmt: skip
    return {
        "split": scored.data.split,
        "n_queries": len(scored.data.turns),
        "n_scored": len(qids),
        "excluded_queries": sorted(q for qs in scored.excluded.values() for q in qs),
        "measures": measures,
        "labels": {m: profile.label(m) for m in measures},
        "scale": profile.scale,
        "group_field": profile.groups[0] if profile.groups else None,
        "group_fields": list(profile.groups),
        "pool_restricted": scored.data.pools is not None,
        "qrels_missing_documents": sum(scored.data.missing_docs.values()),
        "confidence": confidence,
        "n_bootstrap": n_bootstrap,
        "seed": seed,
        "systems": systems,
        "significance": significance,
        "per_query": per_query,
    }


def aggregate_domain_macro(scored: Scored, n_bootstrap: int = 1000, confidence: float = 0.95,
                           seed: int = 0) -> dict[str, Any]:
    """The ``domain-macro`` rule: RECOR's analyses over retriever x strategy (external runs are not part of
    its tables)."""
    from convrag.benchmarks.recor.aggregate import analyse

    info = {q: {k: v for k, v in t.items() if k in ("domain", "conversation_id", "turn", "aspects")}
            for q, t in scored.turn_info().items()}  # fmt: skip
    per_turn = {r: by_s for r, by_s in scored.per_turn.items() if "type" not in scored.configs.get(r, {})}
    results = analyse(per_turn, info, scored.measures, n_bootstrap, seed)
    results.update({
        "split": scored.data.split, "top_k": scored.info["top_k"], "excluded_turns": scored.excluded,
        "qrels_missing_documents": scored.data.missing_docs, "turns": info, "per_turn": per_turn,
    })  # fmt: skip
    return results


def aggregate_mtrag(scored: Scored, n_bootstrap: int = 1000, confidence: float = 0.95, seed: int = 0) -> dict[str, Any]:
    """The ``mtrag-official`` rule: one entry per (system, strategy) with the official and our aggregates.
    ``official_measures`` (nDCG@k and Recall@k at every cut-off asked) have official rows; ``extra_measures`` (every
    other measure asked) are in our rows only; ``measures`` is both, in table order."""
    from convrag.benchmarks.mtrag.scoring import GROUP_FIELDS, judged, score_subtask_a, split_measures
    from convrag.benchmarks.mtrag.scoring import measures as mtrag_measures

    ks, extra = split_measures(scored.measures)
    official = mtrag_measures(ks)
    names = official + extra
    labels = {t.qid: {f: t.fields.get(f, "") for f in GROUP_FIELDS} for t in scored.data.turns}
    entries = []
    for system, by_strategy in scored.per_turn.items():
        for strategy in by_strategy:
            result = score_subtask_a(scored.runs[(system, strategy)], scored.data.qrels, labels, ks, extra)
            ci = {m: bootstrap_ci([s[m] for s in result.per_query.values()], confidence, n_bootstrap, seed).to_dict()
                  for m in names}  # fmt: skip
            domain_ci = {d: {m: bootstrap_ci([result.per_query[q][m] for q in judged(scored.data.qrels[d])],
                                             confidence, n_bootstrap, seed).to_dict() for m in names}
                         for d in scored.data.subsets}  # fmt: skip
            entries.append({"system": system, "view": strategy, **result.to_dict(), "micro_ci": ci,
                            "domain_ci": domain_ci})  # fmt: skip
    return {"domains": scored.data.subsets, "corpus_kind": scored.data.corpus_kind, "views": scored.strategies,
            "k_values": list(ks), "measures": names, "official_measures": official, "extra_measures": extra,
            "confidence": confidence, "n_bootstrap": n_bootstrap, "seed": seed, "top_k": scored.info["top_k"],
            "results": entries}  # fmt: skip


AGGREGATE = {"mean": aggregate_mean, "domain-macro": aggregate_domain_macro, "mtrag-official": aggregate_mtrag}


def aggregate(scored: Scored, n_bootstrap: int = 1000, confidence: float = 0.95, seed: int = 0) -> dict[str, Any]:
    """Apply the profile's aggregation rule; common fields (strategies, retrievers, search) are added."""
    results = AGGREGATE[scored.profile.aggregation](scored, n_bootstrap, confidence, seed)
    results.setdefault("retriever_configs", scored.configs)
    results.setdefault("seconds", scored.seconds)
    results.setdefault("strategy_layouts", scored.info["strategy_layouts"])
    results.setdefault("rewrite", scored.info["rewrite"])
    results["rewrites"] = scored.info["rewrites"]
    results["strategy_specs"] = scored.info["strategy_specs"]
    results["search"] = scored.info["search"]
    results["llm"] = scored.info.get("llm")
    results["coverage"] = scored.coverage
    results["renamed_systems"] = dict(scored.renamed)
    return results
