"""k-nearest-neighbour graph of document embeddings, the input of the greedy traversal clustering.

Definition: row ``i`` of the result lists the ids of the ``k`` vectors nearest to vector ``i`` by squared L2
distance, nearest first, the query itself included (it is usually at rank 0; an exact duplicate may tie with it).
MTR-Suite builds this graph with faiss ``IndexFlatL2`` and ``k = 100``; only the order is used, the distances are
dropped. For unit-normalised embeddings, L2 order equals cosine order. Indexes: ``"flat"`` is exact (O(N^2 d));
``"hnsw"`` (``IndexHNSWFlat``) and ``"ivf"`` (``IndexIVFFlat``) are approximate and much faster on large corpora.

Determinism: a given faiss build returns the same graph for the same vectors, options and thread count. faiss
computes distances with BLAS (``|x|^2 + |y|^2 - 2 x.y``) or plain loops depending on each search call's size, and
BLAS rounding depends on the matrix shapes, so near ties (gaps around 1e-7) could flip with the query batch size;
queries are therefore sent as whole faiss query blocks (4096 rows) plus the final partial block on its own, which
makes the result independent of ``batch_size``. IVF is seeded (training sample and k-means); HNSW insertion runs on
several threads, so its neighbours can vary slightly between runs unless ``threads=1``. Memory: the ``N x k`` int32
result plus faiss's index (a copy of the vectors); distances live only for one batch at a time.
"""

from __future__ import annotations

import math

import numpy as np
from tqdm.auto import tqdm

from convrag.core.errors import ConvragError
from convrag.core.progress import label

#: Index names accepted by :func:`knn_graph`.
INDEXES = ("flat", "hnsw", "ivf")
#: The ``index_options`` :func:`knn_graph` takes: key -> (least whole number, None allowed).
INDEX_OPTIONS = {"nlist": (1, True), "nprobe": (1, False), "hnsw_m": (2, False), "ef_search": (1, False),
                 "train_size": (1, True), "batch_size": (1, False), "threads": (1, True)}


def check_index(index: str, options: dict[str, object]) -> None:
    """Refuse an unknown ``index`` or ``index_options`` key, or a value out of its range."""
    if index not in INDEXES:
        raise ConvragError(f"index must be one of {', '.join(INDEXES)}, got {index!r}")
    for key, value in options.items():
        if key not in INDEX_OPTIONS:
            raise ConvragError(f"index_options: unknown key {key!r}; accepted: {', '.join(INDEX_OPTIONS)}")
        low, none_ok = INDEX_OPTIONS[key]
        if value is None and none_ok:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConvragError(f"index_options: {key} must be a whole number >= {low}, got {value!r}")


def _check_vectors(vectors: np.ndarray) -> np.ndarray:
    try:
        x = np.ascontiguousarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise ConvragError(f"knn_graph: vectors must be a numeric array ({exc})") from None
    if x.ndim != 2:
        raise ConvragError(f"knn_graph: vectors must be 2-D (N, d), got shape {x.shape}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ConvragError(f"knn_graph: vectors must be non-empty, got shape {x.shape}")
    for start in range(0, x.shape[0], 65536):
        if not np.isfinite(x[start:start + 65536]).all():
            raise ConvragError("knn_graph: vectors contain NaN or infinite values")
    return x


def _query_calls(faiss, n: int, d: int, batch_size: int) -> list[tuple[int, int]]:
    """Row ranges for the faiss search calls: a canonical split that does not depend on ``batch_size``'s value
    beyond whole faiss query blocks, so that every row is computed by exactly the same kernel calls."""
    block = int(getattr(faiss.cvar, "distance_compute_blas_query_bs", 4096) or 4096)
    threshold = int(getattr(faiss.cvar, "distance_compute_blas_threshold", 0) or 0)
    # faiss picks BLAS or plain loops per call from its size; with one block per call the choice is uniform
    step = block if block * d < threshold else math.ceil(batch_size / block) * block
    full = n - n % block
    calls = [(start, min(start + step, full)) for start in range(0, full, step)]
    return calls + ([(full, n)] if full < n else [])


def _build(faiss, x: np.ndarray, index: str, nlist: int | None, nprobe: int, hnsw_m: int, ef_search: int,
           train_size: int | None, seed: int):
    n, d = x.shape
    if index == "flat":
        built = faiss.IndexFlatL2(d)
    elif index == "hnsw":
        if hnsw_m < 2 or ef_search < 1:
            raise ConvragError(f"knn_graph: hnsw_m must be >= 2 and ef_search >= 1, got {hnsw_m}, {ef_search}")
        built = faiss.IndexHNSWFlat(d, hnsw_m)
        built.hnsw.efSearch = ef_search
    elif index == "ivf":
        lists = int(np.clip(round(4 * math.sqrt(n)), 1, n)) if nlist is None else nlist
        if not 1 <= lists <= n:
            raise ConvragError(f"knn_graph: nlist must be in [1, N={n}], got {lists}")
        if nprobe < 1:
            raise ConvragError(f"knn_graph: nprobe must be >= 1, got {nprobe}")
        quantizer = faiss.IndexFlatL2(d)
        built = faiss.IndexIVFFlat(quantizer, d, lists, faiss.METRIC_L2)
        built.cp.seed = seed
        built.cp.min_points_per_centroid = 1  # we pick nlist ourselves; silence faiss's small-sample warning
        sample = min(n, 256 * lists)
        if train_size is not None:
            if train_size < lists:
                raise ConvragError(f"knn_graph: train_size must be >= nlist={lists}, got {train_size}")
            sample = min(sample, train_size)
        rows = np.sort(np.random.default_rng(seed).choice(n, size=sample, replace=False)) if sample < n else None
        built.train(x if rows is None else x[rows])
        built.nprobe = min(nprobe, lists)
    else:
        raise ConvragError(f"knn_graph: unknown index {index!r}; choose one of {', '.join(INDEXES)}")
    built.add(x)
    return built


def knn_graph(vectors: np.ndarray, k: int = 100, index: str = "flat", *, nlist: int | None = None, nprobe: int = 16,
              hnsw_m: int = 32, ef_search: int = 128, train_size: int | None = None, batch_size: int = 16384,
              seed: int = 0, threads: int | None = None, progress: bool = False) -> np.ndarray:
    """int32 ``(N, min(k, N))`` array: row ``i`` holds the ids of the nearest vectors to ``vectors[i]``.

    Squared-L2 neighbours, nearest first, the query itself included; ``-1`` fills slots the index could not
    fill (possible with ``"hnsw"``/``"ivf"``). ``k`` is capped at ``N``. ``index`` is ``"flat"`` (exact),
    ``"hnsw"`` (``hnsw_m`` links per node, ``ef_search``) or ``"ivf"`` (``nlist`` lists, default
    ``round(4 * sqrt(N))`` clipped to ``[1, N]``, trained on a ``seed``-ed sample of ``train_size`` vectors,
    default and maximum ``min(N, 256 * nlist)``; ``nprobe`` lists visited per query). Queries run in batches
    of ``batch_size`` rounded up to whole faiss query blocks (the result does not depend on it). ``threads``
    sets faiss's OpenMP thread count for this call only (restored afterwards); ``None`` keeps faiss's
    setting (by default all cores). Raises ``ConvragError`` on a non-2-D, empty or non-finite input, a
    bad option, or an unknown index.
    """
    import faiss

    x = _check_vectors(vectors)
    n, d = x.shape
    if k < 1:
        raise ConvragError(f"knn_graph: k must be >= 1, got {k}")
    if batch_size < 1:
        raise ConvragError(f"knn_graph: batch_size must be >= 1, got {batch_size}")
    if threads is not None and threads < 1:
        raise ConvragError(f"knn_graph: threads must be >= 1, got {threads}")
    k = min(k, n)
    previous = faiss.omp_get_max_threads()
    if threads is not None:
        faiss.omp_set_num_threads(threads)
    try:
        built = _build(faiss, x, index, nlist, nprobe, hnsw_m, ef_search, train_size, seed)
        out = np.empty((n, k), dtype=np.int32)
        with tqdm(total=n, desc=label("kNN search"), unit="doc", disable=not progress) as bar:
            for start, end in _query_calls(faiss, n, d, batch_size):
                out[start:end] = built.search(x[start:end], k)[1]
                bar.update(end - start)
    finally:
        if threads is not None:
            faiss.omp_set_num_threads(previous)
    return out
