"""Retrieval metric for 🤗 evaluate: nDCG, Recall, R_cap, Success, MRR, MAP and P at cut-offs (trec_eval)."""

from __future__ import annotations

import numbers
from collections.abc import Hashable, Mapping, Sequence
from itertools import chain
from types import SimpleNamespace
from typing import Any

import datasets
import evaluate
import numpy as np

from .compute import DEFAULT_K_VALUES, measure_names, score_run

# evaluate copies only the files this script imports itself (not compute.py's imports): keep inputs.py named here
from .inputs import GroupsError, QrelsError, RetrievalInputError, RunError

_CITATION = """\
@misc{trec_eval,
  title = {trec\\_eval: the standard tool used by the TREC community for evaluating ad hoc retrieval runs},
  author = {{NIST}},
  howpublished = {\\url{https://github.com/usnistgov/trec_eval}},
}
@inproceedings{thakur2021beir,
  title = {{BEIR}: A Heterogeneous Benchmark for Zero-shot Evaluation of Information Retrieval Models},
  author = {Thakur, Nandan and Reimers, Nils and R{\\"u}ckl{\\'e}, Andreas and Srivastava, Abhishek
            and Gurevych, Iryna},
  booktitle = {NeurIPS Datasets and Benchmarks Track},
  year = {2021},
}
"""

_DESCRIPTION = """\
Scores ranked retrieval results per query against relevance judgments with trec_eval's conventions:
nDCG@k (linear gain = grade, log2 discount, ideal ranking from all judged documents), Recall@k (over all
relevant documents), R_cap@k (BEIR's capped recall), Success@k, MRR@k and MRR (no cut-off), MAP@k (over all
relevant documents) and P@k (over k); ir_measures' names (R@k, RR, RR@k, AP, AP@k) are read too. Grades <= 0
are not relevant. Document and query ids are strings or integers (an integer id is its string form). Scored
predictions are ordered by score descending (compared as 32-bit floats, as trec_eval does), ties by document id
descending. Queries without any relevant document are excluded from the means and listed; queries with an empty
prediction score 0. Nothing is rounded.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: one ranking per query, best first: a list of document ids, or a list of
        {"id": str, "score": float} (then ordered by score descending, ties by id descending).
    references: one set of judgments per query: a list of relevant document ids (grade 1), or a list of
        {"id": str, "grade": int} (graded; grades <= 0 mean not relevant).
        Document ids may be integers: 3 and "3" are the same document (so both in one list is an error).
    query_ids: optional list of unique query ids, strings or integers (default "0", "1", ...), used in the
        per-query output (as strings).
    k_values: cut-offs for the default measures (default [1, 3, 5, 10]).
    measures: optional list of measure names, e.g. ["nDCG@10", "Recall@100", "MRR"], or ir_measures' names
        ("R@5", "RR", "RR@10", "AP", "AP@100"; results are keyed by the names given); the default is every
        family (nDCG, Recall, R_cap, Success, MRR, MAP, P) at every cut-off in k_values, plus "MRR".
    per_query: if True, also return {"per_query": {query_id: {measure: value}}}.
    groups: optional group label per query (a list parallel to predictions, or a dict keyed by query id);
        adds per-group means and their unweighted mean ("macro").
Returns:
    A dict: the mean of every measure over the scored queries, "num_queries" (how many were scored),
    "excluded_queries" (ids of queries without a relevant document), and, on request, "per_query",
    "groups", "group_sizes" and "macro".
Examples:
    >>> import evaluate
    >>> retrieval = evaluate.load("metrics/retrieval")
    >>> results = retrieval.compute(
    ...     predictions=[["d3", "d1", "d2"], ["d5", "d4"]],
    ...     references=[["d1"], ["d4", "d6"]],
    ...     measures=["Recall@1", "Recall@2", "MRR"],
    ... )
    >>> results
    {'Recall@1': 0.0, 'Recall@2': 0.75, 'MRR': 0.5, 'num_queries': 2, 'excluded_queries': []}

    Integer ids and ir_measures' measure names:

    >>> retrieval.compute(predictions=[[3, 1, 2], [5, 4]], references=[[1], [4, 6]], measures=["R@2", "RR"])
    {'R@2': 0.75, 'RR': 0.5, 'num_queries': 2, 'excluded_queries': []}

    Graded judgments, scored predictions, per-query values and groups:

    >>> results = retrieval.compute(
    ...     predictions=[[{"id": "d1", "score": 0.2}, {"id": "d2", "score": 0.9}], [{"id": "d7", "score": 1.0}]],
    ...     references=[[{"id": "d1", "grade": 2}, {"id": "d2", "grade": 1}], [{"id": "d8", "grade": 0}]],
    ...     query_ids=["q1", "q2"],
    ...     measures=["nDCG@1", "P@1"],
    ...     per_query=True,
    ...     groups=["turn-1", "turn-2"],
    ... )
    >>> results["per_query"]
    {'q1': {'nDCG@1': 0.5, 'P@1': 1.0}}
    >>> results["excluded_queries"], results["groups"]
    (['q2'], {'turn-1': {'nDCG@1': 0.5, 'P@1': 1.0}})
"""

_DOC = datasets.Value("string")
_SCORED = datasets.List({"id": datasets.Value("string"), "score": datasets.Value("float64")})
_GRADED = datasets.List({"id": datasets.Value("string"), "grade": datasets.Value("int64")})
# one option per (prediction form, reference form); _infer_feature_from_batch picks it from the whole input
_FEATURES = [
    datasets.Features({"predictions": datasets.List(_DOC), "references": datasets.List(_DOC)}),
    datasets.Features({"predictions": datasets.List(_DOC), "references": _GRADED}),
    datasets.Features({"predictions": _SCORED, "references": datasets.List(_DOC)}),
    datasets.Features({"predictions": _SCORED, "references": _GRADED}),
]
_FORMS = {("ids", "ids"): 0, ("ids", "graded"): 1, ("scored", "ids"): 2, ("scored", "graded"): 3}
_DESCRIBE = {"ids": "a document id", "scored": 'an {"id", "score"} object',
             "graded": 'an {"id", "grade"} object'}  # fmt: skip


def _string_id(value: Any, where: str, error: type[RetrievalInputError], what: str = "document id") -> Any:
    """An integer id (not a bool) as its string form; strings and anything else (checked later) unchanged."""
    if isinstance(value, bool):
        raise error(f"{where}: {value!r} is not a {what} (ids are strings or integers)")
    return str(int(value)) if isinstance(value, numbers.Integral) else value


def with_string_ids(values: Any, column: str, offset: int = 0) -> Any:
    """``values`` (one list per query) with every integer document id, alone or as an object's ``"id"``, turned
    into its string form; an integer and a string naming the same document in one query are an error."""
    error = RunError if column == "predictions" else QrelsError
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        return values
    out = []
    for i, value in enumerate(values, start=offset):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            out.append(value)
            continue
        items, seen = [], {}
        for j, item in enumerate(value):
            where = f"{column}[{i}][{j}]"
            raw = item.get("id") if isinstance(item, Mapping) else item
            doc = _string_id(raw, where, error)
            if isinstance(doc, str) and type(seen.setdefault(doc, raw)) is not type(raw):
                raise error(f"{where}: {raw!r} and {seen[doc]!r} name the same document (an integer id is its "
                            "string form)")  # fmt: skip
            if not isinstance(item, Mapping):
                item = doc
            elif doc is not raw:
                item = {**item, "id": doc}
            items.append(item)
        out.append(items)
    return out


def _is_number(value: Any, integral: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    return not integral or float(value).is_integer()


def _item_form(item: Any, column: str, where: str) -> str:
    """``ids`` for a document id string, ``scored`` / ``graded`` for a valid object; an error otherwise."""
    error = RunError if column == "predictions" else QrelsError
    if isinstance(item, str):
        return "ids"
    if not isinstance(item, Mapping):
        raise error(f"{where}: expected a document id (a string or an integer) or an object, got {item!r} "
                    f"({type(item).__name__})")
    key = "score" if column == "predictions" else "grade"
    if not isinstance(item.get("id"), str):
        raise error(f"{where}: 'id' must be a string, got {item.get('id')!r}")
    if not _is_number(item.get(key), integral=key == "grade"):
        kind = "an integer" if key == "grade" else "a number"
        raise error(f"{where}: {key!r} must be {kind}, got {item.get(key)!r}")
    return "scored" if key == "score" else "graded"


def check_form(values: Sequence[Any], column: str, form: str | None, offset: int = 0) -> str | None:
    """The one form of every item of ``values`` (one list per query): ``ids`` or ``scored`` / ``graded``.

    Every query must use the form of the first non-empty one (``form`` when earlier batches set it): a mix would
    be cast to one form and score zeros, so it is an error naming the position (``predictions[3][0]``)."""
    error = RunError if column == "predictions" else QrelsError
    first = None
    for i, value in enumerate(values, start=offset):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise error(f"{column}[{i}] must be a list (one per query), got {type(value).__name__}")
        for j, item in enumerate(value):
            kind = _item_form(item, column, f"{column}[{i}][{j}]")
            if form is None:
                form, first = kind, f"{column}[{i}][{j}]"
            elif kind != form:
                since = first or "the items of earlier batches"
                raise error(f"{column}[{i}][{j}] is {_DESCRIBE[kind]}, but {since} is {_DESCRIBE[form]}: give every "
                            "query's items in one form (mixed forms would be cast to one and score zeros)")  # fmt: skip
    return form


_KEY = {"predictions": "score", "references": "grade"}
_VALUE_KINDS = {"predictions": ({float, int}, "scored"), "references": ({int}, "graded")}


def bulk_columns(values: Any, column: str, form: str | None, offset: int = 0) -> tuple[str | None, list[Any]] | None:
    """``values`` (one list per query) checked column-wise: their one form and, per query, its list of document
    ids or its objects as a dict ``{id: score}`` (``{id: grade}``); None when a check fails or an item is of a
    rarer type (integer ids, numpy numbers): :func:`with_string_ids` and :func:`check_form` then walk the items to
    convert them or to name the bad one.

    A column passes when every query is a list or tuple; every item is a ``str`` (form ``ids``) or, the first
    item being a ``dict``, every item is an object with an ``"id"`` and a ``"score"`` (``"grade"``), the ids all
    ``str``, the scores all ``float`` or ``int`` (the grades all ``int``) (form ``scored`` / ``graded``); and
    that form is ``form`` when earlier batches set one. Each check is a C loop (``set(map(type, ...))``, a dict's
    own check of keyword names, the lookups of :func:`as_mappings`), none a Python step per item but the dict
    comprehension that builds each query's dict; an id given twice in a query is an error naming the query."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        return None
    if not set(map(type, values)) <= {list, tuple}:
        return None
    first = next((value[0] for value in values if len(value)), None)
    if first is None:
        return form, list(values)
    if type(first) is str:
        if set(map(type, chain.from_iterable(values))) != {str}:
            return None
        kind, per_query = "ids", list(values)
    elif type(first) is dict:
        numbers_ok, kind = _VALUE_KINDS[column]
        try:
            per_query = as_mappings(values, column, offset)
        except (KeyError, TypeError):  # an item that is no object, without "id" or the score, a non-string id
            return None
        if set(map(type, per_query)) != {dict}:  # a query of document ids among the objects
            return None
        if not set(map(type, chain.from_iterable(map(dict.values, per_query)))) <= numbers_ok:
            return None
    else:
        return None
    return (kind, per_query) if form in (None, kind) else None


def as_mappings(values: Sequence[Sequence[Any]], column: str, offset: int = 0) -> list[Any]:
    """Per query, its {"id", "score"} (``"grade"``) objects as a dict ``{id: score}``; a query of document ids
    stays a list. A document given twice in a query is an error naming it and the query's position; an item that
    is not an object with those keys, or an id that is not a string, is a KeyError or a TypeError."""
    key = _KEY[column]

    def mapping(value: Any) -> Any:
        if type(value) is dict or isinstance(value, Mapping) or not len(value) or isinstance(value[0], str):
            return value if len(value) else {}
        out = {item["id"]: item[key] for item in value}
        SimpleNamespace(**out)  # a TypeError unless every id is a string, checked while the ids are in the cache
        return out

    out = list(map(mapping, values))
    sizes = np.fromiter(map(len, out), dtype=np.int64, count=len(out))
    given = np.fromiter(map(len, values), dtype=np.int64, count=len(out))
    for i in np.flatnonzero(sizes != given).tolist():
        seen: set[str] = set()
        twice = next(item["id"] for item in values[i] if item["id"] in seen or seen.add(item["id"]))
        what = "predicted" if column == "predictions" else "judged"
        raise (RunError if column == "predictions" else QrelsError)(
            f"{column}[{i + offset}]: document {twice!r} is {what} twice")
    return out


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Retrieval(evaluate.Metric):
    """nDCG@k, Recall@k, R_cap@k, Success@k, MRR@k, MAP@k and P@k with trec_eval conventions."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=_FEATURES,
            reference_urls=["https://github.com/usnistgov/trec_eval", "https://github.com/beir-cellar/beir"],
        )

    def add_batch(self, *, predictions: Any = None, references: Any = None, **kwargs: Any) -> None:
        """Check that every prediction (and every reference) uses one form, column-wise (:func:`bulk_columns`), then
        add the batch: kept in memory in a single process (:meth:`compute` scores it without evaluate's Arrow
        cache), written to that cache when ``num_process > 1``."""
        if predictions is not None and references is not None and len(predictions) != len(references):
            raise RunError(f"{len(predictions)} predictions for {len(references)} references: one of each per query")
        checked = {"predictions": predictions, "references": references}
        columns: dict[str, Any] = {}
        if self.num_process == 1 and (kwargs or predictions is None or references is None):
            raise ValueError(f"add_batch takes predictions and references (one of each per query), got "
                             f"{sorted(k for k, v in {**checked, **kwargs}.items() if v is not None)}")  # fmt: skip
        first = getattr(self, "_batches", None) is None
        if first:
            self._forms: dict[str, str | None] = {"predictions": None, "references": None}
            self._added = 0
            self._batches: list[tuple[Any, Any]] | None = []
        try:
            self._check_forms(checked, columns, first)
        except RetrievalInputError:
            if first:  # nothing was added: the next batch starts afresh, as with evaluate's own add_batch
                self._batches = None
            raise
        self._added += len(predictions) if predictions is not None else 0
        if self.num_process > 1:
            super().add_batch(**checked, **kwargs)
        else:
            self._batches.append((columns["predictions"], columns["references"]))

    def _check_forms(self, checked: dict[str, Any], columns: dict[str, Any], first: bool) -> None:
        """Check each column of a batch (in bulk, else item by item to name the bad one): integer ids in
        ``checked`` become strings, ``columns`` gets each query's ids or ``{id: value}`` dict."""
        for column, values in checked.items():
            if values is None:
                continue
            bulk = bulk_columns(values, column, self._forms[column], self._added)
            if bulk is None:
                values = checked[column] = with_string_ids(values, column, self._added)
                bulk = check_form(values, column, self._forms[column], self._added), values
            form, columns[column] = bulk
            if not first and self._forms[column] is None and form not in (None, "ids"):
                raise (RunError if column == "predictions" else QrelsError)(
                    f"{column}[{self._added}]: the first batch held only empty lists, read as document id strings; "
                    "this batch holds objects: put a non-empty query in the first batch")  # fmt: skip
            self._forms[column] = form

    def compute(self, *, predictions: Any = None, references: Any = None, **kwargs: Any) -> dict[str, Any] | None:
        """Score the batches added so far and these ``predictions`` / ``references`` (see the module's inputs).

        In a single process the checked batches go straight to the scoring, in memory; with ``num_process > 1``
        evaluate's own compute gathers them from its Arrow cache first."""
        if self.num_process > 1:
            return super().compute(predictions=predictions, references=references, **kwargs)
        try:
            if predictions is not None or references is not None:
                self.add_batch(predictions=predictions, references=references)
            batches = getattr(self, "_batches", None)
        finally:
            self._batches = None  # the next add_batch or compute starts afresh, whatever happens
        if not batches:
            raise ValueError("nothing to score: give predictions and references to compute() or add_batch()")
        return self._compute(list(chain.from_iterable(p for p, _ in batches)),
                             list(chain.from_iterable(r for _, r in batches)), **kwargs)  # fmt: skip

    def add(self, *, prediction: Any = None, reference: Any = None, **kwargs: Any) -> None:
        """One query's prediction and reference, checked as :meth:`add_batch` does."""
        self.add_batch(predictions=[prediction], references=[reference],
                       **{k: [v] for k, v in kwargs.items()})  # fmt: skip

    def _infer_feature_from_batch(self, batch: Mapping[str, Any]) -> datasets.Features:
        """The feature option of the forms found in the whole input (not only its first query)."""
        forms = getattr(self, "_forms", {})
        return _FEATURES[_FORMS[(forms.get("predictions") or "ids", forms.get("references") or "ids")]]

    def _compute(self, predictions: Sequence[Any], references: Sequence[Any],
                 query_ids: Sequence[str | int] | None = None, k_values: Sequence[int] = DEFAULT_K_VALUES,
                 measures: Sequence[str] | None = None, per_query: bool = False,
                 groups: Sequence[Hashable] | Mapping[str, Hashable] | None = None) -> dict[str, Any]:
        if query_ids is None:
            query_ids = [str(i) for i in range(len(predictions))]
        if not set(map(type, query_ids)) <= {str}:
            query_ids = [_string_id(q, "query_ids", RunError, "query id") for q in query_ids]
        if len(query_ids) != len(predictions):
            raise RunError(f"query_ids has {len(query_ids)} ids for {len(predictions)} predictions")
        if not all(isinstance(q, str) for q in query_ids) or len(set(query_ids)) != len(query_ids):
            raise RunError("query_ids must be unique strings or integers (an integer id is its string form)")
        run = dict(zip(query_ids, as_mappings(predictions, "predictions"), strict=True))
        qrels = dict(zip(query_ids, as_mappings(references, "references"), strict=True))
        if isinstance(groups, Mapping):
            keyed = {_string_id(q, "groups", GroupsError, "query id"): label for q, label in groups.items()}
            if len(keyed) != len(groups):
                raise GroupsError("groups names a query twice (an integer id is its string form)")
            groups = keyed
        elif groups is not None:
            if isinstance(groups, str) or len(groups) != len(query_ids):
                raise GroupsError(f"groups must hold one label per query ({len(query_ids)})")
            groups = dict(zip(query_ids, groups, strict=True))
        names = measure_names(k_values) if measures is None else measures
        result = score_run(run, qrels, measures=names, groups=groups)
        output: dict[str, Any] = dict(result.scores)
        output.update(num_queries=result.num_queries, excluded_queries=list(result.excluded))
        if per_query:
            output["per_query"] = result.per_query
        if groups is not None:
            output.update(groups=result.groups, group_sizes=result.group_sizes, macro=result.macro)
        return output
