"""Reading a model's free-text reply: the part after a reasoning block, and whether it declines the task."""

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
