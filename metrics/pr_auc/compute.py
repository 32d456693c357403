"""PR-AUC over rank cut-offs against a judged pool (SEARA, arXiv title "SPEAR"), in plain Python.

Notation. A query q has a ranked list c_1..c_n, cut at depth K (n <= K), and R'_q relevant items in its judged
pool (chunks with grade >= the relevance level; in the facts config, the pooled facts F'_q). For a cut-off k:

- found_q(k): relevant items (or facts) covered by the top min(k, n): the recall numerator;
- recall R_q(k) = found_q(k) / R'_q, pool-relative (R'_q counts pooled relevant items, not every relevant one);
- precision P_q(k) = hits_q(k) / size_q(k): by default relevant chunks in the top min(k, n) over min(k, n)
  (``precision_denominator="retrieved"``), or over k (``"k"``, trec_eval's P@k), or, for facts with spans,
  characters inside a fact over characters retrieved.

Queries with R'_q = 0 have no defined recall: they are excluded from every average and listed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .inputs import PrAucInputError, check_k, choice, judgments, qrels_mapping, ranking

INTEGRATIONS = ("step", "trapezoid", "interp_all", "interp11")
AVERAGES = ("micro", "macro", "points")
DEFAULT_RELEVANCE_LEVEL = 2
PRECISION_DENOMINATORS = ("retrieved", "k")
DUPLICATE_RULES = ("error", "keep_first")
UNJUDGED_RULES = ("error", "nonrelevant")
RECALL_LEVELS = tuple(i / 10 for i in range(11))
_SLACK = 1e-12

Point = tuple[float, "float | None"]


# ------------------------------------------------------------------------------------------------ integration
def area_step(points: Sequence[Point]) -> float:
    """Sum over k of (R(k) - R(k-1)) * P(k), R(0) = 0: no interpolation. On one query's list this is average
    precision with R' in the denominator (trec_eval's AP on the top-K list)."""
    total, last = 0.0, 0.0
    for recall, precision in points:
        if recall > last and precision is not None:
            total += (recall - last) * precision
            last = recall
    return total


def area_trapezoid(points: Sequence[Point]) -> float:
    """Sum over k of (R(k) - R(k-1)) * (P(k) + P(k-1)) / 2, anchored at (R, P) = (0, 1) as sklearn's
    ``precision_recall_curve`` is; a straight line in PR space, so it can overstate the area."""
    total, last_r, last_p = 0.0, 0.0, 1.0
    for recall, precision in points:
        if precision is None:
            continue
        total += (recall - last_r) * (precision + last_p) / 2
        last_r, last_p = recall, precision
    return total


def _defined(points: Sequence[Point]) -> list[tuple[float, float]]:
    return [(r, p) for r, p in points if p is not None]


def area_interp_all(points: Sequence[Point]) -> float:
    """Sum over k of (R(k) - R(k-1)) * max over j >= k of P(j) (all-point interpolation); never below step."""
    defined = _defined(points)
    envelope, best = [0.0] * len(defined), 0.0
    for i in range(len(defined) - 1, -1, -1):
        best = max(best, defined[i][1])
        envelope[i] = best
    total, last = 0.0, 0.0
    for (recall, _), high in zip(defined, envelope, strict=True):
        if recall > last:
            total += (recall - last) * high
            last = recall
    return total


def area_interp11(points: Sequence[Point]) -> float:
    """Mean over t in {0, 0.1, ..., 1} of the highest P(k) among cut-offs with R(k) >= t (0 if none): TREC's
    11-point interpolated average. Recall within 1e-12 below a level counts as reaching it (float noise of means)."""
    defined = _defined(points)
    levels = [max((p for r, p in defined if r >= t - _SLACK), default=0.0) for t in RECALL_LEVELS]
    return math.fsum(levels) / len(levels)


INTEGRATORS = {"step": area_step, "trapezoid": area_trapezoid, "interp_all": area_interp_all,
               "interp11": area_interp11}  # fmt: skip


# -------------------------------------------------------------------------------------------- per-query counts
@dataclass(frozen=True)
class QueryCounts:
    """Cumulative counts of one query at cut-offs 1..n (n = items scored after the cut at K).

    ``relevant`` is R'_q; ``found[k-1]`` the recall numerator; ``hits[k-1] / size[k-1]`` the precision."""

    query_id: str
    relevant: int
    found: tuple[int, ...]
    hits: tuple[float, ...]
    size: tuple[float, ...]

    @property
    def retrieved(self) -> int:
        return len(self.found)

    def at(self, k: int, per_k: bool) -> tuple[int, float, float]:
        """(found, hits, size) at cut-off k >= 1; past n nothing changes, except that size is k when ``per_k``."""
        n = len(self.found)
        if k <= n:
            return self.found[k - 1], self.hits[k - 1], self.size[k - 1]
        if n == 0:
            return 0, 0.0, float(k) if per_k else 0.0
        return self.found[-1], self.hits[-1], float(k) if per_k else self.size[-1]

    def points(self) -> list[Point]:
        """The query's own curve: (R(k), P(k)) for k = 1..n; it stops at n (no extrapolation)."""
        return [(f / self.relevant, h / s if s else None)
                for f, h, s in zip(self.found, self.hits, self.size, strict=True)]  # fmt: skip


def chunk_counts(query_id: str, ranking: Sequence[str], judgments: Mapping[str, int] | frozenset[str],
                 relevance_level: int = DEFAULT_RELEVANCE_LEVEL, unjudged: str = "error") -> tuple[QueryCounts, int]:
    """Counts of a chunk ranking: relevant = grade >= ``relevance_level`` (graded judgments) or listed (a set of
    relevant ids). Returns the counts and how many ranked chunks had no judgment (graded form only)."""
    graded = isinstance(judgments, Mapping)
    relevant = {c for c, g in judgments.items() if g >= relevance_level} if graded else judgments
    found: list[int] = []
    tp = missing = 0
    for rank, chunk in enumerate(ranking, start=1):
        if graded and chunk not in judgments:
            if unjudged == "error":
                raise PrAucInputError(f"query {query_id!r}: {chunk!r} (rank {rank}) has no judgment, but the pool must "
                                      "hold every scored chunk; judge it, or pass unjudged='nonrelevant'")  # fmt: skip
            missing += 1
        tp += chunk in relevant
        found.append(tp)
    sizes = tuple(float(i) for i in range(1, len(found) + 1))
    return QueryCounts(query_id, len(relevant), tuple(found), tuple(map(float, found)), sizes), missing


# ----------------------------------------------------------------------------------------------- aggregation
def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def aggregate(queries: Sequence[QueryCounts], k: int, *, precision_denominator: str = "retrieved",
              include_unanswerable_in_precision: bool = False, integration: str = "step",
              return_query_curves: bool = False) -> dict[str, Any]:
    """Micro, macro and points PR-AUC of one configuration over ``queries`` at cut-offs 1..k.

    micro: P(k) = sum_q hits_q(k) / sum_q size_q(k), R(k) = sum_q found_q(k) / sum_q R'_q (one pooled curve);
    macro: the mean over queries of each query's own area (``map_at_k`` is its step value: MAP@K against R');
    points: the curve of (mean_q R_q(k), mean_q P_q(k)), P_q(k) = 0 where the query retrieved nothing.
    Queries with R'_q = 0 are excluded (their retrieved items join the micro precision only on request)."""
    choice("integration", integration, INTEGRATIONS)
    per_k = choice("precision_denominator", precision_denominator, PRECISION_DENOMINATORS) == "k"
    scored = [q for q in queries if q.relevant > 0]
    excluded = [q for q in queries if q.relevant == 0]
    junk = excluded if include_unanswerable_in_precision else []
    total = sum(q.relevant for q in scored)
    cutoffs = list(range(1, k + 1))
    micro: list[Point] = []
    points: list[Point] = []
    for cut in cutoffs:
        rows = [q.at(cut, per_k) for q in scored]
        extra = [q.at(cut, per_k) for q in junk]
        hits = math.fsum(h for _, h, _ in rows + extra)
        size = math.fsum(s for _, _, s in rows + extra)
        micro.append((sum(f for f, _, _ in rows) / total if total else 0.0, hits / size if size else None))
        if scored:
            points.append((math.fsum(f / q.relevant for q, (f, _, _) in zip(scored, rows, strict=True)) / len(scored),
                           math.fsum(h / s if s else 0.0 for _, h, s in rows) / len(scored)))  # fmt: skip
    per_query: list[dict[str, Any]] = []
    macro: dict[str, list[float]] = {name: [] for name in INTEGRATIONS}
    for q in scored:
        curve = q.points()
        areas = {name: INTEGRATORS[name](curve) for name in INTEGRATIONS}
        for name, value in areas.items():
            macro[name].append(value)
        found, hits, size = q.at(k, per_k) if k else (0, 0.0, 0.0)
        row = {"query_id": q.query_id, "ap": areas["step"], "pr_auc": areas[integration], "r_prime": q.relevant,
               "n_retrieved": q.retrieved, "recall_at_k": found / q.relevant,
               "precision_at_k": hits / size if size else None}  # fmt: skip
        if return_query_curves:
            row["recall"] = [r for r, _ in curve]
            row["precision"] = [p for _, p in curve]
        per_query.append(row)
    alternatives: dict[str, dict[str, float | None]] = {
        "micro": {name: INTEGRATORS[name](micro) if scored else None for name in INTEGRATIONS},
        "macro": {name: _mean(macro[name]) for name in INTEGRATIONS},
        "points": {name: INTEGRATORS[name](points) if scored else None for name in INTEGRATIONS},
    }
    last = micro[-1] if micro and scored else (None, None)
    return {
        "pr_auc": alternatives["micro"][integration],
        "pr_auc_macro": alternatives["macro"][integration],
        "map_at_k": alternatives["macro"]["step"],
        "recall_at_k": last[0],
        "precision_at_k": last[1],
        "alternatives": alternatives,
        "curve": {"k": cutoffs, "precision_micro": [p for _, p in micro], "recall_micro": [r for r, _ in micro],
                  "precision_points": [p for _, p in points], "recall_points": [r for r, _ in points]},
        "per_query": per_query,
        "n_scored": len(scored),
        "n_excluded": len(excluded),
        "excluded_query_ids": [q.query_id for q in excluded],
    }


# ----------------------------------------------------------------------------------------------- entry points
def score_chunks(run: Mapping[str, Sequence[str]], qrels: Any, *, k: int | None = None,
                 relevance_level: int = DEFAULT_RELEVANCE_LEVEL, precision_denominator: str = "retrieved",
                 integration: str = "step", include_unanswerable_in_precision: bool = False,
                 duplicates: str = "error", unjudged: str = "error",
                 scores: Mapping[str, Sequence[float]] | None = None, pool_signature: str | None = None,
                 return_query_curves: bool = False) -> dict[str, Any]:
    """PR-AUC of one configuration's ``run`` ({query: ranked chunk ids}) against pooled ``qrels``.

    Every query of the run must be judged; a judged query missing from the run scores as an empty ranking.
    Relevant means grade >= ``relevance_level`` (default 2 on the 0-3 scale); a list of ids is read as the
    relevant ones. See :func:`aggregate` for the outputs."""
    if not isinstance(run, Mapping):
        raise PrAucInputError(f"run must be a dict {{query id: ranked ids}}, got {type(run).__name__}")
    choice("relevance_level", relevance_level, (1, 2, 3))
    choice("duplicates", duplicates, DUPLICATE_RULES)
    choice("unjudged", unjudged, UNJUDGED_RULES)
    if pool_signature is not None and not isinstance(pool_signature, str):
        raise PrAucInputError(f"pool_signature must be a string, got {pool_signature!r}")
    pool = qrels_mapping(qrels)
    if scores is not None and not isinstance(scores, Mapping):
        raise PrAucInputError("scores must be a dict {query id: [score per ranked id]}")
    lists: dict[str, list[str]] = {}
    for qid, items in run.items():
        if not isinstance(qid, str):
            raise PrAucInputError(f"query ids must be strings, got {qid!r}")
        if qid not in pool:
            raise PrAucInputError(f"query {qid!r} is ranked but has no judgments: every ranked query needs its pool")
        lists[qid] = ranking(qid, items, None if scores is None else scores.get(qid), duplicates)
    missing = [qid for qid in pool if qid not in lists]
    depth = check_k(k, list(lists.values()))
    counts: list[QueryCounts] = []
    unjudged_total = 0
    for qid in [*lists, *missing]:
        judged = judgments(qid, pool[qid])
        query, n_unjudged = chunk_counts(qid, lists.get(qid, [])[:depth], judged, relevance_level, unjudged)
        counts.append(query)
        unjudged_total += n_unjudged
    result = aggregate(counts, depth, precision_denominator=precision_denominator, integration=integration,
                       include_unanswerable_in_precision=bool(include_unanswerable_in_precision),
                       return_query_curves=bool(return_query_curves))  # fmt: skip
    result.update(missing_query_ids=missing, n_unjudged=unjudged_total, pool_signature=pool_signature)
    result["settings"] = dict(config="chunks", k=depth, relevance_level=relevance_level,
                                  precision_denominator=precision_denominator, integration=integration,
                                  include_unanswerable_in_precision=bool(include_unanswerable_in_precision),
                                  duplicates=duplicates, unjudged=unjudged, pool_signature=pool_signature)  # fmt: skip
    return result
