"""MTR-Eval's four judge dimensions (MTR-Suite section 3), as per-item requests and verdicts.

Every dimension judges the turn's CURRENT (last) query, after the conversation before it.

* ``query_evidence`` (Q-E): can one gold document alone answer the current query? 1-5 (5 = fully), one verdict per
  (item, gold document), ``extra["doc_id"]``.
* ``completeness`` (Comp., evidence completeness as discriminability): ONE gold document (drawn with the item's
  seeded RNG; other golds never shown) among hard negatives (:class:`NegativeSampler`), numbered ``[1]..[n]`` in an
  order shuffled by ``random.Random(f"{seed}:{item_id}")`` (1-based gold position in ``extra["gold_positions"]``).
  Score 1.0 when the judge names the gold, else 0.0: the mean is an ACCURACY in [0, 1] (chance 1/n, n varying by
  item); report it as such, accuracy x 5 beside it at most.
* ``answer_faithfulness`` (A-E): is every claim of the reference answer backed by the gold documents? 1-5.
* ``answer_quality`` (Qual.): is the reference answer correct, complete and on point (golds shown as context)? 1-5.
  A-E and Qual. show every gold, numbered; an item without a reference answer is not applicable (:func:`judge_item`
  returns None, counted by the runner), never a verdict.
"""

from __future__ import annotations

import functools
import random
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field, create_model

from convrag.builders.stratrag_rules import PAD_TEXT
from convrag.judging.items import AuditDoc, AuditItem, AuditSet
from convrag.judging.verdict import Verdict, judge_call, parse_choice, parse_rating
from convrag.llm import LLM, Message, ParseError, SamplingParams, extract_json, load_prompt
from convrag.retrievers import Retriever, get_retriever

DIMENSIONS = ("completeness", "query_evidence", "answer_faithfulness", "answer_quality")
LABELS = {"completeness": "Comp.", "query_evidence": "Q-E", "answer_faithfulness": "A-E", "answer_quality": "Qual."}
#: greedy decoding, as the authors judged
JUDGE_PARAMS = SamplingParams(temperature=0.0, max_tokens=512)

_MARKER = re.compile(r"\s*\[\d+\]")
#: the most documents one discriminability prompt shows, gold included. The cap is the prompt budget: 16 documents
#: cut to ``doc_chars`` (2,000 characters) are at most ~8,000 tokens, which with the conversation and the reply
#: fits a 16k-context judge; every pool we build fits whole (MTR-Bench clusters up to 11, StratRAG pools 15 with
#: 2 golds, so 14 shown).
MAX_CANDIDATES = 16


class RatingReply(BaseModel):
    """A 1-5 verdict with its reasoning first."""

    rationale: str
    rating: int = Field(ge=1, le=5)


@functools.lru_cache(maxsize=64)
def choice_schema(n: int) -> type[BaseModel]:
    """The structured reply of the discriminability test over ``n`` documents: reasoning, then a number 1..n."""
    return create_model("DocumentChoice", rationale=(str, ...), document=(int, Field(ge=1, le=n)))


def read_choice(text: str, n: int) -> int | None:
    """The document a free-text discriminability reply names: the integer ``document`` of a JSON object in it (a
    judge that answered in JSON although free text was asked), else the authors' rule,
    :func:`~convrag.judging.verdict.parse_choice` (``[N]`` at the very end of the reply); None unless in 1..n."""
    if "{" in text:
        try:
            obj, _ = extract_json(text[text.index("{"):])
        except ParseError:
            obj = None
        value = obj.get("document") if isinstance(obj, dict) else None
        if isinstance(value, int) and not isinstance(value, bool):
            return value if 1 <= value <= n else None
    return parse_choice(text, n)


def document_text(doc: AuditDoc, doc_chars: int = 2000) -> str:
    """A document as judges read it: title (unless the text starts with it) and text, ``[digits]`` markers
    removed, cut to ``doc_chars`` characters at a word boundary (an ellipsis marks the cut)."""
    text = _MARKER.sub("", doc.text).strip()
    if doc.title and not text.startswith(doc.title):
        text = f"{doc.title}\n{text}"
    if len(text) <= doc_chars:
        return text
    cut = text[:doc_chars + 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > 0 else text[:doc_chars]).rstrip() + " …"


def _history(item: AuditItem) -> list[dict[str, str]]:
    return [{"role": role, "text": text} for role, text in item.history]


class NegativeSampler:
    """Hard negatives for the discriminability test, per item. When the benchmark ships a candidate pool (MTR-Bench
    cluster, StratRAG pool): its documents in stored order, golds and placeholder padding removed, all of them up to
    ``MAX_CANDIDATES - 1`` (``whole_pool``, the default; the rest counted in ``extra["pool_left_out"]``) or the first
    ``k`` (``whole_pool=False``; ``k`` is 7 by default). Otherwise, or to top up a pool with fewer than ``k`` usable
    documents, the best of ``retriever`` (BM25 by default) over the item's subset corpus for the current query,
    every gold excluded; ``extra["negatives_source"]`` says which served. Builds one retriever index per subset the
    first time an item without a pool needs it, and keeps it; thread-safe."""

    def __init__(self, audit_set: AuditSet, retriever: str = "bm25", whole_pool: bool = True) -> None:
        self.audit_set = audit_set
        self.retriever = retriever
        self.whole_pool = whole_pool
        self._indexes: dict[str, Retriever] = {}
        self._lock = threading.Lock()

    def _usable(self, item: AuditItem, doc_id: str) -> bool:
        doc = self.audit_set.documents.get(item.domain, {}).get(doc_id)
        return doc is not None and doc.text != PAD_TEXT and doc_id not in {g.doc_id for g in item.gold}

    def _usable_pool(self, item: AuditItem) -> list[str]:
        return [d for d in item.pool or () if self._usable(item, d)]

    def _pooled(self, item: AuditItem, k: int) -> list[str]:
        return self._usable_pool(item)[:MAX_CANDIDATES - 1 if self.whole_pool else k]

    def left_out(self, item: AuditItem, k: int = 7) -> int:
        """Usable pool documents NOT shown: beyond the cap (whole pool) or beyond the first ``k``."""
        return len(self._usable_pool(item)) - len(self._pooled(item, k))

    def source(self, item: AuditItem, k: int = 7) -> str:
        """Where the item's negatives come from: ``pool``, the retriever spec, or ``pool+SPEC`` (a topped-up pool)."""
        if item.pool is None:
            return self.retriever
        return "pool" if len(self._pooled(item, k)) >= k else f"pool+{self.retriever}"

    def _retrieved(self, item: AuditItem, k: int, exclude: set[str]) -> list[str]:
        with self._lock:
            index = self._indexes.get(item.domain)
            if index is None:
                rows = [r for r in self.audit_set.data.corpus[item.domain] if r["text"] != PAD_TEXT]
                index = get_retriever(self.retriever, show_progress=False).index(rows)
                self._indexes[item.domain] = index
            ranked = index.search({item.item_id: item.query}, top_k=k + len(item.gold) + len(exclude))
        return [d for d in ranked[item.item_id] if self._usable(item, d) and d not in exclude][:k]

    def negatives(self, item: AuditItem, k: int = 7) -> list[str]:
        """Negative document ids: the pool's usable ones (all up to the cap, or the first ``k``), topped up to ``k``
        (fewer only when the corpus runs out) with the retriever's best for the current query; never a gold
        document or a placeholder."""
        chosen = self._pooled(item, k)
        if len(chosen) < k:
            chosen += self._retrieved(item, k - len(chosen), set(chosen))
        return chosen


def negatives(item: AuditItem, audit_set: AuditSet, k: int = 7, retriever: str = "bm25",
              whole_pool: bool = True) -> list[str]:
    """One item's negatives (a one-off :class:`NegativeSampler`; keep a sampler to judge many items)."""
    return NegativeSampler(audit_set, retriever, whole_pool).negatives(item, k)


@dataclass
class Request:
    """One judge call: the rendered messages and what its verdict must record (``extra``)."""

    item_id: str
    dimension: str
    messages: list[Message]
    extra: dict[str, Any] = field(default_factory=dict)


class Dimension:
    """One MTR-Eval dimension: builds the requests for an item and turns a judge's reply into a verdict."""

    name = ""
    prompt = ""
    needs_answer = False

    def __init__(self, doc_chars: int = 2000) -> None:
        self.doc_chars = doc_chars

    @property
    def label(self) -> str:
        return LABELS[self.name]

    def requests(self, item: AuditItem, audit_set: AuditSet) -> list[Request]:
        """The item's judge calls; an empty list when the dimension does not apply to it. Here (A-E, Qual.): one
        call showing every gold document, numbered, and the reference answer."""
        if self.needs_answer and item.answer is None:
            return []
        docs = [document_text(g, self.doc_chars) for g in item.gold]
        messages = load_prompt(self.prompt).render(query=item.query, history=_history(item), documents=docs,
                                                   answer=item.answer)
        return [Request(item.item_id, self.name, messages)]

    def schema(self, request: Request) -> type[BaseModel]:
        return RatingReply

    def parse(self, request: Request, text: str, cut: bool = False) -> int | None:
        """The free-text fallback: the authors' rule, the last rating line 1-5 (only an explicit rating line when
        the reply was ``cut`` off at max_tokens)."""
        return parse_rating(text, labelled_only=cut)

    def verdict(self, request: Request, value: int | None, rationale: str, raw: str, error: str | None,
                judge: str) -> Verdict:
        """The verdict record; ``score`` is the 1-5 rating (None with ``error`` set when none was read)."""
        score = None if value is None else float(value)
        return Verdict(request.item_id, judge, self.name, score, None, rationale, raw, error, dict(request.extra))


class QueryEvidence(Dimension):
    """Q-E: each gold document against the current query, 1-5."""

    name = "query_evidence"
    prompt = "audit_query_evidence"

    def requests(self, item: AuditItem, audit_set: AuditSet) -> list[Request]:
        render = load_prompt(self.prompt).render
        return [Request(item.item_id, self.name, render(query=item.query, history=_history(item),
                                                        document=document_text(g, self.doc_chars)),
                        {"doc_id": g.doc_id}) for g in item.gold]


class AnswerFaithfulness(Dimension):
    """A-E: the reference answer against the gold documents, 1-5."""

    name = "answer_faithfulness"
    prompt = "audit_faithfulness"
    needs_answer = True


class AnswerQuality(Dimension):
    """Qual.: the reference answer as a reply to the current query, gold documents for context, 1-5."""

    name = "answer_quality"
    prompt = "audit_answer_quality"
    needs_answer = True


class Completeness(Dimension):
    """Comp.: one seeded gold among the hard negatives (the whole pool up to the cap), shuffled; 1.0 when the judge
    names it, else 0.0."""

    name = "completeness"
    prompt = "audit_discriminability"

    def __init__(self, sampler: NegativeSampler, k: int = 7, seed: int = 0, doc_chars: int = 2000) -> None:
        super().__init__(doc_chars)
        self.sampler, self.k, self.seed = sampler, k, seed

    def requests(self, item: AuditItem, audit_set: AuditSet) -> list[Request]:
        """No request (not applicable) when the item has no usable negative."""
        negs = self.sampler.negatives(item, self.k)
        if not negs:
            return []
        rng = random.Random(f"{self.seed}:{item.item_id}")
        gold = item.gold[rng.randrange(len(item.gold))]
        candidates = [gold.doc_id, *negs]
        rng.shuffle(candidates)
        docs = [document_text(audit_set.document(item, d), self.doc_chars) for d in candidates]
        messages = load_prompt(self.prompt).render(query=item.query, history=_history(item), documents=docs)
        extra = {"gold_positions": [candidates.index(gold.doc_id) + 1], "candidates": candidates,
                 "negatives_source": self.sampler.source(item, self.k)}
        if left := self.sampler.left_out(item, self.k):
            extra["pool_left_out"] = left
        return [Request(item.item_id, self.name, messages, extra)]

    def schema(self, request: Request) -> type[BaseModel]:
        return choice_schema(len(request.extra["candidates"]))

    def parse(self, request: Request, text: str, cut: bool = False) -> int | None:
        """The named document; none from a reply ``cut`` off at max_tokens (its end is not a verdict)."""
        return None if cut else read_choice(text, len(request.extra["candidates"]))

    def verdict(self, request: Request, value: int | None, rationale: str, raw: str, error: str | None,
                judge: str) -> Verdict:
        """``score`` 1.0 / 0.0 (gold named or not), ``label`` ``gold`` / ``negative``, ``extra["picked"]`` the
        named document id (None when no choice was read)."""
        extra = {**request.extra, "picked": None}
        if value is None:
            return Verdict(request.item_id, judge, self.name, None, None, rationale, raw, error, extra)
        extra["picked"] = request.extra["candidates"][value - 1]
        hit = value in request.extra["gold_positions"]
        return Verdict(request.item_id, judge, self.name, 1.0 if hit else 0.0, "gold" if hit else "negative",
                       rationale, raw, None, extra)


def make_dimension(name: str, *, sampler: NegativeSampler | None = None, k: int = 7, seed: int = 0,
                   doc_chars: int = 2000) -> Dimension:
    """The dimension called ``name`` (one of :data:`DIMENSIONS`); ``completeness`` needs a sampler."""
    if name == "completeness":
        if sampler is None:
            raise ValueError("the completeness dimension needs a NegativeSampler")
        return Completeness(sampler, k=k, seed=seed, doc_chars=doc_chars)
    kinds = {c.name: c for c in (QueryEvidence, AnswerFaithfulness, AnswerQuality)}
    if name not in kinds:
        raise ValueError(f"unknown MTR-Eval dimension {name!r}; known: {', '.join(DIMENSIONS)}")
    return kinds[name](doc_chars=doc_chars)


def judge_item(llm: LLM, dimension: str | Dimension, item: AuditItem, audit_set: AuditSet,
               sampler: NegativeSampler | None = None, *,
               params: SamplingParams = JUDGE_PARAMS) -> list[Verdict] | None:
    """Every verdict of one judge on one item along one dimension; None when the dimension does not apply.

    Failed and unreadable replies come back as verdicts with ``score=None`` and ``error`` set;
    :class:`~convrag.llm.EndpointUnreachable` propagates.
    """
    dim = dimension if isinstance(dimension, Dimension) else make_dimension(dimension, sampler=sampler)
    requests = dim.requests(item, audit_set)
    if not requests:
        return None
    out = []
    for req in requests:
        value, rationale, raw, error = judge_call(llm, req.messages, dim.schema(req),
                                                  functools.partial(dim.parse, req), params=params,
                                                  cut_parse=functools.partial(dim.parse, req, cut=True))
        out.append(dim.verdict(req, value, rationale, raw, error, llm.spec))
    return out
