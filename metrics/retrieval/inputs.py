"""Checking and flattening a run and its qrels for compute.py, in bulk.

No Python code runs per retrieved document: the checks and reads are C loops over all queries at once.
Doc ids of a scored ranking are checked to be strings by ``SimpleNamespace(**ranking)`` (Python's own check of
keyword names, which CPython answers without visiting the keys of a dict that holds only ``str`` keys); the
scores are read by ``array("d", ...)`` over the chained ``values()``, which takes numbers only (what has
``__float__`` or ``__index__``, but no string); the relevant documents' scores are looked up with
``map(dict.get, ...)``. Only when a bulk check fails does a loop walk the items again, to name the first bad
one (query, document) in the error."""

from __future__ import annotations

import numbers
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, compress, repeat
from types import SimpleNamespace
from typing import Any

import numpy as np


class RetrievalInputError(ValueError):
    """Base class of the errors raised for bad metric input."""


class RunError(RetrievalInputError):
    """The run is malformed (wrong types, non-numeric or NaN scores, duplicate doc ids)."""


class QrelsError(RetrievalInputError):
    """The relevance judgments are malformed."""


class GroupsError(RetrievalInputError):
    """The query groups are malformed or miss a scored query."""


class MeasureError(RetrievalInputError):
    """An unknown measure name or a bad cut-off."""


Ranking = Mapping[str, float] | Sequence[str]
Judgments = Mapping[str, int] | Sequence[str]


@dataclass
class Judged:
    """The qrels, flattened: ``query_ids`` (queries with a relevant document, qrels order), ``excluded`` (judged
    queries without one), and one entry per relevant document (grade >= 1): ``rel_query`` (index into
    ``query_ids``, non-decreasing), ``rel_docs`` and ``rel_grade`` (float64)."""

    query_ids: list[str]
    excluded: list[str]
    rel_query: np.ndarray
    rel_docs: list[str]
    rel_grade: np.ndarray


@dataclass
class Retrieved:
    """The run, flattened for the scored queries.

    Scored rankings (``{doc: score}``) are segments of ``flat`` (their scores as 32-bit floats, in the
    mapping's order) between ``bounds[i]`` and ``bounds[i + 1]``; ``rankings[i]`` is segment ``i``'s mapping and
    ``seg_qids[i]`` its query. Their doc ids are not checked yet: :func:`segment_doc_ids` does it.
    ``found`` (indices into the relevant documents), ``found_seg`` and ``found_score`` (32-bit) list the
    relevant documents present in a scored ranking. ``listed`` / ``listed_rank`` give the 0-based rank of the
    relevant documents present in a ranked list. ``missing``: scored queries with no or an empty ranking.
    """

    flat: np.ndarray
    bounds: np.ndarray
    rankings: list[Mapping[str, Any]]
    seg_qids: list[str]
    found: np.ndarray
    found_seg: np.ndarray
    found_score: np.ndarray
    listed: list[int]
    listed_rank: list[int]
    missing: list[str]


def as_trec_scores(scores: Any) -> np.ndarray:
    """Scores as trec_eval compares them: 32-bit floats (huge values become +-inf)."""
    with np.errstate(over="ignore"):
        return np.asarray(scores, dtype=np.float64).astype(np.float32)


def _locate(sizes: Sequence[int], position: int) -> tuple[int, int]:
    """(part, offset in it) of flat ``position`` when parts of ``sizes`` are laid end to end."""
    ends = np.cumsum(sizes)
    part = int(np.searchsorted(ends, position, side="right"))
    return part, position - int(ends[part] - sizes[part])


def _all_str(items: Iterable[Any]) -> bool:
    """Whether every item is a string (str or a subclass such as numpy.str_), checked once per distinct type."""
    return all(issubclass(kind, str) for kind in set(map(type, items)))


def _keys_are_strings(mappings: Iterable[Mapping[Any, Any]]) -> bool:
    """Whether every key of every mapping is a string (str or a subclass).

    ``SimpleNamespace(**mapping)`` makes Python check that keyword names are strings, in C; CPython answers at
    once for a dict that holds only ``str`` keys (it tracks that), so this is several times faster than
    collecting the type of each key."""
    try:
        for mapping in mappings:
            SimpleNamespace(**mapping)
    except TypeError:
        return False
    return True


def _get(mapping: Mapping[str, Any], key: str, default: Any) -> Any:
    return mapping.get(key, default)


def _grades(judged: Judgments) -> Iterable[Any]:
    return judged.values() if type(judged) is dict or isinstance(judged, Mapping) else repeat(1, len(judged))


def _not_str(value: Any) -> bool:
    return not isinstance(value, str)


def _first(items: Iterable[Any], bad: Any) -> int:
    """Position of the first item for which ``bad(item)`` holds."""
    return next(i for i, item in enumerate(items) if bad(item))


def _grade(value: Any, qid: str, doc: str) -> int:
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and float(value).is_integer():
        return int(value)
    raise QrelsError(f"query {qid!r}: grade of document {doc!r} must be an integer, got {value!r}")


def read_qrels(qrels: Mapping[str, Judgments]) -> Judged:
    """Check the judgments (string ids, integer grades, no doc listed twice) and keep the relevant ones."""
    qids = list(qrels)
    if not _all_str(qids):
        bad = qids[_first(qids, _not_str)]
        raise QrelsError(f"qrels: query id must be a string, got {bad!r} ({type(bad).__name__})")
    parts: list[Judgments] = list(qrels.values())
    all_dicts = set(map(type, parts)) <= {dict}
    if not all_dicts:
        for qid, judged in zip(qids, parts, strict=True):
            if isinstance(judged, Mapping):
                continue
            if not isinstance(judged, (list, tuple)):
                raise QrelsError(f"query {qid!r}: judgments must be a dict of doc id to grade or a list of doc ids, "
                                 f"got {type(judged).__name__}")  # fmt: skip
            if len(set(judged)) != len(judged):
                raise QrelsError(f"query {qid!r}: a relevant document is listed twice in the qrels")
    sizes = list(map(len, parts))
    docs = list(chain.from_iterable(parts))
    if not (_keys_are_strings(parts) if all_dicts else _all_str(docs)):
        position = _first(docs, _not_str)
        bad = docs[position]
        raise QrelsError(f"qrels of query {qids[_locate(sizes, position)[0]]!r}: doc id must be a string, got "
                         f"{bad!r} ({type(bad).__name__})")  # fmt: skip
    # one grade per judged document, a listed one being grade 1 (views made one at a time: no work for the GC)
    grades = list(chain.from_iterable(map(dict.values, parts) if all_dicts else map(_grades, parts)))
    if not set(map(type, grades)) <= {int}:
        owners = np.repeat(np.arange(len(qids)), sizes).tolist()
        grades = [g if type(g) is int else _grade(g, qids[q], d) for g, q, d in zip(grades, owners, docs, strict=True)]
    grade = np.array(grades, dtype=np.float64)
    positive = grade > 0
    query_of = np.repeat(np.arange(len(qids)), sizes)[positive]
    has = np.bincount(query_of, minlength=len(qids)) > 0
    renumber = np.cumsum(has) - 1
    return Judged(query_ids=list(compress(qids, has.tolist())), excluded=list(compress(qids, (~has).tolist())),
                  rel_query=renumber[query_of].astype(np.int64), rel_docs=list(compress(docs, positive.tolist())),
                  rel_grade=grade[positive])  # fmt: skip


def read_run(run: Mapping[str, Ranking], judged: Judged) -> Retrieved:
    """Check the rankings of the scored queries and locate their relevant documents (see :class:`Retrieved`)."""
    query_ids, rel_docs = judged.query_ids, judged.rel_docs
    starts = np.searchsorted(judged.rel_query, np.arange(len(query_ids) + 1)).tolist()
    missing: list[str] = []
    rankings: list[Mapping[str, Any]] = []
    seg_qids: list[str] = []
    scored_of: list[Mapping[str, Any]] = []  # per scored query: its scored ranking, else an empty dict
    lists: list[Sequence[str]] = []
    list_rows: list[int] = []
    empty: dict[str, Any] = {}
    given = list(map(run.get, query_ids))
    if set(map(type, given)) == {dict} and min(map(len, given)) > 0:  # the common case: a scored ranking each
        rankings, seg_qids, scored_of = given, list(query_ids), given
    else:
        for qi, (qid, ranking) in enumerate(zip(query_ids, given, strict=True)):
            if type(ranking) is dict or isinstance(ranking, Mapping):
                if ranking:
                    rankings.append(ranking)
                    seg_qids.append(qid)
                    scored_of.append(ranking)
                    continue
            elif ranking is not None and not isinstance(ranking, (list, tuple)):
                raise RunError(f"query {qid!r}: ranking must be a dict of doc id to score or a list of doc ids, "
                               f"got {type(ranking).__name__}")  # fmt: skip
            scored_of.append(empty)
            if ranking:
                lists.append(ranking)
                list_rows.append(qi)
            else:
                missing.append(qid)
    spans = [range(starts[qi], starts[qi + 1]) for qi in list_rows]
    listed, listed_rank = _listed_ranks(lists, [query_ids[qi] for qi in list_rows], spans, rel_docs)
    sizes = list(map(len, rankings))
    flat = _scores(rankings, seg_qids, sizes)
    seg_of_query = np.cumsum([r is not empty for r in scored_of]) - 1
    # the score of each relevant document in its query's scored ranking; NaN (no score is NaN by now) if absent
    owners = map(scored_of.__getitem__, judged.rel_query.tolist())
    get = dict.get if set(map(type, rankings)) <= {dict} else _get
    looked_up = np.fromiter(map(get, owners, rel_docs, repeat(np.nan)), np.float64, len(rel_docs))
    found = np.flatnonzero(~np.isnan(looked_up))
    found_score = as_trec_scores(looked_up[found])
    return Retrieved(flat=flat, bounds=np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]), rankings=rankings,
                     seg_qids=seg_qids, found=found, found_seg=seg_of_query[judged.rel_query[found]],
                     found_score=found_score, listed=listed, listed_rank=listed_rank, missing=missing)  # fmt: skip


def _listed_ranks(lists: list[Sequence[str]], qids: list[str], spans: list[range],
                  rel_docs: list[str]) -> tuple[list[int], list[int]]:
    """Relevant documents (``spans`` index ``rel_docs``) present in the ranked ``lists``, and their 0-based
    positions; RunError naming the query for a doc id that is not a string or is listed twice."""
    listed: list[int] = []
    listed_rank: list[int] = []
    for ranking, qid, span in zip(lists, qids, spans, strict=True):
        try:
            members = dict.fromkeys(ranking)
            ok = _keys_are_strings([members])
        except TypeError:  # an unhashable doc id
            ok = False
        if not ok:
            bad = ranking[_first(ranking, _not_str)]
            raise RunError(f"query {qid!r}: doc id must be a string, got {bad!r} ({type(bad).__name__})")
        if len(members) != len(ranking):
            raise RunError(f"query {qid!r}: the ranked list has duplicate doc ids")
        for ri in span:
            if rel_docs[ri] in members:
                listed.append(ri)
                listed_rank.append(ranking.index(rel_docs[ri]))
    return listed, listed_rank


def _score_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a score (not a number that ``array("d")`` reads, NaN, too large for a float), or
    None."""
    try:
        array("d", [value])
    except TypeError:
        return f"must be a number, got {value!r}"
    except OverflowError:
        return "is too large for a 64-bit float"
    return "is NaN" if np.isnan(float(value)) else None


def _scores(rankings: list[Mapping[str, Any]], seg_qids: list[str], sizes: list[int]) -> np.ndarray:
    """All scores of the scored rankings as 32-bit floats; RunError naming the query and document for a score that
    :func:`_score_problem` rejects."""
    views = map(dict.values, rankings) if set(map(type, rankings)) <= {dict} else (r.values() for r in rankings)
    values = list(chain.from_iterable(views))  # array("d") reads a list faster than an iterator

    def fail() -> RunError:
        seg, offset = _locate(sizes, _first(values, _score_problem))
        doc, value = list(rankings[seg].items())[offset]
        return RunError(f"query {seg_qids[seg]!r}: score of document {doc!r} {_score_problem(value)}")

    try:  # array("d") takes numbers only (a str, bytes or None is a TypeError), in one C loop
        flat = np.frombuffer(array("d", values), dtype=np.float64)
    except (TypeError, OverflowError):
        raise fail() from None
    if np.isnan(flat).any():
        raise fail()
    return as_trec_scores(flat)


def segment_doc_ids(retrieved: Retrieved, wanted: Sequence[int]) -> list[str]:
    """Check that every doc id of every scored ranking is a string (RunError naming the query and the first bad id
    otherwise) and return the doc ids of the segments ``wanted`` (increasing) laid end to end, each segment's in
    its ranking's order.

    Each ranking is checked by ``SimpleNamespace(**ranking)`` (see the module docstring) and a wanted one listed
    right after, while its ids are still in the CPU's cache."""
    rankings = retrieved.rankings
    keep = np.zeros(len(rankings), dtype=bool)
    keep[np.asarray(wanted, dtype=np.int64)] = True
    out: list[str] = []
    try:
        for ranking, kept in zip(rankings, keep.tolist(), strict=True):
            SimpleNamespace(**ranking)
            if kept:
                out.extend(ranking)
    except TypeError:
        sizes = list(map(len, rankings))
        seg, offset = _locate(sizes, _first(chain.from_iterable(rankings), _not_str))
        bad = list(rankings[seg])[offset]
        raise RunError(f"query {retrieved.seg_qids[seg]!r}: doc id must be a string, got {bad!r} "
                       f"({type(bad).__name__})") from None  # fmt: skip
    return out
