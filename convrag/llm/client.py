"""The LLM client: cache, retries with backoff and jitter, structured outputs, bounded concurrency, accounting,
and a circuit breaker that stops calling an endpoint that is down."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar, overload

from pydantic import BaseModel

from convrag.llm.backends.base import Backend
from convrag.llm.cache import DiskCache, cache_key
from convrag.llm.prompts import load_prompt
from convrag.llm.report import RunReport
from convrag.llm.structured import (
    Parsed,
    ParseError,
    Schema,
    compact_schema,
    dump_value,
    json_candidates,
    json_schema_for,
    parse_structured,
    validate,
)
from convrag.llm.types import (
    BackendError,
    Completion,
    EndpointUnreachable,
    LLMFailure,
    Message,
    RunStopped,
    SamplingParams,
    UnparsableReply,
    Usage,
)

M = TypeVar("M", bound=BaseModel)

#: backend error kinds that say the endpoint itself is down, not that one request was bad
ENDPOINT_ERRORS = frozenset({"connection", "timeout", "server_error"})


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter for transient errors (429, 5xx, timeouts, lost connections)."""

    max_retries: int = 5
    base_delay: float = 1.0
    max_delay: float = 30.0
    jitter: float = 0.5

    def delay(self, retry: int, rng: random.Random) -> float:
        """Seconds to wait before retry number ``retry`` (0-based): base * 2**retry, +-jitter, capped."""
        d = min(self.max_delay, self.base_delay * (2 ** retry))
        return max(0.0, d * (1.0 + self.jitter * (2 * rng.random() - 1)))


def _with_instruction(messages: list[Message], instruction: str) -> list[Message]:
    out = [dict(m) for m in messages]
    for m in reversed(out):
        if m["role"] == "user":
            m["content"] = f"{m['content']}\n\n{instruction}"
            return out
    return [*out, {"role": "user", "content": instruction}]


def _read(text: str, schema: Schema, fallback: Callable[[str], Any | None] | None) -> tuple[Any, list[str]]:
    """The JSON reading of a structured reply; a reply that holds no JSON at all is read by ``fallback`` when given
    (its candidate validated against ``schema``; repair ``free_text``). A JSON object that does not validate (a
    rating out of range, a reply cut off inside the object) is not read some other way: it is re-asked."""
    try:
        return parse_structured(text, schema)
    except ParseError:
        if fallback is None or _holds_json(text):
            raise
        candidate = fallback(text)
        if candidate is None:
            raise
    return validate(candidate, schema), ["free_text"]


def _holds_json(text: str) -> bool:
    """Whether the reply holds a JSON object (a bracketed ``[2]`` in prose is not one)."""
    try:
        return any(isinstance(value, dict) for value, _ in json_candidates(text))
    except ParseError:
        return False


class LLM:
    """One configured model. Thread-safe; share it across a run.

    ``cache``: a :class:`DiskCache`, a directory, True (default directory) or False (off).
    ``breaker``: the circuit breaker. Once a call has failed at the connection level (refused, timed out, HTTP
    5xx) after its retries, later calls get no backoff retries for such errors until a call succeeds; after
    ``breaker`` such failures in a row every call raises :class:`EndpointUnreachable` at once, so a dead
    endpoint costs one call's retries, not every item's. 0 turns the breaker off.
    """

    def __init__(self, backend: Backend, *, cache: DiskCache | str | Path | bool = True,
                 report: RunReport | None = None, retry: RetryPolicy | None = None,
                 timeout: float | None = None, max_concurrency: int = 4,
                 params: SamplingParams | None = None, structured_attempts: int = 3,
                 constrained: bool = True, spec: str = "",
                 sleep: Callable[[float], None] = time.sleep, seed: int | None = None, breaker: int = 3) -> None:
        self.backend = backend
        if cache is True:
            self.cache: DiskCache | None = DiskCache()
        elif cache is False or cache is None:
            self.cache = None
        elif isinstance(cache, DiskCache):
            self.cache = cache
        else:
            self.cache = DiskCache(cache)
        self.report = report if report is not None else RunReport()
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        self.params = params or SamplingParams()
        self.structured_attempts = structured_attempts
        self.constrained = constrained
        self.spec = spec or f"{backend.name}:{backend.model}"
        #: the most backend requests this client has out at once (counted in ``report``'s ``in_flight``)
        self.max_concurrency = max(1, max_concurrency)
        self._sem = threading.BoundedSemaphore(self.max_concurrency)
        self.report.add_limit(self.max_concurrency)
        self._sleep = sleep
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()
        self.breaker = breaker
        #: set by a scheduler that is stopping the run: no new request is sent (:class:`RunStopped` instead)
        self.stop: threading.Event | None = None
        self._health_lock = threading.Lock()
        self._streak = 0  # connection-level call failures since the last success
        self._settled = 0  # calls that ended (answered or failed after retries)
        self._tripped: EndpointUnreachable | None = None

    def __repr__(self) -> str:
        return f"LLM({self.spec!r})"

    @property
    def name(self) -> str:
        return self.spec

    # -- backend calls ---------------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        """Where requests go: the base URL of an HTTP backend, else the spec."""
        return str(self.backend.identity().get("base_url") or self.spec)

    def _suspect(self) -> bool:
        """Raise :class:`EndpointUnreachable` once the breaker has tripped; True while the endpoint is suspect."""
        with self._health_lock:
            tripped = self._tripped
            if tripped is None:
                return self._streak > 0
        raise EndpointUnreachable(str(tripped), endpoint=tripped.endpoint, failed=tripped.failed,
                                  calls=tripped.calls, errors=tripped.errors)

    def _settle(self, error: BackendError | None, errors: list[str]) -> None:
        """Record how a call ended; trips the breaker after ``breaker`` connection-level failures in a row."""
        with self._health_lock:
            self._settled += 1
            if error is None or error.kind not in ENDPOINT_ERRORS:
                self._streak = 0  # the endpoint answered
                return
            self._streak += 1
            if self.breaker and self._streak >= self.breaker and self._tripped is None:
                self._tripped = EndpointUnreachable(
                    f"{self.spec}: endpoint {self.endpoint} unreachable: {self._streak} of {self._settled} calls "
                    f"failed after their retries ({error}); check that the server is up and the URL is right",
                    endpoint=self.endpoint, failed=self._streak, calls=self._settled, errors=list(errors))

    def _call_backend(self, messages: list[Message], params: SamplingParams,
                      json_schema: dict[str, Any] | None) -> Completion:
        """One request, retried on transient errors; raises :class:`LLMFailure` when out of retries and
        :class:`EndpointUnreachable` when the breaker trips (see the class docstring)."""
        errors: list[str] = []
        retry = immediate = 0
        while True:
            if self.stop is not None and self.stop.is_set():
                raise RunStopped(f"{self.spec}: the run is stopping; no new request sent")
            self._suspect()
            t0 = time.perf_counter()
            try:
                with self._sem, self.report.flight():
                    comp = self.backend.complete(messages, params, json_schema=json_schema, timeout=self.timeout)
            except BackendError as exc:
                self.report.record_call(self.backend.name, self.backend.model, None, time.perf_counter() - t0,
                                        exc.kind)
                errors.append(f"{exc.kind}: {exc}")
                attempts = retry + immediate + 1
                if exc.retryable and exc.immediate and immediate < BackendError.MAX_IMMEDIATE:
                    immediate += 1
                    if exc.kind == "rejected":
                        self.report.count("response_format_fallbacks")
                    continue
                suspect = exc.kind in ENDPOINT_ERRORS and self._suspect()
                if exc.retryable and retry < self.retry.max_retries and not suspect:
                    self.report.count("retries")
                    with self._rng_lock:
                        wait = self.retry.delay(retry, self._rng)
                    retry += 1
                    self._sleep(wait)
                    continue
                self._settle(exc, errors)
                self._suspect()
                if not exc.retryable:
                    raise LLMFailure(f"{self.spec}: {exc}", attempts=attempts, errors=errors) from exc
                raise LLMFailure(f"{self.spec}: gave up after {attempts} attempts: {exc}",
                                 attempts=attempts, errors=errors) from exc
            self._settle(None, errors)
            self.report.record_call(self.backend.name, self.backend.model, comp.usage, time.perf_counter() - t0, None)
            return comp

    def _key(self, kind: str, messages: list[Message], params: SamplingParams, schema: dict[str, Any] | None) -> str:
        return cache_key({"kind": kind, "backend": self.backend.identity(), "messages": messages,
                          "params": params.to_dict(), "schema": schema})

    def _params(self, params: SamplingParams | None, overrides: dict[str, Any]) -> SamplingParams:
        p = params or self.params
        return replace(p, **overrides) if overrides else p

    def _structured_request(self, messages: list[Message], schema: Schema) -> tuple[list[Message], dict[str, Any]]:
        schema_dict = json_schema_for(schema)
        instruction = load_prompt("structured_output").render(
            schema_json=json.dumps(compact_schema(schema_dict), ensure_ascii=False))[0]["content"]
        return _with_instruction(messages, instruction), schema_dict

    # -- public API --------------------------------------------------------------------------------------
    @property
    def free_text(self) -> bool:
        """True when nothing constrains a structured reply right now (a backend without schema support, a client with
        ``constrained=False``, or an OpenAI-compatible server with ``response_format=none`` or that rejected every
        format): prompts that have a format of their own (a closing rating line, a label line) then ask for it and
        are read with their free-text reader; prompts without one ask for JSON and are read with repairs."""
        return not (self.constrained and self.backend.supports_schema and self.backend.enforces_schema)

    def request_messages(self, messages: list[Message], schema: Schema | None = None) -> list[Message]:
        """The conversation :meth:`chat` (``schema`` None) or :meth:`structured` sends for ``messages``: with a
        schema, the schema instruction added. What cost estimates count."""
        return messages if schema is None else self._structured_request(messages, schema)[0]

    def is_cached(self, messages: list[Message], schema: Schema | None = None,
                  params: SamplingParams | None = None) -> bool:
        """Whether :meth:`chat` (``schema`` None) or :meth:`structured` would answer these messages from the cache,
        without calling anything: what cost estimates use to leave out work already paid for."""
        if self.cache is None:
            return False
        p = params or self.params
        if schema is None:
            return self.cache.get(self._key("chat", messages, p, None)) is not None
        convo, schema_dict = self._structured_request(messages, schema)
        return self.cache.get(self._key("structured", convo, p, schema_dict)) is not None

    def chat(self, messages: list[Message], params: SamplingParams | None = None, *, use_cache: bool = True,
             **overrides: Any) -> Completion:
        """Free-text completion. ``overrides`` set single sampling fields (``max_tokens=64``)."""
        p = self._params(params, overrides)
        key = self._key("chat", messages, p, None)
        if use_cache and self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                self.report.count("cache_hits")
                return Completion(text=hit["text"], usage=Usage(**hit["usage"]), model=hit.get("model", ""),
                                  finish_reason=hit.get("finish_reason"), cached=True)
            self.report.count("cache_misses")
        try:
            comp = self._call_backend(messages, p, None)
        except LLMFailure as exc:
            self.report.record_failure(str(exc))
            raise
        if use_cache and self.cache is not None:
            self.cache.put(key, {"text": comp.text, "model": comp.model, "finish_reason": comp.finish_reason,
                                 "usage": {"prompt_tokens": comp.usage.prompt_tokens,
                                           "completion_tokens": comp.usage.completion_tokens}},
                           request={"spec": self.spec, "messages": messages})
        return comp

    @overload
    def structured(self, messages: list[Message], schema: type[M], params: SamplingParams | None = ..., *,
                   attempts: int | None = ..., check: Callable[[Any], str | None] | None = ...,
                   use_cache: bool = ..., **overrides: Any) -> Parsed[M]: ...

    @overload
    def structured(self, messages: list[Message], schema: dict[str, Any], params: SamplingParams | None = ..., *,
                   attempts: int | None = ..., check: Callable[[Any], str | None] | None = ...,
                   use_cache: bool = ..., **overrides: Any) -> Parsed[Any]: ...

    def structured(self, messages: list[Message], schema: Schema, params: SamplingParams | None = None, *,
                   attempts: int | None = None, check: Callable[[Any], str | None] | None = None,
                   use_cache: bool = True, fallback: Callable[[str], Any | None] | None = None,
                   **overrides: Any) -> Parsed[Any]:
        """A reply parsed and validated against ``schema`` (pydantic model class or JSON-schema dict).

        Uses constrained decoding where the backend has it, repairs trivial breakage, and otherwise
        re-asks with the error fed back, up to ``attempts`` replies. ``check(value)`` may return an error
        message for semantic problems; it is fed back the same way. ``fallback(text)``, for prompts whose own
        format is free text, turns a reply that holds no JSON into a candidate value (validated like JSON) or
        None; it is tried when the JSON reading fails (a server that ignored the requested format). Raises
        :class:`UnparsableReply` when no reply could be read, :class:`LLMFailure` when a call failed.
        """
        p = self._params(params, overrides)
        convo, schema_dict = self._structured_request(messages, schema)
        key = self._key("structured", convo, p, schema_dict)
        if use_cache and self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                try:
                    value = validate(hit["value"], schema)
                except ParseError:
                    value = None
                if value is not None and (check is None or check(value) is None):
                    self.report.count("cache_hits")
                    return Parsed(value=value, text=hit["text"], attempts=hit.get("attempts", 1),
                                  repairs=list(hit.get("repairs", [])), cached=True,
                                  usage=Usage(**hit.get("usage", {})))
            self.report.count("cache_misses")
        constrain = schema_dict if (self.constrained and self.backend.supports_schema) else None
        n = attempts or self.structured_attempts
        errors: list[str] = []
        text = None
        used = Usage()
        for attempt in range(1, n + 1):
            try:
                comp = self._call_backend(convo, p, constrain)
            except LLMFailure as exc:
                exc.errors = errors + exc.errors
                self.report.record_failure(str(exc))
                raise
            text = comp.text
            used = Usage(used.prompt_tokens + comp.usage.prompt_tokens,
                         used.completion_tokens + comp.usage.completion_tokens)
            try:
                value, repairs = _read(text, schema, fallback)
                problem = check(value) if check is not None else None
                if problem:
                    raise ParseError(problem)
            except ParseError as exc:
                errors.append(f"attempt {attempt}: {exc}")
                if attempt < n:
                    self.report.count("structured_retries")
                    retry_msg = load_prompt("structured_retry").render(error=str(exc))
                    convo = [*convo, {"role": "assistant", "content": text}, *retry_msg]
                continue
            if repairs:
                self.report.count("repairs")
            if use_cache and self.cache is not None:
                self.cache.put(key, {"text": text, "value": dump_value(value), "attempts": attempt,
                                     "repairs": repairs, "usage": {"prompt_tokens": used.prompt_tokens,
                                                                   "completion_tokens": used.completion_tokens}},
                               request={"spec": self.spec, "messages": messages})
            return Parsed(value=value, text=text, attempts=attempt, repairs=repairs, completion=comp, usage=used)
        msg = f"{self.spec}: no valid structured reply after {n} attempts: {errors[-1] if errors else ''}"
        self.report.record_failure(msg)
        raise UnparsableReply(msg, attempts=n, last_text=text, errors=errors)

    def ask(self, prompt: str, schema: Schema | None = None, *, params: SamplingParams | None = None,
            **fields: Any) -> Any:
        """Render the named prompt with ``fields`` and run it: text if no schema, else the validated value."""
        messages = load_prompt(prompt).render(**fields)
        if schema is None:
            return self.chat(messages, params).text
        return self.structured(messages, schema, params).value

    def close(self) -> None:
        self.backend.close()
