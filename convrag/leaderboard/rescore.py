"""The comparison behind every leaderboard re-scoring check: a results folder's stated numbers against those
computed again from its run files.

Definitions: a per-query score **re-scores** when the value computed again is within ``ABS_TOL`` (1e-12, absolute)
of the stated one; a summary value (a mean, an official row) when it is within ``REL_TOL`` (1e-9, relative) or
``ABS_TOL``.
"""

from __future__ import annotations

import math
from pathlib import Path

from convrag.core.errors import ConvragError

ABS_TOL = 1e-12
REL_TOL = 1e-9


def check_per_query(folder: Path, name: str, run_file: str, stated: dict[str, dict[str, float]],
                    rescored: dict[str, dict[str, float]], measures: list[str]) -> None:  # fmt: skip
    """Refuse (one line) system ``name`` of ``folder`` unless every stated per-query score of ``measures`` equals
    the one re-scored from ``run_file`` (see the module docstring)."""
    for qid, row in stated.items():
        for m in measures:
            again = rescored.get(qid, {}).get(m)
            if again is None or not math.isclose(row.get(m, math.nan), again, rel_tol=0, abs_tol=ABS_TOL):
                raise ConvragError(f"{folder}: {name} {m} of query {qid} is {row.get(m)} in results.json but {again} "
                                   f"re-scored from {run_file}: a results folder that does not re-score from its "
                                   "runs (edited by hand?) is not added")  # fmt: skip


def same_summary(stated: float, computed: float) -> bool:
    """Whether a stated summary value equals the one computed again (see the module docstring)."""
    return math.isclose(stated, computed, rel_tol=REL_TOL, abs_tol=ABS_TOL)
