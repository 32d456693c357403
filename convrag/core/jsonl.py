"""Reading JSON, JSON Lines and text files strictly, shared by builders and scorers; ``json_safe`` for output.

Every problem is a DataError naming the file and, where there is one, the line: a missing file or a folder
where a file is expected, non-UTF-8 bytes (the line of the first bad byte), a truncated or corrupt gzip file
(gzip is recognised by its magic bytes, whatever the file name), invalid JSON, a line or record that is not
a JSON object, a field of the wrong type. In a JSON document holding an array of records
(``read_json_records``) each record comes with the line where it starts, so errors point at the record, not
at its ordinal.
"""

from __future__ import annotations

import functools
import gzip
import json
import math
import os
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any

from convrag.core.errors import DataError

GZIP_MAGIC = b"\x1f\x8b"
_GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)
_WS = re.compile(r"[ \t\n\r]*")
_TYPE_NAMES = {str: "string", int: "int", float: "number", bool: "bool", list: "list", dict: "object"}
#: ``typed_field(..., default=REQUIRED)``: the field must be present and not null
REQUIRED: Any = object()


def json_safe(value: Any) -> Any:
    """JSON-safe copy: NaN and infinities become None, mapping keys strings, tuples lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


# ---------------------------------------------------------------- bytes and text


def open_binary(path: str) -> IO[bytes]:
    """``path`` opened for reading bytes (gzip files decompressed); a missing file, a folder or an unreadable
    file is a DataError naming it."""
    if os.path.isdir(path):
        raise DataError("is a folder, expected a file", path)
    try:
        handle = open(path, "rb")  # noqa: SIM115 (the caller closes it)
        if handle.read(2) == GZIP_MAGIC:
            handle.close()
            return gzip.open(path, "rb")
        handle.seek(0)
        return handle
    except FileNotFoundError:
        raise DataError("file does not exist", path) from None
    except OSError as err:
        raise DataError(f"cannot read the file ({err.strerror or err})", path) from None


def _mtime(path: str) -> float:
    """Modification time of a file that must exist (else the DataError of ``open_binary``)."""
    if not os.path.isfile(path):
        open_binary(path).close()
    return os.path.getmtime(path)


def _gzip_error(err: Exception, path: str) -> DataError:
    return DataError(f"truncated or corrupt gzip file ({type(err).__name__}: {err})", path)


def read_bytes(path: str) -> bytes:
    """The whole content of ``path`` (decompressed when gzip); errors as ``open_binary``."""
    with open_binary(path) as handle:
        try:
            return handle.read()
        except _GZIP_ERRORS as err:
            raise _gzip_error(err, path) from err


def decode_utf8(data: bytes, where: str) -> str:
    """``data`` decoded as UTF-8; a bad byte is a DataError naming ``where`` and the byte's line."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        bad = data[err.start : err.start + 1].hex()
        raise DataError(f"not UTF-8: byte 0x{bad} at column {column} ({err.reason})", where, line) from None


def read_text(path: str) -> str:
    """The whole file as UTF-8 text (gzip decompressed); every problem a DataError naming the file."""
    return decode_utf8(read_bytes(path), path)


def decoded_lines(raw: Iterable[bytes], where: str) -> Iterator[str]:
    """Lines of ``raw`` (byte lines) decoded as UTF-8; a bad byte is a DataError naming ``where`` and the line."""
    for number, line in enumerate(raw, start=1):
        try:
            yield line.decode("utf-8")
        except UnicodeDecodeError as err:
            raise DataError(f"not UTF-8: byte 0x{line[err.start:err.start + 1].hex()} at column {err.start + 1} "
                            f"({err.reason})", where, number) from None  # fmt: skip


def text_lines(path: str) -> Iterator[str]:
    """Lines of a text file (gzip decompressed), streamed and checked for UTF-8 line by line."""
    with open_binary(path) as handle:
        yield from handle_lines(handle, path)


def handle_lines(handle: IO[bytes], path: str) -> Iterator[str]:
    """Lines of a file ``open_binary`` opened (from its current position), checked for UTF-8 line by line."""
    try:
        yield from decoded_lines(handle, path)
    except _GZIP_ERRORS as err:
        raise _gzip_error(err, path) from err


# ---------------------------------------------------------------- JSON Lines


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
            raise DataError(f"expected a JSON object, got {type_name(obj)}", where, number)
        yield number, obj


def read_jsonl(path: str) -> tuple[tuple[int, dict], ...]:
    """All (line number, object) pairs of a JSONL file, parsed once per file version (cached by mtime).

    The objects are shared between callers: treat them as read-only.
    """
    return _read_jsonl(path, _mtime(path))


@functools.lru_cache(maxsize=16)
def _read_jsonl(path: str, mtime: float) -> tuple[tuple[int, dict], ...]:
    return tuple(iter_jsonl(text_lines(path), path))


# ---------------------------------------------------------------- JSON documents


def _invalid(text: str, path: str) -> DataError:
    """The DataError of an invalid JSON document (json.loads finds and words the problem)."""
    try:
        json.loads(text)
    except json.JSONDecodeError as err:
        return DataError(f"invalid JSON: {err.msg} (column {err.colno})", path, err.lineno)
    return DataError("invalid JSON", path)


def read_json(path: str) -> Any:
    """A whole JSON document (gzip decompressed); every problem a DataError naming the file and line."""
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(f"invalid JSON: {err.msg} (column {err.colno})", path, err.lineno) from None


def read_json_records(path: str, what: str = "records") -> tuple[tuple[int, Any], ...]:
    """(line where the record starts, record) of every element of a JSON document holding one array.

    Cached per file version; the records are shared between callers: treat them as read-only. A document that
    is not an array is a DataError ("expected a JSON list of ``what``").
    """
    return _read_json_records(path, _mtime(path), what)


@functools.lru_cache(maxsize=4)
def _read_json_records(path: str, mtime: float, what: str) -> tuple[tuple[int, Any], ...]:
    text = read_text(path)
    pos = _WS.match(text).end()
    if not text.startswith("[", pos):
        value = read_json(path)
        raise DataError(f"expected a JSON list of {what}, got {type_name(value)}", path)
    decoder = json.JSONDecoder()
    records: list[tuple[int, Any]] = []
    line, counted = 1, 0
    pos = _WS.match(text, pos + 1).end()
    closed = text.startswith("]", pos)
    while not closed:
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            raise _invalid(text, path) from None
        line += text.count("\n", counted, pos)
        counted = pos
        records.append((line, value))
        pos = _WS.match(text, end).end()
        if text.startswith(",", pos):
            pos = _WS.match(text, pos + 1).end()
        elif text.startswith("]", pos):
            closed = True
        else:
            raise _invalid(text, path)
    if _WS.match(text, pos + 1).end() != len(text):
        raise _invalid(text, path)
    return tuple(records)


# ---------------------------------------------------------------- typed fields


def type_name(value: Any) -> str:
    """JSON-style name of a value's type (``null``, ``bool``, ``int``, ``number``, ``string``, ``list``, ``object``)."""
    if value is None:
        return "null"
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def is_a(value: Any, types: type | tuple[type, ...]) -> bool:
    """``isinstance`` where a bool is never an int or a float (unless ``bool`` is among ``types``)."""
    types = types if isinstance(types, tuple) else (types,)
    return isinstance(value, types) and (not isinstance(value, bool) or bool in types)


def typed_field(
    obj: Any,
    name: str,
    types: type | tuple[type, ...],
    source: str | None,
    line: int | None,
    where: str = "",
    default: Any = REQUIRED,
    empty: bool = True,
) -> Any:
    """``obj[name]``, checked: present and not null (else ``default``; a DataError when required), of ``types``
    (a bool is not an int), and for a string, not blank unless ``empty``. ``where`` prefixes the field's name
    in messages (``messages[2].``)."""
    label = where + name
    if not isinstance(obj, Mapping):
        raise DataError(f"{where.rstrip('.') or 'record'} must be an object, got {type_name(obj)}", source, line)
    value = obj.get(name)
    if value is None:
        if default is REQUIRED:
            raise DataError(f"missing field {label!r}", source, line)
        return default
    if not is_a(value, types):
        names = "/".join(_TYPE_NAMES.get(t, t.__name__) for t in (types if isinstance(types, tuple) else (types,)))
        raise DataError(f"field {label!r} must be {names}, got {type_name(value)}", source, line)
    if not empty and isinstance(value, str) and not value.strip():
        raise DataError(f"field {label!r} is empty", source, line)
    return value


def write_jsonl_atomic(path: str | os.PathLike, rows: Iterable[Mapping[str, Any]]) -> None:
    """Write ``rows`` as JSON lines (UTF-8, not ASCII-escaped) to a temporary file beside ``path`` (its folder
    made when missing), then rename it into place: a killed run never leaves a half-written file."""
    folder = os.path.dirname(os.fspath(path)) or "."
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(os.fspath(path))}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
