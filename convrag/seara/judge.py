"""Judging a SEARA pool into pseudo-qrels: each unique (query, chunk text) judged once, graded 0-3, cached.

Definitions (the SEARA memo, ``shared/reference/seara.md``, sections 4.4 and 6.3):

* **grade**: UMBRELA-style 0-3 (0 unrelated, 1 related, 2 partial or buried answer, 3 answers); relevant at grade >=
  2 (:data:`convrag.judging.pooling.RELEVANT_CUTOFF`, ``trec_eval -l 2``). The judge: the audit's graded LLM judge,
  reused as is (:func:`make_judge`), or any :class:`~convrag.judging.pooling.RelevanceJudge`, oracles included;
* **judging key** (:func:`judging_key`): what the judge sees; pairs with one key share one verdict;
* **cost estimate** (:class:`JudgeEstimate`; printed by ``echo`` before any call; :func:`estimate_judging`: the dry
  run): ``max_calls`` and ``max_cost_usd`` (against the worst case) refuse to start, :class:`JudgeBudgetError`;
* **failures**: a judgment that failed (call failed after retries, no readable grade) has no grade: it is counted by
  reason, listed per pair, left out of the pseudo-qrels. Score with ``metrics/pr_auc`` ``unjudged="nonrelevant"``
  only knowingly (it reads them as grade 0), or re-judge;
* **calibration**: :func:`calibrate`, no extra calls (pairs outside the pool: :func:`judge_pairs` them first).
"""

from __future__ import annotations

import hashlib
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from convrag.core.errors import ConvragError
from convrag.judging.items import AuditDoc, AuditItem
from convrag.judging.missed import Calibration
from convrag.judging.pooling import RELEVANT_CUTOFF, GradedRelevance, LLMRelevanceJudge, RelevanceJudge
from convrag.judging.verdict import failure_kind
from convrag.llm import LLM, LLMError, run_batch
from convrag.llm.cache import canonical_json
from convrag.llm.report import FREE_BACKENDS
from convrag.seara.pool import Pool
from convrag.synthesis.engine.pipeline import Estimate

Query = str | AuditItem
Chunk = str | AuditDoc
#: chunk texts: ``{chunk_id: text or AuditDoc}``, or a function ``(query_id, chunk_id) -> text or AuditDoc``
Chunks = Mapping[str, Chunk] | Callable[[str, str], Chunk]
#: tokens of the re-ask message after an unreadable structured reply (the error text included)
RETRY_TOKENS = 80


class JudgeBudgetError(ConvragError):
    """The estimated judging cost exceeds the cap: nothing was called."""


def as_item(query_id: str, query: Query) -> AuditItem:
    """A query as the audit judges take it (a text becomes a turn without history)."""
    if isinstance(query, AuditItem):
        return query
    if not isinstance(query, str) or not query.strip():
        raise ConvragError(f"query {query_id!r}: expected a non-empty text or an AuditItem, got {query!r}")
    return AuditItem(item_id=query_id, domain="", conversation_id=query_id, turn=1, query=query, history=(),
                     gold=())


def as_doc(chunk_id: str, chunk: Chunk) -> AuditDoc:
    """A chunk as the audit judges take it (a text becomes a document without title)."""
    if isinstance(chunk, AuditDoc):
        return chunk
    if not isinstance(chunk, str):
        raise ConvragError(f"chunk {chunk_id!r}: expected a text or an AuditDoc, got {type(chunk).__name__}")
    return AuditDoc(doc_id=chunk_id, title="", text=chunk)


def make_judge(judge: RelevanceJudge | LLM) -> RelevanceJudge:
    """An LLM becomes the graded judge with the audit prompt; a judge is returned as is. The LLM judge is the
    audit's :class:`~convrag.judging.pooling.LLMRelevanceJudge` with its prompt ``audit_relevance_graded`` (the
    query, an optional conversation summary and the chunk; structured ``{rationale, grade}`` where the backend
    constrains decoding, else a "Rating: N" line read by :func:`~convrag.judging.pooling.parse_grade`)."""
    return LLMRelevanceJudge(judge) if isinstance(judge, LLM) else judge


def _sha(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def judging_key(judge: RelevanceJudge, item: AuditItem, doc: AuditDoc) -> str:
    """The dedupe key of one (query, chunk) for ``judge``: what the judge sees. For an LLM judge, the SHA-256 of its
    rendered messages: identical (query, history, chunk text) reached through different chunk ids, chunkings or
    configurations are judged once and share the verdict. A judge may define ``judging_key(item, doc)``; any other
    judge (oracles, which read ids) is keyed by (query id, chunk id). The memo keys on hashes of query and chunk
    text plus judge and params; hashing the rendered prompt is the same key, and the LLM layer's cache adds model
    and params."""
    custom = getattr(judge, "judging_key", None)
    if callable(custom):
        return str(custom(item, doc))
    if isinstance(judge, LLMRelevanceJudge):
        return _sha({"judge": judge.name, "messages": judge.messages(item, doc)})
    return _sha({"judge": judge.name, "query": item.item_id, "chunk": doc.doc_id})


def judge_identity(judge: RelevanceJudge) -> dict[str, Any]:
    """What makes a judge's grades what they are: name, and for an LLM judge model, prompt text and params."""
    if isinstance(judge, LLMRelevanceJudge):
        return {"judge": judge.name, "model": judge.llm.backend.model, "prompt": judge.template.name,
                "prompt_sha": _sha(judge.template.templates)[:12], "params": judge.params.to_dict()}
    return {"judge": judge.name}


@dataclass
class JudgeEstimate:
    """The cost of judging, known before any call: unique keys, those already in the judge's LLM cache, judgments
    to make (``calls``), prompt tokens (the real prompts, characters / 4, structured-output instruction included),
    completion tokens bounded by ``max_tokens`` per call, dollars from the LLM layer's price table (0 for local
    backends; ``cost_usd`` None = unpriced model), and a worst-case bound where every structured reply needs all
    ``structured_attempts`` re-asks."""

    pairs: int
    unique: int
    cached: int
    calls: int
    attempts: int
    prompt_tokens: int
    completion_tokens: int
    model: str
    free: bool
    cost_usd: float | None
    cost_usd_bound: float | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def text(self) -> str:
        """The line printed before any call."""
        def money(v: float | None) -> str:
            return "unpriced" if v is None else f"${v:.4f}"
        return (f"SEARA judging with {self.model}: {self.pairs:,} pooled pairs, {self.unique:,} unique judgments, "
                f"{self.cached:,} cached -> {self.calls:,} calls (at most {self.calls * self.attempts:,} requests); "
                f"~{self.prompt_tokens:,} prompt + <= {self.completion_tokens:,} completion tokens; est. cost "
                f"{money(self.cost_usd)} (<= {money(self.cost_usd_bound)} if every reply needs {self.attempts} "
                "attempts)")


@dataclass
class _Plan:
    judge: RelevanceJudge
    pairs: list[tuple[str, str]]
    keys: list[str]  # per pair
    units: dict[str, tuple[AuditItem, AuditDoc]]  # unique key -> what the judge reads, first occurrence
    estimate: JudgeEstimate


def _plan(pairs: Sequence[tuple[str, str]], queries: Mapping[str, Query], chunks: Chunks,
          judge: RelevanceJudge) -> _Plan:
    items: dict[str, AuditItem] = {}
    keys: list[str] = []
    units: dict[str, tuple[AuditItem, AuditDoc]] = {}
    for qid, cid in pairs:
        if qid not in items:
            if qid not in queries:
                raise ConvragError(f"query {qid!r} has no text: give it in queries")
            items[qid] = as_item(qid, queries[qid])
        try:
            raw = chunks(qid, cid) if callable(chunks) else chunks[cid]
        except KeyError:
            raise ConvragError(f"chunk {cid!r} (query {qid!r}) has no text: give it in chunks") from None
        key = judging_key(judge, items[qid], doc := as_doc(cid, raw))
        keys.append(key)
        units.setdefault(key, (items[qid], doc))
    llm = getattr(judge, "llm", None)
    if not isinstance(judge, LLMRelevanceJudge) or not isinstance(llm, LLM):
        est = JudgeEstimate(len(pairs), len(units), 0, len(units), 1, 0, 0, judge.name, True, 0.0, 0.0)
        return _Plan(judge, list(pairs), keys, units, est)
    params = judge.params
    cached = chars = 0
    schema = None if llm.free_text else GradedRelevance  # as judge_call asks
    for item, doc in units.values():
        messages = judge.messages(item, doc)
        if llm.is_cached(messages, schema, params):
            cached += 1
        else:
            chars += sum(len(m["content"]) for m in llm.request_messages(messages, schema))
    calls = len(units) - cached
    attempts = 1 if llm.free_text else llm.structured_attempts  # a free-text verdict is read from one reply
    max_tokens = params.max_tokens or 0
    prompt, completion = chars // 4, calls * max_tokens
    free = llm.backend.name in FREE_BACKENDS
    base = Estimate(llm_calls=calls, prompt_tokens=prompt, completion_tokens=completion, model=llm.backend.model,
                    free=free)
    worst = Estimate(llm_calls=calls * attempts, model=llm.backend.model, free=free,
                     prompt_tokens=attempts * prompt + calls * (max_tokens + RETRY_TOKENS) * attempts * (attempts - 1)
                     // 2, completion_tokens=attempts * completion)  # fmt: skip
    est = JudgeEstimate(len(pairs), len(units), cached, calls, attempts, prompt, completion, llm.backend.model, free,
                        base.cost_usd(llm.report.prices), worst.cost_usd(llm.report.prices))
    return _Plan(judge, list(pairs), keys, units, est)


def estimate_judging(pairs_or_pool: Pool | Sequence[tuple[str, str]], queries: Mapping[str, Query], chunks: Chunks,
                     judge: RelevanceJudge | LLM) -> JudgeEstimate:
    """The dry run: what judging would cost; renders prompts and reads the cache, calls nothing."""
    pairs = pairs_or_pool.pairs() if isinstance(pairs_or_pool, Pool) else list(pairs_or_pool)
    return _plan(pairs, queries, chunks, make_judge(judge)).estimate


@dataclass
class Judgment:
    """The verdict on one (query, chunk): ``grade`` 0-3, or None with ``error`` set; ``key``: its judging key
    (pairs with one key share one verdict)."""

    query_id: str
    chunk_id: str
    grade: int | None
    rationale: str
    error: str | None
    key: str


@dataclass
class PseudoQrels:
    """Judged pairs of one pool (or any pair list) by one judge, with the cost figures of the run.

    ``judgments``: one per pair, in pair order; ``estimate``: as printed before the run; ``llm``: the judge LLM's
    accounting for this run (calls, cache hits, tokens, cost; None for a judge without LLM)."""

    judge: dict[str, Any]
    judgments: list[Judgment]
    estimate: JudgeEstimate | None = None
    pool: dict[str, Any] | None = None
    llm: dict[str, Any] | None = None
    cutoff: int = RELEVANT_CUTOFF
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def signature(self) -> str | None:
        """``<pool signature>/judge-<12 hex>`` (None without a pool): pass it to ``metrics/pr_auc``."""
        if self.pool is None:
            return None
        return f"{self.pool['signature']}/judge-{_sha(self.judge)[:12]}"

    @property
    def qrels(self) -> dict[str, dict[str, int]]:
        """``{query_id: {chunk_id: grade}}`` of the judged pairs (grade 0 rows included, failures left out)."""
        out: dict[str, dict[str, int]] = {}
        for j in self.judgments:
            if j.grade is not None:
                out.setdefault(j.query_id, {})[j.chunk_id] = j.grade
        return out

    @property
    def failed(self) -> list[Judgment]:
        """The pairs without a grade."""
        return [j for j in self.judgments if j.grade is None]

    @property
    def failures(self) -> dict[str, int]:
        """Failed unique judgments by reason (``unparseable``, ``call failed``)."""
        out: dict[str, int] = {}
        for error in {j.key: j.error for j in self.judgments if j.error}.values():
            out[failure_kind(error)] = out.get(failure_kind(error), 0) + 1
        return out

    def relevant(self, query_id: str) -> list[str]:
        """The chunks of one query graded >= the cut-off (``G'_q``)."""
        return [c for c, g in self.qrels.get(query_id, {}).items() if g >= self.cutoff]

    def references(self, query_ids: Sequence[str]) -> list[list[dict[str, Any]]]:
        """``metrics/pr_auc`` references, one ``[{"id", "grade"}]`` list per query in ``query_ids``."""
        qrels = self.qrels
        return [[{"id": c, "grade": g} for c, g in qrels.get(q, {}).items()] for q in query_ids]

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures: signature, judge, pairs, unique, judged, failed, failures, estimate, LLM report."""
        graded = [j for j in self.judgments if j.grade is not None]
        return {"signature": self.signature, "pool": self.pool, "judge": self.judge, "cutoff": self.cutoff,
                "pairs": len(self.judgments), "unique": len({j.key for j in self.judgments}),
                "judged_pairs": len(graded), "failed_pairs": len(self.judgments) - len(graded),
                "relevant_pairs": sum(j.grade >= self.cutoff for j in graded), "failures": self.failures,
                "estimate": None if self.estimate is None else self.estimate.to_dict(), "llm": self.llm, **self.extra}


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The run's share of an LLM's cumulative report (numeric fields; errors and messages as after)."""
    out = {k: (round(v - before.get(k, 0), 6) if isinstance(v, float) else v - before.get(k, 0))
           for k, v in after.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    out["errors"] = {k: v - before.get("errors", {}).get(k, 0) for k, v in after.get("errors", {}).items()
                     if v - before.get("errors", {}).get(k, 0)}
    return out


def judge_pairs(pairs: Sequence[tuple[str, str]], queries: Mapping[str, Query], chunks: Chunks,
                judge: RelevanceJudge | LLM, *, max_calls: int | None = None, max_cost_usd: float | None = None,
                concurrency: int | None = None, echo: Callable[[str], None] | None = print,
                pool: Pool | None = None, cutoff: int = RELEVANT_CUTOFF) -> PseudoQrels:
    """Judge (query id, chunk id) pairs, each unique judging key (:func:`judging_key`) once.

    ``queries``: ``{query_id: text or AuditItem}``; ``chunks``: see :data:`Chunks`; ``judge``: a relevance judge
    or an LLM (graded with the audit prompt). The estimate goes to ``echo`` before any call; ``max_calls`` /
    ``max_cost_usd`` refuse the run (:class:`JudgeBudgetError`) when exceeded. Calls run ``concurrency`` at a
    time (:func:`convrag.llm.run_batch`; None: the judge LLM's own ``max_concurrency``, 4 for another judge); a
    dead endpoint (``EndpointUnreachable``) ends the run."""
    if not 1 <= cutoff <= 3:
        raise ValueError(f"cutoff must be 1, 2 or 3 on the 0-3 scale, got {cutoff}")
    judge = make_judge(judge)
    plan = _plan(pairs, queries, chunks, judge)
    est = plan.estimate
    if echo is not None:
        echo(est.text())
    if max_calls is not None and est.calls > max_calls:
        raise JudgeBudgetError(f"{est.calls:,} judgments to make exceed max_calls={max_calls:,} "
                               f"({est.unique:,} unique, {est.cached:,} cached); nothing was called")
    if max_cost_usd is not None and (est.cost_usd_bound is None or est.cost_usd_bound > max_cost_usd):
        bound = "unpriced" if est.cost_usd_bound is None else f"${est.cost_usd_bound:.4f}"
        raise JudgeBudgetError(f"worst-case cost {bound} exceeds max_cost_usd=${max_cost_usd:.4f}; nothing was called")
    llm = getattr(judge, "llm", None)
    if pool is not None and isinstance(llm, LLM):
        model = llm.backend.model.lower()
        named = re.compile(rf"(?<![\w.]){re.escape(model)}(?![\w.])") if model else None
        clash = [c for c in pool.configurations if named is not None and named.search(c.lower())]
        if clash:  # memo 6.3: circularity guard, a warning and no block; the name is a token ('gpt-4o-mini-rerank'
            # names gpt-4o-mini), never part of a longer word or version ('bm25' does not name 'm')
            warnings.warn(f"judge model {llm.backend.model!r} also appears in configurations {clash}: an LLM judge "
                          "tends to favour its own family", stacklevel=2)
    before = llm.report.to_dict() if isinstance(llm, LLM) else None
    keys = list(plan.units)
    limit = int(concurrency if concurrency is not None else getattr(llm, "max_concurrency", 4))
    batch = run_batch(keys, lambda k: judge.verdict(*plan.units[k]), limit, catch=(LLMError,))
    verdicts: dict[str, tuple[int | None, str, str | None]] = {}
    for i, key in enumerate(keys):
        v = batch.results[i]
        if v is None:
            verdicts[key] = (None, "", f"call failed: {batch.failures.get(i, 'no verdict')}")
        else:
            grade = None if v.score is None else int(v.score)
            verdicts[key] = (grade, v.rationale, v.error if grade is None else None)
    judgments = [Judgment(q, c, *verdicts[k], key=k) for (q, c), k in zip(plan.pairs, plan.keys, strict=True)]
    report = _delta(before, llm.report.to_dict()) if before is not None and isinstance(llm, LLM) else None
    return PseudoQrels(judge_identity(judge), judgments, est, pool.summary() if pool is not None else None, report,
                       cutoff)


def judge_pool(pool: Pool, queries: Mapping[str, Query], chunks: Chunks, judge: RelevanceJudge | LLM,
               **options: Any) -> PseudoQrels:
    """Judge every pooled pair of ``pool`` (:func:`judge_pairs`, ``options`` as there): the pseudo-qrels."""
    return judge_pairs(pool.pairs(), queries, chunks, judge, pool=pool, **options)


def calibrate(pseudo: PseudoQrels, qrels: Mapping[str, Mapping[str, int]], *, label_cutoff: int = 1,
              complete: bool = False) -> Calibration:
    """The judge against existing labels on the judged pairs that carry one: a label >= ``label_cutoff`` is
    positive, a label below it an explicit negative; ``complete`` (labels taken as complete, e.g. StratRAG's
    pools) makes unlabelled pairs negatives too. Judged relevant = grade >= the pseudo-qrels' cut-off. Failed
    judgments are counted in ``failed`` and left out. Unique judging keys are not merged here: every pair
    counts."""
    cal = Calibration()
    for j in pseudo.judgments:
        label = qrels.get(j.query_id, {}).get(j.chunk_id)
        if label is None and not complete:
            continue
        if j.grade is None:
            cal.failed += 1
            continue
        said = j.grade >= pseudo.cutoff
        if label is not None and label >= label_cutoff:
            cal.positives += 1
            cal.true_positives += said
        else:
            cal.negatives += 1
            cal.true_negatives += not said
    return cal
