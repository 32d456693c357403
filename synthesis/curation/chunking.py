"""Recursive character chunking with LangChain's ``RecursiveCharacterTextSplitter``.

Defaults are the MTR-Suite authors' code: chunk size 2048 characters (``len``), no overlap, their separator
list (``"authors"``), a dangling-heading trim, and chunks shorter than half the chunk size dropped. The
paper's own description (Table 8 separators, ~1024-character documents) is available as
``separators="paper"`` with ``chunk_size=1024``.

Trim (authors' rule): a chunk ending in a blank line loses it; otherwise, if the text after the chunk's last
blank line has at most ``dangling_tokens`` whitespace-separated tokens (a section heading left hanging), that
tail is removed. A chunk is kept when its trimmed length is at least ``min_length`` characters, except with
``keep_whole``: a text the splitter leaves in one piece (it fits in ``chunk_size``) is then kept whatever its
length (a passage of a passage-level corpus; see ``synthesis.curation.curate``).
Chunk ids are ``<document id>#<n>``, n counting every chunk of the document from 0 (dropped ones included).
"""

from __future__ import annotations

from collections.abc import Sequence

from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from convrag.core.errors import ConvragError

SEPARATORS = {
    "authors": ("\n\n", "\n", ".", "!", "?", ",", " ", "\u200b", "\uff0c", "\u3001", "\uff0e", "\u3002", ""),
    "paper": ("\n\n", "\n", " ", ".", ",", "\u200b", "\uff0c", "\u3001", "\uff0e", "\u3002", ""),
}


def trim_chunk(chunk: str, dangling_tokens: int = 5) -> str:
    """The authors' post-processing of one chunk (see the module docstring)."""
    if chunk.endswith("\n\n"):
        return chunk[:-2]
    cut = chunk.rfind("\n\n")
    if cut >= 0 and len(chunk[cut + 2:].split()) <= dangling_tokens:
        return chunk[:cut]
    return chunk


class Chunker:
    """Split texts into trimmed chunks; ``min_length`` defaults to ``chunk_size // 2``; ``keep_whole`` lifts it for
    a text that fits in one chunk."""

    def __init__(self, chunk_size: int = 2048, chunk_overlap: int = 0, min_length: int | None = None,
                 separators: str | Sequence[str] = "authors", dangling_tokens: int = 5,
                 keep_whole: bool = False) -> None:
        from langchain_text_splitters import RecursiveCharacterTextSplitter

        if chunk_size < 1 or chunk_overlap < 0 or chunk_overlap >= chunk_size:
            raise ConvragError(f"chunking: need chunk_size >= 1 and 0 <= chunk_overlap < chunk_size "
                               f"(got {chunk_size}, {chunk_overlap})")
        for name, value in (("min_length", min_length), ("dangling_tokens", dangling_tokens)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ConvragError(f"chunking: {name} must be a whole number >= 0, got {value!r}")
        if isinstance(separators, str):
            if separators not in SEPARATORS:
                raise ConvragError(f"chunking: separators must be one of {', '.join(SEPARATORS)} or a list")
            separators = SEPARATORS[separators]
        self.chunk_size = chunk_size
        self.min_length = chunk_size // 2 if min_length is None else min_length
        self.dangling_tokens = dangling_tokens
        self.keep_whole = keep_whole
        self.splitter = RecursiveCharacterTextSplitter(
            separators=list(separators), chunk_size=chunk_size, chunk_overlap=chunk_overlap,
            length_function=len, is_separator_regex=False)

    def split(self, text: str) -> list[tuple[int, str | None]]:
        """(chunk number, trimmed chunk or None when it is dropped as shorter than ``min_length``) for every chunk."""
        pieces = self.splitter.split_text(text)
        whole = self.keep_whole and len(pieces) == 1
        out: list[tuple[int, str | None]] = []
        for n, piece in enumerate(pieces):
            chunk = trim_chunk(piece, self.dangling_tokens)
            out.append((n, chunk if whole or len(chunk) >= self.min_length else None))
        return out


class ChunkingStep(PipelineStep):
    """datatrove step: each document becomes its kept chunks (metadata copied, ``source_id`` and ``chunk`` added)."""

    name = "recursive character chunking"
    type = "✂️ - FORMAT"

    def __init__(self, chunker: Chunker) -> None:
        super().__init__()
        self.chunker = chunker

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        for doc in data:
            with self.track_time():
                pieces = self.chunker.split(doc.text)
            if not pieces:
                self.stat_update("dropped:document_without_chunks")
            for n, chunk in pieces:
                if chunk is None:
                    self.stat_update("dropped:chunk_too_short")
                    continue
                self.stat_update("chunks")
                if len(chunk) < self.chunker.min_length:
                    self.stat_update("kept_whole")  # a short passage kept by keep_whole
                yield Document(text=chunk, id=f"{doc.id}#{n}",
                               metadata={**doc.metadata, "source_id": doc.id, "chunk": n})
