"""Record shards (Parquet files written atomically) and the record-by-record stage built on them.

A shard is ``<folder>/<prefix>-NNNNN.parquet``; its schema metadata holds ``convrag_shard`` = JSON with the
number of input records it covers, the ids of the first and last of them, and the drops per reason. A
shard exists under its final name only once complete (temporary file, then rename), so after a kill the
finished shards are kept and only the missing ones are redone.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from convrag.core.errors import ConvragError
from convrag.core.progress import label
from convrag.synthesis.engine.pipeline import Stage, StageContext, StageReport, llm_summary, write_table_atomic

SHARD_META = b"convrag_shard"


def write_shard(path: Path, records: list[dict[str, Any]], meta: dict[str, Any],
                schema: pa.Schema | None = None) -> None:
    """Write ``records`` to the Parquet file ``path`` through a temporary file and a rename."""
    table = pa.Table.from_pylist(records, schema=schema) if records or schema else pa.table({})
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), SHARD_META: json.dumps(meta).encode()})
    write_table_atomic(path, table)


def shard_meta(path: Path) -> dict[str, Any]:
    """The ``convrag_shard`` metadata of a shard (empty when absent)."""
    raw = (pq.read_schema(path).metadata or {}).get(SHARD_META)
    return json.loads(raw) if raw else {}


def shard_paths(folder: Path, prefix: str = "part") -> list[Path]:
    """The finished shards of ``folder`` in order."""
    return sorted(folder.glob(f"{prefix}-*.parquet"))


def read_records(folder: Path, prefix: str = "part", columns: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """Every record of every finished shard, in shard order, streamed batch by batch."""
    for path in shard_paths(folder, prefix):
        handle = pq.ParquetFile(path)
        for batch in handle.iter_batches(columns=columns, batch_size=1024):
            yield from batch.to_pylist()


def count_records(folder: Path, prefix: str = "part") -> int:
    """Rows in the finished shards of ``folder`` (from Parquet metadata, nothing is read)."""
    return sum(pq.ParquetFile(p).metadata.num_rows for p in shard_paths(folder, prefix))


def _batches(items: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    it = iter(items)
    while batch := list(islice(it, size)):
        yield batch


class RecordStage(Stage):
    """A stage that maps input records (each with a string ``id``) to output records, shard by shard.

    Input records are cut, in their order, into shards of ``shard_size``; shard ``i`` is processed and written
    as ``part-{i:05d}.parquet``. On a rerun a shard already on disk is skipped if it covers the same ids (else
    the input changed under the run: an error). Subclasses implement ``records`` (the input, in a stable
    order) and ``process`` (one batch -> output records + drop reasons); LLM calls in ``process`` use the
    LLM layer (cached), accounted in ``ctx.llm_report``. A stage may override ``process_shards`` to work on later
    shards while earlier ones finish; shards are still written in order, each once complete.
    """

    shard_size: int = 64

    @abstractmethod
    def records(self, ctx: StageContext) -> Iterable[dict[str, Any]]:
        """The input records, in a stable order."""

    @abstractmethod
    def process(self, batch: list[dict[str, Any]], ctx: StageContext) -> tuple[list[dict[str, Any]], Counter[str]]:
        """Output records for one batch and the reason of every dropped input record."""

    def total(self, ctx: StageContext) -> int | None:
        """Number of input records, for the progress bar (None when unknown)."""
        return None

    def process_shards(self, shards: Iterator[list[dict[str, Any]]],
                       ctx: StageContext) -> Iterator[tuple[list[dict[str, Any]], Counter[str]]]:
        """``process`` of each batch of ``shards`` in order, pulling batches as it goes: here one after the other. A
        stage that keeps its LLM busy across shard boundaries overrides it (``synthesis.engine.schedule``)."""
        for batch in shards:
            yield self.process(batch, ctx)

    def run(self, ctx: StageContext) -> StageReport:
        dropped: Counter[str] = Counter()
        counts = {"in": 0, "out": 0}
        bar = tqdm(total=self.total(ctx), desc=label("writing records"), unit="rec", disable=not ctx.progress)
        waiting: deque[tuple[Path, list[str]]] = deque()

        def account(ids: list[str], out_rows: int, meta: dict[str, Any]) -> None:
            counts["in"] += len(ids)
            counts["out"] += out_rows
            dropped.update(meta.get("dropped", {}))
            bar.update(len(ids))

        def pending() -> Iterator[list[dict[str, Any]]]:
            """The batches of shards not on disk yet (those on disk are checked and counted)."""
            for index, batch in enumerate(_batches(self.records(ctx), self.shard_size)):
                path = ctx.folder / f"part-{index:05d}.parquet"
                ids = [str(r["id"]) for r in batch]
                if not path.is_file():
                    waiting.append((path, ids))
                    yield batch
                    continue
                meta = shard_meta(path)
                if (meta.get("first"), meta.get("last"), meta.get("records_in")) != (ids[0], ids[-1], len(ids)):
                    raise ConvragError(f"{path}: written for other input records (the input changed since the "
                                       f"interrupted run); give --redo {self.name}")
                account(ids, pq.ParquetFile(path).metadata.num_rows, meta)

        for out, drops in self.process_shards(pending(), ctx):
            path, ids = waiting.popleft()
            meta = {"records_in": len(ids), "first": ids[0], "last": ids[-1], "dropped": dict(drops)}
            write_shard(path, out, meta)
            account(ids, len(out), meta)
        bar.close()
        return StageReport(self.name, counts["in"], counts["out"], dict(dropped), llm_summary(ctx.llm_report))
