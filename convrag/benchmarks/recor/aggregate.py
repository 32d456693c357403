"""RECOR's aggregation (profile ``aggregation: domain-macro``): analyses over per-turn scores.

``convrag evaluate`` runs RECOR through the one evaluation path (:mod:`convrag.evaluation.engine`). As in the
paper (section 4.1.1), every domain is retrieved over its own corpus (the ``<domain>-corpus``
configs, whose ids need no domain prefix), every turn is scored with nDCG@10 (primary), MAP@10,
Recall@10 and MRR@10 (trec_eval semantics via ``convrag.metrics.retrieval``; MRR is cut at 10, as the
paper's Table 18 reports "all @10"), then averaged within each domain and macro-averaged over domains.
Turns without any relevant document are left out and listed; qrels that name a document absent from the
domain's corpus are kept (the document counts as relevant but cannot be retrieved) and counted.
See :mod:`convrag.benchmarks.recor.tables` for the tables' definitions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from convrag.benchmarks.recor import tables as rt
from convrag.benchmarks.recor.tables import render_tables
from convrag.core.errors import ConvragError

MEASURES = ("nDCG@10", "MAP@10", "Recall@10", "MRR@10")
__all__ = ["MEASURES", "analyse", "render_tables"]


def analyse(per_turn: Mapping[str, Mapping[str, Mapping[str, Mapping[str, float]]]],
            turns: Mapping[str, Mapping[str, Any]], measures: Sequence[str] = MEASURES,
            n_bootstrap: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Every aggregate and table from ``per_turn[retriever][strategy][qid][measure]`` and turn info."""
    retrievers = list(per_turn)
    strategies = list(next(iter(per_turn.values()))) if per_turn else []
    qids = sorted(next(iter(per_turn[retrievers[0]].values()))) if strategies else []
    for r in retrievers:
        for s in strategies:
            if sorted(per_turn[r].get(s, {})) != qids:
                raise ConvragError(f"{r} / {s} is not scored on the same turns as the others")
    n_turns: dict[str, int] = {}
    for q in qids:
        n_turns[str(turns[q]["domain"])] = n_turns.get(str(turns[q]["domain"]), 0) + 1
    systems = {r: {s: rt.system_summary(per_turn[r][s], turns, measures, n_bootstrap, seed) for s in strategies}
               for r in retrievers}  # fmt: skip
    average = {}
    for s in strategies:
        avg = rt.average_over_retrievers(per_turn, s, rt.PRIMARY)
        average[s] = rt.macro_bootstrap(rt._by_domain(avg, turns, rt.PRIMARY), n_bootstrap, seed).to_dict()
    failure = {}
    if "history+reasoning" in strategies:
        failure["paper"] = rt.failure_analysis(rt.best_scores(per_turn, ["history+reasoning"]), turns,
                                               "retrievers with History+Reasoning")  # fmt: skip
    failure["any"] = rt.failure_analysis(rt.best_scores(per_turn, strategies), turns,
                                         "every evaluated retriever x strategy")  # fmt: skip
    return {
        "measures": list(measures), "primary": rt.PRIMARY, "retrievers": retrievers, "strategies": strategies,
        "domains": sorted(n_turns), "n_turns": dict(sorted(n_turns.items())), "n_bootstrap": n_bootstrap,
        "seed": seed, "systems": systems, "average": average,
        "significance": rt.paired_rows(per_turn, turns, strategies, seed=seed),
        "turn_position": rt.turn_positions(per_turn, turns, strategies),
        "complexity": rt.complexity(per_turn, turns, strategies), "failure_analysis": failure,
    }  # fmt: skip


