"""`convrag synthesize`: dry runs, option checking and one-line errors (no model is loaded here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convrag.cli import main


def _one_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def _corpus(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_dry_run_prints_estimates_and_writes_nothing(tmp_path: Path, capsys) -> None:
    corpus = _corpus(tmp_path, [json.dumps({"_id": str(i), "text": "Some text about rivers."}) for i in range(5)])
    assert main(["synthesize", "mtr", "--corpus", str(corpus), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "nothing is written" in out
    lines = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
    assert lines["curate"][1:6] == ["5", "0", "0", "0", "$0.0000"]
    assert lines["cluster"][1] == "?"  # known only after curation
    assert not (tmp_path / "out").exists()
    assert main(["synthesize", "mtr", "--corpus", str(corpus), "--out", str(tmp_path / "o2"), "--stages", "cluster",
                 "--dry-run"]) == 0
    assert "cluster" in capsys.readouterr().out.splitlines()[2].split()[0]


@pytest.mark.parametrize(("args", "message"), [
    (["--option", "chunksize=10"], "--option chunksize: not an option of the stages run (curate: headings, chunk_size"),
    (["--option", "cluster_size=0"], "cluster_size, k, block and batch_size must be at least 1"),
    (["--option", "quality=gpt"], "unknown quality scorer 'gpt'"),
    (["--option", "method=kmeans"], "cluster method must be one of greedy, random"),
    (["--stages", "curate,agents"], "--stages: unknown stage agents; MTR-Pipeline stages: curate, cluster"),
    (["--option", "chunk_size"], "--option expects key=value, got 'chunk_size'"),
    (["--stages", "curate,cluster", "--redo", "polish"], "--redo polish: not a stage of this run"),
    (["--stages", "curate,cluster", "--questioner", "default"], "--option questioner: not an option of the stages"),
    (["--option", "turns=0"], "turns must be >= 1"),
    (["--option", "layout=paper", "--option", "turns=7"], "an even number >= 2 for layout=paper"),
    (["--concurrency", "0"], "concurrency must be a whole number >= 1"),
    (["--tasks", "0"], "tasks and workers must be at least 1"),
])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path: Path, capsys, args: list[str], message: str) -> None:
    corpus = _corpus(tmp_path, [json.dumps({"_id": "a", "text": "Text."})])
    assert main(["synthesize", "mtr", "--corpus", str(corpus), "--out", str(tmp_path / "out"), *args]) == 2
    assert message in _one_error(capsys)


@pytest.mark.parametrize(("lines", "message"), [
    (['{"_id": "a", "text": "ok"}', '{"_id": "b", "text": ""}'], "corpus.jsonl:2: document b: empty text"),
    (['{"_id": "a", "text": "ok"}', 'not json'], "corpus.jsonl:2: invalid JSON"),
    (['{"_id": "a", "text": "ok"}', '{"_id": "a", "text": "again"}'], "corpus.jsonl:2: duplicate document id 'a'"),
    (['["a", "b"]'], "corpus.jsonl:1: expected a JSON object, got list"),
])
def test_bad_corpus_lines_name_file_and_line(tmp_path: Path, capsys, lines: list[str], message: str) -> None:
    corpus = _corpus(tmp_path, lines)
    out = tmp_path / "out"
    assert main(["synthesize", "mtr", "--corpus", str(corpus), "--out", str(out), "--no-progress"]) == 2
    assert message in _one_error(capsys)
    assert not (out / "curate" / "report.json").exists() and not list(out.rglob("*.tmp"))


def test_missing_corpus_and_out_that_is_a_file(tmp_path: Path, capsys) -> None:
    assert main(["synthesize", "mtr", "--out", str(tmp_path / "out")]) == 2
    assert "the curate stage needs --corpus SOURCE" in _one_error(capsys)
    assert main(["synthesize", "mtr", "--corpus", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o")]) == 2
    assert "nope.jsonl: no such file or folder" in _one_error(capsys)
    (tmp_path / "file").write_text("x")
    corpus = _corpus(tmp_path, [json.dumps({"_id": "a", "text": "Text."})])
    assert main(["synthesize", "mtr", "--corpus", str(corpus), "--out", str(tmp_path / "file")]) == 2
    assert "--out names an existing file, not a folder" in _one_error(capsys)
