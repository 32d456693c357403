"""OpenAI-compatible HTTP backend (OpenAI, vLLM, llama.cpp server, DeepSeek, OpenRouter, ...)."""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import threading
from typing import Any

from convrag.llm.backends.base import Backend
from convrag.llm.types import BackendError, Completion, Message, SamplingParams, Usage

#: ways of asking a server for schema-constrained JSON, tried in this order until one is accepted
RESPONSE_FORMAT_STYLES = ("json_schema", "json_object_schema", "json_object", "none")
#: keywords outside the subset that OpenAI's strict structured outputs accept; replies are validated against the
#: full schema afterwards, so dropping them loosens decoding, never what is accepted
_NOT_STRICT = ("default", "minLength", "maxLength", "minItems", "maxItems", "minimum", "maximum",
               "exclusiveMinimum", "exclusiveMaximum")
#: the widest integer range written as an enum in a strict schema (a 1-5 rating stays bounded while decoding)
STRICT_MAX_ENUM = 32

log = logging.getLogger("convrag.llm")
#: words of a server's error that say the response_format (or the schema in it) was refused
_FORMAT_WORDS = re.compile(r"response.?format|json.?schema|json.?object|schema|grammar|guided|structured", re.I)


def strict_schema(schema: Any) -> Any:
    """``schema`` in the form OpenAI's strict ``json_schema`` mode requires (a copy): every object lists all its
    properties as required and sets ``additionalProperties: false``; length and numeric bounds are dropped (not in
    the strict subset), except that an integer range of at most :data:`STRICT_MAX_ENUM` values becomes an ``enum``;
    ``default`` values are dropped. vLLM and SGLang read the same form."""
    if isinstance(schema, list):
        return [strict_schema(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _named(v) if k in ("properties", "$defs", "definitions") else strict_schema(v)
           if k not in ("enum", "const", "required") else copy.deepcopy(v)
           for k, v in schema.items() if k not in _NOT_STRICT}
    low, high = schema.get("minimum"), schema.get("maximum")
    if (schema.get("type") == "integer" and isinstance(low, int) and isinstance(high, int)
            and 0 <= high - low < STRICT_MAX_ENUM and "enum" not in schema):
        out["enum"] = list(range(low, high + 1))
    if isinstance(out.get("properties"), dict):
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
    return out


def _named(schemas: Any) -> Any:
    """A ``properties`` / ``$defs`` map: its names are kept whatever they are (a field may be called ``default``)."""
    return {k: strict_schema(v) for k, v in schemas.items()} if isinstance(schemas, dict) else strict_schema(schemas)


def _response_format(style: str, schema: dict[str, Any]) -> dict[str, Any] | None:
    if style == "json_schema":  # OpenAI (strict), vLLM, SGLang, OpenRouter
        return {"type": "json_schema", "json_schema": {"name": "output", "schema": strict_schema(schema),
                                                       "strict": True}}
    if style == "json_object_schema":  # llama-cpp-python server
        return {"type": "json_object", "schema": schema}
    if style == "json_object":  # DeepSeek and others without schema support
        return {"type": "json_object"}
    return None


class OpenAIBackend(Backend):
    """Chat completions over the ``openai`` client. The client's own retries are off; the caller retries.

    ``base_url``, ``api_key`` default to ``CONVRAG_LLM_BASE_URL`` / ``OPENAI_BASE_URL`` and
    ``CONVRAG_LLM_API_KEY`` / ``OPENAI_API_KEY``. ``response_format`` picks one style from
    :data:`RESPONSE_FORMAT_STYLES` or ``"auto"`` (fall back along the list when a server rejects one).
    """

    name = "openai"
    supports_schema = True

    def __init__(self, model: str | None = None, base_url: str | None = None, api_key: str | None = None, *,
                 timeout: float = 60.0, response_format: str = "auto",
                 extra_body: dict[str, Any] | None = None) -> None:
        import openai

        self.model = model or os.environ.get("CONVRAG_LLM_MODEL", "")
        if not self.model:
            raise BackendError("openai backend needs a model name (openai:MODEL[@URL] or CONVRAG_LLM_MODEL)")
        self.base_url = base_url or os.environ.get("CONVRAG_LLM_BASE_URL") or os.environ.get("OPENAI_BASE_URL")
        key = api_key or os.environ.get("CONVRAG_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY")
        if not key and self.base_url:
            key = "EMPTY"  # local servers (vLLM, llama.cpp) accept any key
        if not key:
            raise BackendError("openai backend needs an API key (CONVRAG_LLM_API_KEY or OPENAI_API_KEY)")
        if response_format != "auto" and response_format not in RESPONSE_FORMAT_STYLES:
            raise BackendError(f"unknown response_format {response_format!r}; use auto or {RESPONSE_FORMAT_STYLES}")
        self.timeout = timeout
        self.extra_body = dict(extra_body or {})
        self._style = None if response_format == "auto" else response_format
        self._auto = 0
        self._lock = threading.Lock()
        self._openai = openai
        self.client = openai.OpenAI(base_url=self.base_url, api_key=key, max_retries=0, timeout=timeout)

    def identity(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model, "base_url": self.base_url or "https://api.openai.com/v1"}

    @property
    def style(self) -> str:
        """The ``response_format`` style in use: the one given, else the first in :data:`RESPONSE_FORMAT_STYLES` the
        server has not rejected so far."""
        with self._lock:
            return self._style or RESPONSE_FORMAT_STYLES[self._auto]

    @property
    def enforces_schema(self) -> bool:
        """Whether the server is asked to constrain structured replies (a JSON schema or JSON mode); False with
        ``response_format=none`` or once every style was rejected: prompts then ask for their own reply format."""
        return self.style != "none"

    def complete(self, messages: list[Message], params: SamplingParams, *,
                 json_schema: dict[str, Any] | None = None, timeout: float | None = None) -> Completion:
        kwargs: dict[str, Any] = {
            "model": self.model, "messages": messages, "temperature": params.temperature,
            "max_tokens": params.max_tokens, "top_p": params.top_p, "timeout": timeout or self.timeout,
        }
        if params.seed is not None:
            kwargs["seed"] = params.seed
        if params.stop:
            kwargs["stop"] = list(params.stop)
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        if json_schema is None:
            return self._call(kwargs)
        style = self.style
        rf = _response_format(style, json_schema)
        try:
            out = self._call(dict(kwargs, response_format=rf) if rf else kwargs)
        except BackendError as exc:
            if exc.kind == "rejected" and self._style is None:
                with self._lock:  # the server refused this style: this and every later call use the next one
                    moved = RESPONSE_FORMAT_STYLES[self._auto] == style
                    if moved:
                        self._auto += 1
                if moved:  # said once per style, not per call
                    log.warning("%s at %s rejected response_format %s (%s); using %s from now on", self.model,
                                self.base_url or "api.openai.com", style, str(exc).split(":", 1)[0],
                                RESPONSE_FORMAT_STYLES[self._auto])
                raise BackendError(str(exc), retryable=True, kind="rejected", immediate=True) from exc
            raise
        with self._lock:  # settle on the style that worked, unless another call has already given it up
            if self._style is None and RESPONSE_FORMAT_STYLES[self._auto] == style:
                self._style = style
        return out

    def _call(self, kwargs: dict[str, Any]) -> Completion:
        o = self._openai
        try:
            resp = self.client.chat.completions.create(**kwargs)
        except o.APITimeoutError as exc:
            raise BackendError(f"timeout: {exc}", retryable=True, kind="timeout") from exc
        except o.APIConnectionError as exc:
            raise BackendError(f"connection error: {exc}", retryable=True, kind="connection") from exc
        except o.APIStatusError as exc:
            code = exc.status_code
            if kwargs.get("response_format") is not None and (code in (400, 422) or code >= 500) \
                    and _FORMAT_WORDS.search(str(exc)):
                # the server refuses the format (vLLM, OpenAI: 400; llama-cpp-python's server: 500 with a validation
                # error); a 400 about something else (a prompt over the context length) is not a format rejection
                raise BackendError(f"request rejected ({code}): {exc}", kind="rejected") from exc
            if code == 429:
                raise BackendError(f"rate limited (429): {exc}", retryable=True, kind="rate_limit") from exc
            if code >= 500 or code in (408, 409):
                raise BackendError(f"server error ({code}): {exc}", retryable=True, kind="server_error") from exc
            raise BackendError(f"request failed ({code}): {exc}", kind="client_error") from exc
        except (json.JSONDecodeError, ValueError) as exc:
            raise BackendError(f"unreadable response body: {exc}", retryable=True, kind="bad_response") from exc
        choices = getattr(resp, "choices", None)
        if not choices or choices[0].message is None or choices[0].message.content is None:
            raise BackendError(f"response without message content: {str(resp)[:200]}", retryable=True,
                               kind="bad_response")
        u = getattr(resp, "usage", None)
        usage = Usage(getattr(u, "prompt_tokens", 0) or 0, getattr(u, "completion_tokens", 0) or 0)
        return Completion(text=choices[0].message.content, usage=usage, model=getattr(resp, "model", "") or self.model,
                          finish_reason=choices[0].finish_reason)

    def close(self) -> None:
        self.client.close()
