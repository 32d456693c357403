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


def schema_name(schema: Schema) -> str:
    if isinstance(schema, dict):
        return str(schema.get("title", "output"))
    return schema.__name__


_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_SMART = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})


def _balanced_span(text: str) -> tuple[str, bool]:
    """The first JSON object/array in ``text``; the flag is False when it is cut off before closing."""
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        raise ParseError("no JSON object or array found in the reply")
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
                return text[start:i + 1], True
    return text[start:], False


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


def _single_to_double(s: str) -> str:
    return re.sub(r"'((?:[^'\\]|\\.)*)'", lambda m: json.dumps(m.group(1).replace("\\'", "'")), s)


_PY_LITERALS = (("True", "true"), ("False", "false"), ("None", "null"))


def _python_literals(s: str) -> str:
    for a, b in _PY_LITERALS:
        s = re.sub(rf"\b{a}\b", b, s)
    return s


def extract_json(text: str) -> tuple[Any, list[str]]:
    """Parse the JSON value in a model reply; returns it with the names of the repairs applied.

    Repairs are trivial and safe: code fences and chatter around the value, trailing commas,
    Python literals, single quotes, typographic quotes, raw control characters (a line break typed inside a
    string) and a reply cut off before its closing brackets.
    """
    s = text.strip()
    try:
        return json.loads(s), []
    except json.JSONDecodeError:
        pass
    repairs: list[str] = []
    fence = _FENCE.search(s)
    if fence:
        s = fence.group(1).strip()
        repairs.append("code_fence")
    span, closed = _balanced_span(s)
    if span != s:
        repairs.append("surrounding_text")
    s = span
    if not closed:
        s = _close_truncated(s)
        repairs.append("truncated")
    steps = (
        ("smart_quotes", lambda x: x.translate(_SMART)),
        ("trailing_comma", lambda x: _outside_strings(x, lambda p: _TRAILING_COMMA.sub(r"\1", p))),
        ("python_literals", lambda x: _outside_strings(x, _python_literals)),
        ("single_quotes", _single_to_double),
    )
    last_err: Exception | None = None
    for name, fn in (("", lambda x: x), *steps):
        fixed = fn(s)
        if fixed != s:
            s = fixed
            repairs.append(name)
        elif name:
            continue
        try:
            return json.loads(s), repairs
        except json.JSONDecodeError as exc:
            last_err = exc
    try:
        return json.loads(s, strict=False), [*repairs, "control_characters"]
    except json.JSONDecodeError:
        pass
    raise ParseError(f"reply is not valid JSON ({last_err}): {text[:200]!r}")


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
    """Extract, repair and validate; raises :class:`ParseError` with a message fit to send back."""
    obj, repairs = extract_json(text)
    return validate(obj, schema, repairs), repairs


def dump_value(value: Any) -> Any:
    """JSON-ready form of a validated value (for the cache)."""
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value
