"""Plain data types shared by every part of the LLM layer."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from convrag.core.errors import ConvragError

Message = dict[str, str]
"""One chat message: ``{"role": "system"|"user"|"assistant", "content": "..."}``."""


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings. Greedy (temperature 0) by default so results are reproducible and cacheable.

    ``sample`` is not sent to the backend; it only separates cache entries when several samples of
    the same prompt are wanted.
    """

    temperature: float = 0.0
    max_tokens: int = 512
    top_p: float = 1.0
    seed: int | None = 0
    stop: tuple[str, ...] = ()
    sample: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stop"] = list(self.stop)
        return d


@dataclass
class Usage:
    """Token counts of one backend call."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class Completion:
    """What a backend returns: the text, its token usage and whether it came from the cache."""

    text: str
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    finish_reason: str | None = None
    cached: bool = False


class LLMError(ConvragError):
    """Base class of the LLM layer's errors."""


class BackendError(LLMError):
    """A backend call failed. ``retryable`` marks transient causes (429, 5xx, timeouts, lost connections)."""

    MAX_IMMEDIATE = 5

    def __init__(self, message: str, *, retryable: bool = False, kind: str = "error", immediate: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.kind = kind
        #: retry at once, without backoff and without using the retry budget (e.g. a changed request format)
        self.immediate = immediate


class LLMFailure(LLMError):
    """A request could not be answered after all retries. Never replaced by a default value."""

    def __init__(self, message: str, *, attempts: int = 0, last_text: str | None = None,
                 errors: list[str] | None = None) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.last_text = last_text
        self.errors = list(errors or [])


class UnparsableReply(LLMFailure):
    """The model answered every time, but no reply could be parsed and validated after the re-asks. ``last_text``
    holds the last reply. Unlike other :class:`LLMFailure` s, the endpoint works: the call did not fail."""


class RunStopped(BaseException):  # noqa: N818  (like KeyboardInterrupt: no handler of errors may swallow it)
    """The run is stopping (another task failed fatally, or the user pressed Ctrl-C): a client whose ``stop`` event
    is set raises it instead of sending a new request, so running tasks end at their next call."""


class EndpointUnreachable(LLMFailure):
    """The client stopped calling an endpoint: its last ``failed`` calls all failed at the connection level
    (refused, timed out, HTTP 5xx) after their retries, with no success in between. Every later call raises it
    at once; callers treat it as fatal for the run (batches stop, scorers do not turn it into scores)."""

    def __init__(self, message: str, *, endpoint: str, failed: int, calls: int,
                 errors: list[str] | None = None) -> None:
        super().__init__(message, attempts=0, errors=errors)
        self.endpoint = endpoint
        self.failed = failed
        self.calls = calls
