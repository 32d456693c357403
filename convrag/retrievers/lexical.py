"""Lexical baselines: Okapi BM25 with rank-bm25 (``bm25``) and with bm25s (``bm25s``, for large corpora).

Tokenisation (both, by default) is StratRAG's: ``text.lower().split()``: lowercase, split on whitespace, no
stemming, no stop words, punctuation kept attached to words. Query and documents are tokenised the same way.

``bm25`` reproduces StratRAG faithfully: ``rank_bm25.BM25Okapi`` with its defaults ``k1=1.5``, ``b=0.75``,
``epsilon=0.25``. Okapi BM25 score of document d for query q (a token list; repeated tokens count again)::

    sum over t in q of  idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))
    idf(t) = ln((N - n(t) + 0.5) / (n(t) + 0.5)), replaced by epsilon * mean(idf) where negative

where N is the number of documents the model was fit on, n(t) how many of them contain t, |d| the token
count of d and avgdl the mean token count.

Where N, n(t) and avgdl come from (``pool_stats``):

* ``"pool"`` (default): in pool-restricted search, BM25 is fit on each query's own pool documents only, as
  StratRAG's per-example pools are scored (each example is a small collection of its 15 documents);
* ``"corpus"``: BM25 is fit once on the whole corpus and pool documents are scored with those statistics.

Whole-corpus search uses the model fit once on the whole corpus by ``index``.

``bm25s`` computes BM25 with sparse precomputed term weights. Its default variant is ``method="lucene"``
(``idf = ln(1 + (N - n + 0.5) / (n + 0.5))``, always positive; term part ``tf / (tf + k1 * (...))``, without
rank-bm25's ``k1 + 1`` factor, which does not change rankings); ``method="robertson"`` uses rank-bm25's idf
clipped at 0 instead of floored at ``epsilon * mean``. So ``bm25s`` and ``bm25`` agree on most rankings but
not on every score. ``tokenizer="bm25s"`` switches to bm25s' own tokeniser (lowercase, ``\\w\\w+`` tokens,
English stop words by default, optional ``stemmer`` callable such as a PyStemmer ``stemWords``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from rank_bm25 import BM25Okapi
from tqdm.auto import tqdm

from convrag.progress import label
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
    """Okapi BM25 via ``rank_bm25.BM25Okapi`` (StratRAG's implementation and tokenisation)."""

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
        self._tokens: list[list[str]] = []
        self._corpus_model: BM25Okapi | None = None

    def _fit(self, show_progress: bool) -> None:
        texts = tqdm(self.doc_texts, desc=label("tokenising corpus", self.name), disable=not show_progress)
        self._tokens = [self.tokenizer(t) for t in texts]
        self._corpus_model = self._okapi(self._tokens)

    def _okapi(self, docs: list[list[str]]) -> BM25Okapi | None:
        """A BM25Okapi model of ``docs``; ``None`` when they hold no token (every score is then 0)."""
        if not any(docs):
            return None
        return BM25Okapi(docs, k1=self.k1, b=self.b, epsilon=self.epsilon)

    def _score_pools(
        self, qids: list[str], texts: list[str], pools: list[np.ndarray], show_progress: bool
    ) -> list[np.ndarray]:
        if self.pool_stats == "corpus":
            return self._score_candidates(qids, texts, pools, show_progress)
        out = []
        for text, pos in tqdm(list(zip(texts, pools, strict=True)), desc=label("search", self.name),
                              disable=not show_progress):
            model = self._okapi([self._tokens[i] for i in pos])
            query = self.tokenizer(text)
            out.append(np.zeros(len(pos)) if model is None else np.asarray(model.get_scores(query), dtype=float))
        return out

    def _score_candidates(
        self, qids: list[str], texts: list[str], cands: list[np.ndarray], show_progress: bool
    ) -> list[np.ndarray]:
        model = self._corpus_model
        out = []
        for text, pos in tqdm(list(zip(texts, cands, strict=True)), desc=label("search", self.name),
                              disable=not show_progress):
            if model is None:
                out.append(np.zeros(len(pos)))
            elif len(pos) == len(self.doc_ids):
                out.append(np.asarray(model.get_scores(self.tokenizer(text)), dtype=float)[pos])
            else:
                out.append(np.asarray(model.get_batch_scores(self.tokenizer(text), pos.tolist()), dtype=float))
        return out

    def settings(self) -> dict[str, Any]:
        return {
            "implementation": "rank_bm25.BM25Okapi",
            "k1": self.k1,
            "b": self.b,
            "epsilon": self.epsilon,
            "tokenizer": getattr(self.tokenizer, "__name__", repr(self.tokenizer)),
            "pool_stats": self.pool_stats,
        }


class BM25SRetriever(Retriever):
    """BM25 via the ``bm25s`` library (sparse precomputed scores; fast on large corpora)."""

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
        self._tokens: list[list[str]] = []
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

    def _bm25s(self, docs: list[list[str]], show_progress: bool = False) -> Any:
        """A bm25s index of ``docs``; ``None`` when they hold no token (every score is then 0)."""
        import bm25s

        if not any(docs):
            return None
        model = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
        with tqdm(total=1, desc=label("indexing corpus", self.name), disable=not show_progress) as bar:
            model.index(docs, show_progress=False)
            bar.update(1)
        return model

    @staticmethod
    def _scores(model: Any, query: list[str], n: int) -> np.ndarray:
        ids = [] if model is None else model.get_tokens_ids(query)
        if not ids:
            return np.zeros(n)
        return np.asarray(model.get_scores_from_ids(ids), dtype=float)

    def _fit(self, show_progress: bool) -> None:
        self._tokens = self.tokenize(self.doc_texts, show_progress)
        self._model = self._bm25s(self._tokens, show_progress)

    def _score_pools(
        self, qids: list[str], texts: list[str], pools: list[np.ndarray], show_progress: bool
    ) -> list[np.ndarray]:
        if self.pool_stats == "corpus":
            return self._score_candidates(qids, texts, pools, show_progress)
        queries = self.tokenize(texts)
        out = []
        for query, pos in tqdm(list(zip(queries, pools, strict=True)), desc=label("search", self.name),
                                disable=not show_progress):
            out.append(self._scores(self._bm25s([self._tokens[i] for i in pos]), query, len(pos)))
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
