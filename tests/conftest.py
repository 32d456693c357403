"""Shared test settings: offline Hub, the shared real data folder (read in place, never copied)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["tests.browser"]  # the browser fixture: headless Chromium for the Spaces' tests

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Dense figures come from float32 arithmetic whose kernels are picked by CPU: torch's (encoding) and numpy's
# OpenBLAS (scoring). On an AVX-512 CPU (measured on an AMD EPYC) the last bits differ from the AVX2 kernels and
# near-tied documents swap ranks: 86 MTRAG dense figures of tests/regression moved, by up to 0.0023 (57 with only
# OpenBLAS pinned). The recorded figures are AVX2's: pin both to those kernels so that every x86 machine
# reproduces them exactly (set before numpy or torch is first imported).
os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell")
os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("CONVRAG_SHARED_DATA", REPO.parent / "shared" / "data"))
#: the embedded placeholder as a judge, one reply per request: a re-ask sends its rambling reply back with the error
#: appended, several times the tokens, and only rambles again (the re-asks are tested in tests/llm/test_default.py)
PLACEHOLDER_JUDGE = "default;structured_attempts=1"


@pytest.fixture(scope="session", autouse=True)
def embeddings_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Dense embeddings kept on disk go to a folder of this session, never to ~/.cache (unless set outside)."""
    os.environ.setdefault("CONVRAG_EMBEDDINGS_CACHE", str(tmp_path_factory.mktemp("embeddings-cache")))
    return Path(os.environ["CONVRAG_EMBEDDINGS_CACHE"])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not DATA.exists():
        raise pytest.UsageError(f"shared data folder not found at {DATA} (set CONVRAG_SHARED_DATA)")


def build_mtrag(tmp_path_factory: pytest.TempPathFactory, config: str) -> Path:
    """MTRAG's ``config`` built from the shared data as a convrag folder in a new temporary folder."""
    from convrag.cli import main

    out = tmp_path_factory.mktemp("built") / f"mtrag-{config}"
    assert main(["build", "mtrag", "--source", str(DATA / "mtrag"), "--config", config, "--out", str(out)]) == 0
    return out


def json_strings(value: object) -> list[str]:
    """Every string inside a JSON value: the keys of its objects and its string leaves."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (str(k), *json_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in json_strings(v)]
    return [value] if isinstance(value, str) else []


@pytest.fixture(scope="session")
def mtrag_cited(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The passages MTRAG conversations cite (2,021), built as a convrag corpus folder (config all-cited-corpus)."""
    return build_mtrag(tmp_path_factory, "all-cited-corpus")


@pytest.fixture(scope="session")
def stratrag_first30(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """StratRAG built from the first 30 HotpotQA dev-distractor records (read only: tests must not write into it)."""
    from convrag.cli import main

    out = tmp_path_factory.mktemp("built") / "stratrag"
    source = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"
    assert main(["build", "stratrag", "--source", str(source), "--out", str(out)]) == 0
    return out
