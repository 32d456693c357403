"""Regression: the one evaluation path gives the numbers the three earlier per-benchmark paths gave.

``tests/regression/expected.json`` was recorded by ``python -m tests.regression.record`` on commit 7a2a9f2
(before the redesign; see its ``note`` for the one determinism fix applied first). Each case is evaluated twice:

* with the encoder settings of that code (``UNFITTED``: no query fitting, long texts cut at their end), every
  recorded number must be reproduced exactly: the redesign changed nothing;
* with the defaults, the numbers that differ must be exactly those recorded in ``tests/regression/fitted.json``
  (dense scores of strategy texts longer than the encoder's limit, which now keep the current query and the
  appended reasoning, and what is computed from them), with their recorded new values.
"""

from __future__ import annotations

import json
import math

import pytest

from tests.conftest import DATA
from tests.regression.cases import CASES, EXPECTED, HERE, UNFITTED, flatten
from tests.regression.record import run_case

FITTED = HERE / "fitted.json"


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=0, abs_tol=1e-12)
    return a == b


def differences(expected: dict, got: dict) -> dict[str, tuple]:
    return {k: (v, got.get(k, "<missing>")) for k, v in expected.items() if not _same(v, got.get(k, "<missing>"))}


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", list(CASES))
def test_numbers_unchanged_by_the_redesign(name, tmp_path):
    expected = json.loads(EXPECTED.read_text())["cases"][name]
    unfitted = flatten(run_case(name, DATA, tmp_path, UNFITTED))
    changed = differences(expected, unfitted)
    assert not changed, f"{len(changed)} numbers changed, e.g. {list(changed.items())[:5]}"

    fitted = json.loads(FITTED.read_text())["cases"].get(name, {})
    got = flatten(run_case(name, DATA, tmp_path))
    assert set(differences(expected, got)) == set(fitted)
    assert differences({k: v["after"] for k, v in fitted.items()}, got) == {}
