"""Reading a model's free-text reply: the part after a reasoning block, whether it declines the task, and whether it
gives nothing to use."""

from __future__ import annotations

import re

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
