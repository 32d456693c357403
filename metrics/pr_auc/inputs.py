"""Input checks for the PR-AUC metric (every error names the query or position at fault) and list fusion."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

GRADES = (0, 1, 2, 3)


class PrAucInputError(ValueError):
    """Malformed input; the message names the query (and the item or position) at fault."""


def is_number(value: Any, integral: bool = False) -> bool:
    """A real number that is not a bool (and, if ``integral``, has no fractional part)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(float(value)):
        return False
    return not integral or float(value).is_integer()


def choice(name: str, value: Any, allowed: Sequence[Any]) -> Any:
    """``value`` if it is one of ``allowed``, else a :class:`PrAucInputError` listing them."""
    if isinstance(value, bool) or value not in allowed:
        raise PrAucInputError(f"{name} must be one of {list(allowed)}, got {value!r}")
    return value


# ----------------------------------------------------------------------------------------------- input checks
def check_query_ids(query_ids: Any, n: int) -> list[str]:
    """``query_ids`` as unique strings, one per query (default "0", "1", ...)."""
    if query_ids is None:
        return [str(i) for i in range(n)]
    if isinstance(query_ids, (str, bytes)) or not isinstance(query_ids, Sequence):
        raise PrAucInputError(f"query_ids must be a list of strings, got {type(query_ids).__name__}")
    ids = list(query_ids)
    if len(ids) != n:
        raise PrAucInputError(f"query_ids has {len(ids)} ids for {n} predictions")
    for qid in ids:
        if not isinstance(qid, str):
            raise PrAucInputError(f"query ids must be strings, got {qid!r}")
    seen: set[str] = set()
    for qid in ids:
        if qid in seen:
            raise PrAucInputError(f"query id {qid!r} is given twice: query ids must be unique")
        seen.add(qid)
    return ids


def id_list(query_id: str, values: Any, what: str) -> list[str]:
    """A list of id strings (order kept), or an error naming the query and the position."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise PrAucInputError(f"query {query_id!r}: {what} must be a list of id strings, got {type(values).__name__}")
    for j, item in enumerate(values):
        if not isinstance(item, str):
            raise PrAucInputError(f"query {query_id!r}: {what}[{j}] must be an id string, got {item!r}")
    return list(values)


def unique_ids(query_id: str, values: Any, what: str) -> frozenset[str]:
    """A list of distinct id strings, as a set (a repeated id is an error)."""
    items = id_list(query_id, values, what)
    if len(set(items)) != len(items):
        twice = next(i for i in items if items.count(i) > 1)
        raise PrAucInputError(f"query {query_id!r}: {twice!r} is listed twice in {what}")
    return frozenset(items)


def ranking(query_id: str, items: Any, scores: Any = None, duplicates: str = "error") -> list[str]:
    """The ranked ids of one query. With ``scores`` (one number per id) the order is score descending, compared as
    32-bit floats, then id descending (trec_eval). A repeated id is an error, or only its first rank is kept."""
    ids = id_list(query_id, items, "the ranking")
    if scores is not None:
        if isinstance(scores, (str, bytes)) or not isinstance(scores, Sequence) or len(scores) != len(ids):
            raise PrAucInputError(f"query {query_id!r}: scores must be a list of {len(ids)} numbers, one per ranked id")
        for j, value in enumerate(scores):
            if not is_number(value):
                raise PrAucInputError(f"query {query_id!r}: scores[{j}] must be a number, got {value!r}")
        keyed = sorted(((float(np.float32(s)), i) for s, i in zip(scores, ids, strict=True)), reverse=True)
        ids = [i for _, i in keyed]
    seen: dict[str, int] = {}
    kept: list[str] = []
    for rank, item in enumerate(ids, start=1):
        if item in seen:
            if duplicates == "error":
                raise PrAucInputError(f"query {query_id!r}: {item!r} is ranked twice (ranks {seen[item]} and {rank}); "
                                      "pass duplicates='keep_first' to keep its first rank only")  # fmt: skip
            continue
        seen[item] = rank
        kept.append(item)
    return kept


def judgments(query_id: str, value: Any) -> dict[str, int] | frozenset[str]:
    """One query's pooled judgments: ``{id: grade}`` or ``[{"id", "grade"}, ...]`` (grades 0-3), or a list of
    relevant ids (already binarised)."""
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and value \
            and all(isinstance(v, Mapping) for v in value):  # fmt: skip
        pairs = []
        for item in value:
            if set(item) - {"id", "grade"} or "id" not in item or "grade" not in item:
                raise PrAucInputError(f"query {query_id!r}: a judgment is {{'id': str, 'grade': int}}, got {item!r}")
            pairs.append((item["id"], item["grade"]))
    else:
        return unique_ids(query_id, value, "the relevant ids")
    graded: dict[str, int] = {}
    for item, grade in pairs:
        if not isinstance(item, str):
            raise PrAucInputError(f"query {query_id!r}: judged ids must be strings, got {item!r}")
        if not is_number(grade, integral=True) or int(grade) not in GRADES:
            raise PrAucInputError(f"query {query_id!r}: {item!r} has grade {grade!r}; grades are integers 0-3")
        if item in graded:
            raise PrAucInputError(f"query {query_id!r}: {item!r} is judged twice")
        graded[item] = int(grade)
    return graded


def qrels_mapping(qrels: Any) -> dict[str, Any]:
    """``{query: {id: grade}}`` (or ``{query: [relevant ids]}``), or rows in the mteb / BEIR layout
    ``[{"query-id", "corpus-id", "score"}, ...]``, as a dict keyed by query id."""
    if isinstance(qrels, Mapping):
        for qid in qrels:
            if not isinstance(qid, str):
                raise PrAucInputError(f"qrels keys must be query id strings, got {qid!r}")
        return dict(qrels)
    if isinstance(qrels, (str, bytes)) or not isinstance(qrels, Sequence):
        raise PrAucInputError(f"qrels must be a dict or a list of rows, got {type(qrels).__name__}")
    out: dict[str, dict[str, Any]] = {}
    for i, row in enumerate(qrels):
        if not isinstance(row, Mapping) or not {"query-id", "corpus-id", "score"} <= set(row):
            raise PrAucInputError(f"qrels[{i}] must be a row with 'query-id', 'corpus-id' and 'score', got {row!r}")
        qid, item = row["query-id"], row["corpus-id"]
        if not isinstance(qid, str):
            raise PrAucInputError(f"qrels[{i}]: 'query-id' must be a string, got {qid!r}")
        if item in out.setdefault(qid, {}):
            raise PrAucInputError(f"query {qid!r}: {item!r} is judged twice (qrels[{i}])")
        out[qid][item] = row["score"]
    return out


def check_k(k: Any, rankings: Sequence[Sequence[str]]) -> int:
    """The depth K: ``k`` (a positive integer) or, by default, the longest ranking."""
    if k is None:
        return max((len(r) for r in rankings), default=0)
    if not is_number(k, integral=True) or int(k) < 1:
        raise PrAucInputError(f"k must be a positive integer, got {k!r}")
    return int(k)


def fuse_rankings(rankings: Sequence[Sequence[str]], method: str = "rrf", rrf_k: int = 60) -> list[str]:
    """One ranking from several (e.g. a rewriter's sub-queries), to score as one list.

    ``rrf``: score(c) = sum over lists holding c of 1 / (rrf_k + rank), score descending, ties by id descending.
    ``round_robin``: the first items of every list in turn, then the second ones, ...; repeats are skipped.

    >>> fuse_rankings([["a", "b", "c"], ["c", "d"]])  # b and d tie at 1/62: the greater id first
    ['c', 'a', 'd', 'b']
    >>> fuse_rankings([["a", "b", "c"], ["c", "d"]], method="round_robin")
    ['a', 'c', 'b', 'd']
    """
    lists = [id_list(f"list {i}", r, "the ranking") for i, r in enumerate(rankings)]
    if method == "round_robin":
        fused: dict[str, None] = {}
        for depth in range(max((len(r) for r in lists), default=0)):
            for ranked in lists:
                if depth < len(ranked):
                    fused.setdefault(ranked[depth])
        return list(fused)
    choice("method", method, ("rrf", "round_robin"))
    if not is_number(rrf_k) or rrf_k < 0:
        raise PrAucInputError(f"rrf_k must be a non-negative number, got {rrf_k!r}")
    totals: dict[str, float] = {}
    for ranked in lists:
        for rank, item in enumerate(dict.fromkeys(ranked), start=1):
            totals[item] = totals.get(item, 0.0) + 1.0 / (rrf_k + rank)
    return [item for _, item in sorted(((s, i) for i, s in totals.items()), reverse=True)]
