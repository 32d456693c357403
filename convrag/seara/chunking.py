"""SEARA chunking strategies (the space's ``chunking`` dimension) and the length filter (its ``filter`` dimension).

Every chunk is a verbatim slice of its document's text, ``text[chunk.start:chunk.end] == chunk.text`` (a splitter
piece not found in the text is an error); documents are ``(doc_id, title, text)``, offsets refer to ``text`` and the
title is never part of a chunk (a retriever may prepend it when it embeds). Strategies (defaults):
- ``original``: one chunk per document, the whole text.
- ``recursive``: LangChain ``RecursiveCharacterTextSplitter`` (``chunk_size`` 1024 characters, ``chunk_overlap`` 0,
  ``separators`` ``"paper"`` or ``"authors"``: :mod:`convrag.synthesis.curation.chunking`); each stripped piece is
  found searching from one character after the previous piece's start (repeated text maps to its next occurrence).
- ``sentences``: consecutive, non-overlapping groups of ``n`` = 3 sentences (:func:`sentence_spans`).
- ``fixed``: windows of ``size`` = 128 whitespace-separated tokens every ``stride`` (default and at most ``size``)
  tokens, the last being the first to reach the final token.
A group or window spans its first unit's start to its last unit's end. An empty or whitespace-only document gives no
chunk (counted in :class:`ChunkingReport`). Chunk ids: ``"<doc_id>#<h>:<start>-<end>"``, ``h`` the first 8 hex digits
of the SHA-1 of the :func:`chunking_id`: the same span cut by two chunkings gets two ids; ids never depend on the run.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from convrag.core.errors import ConvragError
from convrag.seara.facts import Chunk

DEFAULTS: dict[str, dict[str, Any]] = {
    "original": {},
    "recursive": {"chunk_size": 1024, "chunk_overlap": 0, "separators": "paper"},
    "sentences": {"n": 3},
    "fixed": {"size": 128, "stride": None},
}
STRATEGIES = tuple(DEFAULTS)
_SENTENCE_END = re.compile(r"[.!?]+[\"')\]\u201d\u2019]*(?=\s)|\n[ \t]*\n")
_TOKEN = re.compile(r"\S+")


class ChunkingError(ConvragError, ValueError):
    """An unknown strategy, a bad parameter, or a piece that is not a slice of its document."""


@dataclass
class ChunkingReport:
    """Counts of one chunking pass: ``documents`` read, ``empty_documents`` (no chunk) and ``chunks`` made."""

    documents: int = 0
    empty_documents: int = 0
    chunks: int = 0


def _positive(strategy: str, name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ChunkingError(f"chunking {strategy!r}: {name} must be an integer >= {minimum}, got {value!r}")
    return value


def resolve_params(strategy: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """``params`` checked and completed with the defaults (``fixed``'s stride resolved to ``size``)."""
    if strategy not in DEFAULTS:
        raise ChunkingError(f"unknown chunking strategy {strategy!r}; allowed: {', '.join(STRATEGIES)}")
    params = dict(params or {})
    unknown = sorted(set(params) - set(DEFAULTS[strategy]))
    if unknown:
        allowed = ", ".join(DEFAULTS[strategy]) or "none"
        raise ChunkingError(f"chunking {strategy!r}: unknown parameter(s) {unknown}; allowed: {allowed}")
    out = {**DEFAULTS[strategy], **params}
    if strategy == "recursive":
        size = _positive(strategy, "chunk_size", out["chunk_size"])
        overlap = _positive(strategy, "chunk_overlap", out["chunk_overlap"], minimum=0)
        if overlap >= size:
            raise ChunkingError(f"chunking 'recursive': chunk_overlap ({overlap}) must be below chunk_size ({size})")
        if out["separators"] not in ("paper", "authors"):
            raise ChunkingError(f"chunking 'recursive': separators must be 'paper' or 'authors', "
                                f"got {out['separators']!r}")
    elif strategy == "sentences":
        _positive(strategy, "n", out["n"])
    elif strategy == "fixed":
        size = _positive(strategy, "size", out["size"])
        out["stride"] = size if out["stride"] is None else out["stride"]
        if _positive(strategy, "stride", out["stride"]) > size:
            raise ChunkingError(f"chunking 'fixed': stride ({out['stride']}) must be at most size ({size})")
    return out


def chunking_id(strategy: str, params: dict[str, Any] | None = None) -> str:
    """Canonical name of a chunking: ``strategy`` or ``strategy(k=v,...)`` over the resolved parameters sorted
    by name, e.g. ``fixed(size=64,stride=64)``; parameter order and spelled-out defaults do not change it."""
    resolved = resolve_params(strategy, params)
    if not resolved:
        return strategy
    return f"{strategy}(" + ",".join(f"{k}={resolved[k]}" for k in sorted(resolved)) + ")"


def _recursive_spans(text: str, chunk_size: int, chunk_overlap: int, separators: str) -> Iterator[tuple[int, int]]:
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    from convrag.synthesis.curation.chunking import SEPARATORS

    splitter = RecursiveCharacterTextSplitter(separators=list(SEPARATORS[separators]), chunk_size=chunk_size,
                                              chunk_overlap=chunk_overlap, length_function=len,
                                              is_separator_regex=False)
    cursor = 0
    for piece in splitter.split_text(text):
        start = text.find(piece, cursor)
        if start < 0:
            raise ChunkingError(f"chunking 'recursive': a piece is not a slice of its document: {piece[:60]!r}")
        cursor = start + 1
        yield start, start + len(piece)


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``[start, end)`` of each sentence of ``text``, in text order. A sentence ends after a run of ``.``, ``!`` or
    ``?`` (plus closing quotes or brackets) followed by whitespace, or at a blank line; leading and trailing
    whitespace is not part of a sentence."""
    spans: list[tuple[int, int]] = []
    cuts = [m.end() for m in _SENTENCE_END.finditer(text)] + [len(text)]
    begin = 0
    for cut in cuts:
        piece = text[begin:cut]
        if piece.strip():
            lead = len(piece) - len(piece.lstrip())
            spans.append((begin + lead, begin + len(piece.rstrip())))
        begin = cut
    return spans


def _group_spans(spans: Sequence[tuple[int, int]], size: int, stride: int) -> Iterator[tuple[int, int]]:
    for first in range(0, len(spans), stride):
        last = min(first + size, len(spans)) - 1
        yield spans[first][0], spans[last][1]
        if last == len(spans) - 1:
            return


def _spans(text: str, strategy: str, params: dict[str, Any]) -> Iterable[tuple[int, int]]:
    if strategy == "original":
        return [(0, len(text))]
    if strategy == "recursive":
        return _recursive_spans(text, params["chunk_size"], params["chunk_overlap"], params["separators"])
    if strategy == "sentences":
        return _group_spans(sentence_spans(text), params["n"], params["n"])
    tokens = [(m.start(), m.end()) for m in _TOKEN.finditer(text)]
    return _group_spans(tokens, params["size"], params["stride"])


def iter_chunks(docs: Iterable[tuple[str, str, str]], strategy: str, *, report: ChunkingReport | None = None,
                **params: Any) -> Iterator[Chunk]:
    """Chunks of ``docs`` (``(doc_id, title, text)``), lazily, in document order, then text order; counts go to
    ``report`` when given. A bad strategy or parameter raises :class:`ChunkingError` at the call, before any
    document is read."""
    resolved = resolve_params(strategy, params)
    tag = hashlib.sha1(chunking_id(strategy, params).encode("utf-8")).hexdigest()[:8]
    return _generate(docs, strategy, resolved, tag, report if report is not None else ChunkingReport())


def _generate(docs: Iterable[tuple[str, str, str]], strategy: str, params: dict[str, Any], tag: str,
              tally: ChunkingReport) -> Iterator[Chunk]:
    for doc_id, _title, text in docs:
        tally.documents += 1
        if not text.strip():
            tally.empty_documents += 1
            continue
        for start, end in _spans(text, strategy, params):
            tally.chunks += 1
            yield Chunk(f"{doc_id}#{tag}:{start}-{end}", doc_id, start, text[start:end])


def chunk_documents(docs: Iterable[tuple[str, str, str]], strategy: str, *, report: ChunkingReport | None = None,
                    **params: Any) -> list[Chunk]:
    """All chunks of ``docs`` as a list (see :func:`iter_chunks`)."""
    return list(iter_chunks(docs, strategy, report=report, **params))


def filter_chunks(chunks: Iterable[Chunk], min_chars: int = 32,
                  max_chars: int | None = None) -> tuple[list[Chunk], int]:
    """The chunks with ``min_chars <= len(text)`` (and ``len(text) <= max_chars`` when given), in input order,
    and how many were dropped."""
    kept: list[Chunk] = []
    dropped = 0
    for chunk in chunks:
        if len(chunk.text) < min_chars or (max_chars is not None and len(chunk.text) > max_chars):
            dropped += 1
        else:
            kept.append(chunk)
    return kept, dropped
