"""Backend spec strings and :func:`get_llm`, the one way the CLI and API pick a model.

Spec strings (options may follow after ``;`` as ``key=value``)::

    default                                  embedded SmolLM2-135M-Instruct (llama.cpp, offline)
    openai:MODEL                             OpenAI-compatible API; URL/key from CONVRAG_LLM_BASE_URL,
                                             OPENAI_BASE_URL, CONVRAG_LLM_API_KEY, OPENAI_API_KEY
    openai:MODEL@http://host:8000/v1         ... at that base URL (vLLM, llama.cpp server, OpenRouter, ...)
    hf:PATH_OR_HUB_ID                        local transformers causal LM (a .gguf path works too)
    llamacpp:PATH.gguf                       llama.cpp on a GGUF file
    fake                                     echo backend for dry runs and tests

e.g. ``openai:deepseek-chat@https://api.deepseek.com;response_format=json_object;timeout=120``; client options: see
:func:`get_llm`. ``default`` is a placeholder, far too weak to judge answers or write data: its output only shows that
the plumbing works (:func:`is_placeholder`; show :data:`PLACEHOLDER_WARNING` and :data:`REAL_MODEL_HINT` beside it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from convrag.llm.backends.base import Backend
from convrag.llm.client import LLM, RetryPolicy
from convrag.llm.types import LLMError

SPEC_ENV = "CONVRAG_LLM"
_LLM_OPTIONS = frozenset({"cache", "report", "retry", "max_concurrency", "params", "structured_attempts",
                          "constrained", "sleep", "seed", "breaker"})
PLACEHOLDER_MODEL = "SmolLM2-135M"
PLACEHOLDER_WARNING = (f"these figures come from the embedded {PLACEHOLDER_MODEL} placeholder, too weak to judge: "
                       "they only show that the plumbing works, they are not measurements")
REAL_MODEL_HINT = ("point it at a real model, e.g. openai:MODEL@http://HOST:PORT/v1 (vLLM, llama.cpp server or any "
                   "OpenAI-compatible server), openai:gpt-4o-mini (with OPENAI_API_KEY) or hf:/path/to/model")


@dataclass
class BackendSpec:
    """A parsed spec: backend kind, target (model name or path), base URL and options."""

    kind: str
    target: str = ""
    base_url: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


def _value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_spec(spec: str | dict[str, Any]) -> BackendSpec:
    """Parse a spec string (or a config mapping with ``backend``, ``model``/``path``, ``base_url``, options)."""
    if isinstance(spec, dict):
        cfg = dict(spec)
        kind = str(cfg.pop("backend", cfg.pop("kind", "default")))
        target = str(cfg.pop("model", cfg.pop("path", "")) or "")
        return BackendSpec(kind, target, cfg.pop("base_url", None), cfg)
    text = spec.strip()
    head, *opts = text.split(";")
    options: dict[str, Any] = {}
    for o in opts:
        if not o.strip():
            continue
        if "=" not in o:
            raise LLMError(f"bad option {o!r} in LLM spec {spec!r}: use key=value")
        k, v = o.split("=", 1)
        options[k.strip()] = _value(v.strip())
    kind, _, target = head.partition(":")
    kind = kind.strip().lower()
    base_url = None
    if kind == "openai":
        for marker in ("@http://", "@https://"):
            if marker in target:
                target, base_url = target.split(marker, 1)
                base_url = marker[1:] + base_url
                break
        if not target:
            raise LLMError(f"LLM spec {spec!r}: give a model, e.g. openai:gpt-4o-mini or openai:MODEL@URL")
    elif kind in ("hf", "transformers", "llamacpp", "gguf"):
        if not target:
            raise LLMError(f"LLM spec {spec!r}: give a path, e.g. {kind}:/models/my-model")
    elif kind not in ("default", "fake"):
        raise LLMError(f"unknown LLM backend {kind!r} in spec {spec!r}; use default, openai:, hf:, llamacpp: or fake")
    return BackendSpec(kind, target, base_url, options)


def build_backend(spec: BackendSpec, **options: Any) -> Backend:
    """Instantiate the backend of a parsed spec; ``options`` go to its constructor."""
    opts = {**spec.options, **options}
    if spec.kind == "openai":
        from convrag.llm.backends.openai_http import OpenAIBackend

        return OpenAIBackend(spec.target, opts.pop("base_url", spec.base_url), **opts)
    if spec.kind == "default":
        from convrag.llm.backends.llamacpp import default_backend

        opts.pop("timeout", None)
        return default_backend(**opts)
    if spec.kind in ("llamacpp", "gguf"):
        from convrag.llm.backends.llamacpp import LlamaCppBackend

        opts.pop("timeout", None)
        return LlamaCppBackend(spec.target or None, **opts)
    if spec.kind in ("hf", "transformers"):
        from convrag.llm.backends.transformers_local import TransformersBackend

        opts.pop("timeout", None)
        return TransformersBackend(spec.target, **opts)
    from convrag.llm.backends.fake import FakeBackend

    opts.pop("timeout", None)
    return FakeBackend(**opts)


def is_placeholder(spec: str | dict[str, Any] | LLM | None = None) -> bool:
    """Whether ``spec`` (a spec string or mapping, an :class:`LLM`, or None for ``$CONVRAG_LLM`` / ``default``)
    is the embedded SmolLM2-135M placeholder: ``default``, or a backend whose model or file is SmolLM2-135M."""
    key = PLACEHOLDER_MODEL.lower()
    if isinstance(spec, LLM):
        backend = spec.backend
        if backend.name != "fake" and key in f"{backend.model} {getattr(backend, 'path', '')}".lower():
            return True
        spec = spec.spec
    elif spec is None:
        spec = os.environ.get(SPEC_ENV) or "default"
    try:
        parsed = parse_spec(spec)
    except LLMError:
        return False
    return parsed.kind == "default" or (parsed.kind != "fake" and key in parsed.target.lower())


def _client_options(parsed: BackendSpec, options: dict[str, Any]) -> dict[str, Any]:
    """Options of the :class:`LLM` client taken out of the spec's and the caller's options."""
    llm_opts = {k: options.pop(k) for k in list(options) if k in _LLM_OPTIONS}
    for k in list(parsed.options):
        if k in _LLM_OPTIONS:
            llm_opts[k] = parsed.options.pop(k)
    retries = options.pop("max_retries", parsed.options.pop("max_retries", None))
    if retries is not None:
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise LLMError(f"max_retries must be a whole number >= 0, got {retries!r}")
        llm_opts.setdefault("retry", RetryPolicy(max_retries=retries))
    breaker = llm_opts.get("breaker")
    if breaker is not None and (isinstance(breaker, bool) or not isinstance(breaker, int) or breaker < 0):
        raise LLMError(f"breaker must be a whole number >= 0, got {breaker!r}")
    return llm_opts


def get_llm(spec: str | dict[str, Any] | None = None, **options: Any) -> LLM:
    """The LLM for ``spec`` (default: ``$CONVRAG_LLM``, else ``"default"``).

    Client options (in ``options`` or after ``;`` in a spec string): ``cache`` (dir, DiskCache or False), ``report``
    (a shared RunReport), ``retry`` (or ``max_retries``: backoff retries of a transient error, default 5),
    ``breaker`` (connection-level failures in a row that stop the client, default 3; 0 = off),
    ``max_concurrency``, ``params``, ``structured_attempts``, ``constrained``, ``timeout`` (seconds per request);
    the rest go to the backend (``api_key``, ``base_url``, ``n_ctx``, ``response_format``, ...).
    """
    if spec is None:
        spec = os.environ.get(SPEC_ENV) or "default"
    parsed = parse_spec(spec)
    llm_opts = _client_options(parsed, options)
    timeout = options.get("timeout", parsed.options.get("timeout"))
    backend = build_backend(parsed, **options)
    label = spec if isinstance(spec, str) else f"{parsed.kind}:{parsed.target}"
    return LLM(backend, timeout=timeout, spec=label.split(";")[0], **llm_opts)
