"""MTRAGEval Subtask A's official "all" row from per-domain means, and its stratified bootstrap CI.

Definitions (``counts``: domain -> the tasks submitted in that collection, i.e. its run lines, *including* tasks
without qrels; ``means``: domain -> the mean of a measure over the domain's scored tasks):

* **official "all"**: ``sum(round(mean_d, 5) * count_d) / sum(count_d)`` over the domains with a count and a mean
  (not NaN): the per-domain means rounded as the official script prints them, weighted by submitted tasks
  (:func:`official_weighted`, what :func:`convrag.benchmarks.mtrag.scoring.score_subtask_a` reports).
* **its CI**: a percentile bootstrap stratified by domain: each resample draws every domain's scored tasks with
  replacement (as many as it has), and weights the resampled (unrounded) domain means by the same counts
  (:func:`official_bootstrap`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from convrag.core.stats import Interval

OFFICIAL_DIGITS = 5


def official_weighted(means: Mapping[str, float], counts: Mapping[str, int]) -> float:
    """The official "all" value of one measure (see the module docstring); NaN when no domain counts."""
    used = [d for d in means if counts.get(d) and not math.isnan(means[d])]
    total = sum(counts[d] for d in used)
    return sum(round(means[d], OFFICIAL_DIGITS) * counts[d] for d in used) / total if total else float("nan")


def official_bootstrap(
    values: Mapping[str, Sequence[float]],
    counts: Mapping[str, int],
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> Interval:
    """The official "all" value of ``values`` (domain -> per-task scores of one measure) with its CI (see the
    module docstring); ``n`` is the number of scored tasks."""
    groups = {d: np.asarray(v, dtype=float) for d, v in sorted(values.items()) if len(v) and counts.get(d)}
    n = sum(g.size for g in groups.values())
    mean = official_weighted({d: float(g.mean()) for d, g in groups.items()}, counts)
    if n_resamples <= 0 or not groups or all(np.all(g == g[0]) for g in groups.values()):
        return Interval(mean, mean, mean, n)
    rng = np.random.default_rng(seed)
    weights = np.array([counts[d] for d in groups], dtype=float)
    boot = np.stack([g[rng.integers(0, g.size, size=(n_resamples, g.size))].mean(axis=1) for g in groups.values()])
    alpha = (1 - confidence) / 2
    low, high = np.quantile(weights @ boot / weights.sum(), [alpha, 1 - alpha])
    return Interval(mean, float(low), float(high), n)
