"""faiss indexes over a dense retriever's document embeddings, including a compressed one for corpora whose
float32 vectors do not fit in memory.

``flat`` (``IndexFlatIP``, exact), ``hnsw`` (``IndexHNSWFlat``) and ``ivf`` (``IndexIVFFlat``) hold every float32
vector in memory. ``ivfpq`` (``IndexIVFPQ``, inner product) holds per document only ``m`` codes of ``nbits`` bits
(the product-quantised residual to its coarse centroid: ``m * nbits / 8`` bytes; defaults ``m = dim / 8``,
``nbits = 8``). It is built from the memory-mapped cache entry without ever holding all float32 vectors in memory
(coarse quantiser and codebooks trained on a seeded random sample of at most ``train_rows`` rows, vectors then added
``add_rows`` at a time), stored beside the entry and read back with faiss ``IO_FLAG_MMAP`` (its inverted lists, the
codes, memory-mapped from the file). It is approximate twice over: a search visits only the ``nprobe`` coarse lists
nearest to the query and ranks inside them by PQ-approximated scores, so a document of the exact top-k can be missed.
Reported scores stay exact: the ``rerank * k`` (plus a margin) best candidates are scored again by dot products with
their stored float32 rows before the top-k cut, so every document returned has its brute-force score (up to float32
rounding); only which documents are found is approximate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Rows added to an IVF-PQ index at a time (64k rows of 384 float32 = 96 MiB).
ADD_ROWS = 1 << 16
#: Rows an IVF-PQ index is trained on at most (k-means wants about 39 per centroid).
TRAIN_ROWS = 100_000
_SEED = 1234


def pq_shape(dim: int, train: int, m: int | None = None, nbits: int | None = None) -> tuple[int, int]:
    """``(m, nbits)``: ``m`` the given one (must divide ``dim``), else the largest divisor of ``dim`` up to
    ``dim / 8``; ``nbits`` the given one, else 8, lowered for small samples so that each of the ``2**nbits``
    centroids of a sub-quantiser has about 39 training rows (at least 4 bits)."""
    if m is None:
        m = max(d for d in range(1, max(1, dim // 8) + 1) if dim % d == 0)
    elif m < 1 or dim % m:
        raise ValueError(f"pq_m must divide the embedding dimension {dim}, got {m}")
    if nbits is None:
        nbits = int(min(8, max(4, np.floor(np.log2(max(2, train // 39))))))
    elif not 1 <= nbits <= 16:
        raise ValueError(f"pq_nbits must be between 1 and 16, got {nbits}")
    return int(m), int(nbits)


def sample_rows(embeddings: np.ndarray, rows: int, seed: int = _SEED) -> np.ndarray:
    """A seeded random sample of ``rows`` rows (all when fewer), read in row order from a memory-mapped array."""
    n = embeddings.shape[0]
    if n <= rows:
        return np.ascontiguousarray(embeddings, dtype=np.float32)
    picked = np.sort(np.random.default_rng(seed).choice(n, size=rows, replace=False))
    return np.ascontiguousarray(embeddings[picked], dtype=np.float32)


def build(kind: str, embeddings: np.ndarray, nlist: int, hnsw_m: int = 32, pq_m: int | None = None,
          pq_nbits: int | None = None, train_rows: int | None = None, add_rows: int | None = None) -> Any:  # fmt: skip
    """A new faiss index of ``kind`` (flat, hnsw, ivf, ivfpq) over ``embeddings``, vectors added ``add_rows`` at a
    time; ``ivf`` and ``ivfpq`` are trained on ``sample_rows(embeddings, train_rows)`` (defaults: ``ADD_ROWS``,
    ``TRAIN_ROWS``)."""
    import faiss

    train_rows, add_rows = train_rows or TRAIN_ROWS, add_rows or ADD_ROWS
    dim = embeddings.shape[1]
    if kind == "flat":
        index = faiss.IndexFlatIP(dim)
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
    else:
        sample = sample_rows(embeddings, max(train_rows, nlist))
        if kind == "ivf":
            index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
        else:
            m, nbits = pq_shape(dim, len(sample), pq_m, pq_nbits)
            index = faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, nlist, m, nbits, faiss.METRIC_INNER_PRODUCT)
        index.train(sample)
        del sample
    for start in range(0, embeddings.shape[0], add_rows):
        index.add(np.ascontiguousarray(embeddings[start : start + add_rows], dtype=np.float32))
    return index


def name(kind: str, nlist: int, hnsw_m: int, dim: int, rows: int, pq_m: int | None, pq_nbits: int | None) -> str:
    """File name part of a stored index: its kind and every parameter that shapes it."""
    if kind == "ivfpq":
        m, nbits = pq_shape(dim, min(rows, max(TRAIN_ROWS, nlist)), pq_m, pq_nbits)
        return f"ivfpq-{nlist}x{m}x{nbits}"
    return {"flat": "flat", "hnsw": f"hnsw-m{hnsw_m}", "ivf": f"ivf-{nlist}"}[kind]


def exact_scores(embeddings: np.ndarray, query: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(positions, scores)`` of the given documents re-scored exactly (dot products with their stored rows, read
    in row order)."""
    positions = np.unique(positions[positions >= 0]).astype(np.int64)
    return positions, (embeddings[positions] @ query).astype(np.float64)
