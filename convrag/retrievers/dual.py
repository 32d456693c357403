"""Conversational dual encoders: queries encoded by one transformers model, documents by another.

Spec ``dual:QUERY_MODEL,CONTEXT_MODEL`` (local folders or Hugging Face model names, each read with its own tokenizer).
Score of document d for query q = sim(Q(format(q)), C(d)), Q and C the two models' pooled last hidden states:
``pooling`` ``cls`` (default: the first token's vector, [CLS]) or ``mean`` (token vectors averaged over the attention
mask, padding excluded); ``similarity`` ``dot`` (default: inner product of the vectors as they are) or ``cosine``
(inner product of the L2-normalised vectors). Inputs are cut to ``max_seq_length`` tokens (default: the model's
``max_position_embeddings``, capped by its tokenizer's limit): documents lose their end; queries are first fitted by
:func:`~convrag.retrievers.query_text.fit_query` (oldest conversation lines dropped first, the question kept).

The defaults are the settings of Dragon-multiturn (:data:`DRAGON_MULTITURN`: BERT-base, one shared uncased
vocabulary, arXiv 2401.10225), i.e. Dragon-ChatQA / Dragon-DocChat as MTR-Suite evaluates them (Table 3): CLS
vectors, inner product without normalisation, documents cut at 512 tokens, and the query written as ``user:`` /
``agent:`` lines by ``query_format="roles"`` (:func:`role_lines`); ``query_format="text"`` encodes a strategy's text
as it is. Caching, search and devices: :class:`DualEncoderRetriever`.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from convrag.core.errors import ConvragError
from convrag.core.progress import label
from convrag.retrievers import embed as disk
from convrag.retrievers import faiss_index
from convrag.retrievers.base import Retriever, ranked_order
from convrag.retrievers.query_text import QueryText, fit_queries

POOLINGS = ("cls", "mean")
SIMILARITIES = ("dot", "cosine")
QUERY_FORMATS = ("roles", "text")
#: The Dragon-multiturn pair (Dragon-ChatQA / Dragon-DocChat in MTR-Suite's Table 3).
DRAGON_MULTITURN = ("nvidia/dragon-multiturn-query-encoder", "nvidia/dragon-multiturn-context-encoder")
_USER = re.compile(r"^(?:Q|[Uu][Ss][Ee][Rr])\s*:\s?(.*)$", re.S)
_AGENT = re.compile(r"^(?:A|[Aa][Gg][Ee][Nn][Tt]|[Aa][Ss][Ss][Ii][Ss][Tt][Aa][Nn][Tt])\s*:\s?(.*)$", re.S)
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(?:/[\w.-]+)?$")
_FAISS_MARGIN = 16
_QUERY_CHUNK = 256


def _choice(name: str, value: Any, allowed: Sequence[str]) -> str:
    if str(value).lower() not in allowed:
        raise ConvragError(f"dual: {name} must be one of {', '.join(allowed)}, got {value!r}")
    return str(value).lower()


def _role_line(line: str) -> str | None:
    """``user: ...`` / ``agent: ...`` for a line with a role label, else ``None``."""
    for role, pattern in (("user", _USER), ("agent", _AGENT)):
        match = pattern.match(line)
        if match:
            return f"{role}: {match.group(1).strip()}"
    return None


def role_lines(text: str) -> QueryText:
    """A strategy's query text in Dragon-multiturn's layout: one line per message, ``user: <text>`` or
    ``agent: <text>``, oldest first, the current question last as a ``user:`` line, lines joined by a newline.

    History lines labelled ``Q:`` / ``User:`` (any case) become ``user: ...``, ``A:`` / ``Agent:`` / ``Assistant:``
    ``agent: ...``; unlabelled lines before the first labelled one are earlier user questions (e.g. MTRAG's
    ``questions`` view) and become ``user:`` lines, unlabelled lines after one continue its message and are kept as
    they are. The first tail part (the current question) becomes ``user: <question>``; what a strategy appends after
    it (reasoning) follows unchanged. So ``--strategies dialogue`` (or ``history``) gives Dragon-multiturn its own
    input, and ``baseline`` gives ``user: <question>``. A plain ``str`` is read as a current question with no
    history."""
    history: list[str] = []
    labelled = False
    for line in getattr(text, "history", ()):
        relabelled = _role_line(line)
        labelled = labelled or relabelled is not None
        history.append(relabelled or (line if labelled else f"user: {line}"))
    tail = list(getattr(text, "tail", (str(text),)))
    if tail:
        tail[0] = _role_line(tail[0]) or f"user: {tail[0]}"
    return QueryText(history, tail)


def check_model(model: str, role: str) -> str:
    """``model`` when it is a model folder (holding ``config.json``) or reads as a Hub model name, a shipped model's
    short name resolved to its folder (:func:`convrag.retrievers.shipped_models.resolve_model`); else a one-line
    ``ConvragError`` (a path that does not exist, a folder without a config)."""
    from convrag.retrievers.shipped_models import resolve_model

    text = resolve_model(str(model).strip())  # the short names dense takes (all-MiniLM-L6-v2, all-mpnet-base-v2)
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConvragError(f"dual: {role} model folder {text!r} has no config.json")
        return str(path)
    if path.exists():
        raise ConvragError(f"dual: {role} model {text!r} is a file, not a model folder")
    if not text or text.startswith(("/", ".", "~")) or not _HUB_NAME.match(text):
        raise ConvragError(f"dual: {role} model {text!r}: no such folder (and not a Hugging Face model name)")
    return text


def _device(device: str | None) -> str:
    if device is not None:
        return device
    import torch

    if torch.cuda.is_available():
        return "cuda"
    return "mps" if torch.backends.mps.is_available() else "cpu"


@lru_cache(maxsize=4)
def load_encoder(model: str, device: str) -> tuple[Any, Any]:
    """``(tokenizer, model)`` of a transformers encoder, loaded once per process in eval mode on ``device``;
    a model that cannot be loaded is a one-line ``ConvragError``."""
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(model)
        encoder = AutoModel.from_pretrained(model).to(device).eval()
    except (OSError, ValueError) as err:
        reason = " ".join(str(err).split())[:300]
        raise ConvragError(f"dual: cannot load model {model!r}: {reason}") from None
    finally:
        if shown:
            hf_logging.enable_progress_bar()
    return tokenizer, encoder


class DualEncoderRetriever(Retriever):
    """Dense retrieval with a query encoder and a context encoder (see module docstring).

    Document vectors are cached on disk like the ``dense`` retriever's (``convrag.retrievers.embed``: ``cache_dir``,
    default ``~/.cache/convrag/embeddings``; ``cache=False`` or ``cache_dir="none"``: off); the entry key holds the
    context model's identity, pooling, similarity's normalisation (``l2`` for cosine, ``none`` for dot), token
    limit, truncation side and the corpus fingerprint. Whole-corpus top-k search is brute force (numpy) up to
    ``faiss_threshold`` documents, then an exact faiss ``IndexFlatIP`` (inner product; stored beside the entry);
    pool-restricted search takes dot products with the stored pool rows. ``device``: cpu, cuda, cuda:N, mps or auto
    (cuda, then mps, then cpu).
    """

    name = "dual"

    def __init__(
        self,
        models: Sequence[str] | str | None = None,
        pooling: str = "cls",
        similarity: str = "dot",
        query_format: str = "roles",
        max_seq_length: int | None = None,
        fit_queries: bool = True,
        batch_size: int = 32,
        device: str | None = None,
        faiss_threshold: int = 100_000,
        cache: bool = True,
        cache_dir: str | os.PathLike[str] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        names = [m.strip() for m in models.split(",")] if isinstance(models, str) else list(models or [])
        if len(names) != 2:
            raise ConvragError(f"dual needs two models, QUERY_MODEL,CONTEXT_MODEL (spec dual:Q,C); got {models!r}")
        self.query_model = check_model(names[0], "query")
        self.context_model = check_model(names[1], "context")
        self.pooling = _choice("pooling", pooling, POOLINGS)
        self.similarity = _choice("similarity", similarity, SIMILARITIES)
        self.query_format = _choice("query_format", query_format, QUERY_FORMATS)
        if max_seq_length is not None and int(max_seq_length) < 1:
            raise ConvragError(f"dual: max_seq_length must be a positive integer, got {max_seq_length!r}")
        self.max_seq_length = None if max_seq_length is None else int(max_seq_length)
        self.fit_queries = bool(fit_queries)
        self.batch_size = int(batch_size)
        self.device = _device(disk.resolve_device(None if device is None else str(device)))
        self.faiss_threshold = int(faiss_threshold)
        self.cache_dir = None if not cache else (
            disk.default_cache_dir() if cache_dir is None
            else None if str(cache_dir).strip().lower() in disk.OFF else Path(cache_dir)
        )  # fmt: skip
        #: How the last ``index`` got its vectors ("encoded" / "reused (disk)") and the cache entry (None: off).
        self.cache_status, self.cache_entry = "", None
        #: Query fitting statuses of the last search (``fits`` / ``history trimmed`` / ``tail cut`` -> count).
        self.fit_stats: dict[str, int] = {}

    def _forget(self) -> None:
        super()._forget()
        self.embeddings = np.empty((0, 0), dtype=np.float32)
        self._faiss: Any = None
        self._entry: str | None = None
        self._last_queries: tuple[tuple[Any, ...], np.ndarray] | None = None

    # ----------------------------------------------------------------- encoding
    def _model(self, kind: str) -> tuple[Any, Any]:
        return load_encoder(self.query_model if kind == "query" else self.context_model, self.device)

    def limit(self, kind: str = "query") -> int:
        """Token limit of a ``kind`` input: ``max_seq_length``, else the model's position limit capped by its
        tokenizer's ``model_max_length``."""
        if self.max_seq_length is not None:
            return self.max_seq_length
        tokenizer, model = self._model(kind)
        positions = int(getattr(model.config, "max_position_embeddings", 512))
        return min(positions, int(tokenizer.model_max_length or positions))

    def count_tokens(self, text: str, kind: str = "query") -> int:
        """Tokens of ``text`` with the ``kind`` model's tokenizer, special tokens included, uncut."""
        tokenizer = self._model(kind)[0]
        return len(tokenizer(str(text), add_special_tokens=True, truncation=False, verbose=False)["input_ids"])

    def encode(self, texts: Sequence[str], kind: str = "document", show_progress: bool = False) -> np.ndarray:
        """float32 vectors of ``texts`` as given, by the query or context model: pooled (``pooling``) and, for
        ``cosine``, L2-normalised. Queries are cut at their start, documents at their end, to ``limit(kind)``."""
        import torch
        from tqdm.auto import tqdm

        tokenizer, model = self._model(kind)
        side, tokenizer.truncation_side = tokenizer.truncation_side, "left" if kind == "query" else "right"
        out = []
        try:
            with torch.inference_mode():
                starts = range(0, len(texts), self.batch_size)
                what = label(f"encoding {'corpus' if kind == 'document' else 'queries'}", self.name)
                for start in tqdm(starts, desc=what, disable=not show_progress):
                    batch = [str(t) for t in texts[start : start + self.batch_size]]
                    inputs = tokenizer(batch, padding=True, truncation=True, max_length=self.limit(kind),
                                       return_tensors="pt").to(self.device)  # fmt: skip
                    hidden = model(**inputs).last_hidden_state
                    if self.pooling == "cls":
                        vectors = hidden[:, 0]
                    else:
                        mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                        vectors = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
                    if self.similarity == "cosine":
                        vectors = torch.nn.functional.normalize(vectors, dim=-1)
                    out.append(vectors.float().cpu().numpy())
        finally:
            tokenizer.truncation_side = side
        dim = int(getattr(model.config, "hidden_size", 0))
        return np.ascontiguousarray(np.concatenate(out) if out else np.empty((0, dim)), dtype=np.float32)

    def query_texts(self, texts: Sequence[str]) -> list[str]:
        """The texts the query model reads: formatted (``query_format``), then fitted to ``limit("query")``
        tokens (``fit_queries``); sets ``fit_stats``."""
        formatted = [role_lines(t) if self.query_format == "roles" else t for t in texts]
        if not self.fit_queries:
            self.fit_stats = {}
            return [str(t) for t in formatted]
        out, self.fit_stats = fit_queries(formatted, lambda s: self.count_tokens(s, "query"), self.limit("query"))
        return out

    def _queries(self, texts: list[str]) -> np.ndarray:
        key = tuple((str(t), getattr(t, "history", None), getattr(t, "tail", None)) for t in texts)
        if self._last_queries is None or self._last_queries[0] != key:
            self._last_queries = (key, self.encode(self.query_texts(texts), "query"))
        return self._last_queries[1]

    # ----------------------------------------------------------------- index and search
    def document_settings(self) -> dict[str, Any]:
        """Everything but the corpus that decides the document vectors (the disk cache key's fields)."""
        return {"encoder": "transformers", "model": disk.model_identity(self.context_model), "pooling": self.pooling,
                "max_seq_length": self.limit("document"), "truncation": "right", "prompt": "",
                "normalize": "l2" if self.similarity == "cosine" else "none", "dtype": "float32"}  # fmt: skip

    def check_dimensions(self) -> None:
        """Refuse (one line) a query and a context model whose vectors differ in size, before any encoding: their
        inner products would be undefined."""
        sizes = [int(getattr(self._model(kind)[1].config, "hidden_size", 0)) for kind in ("query", "document")]
        if sizes[0] != sizes[1]:
            raise ConvragError(f"dual: the query model {self.query_model!r} gives {sizes[0]}-d vectors and the "
                               f"context model {self.context_model!r} {sizes[1]}-d ones: a dual pair must share one "
                               "vector size")  # fmt: skip

    def _fit(self, show_progress: bool) -> None:
        self.check_dimensions()
        settings = {**self.document_settings(), "corpus": disk.corpus_fingerprint(self.doc_ids, self.doc_texts)}
        store = disk.EmbeddingStore(self.cache_dir) if self.cache_dir is not None else None
        key = disk.entry_key(settings)
        cached = store.load(key, self.doc_ids) if store is not None else None
        self.cache_status = "reused (disk)"
        if cached is None:
            start = time.perf_counter()
            cached, self.cache_status = self.encode(self.doc_texts, "document", show_progress), "encoded"
            if store is not None:
                meta = disk.provenance(self.context_model, self.device, self.batch_size,
                                       round(time.perf_counter() - start, 3))  # fmt: skip
                store.save(key, self.doc_ids, cached, {**settings, **meta})
        self.cache_entry = str(store.path(key)) if store is not None else None
        self._entry = key if store is not None else None
        self.embeddings = cached

    def _score_pools(
        self, qids: list[str], texts: list[str], pools: list[np.ndarray], show_progress: bool
    ) -> list[np.ndarray]:
        q = self._queries(texts)
        return [self.embeddings[pos] @ q[i] for i, pos in enumerate(pools)]

    def uses_faiss(self, k: int) -> bool:
        """Whether a whole-corpus top-``k`` search goes through faiss (corpus above the threshold)."""
        return len(self.doc_ids) > self.faiss_threshold and k < len(self.doc_ids)

    def _flat_index(self) -> Any:
        """The exact inner-product index over the document vectors, read from / stored beside the cache entry."""
        n, dim = self.embeddings.shape
        store = disk.EmbeddingStore(self.cache_dir) if self._entry else None
        index = store.load_faiss(self._entry, "flat", n, dim) if store is not None else None
        if index is None:
            index = faiss_index.build("flat", self.embeddings, 1)
            if store is not None:
                store.save_faiss(self._entry, "flat", index)
        return index

    def _search_corpus(
        self, qids: list[str], texts: list[str], k: int, show_progress: bool
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        q = self._queries(texts)
        if self.uses_faiss(k):
            if self._faiss is None:
                self._faiss = self._flat_index()
            found, idx = self._faiss.search(q, min(len(self.doc_ids), k + _FAISS_MARGIN))
            return [(i[i >= 0].astype(np.int64), s[i >= 0].astype(np.float64)) for s, i in zip(found, idx, strict=True)]
        out = []
        for start in range(0, len(texts), _QUERY_CHUNK):
            for row in q[start : start + _QUERY_CHUNK] @ self.embeddings.T:
                keep = ranked_order(row, self._id_rank, k)
                out.append((keep, row[keep].astype(np.float64)))
        return out

    def settings(self) -> dict[str, Any]:
        """Both models (their :func:`~convrag.retrievers.model_record.model_record`, never a path), pooling,
        similarity, query layout and fitting, token limits, device."""
        from convrag.retrievers.model_record import model_record

        return {
            "query_model": model_record(self.query_model),
            "context_model": model_record(self.context_model),
            "pooling": self.pooling,
            "similarity": self.similarity,
            "query_format": self.query_format,
            "max_seq_length": self.limit("document"),
            "batch_size": self.batch_size,
            "device": self.device,
            "faiss_threshold": self.faiss_threshold,
            "query_fitting": {"enabled": self.fit_queries, "max_tokens": self.limit("query"),
                              "last_search": dict(self.fit_stats)},  # fmt: skip
        }
