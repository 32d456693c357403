"""A results folder records what its results are of: a second run of other inputs into the same ``--out`` is refused
with one line (exit 2) and the first results stay as they were; ``--overwrite`` replaces them; a rerun of the same
inputs replaces its own. For evaluate, evaluate-generation, audit and generate (select: tests/seara/test_select.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import convrag.audit.runner
from convrag.cli import main
from convrag.llm import LLM
from convrag.llm.backends.fake import FakeBackend
from convrag.llm.client import RetryPolicy
from tests.conftest import DATA
from tests.judging.test_recor_authors import _responder

RESPONSES = DATA / "mtrag" / "scripts" / "evaluation" / "sample_data" / "responses-10.jsonl"


@pytest.fixture(scope="module")
def recor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("identity") / "recor"
    assert main(["build", "recor", "--source", str(DATA / "recor" / "sample"), "--out", str(out)]) == 0
    return out


def _refused(capsys: pytest.CaptureFixture[str], code: int, command: str, *parts: str) -> None:
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"convrag {command}: error: ") and "pass --overwrite to replace them" in err[0], err[0]
    for part in parts:
        assert part in err[0], (part, err[0])


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_evaluate_refuses_another_benchmark_in_its_out(stratrag_first30: Path, recor: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results"
    base = ["--retrievers", "bm25", "--bootstrap", "20", "--no-progress", "--out", str(out)]
    assert main(["evaluate", str(stratrag_first30), *base]) == 0
    before = _snapshot(out)
    capsys.readouterr()
    _refused(capsys, main(["evaluate", str(recor), *base]), "evaluate",
             f"holds the `convrag evaluate` results of benchmark stratrag at {stratrag_first30.resolve()}",
             f"not of benchmark recor at {recor.resolve()}")
    assert _snapshot(out) == before
    assert main(["evaluate", str(stratrag_first30), *base]) == 0  # the same benchmark again: its own results
    assert main(["evaluate", str(recor), *base, "--overwrite"]) == 0
    assert json.loads((out / "results.json").read_text())["benchmark"] == "recor"
    marker = json.loads((out / ".convrag-out.json").read_text())
    assert marker == {"command": "evaluate", "of": f"benchmark recor at {recor.resolve()}"}


def test_evaluate_generation_refuses_other_answers_in_its_out(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "responses-5.jsonl"
    other.write_text("".join(RESPONSES.read_text(encoding="utf-8").splitlines(True)[:5]), encoding="utf-8")
    out = tmp_path / "results"
    fast = ["--judge", "fake", "--metrics", "rb_alg", "--bootstrap", "20", "--no-progress", "--out", str(out)]
    assert main(["evaluate-generation", str(RESPONSES), *fast]) == 0
    before = _snapshot(out)
    capsys.readouterr()
    _refused(capsys, main(["evaluate-generation", str(other), *fast]), "evaluate-generation", str(RESPONSES))
    assert _snapshot(out) == before
    assert main(["evaluate-generation", str(other), *fast, "--overwrite"]) == 0
    assert _snapshot(out) != before


def test_audit_refuses_another_folder_in_its_out(recor: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(convrag.audit.runner, "make_judges", lambda specs, cache=None, concurrency=4: [
        LLM(FakeBackend(responder=_responder), cache=False, retry=RetryPolicy(max_retries=0), spec="fake:j")])
    copy = tmp_path / "recor-copy"
    shutil.copytree(recor, copy)
    out = tmp_path / "audit"
    base = ["--dimensions", "dependency_type", "--judge", "fake:j", "--no-progress", "--out", str(out)]
    assert main(["audit", str(recor), *base]) == 0
    before = _snapshot(out)
    capsys.readouterr()
    _refused(capsys, main(["audit", str(copy), *base]), "audit", f"results of recor at {recor.resolve()}",
             f"not of recor at {copy.resolve()}")
    assert _snapshot(out) == before


def test_generate_refuses_answers_of_another_folder(recor: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "recor-copy"
    shutil.copytree(recor, copy)
    answers = tmp_path / "answers.jsonl"
    base = ["--mode", "oracle", "--llm", "fake", "--max-turns", "2", "--no-progress", "--out", str(answers)]
    assert main(["generate", str(recor), *base]) == 0
    before = answers.read_bytes()
    capsys.readouterr()
    _refused(capsys, main(["generate", str(copy), *base]), "generate", f"not of {copy.resolve()}")
    assert answers.read_bytes() == before
    assert main(["generate", str(copy), *base, "--overwrite"]) == 0
