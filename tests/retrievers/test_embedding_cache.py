"""Document embeddings kept on disk: reused across runs, retrievers and `convrag embed`; keyed by every encoding
setting; never trusted when damaged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from convrag.cli import main
from convrag.core.errors import ConvragError
from convrag.retrievers import DenseRetriever
from convrag.retrievers.dense import _EMBEDDINGS
from convrag.retrievers.embed import CacheWarning, EmbeddingStore, model_identity, resolve_device
from convrag.retrievers.encoders import default_model_path
from tests.conftest import DATA

DEV = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"
CORPUS = [
    {"_id": "nitrogen", "title": "Nitrogen", "text": "Liquid nitrogen boils at 77 kelvin at atmospheric pressure."},
    {"_id": "eiffel", "title": "Eiffel Tower", "text": "A wrought-iron lattice tower in Paris built for 1889."},
    {"_id": "bread", "title": "Banana bread", "text": "A recipe for banana bread with walnuts and cinnamon."},
]
QUERIES = {"q1": "At what temperature does nitrogen boil?", "q2": "Who built the tower in Paris?"}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """StratRAG's first 5 dev records (75 pool documents), built."""
    out = tmp_path_factory.mktemp("embed") / "stratrag"
    assert main(["build", "stratrag", "--source", f"validation={DEV}", "--option", "max_validation=5",
                 "--out", str(out)]) == 0  # fmt: skip
    return out


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh disk cache and an empty in-process cache (as in a new process)."""
    monkeypatch.setenv("CONVRAG_EMBEDDINGS_CACHE", str(tmp_path / "cache"))
    _EMBEDDINGS.clear()
    return tmp_path / "cache"


@pytest.fixture
def encoded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """(kind, number of texts) of every DenseRetriever.encode call."""
    calls: list[tuple[str, int]] = []
    original = DenseRetriever.encode

    def spy(self, texts, kind="document", *args, **kwargs):
        calls.append((kind, len(texts)))
        return original(self, texts, kind, *args, **kwargs)

    monkeypatch.setattr(DenseRetriever, "encode", spy)
    return calls


def documents(calls: list[tuple[str, int]]) -> int:
    return sum(n for kind, n in calls if kind == "document")


def entries(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if not p.name.startswith(".")) if root.exists() else []


def evaluate(folder: Path, out: Path, *extra: str) -> dict:
    assert main(["evaluate", str(folder), "--bootstrap", "10", "--no-progress", "--out", str(out), *extra]) == 0
    return json.loads((out / "results.json").read_text())


def runs(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out / "runs").iterdir())}


def test_second_evaluate_does_not_encode_the_corpus(small, cache, encoded, tmp_path) -> None:
    first = evaluate(small, tmp_path / "one", "--retrievers", "dense,hybrid")
    assert documents(encoded) == 75  # dense encoded the corpus once, hybrid took it from memory
    assert len(entries(cache)) == 1
    _EMBEDDINGS.clear()  # a new run: only the disk cache is left
    encoded.clear()
    second = evaluate(small, tmp_path / "two", "--retrievers", "dense,hybrid")
    assert documents(encoded) == 0 and encoded  # queries are still encoded
    assert runs(tmp_path / "two") == runs(tmp_path / "one")  # bitwise identical runs
    untimed = [{n: {k: v for k, v in s.items() if k != "seconds"} for n, s in r["systems"].items()}
               for r in (first, second)]  # fmt: skip
    assert untimed[0] == untimed[1]
    _EMBEDDINGS.clear()
    encoded.clear()
    evaluate(small, tmp_path / "three", "--retrievers", "hybrid")  # hybrid alone reads dense's entry
    assert documents(encoded) == 0
    assert runs(tmp_path / "three")["hybrid.trec"] == runs(tmp_path / "one")["hybrid.trec"]


def test_embed_then_evaluate_elsewhere(small, cache, encoded, tmp_path, capsys) -> None:
    moved = tmp_path / "moved"
    assert main(["embed", str(small), "--cache", str(tmp_path / "built-here"), "--batch-size", "8", "--device", "cpu",
                 "--no-progress"]) == 0  # fmt: skip
    assert "encoded" in capsys.readouterr().out and documents(encoded) == 75
    (tmp_path / "built-here").rename(moved)  # the cache folder copied to another place (or machine)
    _EMBEDDINGS.clear()
    encoded.clear()
    results = evaluate(small, tmp_path / "res", "--retrievers", "dense", "--embeddings-cache", str(moved),
                       "--batch-size", "4", "--device", "cpu")  # fmt: skip
    assert documents(encoded) == 0 and not entries(cache)
    config = results["systems"]["dense"]["config"]
    assert config["batch_size"] == 4 and config["device"] == "cpu"
    meta = json.loads(next(m for m in moved.glob("*/meta.json")).read_text())
    assert meta["batch_size"] == 8 and meta["rows"] == 75 and meta["device"] == "cpu"
    _EMBEDDINGS.clear()
    assert main(["embed", str(small), "--cache", str(moved), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "reused (disk)" in out and "(0 encoded" in out and documents(encoded) == 0
    assert main(["evaluate", str(small), "--device", "quantum", "--out", str(tmp_path / "x")]) == 2
    assert "device must be one of" in capsys.readouterr().err and not (tmp_path / "x").exists()
    assert main(["embed", str(small), "--batch-size", "0"]) == 2


def test_every_encoding_setting_and_the_corpus_make_a_new_key(cache, encoded, tmp_path) -> None:
    base = DenseRetriever(show_progress=False).index(CORPUS)
    assert documents(encoded) == 3
    _EMBEDDINGS.clear()
    again = DenseRetriever(show_progress=False).index(CORPUS)
    assert documents(encoded) == 3 and again.cache_status == "reused (disk)"
    assert np.array_equal(again.embeddings, base.embeddings) and again.cache_entry == base.cache_entry
    changed = [dict(row) for row in CORPUS]
    changed[2]["text"] += " Bake for an hour."
    variants = [
        ({"document_prompt": "passage: "}, CORPUS),
        ({"max_seq_length": 8}, CORPUS),
        ({"pooling": "cls"}, CORPUS),
        ({"use_title": False}, CORPUS),
        ({}, changed),
        ({}, list(reversed(CORPUS))),  # same texts, other order: rows would not match ids
    ]
    keys = {base.cache_entry}
    for options, corpus in variants:
        encoded.clear()
        r = DenseRetriever(show_progress=False, **options).index(corpus)
        assert documents(encoded) == 3 and r.cache_status == "encoded", options
        keys.add(r.cache_entry)
    assert len(keys) == len(variants) + 1 == len(entries(cache))


def test_model_identity_follows_files_not_paths(cache, encoded, tmp_path) -> None:
    original = Path(default_model_path())
    mirror, edited = tmp_path / "mirror", tmp_path / "edited"
    for root in (mirror, edited):
        for path in original.rglob("*"):
            if path.is_file():
                (root / path.relative_to(original)).parent.mkdir(parents=True, exist_ok=True)
                (root / path.relative_to(original)).symlink_to(path)
    (edited / "README.md").unlink()
    (edited / "README.md").write_text("another model card\n")
    assert model_identity(str(mirror)) == model_identity(str(original)) != model_identity(str(edited))
    base = DenseRetriever(show_progress=False).index(CORPUS)
    _EMBEDDINGS.clear()
    encoded.clear()
    assert DenseRetriever(model=str(mirror), show_progress=False).index(CORPUS).cache_entry == base.cache_entry
    assert documents(encoded) == 0  # the same files elsewhere: the entry is valid
    other = DenseRetriever(model=str(edited), show_progress=False).index(CORPUS)
    assert documents(encoded) == 3 and other.cache_entry != base.cache_entry


@pytest.mark.parametrize("damage", ["flip", "truncate", "ids", "meta"])
def test_damaged_entry_is_encoded_again_with_a_warning(cache, encoded, damage) -> None:
    base = DenseRetriever(show_progress=False).index(CORPUS)
    expected = np.array(base.embeddings)
    entry = Path(base.cache_entry)
    array = entry / "embeddings.npy"
    if damage == "flip":
        data = bytearray(array.read_bytes())
        data[-5] ^= 0x40
        array.write_bytes(bytes(data))
    elif damage == "truncate":
        array.write_bytes(array.read_bytes()[:200])
    elif damage == "ids":
        (entry / "ids.json").write_text(json.dumps(["nitrogen", "bread", "eiffel"]))
    else:
        (entry / "meta.json").write_text("{not json")
    _EMBEDDINGS.clear()
    encoded.clear()
    with pytest.warns(CacheWarning, match="encoding again"):
        again = DenseRetriever(show_progress=False).index(CORPUS)
    assert documents(encoded) == 3 and again.cache_status == "encoded"
    assert np.array_equal(again.embeddings, expected)
    _EMBEDDINGS.clear()
    assert EmbeddingStore(cache).load(entry.name, [r["_id"] for r in CORPUS]) is not None  # rewritten, valid


@pytest.mark.parametrize(("kind", "file"), [("hnsw", "faiss-hnsw-m32.index"), ("ivf", "faiss-ivf-1.index")])
def test_faiss_index_is_stored_beside_the_entry(cache, encoded, monkeypatch, kind, file) -> None:
    built = []
    original = DenseRetriever._new_faiss
    monkeypatch.setattr(DenseRetriever, "_new_faiss", lambda self: built.append(self.faiss_index) or original(self))

    def retriever() -> DenseRetriever:
        return DenseRetriever(faiss_threshold=1, faiss_index=kind, show_progress=False).index(CORPUS)

    first = retriever()
    expected = first.search(QUERIES, top_k=2)
    assert first.uses_faiss(2) and built == [kind] and (Path(first.cache_entry) / file).exists()
    _EMBEDDINGS.clear()
    assert retriever().search(QUERIES, top_k=2) == expected and built == [kind]  # read back, not built
    (Path(first.cache_entry) / file).write_bytes(b"broken")
    with pytest.warns(CacheWarning, match="building again"):
        assert retriever().search(QUERIES, top_k=2) == expected
    assert built == [kind, kind]


def test_cache_can_be_turned_off(cache, encoded, monkeypatch) -> None:
    assert DenseRetriever(cache_dir="none", show_progress=False).index(CORPUS).cache_entry is None
    _EMBEDDINGS.clear()
    assert DenseRetriever(cache=False, show_progress=False).index(CORPUS).cache_entry is None
    monkeypatch.setenv("CONVRAG_EMBEDDINGS_CACHE", "off")
    assert DenseRetriever(show_progress=False).index(CORPUS).cache_dir is None
    assert documents(encoded) == 9 and not entries(cache)
    with pytest.raises(ConvragError, match="device"):
        DenseRetriever(device="tpu")
    assert resolve_device("auto") is None and resolve_device("cpu") == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(ConvragError, match="no CUDA device"):
            resolve_device("cuda:0")


def test_embeddings_follow_a_corpus_text_change(cache, encoded, tmp_path) -> None:
    """StratRAG's first dev record (one query, a pool of 15 documents): one document's text becomes the query's
    text in the corpus Parquet file; the next evaluate encodes the corpus again and ranks that document first."""
    folder = tmp_path / "stratrag"
    assert main(["build", "stratrag", "--source", f"validation={DEV}", "--option", "max_validation=1",
                 "--out", str(folder)]) == 0  # fmt: skip

    def evaluate(name: str) -> dict[str, list[str]]:
        out = tmp_path / name
        assert main(["evaluate", str(folder), "--retrievers", "dense", "--bootstrap", "0", "--no-progress", "--out",
                     str(out)]) == 0  # fmt: skip
        ranked: dict[str, list[str]] = {}
        for line in (out / "runs" / "dense.trec").read_text().splitlines():
            qid, _, doc, *_ = line.split()
            ranked.setdefault(qid, []).append(doc)
        return ranked

    first = evaluate("one")
    assert documents(encoded) == 15
    queries = pq.read_table(next((folder / "queries").glob("*.parquet"))).to_pylist()
    query = queries[0]
    target = first[query["_id"]][-1]  # ranked last in its pool: the edit must lift it to the top
    path = next((folder / "corpus").glob("*.parquet"))
    table = pq.read_table(path)
    rows = [{**r, "text": query["text"]} if r["_id"] == target else r for r in table.to_pylist()]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)
    encoded.clear()
    second = evaluate("two")  # the same process: the in-memory cache must not serve the old vectors either
    assert documents(encoded) >= 1
    assert second[query["_id"]][0] == target != first[query["_id"]][0]
    assert len(list(cache.iterdir())) == 2
    _EMBEDDINGS.clear()  # a new process: the disk cache holds the edited corpus's entry
    encoded.clear()
    third = evaluate("three")
    assert documents(encoded) == 0 and third == second
    assert (tmp_path / "two" / "runs" / "dense.trec").read_bytes() == (tmp_path / "three" / "runs" /
                                                                       "dense.trec").read_bytes()  # fmt: skip
