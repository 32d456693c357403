"""Readers of the audit and SEARA prompts for the reply-shape corpus (:mod:`tests.reply_shapes`)."""

from __future__ import annotations

from typing import Any

from convrag.audit.mtr_eval import RatingReply
from convrag.audit.verdict import judge_call, parse_rating
from convrag.llm import LLM, Message

from .reply_shapes import Reader, no_json_instruction

HISTORY = [{"role": "user", "text": "Tell me about the Golden Gate Bridge."},
           {"role": "assistant", "text": "It is a suspension bridge across the Golden Gate strait in San Francisco."}]
BRIDGE = ("The Golden Gate Bridge opened to vehicular traffic on 28 May 1937 after four years of construction. "
          "At the time it was the longest suspension bridge main span in the world.")


def verdict(schema: Any, parse: Any) -> Any:
    """The verdict :func:`judge_call` reads (None when it reports an error)."""

    def read(llm: LLM, messages: list[Message]) -> Any:
        value, _, _, error = judge_call(llm, messages, schema, parse)
        return None if error else value

    return read


READERS: dict[str, Reader] = {
    "audit_query_evidence": Reader(
        fields={"query": "When did it open?", "document": BRIDGE, "history": HISTORY},
        read=verdict(RatingReply, parse_rating), check_request=no_json_instruction),
}
