"""Reading a model's free-text reply: the part after a reasoning block, whether it declines the task, and whether it
gives nothing to use; and whether a set of answers or of judge verdicts is degenerate (the thresholds are the
module's constants; docs/failure-rules.md says why)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

_CANNOT = r"I\s+(?:can\s?not|can['\u2019]t|am\s+(?:unable|not\s+able)|won['\u2019]t|will\s+not|must\s+decline)"


_REFUSAL = re.compile(
    rf"^\W*(?:(?:I['\u2019]?m|I\s+am)\s+(?:sorry|afraid)|sorry|I\s+apologi[sz]e|apologies|unfortunately|"
    rf"as\s+an\s+AI(?:\s+language\s+model)?)\b[^.!?\n]{{0,60}}?\b{_CANNOT}\b"
    rf"|^\W*{_CANNOT}\s+(?:help|assist)\s+with\s+(?:that|this)\b|^\W*{_CANNOT}\s+(?:comply|fulfil)", re.I)


def strip_reasoning(text: str) -> str:
    """The reply after the last ``</think>`` tag; empty when a ``<think>`` block was never closed."""
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1]
    return "" if text.lstrip().startswith("<think>") else text


def is_refusal(text: str) -> bool:
    """Whether a reply opens by declining the task: an apology ("I'm sorry", "Unfortunately", "As an AI") followed in
    the same sentence by "I can't / cannot / am unable / won't / will not / must decline", or such a phrase followed
    by "help with that", "assist with this", "comply" or "fulfil"."""
    return _REFUSAL.search(text) is not None


#: a short reply that only says the model cannot say, knows nothing or has nothing to give
_NON_ANSWER = re.compile(
    r"^\W*(?:honestly|frankly|well|sorry)?[\s,]*(?:"
    r"I\s+(?:really\s+)?(?:could\s?n[o']?t|can\s?n[o']?t|can['\u2019]t|couldn['\u2019]t|do\s+not|don['\u2019]t|"
    r"did\s+not|didn['\u2019]t)\s+(?:really\s+)?(?:say|tell|know|determine|answer|find|help|rewrite)"
    r"|(?:I['\u2019]?m|I\s+am)\s+not\s+(?:sure|certain|able)|I\s+have\s+no\s+idea"
    r"|there\s+is\s+(?:no|not\s+enough)\s+(?:information|context))\b", re.I)
#: a whole reply that is only a placeholder word
_EMPTY_WORD = re.compile(r"^\W*(?:no\s+idea|unknown|n/?a|none|nothing|not\s+applicable|unanswerable|"
                         r"cannot\s+be\s+(?:determined|answered))\W*$", re.I)
NON_ANSWER_MAX_WORDS = 20


def is_non_answer(text: str) -> bool:
    """Whether a reply gives nothing to use: empty, a refusal (:func:`is_refusal`), or a short reply (at most
    :data:`NON_ANSWER_MAX_WORDS` words) that opens by saying the model cannot say, tell, know or determine, is not
    sure, has no idea, or that there is no information ("Honestly I could not say.", "N/A", "Unknown.")."""
    text = strip_reasoning(text).strip()
    if not text or is_refusal(text):
        return True
    if _EMPTY_WORD.match(text):
        return True
    return len(text.split()) <= NON_ANSWER_MAX_WORDS and _NON_ANSWER.search(text) is not None


#: answers: flagged when this share (or more) of at least :data:`MIN_ANSWERS` answers is one text, or is empty or a
#: refusal
DEGENERATE_SHARE = 0.5
MIN_ANSWERS = 4
#: judge verdicts: flagged when at least this many verdicts of one judge on one dimension are all the same
MIN_VERDICTS = 10


def _norm(text: str) -> str:
    return " ".join(strip_reasoning(text).split()).casefold()


def answer_checks(answers: Sequence[str]) -> dict[str, Any]:
    """Whether a set of generated answers is degenerate: ``n``, ``empty`` (blank), ``refusals`` (:func:`is_refusal`),
    ``most_common`` ({text, count}: the most frequent answer, compared with whitespace collapsed and case folded) and
    ``flags``, one sentence per finding: every answer empty or a refusal; at least :data:`DEGENERATE_SHARE` of them
    empty or refusals; at least that share one and the same text (both with at least :data:`MIN_ANSWERS` answers).
    Answers that say "I don't know" are not flagged as such: unanswerable turns expect them."""
    texts = [strip_reasoning(a).strip() for a in answers]
    n = len(texts)
    empty = sum(not t for t in texts)
    refusals = sum(bool(t) and is_refusal(t) for t in texts)
    counts = Counter(_norm(t) for t in texts if t)
    top, top_n = counts.most_common(1)[0] if counts else ("", 0)
    text = next((t for t in texts if t and _norm(t) == top), "")
    flags = []
    if n and empty + refusals == n:
        flags.append(f"every one of the {n} answers is empty or a refusal")
    elif n >= MIN_ANSWERS and (empty + refusals) / n >= DEGENERATE_SHARE:
        flags.append(f"{empty + refusals} of {n} answers are empty ({empty}) or refusals ({refusals})")
    if n >= MIN_ANSWERS and top_n / n >= DEGENERATE_SHARE and empty + refusals != n:
        shown = text if len(text) <= 60 else text[:57] + "..."
        flags.append(f"{top_n} of {n} answers are the same text ({shown!r})")
    return {"n": n, "empty": empty, "refusals": refusals, "most_common": {"text": text, "count": top_n},
            "flags": flags}


def constant_verdicts(scores: Sequence[float | int | str | None]) -> str | None:
    """A sentence when one judge's verdicts on one dimension do not vary: at least :data:`MIN_VERDICTS` usable
    verdicts (None left out), all the same value; else None."""
    usable = [s for s in scores if s is not None]
    if len(usable) < MIN_VERDICTS or len(set(usable)) != 1:
        return None
    value = usable[0]
    shown = int(value) if isinstance(value, float) and value.is_integer() else value
    return (f"all {len(usable)} verdicts are {shown}: the judge does not tell these items apart, so its mean "
            "says nothing about them")
