"""The dense retriever's ONNX backend (``backend=onnx``) against torch on the shipped StratRAG data: the same top-10
documents for >= 99% of the questions, its own embeddings-cache entries and results record, its unpadded runs
giving the padded batch's outputs, and a one-line exit 2 for a backend that does not exist."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from convrag.cli import main
from convrag.core.errors import ConvragError
from convrag.evaluation.data import Folder
from convrag.retrievers import DenseRetriever
from convrag.retrievers import embed as disk
from convrag.retrievers.backends import ROWS_PER_RUN, load_onnx_model
from convrag.retrievers.encoders import default_model_path

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module", autouse=True)
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """ONNX exports of this module go to a folder of this session, never to ~/.cache."""
    root = tmp_path_factory.mktemp("onnx-exports")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CONVRAG_ONNX_CACHE", str(root))
        yield root


def _stratrag(folder: Path) -> tuple[list[dict], dict[str, str], dict[str, list[str]]]:
    built = Folder(folder)
    corpus = built.checked_rows("corpus", "validation", {"_id": str, "text": str})
    rows = built.rows("queries", "validation")
    return corpus, {r["_id"]: r["text"] for r in rows}, {r["_id"]: list(r["pool"]) for r in rows}


@pytest.mark.slow  # 450 documents encoded twice: 204 s on 2 busy cores (the torch side is shared in a full run)
def test_onnx_gives_torch_top10_on_stratrag(stratrag_first30: Path, onnx_cache: Path) -> None:
    corpus, questions, pools = _stratrag(stratrag_first30)
    torch_, onnx_ = DenseRetriever().index(corpus), DenseRetriever(backend="onnx").index(corpus)
    # whole corpus (450 documents): the same 10 doc ids for >= 99% of the 30 questions (measured: all 30)
    a, b = torch_.search(questions, top_k=10), onnx_.search(questions, top_k=10)
    assert sum(set(a[q]) == set(b[q]) for q in questions) >= 0.99 * len(questions)
    # each question's pool (15, about 5 of them pads of one text, tied up to float rounding): the same 10 texts
    text = {r["_id"]: r["text"] for r in corpus}
    a, b = torch_.search(questions, top_k=10, pools=pools), onnx_.search(questions, top_k=10, pools=pools)
    same = [sorted(map(text.get, a[q])) == sorted(map(text.get, b[q])) for q in questions]
    assert sum(same) >= 0.99 * len(questions)
    # its own cache entry: the backend is part of the key (torch keys unchanged) and recorded in meta.json
    assert "backend" not in torch_.document_settings() and onnx_.document_settings()["backend"] == "onnx"
    assert onnx_.cache_entry != torch_.cache_entry
    meta = json.loads((Path(onnx_.cache_entry) / "meta.json").read_text())
    assert meta["backend"] == "onnx" and meta["backend_record"]["digest"].startswith("sha256:")
    # results name it; the export is kept where $CONVRAG_ONNX_CACHE says, checked against torch when made
    record = onnx_.settings()["backend"]
    assert record["name"] == "onnx" and record["runtime"].startswith("onnxruntime ")
    assert torch_.settings()["backend"]["name"] == "torch"
    (export,) = onnx_cache.iterdir()
    assert json.loads((export / "meta.json").read_text())["probe_max_difference"] < 1e-3


@pytest.mark.slow  # makes the ONNX export (16 s on 2 busy cores) unless the StratRAG test above has made it
def test_unpadded_runs_give_the_padded_batch_outputs() -> None:
    model = load_onnx_model(default_model_path())
    # 9 texts of 20 to 256 tokens (truncated), in an order unlike their lengths; the last run is partial
    text = "Sentence {} about the Eiffel Tower, built in Paris for the 1889 World's Fair. "
    texts = [text.format(i) * (i % 4 * 9 + 1) for i in range(2 * ROWS_PER_RUN + 1)]
    features = model.tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    onnx_ = model[0].model
    got = onnx_(**features)["last_hidden_state"].numpy()
    whole = onnx_.session.run(None, {n: features[n].numpy() for n in onnx_.inputs})[0]  # one padded run
    mask = features["attention_mask"].numpy().astype(bool)
    assert got.shape == whole.shape and mask.sum(axis=1).min() < mask.shape[1] / 4
    assert float(np.abs(got - whole)[mask].max()) < 1e-5  # real tokens: the same up to float rounding
    left = {n: features[n].flip(1) for n in onnx_.inputs}  # padded on the left: run whole, as exported
    expected = onnx_.session.run(None, {n: v.numpy() for n, v in left.items()})[0]
    assert np.array_equal(onnx_(**left)["last_hidden_state"].numpy(), expected)


def test_cache_key_differs_by_backend() -> None:
    settings = {**DenseRetriever().document_settings(), "corpus": "1:x"}
    onnx_settings = {**DenseRetriever(backend="onnx").document_settings(), "corpus": "1:x"}
    assert disk.entry_key(settings) != disk.entry_key(onnx_settings)


@pytest.mark.parametrize("command", ["evaluate", "embed"])
def test_unknown_backend_is_one_line_exit_2(stratrag_first30: Path, command: str, capsys) -> None:
    assert main([command, str(stratrag_first30), "--dense-option", "backend=tensorrt", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [f"convrag {command}: error: --dense-option backend: unknown dense backend "
                                "'tensorrt'; choose one of torch, onnx"]  # fmt: skip
    with pytest.raises(ConvragError, match="unknown dense backend 'TPU'"):
        DenseRetriever(backend="TPU")
