"""SEARA's retriever metric for 🤗 evaluate: PR-AUC over rank cut-offs against a judged pool (never calls an LLM)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import datasets
import evaluate

from .compute import DEFAULT_RELEVANCE_LEVEL, score_chunks
from .facts import DEFAULT_COVERAGE_THRESHOLD, score_facts
from .inputs import GRADES, PrAucInputError, check_query_ids, is_number

_CITATION = """\
@article{seara2025,
  title = {{SPEAR}: Subset-sampled Performance Evaluation via Automated Ground Truth Generation for {RAG}},
  journal = {arXiv preprint arXiv:2507.06554},
  year = {2025},
  note = {The method is called SEARA in the paper's body},
}
@inproceedings{davis2006relationship,
  title = {The Relationship Between Precision-Recall and {ROC} Curves},
  author = {Davis, Jesse and Goadrich, Mark},
  booktitle = {Proceedings of the 23rd International Conference on Machine Learning},
  pages = {233--240},
  year = {2006},
}
"""

_DESCRIPTION = """\
Scores one retriever configuration against pseudo ground truth built by pooling (SEARA / SPEAR): the union of
the top-K lists of every compared configuration, judged once. The headline `pr_auc` is the micro-averaged
precision-recall curve over rank cut-offs k = 1..K (counts pooled over queries at each k), integrated as a step
sum without interpolation; with a perfect judge its ordering of configurations is the ordering under complete
judgments. Beside it: the macro mean of per-query average precision against the pooled relevant count
(`pr_auc_macro`, MAP@K), the other averages and integrators by name, the curves, per-query values, the
excluded queries (no pooled relevant item) and the pool signature. Recall is pool-relative: compare numbers
only within one pool. Config `chunks` judges chunks (grades 0-3, relevant at 2 or more); config `facts` takes
recall over pooled minimal facts and precision from chunk judgments or retrieved characters.
"""

_KWARGS_DESCRIPTION = """
Args (both configs):
    predictions: one ranked list of chunk ids per query, best first (cut at depth k).
    references: config "chunks": the query's pooled judgments, a list of {"id": str, "grade": 0-3} (relevant when
        grade >= relevance_level) or a list of relevant ids (already binarised). Config "facts": the query's
        pooled fact ids F'_q.
    query_ids: unique query ids (default "0", "1", ...).
    k: depth K (default: the longest ranking); lists are cut at k and the curve has points k = 1..K.
    precision_denominator: "retrieved" (default; hits / min(k, n)) or "k" (hits / k, trec_eval's P@k).
    integration: "step" (default), "trapezoid" (anchored at recall 0, precision 1), "interp_all" or "interp11";
        sets `pr_auc`, `pr_auc_macro` and the per-query `pr_auc` (every value is in `alternatives` anyway).
    include_unanswerable_in_precision: add the retrievals of excluded queries to the micro precision (False).
    duplicates: "error" (default) or "keep_first" (a repeated id keeps its first rank).
    scores: optional, one list of scores per query, parallel to its ranking: reorders it by score descending
        (32-bit floats), ties by id descending (trec_eval).
    pool_signature: a string naming the pool (configurations, K, judge); echoed in the output.
    return_query_curves: add each query's recall and precision lists to `per_query` (False).
Args (config "chunks" only):
    relevance_level: lowest relevant grade, 1-3 (default 2).
    unjudged: "error" (default: a ranked chunk without a judgment stops the computation) or "nonrelevant".
    qrels: instead of references, {query id: {chunk id: grade}} or mteb rows [{"query-id", "corpus-id",
        "score"}]; every query of predictions must be judged, and judged queries missing from it score 0.
Args (config "facts" only): the coverage, either
    chunk_facts: {chunk id: [fact ids]} (shared by all queries) or one such dict per query; or
    chunk_spans and fact_spans: {id: [doc_id, start, end]} character offsets, a fact covered when the union of
        the top-k chunk spans holds coverage_threshold (default 0.9) of it;
    relevant_chunks: optional, per query the chunk ids judged relevant (precision); default: chunks that state a
        pooled fact.
    precision_unit: "chunk" (default) or "char" (characters inside facts / characters retrieved; spans only).
Returns:
    pr_auc (micro), pr_auc_macro, map_at_k (macro step), recall_at_k and precision_at_k (micro, at K),
    alternatives {"micro" | "macro" | "points": {"step" | "trapezoid" | "interp_all" | "interp11": value}},
    curve {k, precision_micro, recall_micro, precision_points, recall_points}, per_query [{query_id, ap, pr_auc,
    r_prime, n_retrieved, recall_at_k, precision_at_k}], n_scored, n_excluded, excluded_query_ids,
    missing_query_ids, n_unjudged, pool_signature and settings. Nothing is rounded; None where undefined.
Examples:
    The worked example: relevant chunks at ranks 1 and 3 of 5; two more pooled relevant chunks were missed.

    >>> import evaluate
    >>> pr_auc = evaluate.load("metrics/pr_auc", "chunks")
    >>> grades = {"c1": 3, "c2": 0, "c3": 2, "c4": 1, "c5": 0, "c8": 2, "c9": 3}
    >>> judged = [{"id": chunk, "grade": grade} for chunk, grade in grades.items()]
    >>> results = pr_auc.compute(predictions=[["c1", "c2", "c3", "c4", "c5"]], references=[judged],
    ...                          pool_signature="pool-v1")
    >>> round(results["pr_auc"], 4), results["per_query"][0]["r_prime"], results["pool_signature"]
    (0.4167, 4, 'pool-v1')
    >>> {name: round(value, 4) for name, value in results["alternatives"]["macro"].items()}
    {'step': 0.4167, 'trapezoid': 0.3958, 'interp_all': 0.4167, 'interp11': 0.4545}

    Micro pools the counts of all queries; a query with no pooled relevant chunk is excluded and listed:

    >>> results = pr_auc.compute(predictions=[["a", "b"], ["d", "c"], ["e"]],
    ...                          references=[["a"], ["c", "x"], []], query_ids=["q1", "q2", "q3"])
    >>> results["curve"]["recall_micro"], results["curve"]["precision_micro"]
    ([0.3333333333333333, 0.6666666666666666], [0.5, 0.5])
    >>> round(results["pr_auc"], 4), round(results["pr_auc_macro"], 4), results["excluded_query_ids"]
    (0.3333, 0.625, ['q3'])

    Facts: chunkings "A" and "B" each return a different chunk holding the same fact f1.

    >>> facts = evaluate.load("metrics/pr_auc", "facts")
    >>> covers = {"A|gt": ["f1"], "gt|B": ["f1"], "noise": []}
    >>> [facts.compute(predictions=[[top, "noise"]], references=[["f1"]], chunk_facts=covers)["pr_auc"]
    ...  for top in ("A|gt", "gt|B")]
    [1.0, 1.0]
"""

_ID = datasets.Value("string")
_GRADED = datasets.List({"id": datasets.Value("string"), "grade": datasets.Value("int64")})
_FEATURES = {
    "ids": datasets.Features({"predictions": datasets.List(_ID), "references": datasets.List(_ID)}),
    "graded": datasets.Features({"predictions": datasets.List(_ID), "references": _GRADED}),
}
CONFIGS = ("chunks", "facts")
_COMMON = {"query_ids", "k", "precision_denominator", "integration", "include_unanswerable_in_precision",
           "duplicates", "scores", "pool_signature", "return_query_curves"}  # fmt: skip
_OPTIONS = {"chunks": _COMMON | {"relevance_level", "unjudged", "qrels"},
            "facts": _COMMON | {"chunk_facts", "chunk_spans", "fact_spans", "relevant_chunks", "coverage_threshold",
                                "precision_unit"}}  # fmt: skip


def _form(item: Any, where: str, graded_allowed: bool) -> str:
    """``ids`` for an id string, ``graded`` for a valid {"id", "grade"} judgment; an error otherwise."""
    if isinstance(item, str):
        return "ids"
    if graded_allowed and isinstance(item, Mapping):
        if set(item) != {"id", "grade"} or not isinstance(item["id"], str):
            raise PrAucInputError(f"{where}: a judgment is {{'id': str, 'grade': int}}, got {item!r}")
        if not is_number(item["grade"], integral=True) or int(item["grade"]) not in GRADES:
            raise PrAucInputError(f"{where}: grade {item['grade']!r} of {item['id']!r} is not one of {list(GRADES)}")
        return "graded"
    kind = "an id string or a {'id', 'grade'} judgment" if graded_allowed else "an id string"
    raise PrAucInputError(f"{where}: expected {kind}, got {item!r}")


def _check_lists(values: Any, column: str) -> None:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise PrAucInputError(f"{column} must be a list with one list per query, got {type(values).__name__}")
    for i, value in enumerate(values):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise PrAucInputError(f"{column}[{i}] must be a list (one per query), got {type(value).__name__}")


def _per_query(name: str, values: Any, query_ids: Sequence[str]) -> dict[str, Any] | None:
    """A per-query option given as a list parallel to predictions, keyed by query id."""
    if values is None:
        return None
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Sequence) or len(values) != len(query_ids):
        raise PrAucInputError(f"{name} must be a list with one entry per query ({len(query_ids)})")
    return dict(zip(query_ids, values, strict=True))


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class PrAuc(evaluate.Metric):
    """SEARA's PR-AUC: micro step area over rank cut-offs (headline), macro MAP@K and named alternatives."""

    @property
    def config(self) -> str:
        return "chunks" if self.config_name == "default" else self.config_name

    def _info(self) -> evaluate.MetricInfo:
        if self.config not in CONFIGS:
            raise ValueError(f"unknown config {self.config_name!r}: choose one of {list(CONFIGS)}")
        features = list(_FEATURES.values()) if self.config == "chunks" else _FEATURES["ids"]
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=features,
            reference_urls=["https://arxiv.org/abs/2507.06554", "https://github.com/usnistgov/trec_eval"],
        )

    def add_batch(self, *, predictions: Any = None, references: Any = None, **kwargs: Any) -> None:
        """Check the batch (id strings; judgments in one form across all queries), then add it."""
        if self.writer is None:
            self._ref_form: str | None = None
            self._added = 0
        for column, values in (("predictions", predictions), ("references", references)):
            if values is not None:
                _check_lists(values, column)
        if predictions is not None and references is not None and len(predictions) != len(references):
            raise PrAucInputError(f"{len(predictions)} predictions for {len(references)} references: one per query")
        for i, ranked in enumerate(predictions or [], start=self._added):
            for j, item in enumerate(ranked):
                _form(item, f"predictions[{i}][{j}]", graded_allowed=False)
        for i, judged in enumerate(references or [], start=self._added):
            for j, item in enumerate(judged):
                form = _form(item, f"references[{i}][{j}]", graded_allowed=self.config == "chunks")
                if self._ref_form is None and self.writer is not None and form == "graded":
                    raise PrAucInputError(f"references[{i}]: earlier batches held only empty lists, read as id lists; "
                                          "put a query with judgments in the first batch")  # fmt: skip
                if self._ref_form not in (None, form):
                    raise PrAucInputError(f"references[{i}][{j}]: give every query's references in one form "
                                          "(all id strings or all {'id', 'grade'} judgments)")  # fmt: skip
                self._ref_form = form
        self._added += len(predictions) if predictions is not None else 0
        super().add_batch(predictions=predictions, references=references, **kwargs)

    def add(self, *, prediction: Any = None, reference: Any = None, **kwargs: Any) -> None:
        """One query's ranking and judgments, checked as :meth:`add_batch` does."""
        self.add_batch(predictions=[prediction], references=[reference], **{k: [v] for k, v in kwargs.items()})

    def _infer_feature_from_batch(self, batch: Mapping[str, Any]) -> datasets.Features:
        return _FEATURES[getattr(self, "_ref_form", None) or "ids"]

    def compute(self, **kwargs: Any) -> dict[str, Any] | None:
        """Scores the queries added so far (or given here); with ``qrels`` (config chunks) the judgments come as one
        mapping and everything is computed at once."""
        if kwargs.get("qrels") is None:
            return super().compute(**kwargs)
        if self.config != "chunks":
            raise PrAucInputError("qrels is an option of the chunks config; the facts config takes references")
        if kwargs.get("references") is not None or kwargs.get("predictions") is None:
            raise PrAucInputError("with qrels, give predictions and no references")
        _check_lists(kwargs["predictions"], "predictions")
        return self._compute(**{**kwargs, "references": None})

    def _compute(self, predictions: Sequence[Sequence[str]], references: Sequence[Sequence[Any]] | None,
                 query_ids: Sequence[str] | None = None, **options: Any) -> dict[str, Any]:
        unknown = sorted(set(options) - _OPTIONS[self.config])
        if unknown:
            raise PrAucInputError(f"unknown option(s) for the {self.config} config: {unknown}")
        qids = check_query_ids(query_ids, len(predictions))
        run = dict(zip(qids, predictions, strict=True))
        for name in ("scores", "relevant_chunks"):
            options[name] = _per_query(name, options.get(name), qids)
        if self.config == "facts":
            if not isinstance(options.get("chunk_facts"), (Mapping, type(None))):
                options["chunk_facts"] = _per_query("chunk_facts", options["chunk_facts"], qids)
            options.setdefault("coverage_threshold", DEFAULT_COVERAGE_THRESHOLD)
            return score_facts(run, dict(zip(qids, references, strict=True)), **options)
        options.setdefault("relevance_level", DEFAULT_RELEVANCE_LEVEL)
        options.pop("relevant_chunks")
        qrels = options.pop("qrels", None)
        if references is not None:
            form = getattr(self, "_ref_form", None)
            qrels = {q: (r if r or form != "graded" else {}) for q, r in zip(qids, references, strict=True)}
        return score_chunks(run, qrels, **options)
