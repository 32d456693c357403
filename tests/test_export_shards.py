"""Streaming Parquet export: exact rows and shard sizes, and a fallback for datasets that are not plain cache files."""

from __future__ import annotations

import datasets
import pyarrow.parquet as pq
import pytest

from convrag import export
from convrag.export import write_parquet_shards

from .conftest import DATA


@pytest.fixture
def on_disk(tmp_path):
    datasets.Dataset.from_dict({"a": list(range(12)), "b": [str(i) for i in range(12)]}).save_to_disk(tmp_path / "x")
    return datasets.load_from_disk(str(tmp_path / "x"))


def _rows(paths):
    return [r for p in paths for r in pq.read_table(p).to_pylist()]


@pytest.mark.parametrize("shard_rows, sizes", [(500, [12]), (5, [4, 4, 4]), (6, [6, 6]), (12, [12]), (7, [6, 6])])
def test_streamed_shards_hold_every_row_in_order(on_disk, tmp_path, monkeypatch, shard_rows, sizes):
    monkeypatch.setattr(export, "MAX_SHARD_ROWS", shard_rows)
    assert export._streamable(on_disk, [f["filename"] for f in on_disk.cache_files])
    paths = write_parquet_shards(on_disk, tmp_path / "out", "test")
    assert [pq.read_table(p).num_rows for p in paths] == sizes
    assert [p.name for p in paths][-1] == f"test-{len(sizes) - 1:05d}-of-{len(sizes):05d}.parquet"
    assert _rows(paths) == on_disk.to_list()


def test_transformed_datasets_fall_back_and_stay_exact(on_disk, tmp_path):
    cases = {
        "concat": datasets.concatenate_datasets([on_disk, datasets.Dataset.from_dict({"a": [99], "b": ["x"]})]),
        "select": on_disk.select(range(3, 6)),
        "rename": on_disk.rename_column("a", "c"),
        "empty": on_disk.select([]),
    }
    for name, ds in cases.items():
        assert not export._streamable(ds, [f["filename"] for f in ds.cache_files]), name
        assert _rows(write_parquet_shards(ds, tmp_path / name, "test")) == ds.to_list(), name


def test_a_builder_export_streams(tmp_path, monkeypatch):
    seen = []
    real = export._streamable
    monkeypatch.setattr(export, "_streamable", lambda ds, files: seen.append(real(ds, files)) or seen[-1])
    export.export_benchmark("recor", tmp_path / "recor", configs=["law-corpus", "law-qrels"],
                            options={"source": str(DATA / "recor" / "sample")})  # fmt: skip
    assert seen == [True, True]
