"""SEARA's pool (memo ``shared/reference/seara.md`` sections 2.1, 6.3): the union of top-K lists, and its signature.

* a configuration's list for query q is its ranking cut at depth ``K`` (rankings come from retrievers, which never
  repeat an id: duplicates are an error upstream);
* the pool ``P_q`` is the union of those lists, ordered as :func:`convrag.judging.pooling.pool_runs` builds it: best
  rank any configuration gave, then the number of configurations that retrieved the chunk (more first), then chunk
  id; each pooled chunk keeps its 1-based rank in every configuration that retrieved it;
* the **pool signature** is ``pool-`` + the first 16 hex digits of the SHA-256 of the canonical JSON of (sorted query
  ids, each query's sorted pooled chunk ids, ``K``, sorted configuration names): independent of the order of queries,
  configurations or rankings, changed by any change of them (adding a configuration moves recall denominators, so
  every score must be recomputed).

Scores are pool-relative: :func:`same_pool` refuses different (or missing) signatures in one table. The signature
leaves out the judge (the memo's hashes it): pass ``metrics/pr_auc`` the judged qrels' ``<pool signature>/judge-<hash>``
(:attr:`convrag.seara.judge.PseudoQrels.signature`) so that two judges of one pool are not mixed either.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from convrag.core.errors import ConvragError
from convrag.judging.pooling import PooledDoc, pool_runs
from convrag.llm.cache import canonical_json

Ranking = Mapping[str, float] | Sequence[str]
#: ``{configuration: {query_id: ranking}}``: a ranking is ``{chunk_id: score}`` in rank order (as retrievers
#: return it) or a list of chunk ids, best first
Runs = Mapping[str, Mapping[str, Ranking]]
SIGNATURE_VERSION = 1


class PoolMismatchError(ConvragError):
    """Scores computed on different pools (or without a pool signature) were put in one table."""


def pool_signature(entries: Mapping[str, Sequence[str]], k: int, configurations: Sequence[str]) -> str:
    """``pool-<16 hex>``: the SHA-256 of (sorted query ids, per-query sorted chunk ids, ``k``, sorted names)."""
    payload = {"v": SIGNATURE_VERSION, "k": int(k), "configurations": sorted(configurations),
               "pool": {q: sorted(ids) for q, ids in sorted(entries.items())}}
    return "pool-" + hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Pool:
    """The depth-``k`` pool of ``configurations`` over ``query_ids``.

    ``entries``: ``query_id -> [(chunk_id, {configuration: rank}), ...]`` in pool order; ``runs``: each
    configuration's top-``k`` list per query (``{configuration: {query_id: [chunk_id, ...]}}``; a query the
    configuration did not rank has an empty list)."""

    k: int
    configurations: tuple[str, ...]
    query_ids: tuple[str, ...]
    entries: dict[str, list[PooledDoc]]
    runs: dict[str, dict[str, list[str]]] = field(repr=False)

    @property
    def signature(self) -> str:
        """The pool signature (module docstring)."""
        return pool_signature({q: self.chunk_ids(q) for q in self.query_ids}, self.k, self.configurations)

    def chunk_ids(self, query_id: str) -> list[str]:
        """The pooled chunk ids of one query, in pool order."""
        return [c for c, _ in self.entries[query_id]]

    def pairs(self) -> list[tuple[str, str]]:
        """Every pooled (query id, chunk id), queries in pool order, chunks in pool order."""
        return [(q, c) for q in self.query_ids for c, _ in self.entries[q]]

    @property
    def size(self) -> int:
        """Number of pooled (query, chunk) pairs: sum over queries of ``|P_q|`` (at most ``|Q| * N * K``)."""
        return sum(len(v) for v in self.entries.values())

    def predictions(self, configuration: str) -> list[list[str]]:
        """One configuration's top-``k`` lists, parallel to :attr:`query_ids` (``predictions`` of pr_auc)."""
        if configuration not in self.runs:
            raise KeyError(f"{configuration!r} is not a configuration of this pool ({', '.join(self.configurations)})")
        return [list(self.runs[configuration][q]) for q in self.query_ids]

    def summary(self) -> dict[str, Any]:
        """JSON-ready description: signature, k, configurations, queries and pooled pairs."""
        return {"signature": self.signature, "k": self.k, "configurations": list(self.configurations),
                "queries": len(self.query_ids), "pairs": self.size}


def _top(ranking: Ranking, k: int, config: str, qid: str) -> list[str]:
    ids = list(ranking)  # a mapping iterates its keys in rank order
    if any(not isinstance(c, str) or not c for c in ids):
        raise ConvragError(f"configuration {config!r}, query {qid!r}: chunk ids must be non-empty strings")
    if len(set(ids)) != len(ids):
        raise ConvragError(f"configuration {config!r}, query {qid!r}: the ranking repeats a chunk id")
    return ids[:k]


def build_pool(runs: Runs, k: int, query_ids: Sequence[str] | None = None) -> Pool:
    """The depth-``k`` pool of ``runs`` (module docstring). ``query_ids``: the queries to pool, in that order
    (default: every query any configuration ranked, sorted); a query no configuration ranked gets an empty pool."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"pool depth k must be a positive integer, got {k!r}")
    if not runs:
        raise ConvragError("pooling needs at least one configuration's run")
    names = list(runs)
    if any(not isinstance(n, str) or not n for n in names):
        raise ConvragError(f"configuration names must be non-empty strings, got {names}")
    qids = list(query_ids) if query_ids is not None else sorted({q for run in runs.values() for q in run})
    if len(set(qids)) != len(qids):
        raise ConvragError("query_ids repeats a query id")
    top = {n: {q: _top(runs[n].get(q, ()), k, n, q) for q in qids} for n in names}
    entries = pool_runs(top, k, qids)
    return Pool(k=k, configurations=tuple(names), query_ids=tuple(qids), entries=entries, runs=top)


def _signature_of(name: str, value: Mapping[str, Any] | str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(f"{name}: expected a metric result (a mapping) or a signature string, got {type(value)}")
    return value.get("pool_signature") or value.get("settings", {}).get("pool_signature")


def same_pool(results: Mapping[str, Mapping[str, Any] | str | None]) -> str:
    """The one pool signature shared by every result (``{configuration: metric result or signature}``); raises
    :class:`PoolMismatchError` when one has none or when they differ (scores are only comparable in one pool)."""
    if not results:
        raise PoolMismatchError("no results to compare")
    groups: dict[str | None, list[str]] = {}
    for name, value in results.items():
        groups.setdefault(_signature_of(name, value), []).append(name)
    if None in groups:
        raise PoolMismatchError(f"no pool signature on {', '.join(groups[None])}: score with pool_signature= "
                                "(PseudoQrels.signature) so that scores from different pools are never compared")
    if len(groups) > 1:
        detail = "; ".join(f"{sig}: {', '.join(names)}" for sig, names in groups.items())
        raise PoolMismatchError(f"scores from {len(groups)} different pools cannot share a table ({detail}); "
                                "pool every configuration together and score them again")
    return next(iter(groups))  # type: ignore[return-value]


TABLE_COLUMNS = ("pr_auc", "pr_auc_macro", "recall_at_k", "precision_at_k", "n_scored", "n_excluded")


def score_table(results: Mapping[str, Mapping[str, Any]],
                columns: Sequence[str] = TABLE_COLUMNS) -> tuple[str, list[dict[str, Any]]]:
    """``(signature, rows)``: one row per configuration with ``columns`` of its ``metrics/pr_auc`` result, after
    :func:`same_pool` has checked that every result was computed on one pool."""
    signature = same_pool(results)
    return signature, [{"configuration": name, **{c: r.get(c) for c in columns}} for name, r in results.items()]
