"""Reading judge replies: the official rules (IBM's MTRAG evaluation scripts, reproduced exactly) and our stricter
reading, as plain functions.

Official (``mode="official"``), as ``scripts/evaluation/judge_utils.py`` / ``judge_wrapper.py`` read replies:

- :func:`official_idk`: the word the reply starts with decides (``yes`` 1, ``no`` 0, any other word 0.5); a reply
  that does not start with a letter is ``"unknown"``, a failed call None. None and ``"unknown"`` let the raw metric
  through the conditioning (see ``components.condition``).
- :func:`official_rating`: ``for example: ...`` is cut from every line, then the twelve patterns of
  :data:`OFFICIAL_RATING_PATTERNS` are tried in order, each match replacing the value with its FIRST match / 10, so
  the last matching pattern wins. No match, or a value outside (0, 1] -> 0.5.
- :func:`official_clarification`: the reply's JSON ``decision``: yes -> 1, no -> 0, anything else or any failure 0.5.

Strict (``mode="strict"``): :func:`parse_idk` reads the first alphabetic word anywhere (``**Yes**`` is yes; a closed
``<think>`` block and a ``Label:`` naming the field are skipped) and only yes / no / partial(ly) count;
:func:`parse_rating` takes the last ``[[N]]``, else ``Rating: N``, else ``N/10`` or ``N out of 10``, and
:func:`rating_value` accepts (0, 10]. Anything else is a parse failure, which strict mode excludes and counts
instead of scoring.

>>> official_idk("**Yes**"), official_idk(" no."), official_idk("Partial"), official_idk(None)
('unknown', 0.0, 0.5, None)
>>> official_rating("[7]"), official_rating("Rating: [[11]]"), parse_rating("[7]")
(0.7, 0.5, None)
>>> official_clarification('{"decision": "Yes", "explanation": "asks"}'), official_clarification("no json")
(1.0, 0.5)
"""

from __future__ import annotations

import json
import re
from typing import Any

# --- official ----------------------------------------------------------------------------------------------------
_LEADING_WORD = re.compile(r"\s*([A-Za-z]+)")


def leading_word(text: Any) -> str | None:
    """The lower-cased word a reply starts with (after white space), None if it starts otherwise."""
    match = _LEADING_WORD.match(text) if isinstance(text, str) else None
    return match.group(1).lower() if match else None


def official_idk(text: Any) -> float | str | None:
    """IDK label as the official scripts read it: 1.0 / 0.0 / 0.5 by :func:`leading_word` (``yes`` / ``no`` / any
    other word), ``"unknown"`` for a reply that does not start with a letter (``**Yes**``, ``"yes"``, ``- yes``,
    ``1``, empty), or None for a non-string (a failed call)."""
    if not isinstance(text, str):
        return None
    token = leading_word(text)
    if token is None:
        return "unknown"
    return 1.0 if token == "yes" else 0.0 if token == "no" else 0.5


OFFICIAL_RATING_PATTERNS = tuple(re.compile(p, re.IGNORECASE) for p in (
    r"Rating: \[\[(\d+)\]\]",
    r"Rating: (\d+)",
    r"\[\[(\d+)\]\]",
    r"\[(\d+)\]",
    r"Rating: \[\[([0-9]*\.?[0-9]+)\]\]",
    r"Overall Rating: ([0-9]*\.?[0-9]+)",
    r"Score: ([0-9]*\.?[0-9]+)/10",
    r"Score: ([0-9]*\.?[0-9]+)",
    r"\[Rating\]\n(\d+)",
    r"Rating: \[\[(\d+)/10\]\]",
    r"Rating: \[\[([-+]?\d*\.?\d+)",
    r"([-+]?\d*\.?\d+) out of 10",
))  # fmt: skip
"""The official rating patterns, in the order they are tried (each has one group)."""
_FOR_EXAMPLE = re.compile(r"for example:.*?$", re.IGNORECASE | re.MULTILINE)


def official_rating_read(text: Any) -> float | None:
    """The rating the official patterns read from ``text`` (the last matching pattern's first match), or None."""
    text = _FOR_EXAMPLE.sub("", str(text))
    rating = None
    for pattern in OFFICIAL_RATING_PATTERNS:
        match = pattern.search(text)
        if match is not None:
            rating = float(match.group(1))
    return rating


def official_rating_value(rating: float | None) -> float:
    """RB_llm value of a rating read by ``official_rating_read``: rating / 10, or 0.5 when no rating was read or
    the value is outside (0, 1]."""
    value = 0.5 if rating is None else rating / 10
    return value if 0 < value <= 1 else 0.5


def official_rating(text: Any) -> float:
    """RB_llm value of one judge reply as the official parser gives it (see ``official_rating_value``)."""
    return official_rating_value(official_rating_read(text))


_FENCED_JSON = re.compile(r"```json\s*(.*?)\s*```", re.DOTALL)
_BRACED = re.compile(r"\{\s*(.*?)\s*\}", re.DOTALL)
_INVALID_ESCAPE = re.compile(r'\\(?!["\\/bfnrt]|u[0-9a-fA-F]{4})')


def official_clarification_read(text: Any) -> tuple[float, dict[str, Any] | None]:
    """(value, the parsed JSON object or None) of a clarification reply under the official rule: the JSON in a
    ```` ```json ```` fence, else the text from the first ``{`` to the first ``}``; invalid backslash escapes removed,
    braces restored, ``json.loads``; ``decision`` (lower-cased) yes -> 1.0, no -> 0.0, anything else or any failure
    -> 0.5 (the official bare ``except:`` catches every error, so a reply nested too deep for ``json.loads``, a
    ``RecursionError``, is 0.5 too)."""
    try:
        match = (_FENCED_JSON if "```json" in text else _BRACED).search(text)
        if match is None:
            return 0.5, None
        body = _INVALID_ESCAPE.sub("", match.group(1))
        body = body if body.startswith("{") else "{" + body
        body = body if body.endswith("}") else body + "}"
        parsed = json.loads(body)
        decision = parsed.get("decision", "").lower()
    except (TypeError, ValueError, AttributeError, RecursionError):  # what the official bare ``except`` meets
        return 0.5, None
    return (1.0 if decision == "yes" else 0.0 if decision == "no" else 0.5), parsed


def official_clarification(text: Any) -> float:
    """Clarification value of one reply under the official rule: 1.0 (yes), 0.0 (no) or 0.5."""
    return official_clarification_read(text)[0]


# --- strict ------------------------------------------------------------------------------------------------------
_FIRST_WORD = re.compile(r"[A-Za-z]+")
_REASONING = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)
_LABEL_PREFIX = re.compile(r"^[^A-Za-z]*(?:the\s+)?(?:label|answer|verdict)(?:\s+is)?\b[\s*:=-]*", re.IGNORECASE)
_IDK_VALUES = {"yes": 1.0, "no": 0.0, "partial": 0.5, "partially": 0.5}


def parse_idk(text: str | None) -> tuple[float | None, str | None, bool]:
    """(value, label, failed) from an IDK reply under our reading: after a closed ``<think>`` block and a leading
    ``Label:`` / ``Answer:`` / ``The label is`` naming the field, the first alphabetic word decides (yes 1, no 0,
    partial or partially 0.5); any other word, or none, is a parse failure (value None)."""
    body = _LABEL_PREFIX.sub("", _REASONING.sub("", text or ""), count=1)
    match = _FIRST_WORD.search(body)
    token = match.group(0).lower() if match else None
    if token in _IDK_VALUES:
        label = "partial" if token == "partially" else token
        return _IDK_VALUES[token], label, False
    return None, None, True


_NUMBER = r"([-+]?\d+(?:\.\d+)?)"
_RATING_PATTERNS = [
    re.compile(r"\[\[\s*" + _NUMBER + r"\s*(?:/\s*10\s*)?\]\]"),
    re.compile(r"rating\s*[:=]?\s*\**\s*" + _NUMBER, re.IGNORECASE),
    re.compile(_NUMBER + r"\s*(?:/\s*10|out of 10)\b", re.IGNORECASE),
]
_EXAMPLE_LINE = re.compile(r"for (?:example|instance)\b.*$", re.IGNORECASE | re.MULTILINE)


def parse_rating(text: str | None) -> float | None:
    """The 1-10 rating in a judge reply under our reading (last ``[[N]]``, else last ``Rating: N``, else
    ``N/10`` / ``N out of 10``), or None."""
    if not text:
        return None
    text = _EXAMPLE_LINE.sub("", text)
    for pattern in _RATING_PATTERNS:
        found = pattern.findall(text)
        if found:
            return float(found[-1])
    return None


def rating_value(rating: float | None) -> tuple[float | None, bool]:
    """(rating / 10, failed): a missing rating or one outside (0, 10] is a parse failure (value None)."""
    if rating is None or not 0 < rating <= 10:
        return None, True
    return rating / 10.0, False
