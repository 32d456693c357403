"""Regression: the one evaluation path gives the numbers the three earlier per-benchmark paths gave.

``tests/regression/expected.json`` was recorded by ``python -m tests.regression.record`` on commit 7a2a9f2
(before the redesign). Every recorded number must be reproduced exactly, except the cells listed in
``tests/regression/fitted.json``: dense scores of strategy texts longer than the encoder's limit, which now
keep the current query (oldest history trimmed first) instead of losing their end; their new values are
recorded there and checked too.
"""

from __future__ import annotations

import json
import math

import pytest

from .conftest import DATA
from .regression.cases import CASES, EXPECTED, HERE, flatten
from .regression.record import run_case

FITTED = HERE / "fitted.json"


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=0, abs_tol=1e-12)
    return a == b


def differences(expected: dict, got: dict) -> dict[str, tuple]:
    return {k: (v, got.get(k, "<missing>")) for k, v in expected.items() if not _same(v, got.get(k, "<missing>"))}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_numbers_unchanged_by_the_redesign(name, tmp_path):
    expected = json.loads(EXPECTED.read_text())["cases"][name]
    fitted = json.loads(FITTED.read_text())["cases"].get(name, {})
    got = flatten(run_case(name, DATA, tmp_path))
    changed = differences(expected, got)
    unexpected = {k: v for k, v in changed.items() if k not in fitted}
    assert not unexpected, f"{len(unexpected)} numbers changed, e.g. {list(unexpected.items())[:5]}"
    assert differences({k: v["after"] for k, v in fitted.items()}, got) == {}
    # every allowed change is a dense (or hybrid) score of a strategy whose texts were fitted
    assert all(any(r in k for r in ("dense", "hybrid")) for k in fitted)
