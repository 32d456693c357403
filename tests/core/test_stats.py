"""Bootstrap intervals and paired tests of convrag.core.stats."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from convrag.core.stats import bootstrap_ci, paired_test


def test_bootstrap_ci_is_seeded_and_brackets_the_mean():
    values = np.random.default_rng(1).random(300)
    first = bootstrap_ci(values, seed=3)
    assert first == bootstrap_ci(values, seed=3)
    assert first.low < first.mean < first.high
    assert first.mean == pytest.approx(values.mean(), abs=0)
    # a 95% interval of a mean of 300 uniforms is about +-1.96 * 0.289 / sqrt(300) = +-0.033 wide
    assert 0.02 < (first.high - first.low) / 2 < 0.045


def test_bootstrap_degenerate_inputs():
    assert bootstrap_ci([0.5] * 10).low == bootstrap_ci([0.5] * 10).high == 0.5
    assert bootstrap_ci([]).n == 0


def test_paired_test_matches_scipy_and_detects_a_shift():
    rng = np.random.default_rng(0)
    a = rng.random(150)
    b = a + 0.05 + rng.normal(0, 0.1, 150)
    result = paired_test(a, b, seed=1)
    assert result.p_ttest == pytest.approx(stats.ttest_rel(a, b).pvalue, rel=1e-12)
    assert result.diff == pytest.approx((a - b).mean(), abs=1e-15)
    assert result.p_randomization < 0.01
    noise = paired_test(a, a + rng.normal(0, 0.1, 150), seed=1)
    assert noise.p_randomization > 0.05


def test_paired_test_identical_and_errors():
    assert paired_test([0.1, 0.2], [0.1, 0.2]).p_randomization == 1.0
    with pytest.raises(ValueError, match="equal lengths"):
        paired_test([1.0], [1.0, 2.0])
