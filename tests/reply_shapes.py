"""The reply-shape corpus harness: hand-written replies, in the shapes instruction-tuned models write, read through
the production reading path of each prompt over real HTTP (a fake OpenAI-compatible server, the ``openai`` client).

Each prompt has a corpus file ``tests/fixtures/reply_shapes/<prompt>.yaml``::

    replies:
      - shape: reasoning, then a bold rating line       # what the reply looks like
        text: |
          The document states the date outright.
          **Rating:** 5
        expect: 5                                        # the reading; null: no reading (a counted failure)
        finish: stop                                     # optional finish reason (length: cut off at max_tokens)

and a :class:`Reader` in one of the ``tests/reply_readers_*.py`` modules (``READERS``: prompt name -> reader) that
renders the prompt with realistic fields and reads a reply the way the product does. The server answers every
request of one case (the first call and any re-ask) with the same reply. ``expect`` is compared with the reading
made JSON-ready (:func:`plain`); where ``expect`` is a mapping, only its keys are compared (long free-text fields
such as a rationale need not be repeated).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from convrag.llm import LLM, LLMFailure, Message, get_llm, load_prompt

CORPUS = Path(__file__).parent / "fixtures" / "reply_shapes"
NO_READING = None  # what ``expect: null`` means
MIN_REPLIES = 10


@dataclass
class Reader:
    """How one prompt is rendered and read in a test.

    ``fields``: the prompt's fields (realistic values); ``read(llm, messages)``: the product's reading path, returning
    the reading, or None / raising :class:`LLMFailure` when the reply yields none; ``response_format``: the server
    setting the reading is checked under (``none``: nothing enforced, the hardest case and the one where prompt and
    reader must agree); ``check_request(body)``, optional: asserts on the request the product sent (e.g. that a
    free-text prompt was not told to answer in JSON).
    """

    fields: dict[str, Any]
    read: Callable[[LLM, list[Message]], Any]
    response_format: str = "none"
    check_request: Callable[[dict[str, Any]], None] | None = None
    options: dict[str, Any] = field(default_factory=dict)


def plain(value: Any) -> Any:
    """A reading made comparable with YAML: pydantic models dumped, tuples as lists, recursively."""
    if isinstance(value, BaseModel):
        return plain(value.model_dump(mode="json"))
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def matches(expect: Any, got: Any) -> bool:
    """``got`` equals ``expect``; a mapping ``expect`` names only the keys to compare; floats to 1e-9."""
    if isinstance(expect, dict):
        return isinstance(got, dict) and all(k in got and matches(v, got[k]) for k, v in expect.items())
    if isinstance(expect, list):
        return isinstance(got, list) and len(got) == len(expect) and all(map(matches, expect, got))
    if isinstance(expect, float) or isinstance(got, float):
        return isinstance(got, int | float) and not isinstance(got, bool) and abs(float(got) - float(expect)) < 1e-9
    return expect == got


def load_corpus(prompt: str) -> list[dict[str, Any]]:
    """The corpus of ``prompt``: a list of ``{shape, text, expect}``."""
    data = yaml.safe_load((CORPUS / f"{prompt}.yaml").read_text(encoding="utf-8"))
    replies = data["replies"]
    for i, r in enumerate(replies):
        assert set(r) >= {"shape", "text", "expect"}, f"{prompt}.yaml reply {i}: needs shape, text and expect"
    return replies


def read_over_http(server: Any, prompt: str, reader: Reader, text: str, finish: str = "stop") -> Any:
    """The reading of reply ``text`` to ``prompt`` through ``reader`` over HTTP; None when there is none.
    ``finish``: the finish reason the server reports (``length``: cut off at max_tokens)."""
    server.responder = lambda body: text
    server.finish_reason = finish
    first = len(server.requests)
    llm = get_llm(f"openai:judge-model@{server.url};response_format={reader.response_format};max_retries=0;"
                  "timeout=5;breaker=0", cache=False, structured_attempts=2, **reader.options)
    try:
        messages = load_prompt(prompt).render(**reader.fields)
        try:
            got = reader.read(llm, messages)
        except LLMFailure:
            got = None
    finally:
        llm.close()
        server.finish_reason = "stop"
    if reader.check_request is not None:
        for body in server.requests[first:first + 1]:
            reader.check_request(body)
    return plain(got)


def check_prompt(server: Any, prompt: str, reader: Reader) -> None:
    """Every reply of the prompt's corpus is read as expected; all mismatches are listed at once."""
    replies = load_corpus(prompt)
    assert len(replies) >= MIN_REPLIES, f"{prompt}: {len(replies)} replies in the corpus, at least {MIN_REPLIES}"
    wrong = []
    for r in replies:
        got = read_over_http(server, prompt, reader, r["text"], r.get("finish", "stop"))
        ok = got is None if r["expect"] is NO_READING else got is not None and matches(r["expect"], got)
        if not ok:
            wrong.append(f"  {r['shape']!r}: expected {r['expect']!r}, read {got!r}")
    assert not wrong, f"{prompt}: {len(wrong)} of {len(replies)} replies misread:\n" + "\n".join(wrong)


def no_json_instruction(body: dict[str, Any]) -> None:
    """The request carries no JSON instruction and no response_format: the prompt's own format was asked for."""
    assert "response_format" not in body
    last = body["messages"][-1]["content"]
    assert "JSON schema" not in last, "a free-text prompt was told to answer in JSON"


def json_instruction(body: dict[str, Any]) -> None:
    """The request asks for JSON in words (nothing enforces it under ``response_format=none``)."""
    assert "response_format" not in body
    assert "JSON" in body["messages"][-1]["content"]
