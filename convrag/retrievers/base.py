"""The retriever interface shared by every baseline.

``index(corpus)`` reads the documents: rows ``{"_id", "title", "text", ...}`` (``convrag.core.schema.CORPUS`` / BEIR
columns; a ``datasets.Dataset`` works) or a mapping ``doc_id -> row`` (BEIR's ``corpus`` dict) or ``doc_id -> text``;
extra columns are ignored. ``search(queries, top_k, pools)`` ranks documents for each query and returns
``{query_id: {doc_id: score}}`` (higher is better), each inner dict in rank order. Whole corpus (``pools=None``): every
indexed document is a candidate and ``top_k`` (``None`` = all) keeps the best. Pool-restricted
(``pools={query_id: [doc_id, ...]}``, as StratRAG evaluates): a query ranks only its own pool, every pool document
gets a score, and ``top_k=None`` returns the whole pool ranked.

Ranking order, which also decides what survives a ``top_k`` cut, is score descending, then doc id descending:
trec_eval's tie rule, which ``convrag.metrics.retrieval`` applies, so a run cut here is exactly the head of the
ranking the metric sees. Every retriever is deterministic (same corpus, queries and options: same run).
Retrieval reads ``Retriever.doc_text(row)``: ``title + " " + text`` when the title is non-empty, else ``text``
(``use_title=False``: ``text`` alone; or override ``doc_text``). StratRAG's corpus has an empty title, its text
starting with the title, so both choices give the same text there.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from convrag.core.errors import DataError
from convrag.core.progress import label

Corpus = Sequence[Mapping[str, Any]] | Mapping[str, Mapping[str, Any] | str] | Iterable[Mapping[str, Any]]
Run = dict[str, dict[str, float]]

#: Whole-corpus searches over at least this many queries show a progress bar (when progress is on).
PROGRESS_MIN_QUERIES = 50


def ranked_order(scores: np.ndarray, id_rank: np.ndarray, k: int | None = None) -> np.ndarray:
    """Positions of the ``k`` best entries (all if ``None``): score descending, then doc id descending.

    ``id_rank[i]`` is the rank of entry ``i``'s doc id in ascending string order (larger = later id).
    """
    n = len(scores)
    if k is None or k >= n:
        return np.lexsort((-id_rank, -scores))
    if k <= 0:
        return np.empty(0, dtype=np.int64)
    kth = np.partition(scores, n - k)[n - k]  # k-th largest score
    cand = np.flatnonzero(scores >= kth)
    order = np.lexsort((-id_rank[cand], -scores[cand]))
    return cand[order[:k]]


class Retriever(ABC):
    """A baseline retriever: ``index(corpus)`` once, then ``search(queries, top_k, pools)``.

    Subclasses implement ``_fit`` (after the corpus is read), ``_score_pools`` (scores of given documents,
    pool semantics) and may override ``_score_candidates`` (scores of given documents under whole-corpus
    statistics) and ``_search_corpus`` (top-k over the whole corpus).
    """

    #: Stable registry name, used in spec strings and results.
    name: str = "retriever"

    def __init__(self, *, use_title: bool = True, show_progress: bool = True) -> None:
        self.use_title = use_title
        self.show_progress = show_progress
        self._forget()  # the index fields, empty (subclasses' own too: their _forget sets only those)

    def _forget(self) -> None:
        """Drop the index: documents, texts and whatever ``_fit`` built (subclasses extend this). ``index`` calls it
        before reading a new corpus, so re-indexing never holds two corpora's indexes at once."""
        self.doc_ids: list[str] = []
        self.doc_texts: list[str] = []
        self._position: dict[str, int] = {}
        self._id_rank = np.empty(0, dtype=np.int64)

    # ----------------------------------------------------------------- corpus
    def doc_text(self, row: Mapping[str, Any]) -> str:
        """Text a document is retrieved by: ``title + " " + text`` if ``use_title`` and the title is non-empty."""
        text = row.get("text") or ""
        title = row.get("title") or ""
        return f"{title} {text}" if self.use_title and title else text

    def _rows(self, corpus: Corpus) -> Iterable[tuple[str, Mapping[str, Any]]]:
        if isinstance(corpus, Mapping):
            for doc_id, row in corpus.items():
                yield str(doc_id), ({"text": row} if isinstance(row, str) else row)
            return
        for line, row in enumerate(corpus, start=1):
            if not isinstance(row, Mapping) or "_id" not in row:
                raise DataError("corpus rows must be mappings with an '_id' field", "corpus", line)
            yield str(row["_id"]), row

    def index(self, corpus: Corpus, show_progress: bool | None = None) -> Retriever:
        """Read ``corpus`` (see module docstring) and build this retriever's index; returns ``self``.

        Raises ``DataError`` on an empty corpus or duplicate doc ids.
        """
        self._forget()
        ids: list[str] = []
        texts: list[str] = []
        position: dict[str, int] = {}
        for line, (doc_id, row) in enumerate(self._rows(corpus), start=1):
            if doc_id in position:
                raise DataError(f"duplicate doc id {doc_id!r}", "corpus", line)
            position[doc_id] = len(ids)
            ids.append(doc_id)
            texts.append(self.doc_text(row))
        if not ids:
            raise DataError("corpus is empty: nothing to index", "corpus")
        self.doc_ids, self.doc_texts, self._position = ids, texts, position
        by_id = np.argsort(np.array(ids, dtype=object), kind="stable")
        self._id_rank = np.empty(len(ids), dtype=np.int64)
        self._id_rank[by_id] = np.arange(len(ids))
        self._fit(self._progress(show_progress))
        return self

    @property
    def is_indexed(self) -> bool:
        return bool(self.doc_ids)

    # ----------------------------------------------------------------- search
    def search(
        self,
        queries: Mapping[str, str],
        top_k: int | None = None,
        pools: Mapping[str, Sequence[str]] | None = None,
        show_progress: bool | None = None,
    ) -> Run:
        """Rank documents for every query: ``{query_id: {doc_id: score}}``, inner dicts in rank order.

        ``pools`` restricts each query to its own pool (every query needs one; every pool doc gets a score);
        without it the whole corpus is searched. ``top_k=None`` keeps every candidate.
        """
        if not self.is_indexed:
            raise RuntimeError(f"{self.name}: call index(corpus) before search()")
        if top_k is not None and top_k < 1:
            raise ValueError(f"top_k must be a positive integer or None, got {top_k!r}")
        qids = [str(q) for q in queries]
        # str subclasses (a strategy's QueryText, which keeps its history / query parts) pass through unchanged
        texts = [t if isinstance(t, str) else str(t) for t in (queries[q] for q in queries)]
        if not qids:
            return {}
        progress = self._progress(show_progress)
        run: Run = {}
        if pools is None:
            k = len(self.doc_ids) if top_k is None else min(top_k, len(self.doc_ids))
            hits = self._search_corpus(qids, texts, k, progress and len(qids) >= PROGRESS_MIN_QUERIES)
            for qid, (pos, scores) in zip(qids, hits, strict=True):
                run[qid] = self._ranking(pos, scores, top_k)
            return run
        positions = [self.pool_positions(qid, pools) for qid in qids]
        all_scores = self._score_pools(qids, texts, positions, progress)
        for qid, pos, scores in zip(qids, positions, all_scores, strict=True):
            run[qid] = self._ranking(pos, np.asarray(scores, dtype=np.float64), top_k)
        return run

    def pool_positions(self, qid: str, pools: Mapping[str, Sequence[str]]) -> np.ndarray:
        """Corpus positions of query ``qid``'s pool; ``DataError`` naming the query on a missing or bad pool."""
        if qid not in pools:
            raise DataError(f"query {qid!r} has no pool (pool-restricted search needs one per query)", "pools")
        pool = [str(d) for d in pools[qid]]
        unknown = [d for d in pool if d not in self._position]
        if unknown:
            raise DataError(f"pool of query {qid!r} has doc ids not in the corpus: {unknown[:5]}", "pools")
        if len(set(pool)) != len(pool):
            dupes = sorted({d for d in pool if pool.count(d) > 1})
            raise DataError(f"pool of query {qid!r} repeats doc ids {dupes[:5]}", "pools")
        return np.fromiter((self._position[d] for d in pool), dtype=np.int64, count=len(pool))

    def _ranking(self, pos: np.ndarray, scores: np.ndarray, top_k: int | None) -> dict[str, float]:
        order = ranked_order(scores, self._id_rank[pos], top_k)
        return {self.doc_ids[pos[i]]: float(scores[i]) for i in order}

    # ----------------------------------------------------------------- hooks
    @abstractmethod
    def _fit(self, show_progress: bool) -> None:
        """Build the index from ``self.doc_ids`` / ``self.doc_texts``."""

    @abstractmethod
    def _score_pools(
        self, qids: list[str], texts: list[str], pools: list[np.ndarray], show_progress: bool
    ) -> list[np.ndarray]:
        """Scores of each query's pool documents (corpus positions), in pool order, with pool semantics."""

    def _score_candidates(
        self, qids: list[str], texts: list[str], cands: list[np.ndarray], show_progress: bool
    ) -> list[np.ndarray]:
        """Scores of the given corpus documents under whole-corpus statistics (default: as a pool)."""
        return self._score_pools(qids, texts, cands, show_progress)

    def _search_corpus(
        self, qids: list[str], texts: list[str], k: int, show_progress: bool
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Positions and scores of (at least) the ``k`` best documents per query (any order).

        Default: score every document with ``_score_candidates`` one query at a time and keep the best ``k``.
        """
        everything = np.arange(len(self.doc_ids))
        out = []
        pairs = zip(qids, texts, strict=True)
        for qid, text in tqdm(pairs, total=len(qids), desc=label("search", self.name), disable=not show_progress):
            scores = np.asarray(self._score_candidates([qid], [text], [everything], False)[0], dtype=np.float64)
            keep = ranked_order(scores, self._id_rank, k)
            out.append((keep, scores[keep]))
        return out

    # ----------------------------------------------------------------- misc
    def _progress(self, show_progress: bool | None) -> bool:
        return self.show_progress if show_progress is None else bool(show_progress)

    def settings(self) -> dict[str, Any]:
        """Retriever-specific settings for ``describe`` (override in subclasses)."""
        return {}

    def describe(self) -> dict[str, Any]:
        """Settings that identify this retriever's results (for results JSON)."""
        return {
            "name": self.name,
            "class": type(self).__name__,
            "doc_text": "title + ' ' + text" if self.use_title else "text",
            **self.settings(),
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.settings()})"
