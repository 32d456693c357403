"""Random baseline: uniform random scores (StratRAG's "Random" lower bound).

The score of document ``d`` for query ``q`` is a uniform number in [0, 1) that depends only on
``(seed, q, d)``: a keyed 64-bit hash (BLAKE2b of the ids, mixed with SplitMix64's finaliser) scaled by
2**-53. So a run is reproducible, adding or removing queries or documents changes no other score, and a
pool ranking is the restriction of the whole-corpus ranking to the pool (a uniformly random shuffle).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from convrag.retrievers.base import Retriever

_MASK = (1 << 64) - 1


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on uint64 arrays (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def uniform_scores(seed: int, query_id: str, doc_hashes: np.ndarray) -> np.ndarray:
    """Uniform [0, 1) scores of documents (given by their 64-bit id hashes) for ``query_id`` under ``seed``."""
    key = np.uint64(_hash64(f"{seed}\x1f{query_id}") & _MASK)
    bits = _mix(doc_hashes ^ key) >> np.uint64(11)
    return bits.astype(np.float64) * (2.0**-53)


class RandomRetriever(Retriever):
    """Uniform random scores, deterministic per ``(seed, query id, doc id)``."""

    name = "random"

    def __init__(self, seed: int = 0, **options: Any) -> None:
        super().__init__(**options)
        self.seed = int(seed)

    def _forget(self) -> None:
        super()._forget()
        self._doc_hashes = np.empty(0, dtype=np.uint64)

    def _fit(self, show_progress: bool) -> None:
        self._doc_hashes = np.fromiter((_hash64(d) for d in self.doc_ids), dtype=np.uint64, count=len(self.doc_ids))

    def _score_pools(
        self, qids: list[str], texts: list[str], pools: list[np.ndarray], show_progress: bool
    ) -> list[np.ndarray]:
        return [uniform_scores(self.seed, qid, self._doc_hashes[pos]) for qid, pos in zip(qids, pools, strict=True)]

    def settings(self) -> dict[str, Any]:
        return {"seed": self.seed}
