"""datatrove steps that write and read curation shards: one Parquet file per input corpus file.

A shard is named after the index of the corpus file it came from (``00003.parquet``), so the output does not
depend on how many tasks ran, and it is written to a temporary name and renamed when the file's last
document has passed (a killed task leaves no shard under a final name; its rerun writes it again).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

#: Column types of the curation records; other metadata columns are stored as strings.
COLUMNS: dict[str, pa.DataType] = {
    "_id": pa.string(), "title": pa.string(), "text": pa.string(), "source_id": pa.string(),
    "chunk": pa.int64(), "source_file": pa.string(), "source_line": pa.int64(), "file_index": pa.int64(),
    "minhash": pa.binary(), "heuristic_quality": pa.string(), "edu_quality": pa.float64(),
    "naive_quality": pa.string(),
}
_BATCH = 1024


def shard_name(file_index: int) -> str:
    return f"{file_index:05d}.parquet"


class _OpenShard:
    def __init__(self, folder: Path, file_index: int) -> None:
        self.index = file_index
        self.final = folder / shard_name(file_index)
        self.tmp = folder / (shard_name(file_index) + ".tmp")
        self.rows: list[dict[str, Any]] = []
        self.writer: pq.ParquetWriter | None = None
        self.schema: pa.Schema | None = None

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if len(self.rows) >= _BATCH:
            self.flush()

    def flush(self) -> None:
        if not self.rows and self.writer is not None:
            return
        if self.schema is None:
            names = list(dict.fromkeys(k for row in self.rows for k in row)) or ["_id", "text"]
            self.schema = pa.schema([(n, COLUMNS.get(n, pa.string())) for n in names])
            self.writer = pq.ParquetWriter(self.tmp, self.schema)
        rows = [{n: (r.get(n) if n in COLUMNS or r.get(n) is None else str(r[n])) for n in self.schema.names}
                for r in self.rows]
        assert self.writer is not None
        self.writer.write_table(pa.Table.from_pylist(rows, schema=self.schema))
        self.rows = []

    def close(self) -> None:
        self.flush()
        assert self.writer is not None
        self.writer.close()
        os.replace(self.tmp, self.final)


class ShardWriter(PipelineStep):
    """Write documents to ``folder/<file index>.parquet`` (columns ``_id``, ``text`` and the metadata).

    Documents arrive grouped by ``metadata["file_index"]`` in increasing order; every file index this task owns
    (``rank``, ``rank + world_size``, ...) gets a shard, an empty one when all its documents were dropped.
    ``exclude`` names metadata keys not written.
    """

    name = "shard writer"
    type = "💽 - WRITER"

    def __init__(self, folder: str | os.PathLike, n_files: int, exclude: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.folder = str(folder)
        self.n_files = n_files
        self.exclude = tuple(exclude)

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        folder = Path(self.folder)
        folder.mkdir(parents=True, exist_ok=True)
        pending = list(range(rank, self.n_files, world_size))
        current: _OpenShard | None = None
        for doc in data:
            index = int(doc.metadata["file_index"])
            if current is None or index != current.index:
                if current is not None:
                    current.close()
                for skipped in [i for i in pending if i < index]:
                    _OpenShard(folder, skipped).close()
                pending = [i for i in pending if i > index]
                current = _OpenShard(folder, index)
            current.add({"_id": doc.id, "text": doc.text,
                         **{k: v for k, v in doc.metadata.items() if k not in self.exclude}})
            self.stat_update("written")
            yield doc
        if current is not None:
            current.close()
        for index in pending:
            _OpenShard(folder, index).close()


class ShardReader(PipelineStep):
    """Read back ``folder/<file index>.parquet`` for the file indexes of this task, in index order."""

    name = "shard reader"
    type = "📖 - READER"

    def __init__(self, folder: str | os.PathLike, n_files: int) -> None:
        super().__init__()
        self.folder = str(folder)
        self.n_files = n_files

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        for index in range(rank, self.n_files, world_size):
            for row in iter_shard(Path(self.folder) / shard_name(index)):
                doc_id, text = row.pop("_id"), row.pop("text")
                self.stat_update("chunks_read")
                yield Document(text=text, id=doc_id, metadata=row)


def shard_files(folder: Path) -> list[Path]:
    """The finished shards of a folder, in file order."""
    return sorted(folder.glob("[0-9]*.parquet"))


def count_rows(folder: Path) -> int:
    """Rows in the finished shards of ``folder`` (Parquet metadata only)."""
    return sum(pq.ParquetFile(p).metadata.num_rows for p in shard_files(folder))


def iter_shard(path: Path, columns: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """Rows of one shard, streamed batch by batch."""
    for batch in pq.ParquetFile(path).iter_batches(columns=columns, batch_size=_BATCH):
        yield from batch.to_pylist()
