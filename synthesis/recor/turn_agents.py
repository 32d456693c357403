"""The per-call pieces of the D&V ``turns`` stage (RECOR section 3.2.2, appendix F): the reply schemas, the
checks that make the LLM layer re-ask, and the pure rules the stage applies to the replies.

Definitions:

* **Document score** (:func:`document_score`; RECOR appendix C.4): ``0.5 * support + 0.3 * completeness +
  0.15 * clarity - 0.05 * misleading``, each criterion a whole number 0..10, computed in integer hundredths so
  that it is exact to two decimals (8, 7, 7, 0 -> 7.15). A ``final_score`` in the model's reply is ignored.
* **Selection** of the gold documents: :func:`convrag.synthesis.recor.turn_checks.select_gold` (per profile).
* **Opener** (:func:`opener`): the first two words of a query, lower-cased, punctuation around them removed.
* **Words** of a query: whitespace-separated tokens. **Sentences** of an answer (:func:`sentences`): pieces
  ending in ``.``, ``!`` or ``?`` followed by whitespace or the end (a trailing piece without one counts too).
* **Meta reference** (:func:`meta_reference`): an answer mentioning where its information came from: one of
  :data:`META_TERMS` as a whole word or phrase, case-insensitive.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model, field_validator, model_validator

from convrag.synthesis.recor.common import label_to_id

#: words and phrases an answer may not use (it must state facts as its own knowledge)
META_TERMS = ("document", "documents", "the text", "the texts", "the passage", "the passages", "source",
              "sources", "according to", "the article", "the excerpt", "the information provided",
              "the provided information")
_META = re.compile(r"\b(?:" + "|".join(re.escape(t) for t in META_TERMS) + r")\b", re.I)
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+")
_EDGE_PUNCT = "\"'`“”‘’()[]{}.,;:!?-–—…"
VALUE_TYPES = ("new_facts", "deepening", "example", "implication", "different_angle", "repetitive")


def _no_description(schema: dict[str, Any], cls: type) -> None:
    schema.pop("description", None)


class Reply(BaseModel):
    """Base of the reply schemas: the class docstrings stay out of the JSON schema the model sees (a small model
    copies such text into its fields); what to write is the prompt's job."""

    model_config = ConfigDict(json_schema_extra=_no_description)


class SubQuestionReply(Reply):
    """A focused sub-question for one aspect (appendix F "Sub-question Generation")."""

    sub_question: str = Field(max_length=400)
    confidence: float | None = Field(default=None, description="0.0 to 1.0")
    reasoning: str = Field(default="", max_length=300)

    @field_validator("confidence", mode="before")
    @classmethod
    def _unread_confidence(cls, value: Any) -> float | None:
        """The stage does not read the confidence: one that is not a number (``"high"``) is None, not a failure."""
        try:
            return None if value is None or isinstance(value, bool) else float(value)
        except (TypeError, ValueError):
            return None


Score = Field(ge=0, le=10, description="a whole number from 0 to 10")


class DocScore(Reply):
    """One document's ratings; doc_id is its label as shown (doc_0, doc_1, ...)."""

    doc_id: str = Field(max_length=100, description="the document's label as shown, e.g. doc_0")
    support_score: int = Score
    completeness_score: int = Score
    clarity_score: int = Score
    misleading_score: int = Score
    final_score: float | None = Field(default=None, description="ignored: the caller computes the score")
    reasoning: str = Field(default="", max_length=200)


class DocScoresReply(Reply):
    """The ratings of every candidate document (appendix F "Document Scoring")."""

    document_scores: list[DocScore]

    @model_validator(mode="before")
    @classmethod
    def _bare_list(cls, value: Any) -> Any:
        """A reply that is only the list of ratings is read as that list (``[{...}, ...]``)."""
        return {"document_scores": value} if isinstance(value, list) else value


@functools.cache
def scores_schema(n: int) -> type[DocScoresReply]:
    """:class:`DocScoresReply` with at most ``n`` entries (one per shown document), so that a grammar-constrained
    model stops after the last document instead of inventing more."""
    return create_model("DocScoresReply", __base__=DocScoresReply, __doc__=DocScoresReply.__doc__,
                        document_scores=(list[DocScore], Field(min_length=1, max_length=n)))


def own_flag(value: Any) -> bool | None:
    """A flag the stage does not read (the model's account of its own reply): true / false or yes / no as
    written, anything else (``"true|false"`` copied from the prompt) None, so that it never fails a reply."""
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    return True if text in ("true", "yes") else False if text in ("false", "no") else None


Flag = Annotated[bool | None, BeforeValidator(own_flag)]


class QueryReply(Reply):
    """The user's message (appendix F "Turn 1 Query Generation" / "Follow-up Query Generation"); the flags are
    the model's own account, the stage checks the message itself."""

    conversational_query: str = Field(max_length=300)
    kept_technical_content: Flag = None
    natural_language_used: Flag = None
    transition_type: str | None = None
    uses_natural_language: Flag = None
    references_previous_content: Flag = None


class AnswerReply(Reply):
    """The assistant's answer (appendix F "Grounded Answer Generation"); the flags are not read."""

    answer: str = Field(max_length=1500)
    uses_natural_language: Flag = None
    avoids_meta_references: Flag = None
    focuses_on_available_info: Flag = None


class DiversityReply(Reply):
    """Whether a new answer adds value (appendix F "Turn Diversity Validation")."""

    adds_value: bool
    #: only counted (dv_turns.value_kind bounds it to the six types, "other type" or "no type"), never a failure
    value_type: str = Field(default="", description="|".join(VALUE_TYPES))
    reason: str = Field(default="", max_length=200)


Phrase = Annotated[str, Field(max_length=60)]


class ReasoningReply(Reply):
    """The retrieval reasoning annotation of one turn (appendix C.7)."""

    reasoning: str = Field(max_length=400)
    target_information: str = Field(max_length=150)
    relevance_signals: list[Phrase] = Field(min_length=2, max_length=4, description="2 to 4 short phrases")
    irrelevance_signals: list[Phrase] = Field(min_length=1, max_length=3, description="1 to 3 short phrases")


class GuidanceReply(Reply):
    """The retrieval guidance of one sub-question, written before its documents are scored (authors'
    ``generate_subquestion_reasoning``): it never sees a document."""

    retrieval_guidance: str = Field(max_length=500)
    target_information: str = Field(max_length=200)
    relevance_signals: list[Phrase] = Field(min_length=2, max_length=4, description="2 or 3 short phrases")
    irrelevance_signals: list[Phrase] = Field(min_length=1, max_length=3, description="2 or 3 short phrases")


def document_score(support: int, completeness: int, clarity: int, misleading: int) -> float:
    """``0.5 * support + 0.3 * completeness + 0.15 * clarity - 0.05 * misleading`` (RECOR appendix C.4), summed
    in integer hundredths so the result is the two-decimal value exactly (7.15, not 7.1499...)."""
    return (50 * support + 30 * completeness + 15 * clarity - 5 * misleading) / 100


def squash(text: str) -> str:
    """``text`` with whitespace runs collapsed and stripped."""
    return " ".join(str(text).split())


def opener(query: str) -> str:
    """The first two words of ``query``, lower-cased, punctuation around each removed."""
    words = [w.strip(_EDGE_PUNCT).lower() for w in query.split()[:2]]
    return " ".join(w for w in words if w)


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` (module docstring)."""
    return [s for s in (p.strip() for p in _SENTENCE_END.split(text.strip())) if s]


def meta_reference(text: str) -> str | None:
    """The first meta term in ``text`` (as written there), or None."""
    found = _META.search(text)
    return found.group(0) if found else None


class Checker:
    """A ``check`` for :func:`convrag.synthesis.recor.common.ask` that remembers the kind of the last problem it
    found (``""`` when none), so that a reply that never passes is counted by why. With ``enforce`` False a
    problem is only remembered (the reply is kept and the caller counts it), never fed back."""

    def __init__(self, enforce: bool = True) -> None:
        self.last = ""
        self.enforce = enforce

    def fail(self, kind: str, message: str) -> str | None:
        self.last = kind
        return message if self.enforce else None


def subquestion_check(previous: Sequence[str], checker: Checker) -> Any:
    """Reject an empty sub-question or one equal (whitespace and case aside) to an earlier one."""
    seen = {squash(p).casefold() for p in previous}

    def check(reply: SubQuestionReply) -> str | None:
        text = squash(reply.sub_question)
        if not text:
            return checker.fail("empty", "sub_question is empty: write the sub-question itself")
        if text.casefold() in seen:
            return checker.fail("repeated", "sub_question repeats an earlier sub-question; ask something new "
                                            "about this aspect")
        return None

    return check


def scores_check(labels: Sequence[str], checker: Checker) -> Any:
    """Reject a reply that rates none of the shown documents (a partly missing reply is accepted)."""
    shown = ", ".join(labels)

    def check(reply: DocScoresReply) -> str | None:
        docs = [{"doc_id": label} for label in labels]
        if not any(label_to_id(s.doc_id, docs) for s in reply.document_scores):
            return checker.fail("rating no shown document", "document_scores rates none of the shown documents; "
                                f"give one entry for each of {shown}")
        return None

    return check


def query_check(max_words: int, used: Sequence[str], checker: Checker) -> Any:
    """Reject an empty query, one of ``max_words`` words or more, or one whose opener is in ``used``."""
    used_set = set(used)

    def check(reply: QueryReply) -> str | None:
        text = squash(reply.conversational_query)
        if not text:
            return checker.fail("empty", "conversational_query is empty: write the user's message")
        n = len(text.split())
        if n >= max_words:
            return checker.fail("too long", f"conversational_query has {n} words; it must have fewer than "
                                            f"{max_words}")
        if opener(text) in used_set:
            return checker.fail("with a repeated opener", f"conversational_query starts with {opener(text)!r}, an "
                                                   "opening already used; start it differently")
        return None

    return check


def answer_check(low: int, high: int, checker: Checker) -> Any:
    """Reject an answer outside ``low``..``high`` sentences or one with a meta reference."""

    def check(reply: AnswerReply) -> str | None:
        text = squash(reply.answer)
        n = len(sentences(text))
        if not low <= n <= high:
            return checker.fail("with a wrong sentence count",
                                f"answer has {n} sentence(s); write {low} to {high} sentences")
        term = meta_reference(text)
        if term:
            return checker.fail("with a meta reference", f"answer mentions {term!r}; state the facts directly, without "
                                                  "referring to documents, sources or texts")
        return None

    return check


def reasoning_check(checker: Checker, *, max_signal_words: int = 8) -> Any:
    """Reject reasoning that is not one sentence, an empty target, or signal lists of the wrong size or with
    empty or long (more than ``max_signal_words`` words) phrases."""

    def check(reply: ReasoningReply) -> str | None:
        return _annotation_problem(checker, "reasoning", reply.reasoning, 1, reply, max_signal_words)

    return check


def guidance_check(checker: Checker, *, max_signal_words: int = 8) -> Any:
    """:func:`reasoning_check` for the retrieval guidance written before scoring: 1 or 2 sentences."""

    def check(reply: GuidanceReply) -> str | None:
        return _annotation_problem(checker, "retrieval_guidance", reply.retrieval_guidance, 2, reply,
                                   max_signal_words)

    return check


def _annotation_problem(checker: Checker, field: str, text: str, max_sentences: int,
                        reply: ReasoningReply | GuidanceReply, max_signal_words: int) -> str | None:
    n = len(sentences(squash(text)))
    if not 1 <= n <= max_sentences:
        if max_sentences == 1:
            return checker.fail("not one sentence", f"{field} has {n} sentences; write exactly one sentence")
        return checker.fail("not 1-2 sentences", f"{field} has {n} sentences; write one or two sentences")
    if not squash(reply.target_information):
        return checker.fail("without target information", "target_information is empty")
    for name, signals, low, high in (("relevance_signals", reply.relevance_signals, 2, 4),
                                     ("irrelevance_signals", reply.irrelevance_signals, 1, 3)):
        if not low <= len(signals) <= high:
            return checker.fail("with bad signals", f"{name} has {len(signals)} phrases; give {low} to {high}")
        bad = [s for s in signals if not squash(s) or len(s.split()) > max_signal_words]
        if bad:
            return checker.fail("with bad signals", f"{name} must be short phrases of 1 to {max_signal_words} "
                                f"words; got {bad[0]!r}")
    return None
