"""Fusion baselines: StratRAG's hybrid (min-max normalised score sum) and reciprocal rank fusion.

``hybrid``, per query, over a candidate set C::

    minmax(s)(d) = (s(d) - min_C s) / (max_C s - min_C s)        (0 for every d when s is constant on C)
    hybrid(d)    = alpha * minmax(bm25)(d) + (1 - alpha) * minmax(dense)(d),   alpha = 0.5 by default

C is the query's pool in pool-restricted search (StratRAG). In whole-corpus search it is the union of the two
components' top-``depth`` lists (``depth`` = max(depth, top_k)), a candidate missing from one list getting that
component's real score under whole-corpus statistics, not a stand-in; with ``top_k=None`` (or depth >= corpus size)
C is the whole corpus. ``rrf`` (reciprocal rank fusion, Cormack et al. 2009) of retrievers r with weights w_r (1 by
default): ``rrf(d) = sum over r of w_r / (k + rank_r(d))``, k = 60 by default, rank_r(d) being d's 1-based rank in
r's ranking (score descending, then doc id descending). In pool mode every component ranks the whole pool; in
whole-corpus mode each ranks its top-``depth``, and a document missing from a component's list gets nothing from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from convrag.retrievers.base import Retriever, ranked_order
from convrag.retrievers.dense import ENCODING_OPTIONS


def minmax_normalize(scores: Sequence[float] | np.ndarray) -> np.ndarray:
    """Scale scores to [0, 1]: ``(s - min) / (max - min)``; a constant (or empty) vector maps to zeros."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0:
        return s.copy()
    lo, hi = float(s.min()), float(s.max())
    if not hi > lo:
        return np.zeros_like(s)
    return (s - lo) / (hi - lo)


def _component(spec: Retriever | str, **options: Any) -> Retriever:
    if isinstance(spec, Retriever):
        if options:
            raise ValueError(f"options {sorted(options)} given for an already built {spec.name} retriever")
        return spec
    from convrag.retrievers.registry import get_retriever

    return get_retriever(spec, **options)


def _dense_passing(spec: Retriever | str, dense_options: dict[str, Any] | None) -> dict[str, Any]:
    """Options that hand ``dense_options`` to a ``dense`` / ``hybrid`` spec string (nothing for others)."""
    if not dense_options or isinstance(spec, Retriever):
        return {}
    name = spec.strip().partition(":")[0].strip().lower()
    return {"dense": dict(dense_options), "hybrid": {"dense_options": dict(dense_options)}}.get(name, {})


class _Composite(Retriever):
    """A retriever made of component retrievers that index the same documents in the same order."""

    components: list[Retriever]

    def _forget(self) -> None:
        super()._forget()
        for comp in getattr(self, "components", []):  # none yet while Retriever.__init__ runs
            comp._forget()

    def _fit(self, show_progress: bool) -> None:
        # Components see the already-composed document text (doc_text of a bare string is the string).
        docs = dict(zip(self.doc_ids, self.doc_texts, strict=True))
        for comp in self.components:
            comp.index(docs, show_progress=show_progress)

    def _depth(self, k: int) -> int:
        return min(len(self.doc_ids), max(k, self.depth))


class HybridRetriever(_Composite):
    """StratRAG's hybrid: ``alpha * minmax(bm25) + (1 - alpha) * minmax(dense)`` over the candidates.

    ``model``, ``dense_options`` and the dense encoding options given directly (``pooling``,
    ``max_seq_length``, ``query_prompt``, ... see ``dense.ENCODING_OPTIONS``) all go to the dense component;
    the sparse component always sees the full query text (only the dense one fits queries to its length).
    """

    name = "hybrid"

    def __init__(
        self,
        alpha: float = 0.5,
        sparse: Retriever | str = "bm25",
        dense: Retriever | str = "dense",
        depth: int = 100,
        model: str | None = None,
        sparse_options: dict[str, Any] | None = None,
        dense_options: dict[str, Any] | None = None,
        **options: Any,
    ) -> None:
        dense_options = dict(dense_options or {})
        direct = {"model": model} if model is not None else {}
        direct.update({o: options.pop(o) for o in ENCODING_OPTIONS if o in options})
        both = sorted(set(direct) & set(dense_options))
        if both:
            raise ValueError(f"hybrid: {both} given both directly and in dense_options")
        dense_options.update(direct)
        super().__init__(**options)
        if not 0.0 <= float(alpha) <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
        self.alpha = float(alpha)
        self.depth = int(depth)
        self.sparse = _component(sparse, **(sparse_options or {}))
        self.dense = _component(dense, **dense_options)
        self.components = [self.sparse, self.dense]

    def _fuse(self, sparse: list[np.ndarray], dense: list[np.ndarray]) -> list[np.ndarray]:
        a = self.alpha
        return [a * minmax_normalize(s) + (1 - a) * minmax_normalize(d) for s, d in zip(sparse, dense, strict=True)]

    def _score_pools(
        self, qids: list[str], texts: list[str], pools: list[np.ndarray], show_progress: bool
    ) -> list[np.ndarray]:
        sparse = self.sparse._score_pools(qids, texts, pools, show_progress)
        return self._fuse(sparse, self.dense._score_pools(qids, texts, pools, show_progress))

    def _score_candidates(
        self, qids: list[str], texts: list[str], cands: list[np.ndarray], show_progress: bool
    ) -> list[np.ndarray]:
        sparse = self.sparse._score_candidates(qids, texts, cands, show_progress)
        return self._fuse(sparse, self.dense._score_candidates(qids, texts, cands, show_progress))

    def _search_corpus(
        self, qids: list[str], texts: list[str], k: int, show_progress: bool
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        depth = self._depth(k)
        if depth >= len(self.doc_ids):
            cands = [np.arange(len(self.doc_ids))] * len(qids)
        else:
            hits = [c._search_corpus(qids, texts, depth, show_progress) for c in self.components]
            cands = [np.union1d(a[0], b[0]).astype(np.int64) for a, b in zip(*hits, strict=True)]
        return list(zip(cands, self._score_candidates(qids, texts, cands, show_progress), strict=True))

    def settings(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "normalisation": "min-max per query over the candidates (constant -> 0)",
            "depth": self.depth,
            "sparse": self.sparse.describe(),
            "dense": self.dense.describe(),
        }


class RRFRetriever(_Composite):
    """Reciprocal rank fusion of any retrievers: ``sum_r w_r / (k + rank_r(d))``.

    ``dense_options`` go to every component given as a ``dense`` or ``hybrid`` spec string (a hybrid passes
    them to its dense side).
    """

    name = "rrf"

    def __init__(
        self,
        retrievers: Sequence[Retriever | str] = ("bm25", "dense"),
        k: int = 60,
        depth: int = 100,
        weights: Sequence[float] | None = None,
        dense_options: dict[str, Any] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.components = [_component(r, **_dense_passing(r, dense_options)) for r in retrievers]
        if not self.components:
            raise ValueError("rrf needs at least one retriever")
        self.weights = [1.0] * len(self.components) if weights is None else [float(w) for w in weights]
        if len(self.weights) != len(self.components):
            raise ValueError(f"rrf got {len(self.weights)} weights for {len(self.components)} retrievers")
        if k < 0:
            raise ValueError(f"rrf k must be >= 0, got {k!r}")
        self.k = int(k)
        self.depth = int(depth)

    def _rrf(self, pos: np.ndarray, scores: np.ndarray, weight: float) -> np.ndarray:
        """RRF contributions of one component's ranking of ``pos`` (aligned with ``pos``)."""
        order = ranked_order(np.asarray(scores, dtype=np.float64), self._id_rank[pos])
        rank = np.empty(len(pos), dtype=np.float64)
        rank[order] = np.arange(1, len(pos) + 1)
        return weight / (self.k + rank)

    def _fuse(self, per_component: list[list[np.ndarray]], sets: list[np.ndarray]) -> list[np.ndarray]:
        out = []
        for i, pos in enumerate(sets):
            total = np.zeros(len(pos))
            for scores, w in zip(per_component, self.weights, strict=True):
                total += self._rrf(pos, scores[i], w)
            out.append(total)
        return out

    def _score_pools(
        self, qids: list[str], texts: list[str], pools: list[np.ndarray], show_progress: bool
    ) -> list[np.ndarray]:
        return self._fuse([c._score_pools(qids, texts, pools, show_progress) for c in self.components], pools)

    def _score_candidates(
        self, qids: list[str], texts: list[str], cands: list[np.ndarray], show_progress: bool
    ) -> list[np.ndarray]:
        return self._fuse([c._score_candidates(qids, texts, cands, show_progress) for c in self.components], cands)

    def _search_corpus(
        self, qids: list[str], texts: list[str], k: int, show_progress: bool
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        depth = self._depth(k)
        hits = [c._search_corpus(qids, texts, depth, show_progress) for c in self.components]
        out = []
        for i in range(len(qids)):
            fused: dict[int, float] = {}
            for comp_hits, w in zip(hits, self.weights, strict=True):
                pos, scores = comp_hits[i]
                keep = ranked_order(np.asarray(scores, dtype=np.float64), self._id_rank[pos], depth)
                for rank, j in enumerate(keep, start=1):
                    fused[int(pos[j])] = fused.get(int(pos[j]), 0.0) + w / (self.k + rank)
            ids = np.fromiter(fused, dtype=np.int64, count=len(fused))
            out.append((ids, np.fromiter(fused.values(), dtype=np.float64, count=len(fused))))
        return out

    def settings(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "depth": self.depth,
            "weights": self.weights,
            "retrievers": [c.describe() for c in self.components],
        }
