"""JSON (Lines) I/O shared by builders and scorers: every bad line is a DataError naming file and line;
``json_safe`` makes results strict JSON."""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from convrag.errors import DataError


def json_safe(value: Any) -> Any:
    """JSON-safe copy: NaN and infinities become None, mapping keys strings, tuples lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def iter_jsonl(lines: Iterable[str], where: str) -> Iterator[tuple[int, dict]]:
    """(1-based line number, object) of every non-empty line of ``lines`` (read from ``where``).

    Raises DataError for a line that is not valid JSON or not a JSON object.
    """
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"invalid JSON: {err.msg} (column {err.colno})", where, number) from err
        if not isinstance(obj, dict):
            raise DataError("expected a JSON object", where, number)
        yield number, obj


def read_jsonl(path: str) -> tuple[tuple[int, dict], ...]:
    """All (line number, object) pairs of a JSONL file, parsed once per file version (cached by mtime).

    The objects are shared between callers: treat them as read-only.
    """
    return _read_jsonl(path, os.path.getmtime(path))


@functools.lru_cache(maxsize=16)
def _read_jsonl(path: str, mtime: float) -> tuple[tuple[int, dict], ...]:
    with open(path, encoding="utf-8") as handle:
        return tuple(iter_jsonl(handle, path))
