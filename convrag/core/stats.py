"""Statistics over per-query scores: bootstrap confidence intervals and paired significance tests.

* ``bootstrap_ci``: percentile bootstrap interval of the mean (scipy.stats.bootstrap), resampling queries.
* ``paired_test``: two retrievers scored on the same queries. ``p_randomization`` is a two-sided paired
  randomisation (sign-flip permutation) test of the mean difference; ``p_ttest`` is the paired t-test
  (scipy.stats.ttest_rel). Identical score vectors give p = 1.
All are deterministic given ``seed``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Interval:
    """Mean of per-query scores with a bootstrap confidence interval."""

    mean: float
    low: float
    high: float
    n: int

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    def format(self, digits: int = 4) -> str:
        """``mean [low, high]`` with ``digits`` decimals (formatting only; values are kept unrounded)."""
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def bootstrap_ci(
    values: Sequence[float], confidence: float = 0.95, n_resamples: int = 1000, seed: int = 0
) -> Interval:
    """Percentile bootstrap CI of the mean of ``values`` (queries resampled with replacement); ``n_resamples`` 0
    asks for no interval (its bounds are NaN)."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return Interval(float("nan"), float("nan"), float("nan"), 0)
    mean = float(data.mean())
    if n_resamples <= 0:
        return Interval(mean, float("nan"), float("nan"), int(data.size))
    if data.size == 1 or np.all(data == data[0]):
        return Interval(mean, mean, mean, int(data.size))
    from scipy import stats  # here, not at import: a second of imports that --bootstrap 0 does not need

    result = stats.bootstrap(
        (data,), np.mean, confidence_level=confidence, n_resamples=n_resamples, method="percentile",
        random_state=np.random.default_rng(seed), vectorized=True,
    )  # fmt: skip
    ci = result.confidence_interval
    return Interval(mean, float(ci.low), float(ci.high), int(data.size))


@dataclass(frozen=True)
class PairedResult:
    """Paired comparison of system A against system B on one measure."""

    mean_a: float
    mean_b: float
    diff: float
    p_randomization: float
    p_ttest: float
    n: int

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def paired_test(
    a: Sequence[float], b: Sequence[float], n_resamples: int = 10000, seed: int = 0
) -> PairedResult:
    """Two-sided paired randomisation test and paired t-test of mean(a) - mean(b)."""
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired test needs equal lengths, got {x.size} and {y.size}")
    diff = x - y
    if x.size == 0:
        raise ValueError("paired test needs at least one query")
    if np.all(diff == 0):
        p_rand = p_t = 1.0
    else:
        from scipy import stats

        perm = stats.permutation_test(
            (diff,), np.mean, permutation_type="samples", n_resamples=n_resamples, alternative="two-sided",
            random_state=np.random.default_rng(seed), vectorized=True,
        )  # fmt: skip
        p_rand = float(perm.pvalue)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            p_t = float(stats.ttest_rel(x, y).pvalue) if x.size > 1 else float("nan")
        if np.isnan(p_t) and x.size > 1:
            p_t = 0.0  # constant non-zero difference: the t statistic is infinite
    return PairedResult(float(x.mean()), float(y.mean()), float(diff.mean()), p_rand, p_t, int(x.size))
