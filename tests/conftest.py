"""Shared test settings: offline Hub, the shared real data folder (read in place, never copied)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("CONVRAG_SHARED_DATA", REPO.parent / "shared" / "data"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not DATA.exists():
        raise pytest.UsageError(f"shared data folder not found at {DATA} (set CONVRAG_SHARED_DATA)")


@pytest.fixture(scope="session")
def mtrag_cited(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The passages MTRAG conversations cite (2,021), built as a convrag corpus folder (config all-cited-corpus)."""
    from convrag.cli import main

    out = tmp_path_factory.mktemp("built") / "mtrag"
    assert main(["build", "mtrag", "--source", str(DATA / "mtrag"), "--config", "all-cited-corpus",
                 "--out", str(out)]) == 0
    return out
