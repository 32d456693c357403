"""A scripted backend for tests and dry runs: replies come from a list, a function, or an echo."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from convrag.llm.backends.base import Backend
from convrag.llm.types import BackendError, Completion, Message, SamplingParams, Usage

Reply = str | BaseException | Callable[[list[Message]], str]


class FakeBackend(Backend):
    """Returns scripted replies in order (strings are replies, exceptions are raised), then
    ``responder(messages)`` if given, else echoes the last user message. Every call is logged in ``calls``.
    """

    name = "fake"

    def __init__(self, script: Iterable[Reply] = (), responder: Callable[[list[Message]], str] | None = None, *,
                 model: str = "fake", supports_schema: bool = False, delay: float = 0.0) -> None:
        self.script = list(script)
        self.responder = responder
        self.model = model
        self.supports_schema = supports_schema
        self.delay = delay
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def complete(self, messages: list[Message], params: SamplingParams, *,
                 json_schema: dict[str, Any] | None = None, timeout: float | None = None) -> Completion:
        with self._lock:
            self.calls.append({"messages": [dict(m) for m in messages], "params": params, "json_schema": json_schema})
            reply: Reply | None = self.script.pop(0) if self.script else None
        if self.delay:
            time.sleep(self.delay)
        if isinstance(reply, BaseException):
            raise reply
        if callable(reply):
            reply = reply(messages)
        if reply is None:
            if self.responder is not None:
                reply = self.responder(messages)
            else:
                users = [m["content"] for m in messages if m["role"] == "user"]
                reply = users[-1] if users else ""
        n_in = sum(len(m["content"].split()) for m in messages)
        return Completion(text=reply, usage=Usage(n_in, len(reply.split())), model=self.model, finish_reason="stop")


def transient(kind: str = "rate_limit") -> BackendError:
    """A retryable error, for scripts."""
    return BackendError(f"scripted {kind}", retryable=True, kind=kind)
