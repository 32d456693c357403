"""Two `convrag audit` runs into one `--out` at once: the second is refused with one line (exit 2) before any judge
call, and the first finishes with its outputs whole (they used to collide on the temporary files)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

import convrag.audit.runner
from convrag.cli import main
from convrag.llm import LLM
from convrag.llm.backends.fake import FakeBackend
from convrag.llm.client import RetryPolicy
from tests.conftest import DATA
from tests.judging.test_recor_authors import _responder


def test_a_second_audit_into_the_same_out_is_refused_while_the_first_runs(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture) -> None:
    built = tmp_path / "recor"
    assert main(["build", "recor", "--source", str(DATA / "recor" / "sample"), "--out", str(built)]) == 0
    slow = FakeBackend(responder=_responder, delay=0.2)
    monkeypatch.setattr(convrag.audit.runner, "make_judges", lambda specs, cache=None, concurrency=4: [
        LLM(slow, cache=False, retry=RetryPolicy(max_retries=0), spec="fake:j")])
    out = tmp_path / "audit"
    argv = ["audit", str(built), "--dimensions", "question_pattern", "--judge", "fake:j", "--no-progress",
            "--concurrency", "1", "--out", str(out)]
    codes: list[int] = []
    first = threading.Thread(target=lambda: codes.append(main(argv)))
    first.start()
    deadline = time.monotonic() + 60
    while not slow.calls:  # the first audit holds the lock and is judging
        assert time.monotonic() < deadline and first.is_alive()
        time.sleep(0.02)
    calls = len(slow.calls)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "another `convrag audit` is writing this folder" in err[0]
    first.join(timeout=120)
    assert codes == [0]
    assert len(slow.calls) == 13 and calls < 13  # the refused run asked nothing
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["complete"] and not list(out.glob(".*tmp*"))
