"""D&V stage ``aspects``: granular aspect extraction, overlap and suitability checks, and ordering for
conversational flow (RECOR, section 3.2.1; appendix F "Granular Aspect Extraction", "Aspect Overlap Detection",
"Aspect Suitability Classification", "Aspect Ordering by Logical Progression").

An aspect is one distinct component of the answer (a detail, a step, a mechanism, an example, ...) that can
become one conversation turn: ``{name, type, excerpt}``, the excerpt copied from the answer. Extraction is
iterated; every candidate must pass the rules of :class:`Aspects`, else it is rejected with a counted reason
(``aspects: aspect rejected: <why>``). Items with fewer than ``min_aspects`` accepted aspects are dropped
(``aspects: fewer than min_aspects aspects``); the others' aspects are put in conversation order by the ordering
judge.

Adds ``aspects`` [{name, type, excerpt[, document_coverage, name_original]}] in conversation order and
``aspect_log`` [{name, type, round, fate[, renamed_to]}]: every candidate with ``accepted`` or ``rejected: <why>``.
Figures: ``aspects: aspect accepted``, each rejection and each renaming.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from convrag.core.errors import ConvragError
from convrag.llm import LLM, UnparsableReply
from convrag.synthesis.recor.align import fraction, whole_number
from convrag.synthesis.recor.common import (
    Drop,
    DVStage,
    Outcome,
    Tokens,
    ask,
    check_profile,
    documents_field,
    sampling,
)

#: the paper's ten aspect types
ASPECT_TYPES = ("detail", "step", "implication", "distinction", "definition", "mechanism", "example", "comparison",
                "history", "application")
#: share of an excerpt's word tokens that must occur in the answer
EXCERPT_SHARE = 0.8
DEFAULT_STRATEGY = ("Open with what the topic is and the basic idea behind it, go on to how it works and why, then "
                    "to concrete examples, and close with consequences and wider implications.")
EXTRACT_TOKENS, JUDGE_TOKENS, ORDER_TOKENS, COVERAGE_TOKENS = 900, 250, 300, 600
#: the most aspects one extraction reply may hold (the prompt asks for ``num_aspects``)
MAX_CANDIDATES = 8
_WORD = re.compile(r"[^\W_]+")


class AspectCandidate(BaseModel):
    """One aspect as the extractor proposes it."""

    aspect_name: str = Field(default="", description="specific name, 3-6 words")
    aspect_type: str = Field(default="", description=" | ".join(ASPECT_TYPES))
    excerpt: str = Field(default="", max_length=500, description="text copied word for word from the answer")
    distinct_from_existing: str = Field(default="", description="how it differs from the aspects already found")


class ExtractionReply(BaseModel):
    """The extractor's structured reply."""

    aspects: list[AspectCandidate] = Field(max_length=MAX_CANDIDATES)
    extraction_notes: str = ""


class OverlapReply(BaseModel):
    """The overlap judge's structured reply."""

    has_overlap: bool
    overlaps_with: str | None = None
    overlap_type: str = Field(default="no_overlap", description="same_claims | same_examples | same_step | no_overlap")
    reasoning: str = ""


class SuitabilityReply(BaseModel):
    """The suitability judge's structured reply. The category (one of three, enforced by the schema) decides;
    ``should_generate`` is the paper's redundant flag and is not held against a reply."""

    should_generate: bool = True
    reason: str = Field(default="", max_length=400)
    aspect_category: Literal["substantive", "meta", "insufficient"]

    @field_validator("aspect_category", mode="before")
    @classmethod
    def _category_case(cls, value: Any) -> Any:
        """Case and surrounding spaces of the category are ignored (``" Substantive"`` is ``substantive``)."""
        return value.strip().lower() if isinstance(value, str) else value


class CoverageReply(BaseModel):
    """The coverage judge's structured reply (the authors' aspect-document alignment): the coverage decides,
    ``name_grounded`` false with a suggested name renames the aspect."""

    coverage_score: float = Field(ge=0, le=1, description="0.0 to 1.0")
    facts_found: list[str] = Field(default_factory=list, max_length=20)
    facts_missing: list[str] = Field(default_factory=list, max_length=20)
    supporting_doc_ids: list[str] = Field(default_factory=list, max_length=20)
    missing_information: str = Field(default="", max_length=600)
    name_grounded: bool = True
    name_issues: str = Field(default="", max_length=400)
    suggested_name: str = Field(default="", max_length=120)


class OrderReply(BaseModel):
    """The ordering judge's structured reply."""

    ordered_indices: list[int] = Field(max_length=64, description="every aspect number once, in conversation order")
    reasoning: str = ""


def words(text: str) -> list[str]:
    """Lower-cased word tokens (runs of letters and digits)."""
    return _WORD.findall(text.lower())


def excerpt_from(excerpt: str, answer: str, share: float = EXCERPT_SHARE) -> bool:
    """Whether ``excerpt`` comes from ``answer``: >= ``share`` of its word tokens occur in the answer."""
    tokens = words(excerpt)
    vocabulary = set(words(answer))
    return bool(tokens) and sum(t in vocabulary for t in tokens) >= share * len(tokens)


def order_check(n: int) -> Any:
    """The check of an ordering reply over ``n`` aspects: a permutation of 0..n-1."""
    def check(reply: OrderReply) -> str | None:
        if sorted(reply.ordered_indices) != list(range(n)):
            return (f"ordered_indices must list each number from 0 to {n - 1} exactly once, got "
                    f"{reply.ordered_indices}")
        return None
    return check


def complete_aspects(reply: ExtractionReply) -> ExtractionReply:
    """A cut-off extraction reply without its last aspect, which the cut may have reached."""
    return reply.model_copy(update={"aspects": reply.aspects[:-1]})


def screen(cand: AspectCandidate, accepted: list[dict[str, Any]], answer: str,
           share: float = EXCERPT_SHARE) -> tuple[str, dict[str, str] | None]:
    """Rules 1-4 of :class:`Aspects`, which need no call: ``("", aspect)`` with the candidate as an aspect
    ``{name, type, excerpt}`` (whitespace collapsed, type lower-cased), or ``("rejected: <why>", None)``."""
    name, excerpt = " ".join(cand.aspect_name.split()), " ".join(cand.excerpt.split())
    kind = cand.aspect_type.strip().lower()
    if not name or not excerpt:
        return "rejected: empty name or excerpt", None
    if kind not in ASPECT_TYPES:
        return "rejected: unknown type", None
    if not excerpt_from(excerpt, answer, share):
        return "rejected: excerpt not from the answer", None
    if name.casefold() in {a["name"].casefold() for a in accepted}:
        return "rejected: duplicate name", None
    return "", {"name": name, "type": kind, "excerpt": excerpt}


def _summaries(aspects: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [{"name": a["name"], "type": a["type"], "excerpt": a["excerpt"]} for a in aspects]


class Aspects(DVStage):
    """Iterated aspect extraction with overlap and suitability checks, then ordering.

    Each round asks for ``num_aspects`` new aspects, showing the ones already accepted. Every candidate of a round,
    in the reply's order, must pass, else it is rejected with a counted reason:

    1. a non-empty name and excerpt (``empty name or excerpt``);
    2. a type among the paper's ten, :data:`ASPECT_TYPES` (case and spaces ignored; ``unknown type``);
    3. an excerpt taken from the answer (``excerpt not from the answer``): at least ``excerpt_share`` (default
       :data:`EXCERPT_SHARE`) of its word tokens (lower-cased letters and digits) occur among the answer's tokens.
       This allows a model's small copying slips (a changed inflection, a dropped comma) but not a paraphrase or
       invented text;
    4. a name unlike every accepted aspect's (case ignored; ``duplicate name``: no call spent);
    5. no overlap with the accepted aspects, as the overlap judge says (skipped while none is accepted; ``overlap``);
    6. category "substantive" by the suitability judge (``meta`` / ``insufficient`` otherwise);
    7. ``profile`` ``authors`` (default; the authors' ``check_aspect_document_alignment``): the coverage judge rates
       how much of the aspect the item's documents (each cut to ``doc_chars``) support, and whether its name uses
       only entities the documents mention. A name judged ungrounded is replaced by the judge's suggested name (the
       old one kept as ``name_original``; counted ``aspects: aspect renamed: name not grounded in the documents``);
       then a coverage under ``min_aspect_coverage`` (0.50, the authors' ``document_coverage_min``) rejects it
       (``low document coverage``). The coverage is kept as ``document_coverage`` (Table 13's "Cov."). Profile
       ``convrag`` (our earlier reading) has no such check.

    A judge reply that stays unparsable after the re-asks rejects that candidate (``overlap check unparsable`` /
    ``suitability check unparsable`` / ``coverage check unparsable``); an unparsable extraction reply ends the
    rounds (counted as ``aspects: round rejected: reply unparsable after re-asks``); one cut off at max_tokens loses
    its last aspect, which the cut may have reached. Rounds stop when a round accepts nothing, after ``max_rounds``,
    or once ``max_aspects`` are accepted (later candidates: ``max_aspects reached``).

    Ordering: ``ordered_indices`` must list every aspect number exactly once, else the error is fed back and
    re-asked; when no usable order comes, the extraction order is kept and ``aspects: ordering unusable,
    extraction order kept`` is counted. ``min_aspects`` defaults to 3, the shortest conversation RECOR keeps.

    Options: ``num_aspects`` (asked per round, 3), ``max_rounds`` (3), ``max_aspects`` (12), ``min_aspects`` (3),
    ``conversation_strategy`` (a short text the ordering prompt follows), ``profile`` (``authors``: the coverage
    check, ``min_aspect_coverage`` 0.5, documents cut to ``doc_chars``).
    """

    name = "aspects"
    upstream = "align"

    def __init__(self, *, num_aspects: int = 3, max_rounds: int = 3, max_aspects: int = 12, min_aspects: int = 3,
                 conversation_strategy: str = DEFAULT_STRATEGY, excerpt_share: float = EXCERPT_SHARE,
                 profile: str = "authors", min_aspect_coverage: float = 0.5, doc_chars: int = 2000,
                 max_tokens: int | None = None,
                 llm: str | None = None, concurrency: int = 8,
                 shard_size: int = 32) -> None:
        super().__init__(llm=llm, concurrency=concurrency, shard_size=shard_size)
        self.num_aspects = whole_number("num_aspects", num_aspects)
        self.max_rounds = whole_number("max_rounds", max_rounds)
        self.max_aspects = whole_number("max_aspects", max_aspects)
        self.min_aspects = whole_number("min_aspects", min_aspects)
        if self.min_aspects > self.max_aspects:
            raise ConvragError(f"min_aspects ({min_aspects}) must not exceed max_aspects ({max_aspects})")
        if not isinstance(conversation_strategy, str) or not conversation_strategy.strip():
            raise ConvragError(f"conversation_strategy must be a non-empty text, got {conversation_strategy!r}")
        self.conversation_strategy = " ".join(conversation_strategy.split())
        self.excerpt_share = fraction("excerpt_share", excerpt_share)
        self.profile = check_profile(profile)
        self.min_aspect_coverage = fraction("min_aspect_coverage", min_aspect_coverage)
        self.doc_chars = whole_number("doc_chars", doc_chars, 50)
        self.set_cap(max_tokens)

    def params_extra(self) -> dict[str, Any]:
        return {"num_aspects": self.num_aspects, "max_rounds": self.max_rounds, "max_aspects": self.max_aspects,
                "min_aspects": self.min_aspects, "conversation_strategy": self.conversation_strategy,
                "excerpt_share": self.excerpt_share, "max_tokens": self.max_tokens, "profile": self.profile,
                **({"min_aspect_coverage": self.min_aspect_coverage, "doc_chars": self.doc_chars}
                   if self.profile == "authors" else {})}

    def item_cost(self) -> tuple[int, int, int]:
        per_round = 1 + (3 if self.profile == "authors" else 2) * self.num_aspects
        calls = min(self.max_rounds, 2) * per_round + 1
        return calls, calls * 2500, calls * 250

    # -- one candidate ----------------------------------------------------------------------------------------
    def _verdict(self, cand: AspectCandidate, accepted: list[dict[str, Any]], answer: str,
                 shown: list[dict[str, str]], llm: LLM, tokens: Tokens) -> tuple[str, dict[str, Any] | None]:
        """``("accepted", aspect)`` or ``("rejected: <why>", None)`` for one candidate."""
        fate, aspect = screen(cand, accepted, answer, self.excerpt_share)
        if aspect is None:
            return fate, None
        if accepted:
            try:
                overlap = ask(llm, "dv_aspect_overlap", {**aspect, "existing": _summaries(accepted)}, OverlapReply,
                              sampling(0.0, self.cap(JUDGE_TOKENS)), tokens)
            except UnparsableReply:
                return "rejected: overlap check unparsable", None
            if overlap.has_overlap:
                return "rejected: overlap", None
        try:
            suitable = ask(llm, "dv_aspect_suitability", aspect, SuitabilityReply,
                           sampling(0.0, self.cap(JUDGE_TOKENS)), tokens)
        except UnparsableReply:
            return "rejected: suitability check unparsable", None
        category = suitable.aspect_category.strip().lower()
        if category != "substantive":
            return f"rejected: {category}", None
        if self.profile == "authors":
            return self._coverage(aspect, shown, llm, tokens)
        return "accepted", aspect

    def _coverage(self, aspect: dict[str, Any], shown: list[dict[str, str]], llm: LLM,
                  tokens: Tokens) -> tuple[str, dict[str, Any] | None]:
        """Rule 7: rename an ungrounded name, then reject a coverage under ``min_aspect_coverage``."""
        try:
            judged = ask(llm, "dv_aspect_coverage", {"name": aspect["name"], "excerpt": aspect["excerpt"],
                                                     "documents": shown}, CoverageReply,
                         sampling(0.0, self.cap(COVERAGE_TOKENS)), tokens)
        except UnparsableReply:
            return "rejected: coverage check unparsable", None
        aspect = {**aspect, "document_coverage": judged.coverage_score}
        suggested = " ".join(judged.suggested_name.split())
        if not judged.name_grounded and suggested and suggested.casefold() != aspect["name"].casefold():
            aspect = {**aspect, "name": suggested, "name_original": aspect["name"]}
        if judged.coverage_score < self.min_aspect_coverage:
            return "rejected: low document coverage", None
        return "accepted", aspect

    # -- one item ---------------------------------------------------------------------------------------------
    def extract(self, item: dict[str, Any], llm: LLM, tokens: Tokens,
                counts: Counter[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The accepted aspects in extraction order and the log of every candidate."""
        accepted: list[dict[str, Any]] = []
        log: list[dict[str, Any]] = []
        shown = documents_field(item["documents"], self.doc_chars) if self.profile == "authors" else []
        for round_no in range(1, self.max_rounds + 1):
            if len(accepted) >= self.max_aspects:
                break
            fields = {"query": item["query"], "reasoning": item.get("reasoning") or "", "answer": item["answer"],
                      "num_aspects": min(self.num_aspects, self.max_aspects - len(accepted)),
                      "existing": _summaries(accepted)}
            try:
                reply = ask(llm, "dv_aspect_extract", fields, ExtractionReply,
                            sampling(0.0, self.cap(EXTRACT_TOKENS)), tokens, cut=complete_aspects)
            except UnparsableReply:
                counts["aspects: round rejected: reply unparsable after re-asks"] += 1
                break
            added = 0
            for cand in reply.aspects:
                if len(accepted) >= self.max_aspects:
                    fate, aspect = "rejected: max_aspects reached", None
                else:
                    fate, aspect = self._verdict(cand, accepted, item["answer"], shown, llm, tokens)
                entry = {"name": " ".join(cand.aspect_name.split()), "type": cand.aspect_type.strip().lower(),
                         "round": round_no, "fate": fate}
                if aspect is not None:
                    accepted.append(aspect)
                    added += 1
                    counts["aspects: aspect accepted"] += 1
                    if "name_original" in aspect:
                        counts["aspects: aspect renamed: name not grounded in the documents"] += 1
                        entry["renamed_to"] = aspect["name"]
                else:
                    counts[f"aspects: aspect {fate}"] += 1
                log.append(entry)
            if not added:
                break
        return accepted, log

    def order(self, aspects: list[dict[str, Any]], llm: LLM, tokens: Tokens, counts: Counter[str]) -> list[int]:
        """Conversation order of ``aspects`` (their indices); the extraction order when no usable reply comes."""
        if len(aspects) < 2:
            return list(range(len(aspects)))
        fields = {"conversation_strategy": self.conversation_strategy,
                  "aspects": [{"index": i, "type": a["type"], "name": a["name"]} for i, a in enumerate(aspects)]}
        try:
            reply = ask(llm, "dv_aspect_order", fields, OrderReply, sampling(0.0, self.cap(ORDER_TOKENS)), tokens,
                        check=order_check(len(aspects)))
        except UnparsableReply:
            counts["aspects: ordering unusable, extraction order kept"] += 1
            return list(range(len(aspects)))
        return list(reply.ordered_indices)

    def handle(self, item: dict[str, Any], llm: LLM, tokens: Tokens) -> Outcome:
        counts: Counter[str] = Counter()
        accepted, log = self.extract(item, llm, tokens, counts)
        if len(accepted) < self.min_aspects:
            raise Drop("aspects: fewer than min_aspects aspects", counts)
        ordered = [accepted[i] for i in self.order(accepted, llm, tokens, counts)]
        return Outcome({**item, "aspects": ordered, "aspect_log": log}, counts=counts, tokens=tokens)
