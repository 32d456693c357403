"""Prompts as data: YAML files holding Jinja templates with named fields, loaded by name.

A prompt file ``NAME.yaml`` has ``description``, ``fields`` (the required names), ``reply`` (how its reply is
constrained and read, per backend) and either ``system`` / ``user`` templates or a ``messages`` list of
``{role, content}`` templates. Files are found
in the directories of ``$CONVRAG_PROMPTS_PATH`` (``os.pathsep``-separated; these win) and then in the
shipped ``convrag/prompts`` folder.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
import yaml

from convrag.llm.types import LLMError, Message

PACKAGE_PROMPTS = Path(__file__).resolve().parent.parent / "prompts"
_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False,
                          trim_blocks=True, lstrip_blocks=True)


@functools.lru_cache(maxsize=256)
def _compiled(source: str) -> jinja2.Template:
    """The template ``source`` compiled once: compiling took about a third of a judge call's CPU time, which kept
    fewer requests in flight than ``--concurrency`` allows."""
    return _ENV.from_string(source)


class PromptError(LLMError):
    """A prompt file is missing or malformed, or fields do not match its declaration."""


@dataclass
class PromptTemplate:
    """A loaded prompt: render it with its fields to get chat messages."""

    name: str
    templates: list[tuple[str, str]]
    fields: list[str]
    optional: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    source: str = ""
    #: how a reply is constrained and read, per backend (the file's ``reply`` text)
    reply: str = ""

    def render(self, **values: Any) -> list[Message]:
        """Chat messages with the fields filled in. Missing or unknown fields raise :class:`PromptError`."""
        missing = [f for f in self.fields if f not in values]
        unknown = [k for k in values if k not in self.fields and k not in self.optional]
        if missing or unknown:
            raise PromptError(f"prompt {self.name!r} ({self.source}): missing fields {missing}, unknown {unknown}")
        ctx = {**self.optional, **values}
        out: list[Message] = []
        for role, tpl in self.templates:
            try:
                text = _compiled(tpl).render(**ctx).strip()
            except jinja2.TemplateError as exc:
                raise PromptError(f"prompt {self.name!r} ({self.source}): {exc}") from exc
            out.append({"role": role, "content": text})
        return out


def prompt_dirs(extra: list[str | os.PathLike[str]] | None = None) -> list[Path]:
    """Search order: ``extra``, then ``$CONVRAG_PROMPTS_PATH``, then the shipped prompts."""
    dirs = [Path(p) for p in (extra or [])]
    env = os.environ.get("CONVRAG_PROMPTS_PATH")
    if env:
        dirs += [Path(p) for p in env.split(os.pathsep) if p]
    return [*dirs, PACKAGE_PROMPTS]


def _parse(name: str, path: Path) -> PromptTemplate:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise PromptError(f"{path}: cannot read prompt: {exc}") from exc
    if not isinstance(data, dict):
        raise PromptError(f"{path}: a prompt file must be a mapping")
    templates: list[tuple[str, str]] = []
    if "messages" in data:
        for i, m in enumerate(data["messages"]):
            if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant") or "content" not in m:
                raise PromptError(f"{path}: messages[{i}] needs a role (system/user/assistant) and content")
            templates.append((m["role"], str(m["content"])))
    else:
        templates = [(r, str(data[r])) for r in ("system", "user") if data.get(r)]
    if not templates:
        raise PromptError(f"{path}: no system/user templates or messages")
    fields = list(data.get("fields") or [])
    optional = dict(data.get("optional") or {})
    used: set[str] = set()
    for _, tpl in templates:
        try:
            used |= jinja2.meta.find_undeclared_variables(_ENV.parse(tpl))
        except jinja2.TemplateSyntaxError as exc:
            raise PromptError(f"{path}:{exc.lineno}: template syntax error: {exc.message}") from exc
    undeclared = sorted(used - set(fields) - set(optional))
    if undeclared:
        raise PromptError(f"{path}: templates use undeclared fields {undeclared}")
    return PromptTemplate(name=name, templates=templates, fields=fields, optional=optional,
                          description=str(data.get("description", "")), source=str(path),
                          reply=str(data.get("reply", "")))


@functools.lru_cache(maxsize=256)
def _load_cached(name: str, dirs: tuple[str, ...]) -> PromptTemplate:
    for d in dirs:
        for ext in (".yaml", ".yml"):
            p = Path(d) / f"{name}{ext}"
            if p.is_file():
                return _parse(name, p)
    raise PromptError(f"no prompt named {name!r} in {list(dirs)}")


def load_prompt(name: str, dirs: list[str | os.PathLike[str]] | None = None) -> PromptTemplate:
    """Load prompt ``name`` (file ``name.yaml``) from the search path."""
    return _load_cached(name, tuple(str(d) for d in prompt_dirs(dirs)))


def list_prompts(dirs: list[str | os.PathLike[str]] | None = None) -> list[str]:
    """Names of every prompt on the search path."""
    names: set[str] = set()
    for d in prompt_dirs(dirs):
        if d.is_dir():
            names |= {p.stem for p in d.glob("*.y*ml")}
    return sorted(names)
