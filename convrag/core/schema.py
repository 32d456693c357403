"""Shared record schema of retrieval benchmarks, as ``datasets.Features``.

Retrieval views follow the BEIR / mteb conventions used on the Hub:

* ``corpus``: ``_id``, ``title``, ``text``
* ``queries``: ``_id``, ``text``
* ``qrels``: ``query-id``, ``corpus-id``, ``score`` (graded relevance; 0 and negative labels are "judged
  not relevant" and add nothing to any metric)

Multi-turn benchmarks add ``conversations``: one row per conversation with its ordered ``turns``.
A benchmark may add its own columns after the base ones (``with_extra``); the base columns always come
first and keep their types, so any retriever or metric can read any benchmark.
"""

from __future__ import annotations

from datasets import Features, List, Value

CORPUS = Features({"_id": Value("string"), "title": Value("string"), "text": Value("string")})
QUERIES = Features({"_id": Value("string"), "text": Value("string")})
QRELS = Features({"query-id": Value("string"), "corpus-id": Value("string"), "score": Value("int32")})

#: One message of a conversation. ``speaker`` is "user" or "agent" (or "assistant"); ``turn`` is 1-based.
TURN = {
    "turn": Value("int32"),
    "speaker": Value("string"),
    "text": Value("string"),
}

CONVERSATIONS = Features(
    {
        "conversation_id": Value("string"),
        "domain": Value("string"),
        "turns": List(TURN),
    }
)

RETRIEVAL_VIEWS = ("corpus", "queries", "qrels")


def with_extra(base: Features, extra: dict) -> Features:
    """Return ``base`` followed by benchmark-specific columns ``extra`` (which must not redefine base ones)."""
    clash = set(base) & set(extra)
    if clash:
        raise ValueError(f"extra columns redefine base schema columns: {sorted(clash)}")
    return Features({**base, **extra})


def turn_features(extra: dict | None = None) -> dict:
    """Features of one turn, optionally with benchmark-specific fields."""
    return {**TURN, **(extra or {})}


def conversation_features(turn_extra: dict | None = None, extra: dict | None = None) -> Features:
    """Features of a conversation row: ids, domain, ordered turns (with ``turn_extra``), then ``extra``."""
    return Features(
        {
            "conversation_id": Value("string"),
            "domain": Value("string"),
            "turns": List(turn_features(turn_extra)),
            **(extra or {}),
        }
    )
