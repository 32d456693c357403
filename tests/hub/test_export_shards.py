"""Streaming Parquet export: exact rows and shard sizes from Arrow files, and row-count checks."""

from __future__ import annotations

import datasets
import pyarrow.parquet as pq
import pytest

from convrag.core.errors import ConvragError
from convrag.hub import export
from convrag.hub.export import write_arrow_shards
from tests.conftest import DATA


@pytest.fixture
def on_disk(tmp_path):
    datasets.Dataset.from_dict({"a": list(range(12)), "b": [str(i) for i in range(12)]}).save_to_disk(tmp_path / "x")
    return datasets.load_from_disk(str(tmp_path / "x"))


def _rows(paths):
    return [r for p in paths for r in pq.read_table(p).to_pylist()]


def _files(ds):
    return [f["filename"] for f in ds.cache_files]


@pytest.mark.parametrize("shard_rows, sizes", [(500, [12]), (5, [4, 4, 4]), (6, [6, 6]), (12, [12]), (7, [6, 6])])
def test_streamed_shards_hold_every_row_in_order(on_disk, tmp_path, monkeypatch, shard_rows, sizes):
    monkeypatch.setattr(export, "MAX_SHARD_ROWS", shard_rows)
    paths = write_arrow_shards(_files(on_disk), on_disk.features.arrow_schema, 12, tmp_path / "out", "test")
    assert [pq.read_table(p).num_rows for p in paths] == sizes
    assert [p.name for p in paths][-1] == f"test-{len(sizes) - 1:05d}-of-{len(sizes):05d}.parquet"
    assert _rows(paths) == on_disk.to_list()


@pytest.mark.parametrize("n_rows, message", [(13, "wrote 12 of 13 rows"), (11, "hold more than 11 rows")])
def test_a_row_count_other_than_the_split_info_is_an_error(on_disk, tmp_path, n_rows, message):
    with pytest.raises(ConvragError, match=message):
        write_arrow_shards(_files(on_disk), on_disk.features.arrow_schema, n_rows, tmp_path / "out", "test")


def test_a_builder_export_streams_the_rows_as_dataset_reads(tmp_path):
    options = {"source": str(DATA / "recor" / "sample")}
    files, builder = export.build_config("recor", "law-corpus", str(tmp_path / "cache"), options)
    assert list(files) == ["test"] and all(f.endswith(".arrow") for f in files["test"])
    expected = builder.as_dataset(split="test").to_list()
    summary = export.export_benchmark("recor", tmp_path / "recor", configs=["law-corpus", "law-qrels"], options=options)
    assert _rows(sorted((summary.out_dir / "law-corpus").glob("test-*.parquet"))) == expected
    assert summary.rows["law-corpus"]["test"] == len(expected) > 0
