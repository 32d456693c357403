"""D&V stage ``facts``: atomic fact extraction and verification (RECOR, sections 3.2.1 and 3.2.3; appendix F
"Atomic Fact Extraction and Verification"; appendix C, Table 14).

Per aspect, one call: the model splits the aspect's excerpt into 1 to ``max_facts`` atomic facts (minimal
statements of about 5-15 words; the length is asked for, not enforced) and checks each against the item's documents
(shown as ``doc_0``, ``doc_1``, ...): supported when a document states it, clearly implies it, or paraphrases it. A
reply with no fact or more than ``max_facts`` is fed back and re-asked. Which facts count as verified: :func:`verdicts`.

An aspect without a verified fact is dropped (``facts: aspect rejected: no verified fact``), and so is one whose reply
stays unparsable after the re-asks (``facts: aspect rejected: reply unparsable after re-asks``); items with fewer than
``min_aspects`` aspects left are dropped (``facts: fewer than min_aspects aspects with a verified fact``). Figures:
``facts: facts extracted`` and ``facts: facts verified`` (appendix C: 9 and 7).

Adds to each kept aspect ``facts`` [{fact, supported, doc_id, reason}] (verified facts only) and to the item
``fact_log`` [{name, extracted [{fact, supported, doc_label, doc_id, reason, fate}], verified, kept}] for every
aspect, where fate is ``verified``, ``not supported``, ``unknown document`` or ``empty``.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from typing import Any

from pydantic import BaseModel, Field, create_model

from convrag.llm import LLM, UnparsableReply
from convrag.synthesis.recor.align import whole_number
from convrag.synthesis.recor.common import Drop, DVStage, Outcome, Tokens, ask, documents_field, label_to_id, sampling

MAX_TOKENS = 700
_LABEL = re.compile(r"doc[_ ]?(\d+)", re.I)


class ExtractedFact(BaseModel):
    """One atomic fact and its verdict."""

    fact: str = Field(max_length=300, description="the atomic fact, 5-15 words")
    is_supported: bool
    supporting_doc_id: str | int | None = Field(default=None, description="doc_X of a supporting document, or null")
    reason: str = ""


class FactSummary(BaseModel):
    """The reply's own counts (not read; typed so that strict JSON-schema servers accept the schema)."""

    total_extracted: int | None = None
    supported_count: int | None = None


class FactReply(BaseModel):
    """The fact extractor-verifier's structured reply (appendix F's output fields)."""

    extracted_facts: list[ExtractedFact] = Field(max_length=10)
    supported_facts: list[str] = Field(default_factory=list, max_length=10)
    unsupported_facts: list[str] = Field(default_factory=list, max_length=10)
    summary: FactSummary | None = None


@functools.cache
def fact_reply(max_facts: int) -> type[FactReply]:
    """:class:`FactReply` with every list bounded by ``max_facts``, so that constrained decoding ends the reply."""
    bounded = (list[ExtractedFact], Field(max_length=max_facts))
    strings = (list[str], Field(default_factory=list, max_length=max_facts))
    return create_model("FactReply", __base__=FactReply, __doc__=FactReply.__doc__, extracted_facts=bounded,
                        supported_facts=strings, unsupported_facts=strings)


def fact_check(max_facts: int) -> Any:
    """The check of a reply: between 1 and ``max_facts`` facts."""
    def check(reply: FactReply) -> str | None:
        n = len(reply.extracted_facts)
        if not 1 <= n <= max_facts:
            return f"extracted_facts must hold between 1 and {max_facts} facts, got {n}"
        return None
    return check


def doc_id_of(label: str, documents: list[dict[str, Any]]) -> str | None:
    """The document id a reply's ``supporting_doc_id`` names: the label itself (:func:`label_to_id`), else the
    first ``doc_N`` inside it that is one of the documents (a reply may name several: "doc_1, doc_0")."""
    found = label_to_id(label, documents)
    for number in [] if found else _LABEL.findall(label):
        found = found or label_to_id(number, documents)
    return found


def verdicts(reply: FactReply, documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every extracted fact with its document id and fate (``verified``, ``not supported``, ``unknown document`` or
    ``empty``).

    A fact is *verified* when the reply marks it ``is_supported`` and, if it names a ``supporting_doc_id``, that
    label is one of the item's documents (mapped to the document id with
    :func:`~convrag.synthesis.recor.common.label_to_id`, else the first ``doc_N`` in it that maps: :func:`doc_id_of`;
    an unknown label leaves the fact unverified: ``facts: fact rejected: unknown document``). The reply's
    ``supported_facts`` / ``unsupported_facts`` lists only repeat the per-fact flags and are not read."""
    out = []
    for f in reply.extracted_facts:
        text = " ".join(f.fact.split())
        label = None if f.supporting_doc_id is None else str(f.supporting_doc_id).strip()
        named = label is not None and label.lower() not in ("", "null", "none")
        doc_id = doc_id_of(label, documents) if named and label is not None else None
        if not text:
            fate = "empty"
        elif not f.is_supported:
            fate = "not supported"
        elif named and doc_id is None:
            fate = "unknown document"
        else:
            fate = "verified"
        out.append({"fact": text, "supported": bool(f.is_supported), "doc_label": label, "doc_id": doc_id,
                    "reason": f.reason.strip(), "fate": fate})
    return out


class Facts(DVStage):
    """Atomic facts per aspect, verified against the documents; aspects without a verified fact dropped.

    Options: ``max_facts`` (per aspect, 5), ``doc_chars`` (characters of each document shown), ``min_aspects``
    (aspects an item needs after verification, 3).
    """

    name = "facts"
    upstream = "aspects"

    def __init__(self, *, max_facts: int = 5, doc_chars: int = 2000, min_aspects: int = 3,
                 max_tokens: int | None = None, llm: str | None = None, concurrency: int = 8,
                 shard_size: int = 32) -> None:
        super().__init__(llm=llm, concurrency=concurrency, shard_size=shard_size)
        self.max_facts = whole_number("max_facts", max_facts)
        self.doc_chars = whole_number("doc_chars", doc_chars, 50)
        self.min_aspects = whole_number("min_aspects", min_aspects)
        self.set_cap(max_tokens)

    def params_extra(self) -> dict[str, Any]:
        return {"max_facts": self.max_facts, "doc_chars": self.doc_chars, "min_aspects": self.min_aspects,
                "max_tokens": self.max_tokens}

    def item_cost(self) -> tuple[int, int, int]:
        return 6, 6 * (1000 + 3 * self.doc_chars), 6 * 600

    def handle(self, item: dict[str, Any], llm: LLM, tokens: Tokens) -> Outcome:
        documents = list(item.get("documents") or [])
        shown = documents_field(documents, self.doc_chars)
        counts: Counter[str] = Counter()
        kept: list[dict[str, Any]] = []
        log: list[dict[str, Any]] = []
        for aspect in item.get("aspects") or []:
            fields = {"name": aspect["name"], "excerpt": aspect["excerpt"], "documents": shown,
                      "max_facts": self.max_facts}
            try:
                reply = ask(llm, "dv_fact_verify", fields, fact_reply(self.max_facts),
                            sampling(0.0, self.cap(MAX_TOKENS)), tokens, check=fact_check(self.max_facts))
            except UnparsableReply:
                counts["facts: aspect rejected: reply unparsable after re-asks"] += 1
                log.append({"name": aspect["name"], "extracted": [], "verified": 0, "kept": False})
                continue
            facts = verdicts(reply, documents)
            verified = [{k: f[k] for k in ("fact", "supported", "doc_id", "reason")}
                        for f in facts if f["fate"] == "verified"]
            counts["facts: facts extracted"] += len(facts)
            counts["facts: facts verified"] += len(verified)
            for f in facts:
                if f["fate"] != "verified":
                    counts[f"facts: fact rejected: {f['fate']}"] += 1
            log.append({"name": aspect["name"], "extracted": facts, "verified": len(verified),
                        "kept": bool(verified)})
            if verified:
                kept.append({**aspect, "facts": verified})
            else:
                counts["facts: aspect rejected: no verified fact"] += 1
        if len(kept) < self.min_aspects:
            raise Drop("facts: fewer than min_aspects aspects with a verified fact", counts)
        return Outcome({**item, "aspects": kept, "fact_log": log}, counts=counts, tokens=tokens)
