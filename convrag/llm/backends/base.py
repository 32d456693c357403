"""The one interface every backend implements."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from convrag.llm.types import Completion, Message, SamplingParams


class Backend(ABC):
    """A chat model. Implementations raise :class:`~convrag.llm.types.BackendError` on failure
    (``retryable=True`` for transient causes) and never retry themselves: the client does that.
    """

    #: short backend family name, part of every cache key ("openai", "llamacpp", "hf", ...)
    name: str = "backend"
    #: model identifier, part of every cache key
    model: str = ""
    #: whether :meth:`complete` can enforce a JSON schema while decoding
    supports_schema: bool = False
    #: whether calls may run in parallel threads (local models serialise internally anyway)
    parallel: bool = True

    @property
    def enforces_schema(self) -> bool:
        """Whether structured replies are constrained while decoding (a schema, a grammar or a JSON mode) right now.
        When False, a prompt must ask for the format its reader parses (see ``LLM.free_text``)."""
        return self.supports_schema

    @abstractmethod
    def complete(self, messages: list[Message], params: SamplingParams, *,
                 json_schema: dict[str, Any] | None = None, timeout: float | None = None) -> Completion:
        """Run one chat completion; constrain output to ``json_schema`` where the backend can."""

    def identity(self) -> dict[str, Any]:
        """What distinguishes this backend's outputs in cache keys."""
        return {"backend": self.name, "model": self.model}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (servers, model memory)."""


def file_digest(path: Path) -> str:
    """Cheap identity of a model file: size plus a hash of its first and last MiB."""
    h = hashlib.sha256(str(path.stat().st_size).encode())
    with path.open("rb") as f:
        h.update(f.read(1 << 20))
        f.seek(max(0, path.stat().st_size - (1 << 20)))
        h.update(f.read(1 << 20))
    return h.hexdigest()[:16]
