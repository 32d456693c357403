"""Retrieval measures with trec_eval conventions, computed with numpy.

A *run* maps each query id to ``{doc_id: score}`` (ranked by score descending, ties by doc id descending as plain
string comparison, like trec_eval) or to a list of doc ids (ranked in the order given). Scores are compared as 32-bit
floats, as trec_eval keeps them (C ``float``), so scores that differ only beyond about 7 significant digits tie.
*Qrels* map each query id to ``{doc_id: integer grade}`` or to a list of relevant doc ids (grade 1). A document is
relevant when its grade is >= 1; grades <= 0 count as not relevant and add no gain. Measures (``k`` a positive
integer cut-off, ranks from 1; trec_eval's name in brackets):

- ``nDCG@k``: sum of grade / log2(rank + 1) over the top k, divided by the same sum for the ideal ordering of all
  judged documents [``ndcg_cut``]; ``nDCG``: no cut-off [``ndcg``];
- ``Recall@k``: relevant in the top k / all relevant [``recall_k``]; ``R_cap@k``: relevant in the top k /
  min(k, all relevant) (BEIR's capped recall); ``P@k``: relevant in the top k / k [``P_k``];
- ``Success@k``: 1 if any relevant document is in the top k, else 0;
- ``MRR@k``: 1 / rank of the first relevant document, 0 if it is not in the top k; ``MRR``: no cut-off [``recip_rank``];
- ``MAP@k``: sum of precision at the rank of each relevant document in the top k / all relevant [``map_cut``];
  ``MAP``: no cut-off [``map``].

ir_measures' names (``R@k``, ``RR``, ``RR@k``, ``AP``, ``AP@k``: :data:`IR_MEASURES_NAMES`) give ir_measures' values
(relevance level 1); results are keyed by the name asked for. Judged queries missing from the run (or with an empty
ranking) score 0 and count in every mean; queries with no relevant document are left out of the means
(``RetrievalResult.excluded``), run queries without judgments listed in ``RetrievalResult.unjudged``. Nothing is
rounded. All queries are scored in one vectorised pass, no Python step per retrieved document (:func:`_relevant_ranks`).

>>> run = {"q1": {"d1": 0.9, "d2": 0.8, "d3": 0.1}, "q2": ["d7", "d5"]}
>>> qrels = {"q1": {"d2": 2, "d3": 1, "d9": 0}, "q2": ["d5"], "q3": {"d4": 1}}
>>> result = score_run(run, qrels, measures=["Recall@1", "MRR", "P@2"])
>>> result.scores
{'Recall@1': 0.0, 'MRR': 0.3333333333333333, 'P@2': 0.3333333333333333}
>>> result.per_query["q2"]
{'Recall@1': 0.0, 'MRR': 0.5, 'P@2': 0.5}
>>> result.missing
['q3']
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from operator import gt
from typing import Any

import numpy as np

from .inputs import (
    GroupsError,
    Judgments,
    MeasureError,
    QrelsError,
    Ranking,
    RetrievalInputError,
    Retrieved,
    RunError,
    as_trec_scores,
    read_qrels,
    read_run,
    segment_doc_ids,
)

__all__ = [
    "DEFAULT_K_VALUES", "IR_MEASURES_NAMES", "MACRO", "MEASURE_FAMILIES", "UNCUT_FAMILIES", "GroupsError",
    "MeasureError", "QrelsError", "RetrievalInputError", "RetrievalResult", "RunError", "as_trec_scores",
    "measure_names", "parse_measure", "score_run",
]  # fmt: skip

MEASURE_FAMILIES: tuple[str, ...] = ("nDCG", "Recall", "R_cap", "Success", "MRR", "MAP", "P")
"""Measure families; each takes a cut-off ``@k``."""
UNCUT_FAMILIES: tuple[str, ...] = ("nDCG", "MRR", "MAP")
"""Families that may also be named without a cut-off (whole ranking)."""
IR_MEASURES_NAMES: dict[str, str] = {"R": "Recall", "RR": "MRR", "AP": "MAP"}
"""ir_measures' family names that differ from ours, with the family each one means."""
DEFAULT_K_VALUES: tuple[int, ...] = (1, 3, 5, 10)
MACRO = "macro"
"""Key of the macro-average over groups in ``RetrievalResult.to_dict()``."""

_NAME = re.compile(r"^(?P<family>[A-Za-z_]+)(?:@(?P<k>[0-9]+))?$")
_CELLS = 4_000_000  # scores per block when comparing relevant documents with their rankings


def parse_measure(name: str) -> tuple[str, int | None]:
    """Split ``"nDCG@10"`` into ``("nDCG", 10)`` and ``"MRR"`` into ``("MRR", None)``; ir_measures' names map to
    our families (:data:`IR_MEASURES_NAMES`).

    >>> parse_measure("R_cap@5"), parse_measure("RR"), parse_measure("AP@100")
    (('R_cap', 5), ('MRR', None), ('MAP', 100))
    """
    if isinstance(name, str) and "(" in name:
        raise MeasureError(f"measure {name!r}: parameters such as (rel=2) or (judged_only=True) are not supported; "
                           "a document is relevant when its grade is >= 1")  # fmt: skip
    match = _NAME.match(name) if isinstance(name, str) else None
    family = None if match is None else IR_MEASURES_NAMES.get(match["family"], match["family"])
    if family not in MEASURE_FAMILIES:
        known = ", ".join((*MEASURE_FAMILIES, *IR_MEASURES_NAMES))
        raise MeasureError(f"unknown measure {name!r}; use one of {known} with '@k' (names are case-sensitive)")
    k = None if match["k"] is None else int(match["k"])
    if k is None and family not in UNCUT_FAMILIES:
        raise MeasureError(f"measure {name!r} needs a cut-off, e.g. '{name}@10'")
    if k is not None and k < 1:
        raise MeasureError(f"measure {name!r}: the cut-off must be a positive integer")
    return family, k


def measure_names(k_values: Sequence[int] = DEFAULT_K_VALUES, families: Sequence[str] = MEASURE_FAMILIES,
                  uncut: Sequence[str] = ("MRR",)) -> list[str]:
    """Names of ``families`` at every cut-off (family-major), then the ``uncut`` names.

    >>> measure_names([1, 5], families=["nDCG", "P"])
    ['nDCG@1', 'nDCG@5', 'P@1', 'P@5', 'MRR']
    """
    ks = _check_k_values(k_values)
    names = [f"{family}@{k}" for family in families for k in ks] + list(uncut)
    for name in names:
        parse_measure(name)
    return names


def _check_k_values(k_values: Sequence[int]) -> list[int]:
    if isinstance(k_values, (str, bytes, numbers.Number)) or not len(k_values):
        raise MeasureError(f"k_values must be a non-empty sequence of positive integers, got {k_values!r}")
    for k in k_values:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise MeasureError(f"k_values must hold positive integers, got {k!r}")
    return sorted({int(k) for k in k_values})


@dataclass(eq=False)
class RetrievalResult:
    """Scores of one run.

    ``scores``: mean of each measure over ``query_ids`` (the judged queries with a relevant document);
    ``values``: per-query matrix, rows in ``query_ids`` order, columns in ``measures`` order;
    ``excluded``: judged queries without relevant documents (not scored); ``unjudged``: run queries absent
    from the qrels (not scored); ``missing``: scored queries absent from the run or with an empty ranking
    (scored 0); ``groups`` / ``group_sizes``: per-group means and sizes; ``macro``: mean of the group means.
    """

    measures: list[str]
    scores: dict[str, float]
    query_ids: list[str]
    values: np.ndarray
    excluded: list[str] = field(default_factory=list)
    unjudged: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    groups: dict[str, dict[str, float]] | None = None
    group_sizes: dict[str, int] | None = None
    macro: dict[str, float] | None = None
    include_per_query: bool = False

    @cached_property
    def per_query(self) -> dict[str, dict[str, float]]:
        """``{query_id: {measure: value}}`` for every scored query."""
        rows = zip(self.query_ids, self.values.tolist(), strict=True)
        return {qid: dict(zip(self.measures, row, strict=True)) for qid, row in rows}

    @property
    def num_queries(self) -> int:
        return len(self.query_ids)

    def __getitem__(self, measure: str) -> float:
        return self.scores[measure]

    def to_dict(self, per_query: bool | None = None) -> dict[str, Any]:
        """JSON-ready dict; includes ``per_query`` if asked (default: the ``per_query`` given to score_run)."""
        out: dict[str, Any] = {
            "scores": dict(self.scores), "num_queries": self.num_queries, "excluded": list(self.excluded),
            "unjudged": list(self.unjudged), "missing": list(self.missing),
        }  # fmt: skip
        if self.groups is not None:
            out.update(groups=self.groups, group_sizes=self.group_sizes, **{MACRO: self.macro})
        if self.include_per_query if per_query is None else per_query:
            out["per_query"] = self.per_query
        return out


def score_run(run: Mapping[str, Ranking], qrels: Mapping[str, Judgments],
              k_values: Sequence[int] = DEFAULT_K_VALUES, measures: Sequence[str] | None = None,
              per_query: bool = False, groups: Mapping[str, Hashable] | None = None) -> RetrievalResult:
    """Score ``run`` against ``qrels`` (see the module docstring for the definitions).

    ``measures``: exact names such as ``"nDCG@10"``, ``"MRR"`` or ir_measures' ``"RR"``; when None, every family
    at every ``k_values`` cut-off plus ``"MRR"`` (``k_values`` is only used then). ``groups`` maps every scored
    query id to a label; group means and their macro-average are then added (labels become strings).
    ``per_query``: whether ``to_dict()`` includes per-query scores (``result.per_query`` always works).
    """
    names = measure_names(k_values) if measures is None else list(measures)
    if isinstance(measures, str) or not names:
        raise MeasureError(f"measures must be a non-empty sequence of measure names, got {measures!r}")
    if len(set(names)) != len(names):
        raise MeasureError(f"measures are repeated: {names!r}")
    parsed = [parse_measure(name) for name in names]
    if not isinstance(run, Mapping):
        raise RunError(f"run must be a mapping of query id to ranking, got {type(run).__name__}")
    if not isinstance(qrels, Mapping):
        raise QrelsError(f"qrels must be a mapping of query id to judgments, got {type(qrels).__name__}")

    judged = read_qrels(qrels)
    if not judged.query_ids:
        raise QrelsError("no query in the qrels has a relevant document (grade >= 1); nothing to score")
    unjudged = [qid for qid in run if qid not in qrels]
    retrieved = read_run(run, judged)
    ranks = _relevant_ranks(retrieved, judged.rel_docs)
    values = _measure_values(parsed, len(judged.query_ids), judged.rel_query, judged.rel_grade, ranks)
    result = RetrievalResult(
        measures=names, scores=dict(zip(names, values.mean(axis=0).tolist(), strict=True)),
        query_ids=judged.query_ids, values=values, excluded=judged.excluded, unjudged=unjudged,
        missing=retrieved.missing, include_per_query=per_query,
    )  # fmt: skip
    if groups is not None:
        _add_groups(result, groups)
    return result


def _relevant_ranks(retrieved: Retrieved, rel_docs: list[str]) -> np.ndarray:
    """0-based rank of every relevant document in its query's ranking (inf when not retrieved).

    In a scored ranking, trec_eval's order is score descending, then doc id descending. The rank of a relevant
    document is the number of documents of its ranking with a higher 32-bit score plus those that tie with its
    score and have a greater doc id. Both counts come from comparing the relevant document's score with its
    ranking's scores, for all relevant documents at once (:func:`_compare_rows`); doc ids are read only for
    rankings where a relevant document ties with another, and compared only for the tied pairs. Every doc id of
    every scored ranking is checked to be a string (:func:`segment_doc_ids`)."""
    r = retrieved
    ranks = np.full(len(rel_docs), np.inf)
    ranks[r.listed] = r.listed_rank
    ahead, pair_found, pair_column = _compare_rows(r.flat, r.bounds, r.found_seg, r.found_score)
    segs = np.unique(r.found_seg[pair_found])
    docs = segment_doc_ids(r, segs.tolist())
    if pair_found.size:
        lengths = np.diff(r.bounds)[segs]
        start_in_docs = np.cumsum(lengths) - lengths  # where each wanted segment starts in ``docs``
        at = pair_column + start_in_docs[np.searchsorted(segs, r.found_seg[pair_found])]
        theirs = map(docs.__getitem__, at.tolist())
        mine = map(rel_docs.__getitem__, r.found[pair_found].tolist())
        later = np.fromiter(map(gt, theirs, mine), dtype=bool, count=pair_found.size)
        ahead += np.bincount(pair_found[later], minlength=ahead.size)
    ranks[r.found] = ahead
    return ranks


def _compare_rows(flat: np.ndarray, bounds: np.ndarray, seg: np.ndarray,
                  own: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each (segment ``seg[i]``, 32-bit score ``own[i]``): how many scores of the segment (``flat`` between
    ``bounds[s]`` and ``bounds[s + 1]``) are higher, and the pairs (i, position in the segment) of the scores
    that equal it (itself included), when it ties with another.

    Segments are compared as rows of a matrix: ``flat`` reshaped when every segment has the same length, else
    gathered (padded with NaN, which equals nothing) in blocks of about ``_CELLS`` cells of rows of similar
    length (lengths in one power-of-two bucket, so padding at most doubles a block)."""
    sizes = np.diff(bounds)
    ahead = np.zeros(seg.size, dtype=np.int64)
    pairs_i: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    pairs_column: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    if not seg.size:
        return ahead, pairs_i[0], pairs_column[0]
    uniform = bool((sizes == sizes[0]).all())
    lengths = sizes[seg]
    bucket = np.ceil(np.log2(lengths)).astype(np.int64)
    for b in np.unique(bucket).tolist():
        members = np.flatnonzero(bucket == b)
        width = int(lengths[members].max())
        step = max(1, _CELLS // width)
        for lo in range(0, members.size, step):
            rows = members[lo:lo + step]
            if uniform:
                block = flat.reshape(-1, width)[seg[rows]]
            else:
                columns = np.arange(width)
                positions = bounds[seg[rows], None] + columns
                block = np.where(columns < lengths[rows, None], flat[np.minimum(positions, flat.size - 1)], np.nan)
            mine = own[rows, None]
            ahead[rows] = np.count_nonzero(block > mine, axis=1)
            equal = block == mine
            tied = np.flatnonzero(np.count_nonzero(equal, axis=1) > 1)  # each document ties with itself
            which, column = np.nonzero(equal[tied])
            pairs_i.append(rows[tied][which])
            pairs_column.append(column)
    return ahead, np.concatenate(pairs_i), np.concatenate(pairs_column)


def _measure_values(parsed: list[tuple[str, int | None]], n_queries: int, rel_query: np.ndarray,
                    grade: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Per-query matrix of the measures from the relevant documents' grades and 0-based ranks."""
    num_rel = np.bincount(rel_query, minlength=n_queries).astype(np.float64)
    first = np.concatenate([[0], np.cumsum(num_rel, dtype=np.int64)[:-1]])
    order = np.lexsort((rank, rel_query))  # by query, then rank
    q, r, g = rel_query[order], rank[order], grade[order]
    seen = np.arange(q.size) - first[q] + 1  # relevant documents up to and including this one
    precision = seen / (r + 1.0)  # 0 for unretrieved (rank inf)
    gain = g / np.log2(r + 2.0)
    best_rank = r[first]  # smallest rank per query
    ideal_order = np.lexsort((-grade, rel_query))
    ideal_pos = np.arange(q.size) - first[q]
    ideal_gain = grade[ideal_order] / np.log2(ideal_pos + 2.0)
    out = np.empty((n_queries, len(parsed)), dtype=np.float64)

    def per_query(weights: np.ndarray) -> np.ndarray:
        return np.bincount(q, weights=weights, minlength=n_queries)

    for column, (family, k) in enumerate(parsed):
        cut = np.inf if k is None else float(k)
        within = r < cut
        if family == "nDCG":
            ideal = np.bincount(q, weights=np.where(ideal_pos < cut, ideal_gain, 0.0), minlength=n_queries)
            out[:, column] = per_query(np.where(within, gain, 0.0)) / ideal
        elif family == "MRR":
            out[:, column] = np.where(best_rank < cut, 1.0 / (best_rank + 1.0), 0.0)
        elif family == "MAP":
            out[:, column] = per_query(np.where(within, precision, 0.0)) / num_rel
        else:
            hits = per_query(within.astype(np.float64))
            if family == "Recall":
                out[:, column] = hits / num_rel
            elif family == "R_cap":
                out[:, column] = hits / np.minimum(cut, num_rel)
            elif family == "Success":
                out[:, column] = (hits > 0).astype(np.float64)
            else:  # "P"
                out[:, column] = hits / cut
    return out


def _add_groups(result: RetrievalResult, groups: Mapping[str, Hashable]) -> None:
    """Fill ``groups``, ``group_sizes`` and ``macro`` (the unweighted mean of the group means)."""
    if not isinstance(groups, Mapping):
        raise GroupsError(f"groups must be a mapping of query id to group label, got {type(groups).__name__}")
    codes: dict[str, int] = {}
    labels = np.empty(result.num_queries, dtype=np.int64)
    for row, qid in enumerate(result.query_ids):
        if qid not in groups:
            raise GroupsError(f"query {qid!r} is scored but has no group label")
        label = groups[qid]
        if label is None or not isinstance(label, Hashable):
            raise GroupsError(f"query {qid!r}: group label must be a string or number, got {label!r}")
        labels[row] = codes.setdefault(str(label), len(codes))
    sizes = np.bincount(labels, minlength=len(codes))
    means = np.stack([np.bincount(labels, weights=column, minlength=len(codes)) / sizes
                      for column in result.values.T], axis=1)  # fmt: skip
    ordered = sorted(codes.items())
    result.groups = {name: dict(zip(result.measures, means[code].tolist(), strict=True)) for name, code in ordered}
    result.group_sizes = {name: int(sizes[code]) for name, code in ordered}
    result.macro = dict(zip(result.measures, means.mean(axis=0).tolist(), strict=True))
