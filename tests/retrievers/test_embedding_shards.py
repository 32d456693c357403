"""Corpora beyond one machine: sharded encoding assembled without re-encoding, and the compressed IVF-PQ index
built in chunks from the memory-mapped cache entry, stored on disk and read back."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import faiss
import numpy as np
import pytest

from convrag.cli import main
from convrag.core.errors import ConvragError
from convrag.retrievers import DenseRetriever
from convrag.retrievers import faiss_index as fi
from convrag.retrievers.dense import _EMBEDDINGS
from convrag.retrievers.embed import CacheWarning
from convrag.retrievers.embed_shards import bounds, parse_shard
from tests.retrievers.test_embedding_cache import cache, documents, encoded, entries, small  # noqa: F401 (fixtures)

DIM = 384


def fake_vectors(texts: list[str]) -> np.ndarray:
    """Deterministic unit vectors of low intrinsic dimension (24) from each text alone, as an encoder would."""
    basis = np.random.default_rng(7).standard_normal((24, DIM)).astype(np.float32)
    seeds = [int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little") for t in texts]
    rows = [np.random.default_rng(s).standard_normal(24).astype(np.float32) @ basis for s in seeds]  # row by row:
    return np.stack([(v / np.linalg.norm(v)).astype(np.float32) for v in rows])  # bits independent of batching


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """DenseRetriever.encode replaced by ``fake_vectors``; (kind, number of texts) of every call."""
    calls: list[tuple[str, int]] = []

    def encode(self, texts, kind="document", show_progress=False):
        calls.append((kind, len(texts)))
        return fake_vectors([f"{kind}: {t}" for t in texts])

    monkeypatch.setattr(DenseRetriever, "encode", encode)
    return calls


def corpus(n: int) -> list[dict[str, str]]:
    return [{"_id": f"d{i:05d}", "text": f"document number {i}"} for i in range(n)]


def test_shard_parsing_and_slices() -> None:
    assert parse_shard("2/8") == (2, 8) and parse_shard(" 1 / 1 ") == (1, 1)
    for bad in ("0/3", "4/3", "1-3", "a/b", ""):
        with pytest.raises(ConvragError, match="K/N"):
            parse_shard(bad)
    for rows, n in ((10, 3), (75, 3), (2, 5)):  # slices are contiguous, in order, and cover every row once
        edges = [bounds(rows, k, n) for k in range(1, n + 1)]
        assert edges[0][0] == 0 and edges[-1][1] == rows
        assert all(edges[i][1] == edges[i + 1][0] for i in range(n - 1))


@pytest.mark.slow
def test_sharded_cli_then_assembly_equals_the_unsharded_entry(small, cache, encoded, tmp_path, capsys) -> None:  # noqa: F811
    sharded, whole = tmp_path / "sharded", tmp_path / "whole"
    for k in (1, 2, 3):  # three machines, one shared cache folder
        assert main(["embed", str(small), "--cache", str(sharded), "--shard", f"{k}/3", "--no-progress"]) == 0
        assert f"encoded (shard {k}/3)" in capsys.readouterr().out
    assert [n for kind, n in encoded if kind == "document"] == [25, 25, 25]  # each machine: its slice only
    names = [p.name for p in entries(sharded)]
    assert len(names) == 1 and names[0].endswith(".shards")  # only shards so far, no full entry
    _EMBEDDINGS.clear()
    encoded.clear()
    assert main(["embed", str(small), "--cache", str(sharded), "--no-progress"]) == 0
    assert "assembled (shards)" in capsys.readouterr().out and documents(encoded) == 0
    assert main(["embed", str(small), "--cache", str(whole), "--no-progress"]) == 0
    [a], [b] = entries(sharded), entries(whole)  # the shard folder is gone once assembled
    assert a.name == b.name and (a / "ids.json").read_text() == (b / "ids.json").read_text()
    x, y = np.load(a / "embeddings.npy"), np.load(b / "embeddings.npy")
    assert x.shape == y.shape == (75, DIM) and np.allclose(x, y, atol=1e-6)  # slices may batch differently
    assert main(["embed", str(small), "--shard", "4/3"]) == 2


def test_evaluate_assembles_shards_bitwise_without_encoding(fake, tmp_path) -> None:
    docs = corpus(10)
    unsharded = DenseRetriever(cache_dir=tmp_path / "one", show_progress=False).index(docs)
    for k in (1, 2, 3):
        r = DenseRetriever(cache_dir=tmp_path / "three", show_progress=False).encode_shard(docs, (k, 3))
        assert r.cache_status == f"encoded (shard {k}/3)" and not r.is_indexed
    assert [n for _, n in fake] == [10, 3, 3, 4]
    _EMBEDDINGS.clear()
    fake.clear()
    r = DenseRetriever(cache_dir=tmp_path / "three", show_progress=False).index(docs)
    assert r.cache_status == "assembled (shards)" and fake == [] and r.encoded_documents == 0
    a, b = Path(r.cache_entry), Path(unsharded.cache_entry)
    assert a.name == b.name and (a / "embeddings.npy").read_bytes() == (b / "embeddings.npy").read_bytes()
    assert json.loads((a / "meta.json").read_text())["sha256"] == json.loads((b / "meta.json").read_text())["sha256"]
    assert not (tmp_path / "three" / f"{a.name}.shards").exists()
    query = {"q": "document number 4"}
    assert r.search(query, top_k=3) == unsharded.search(query, top_k=3)


@pytest.mark.parametrize("damage", ["missing", "flip", "other-slice"])
def test_a_missing_or_bad_shard_is_encoded_alone(fake, tmp_path, damage) -> None:
    docs, root = corpus(10), tmp_path / "cache"
    for k in (1, 2, 3):
        DenseRetriever(cache_dir=root, show_progress=False).encode_shard(docs, (k, 3))
    folder = next(root.glob("*.shards"))
    if damage == "missing":
        (folder / "2-of-3" / "embeddings.npy").unlink()
    elif damage == "flip":
        data = bytearray((folder / "2-of-3" / "embeddings.npy").read_bytes())
        data[-3] ^= 0x10
        (folder / "2-of-3" / "embeddings.npy").write_bytes(bytes(data))
    else:  # shard 1's rows filed under shard 2's name: its ids differ from slice 2's
        (folder / "2-of-3").rename(tmp_path / "gone")
        (folder / "1-of-3").rename(folder / "2-of-3")
    _EMBEDDINGS.clear()
    fake.clear()
    with pytest.warns(CacheWarning, match="2/3"):
        r = DenseRetriever(cache_dir=root, show_progress=False).index(docs)
    expected = fake_vectors([f"document: {d['text']}" for d in docs])
    assert r.cache_status == "assembled (shards)" and np.array_equal(r.embeddings, expected)
    assert fake == ([("document", 3)] if damage != "other-slice" else [("document", 3), ("document", 3)])
    assert r.encoded_documents == sum(n for _, n in fake)


class Rows:
    """A memory-mapped array that records how many rows each read asks for."""

    def __init__(self, array: np.ndarray) -> None:
        self.array, self.shape, self.reads = array, array.shape, []

    def __getitem__(self, item):
        out = self.array[item]
        self.reads.append(len(out))
        return out


@pytest.fixture
def one_thread():
    """faiss on one thread (its OpenMP threads spin when the cores are shared, making tests slow)."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


def test_ivfpq_is_built_in_chunks_from_the_memory_mapped_entry(tmp_path, one_thread) -> None:
    path = tmp_path / "e.npy"
    np.save(path, fake_vectors([f"t{i}" for i in range(3000)]))
    rows = Rows(np.load(path, mmap_mode="r"))
    index = fi.build("ivfpq", rows, nlist=16, train_rows=1000, add_rows=400)
    assert index.ntotal == 3000 and index.is_trained
    assert rows.reads == [1000] + [400] * 7 + [200]  # a training sample, then chunks: never the whole array
    assert fi.pq_shape(DIM, 1000) == (48, 4) and index.code_size == 24  # 24 bytes a document, not 1,536


def test_ivfpq_search_is_reused_from_disk_and_close_to_exact(fake, tmp_path, monkeypatch, one_thread) -> None:
    docs = corpus(3000)
    queries = {f"q{j}": f"question {j}" for j in range(40)}
    options = {"cache_dir": tmp_path, "faiss_threshold": 100, "faiss_index": "ivfpq", "ivf_nlist": 16, "nprobe": 8,
               "show_progress": False}  # fmt: skip
    built, flags = [], []
    original_new, original_read = DenseRetriever._new_faiss, faiss.read_index
    monkeypatch.setattr(DenseRetriever, "_new_faiss", lambda self: built.append(1) or original_new(self))
    monkeypatch.setattr(faiss, "read_index", lambda path, flag=0: flags.append(flag) or original_read(path, flag))
    first = DenseRetriever(**options).index(docs)
    approx = first.search(queries, top_k=10)
    stored = list(Path(first.cache_entry).glob("faiss-ivfpq-16x48x*.index"))
    assert built == [1] and len(stored) == 1 and flags and set(flags) == {faiss.IO_FLAG_MMAP}
    _EMBEDDINGS.clear()
    again = DenseRetriever(**options).index(docs)
    assert again.search(queries, top_k=10) == approx and built == [1]  # read back from disk, not built
    exact = DenseRetriever(**{**options, "faiss_threshold": 10**9}).index(docs).search(queries, top_k=10)
    overlap = [len(set(approx[q]) & set(exact[q])) / 10 for q in queries]
    print(f"IVF-PQ recall@10 against exact search: mean {np.mean(overlap):.3f}, min {min(overlap):.1f}")
    assert np.mean(overlap) >= 0.8
    for q in queries:  # every document found carries its exact score
        common = set(approx[q]) & set(exact[q])
        assert all(abs(approx[q][d] - exact[q][d]) < 1e-5 for d in common)
    assert DenseRetriever(**options).settings()["pq_rerank"] == 4
