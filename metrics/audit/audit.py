"""Benchmark-audit metric for 🤗 evaluate: MTR-Eval's judge dimensions and RECOR's quality labels, aggregated."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import datasets
import evaluate

from .aggregate import aggregate_labels, aggregate_scores
from .judging import LABEL_SETS, judge_texts

__all__ = ["Audit", "aggregate_labels", "aggregate_scores"]

_CITATION = """\
@inproceedings{ruan2026mtrsuite,
  title = {{MTR-Suite}: A Framework for Evaluating and Synthesizing Conversational Retrieval Benchmarks},
  author = {Ruan, Junhao and Abudula, Abudukeyumu and Li, Bei and Yin, Yongjing and Liu, Xinyu and Jiao, Kechen
            and Chen, Xin and Wang, Jingang and Cai, Xunliang and Xiao, Tong and Zhu, Jingbo},
  year = {2026},
}
@article{ali2026recor,
  title = {{RECOR}: Reasoning-focused Multi-turn Conversational Retrieval Benchmark},
  author = {Ali, Mohammed and Abdallah, Abdelrahman and Agarwal, Amit and Patel, Hitesh Laxmichand
            and Jatowt, Adam},
  journal = {arXiv preprint arXiv:2601.05461},
  year = {2026},
}
"""

_DESCRIPTION = """\
Audits a retrieval benchmark's labels with LLM judges, as MTR-Suite's MTR-Eval and RECOR's quality checks do.
Two ways in: (1) judgments already made (by `convrag audit`, or any judge) as parallel lists of judge name,
dimension and score (plus optional labels and errors): the metric aggregates them; (2) raw turns (query,
gold documents, optional answer and history) and a judge: the metric judges them along MTR-Eval's
query-evidence alignment (Q-E, 1-5 per gold document), answer-evidence faithfulness (A-E, 1-5) and answer
quality (Qual., 1-5), then aggregates. Aggregation: per judge and dimension, the mean over readable verdicts
(unreadable ones and failed calls are excluded and counted, never scored); per dimension, the unweighted mean
over judges of those means. Label dimensions (RECOR's dependency type, 6 labels, and question pattern,
9 labels): counts, shares and the normalised entropy H / log K.
"""

_KWARGS_DESCRIPTION = """
Args (aggregating given judgments):
    judges: the judge of each verdict (string).
    dimensions: the dimension of each verdict (e.g. "query_evidence", "completeness", "naturalness").
    scores: the verdict's score (float; None when no verdict could be read).
    labels: optional, the verdict's label for label dimensions ("dependency_type", "question_pattern").
    errors: optional, why a verdict has no score ("unparseable: ...", "call failed: ...").
    label_sets: optional {dimension: [labels]} (default: RECOR's two label sets).
Args (judging raw turns):
    queries: the current query of each turn (string).
    documents: its gold documents (list of strings).
    answers: optional reference answers (A-E and Qual. are judged only where one is given).
    histories: optional earlier messages per turn, [{"role": "user"|"assistant", "content": str}, ...].
    judge: an LLM, an LLM spec ("openai:MODEL@URL", "default" = the embedded SmolLM2-135M placeholder, which only
        shows that the plumbing works) or a list of them (an ensemble). Required on this path.
    judge_dimensions: subset of ["query_evidence", "answer_faithfulness", "answer_quality"] (default: all three).
    concurrency: parallel judge calls (default 4).
Returns:
    {"overall": {dimension: {"mean", "judges", "n", "failed", ...}}, "per_judge": {judge: {dimension: {"mean",
    "n", "failed", "failures"}}}, "labels": {dimension: {judge: {"counts", "shares", "unparsed",
    "normalized_entropy"}}}} and, when the metric judged, "verdicts" (one dict per verdict, rationale included).
Examples:
    Aggregating judgments of two judges (the second could not be read once):

    >>> import evaluate
    >>> audit = evaluate.load("metrics/audit")
    >>> results = audit.compute(judges=["a", "a", "b", "b"], dimensions=["query_evidence"] * 4,
    ...                         scores=[5.0, 3.0, 2.0, None], errors=[None, None, None, "unparseable: no rating"])
    >>> results["per_judge"]["a"]["query_evidence"]["mean"], results["per_judge"]["b"]["query_evidence"]["failed"]
    (4.0, 1)
    >>> results["overall"]["query_evidence"]["mean"]  # (4.0 + 2.0) / 2: judges weigh the same
    3.0

    Judging a turn with a scripted judge (hand-written verdicts):

    >>> from convrag.llm import LLM
    >>> from convrag.llm.backends.fake import FakeBackend
    >>> def reply(messages):
    ...     if "reference answers" in messages[0]["content"]:  # the A-E and Qual. judges' instructions
    ...         return "The answer repeats the document's date and adds nothing.\\n**Rating:** 5"
    ...     return "The document gives the opening year directly.\\n**Rating:** 4"
    >>> judge = LLM(FakeBackend(responder=reply, model="scripted"), cache=False)
    >>> results = audit.compute(queries=["When did the bridge open?"],
    ...                         documents=[["The Oresund Bridge opened to traffic on 1 July 2000."]],
    ...                         answers=["It opened on 1 July 2000."], judge=judge)
    >>> {d: v["mean"] for d, v in results["overall"].items()}
    {'query_evidence': 4.0, 'answer_faithfulness': 5.0, 'answer_quality': 5.0}
"""

_FEATURES = datasets.Features({"judges": datasets.Value("string"), "dimensions": datasets.Value("string"),
                               "scores": datasets.Value("float64")})


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Audit(evaluate.Metric):
    """MTR-Eval / RECOR judge aggregation (and judging of raw turns)."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=_FEATURES,
            reference_urls=["https://github.com/rangehow/mtr-suite", "https://arxiv.org/abs/2601.05461"],
        )

    def compute(self, **kwargs: Any) -> dict[str, Any] | None:
        """Aggregate judgments (``judges``, ``dimensions``, ``scores``: evaluate's batching applies), or judge
        raw turns first (``queries``, ``documents``, ``judge``: computed at once; ``add_batch`` is not used)."""
        if kwargs.get("queries") is not None:
            return self._compute(**kwargs)
        missing = [k for k in ("judges", "dimensions", "scores") if kwargs.get(k) is None]
        if missing:
            raise ValueError(f"missing {', '.join(missing)}: give judges, dimensions and scores (judgments) or "
                             "queries and documents with a judge (to judge)")
        return super().compute(**kwargs)

    def _compute(self, judges: Sequence[str] | None = None, dimensions: Sequence[str] | None = None,
                 scores: Sequence[float | None] | None = None, queries: Sequence[str] | None = None,
                 documents: Sequence[Sequence[str]] | None = None, labels: Sequence[str | None] | None = None,
                 errors: Sequence[str | None] | None = None,
                 label_sets: Mapping[str, Sequence[str]] | None = None, answers: Sequence[str | None] | None = None,
                 histories: Sequence[Sequence[Mapping[str, str]]] | None = None, judge: Any = None,
                 judge_dimensions: Sequence[str] | None = None, concurrency: int = 4) -> dict[str, Any]:
        verdicts = None
        if queries is not None:
            if judge is None:
                raise ValueError("judging raw turns needs judge= (an LLM, a spec or a list of them)")
            verdicts = judge_texts(queries, documents or [], answers=answers, histories=histories, judge=judge,
                                   dimensions=judge_dimensions, concurrency=concurrency)
            judges = [v.judge for v in verdicts]
            dimensions = [v.dimension for v in verdicts]
            scores = [v.score for v in verdicts]
            labels = [v.label for v in verdicts]
            errors = [v.error for v in verdicts]
        if judges is None or dimensions is None or scores is None:
            raise ValueError("give judges, dimensions and scores (judgments) or queries and documents (to judge)")
        for name, column in (("labels", labels), ("errors", errors)):
            if column is not None and len(column) != len(judges):
                raise ValueError(f"{name} has {len(column)} entries for {len(judges)} verdicts")
        sets = dict(LABEL_SETS if label_sets is None else label_sets)
        scored = [i for i, d in enumerate(dimensions) if d not in sets]
        result = aggregate_scores([judges[i] for i in scored], [dimensions[i] for i in scored],
                                  [scores[i] for i in scored],
                                  [errors[i] for i in scored] if errors is not None else None)
        labelled = [i for i, d in enumerate(dimensions) if d in sets]
        result["labels"] = aggregate_labels([judges[i] for i in labelled], [dimensions[i] for i in labelled],
                                            [labels[i] if labels is not None else None for i in labelled], sets)
        if verdicts is not None:
            result["verdicts"] = [v.to_dict() for v in verdicts]
        return result
