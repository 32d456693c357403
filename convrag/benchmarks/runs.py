"""Runs given from outside: a TREC run file, an in-memory run, or (MTRAG) an official submission file, read and
format-checked as an :class:`~convrag.evaluation.engine.External` of a built benchmark."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from convrag.builders.profile import EvaluationProfile
from convrag.core.errors import ConvragError
from convrag.evaluation.data import BenchmarkData
from convrag.evaluation.engine import External
from convrag.metrics.retrieval.trec import find_line, read_run


def read_external(name: str, kind: str, value: str | Path | Mapping[str, Mapping[str, float]],
              profile: EvaluationProfile, data: BenchmarkData) -> External:
    """An :class:`External` from a file path (read and format-checked here) or an in-memory run mapping."""
    if kind == "submission":
        if profile.submission != "mtrag":
            raise ConvragError("this benchmark has no official submission format; give TREC runs with --run")
        from convrag.benchmarks.mtrag.scoring import read_submission

        if not isinstance(value, (str, os.PathLike)):
            raise ConvragError(f"submission {name!r}: give the path of its file")
        sub = read_submission(value, [t.qid for t in data.turns], task_domains={t.qid: t.domain for t in data.turns})
        run = {tid: ranking for runs in sub.runs.values() for tid, ranking in runs.items()}
        return External(name, kind, str(value), run, lambda qid, doc: sub.lines.get(qid),
                        warnings=list(sub.report.warnings))  # fmt: skip
    if isinstance(value, (str, os.PathLike)):
        path = str(value)
        return External(name, kind, path, read_run(path), lambda qid, doc: find_line(path, qid, doc))
    return External(name, kind, f"run {name!r}", value)
