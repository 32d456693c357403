"""Structured outputs: JSON schema of a pydantic model, JSON extraction, trivial repairs, validation."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from convrag.llm.types import Completion, Usage

T = TypeVar("T")
Schema = type[BaseModel] | dict[str, Any]


class ParseError(ValueError):
    """The text holds no usable JSON value, or it does not match the schema."""


@dataclass
class Parsed(Generic[T]):
    """A validated structured answer with the raw text and how it was obtained."""

    value: T
    text: str
    attempts: int = 1
    repairs: list[str] = field(default_factory=list)
    completion: Completion | None = None
    cached: bool = False
    #: tokens of every attempt together (kept in the cache, so a cached answer reports what it cost)
    usage: Usage = field(default_factory=Usage)


def json_schema_for(schema: Schema) -> dict[str, Any]:
    """The JSON schema of a pydantic model class (or a dict schema, returned as is)."""
    if isinstance(schema, dict):
        return schema
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return schema.model_json_schema()
    raise TypeError(f"schema must be a pydantic model class or a JSON schema dict, not {schema!r}")


def compact_schema(schema: Any, *, _in_properties: bool = False) -> Any:
    """The schema without pydantic's generated ``title`` strings (shorter prompts; same constraints)."""
    if isinstance(schema, dict):
        out = {}
        for k, v in schema.items():
            if not _in_properties and k == "title" and isinstance(v, str):
                continue
            out[k] = compact_schema(v, _in_properties=(k in ("properties", "$defs", "definitions")
                                                       and not _in_properties))
        return out
    if isinstance(schema, list):
        return [compact_schema(v) for v in schema]
    return schema


_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)
#: a reasoning block some models write before their answer (DeepSeek-R1, Qwen3); a draft inside it is not the answer
_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_LINE_COMMENT = re.compile(r"//[^\n]*")
_SMART = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})


def _spans(text: str) -> list[tuple[str, bool]]:
    """The top-level JSON objects / arrays in ``text``, in order; the flag is False for one cut off before closing
    (only the last can be)."""
    out: list[tuple[str, bool]] = []
    pos = 0
    while True:
        start = min((i for i in (text.find("{", pos), text.find("[", pos)) if i >= 0), default=-1)
        if start < 0:
            return out
        end = _span_end(text, start)
        if end < 0:
            out.append((text[start:], False))
            return out
        out.append((text[start:end + 1], True))
        pos = end + 1


def _span_end(text: str, start: int) -> int:
    """The index closing the bracket opened at ``start``; -1 when the text ends first."""
    stack: list[str] = []
    in_str = esc = False
    quote = ""
    for i in range(start, len(text)):
        c = text[i]
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == quote:
                in_str = False
        elif c in "\"'":
            in_str, quote = True, c
        elif c in "{[":
            stack.append("}" if c == "{" else "]")
        elif c in "}]":
            if stack and stack[-1] == c:
                stack.pop()
            if not stack:
                return i
    return -1


def _close_truncated(s: str) -> str:
    """Close an unterminated string and any open brackets of a cut-off JSON text."""
    stack: list[str] = []
    in_str = esc = False
    for c in s:
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "{[":
            stack.append("}" if c == "{" else "]")
        elif c in "}]" and stack:
            stack.pop()
    out = s + ('"' if in_str else "")
    out = re.sub(r"[,:]\s*$", "", out.rstrip())
    return out + "".join(reversed(stack))


def _outside_strings(s: str, fn: Any) -> str:
    """Apply ``fn`` to the parts of ``s`` that are not inside double-quoted strings."""
    parts = re.split(r'("(?:[^"\\]|\\.)*")', s)
    return "".join(p if i % 2 else fn(p) for i, p in enumerate(parts))


_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"|\'((?:[^\'\\]|\\.)*)\'')


def _single_to_double(s: str) -> str:
    """Single-quoted strings as JSON strings; double-quoted ones (which may hold an apostrophe) left alone."""
    return _QUOTED.sub(lambda m: m.group(0) if m.group(1) is None else json.dumps(m.group(1).replace("\\'", "'")), s)


_PY_LITERALS = (("True", "true"), ("False", "false"), ("None", "null"))


def _python_literals(s: str) -> str:
    for a, b in _PY_LITERALS:
        s = re.sub(rf"\b{a}\b", b, s)
    return s


_STEPS = (
    ("smart_quotes", lambda x: x.translate(_SMART)),
    ("comments", lambda x: _outside_strings(x, lambda p: _LINE_COMMENT.sub("", p))),
    ("trailing_comma", lambda x: _outside_strings(x, lambda p: _TRAILING_COMMA.sub(r"\1", p))),
    ("python_literals", lambda x: _outside_strings(x, _python_literals)),
    ("single_quotes", _single_to_double),
)


def _loads(s: str, repairs: list[str]) -> Any:
    """``json.loads`` of one JSON text, applying the repair steps in turn until it parses."""
    last_err: Exception | None = None
    for name, fn in (("", lambda x: x), *_STEPS):
        fixed = fn(s)
        if fixed != s:
            s = fixed
            repairs.append(name)
        elif name:
            continue
        try:
            return json.loads(s)
        except json.JSONDecodeError as exc:
            last_err = exc
    try:
        value = json.loads(s, strict=False)
    except json.JSONDecodeError:
        raise ParseError(f"reply is not valid JSON ({last_err})") from None
    repairs.append("control_characters")
    return value


def json_candidates(text: str) -> list[tuple[Any, list[str]]]:
    """Every JSON value a model reply holds, in order, each with the names of the repairs applied; raises
    :class:`ParseError` when there is none.

    Repairs are trivial and safe: a ``<think>`` block dropped (a draft there is not the answer), code fences and
    chatter around the value, ``//`` comments, trailing commas, Python literals, single quotes, typographic quotes,
    raw control characters (a line break typed inside a string) and a reply cut off before its closing brackets.
    A value nested too deep for Python's JSON reader is a :class:`ParseError`.
    """
    try:
        return _candidates(text)
    except RecursionError:
        raise ParseError("reply is nested too deep to read as JSON") from None


def _candidates(text: str) -> list[tuple[Any, list[str]]]:
    s = text.strip()
    try:
        return [(json.loads(s), [])]
    except json.JSONDecodeError:
        pass
    head: list[str] = []
    if _THINK.search(s):
        s = _THINK.sub("", s).strip()
        head.append("think")
    fences = [f.strip() for f in _FENCE.findall(s)]
    if fences:
        head.append("code_fence")
    out: list[tuple[Any, list[str]]] = []
    error: ParseError | None = None
    for block in fences or [s]:
        spans = _spans(block)
        for span, closed in spans:
            repairs = list(head)
            if span != block:
                repairs.append("surrounding_text")
            if not closed:
                span = _close_truncated(span)
                repairs.append("truncated")
            try:
                out.append((_loads(span, repairs), repairs))
            except ParseError as exc:
                error = exc
    if out:
        return out
    if error is not None:
        raise ParseError(f"{error}: {text[:200]!r}")
    raise ParseError(f"no JSON object or array found in the reply: {text[:200]!r}")


def extract_json(text: str) -> tuple[Any, list[str]]:
    """The JSON value of a model reply, with the names of the repairs applied (see :func:`json_candidates`). Where
    the reply holds several, the last object (a draft or the prompt's example may come first, and a bracketed
    ``[3]`` in the chatter after an object is not the answer); with no object, the last value."""
    candidates = json_candidates(text)
    objects = [c for c in candidates if isinstance(c[0], dict)]
    return (objects or candidates)[-1]


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "integer": (int,),
    "number": (int, float), "boolean": (bool,), "null": (type(None),),
}


def _check_dict_schema(value: Any, schema: dict[str, Any], path: str = "$") -> None:
    """A small JSON-schema check (type, required, properties, items, enum) for dict schemas."""
    types = schema.get("type")
    if types is not None:
        names = types if isinstance(types, list) else [types]
        ok = any(isinstance(value, _JSON_TYPES.get(t, object)) and not (
            t in ("integer", "number") and isinstance(value, bool)) for t in names)
        if not ok:
            raise ParseError(f"{path}: expected {types}, got {type(value).__name__}")
    if "enum" in schema and value not in schema["enum"]:
        raise ParseError(f"{path}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                raise ParseError(f"{path}: missing required field {key!r}")
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                _check_dict_schema(value[key], sub, f"{path}.{key}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _check_dict_schema(item, schema["items"], f"{path}[{i}]")


def _validate_once(obj: Any, schema: Schema) -> Any:
    if isinstance(schema, dict):
        _check_dict_schema(obj, schema)
        return obj
    try:
        return schema.model_validate(obj)
    except ValidationError as exc:
        msgs = "; ".join(f"{'.'.join(map(str, e['loc'])) or '$'}: {e['msg']}" for e in exc.errors())
        raise ParseError(f"reply does not match the schema: {msgs}") from exc


def validate(obj: Any, schema: Schema, repairs: list[str] | None = None) -> Any:
    """Validate a parsed value; unwraps a single-key wrapper object (``{"answer": {...}}``) if that fits."""
    try:
        return _validate_once(obj, schema)
    except ParseError:
        if isinstance(obj, dict) and len(obj) == 1:
            inner = next(iter(obj.values()))
            if isinstance(inner, dict):
                try:
                    value = _validate_once(inner, schema)
                except ParseError:
                    pass
                else:
                    if repairs is not None:
                        repairs.append("unwrapped")
                    return value
        raise


def parse_structured(text: str, schema: Schema) -> tuple[Any, list[str]]:
    """Extract, repair and validate; raises :class:`ParseError` with a message fit to send back. Where the reply
    holds several JSON values, the last one that validates (an example copied from the prompt may come first)."""
    candidates = json_candidates(text)
    error: ParseError | None = None
    for obj, repairs in reversed(candidates):
        try:
            value = validate(obj, schema, repairs)
        except ParseError as exc:
            error = error or exc
            continue
        if len(candidates) > 1:
            repairs.append("several_values")
        return value, repairs
    assert error is not None
    raise error


def dump_value(value: Any) -> Any:
    """JSON-ready form of a validated value (for the cache)."""
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value
