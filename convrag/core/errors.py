"""Errors raised on bad input. Every message names the file (and line, where there is one)."""

from __future__ import annotations

import re


class ConvragError(Exception):
    """Base class of convrag's own errors."""


class DataError(ConvragError, ValueError):
    """Malformed input data: bad JSON, missing fields, duplicate or unknown ids, wrong types.

    ``source`` is the file (or logical input name) and ``line`` the 1-based line or record number.
    """

    def __init__(self, message: str, source: str | None = None, line: int | None = None) -> None:
        self.source = source
        self.line = line
        where = ""
        if source is not None:
            where = f"{source}:{line}: " if line is not None else f"{source}: "
        super().__init__(f"{where}{message}")


class EmptyResult(ConvragError):
    """A run ended with no usable value where one was required (no verdict, no answer, no turn, no
    conversation). The CLI prints its one-line message and exits 1; partial output is kept and marked
    incomplete by the command that raises it."""


def parquet_reason(err: Exception) -> str:
    """pyarrow's reason for not reading a Parquet file, on one line, without the path it repeats (the caller's
    message names the file)."""
    return re.sub(r"^Could not open Parquet input source '.*?': ", "", " ".join(str(err).split()))
