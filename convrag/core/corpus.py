"""Where a synthesis pipeline reads its corpus: JSONL / Parquet files, a folder of them, or a built convrag folder.

Every document needs an id (``_id`` or ``id``: a string or an integer, read as a string) and a non-empty
string ``text``; ``title`` is optional. A bad document is an error naming its file and line (JSONL) or row
(Parquet), and a Parquet file pyarrow cannot read (cut, damaged) is one error naming it; nothing is skipped.
Files are read in sorted order and dealt to datatrove tasks round-robin (task r reads files r, r + W, ...), so a
corpus in several files is read in parallel.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from tqdm.auto import tqdm

from convrag.core.errors import ConvragError, DataError, parquet_reason
from convrag.core.jsonl import is_a, iter_jsonl, text_lines, type_name
from convrag.core.manifest import read_card
from convrag.core.progress import label

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json.gz", ".ndjson")
PARQUET_SUFFIXES = (".parquet",)


@dataclass(frozen=True)
class CorpusFiles:
    """The files of a corpus source, in reading order, and how the source was named."""

    files: tuple[str, ...]
    described: str


def _kind(path: str) -> str | None:
    name = path.lower()
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    return None


def _built_corpus_files(folder: Path, config: str | None) -> CorpusFiles:
    readme, card = read_card(folder)
    configs = {c.get("config_name"): c for c in card.get("configs") or [] if isinstance(c, dict)}
    block = card.get("convrag") if isinstance(card.get("convrag"), dict) else {}
    aliases = block.get("aliases") or {}  # mteb names repeating another config's files: not offered twice
    corpora = [name for name in configs if isinstance(name, str) and (name == "corpus" or name.endswith("corpus"))
               and name not in aliases]  # fmt: skip
    if config is None:
        if len(corpora) != 1:
            listed = ", ".join(corpora) or "none"
            raise ConvragError(f"{readme}: choose the corpus config with --option corpus_config=NAME "
                               f"(corpus configs: {listed})")
        config = corpora[0]
    if config not in configs:
        raise ConvragError(f"{readme}: no config {config!r} (configs: {', '.join(map(str, configs))})")
    files: list[str] = []
    for entry in configs[config].get("data_files") or []:
        pattern = entry.get("path") if isinstance(entry, dict) else entry
        files += sorted(glob.glob(str(folder / pattern)))
    if not files:
        raise ConvragError(f"{readme}: config {config!r} has no data files under {folder}")
    return CorpusFiles(tuple(files), f"{folder} (config {config})")


def corpus_files(source: str | os.PathLike, config: str | None = None) -> CorpusFiles:
    """Resolve ``source``: a JSONL / Parquet file, a folder of them (searched recursively), or a folder
    written by ``convrag build`` (its corpus config, or ``config``)."""
    path = Path(source)
    if not path.exists():
        raise ConvragError(f"{path}: no such file or folder (give a JSONL / Parquet corpus or a built folder)")
    if path.is_file():
        if _kind(str(path)) is None:
            raise ConvragError(f"{path}: not a corpus file (expected {', '.join(JSONL_SUFFIXES + PARQUET_SUFFIXES)})")
        return CorpusFiles((str(path),), str(path))
    if (path / "README.md").is_file() and any(path.glob("*/*.parquet")):
        return _built_corpus_files(path, config)
    found = sorted(str(p) for p in path.rglob("*") if p.is_file() and _kind(str(p)))
    if not found:
        raise ConvragError(f"{path}: no .jsonl / .jsonl.gz / .parquet files in this folder")
    return CorpusFiles(tuple(found), str(path))


def _document(obj: Any, where: str, line: int) -> tuple[str, str, str]:
    if not isinstance(obj, dict):
        raise DataError(f"expected an object, got {type_name(obj)}", where, line)
    key = "_id" if "_id" in obj else "id"
    doc_id = obj.get(key)
    if not is_a(doc_id, (str, int)) or (isinstance(doc_id, str) and not doc_id.strip()):
        what = "missing" if doc_id is None else f"must be a non-empty string or an integer, got {type_name(doc_id)}"
        raise DataError(f"document id (_id or id) {what}", where, line)
    text = obj.get("text")
    if not isinstance(text, str):
        raise DataError(f"field 'text' must be a string, got {type_name(text)}", where, line)
    if not text.strip():
        raise DataError(f"document {doc_id}: empty text", where, line)
    title = obj.get("title")
    if title is not None and not isinstance(title, str):
        raise DataError(f"field 'title' must be a string, got {type_name(title)}", where, line)
    return str(doc_id), title or "", text


def unreadable_parquet(err: Exception, path: str) -> DataError:
    """The one-line error of a Parquet file pyarrow cannot read (cut, damaged, not Parquet): pyarrow's reason on
    one line, without the path it repeats."""
    return DataError(f"not a readable Parquet file ({parquet_reason(err)})", path)


def parquet_file(path: str) -> pq.ParquetFile:
    """``path`` opened as Parquet; a truncated or damaged file (no footer, bad metadata) is one ``DataError``."""
    try:
        return pq.ParquetFile(path)
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError, its IO errors OSErrors
        raise unreadable_parquet(err, path) from None


def _parquet_rows(handle: pq.ParquetFile, columns: list[str], path: str) -> Iterator[dict[str, Any]]:
    """The rows of ``columns``; a data page that cannot be read (cut or damaged) is one ``DataError``."""
    try:
        for batch in handle.iter_batches(columns=columns, batch_size=1024):
            yield from batch.to_pylist()
    except (OSError, ValueError) as err:
        raise unreadable_parquet(err, path) from None


def iter_file(path: str) -> Iterator[tuple[int, str, str, str]]:
    """(line or row number, id, title, text) of every document of one file; ids are unique within the file."""
    seen: dict[str, int] = {}
    if _kind(path) == "parquet":
        handle = parquet_file(path)
        names = set(handle.schema_arrow.names)
        if "text" not in names or not names & {"_id", "id"}:
            raise DataError("needs columns 'text' and '_id' (or 'id')", path)
        columns = [c for c in ("_id", "id", "title", "text") if c in names]
        numbered: Iterator[tuple[int, Any]] = enumerate(_parquet_rows(handle, columns, path), start=1)
        where = f"{path} row"
    else:
        numbered = iter_jsonl(text_lines(path), path)
        where = path
    for number, obj in numbered:
        doc_id, title, text = _document(obj, path, number)
        if doc_id in seen:
            raise DataError(f"duplicate document id {doc_id!r} (first at {where.split(' ')[-1]} {seen[doc_id]})",
                            path, number)
        seen[doc_id] = number
        yield number, doc_id, title, text


def count_documents(files: CorpusFiles) -> int:
    """Documents in the source: Parquet row counts from metadata, JSONL non-blank lines."""
    total = 0
    for path in files.files:
        if _kind(path) == "parquet":
            total += parquet_file(path).metadata.num_rows
        else:
            total += sum(1 for line in text_lines(path) if line.strip())
    return total


class CorpusReader(PipelineStep):
    """datatrove reader: the documents of the files dealt to this task (file i goes to task i mod world size).

    Each Document carries ``metadata`` ``title``, ``source_file``, ``source_line`` (where errors point) and
    ``file_index`` (the file's position in the source, which names its output shards).
    """

    name = "corpus reader"
    type = "📖 - READER"

    def __init__(self, files: CorpusFiles, progress: bool = False) -> None:
        super().__init__()
        self.files = files
        self.progress = progress

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        bar = tqdm(desc=label(f"reading documents (task {rank})"), unit="doc", disable=not self.progress, position=rank,
                   leave=False)
        for index in range(rank, len(self.files.files), world_size):
            path = self.files.files[index]
            for number, doc_id, title, text in iter_file(path):
                self.stat_update("documents")
                bar.update()
                yield Document(text=text, id=doc_id, metadata={
                    "title": title, "source_file": path, "source_line": number, "file_index": index})
        bar.close()
