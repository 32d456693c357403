"""Depth-k pooling of several retrievers per turn, and relevance judges on a graded 0-3 scale.

Pooling (TREC depth-k pooling; SEARA's pooling step): for every audited turn, each retriever ranks the turn's
search space (its subset's corpus, or its candidate pool when the benchmark searches pools, as StratRAG does)
with the benchmark's query strategy, through the evaluation engine (:func:`convrag.evaluation.engine.run_benchmark`);
the pool of depth ``k`` is the union of the retrievers' top-``k`` documents. Each pooled document keeps its
1-based rank in every retriever that retrieved it.

Relevance grades (UMBRELA's 0-3 scale): 0 unrelated; 1 related but does not answer; 2 partly answers (or the
answer is buried in other material); 3 answers. A document counts as relevant when its grade is at least the
binary cut-off :data:`RELEVANT_CUTOFF` = 2 (TREC DL's ``trec_eval -l 2``). Every judge answers
``verdict(item, doc) -> Verdict`` (score = the grade, or None with ``error`` set) and ``grade(item, doc) -> int |
None``: :class:`LLMRelevanceJudge` (prompt ``audit_relevance_graded``), :class:`OracleJudge` (grades from a
complete label set) and :class:`NoisyOracleJudge` (the oracle with seeded flips, to validate estimators).
"""

from __future__ import annotations

import dataclasses
import random
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from convrag.core.progress import scope
from convrag.evaluation.engine import resolve_strategies, run_benchmark
from convrag.judging.items import AuditDoc, AuditItem, AuditSet
from convrag.judging.verdict import Verdict, free_text_rationale, judge_call
from convrag.llm import LLM, ParseError, SamplingParams, extract_json, load_prompt

#: grade names of the 0-3 scale, index = grade
GRADE_LABELS = ("unrelated", "related", "partial", "answers")
#: lowest grade that counts as relevant (binary cut-off)
RELEVANT_CUTOFF = 2
#: the verdict dimension of a pooled document's relevance
POOLED = "pooled_relevance"

PooledDoc = tuple[str, dict[str, int]]
Run = dict[str, dict[str, float]]


class Pool(dict[str, list[PooledDoc]]):
    """``item_id -> [(doc_id, {retriever: rank}), ...]``: the union of the retrievers' top-``k``, ordered by the
    best rank any retriever gave, then by how many retrievers retrieved the document (more first), then doc id.
    Doc ids are those of the item's subset. ``runs``: each retriever's top-``k`` run ``{item_id: {doc: score}}``;
    ``k``, ``strategy`` (the query strategy's name) and ``retrievers`` say how the pool was made."""

    def __init__(self, entries: Mapping[str, list[PooledDoc]], runs: Mapping[str, Run], k: int,
                 strategy: str | None = None) -> None:
        super().__init__(entries)
        self.runs = dict(runs)
        self.k = k
        self.strategy = strategy
        self.retrievers = tuple(self.runs)


def item_qrels(audit_set: AuditSet) -> dict[str, dict[str, int]]:
    """The official qrels of the audited turns: ``item_id -> {doc_id: grade}`` (every row, grade 0 rows too)."""
    return {it.item_id: dict(audit_set.data.qrels.get(it.domain, {}).get(it.item_id, {})) for it in audit_set.items}


def default_strategy(audit_set: AuditSet) -> str:
    """The benchmark's default query strategy: the first of its profile's strategies whose data is present."""
    return next(iter(resolve_strategies(audit_set.profile, audit_set.data, None)))


def retrieve(audit_set: AuditSet, retrievers: Sequence[str], k: int, strategy: str | None = None, *,
             llm: Any = None, retriever_options: Mapping[str, Mapping[str, Any]] | None = None,
             progress: bool = False) -> dict[str, Run]:
    """Each retriever's top-``k`` run over the audited turns, ``{retriever: {item_id: {doc_id: score}}}`` in rank
    order, made by the evaluation engine with ``strategy`` (default: :func:`default_strategy`); ``llm`` serves the
    LLM-based strategies."""
    if k < 1:
        raise ValueError(f"pool depth k must be at least 1, got {k}")
    ids = {it.item_id for it in audit_set.items}
    turns = [t for t in audit_set.data.turns if t.qid in ids]  # a sample: only its turns, only their subsets
    data = dataclasses.replace(audit_set.data, turns=turns,
                               subsets=[s for s in audit_set.data.subsets if any(t.domain == s for t in turns)])
    name = strategy or default_strategy(audit_set)
    # the engine scores its runs too; these measures only satisfy the profile's checks (cut-off 10 is in all)
    measures = ["nDCG@10"] if k == 10 else ["nDCG@10", f"Recall@{k}"]
    with scope(audit_set.benchmark, "pooling"):
        scored = run_benchmark(str(audit_set.folder), audit_set.profile, retrievers=list(retrievers),
                               strategies=[name], measures=measures, top_k=k, data=data, llm=llm,
                               retriever_options=retriever_options, progress=progress)  # fmt: skip
    out: dict[str, Run] = {}
    for spec in retrievers:
        merged: Run = {}
        for run in scored.runs[(scored.system(spec), name)].values():
            for qid, ranking in run.items():
                merged[qid] = dict(list(ranking.items())[:k])
        out[spec] = merged
    return out


def pool_runs(runs: Mapping[str, Mapping[str, Mapping[str, float] | Sequence[str]]], k: int,
              item_ids: Sequence[str] | None = None) -> dict[str, list[PooledDoc]]:
    """The depth-``k`` pool of ``runs`` (``{retriever: {item_id: ranking}}``, a ranking in rank order: a dict
    ``doc -> score`` as retrievers return it, or a list of doc ids), ordered as :class:`Pool` says. ``item_ids``:
    the items to pool (default: every item of any run); an item no retriever ranked gets an empty pool."""
    ids = list(item_ids) if item_ids is not None else list(dict.fromkeys(q for run in runs.values() for q in run))
    out: dict[str, list[PooledDoc]] = {}
    for qid in ids:
        ranks: dict[str, dict[str, int]] = {}
        for name, run in runs.items():
            for rank, doc in enumerate(list(run.get(qid, ()))[:k], start=1):
                ranks.setdefault(doc, {})[name] = rank
        order = sorted(ranks, key=lambda d: (min(ranks[d].values()), -len(ranks[d]), d))
        out[qid] = [(d, ranks[d]) for d in order]
    return out


def pool(audit_set: AuditSet, retrievers: Sequence[str] = ("bm25", "dense"), k: int = 10,
         strategy: str | None = None, **options: Any) -> Pool:
    """The depth-``k`` pool of ``retrievers`` for every audited turn (``options``: see :func:`retrieve`)."""
    if not retrievers or len(set(retrievers)) != len(retrievers):
        raise ValueError(f"pooling needs distinct retrievers, got {list(retrievers)}")
    name = strategy or default_strategy(audit_set)
    runs = retrieve(audit_set, retrievers, k, name, **options)
    return Pool(pool_runs(runs, k, [it.item_id for it in audit_set.items]), runs, k, name)


# --- judges --------------------------------------------------------------------------------------------------------
def relevance_verdict(item: AuditItem, doc: AuditDoc, judge: str, dimension: str, grade: int | None, rationale: str,
                      raw: str, error: str | None, **extra: Any) -> Verdict:
    """A graded relevance verdict: ``score`` = the grade, ``label`` its name, ``extra["doc_id"]`` the document."""
    return Verdict(item_id=item.item_id, judge=judge, dimension=dimension,
                   score=None if grade is None else float(grade), label=None if grade is None else GRADE_LABELS[grade],
                   rationale=rationale, raw=raw, error=error, extra={"doc_id": doc.doc_id, **extra})  # fmt: skip


class RelevanceJudge(ABC):
    """Grades one document for one turn on the 0-3 scale; ``name`` identifies the judge in verdicts."""

    name: str = "judge"

    @abstractmethod
    def verdict(self, item: AuditItem, doc: AuditDoc, dimension: str = POOLED) -> Verdict:
        """The judge's verdict; ``score`` is the grade 0-3, or None with ``error`` set when none could be read."""

    def grade(self, item: AuditItem, doc: AuditDoc) -> int | None:
        """The grade 0-3, or None when the judge gave no readable verdict."""
        score = self.verdict(item, doc).score
        return None if score is None else int(score)


class OracleJudge(RelevanceJudge):
    """Grades from a complete label set ``{item_id: {doc_id: grade}}``: 3 when the document's label is > 0, else 0
    (a document without a label counts as not relevant: the set is taken to be complete)."""

    def __init__(self, qrels: Mapping[str, Mapping[str, int]], name: str = "oracle") -> None:
        self.qrels = qrels
        self.name = name

    def truth(self, item: AuditItem, doc: AuditDoc) -> bool:
        return self.qrels.get(item.item_id, {}).get(doc.doc_id, 0) > 0

    def verdict(self, item: AuditItem, doc: AuditDoc, dimension: str = POOLED) -> Verdict:
        relevant = self.truth(item, doc)
        return relevance_verdict(item, doc, self.name, dimension, 3 if relevant else 0,
                                 "labelled relevant" if relevant else "not labelled relevant", "", None)


class NoisyOracleJudge(OracleJudge):
    """The oracle with each verdict flipped (relevant 3 <-> not relevant 0) with probability ``flip_rate``; the flip
    is drawn from ``random.Random`` keyed by (seed, item, doc), so a verdict never depends on judging order."""

    def __init__(self, qrels: Mapping[str, Mapping[str, int]], flip_rate: float, seed: int = 0) -> None:
        if not 0.0 <= flip_rate <= 1.0:
            raise ValueError(f"flip_rate must be in [0, 1], got {flip_rate}")
        super().__init__(qrels, name=f"noisy-oracle(flip={flip_rate:g},seed={seed})")
        self.flip_rate = flip_rate
        self.seed = seed

    def verdict(self, item: AuditItem, doc: AuditDoc, dimension: str = POOLED) -> Verdict:
        flipped = random.Random(f"noisy-oracle:{self.seed}:{item.item_id}:{doc.doc_id}").random() < self.flip_rate
        truth = self.truth(item, doc)
        note = f"labelled {'' if truth else 'not '}relevant{', flipped' if flipped else ''}"
        return relevance_verdict(item, doc, self.name, dimension, 3 if truth != flipped else 0, note, "", None,
                                 flipped=flipped)


class GradedRelevance(BaseModel):
    """Structured reply of the graded relevance judge."""

    rationale: str = Field(max_length=1200)
    grade: int = Field(ge=0, le=3)


#: a verdict line: an optionally bold or quoted "Rating" / "Grade" label, ":" or "=", then a number
_GRADE_LINE = re.compile(r"^[ \t>*_#\"'-]*(?:final\s+)?(?:rating|grade)[\"'*_ \t]*[:=][*_ \t\[]*(-?\d+(?:\.\d+)?)",
                         re.I | re.M)


def _json_reply(text: str) -> dict[str, Any] | None:
    """The JSON object in a reply (chatter around it allowed), or None."""
    if "{" not in text:
        return None
    try:
        value, _ = extract_json(text)
    except ParseError:
        return None
    return value if isinstance(value, dict) else None


def parse_grade(text: str) -> int | None:
    """The grade of a free-text reply: a JSON object's integer ``grade`` (chatter around the object allowed), else
    the number on the last "Rating: N" / "Grade: N" line (bold or quoted labels allowed; when the reply has two
    such lines the last wins, the MTR-Eval rule); None unless it is an integer 0-3. Loose numbers in the prose
    are never read: on a 0-3 scale they are too often counts ("2 films")."""
    obj = _json_reply(text)
    if obj is not None and ("grade" in obj or "rating" in obj):
        value = obj.get("grade", obj.get("rating"))
        return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 3 else None
    lines = _GRADE_LINE.findall(text)
    if not lines:
        return None
    value = float(lines[-1])
    return int(value) if value.is_integer() and 0 <= value <= 3 else None


def reply_rationale(text: str) -> str:
    """The reasoning of a free-text reply: a JSON object's ``rationale``, else the text before its last verdict
    line (a leading "Rationale:" label removed)."""
    obj = _json_reply(text)
    if obj is not None and isinstance(obj.get("rationale"), str):
        return obj["rationale"].strip()
    found = list(_GRADE_LINE.finditer(text))
    return free_text_rationale(text[:found[-1].start()] if found else text)


def history_summary(history: Sequence[tuple[str, str]], messages: int = 6, chars: int = 300) -> str:
    """The conversation before the current query as the judge sees it: the last ``messages`` messages as
    ``User:`` / ``Assistant:`` lines, each cut to at most ``chars`` characters (at a word boundary where there is
    one), after a line counting those left out."""
    kept = [(r, " ".join(t.split())) for r, t in history if t.strip()][-messages:] if messages > 0 else []
    left = sum(1 for _, t in history if t.strip()) - len(kept)
    lines = [f"({left} earlier messages left out)"] if left else []
    for role, text in kept:
        space = text[:chars + 1].rfind(" ")
        cut = text if len(text) <= chars else (text[:space] if space > 0 else text[:chars]) + " ..."
        lines.append(f"{role.capitalize()}: {cut}")
    return "\n".join(lines)


def document_text(doc: AuditDoc) -> str:
    """A document as judges read it: its title on a line of its own (when it has one and the text does not
    start with it), then its text."""
    title = doc.title.strip()
    return f"{title}\n{doc.text}" if title and not doc.text.lstrip().startswith(title) else doc.text


class LLMRelevanceJudge(RelevanceJudge):
    """An LLM grades (query, conversation summary, document) on the 0-3 scale with prompt ``prompt``
    (``audit_relevance_graded``): structured output ``{rationale, grade}`` where the backend has constrained
    decoding, else a free-text reply read by :func:`parse_grade` (see :func:`convrag.judging.verdict.judge_call`).
    Greedy decoding; a reply without a readable grade is a verdict with ``score=None`` and the reason."""

    def __init__(self, llm: LLM, *, prompt: str = "audit_relevance_graded", max_tokens: int = 256,
                 history_messages: int = 6, history_chars: int = 300) -> None:
        self.llm = llm
        self.name = llm.spec
        self.template = load_prompt(prompt)
        self.params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
        self.history_messages = history_messages
        self.history_chars = history_chars

    def messages(self, item: AuditItem, doc: AuditDoc) -> list[dict[str, str]]:
        """The rendered prompt for one (turn, document) pair."""
        return self.template.render(query=item.query, document=document_text(doc),
                                    history=history_summary(item.history, self.history_messages, self.history_chars))

    def verdict(self, item: AuditItem, doc: AuditDoc, dimension: str = POOLED) -> Verdict:
        grade, rationale, raw, error = judge_call(self.llm, self.messages(item, doc), GradedRelevance, parse_grade,
                                                  params=self.params)
        if raw and self.llm.free_text:
            rationale = reply_rationale(raw)
        return relevance_verdict(item, doc, self.name, dimension, grade, rationale, raw, error)
