"""The leaderboard tests' shared setup: two `convrag evaluate` results folders of the shipped RECOR sample, their
local collection and its board, built once for the package (the board folder is also a Space: ``build --space``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convrag.cli import main
from tests.conftest import DATA


@pytest.fixture(scope="package")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two `convrag evaluate` results folders of the RECOR sample: entry ``lexical`` (bm25, random) and ``bm25s``."""
    root = tmp_path_factory.mktemp("leaderboard")
    built = root / "recor"
    assert main(["build", "recor", "--source", str(DATA / "recor" / "sample"), "--out", str(built)]) == 0
    out = {}
    for name, retrievers in (("lexical", "bm25,random"), ("bm25s", "bm25s")):
        out[name] = root / name
        argv = ["evaluate", str(built), "--retrievers", retrievers, "--strategies", "baseline,history",
                "--bootstrap", "20", "--no-progress", "--out", str(out[name])]  # fmt: skip
        assert main(argv) == 0
    return out


@pytest.fixture(scope="package")
def board_space(results: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The board of both entries' local collection (``<root>/collection``), built with ``--space`` into
    ``<root>/board``: that folder."""
    root = tmp_path_factory.mktemp("board")
    for folder in results.values():
        assert main(["leaderboard", "add", str(folder), "--collection", str(root / "collection")]) == 0
    argv = ["leaderboard", "build", "--collection", str(root / "collection"), "--out", str(root / "board"),
            "--bootstrap", "200", "--space"]  # fmt: skip
    assert main(argv) == 0
    return root / "board"


@pytest.fixture(scope="package")
def board(board_space: Path) -> tuple[Path, dict]:
    """The local collection of both entries and its board (board.json)."""
    return board_space.with_name("collection"), json.loads((board_space / "board.json").read_text(encoding="utf-8"))
