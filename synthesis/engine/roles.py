"""Agent roles of a synthesis stage: the LLM each role calls (cached, accounted, stoppable), what its spec records,
its cost estimate, the reason a failed call is counted under, and the text cut the prompts use."""

from __future__ import annotations

import os

from convrag.core.errors import ConvragError
from convrag.llm import LLM, DiskCache, LLMError, UnparsableReply, get_llm, parse_spec
from convrag.llm.report import FREE_BACKENDS
from convrag.llm.types import EndpointUnreachable
from convrag.synthesis.engine.pipeline import Estimate, StageContext

CACHE_DIR = "llm-cache"


#: rough characters per token, for estimates made from character counts (``role_estimate``)
CHARS_PER_TOKEN = 4


def role_llm(spec: str | None, ctx: StageContext, concurrency: int) -> LLM:
    """The LLM of one agent role: its spec (``$CONVRAG_LLM`` / ``default`` when None), cached in OUT/llm-cache,
    accounted in the stage's report. The stage's scheduler runs ``concurrency`` tasks over all its roles, so that is
    the bound the report states for requests in flight (not the sum over roles)."""
    ctx.llm_report.bound(concurrency)
    llm = get_llm(spec, cache=DiskCache(ctx.out / CACHE_DIR), report=ctx.llm_report, max_concurrency=concurrency)
    llm.stop = ctx.stop  # a failing or interrupted stage stops its running conversations at their next call
    return llm


def check_spec(option: str, spec: str | None) -> None:
    """Refuse an LLM spec that does not parse, naming the option that gave it."""
    if spec is not None:
        try:
            parse_spec(spec)
        except LLMError as err:
            raise ConvragError(f"{option}: {err}") from None


def spec_label(spec: str | None) -> str:
    """The spec as given, recorded in params.json's parameters (options after ``;`` left out: they may hold keys);
    what it resolves to (``$CONVRAG_LLM``, the real model, the placeholder flag) is in its ``models``
    (``Stage.models``)."""
    return (spec or "$CONVRAG_LLM or default").split(";")[0]


def token_estimate(spec: str | None, calls: int, prompt_tokens: int, completion_tokens: int) -> Estimate:
    """An estimate for one role (``spec``: ``$CONVRAG_LLM`` / ``default`` when None) from token counts."""
    parsed = parse_spec(spec or os.environ.get("CONVRAG_LLM") or "default")
    return Estimate(llm_calls=calls, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                    model=parsed.target or parsed.kind,
                    free=parsed.kind in FREE_BACKENDS or parsed.kind in ("default", "gguf", "transformers"))


def role_estimate(spec: str | None, calls: int, prompt_chars: int, completion_chars: int) -> Estimate:
    """An estimate for one role from character counts (tokens ~ characters / 4)."""
    return token_estimate(spec, calls, prompt_chars // CHARS_PER_TOKEN, completion_chars // CHARS_PER_TOKEN)


def failure_reason(role: str, error: BaseException) -> str:
    """The counted reason of a failed agent call."""
    if isinstance(error, UnparsableReply):
        return f"{role}: reply unparsable after re-asks"
    if isinstance(error, AgentError):
        return f"{role}: unusable reply ({error.reason})"
    if isinstance(error, EndpointUnreachable):
        return f"{role}: endpoint unreachable"
    errors = getattr(error, "errors", None) or [str(error)]
    if errors and all(e.startswith(("connection:", "timeout:")) for e in errors):
        return f"{role}: call failed after retries (endpoint unreachable: {errors[-1].split(':', 1)[0]})"
    return f"{role}: call failed after retries"


class AgentError(LLMError):
    """An agent got a reply it cannot use (blank, or a failure marker) after the LLM layer's re-asks; ``reason``
    names the kind in a few words (the pipeline counts drops by it)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def cut(text: str, limit: int | None, *, at_word: bool = True) -> str:
    """``text`` if ``limit`` is None or it has at most ``limit`` characters, else its first ``limit`` characters
    (backed off to the last whitespace when ``at_word`` and the cut falls inside a word that is not the first)
    followed by ``...``."""
    if limit is None or len(text) <= limit:
        return text
    head = text[:limit]
    if at_word and not text[limit].isspace():
        space = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
        if space > 0:
            head = head[:space]
    return head.rstrip() + "..."
