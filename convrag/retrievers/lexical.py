"""Lexical baselines: Okapi BM25 with rank-bm25's formula (``bm25``) and with bm25s (``bm25s``, Lucene's variant).

Tokenisation (both, by default; query and documents alike) is StratRAG's ``text.lower().split()``: lowercase, split
on whitespace, no stemming, no stop words, punctuation kept attached to words. ``bm25`` reproduces StratRAG: bitwise
the scores of ``rank_bm25.BM25Okapi`` with its defaults ``k1=1.5``, ``b=0.75``, ``epsilon=0.25``, computed from a
sparse matrix of precomputed term weights. Score of document d for query q (a token list; repeats count again)::

    sum over t in q of  idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))
    idf(t) = ln((N - n(t) + 0.5) / (n(t) + 0.5)), replaced by epsilon * mean(idf) where negative

N: documents the model was fit on; n(t): how many of them contain t; |d|: the token count of d; avgdl: the mean token
count; mean(idf) is over every token of the fitted documents, before any replacement. Query tokens absent from the
fitted documents add nothing; a collection without any token scores every document 0. ``pool_stats`` (pool-restricted
search): ``"pool"`` (default) fits BM25 on each query's own pool, as StratRAG scores each example's 15 documents as a
small collection; ``"corpus"`` scores pools with the whole-corpus fit, which whole-corpus search always uses.
``bm25s`` (:class:`BM25SRetriever`) has its own idf and term form: it agrees with ``bm25`` on most rankings only.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy import sparse
from tqdm.auto import tqdm

from convrag.core.progress import label
from convrag.retrievers.base import Retriever

Tokenizer = Callable[[str], list[str]]
POOL_STATS = ("pool", "corpus")
#: Texts bm25s tokenises per call (the tokenising bar moves once per chunk).
TOKENISE_CHUNK = 10_000


def whitespace_tokenize(text: str) -> list[str]:
    """StratRAG's tokenisation: lowercase, then split on runs of whitespace."""
    return text.lower().split()


def _check_pool_stats(value: str) -> str:
    if value not in POOL_STATS:
        raise ValueError(f"pool_stats must be one of {POOL_STATS}, got {value!r}")
    return value


class BM25Retriever(Retriever):
    """Okapi BM25 with rank-bm25's ``BM25Okapi`` formula (StratRAG's), scored from sparse term weights.

    Every score is computed with the same float64 operations, in the same order, as ``BM25Okapi.get_scores``:
    idf from the C library's ``log`` (``log(N - n + 0.5) - log(n + 0.5)``), the mean idf summed over the
    fitted vocabulary in order of first appearance, each query token's term added in query order. So scores
    are bitwise equal to rank-bm25's and ties (hence rankings) are the same, at a sparse scorer's speed.
    """

    name = "bm25"

    def __init__(
        self,
        k1: float = 1.5,
        b: float = 0.75,
        epsilon: float = 0.25,
        pool_stats: str = "pool",
        tokenizer: Tokenizer = whitespace_tokenize,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.k1, self.b, self.epsilon = float(k1), float(b), float(epsilon)
        self.pool_stats = _check_pool_stats(pool_stats)
        self.tokenizer = tokenizer

    def _forget(self) -> None:
        super()._forget()
        self._vocab: dict[str, int] = {}
        # per document (rows of _indptr): its distinct token ids in order of first appearance, and their counts
        self._indptr = np.zeros(1, dtype=np.int64)
        self._terms = np.empty(0, dtype=np.int32)
        self._counts = np.empty(0, dtype=np.int32)
        self._lengths = np.empty(0, dtype=np.int64)
        self._log_half = np.empty(0)
        self._weights: sparse.csc_matrix | None = None  # documents x tokens, whole-corpus BM25 terms

    def _fit(self, show_progress: bool) -> None:
        vocab: dict[str, int] = {}
        terms, counts = array("i"), array("i")
        n_docs = len(self.doc_texts)
        lengths, distinct = np.empty(n_docs, dtype=np.int64), np.empty(n_docs, dtype=np.int64)
        texts = tqdm(self.doc_texts, desc=label("tokenising corpus", self.name), disable=not show_progress)
        for i, text in enumerate(texts):
            tokens = self.tokenizer(text)
            freq = Counter(tokens)  # keys in order of first appearance, as rank-bm25's per-document dicts
            terms.extend([vocab.setdefault(t, len(vocab)) for t in freq])
            counts.extend(freq.values())
            lengths[i], distinct[i] = len(tokens), len(freq)
        self._vocab, self._lengths = vocab, lengths
        self._terms = np.frombuffer(terms, dtype=np.int32) if terms else np.empty(0, dtype=np.int32)
        self._counts = np.frombuffer(counts, dtype=np.int32) if counts else np.empty(0, dtype=np.int32)
        self._indptr = np.concatenate([[0], np.cumsum(distinct)])
        self._log_half = np.array([math.log(i + 0.5) for i in range(n_docs + 1)])
        with tqdm(total=1, desc=label("indexing corpus", self.name), disable=not show_progress) as bar:
            self._weights = self._corpus_weights()
            bar.update(1)

    def _idf(self, n_docs: int, df: np.ndarray, first_order: np.ndarray) -> np.ndarray:
        """rank-bm25's idf of tokens with document frequencies ``df`` among ``n_docs`` documents.

        ``ln(N - n + 0.5) - ln(n + 0.5)``; negative values become ``epsilon * mean idf``, the mean taken over
        every token (summed one by one in ``first_order``, the tokens' order of first appearance).
        """
        idf = self._log_half[n_docs - df] - self._log_half[df]
        mean = np.cumsum(idf[first_order])[-1] / len(idf)
        return np.where(idf < 0, self.epsilon * mean, idf)

    def _norm(self, lengths: np.ndarray) -> np.ndarray:
        """Length normalisation ``k1 * (1 - b + b * |d| / avgdl)`` of documents with token counts ``lengths``."""
        avgdl = int(lengths.sum()) / len(lengths)
        return self.k1 * (1 - self.b + self.b * lengths / avgdl)

    def _term(self, idf: np.ndarray | float, tf: np.ndarray, norm: np.ndarray) -> np.ndarray:
        """BM25 term ``idf * tf * (k1 + 1) / (tf + norm)``, grouped as rank-bm25 computes it."""
        tf = tf.astype(np.float64)
        return idf * (tf * (self.k1 + 1) / (tf + norm))

    def _corpus_weights(self) -> sparse.csc_matrix | None:
        """Whole-corpus BM25 term of every (document, token) pair; ``None`` when the corpus holds no token."""
        n_docs, n_terms = len(self._lengths), len(self._vocab)
        if not n_terms:
            return None
        df = np.bincount(self._terms, minlength=n_terms)
        idf = self._idf(n_docs, df, np.arange(n_terms))  # token ids are numbered in order of first appearance
        rows = np.repeat(np.arange(n_docs), np.diff(self._indptr))
        values = self._term(idf[self._terms], self._counts, self._norm(self._lengths)[rows])
        return sparse.csr_matrix((values, self._terms, self._indptr), shape=(n_docs, n_terms)).tocsc()

    def _query_ids(self, text: str) -> list[int]:
        """Token ids of the query's tokens found in the corpus, in query order, repeats kept."""
        found = (self._vocab.get(t) for t in self.tokenizer(text))
        return [t for t in found if t is not None]

    def _corpus_scores(self, text: str) -> np.ndarray:
        """Scores of every corpus document under whole-corpus statistics."""
        scores = np.zeros(len(self.doc_ids))
        w = self._weights
        if w is None:
            return scores
        for t in self._query_ids(text):
            lo, hi = w.indptr[t], w.indptr[t + 1]
            scores[w.indices[lo:hi]] += w.data[lo:hi]
        return scores

    def _pool_scores(self, text: str, pos: np.ndarray) -> np.ndarray:
        """Scores of the documents at ``pos`` with BM25 fit on those documents alone."""
        scores = np.zeros(len(pos))
        starts = self._indptr[pos]
        sizes = self._indptr[pos + 1] - starts
        query = self._query_ids(text)
        if not query or not sizes.any():
            return scores
        take = np.repeat(starts - np.cumsum(sizes) + sizes, sizes) + np.arange(int(sizes.sum()))
        terms, counts, owner = self._terms[take], self._counts[take], np.repeat(np.arange(len(pos)), sizes)
        present, first, df = np.unique(terms, return_index=True, return_counts=True)
        idf = self._idf(len(pos), df, np.argsort(first))
        norm = self._norm(self._lengths[pos])
        for t in query:
            hit = np.flatnonzero(terms == t)
            if len(hit):
                docs = owner[hit]
                scores[docs] += self._term(idf[np.searchsorted(present, t)], counts[hit], norm[docs])
        return scores

    def _score_pools(
        self, qids: list[str], texts: list[str], pools: list[np.ndarray], show_progress: bool
    ) -> list[np.ndarray]:
        if self.pool_stats == "corpus":
            return self._score_candidates(qids, texts, pools, show_progress)
        pairs = list(zip(texts, pools, strict=True))
        return [self._pool_scores(text, pos) for text, pos in tqdm(pairs, desc=label("search", self.name),
                                                                    disable=not show_progress)]  # fmt: skip

    def _score_candidates(
        self, qids: list[str], texts: list[str], cands: list[np.ndarray], show_progress: bool
    ) -> list[np.ndarray]:
        pairs = list(zip(texts, cands, strict=True))
        return [self._corpus_scores(text)[pos] for text, pos in tqdm(pairs, desc=label("search", self.name),
                                                                      disable=not show_progress)]  # fmt: skip

    def settings(self) -> dict[str, Any]:
        return {
            "implementation": "sparse BM25Okapi (rank-bm25's formula)",
            "k1": self.k1,
            "b": self.b,
            "epsilon": self.epsilon,
            "tokenizer": getattr(self.tokenizer, "__name__", repr(self.tokenizer)),
            "pool_stats": self.pool_stats,
        }


class BM25SRetriever(Retriever):
    """BM25 via the ``bm25s`` library (sparse precomputed scores; fast on large corpora).

    ``method="lucene"`` (default): ``idf = ln(1 + (N - n + 0.5) / (n + 0.5))``, always positive, and term part
    ``tf / (tf + k1 * (...))``, without rank-bm25's ``k1 + 1`` factor (which does not change rankings).
    ``method="robertson"``: rank-bm25's idf clipped at 0 instead of floored at ``epsilon * mean``. So ``bm25s`` and
    ``bm25`` agree on most rankings but not on every score. ``pool_stats`` as for ``bm25``. ``tokenizer="bm25s"``
    switches to bm25s' own tokeniser (lowercase, ``\\w\\w+`` tokens, English ``stopwords`` by default, optional
    ``stemmer`` callable such as a PyStemmer ``stemWords``).
    """

    name = "bm25s"

    def __init__(
        self,
        k1: float = 1.5,
        b: float = 0.75,
        method: str = "lucene",
        pool_stats: str = "pool",
        tokenizer: str | Tokenizer = "whitespace",
        stopwords: str | list[str] | None = "english",
        stemmer: Callable[..., Any] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        if isinstance(tokenizer, str) and tokenizer not in ("whitespace", "bm25s"):
            raise ValueError(f"tokenizer must be 'whitespace', 'bm25s' or a callable, got {tokenizer!r}")
        self.k1, self.b, self.method = float(k1), float(b), method
        self.pool_stats = _check_pool_stats(pool_stats)
        self.tokenizer = tokenizer
        self.stopwords, self.stemmer = stopwords, stemmer

    def _forget(self) -> None:
        super()._forget()
        self._ids: list[list[int]] = []  # every document's tokens as ids into _words
        self._words: list[str] = []
        self._model: Any = None

    def tokenize(self, texts: list[str], show_progress: bool = False) -> list[list[str]]:
        """Token lists of ``texts`` with the configured tokeniser."""
        if self.tokenizer == "bm25s":
            import bm25s

            out: list[list[str]] = []
            with tqdm(total=len(texts), desc=label("tokenising corpus", self.name), disable=not show_progress) as bar:
                for start in range(0, len(texts), TOKENISE_CHUNK):  # token strings: chunking changes nothing
                    chunk = texts[start:start + TOKENISE_CHUNK]
                    out += bm25s.tokenize(chunk, lower=True, stopwords=self.stopwords, stemmer=self.stemmer,
                                          return_ids=False, show_progress=False)  # fmt: skip
                    bar.update(len(chunk))
            return out
        fn = whitespace_tokenize if self.tokenizer == "whitespace" else self.tokenizer
        return [fn(t) for t in tqdm(texts, desc=label("tokenising corpus", self.name), disable=not show_progress)]

    def _bm25s(self, docs: list[list[str]] | list[list[int]], vocab: dict[str, int] | None = None,
               show_progress: bool = False) -> Any:
        """A bm25s index of ``docs`` (token lists, or token ids of ``vocab``: bm25s indexes ids about twice as
        fast and scores them the same); ``None`` when they hold no token (every score is then 0)."""
        import bm25s

        if not any(docs):
            return None
        model = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
        with tqdm(total=1, desc=label("indexing corpus", self.name), disable=not show_progress) as bar:
            model.index(docs if vocab is None else bm25s.tokenization.Tokenized(docs, vocab), show_progress=False)
            bar.update(1)
        return model

    @staticmethod
    def _scores(model: Any, query: list[str], n: int) -> np.ndarray:
        ids = [] if model is None else model.get_tokens_ids(query)
        if not ids:
            return np.zeros(n)
        return np.asarray(model.get_scores_from_ids(ids), dtype=float)

    def _fit(self, show_progress: bool) -> None:
        tokens, vocab = self.tokenize(self.doc_texts, show_progress), {}
        self._ids = [[vocab.setdefault(t, len(vocab)) for t in doc] for doc in tokens]
        del tokens  # the token strings live on once, in the vocabulary
        self._words = list(vocab)
        self._model = self._bm25s(self._ids, vocab, show_progress)

    def _score_pools(
        self, qids: list[str], texts: list[str], pools: list[np.ndarray], show_progress: bool
    ) -> list[np.ndarray]:
        if self.pool_stats == "corpus":
            return self._score_candidates(qids, texts, pools, show_progress)
        queries = self.tokenize(texts)
        out = []
        for query, pos in tqdm(list(zip(queries, pools, strict=True)), desc=label("search", self.name),
                                disable=not show_progress):
            docs = [[self._words[t] for t in self._ids[i]] for i in pos]
            out.append(self._scores(self._bm25s(docs), query, len(pos)))
        return out

    def _score_candidates(
        self, qids: list[str], texts: list[str], cands: list[np.ndarray], show_progress: bool
    ) -> list[np.ndarray]:
        queries = self.tokenize(texts)
        n = len(self.doc_ids)
        out = []
        pairs = list(zip(queries, cands, strict=True))
        for query, pos in tqdm(pairs, desc=label("search", self.name), disable=not show_progress):
            out.append(self._scores(self._model, query, n)[pos])
        return out

    def settings(self) -> dict[str, Any]:
        tok = self.tokenizer if isinstance(self.tokenizer, str) else getattr(self.tokenizer, "__name__", "callable")
        out: dict[str, Any] = {"implementation": "bm25s", "k1": self.k1, "b": self.b, "method": self.method,
                               "tokenizer": tok, "pool_stats": self.pool_stats}  # fmt: skip
        if tok == "bm25s":
            out["stopwords"] = self.stopwords if isinstance(self.stopwords, str | None) else "custom"
            out["stemmer"] = None if self.stemmer is None else getattr(self.stemmer, "__name__", "callable")
        return out
