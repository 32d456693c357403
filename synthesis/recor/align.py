"""D&V stage ``align``: document-answer alignment validation (RECOR, section 3.2.1; appendix F "Document-Answer
Alignment Validation").

The model names the answer's key claims (3-5 main ideas, not minor details), says which of them the documents
support (related information and core facts count; the documents need not hold every detail), and gives a
coverage fraction in [0, 1] and a sufficient yes/no. A coverage outside [0, 1] is fed back and re-asked. An item is
kept when the model judges the documents sufficient AND coverage >= ``min_coverage`` (default 0.5: at least half
of the answer's main claims are backed by the documents; the paper gives no number).

Adds ``alignment`` {key_claims, supported_claims, unsupported_claims, coverage, sufficient} to the item.
Drops (counted by reason, without the number): ``align: judged insufficient``, ``align: coverage below
min_coverage``, ``align: alignment: reply unparsable after re-asks``; a failed call drops the item through
:class:`~convrag.synthesis.recor.common.DVStage` (``align: llm: call failed after retries``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, field_validator

from convrag.core.errors import ConvragError
from convrag.llm import LLM, UnparsableReply
from convrag.synthesis.engine.roles import failure_reason
from convrag.synthesis.recor.common import Drop, DVStage, Outcome, Tokens, ask, documents_field, sampling

MAX_TOKENS = 600


def whole_number(name: str, value: Any, low: int = 1) -> int:
    """``value`` if it is an int >= ``low`` (not a bool), else a :class:`ConvragError` naming the option."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConvragError(f"{name} must be a whole number >= {low}, got {value!r}")
    return value


def fraction(name: str, value: Any) -> float:
    """``value`` as a float if it is a number in [0, 1], else a :class:`ConvragError` naming the option."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise ConvragError(f"{name} must be a number from 0 to 1, got {value!r}")
    return float(value)


class AlignmentReply(BaseModel):
    """The alignment judge's structured reply (appendix F's output fields)."""

    key_claims: list[str] = Field(max_length=5, description="the answer's main claims, 3 to 5")
    supported_claims: list[str] = Field(default_factory=list, max_length=5,
                                        description="key claims the documents support")
    unsupported_claims: list[str] = Field(default_factory=list, max_length=5,
                                          description="key claims they do not support")
    coverage_percentage: float = Field(ge=0.0, le=1.0, description="share of key claims supported, 0.0 to 1.0")
    is_sufficient: bool = Field(description="whether the documents can support the answer")

    @field_validator("coverage_percentage", mode="before")
    @classmethod
    def _percent_text(cls, value: Any) -> Any:
        """A text such as ``"80%"`` is the fraction 0.8; a bare number is read as written (it must lie in [0, 1])."""
        text = value.strip() if isinstance(value, str) else ""
        if text.endswith("%") and text[:-1].strip().replace(".", "", 1).isdigit():
            return float(text[:-1]) / 100
        return value


def check_alignment(reply: AlignmentReply) -> str | None:
    """A problem to feed back, or None: at least one key claim is needed."""
    if not [c for c in reply.key_claims if c.strip()]:
        return "key_claims is empty: list the 3 to 5 main claims of the answer"
    return None


class Align(DVStage):
    """Document-answer alignment: keeps items whose documents support the answer (see the module docstring).

    Options: ``min_coverage`` (0-1, default 0.5), ``doc_chars`` (characters of each document shown, cut at a
    word), ``max_documents`` (documents shown; the rest are not judged).
    """

    name = "align"
    upstream = "load"

    def __init__(self, *, min_coverage: float = 0.5, doc_chars: int = 2000, max_documents: int = 10,
                 max_tokens: int | None = None, llm: str | None = None, concurrency: int = 8,
                 shard_size: int = 32) -> None:
        super().__init__(llm=llm, concurrency=concurrency, shard_size=shard_size)
        self.min_coverage = fraction("min_coverage", min_coverage)
        self.doc_chars = whole_number("doc_chars", doc_chars, 50)
        self.max_documents = whole_number("max_documents", max_documents)
        self.set_cap(max_tokens)

    def params_extra(self) -> dict[str, Any]:
        return {"min_coverage": self.min_coverage, "doc_chars": self.doc_chars, "max_documents": self.max_documents,
                "max_tokens": self.max_tokens}

    def item_cost(self) -> tuple[int, int, int]:
        return 1, 1200 + min(self.max_documents, 4) * self.doc_chars, 1200

    def handle(self, item: dict[str, Any], llm: LLM, tokens: Tokens) -> Outcome:
        documents = list(item.get("documents") or [])[: self.max_documents]
        if not documents:
            raise Drop("align: no documents")
        fields = {"answer": item["answer"], "documents": documents_field(documents, self.doc_chars)}
        try:
            reply = ask(llm, "dv_alignment", fields, AlignmentReply, sampling(0.0, self.cap(MAX_TOKENS)), tokens,
                        check=check_alignment)
        except UnparsableReply as err:
            raise Drop(f"align: {failure_reason('alignment', err)}") from None
        alignment = {"key_claims": [c for c in reply.key_claims if c.strip()],
                     "supported_claims": list(reply.supported_claims),
                     "unsupported_claims": list(reply.unsupported_claims),
                     "coverage": float(reply.coverage_percentage), "sufficient": bool(reply.is_sufficient)}
        if not reply.is_sufficient:
            raise Drop("align: judged insufficient")
        if reply.coverage_percentage < self.min_coverage:
            raise Drop("align: coverage below min_coverage")
        return Outcome({**item, "alignment": alignment}, tokens=tokens)
