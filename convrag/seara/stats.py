"""Selection statistics for SEARA: paired bootstrap over queries, the cheaper-wins pick, factorial effects.

Definitions (the SEARA memo (``shared/reference/seara.md``) sections 2.3 and 6.4):

* the score is the headline ``pr_auc`` of ``metrics/pr_auc``: micro step PR-AUC at cut-offs 1..K with
  P(k) = sum_q hits_q(k) / sum_q min(k, n_q) and R(k) = sum_q found_q(k) / sum_q R'_q, relevant = grade >= the
  relevance level (2 on the 0-3 scale). Queries with R'_q = 0 are excluded, as the metric excludes them;
* **paired bootstrap**: one set of ``n_boot`` resamples of the scored query ids (R'_q > 0, drawn with
  replacement, as many as there are) is shared by every configuration; each resample recomputes every
  configuration's micro PR-AUC with each query weighted by how often it was drawn. Intervals are percentile
  intervals (``alpha / 2`` and ``1 - alpha / 2``, numpy's linear interpolation). For each ordered pair (A, B)
  the interval of the difference A - B over the same resamples, and the share of resamples with A > B;
* **pick**: the best point estimate; every configuration whose difference interval to it contains 0 is tied
  with it, and the cheapest of the tied set wins (equal costs: better point estimate, then name).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from convrag.core.errors import ConvragError
from convrag.metrics.pr_auc.compute import QueryCounts, chunk_counts
from convrag.metrics.pr_auc.inputs import PrAucInputError, judgments, qrels_mapping, ranking

RunLists = Mapping[str, Sequence[str]]
DEFAULT_LEVEL = 2


class SelectionError(ConvragError):
    """Bad input to the selection statistics (no scored query, unknown configuration, missing cost, design)."""


# ------------------------------------------------------------------------------------------------ counts
def _judged(qrels: Mapping[str, Any]) -> dict[str, dict[str, int] | frozenset[str]]:
    """The checked judgments of every query (``metrics/pr_auc``'s input rules)."""
    try:
        pool = qrels_mapping(qrels)
        return {qid: judgments(qid, pool[qid]) for qid in sorted(pool)}
    except PrAucInputError as exc:
        raise SelectionError(str(exc)) from exc


def _counts(run: RunLists, judged: Mapping[str, Any], k: int, level: int, unjudged: str) -> list[QueryCounts]:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise SelectionError(f"k must be a positive integer, got {k!r}")
    if level not in (1, 2, 3) or unjudged not in ("error", "nonrelevant"):
        raise SelectionError(f"level must be 1, 2 or 3 and unjudged 'error' or 'nonrelevant', got {level!r}, "
                             f"{unjudged!r}")
    stray = sorted(q for q in run if q not in judged)
    if stray:
        raise SelectionError(f"queries {stray[:5]} are ranked but have no judgments (qrels of another pool?)")
    try:
        return [chunk_counts(qid, ranking(qid, list(run.get(qid, ())))[:k], judged[qid], level, unjudged)[0]
                for qid in judged]  # fmt: skip
    except PrAucInputError as exc:
        raise SelectionError(str(exc)) from exc


def query_counts(run: RunLists, qrels: Mapping[str, Any], k: int, level: int = DEFAULT_LEVEL, *,
                 unjudged: str = "error") -> list[QueryCounts]:
    """One :class:`QueryCounts` per judged query (sorted ids) of ``run`` ({query id: chunk ids best first}) cut
    at ``k``. A judged query the run lacks counts as an empty ranking; a ranked query without judgments, a
    repeated chunk id, or (``unjudged="error"``) a ranked chunk without a grade is an error, as in
    ``score_chunks``; ``unjudged="nonrelevant"`` reads it as grade 0."""
    return _counts(run, _judged(qrels), k, level, unjudged)


def _arrays(counts: Sequence[QueryCounts], k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(found, hits, size) as float arrays of shape (queries, k): cumulative counts at cut-offs 1..k, held past n
    (precision denominator min(k, n), the metric's default ``retrieved``)."""
    found = np.zeros((len(counts), k))
    hits = np.zeros((len(counts), k))
    size = np.zeros((len(counts), k))
    for i, q in enumerate(counts):
        n = min(q.retrieved, k)
        if n:
            found[i, :n], hits[i, :n], size[i, :n] = q.found[:n], q.hits[:n], q.size[:n]
            found[i, n:], hits[i, n:], size[i, n:] = q.found[n - 1], q.hits[n - 1], q.size[n - 1]
    return found, hits, size


def micro_step(weights: np.ndarray, found: np.ndarray, size: np.ndarray, relevant: np.ndarray,
               hits: np.ndarray | None = None) -> np.ndarray:
    """Micro step PR-AUC for each row of ``weights`` (resamples x queries, draw counts) and each configuration.

    ``found`` (recall numerators), ``hits`` (precision numerators; default ``found``, as for chunks) and ``size``:
    (queries, configurations, k); ``relevant``: R'_q (or |F'_q|) per query (all > 0). Sums of
    integer counts are exact in float64, and the area adds (R(k) - R(k-1)) * P(k) in order k = 1..K, so on
    weights of ones the value equals ``compute.aggregate``'s ``pr_auc`` bit for bit. Returns (resamples, configs)."""
    n_q, n_c, k = found.shape
    tp = (weights @ found.reshape(n_q, n_c * k)).reshape(-1, n_c, k)
    hit = tp if hits is None else (weights @ hits.reshape(n_q, n_c * k)).reshape(-1, n_c, k)
    retrieved = (weights @ size.reshape(n_q, n_c * k)).reshape(-1, n_c, k)
    total = (weights @ relevant)[:, None]
    area = np.zeros(tp.shape[:2])
    last = np.zeros(tp.shape[:2])
    with np.errstate(invalid="ignore", divide="ignore"):
        for cut in range(k):
            recall = tp[:, :, cut] / total
            precision = hit[:, :, cut] / retrieved[:, :, cut]
            step = recall > last
            area = np.where(step, area + (recall - last) * precision, area)
            last = np.where(step, recall, last)
    return area


# --------------------------------------------------------------------------------------------- bootstrap
@dataclass(frozen=True)
class PairDiff:
    """Configuration ``a`` minus ``b``: point difference, percentile interval, share of resamples with a > b."""

    a: str
    b: str
    diff: float
    low: float
    high: float
    share_a_better: float

    @property
    def includes_zero(self) -> bool:
        return self.low <= 0.0 <= self.high


@dataclass(frozen=True)
class BootstrapResult:
    """Paired bootstrap of micro step PR-AUC (module docstring).

    ``samples[i, b]``: configuration ``configurations[i]`` on resample ``b``; ``point``: on the original queries;
    ``query_ids``: the scored queries (R'_q > 0) that are resampled; ``excluded_query_ids``: R'_q = 0."""

    configurations: tuple[str, ...]
    point: dict[str, float]
    samples: np.ndarray = field(repr=False)
    query_ids: tuple[str, ...]
    excluded_query_ids: tuple[str, ...]
    k: int
    level: int
    n_boot: int
    seed: int
    alpha: float
    pool_signature: str | None = None

    def _row(self, name: str) -> np.ndarray:
        if name not in self.point:
            raise SelectionError(f"{name!r} is not one of the bootstrapped configurations {list(self.configurations)}")
        return self.samples[self.configurations.index(name)]

    def ci(self, name: str, alpha: float | None = None) -> tuple[float, float]:
        """Percentile interval of one configuration's PR-AUC at ``alpha`` (default: the result's)."""
        return _interval(self._row(name), self.alpha if alpha is None else alpha)

    def diff(self, a: str, b: str, alpha: float | None = None) -> PairDiff:
        """``a`` minus ``b`` on the shared resamples."""
        d = self._row(a) - self._row(b)
        low, high = _interval(d, self.alpha if alpha is None else alpha)
        return PairDiff(a, b, self.point[a] - self.point[b], low, high, float(np.mean(d > 0)))

    def pairs(self, alpha: float | None = None) -> list[PairDiff]:
        """Every ordered pair (a, b), a != b, in configuration order."""
        return [self.diff(a, b, alpha) for a, b in itertools.permutations(self.configurations, 2)]

    def p_value(self, a: str, b: str) -> float:
        """Two-sided bootstrap p-value of a - b: min(1, 2 * min(share(d <= 0), share(d >= 0)))."""
        d = self._row(a) - self._row(b)
        return float(min(1.0, 2 * min(np.mean(d <= 0), np.mean(d >= 0))))

    def summary(self) -> dict[str, Any]:
        """JSON-ready: settings, per configuration point and interval, and every ordered pair."""
        return {"k": self.k, "level": self.level, "n_boot": self.n_boot, "seed": self.seed, "alpha": self.alpha,
                "pool_signature": self.pool_signature, "n_scored": len(self.query_ids),
                "excluded_query_ids": list(self.excluded_query_ids),
                "configurations": {c: {"pr_auc": self.point[c], "ci": list(self.ci(c))} for c in self.configurations},
                "pairs": [vars(p) for p in self.pairs()]}


def _check_alpha(alpha: float) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise SelectionError(f"alpha must lie in (0, 1), got {alpha!r}")
    return alpha


def _interval(values: np.ndarray, alpha: float) -> tuple[float, float]:
    _check_alpha(alpha)
    low, high = np.quantile(values, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def bootstrap(runs: Mapping[str, RunLists], qrels: Mapping[str, Any], k: int, *, n_boot: int = 1000, seed: int = 0,
              level: int = DEFAULT_LEVEL, alpha: float = 0.05, unjudged: str = "error",
              pool_signature: str | None = None) -> BootstrapResult:
    """Paired percentile bootstrap of every configuration's micro step PR-AUC@``k`` (module docstring).

    ``runs``: {configuration: {query id: chunk ids best first}}; ``qrels``: the pseudo-qrels of the one pool all
    runs were pooled into (``pool_signature`` is recorded for the report). Deterministic per ``seed``."""
    judged = _judged(qrels)
    counts = {name: _counts(runs[name], judged, k, level, unjudged) for name in runs}
    return bootstrap_counts(counts, k, n_boot=n_boot, seed=seed, level=level, alpha=alpha,
                            pool_signature=pool_signature)


def bootstrap_counts(counts: Mapping[str, Sequence[QueryCounts]], k: int, *, n_boot: int = 1000, seed: int = 0,
                     level: int = DEFAULT_LEVEL, alpha: float = 0.05,
                     pool_signature: str | None = None) -> BootstrapResult:
    """The paired bootstrap of :func:`bootstrap` from per-query counts: ``counts[config]`` lists one
    :class:`QueryCounts` per query, the same queries in the same order for every configuration (chunk-level
    counts, or fact-level ones whose recall counts facts and whose precision counts chunks)."""
    if not counts:
        raise SelectionError("bootstrap needs at least one configuration")
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise SelectionError(f"n_boot must be a positive integer, got {n_boot!r}")
    _check_alpha(alpha)
    names = tuple(counts)
    first = list(counts[names[0]])
    order = [q.query_id for q in first]
    for name in names:
        if [q.query_id for q in counts[name]] != order:
            raise SelectionError(f"{name!r} is counted over other queries than {names[0]!r}: pair them first")
    keep = [i for i, q in enumerate(first) if q.relevant > 0]
    if not keep:
        raise SelectionError(f"no query has a relevant pooled unit (grade >= {level}): nothing to score")
    relevant = np.array([first[i].relevant for i in keep], dtype=float)
    found = np.zeros((len(keep), len(names), k))
    hits, size = np.zeros_like(found), np.zeros_like(found)
    for j, name in enumerate(names):
        f, h, s = _arrays([counts[name][i] for i in keep], k)
        found[:, j, :], hits[:, j, :], size[:, j, :] = f, h, s
    point = micro_step(np.ones((1, len(keep))), found, size, relevant, hits)[0]
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(keep), size=(n_boot, len(keep)))
    offsets = draws + (np.arange(n_boot) * len(keep))[:, None]
    weights = np.bincount(offsets.ravel(), minlength=n_boot * len(keep)).reshape(n_boot, len(keep)).astype(float)
    samples = micro_step(weights, found, size, relevant, hits).T
    return BootstrapResult(
        configurations=names, point={n: float(v) for n, v in zip(names, point, strict=True)}, samples=samples,
        query_ids=tuple(first[i].query_id for i in keep),
        excluded_query_ids=tuple(q.query_id for q in first if q.relevant == 0), k=k, level=level, n_boot=n_boot,
        seed=seed, alpha=alpha, pool_signature=pool_signature)  # fmt: skip


def holm(p_values: Mapping[str, float]) -> dict[str, float]:
    """Holm step-down adjusted p-values: the i-th smallest (0-based) times (m - i), capped at 1, made monotone."""
    order = sorted(p_values, key=lambda n: (p_values[n], n))
    adjusted, running = {}, 0.0
    for i, name in enumerate(order):
        running = max(running, min(1.0, (len(order) - i) * p_values[name]))
        adjusted[name] = running
    return adjusted


# -------------------------------------------------------------------------------------------------- pick
@dataclass(frozen=True)
class Pick:
    """The chosen configuration and why. ``tied``: configurations whose difference interval to the best contains
    0 (the best included), best point estimate first; ``runner_up``: the highest point estimate other than the
    winner; ``holm``: Holm-adjusted bootstrap p-values of the winner against each other (reported, not used)."""

    winner: str
    best_by_point: str
    runner_up: str | None
    tied: tuple[str, ...]
    reason: str
    holm: dict[str, float]


def pick(results: BootstrapResult, costs: Mapping[str, float | int], *, alpha: float = 0.05) -> Pick:
    """The cheapest configuration statistically tied with the best point estimate (module docstring).

    Point ties for the best go to the lower name. ``costs`` must price every configuration (any unit, lower is
    cheaper)."""
    names = results.configurations
    missing = [n for n in names if n not in costs]
    if missing:
        raise SelectionError(f"no cost for {', '.join(missing)}: the tie-break needs every configuration's cost")
    for name in names:
        if isinstance(costs[name], bool) or not isinstance(costs[name], (int, float)) or math.isnan(costs[name]):
            raise SelectionError(f"cost of {name!r} must be a number, got {costs[name]!r}")
    by_point = sorted(names, key=lambda n: (-results.point[n], n))
    best = by_point[0]
    tied = tuple(n for n in by_point if n == best or results.diff(n, best, alpha).includes_zero)
    winner = min(tied, key=lambda n: (costs[n], -results.point[n], n))
    runner_up = next((n for n in by_point if n != winner), None)
    if len(tied) == 1:
        reason = f"clear winner: {best} has the best PR-AUC and no difference interval to it contains 0"
    elif winner == best:
        reason = (f"best point estimate, and the cheapest of the {len(tied)} configurations tied within the "
                  f"{1 - alpha:.0%} CI")
    else:
        d = results.diff(winner, best, alpha)
        reason = (f"cheaper within CI: {winner} (cost {costs[winner]}) vs best {best} (cost {costs[best]}), "
                  f"difference {d.diff:+.4f} [{d.low:+.4f}, {d.high:+.4f}] contains 0")
    others = {n: results.p_value(winner, n) for n in names if n != winner}
    return Pick(winner, best, runner_up, tied, reason, holm(others))


# --------------------------------------------------------------------------------------------- factorial
def factorial_effects(scores: Mapping[str, float], factors: Mapping[str, Mapping[str, str]], *,
                      levels: Mapping[str, Sequence[str]] | None = None) -> dict[str, Any]:
    """Main effects and two-way interaction tables of a full factorial.

    ``factors[config]`` = {factor: level}; ``levels`` fixes each factor's level order (default: first appearance
    in ``factors``), the first level being the baseline. The design must be full and balanced: every combination
    of levels covered by the same number of configurations. Returns ``levels``, ``grand_mean``, ``means``
    ({factor: {level: mean}}), ``main_effects`` ({factor: {level: mean(level) - mean(first level)}}),
    ``interactions`` ({"A x B": {level of A: {level of B: mean}}}, for A before B in factor order) and
    ``interaction_effects`` ({"A x B": (effect of B at A's second level) - (at its first)} for 2x2 pairs)."""
    if set(scores) != set(factors) or not scores:
        raise SelectionError("scores and factors must name the same, non-empty set of configurations")
    names = list(next(iter(factors.values())))
    order: dict[str, list[str]] = {f: list(levels[f]) for f in names} if levels else {f: [] for f in names}
    for config, assignment in factors.items():
        if set(assignment) != set(names):
            raise SelectionError(f"{config!r} sets factors {sorted(assignment)}, expected {sorted(names)}")
        for f in names:
            if assignment[f] not in order[f]:
                if levels:
                    raise SelectionError(f"{config!r}: level {assignment[f]!r} of {f!r} is not in {order[f]}")
                order[f].append(assignment[f])
    cells: dict[tuple[str, ...], int] = {}
    for assignment in factors.values():
        key = tuple(assignment[f] for f in names)
        cells[key] = cells.get(key, 0) + 1
    full = list(itertools.product(*(order[f] for f in names)))
    missing = [c for c in full if c not in cells]
    if missing or len(set(cells.values())) > 1:
        detail = f"missing {dict(zip(names, missing[0], strict=True))}" if missing else "unequal replicates"
        raise SelectionError(f"not a full balanced factorial over {names} ({detail})")

    def mean(**fixed: str) -> float:
        vals = [scores[c] for c, a in factors.items() if all(a[f] == v for f, v in fixed.items())]
        return math.fsum(vals) / len(vals)

    means = {f: {lv: mean(**{f: lv}) for lv in order[f]} for f in names}
    interactions, contrasts = {}, {}
    for a, b in itertools.combinations(names, 2):
        table = {la: {lb: mean(**{a: la, b: lb}) for lb in order[b]} for la in order[a]}
        interactions[f"{a} x {b}"] = table
        if len(order[a]) == len(order[b]) == 2:
            (a0, a1), (b0, b1) = order[a], order[b]
            contrasts[f"{a} x {b}"] = (table[a1][b1] - table[a1][b0]) - (table[a0][b1] - table[a0][b0])
    return {"levels": order, "grand_mean": math.fsum(scores.values()) / len(scores), "means": means,
            "main_effects": {f: {lv: means[f][lv] - means[f][order[f][0]] for lv in order[f][1:]} for f in names},
            "interactions": interactions, "interaction_effects": contrasts}
