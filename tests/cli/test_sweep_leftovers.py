"""Issue 40's leftover sweep cases, each through the CLI: one line naming the option or path, exit 2, before any
model is loaded or document encoded, and nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from convrag.cli import main
from tests.conftest import DATA

DEV = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"


@pytest.fixture(scope="module")
def strat(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sweep") / "stratrag"
    assert main(["build", "stratrag", "--source", f"validation={DEV}", "--option", "max_validation=5",
                 "--out", str(out)]) == 0  # fmt: skip
    return out


def _one_line(capsys: pytest.CaptureFixture[str], code: int, command: str, *parts: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "Traceback" not in err[0], err
    assert err[0].startswith(f"convrag {command}: error: "), err[0]
    for part in parts:
        assert part in err[0], (part, err[0])
    return err[0]


@pytest.mark.parametrize("command", ["evaluate", "embed"])
def test_an_unknown_dense_option_key_is_one_line(strat, tmp_path, capsys, command) -> None:
    argv = [command, str(strat), "--dense-option", "poolling=mean", "--no-progress"]
    argv += ["--retrievers", "dense", "--out", str(tmp_path / "o")] if command == "evaluate" else \
        ["--cache", str(tmp_path / "cache")]
    _one_line(capsys, main(argv), command, "--dense-option: unknown key 'poolling'", "pooling", "max_seq_length")
    assert not (tmp_path / "o").exists() and not (tmp_path / "cache").exists()


def test_embed_cache_that_is_a_file_is_refused_before_encoding(strat, tmp_path, capsys) -> None:
    cache = tmp_path / "cache.bin"
    cache.write_bytes(b"mine")
    _one_line(capsys, main(["embed", str(strat), "--cache", str(cache), "--no-progress"]), "embed",
              f"--cache {cache}: is a file, not a folder")
    assert cache.read_bytes() == b"mine"


def test_a_mistyped_local_folder_is_no_such_folder(strat, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(strat.parent)
    _one_line(capsys, main(["evaluate", f"{strat.name}g", "--retrievers", "bm25", "--out", str(tmp_path / "o")]),
              "evaluate", f"{strat.name}g: no such folder")
    (strat.parent / "out").mkdir(exist_ok=True)
    line = _one_line(capsys, main(["evaluate", "out/stratragg", "--out", str(tmp_path / "o")]), "evaluate",
                     "out/stratragg: no such folder (read as a local path, since out/ is a folder here")
    assert "Hub" in line and not (tmp_path / "o").exists()


@pytest.mark.parametrize("pipeline", ["mtr", "recor"])
def test_an_empty_input_file_is_named(tmp_path, capsys, pipeline) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n", encoding="utf-8")
    given = ["--corpus", str(empty), "--questioner", "fake", "--responder", "fake", "--polisher", "fake"] \
        if pipeline == "mtr" else ["--input", str(empty), "--llm", "fake"]
    code = main(["synthesize", pipeline, *given, "--out", str(tmp_path / "o"), "--no-progress"])
    _one_line(capsys, code, "synthesize", f"{empty}: the file is empty (no record in it)")
    assert not (tmp_path / "o").exists()


def test_a_later_stage_alone_on_a_fresh_folder_says_which_stage_to_run(tmp_path, capsys) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "title": "A", "text": "' + "word " * 300 + '"}\n', encoding="utf-8")
    code = main(["synthesize", "mtr", "--corpus", str(corpus), "--out", str(tmp_path / "o"), "--stages", "converse",
                 "--questioner", "fake", "--responder", "fake", "--no-progress"])
    _one_line(capsys, code, "synthesize", "stage 'cluster' has not finished in this run folder",
              "run the earlier stages first")


def test_a_deleted_queries_file_is_named_not_the_qrels(tmp_path, capsys) -> None:
    import shutil

    built = tmp_path / "recor"
    assert main(["build", "recor", "--source", str(DATA / "recor" / "sample"), "--out", str(built)]) == 0
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    for path in (copy / "law-queries").glob("*.parquet"):
        path.unlink()
    capsys.readouterr()
    line = _one_line(capsys, main(["evaluate", str(copy), "--retrievers", "bm25", "--out", str(tmp_path / "o")]),
                     "evaluate", "config 'law-queries'", "no data file matches law-queries/test-*")
    assert "qrels" not in line and not (tmp_path / "o").exists()
