"""The verdict record every audit judge call ends as, and the shared ways of reading a judge's reply.

A judge replies either through structured output (a JSON object with a ``rationale`` field first, then the
verdict field) when its backend constrains replies right now (``LLM.free_text`` False), or in free text that ends
with a verdict line, as its prompt asks when nothing is enforced (``response_format=none``, a server that rejected
every format, a local model without grammars), read by :func:`parse_rating` (1-5 style scales) or
:func:`parse_choice` (a numbered document). A reply from which no verdict can be read is kept with ``score=None``
and the reason in ``error``; it is never given a default score, and aggregates leave it out of their means and
count it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import BaseModel

from convrag.llm import LLM, EndpointUnreachable, LLMFailure, Message, ParseError, SamplingParams, UnparsableReply
from convrag.llm.structured import json_candidates


@dataclass
class Verdict:
    """One judge's verdict on one audit item along one dimension.

    ``score``: the number the dimension averages (None when no verdict could be read, with ``error`` set to
    ``"unparseable: ..."`` or ``"call failed: ..."``); ``label``: a categorical verdict where the dimension
    has one; ``rationale``: the judge's reasoning; ``raw``: its whole reply; ``extra``: dimension details.
    """

    item_id: str
    judge: str
    dimension: str
    score: float | None
    label: str | None
    rationale: str
    raw: str
    error: str | None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (one per-item JSONL row)."""
        return asdict(self)


#: an optionally bold "Rating" label anywhere (the authors' rule), or a "Score" / "Grade" label starting a line, an
#: optional colon, then the number: "**Rating:** 4", "Rating: 4", "**Rating**: 4", "Score: 4/5"; a decimal is
#: captured whole ("**Rating:** 4.5" is a labelled rating, and no whole-number verdict)
_RATING = re.compile(r"(?:\**\s*\brating|^[ \t>*_#-]*(?:score|grade))\s*\**\s*:?\s*\**\s*(\d+(?:\.\d+)?)(?!\d)",
                     re.I | re.M)
#: a number standing alone: not part of a longer number or of a decimal ("3.5", "2024"), and not the scale after a
#: slash or "out of" ("4/5", "4 out of 5": the 5 is the scale, not a rating)
_NUMBER = re.compile(r"(?<![\d./])(?<!out of )(\d+)(?!\d|\.\d)", re.I)
#: a bracketed document number at the very end (trailing spaces, bold stars or a full stop allowed)
_CHOICE = re.compile(r"\[(\d+)\][\s*.]*$")
#: a line that states the verdict ("**Rating:** 4", "Document ID: [3]"), cut off to leave the rationale
_VERDICT_LINE = re.compile(r"^[ \t>*_#-]*(?:rating|score|grade|document(?: id)?)\s*\**\s*:", re.I | re.M)
_JUSTIFICATION = re.compile(r"^\s*\**\s*(?:justification|rationale)\s*\**\s*:?\s*\**\s*", re.I)


def parse_rating(text: str, low: int = 1, high: int = 5, *, labelled_only: bool = False) -> int | None:
    """The rating in a free-text reply: the ``rating`` of a JSON object in it (a judge that answered in JSON); else
    the last "Rating" label (optionally bold, optional colon; a line starting "Score" or "Grade" too) followed by
    an integer in ``[low, high]``; else the last standalone integer in range anywhere in the text; else None. The
    MTR-Eval authors' rule, with these exceptions where it misreads: a last labelled rating out of range
    ("**Rating:** 9") or not whole ("**Rating:** 4.5") is no verdict (theirs falls through to any digit in the
    reasoning), the scale of "4/5" or "4 out of 5" is never taken for the rating (their last-digit rule reads
    "Score: 4/5" as 5), and a JSON reply's digits in its rationale are not read.
    ``labelled_only``: no last-digit fallback (for a reply cut off before its verdict line)."""
    rating = _json_rating(text)
    if rating is not None:
        return rating if isinstance(rating, int) and not isinstance(rating, bool) and low <= rating <= high else None
    labelled = [m.group(1) for m in _RATING.finditer(text)]
    if labelled:
        last = labelled[-1]
        return int(last) if last.isdigit() and low <= int(last) <= high else None
    if labelled_only:  # a reply cut off at max_tokens: any digit of the unfinished reasoning is no verdict
        return None
    loose = [int(m.group(1)) for m in _NUMBER.finditer(text) if low <= int(m.group(1)) <= high]
    return loose[-1] if loose else None


def _json_rating(text: str) -> Any | None:
    """The ``rating`` field of the last JSON object in a reply, or None (no object, or none with that field)."""
    if "{" not in text:
        return None
    try:
        candidates = json_candidates(text)
    except ParseError:
        return None
    ratings = [v["rating"] for v, _ in candidates if isinstance(v, dict) and "rating" in v]
    return ratings[-1] if ratings else None


def parse_choice(text: str, n: int) -> int | None:
    """The document a free-text reply names: a bracketed number ``[N]`` at the very end of the text (only spaces,
    bold stars or a full stop may follow), with ``1 <= N <= n``; else None."""
    m = _CHOICE.search(text.rstrip())
    if m is None:
        return None
    k = int(m.group(1))
    return k if 1 <= k <= n else None


def free_text_rationale(text: str) -> str:
    """The reasoning part of a free-text reply: a leading "Justification:" label and the verdict lines removed."""
    lines = list(_VERDICT_LINE.finditer(text))
    body = text[:lines[-1].start()] if lines else text
    return _JUSTIFICATION.sub("", body.strip(), count=1).strip()


def _verdict_field(schema: type[BaseModel]) -> str:
    """The schema's verdict field: its last field other than ``rationale``."""
    names = [n for n in schema.model_fields if n != "rationale"]
    if "rationale" not in schema.model_fields or not names:
        raise TypeError(f"{schema.__name__} needs a 'rationale' field and a verdict field")
    return names[-1]


def failure_kind(error: str) -> str:
    """The kind of a :func:`judge_call` error, the text before its first colon: ``unparseable`` or ``call failed``."""
    return error.split(":", 1)[0].strip() or "failed"


def judge_call(llm: LLM, messages: list[Message], schema: type[BaseModel],
               fallback_parse: Callable[[str], Any | None], *, params: SamplingParams | None = None,
               cut_parse: Callable[[str], Any | None] | None = None,
               free_text: bool | None = None) -> tuple[Any | None, str, str, str | None]:
    """Ask a judge and read its verdict: ``(value, rationale, raw reply, error)``.

    Where the backend constrains structured replies (``not llm.free_text``), structured output against ``schema``
    (a pydantic model: ``rationale`` then the verdict field), and a reply that holds no JSON is still read with
    ``fallback_parse`` (a server that ignored the requested format). Where nothing is enforced, the prompt's own
    free-text format, read by ``fallback_parse`` from one reply (None: no verdict). ``value`` is None exactly when
    ``error`` is set: ``"unparseable: ..."`` (the judge answered, nothing could be read) or ``"call failed: ..."``
    (no answer after retries). A free-text reply cut off at ``max_tokens`` (finish reason ``length``) is read by
    ``cut_parse`` instead when given (e.g. only an explicit rating line: the reasoning was never finished).
    ``free_text``: the mode the prompt was rendered for (default: ``llm.free_text`` now; pass the value the prompt
    was rendered with, as it may change under a concurrent ``response_format`` fallback).
    :class:`EndpointUnreachable` propagates: a dead endpoint is fatal for the run, not a per-item failure.
    """
    field = _verdict_field(schema)

    def candidate(text: str) -> dict[str, Any] | None:
        value = fallback_parse(text)
        return None if value is None else {"rationale": free_text_rationale(text), field: value}

    try:
        if free_text is None:
            free_text = llm.free_text
        if free_text:  # one reply, read as the authors read it: a re-ask would change what the judge saw
            comp = llm.chat(messages, params)
            cut = comp.finish_reason == "length" and cut_parse is not None
            value = (cut_parse if cut else fallback_parse)(comp.text)
            if value is None:
                why = "cut off at max_tokens before a verdict line" if cut else "no verdict line in the reply"
                llm.report.record_failure(f"{llm.spec}: unparseable: {why}")
                return None, free_text_rationale(comp.text), comp.text, f"unparseable: {why}: {comp.text[-200:]!r}"
            return value, free_text_rationale(comp.text), comp.text, None
        parsed = llm.structured(messages, schema, params, fallback=candidate)
    except EndpointUnreachable:
        raise
    except UnparsableReply as exc:
        return None, "", exc.last_text or "", f"unparseable: {exc}"
    except LLMFailure as exc:
        return None, "", "", f"call failed: {exc}"
    return getattr(parsed.value, field), parsed.value.rationale.strip(), parsed.text, None
