"""Evaluation holds one subset's corpus at a time, reads ids column-wise, and checks corpus columns as before."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from convrag.builders.recor import RECOR
from convrag.core.errors import DataError
from convrag.evaluation.data import Corpora, Folder, load_benchmark
from convrag.hub.export import export_benchmark
from tests.conftest import DATA


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("recor") / "recor"
    export_benchmark("recor", out, options={"source": str(DATA / "recor" / "sample")})
    return out


def test_corpora_read_on_demand_and_hold_only_the_last_subset(folder: Path) -> None:
    data = load_benchmark(folder, RECOR.EVALUATION)
    corpora = data.corpus
    assert isinstance(corpora, Corpora) and list(corpora) == data.subsets and len(data.subsets) > 1
    first, second = data.subsets[:2]
    rows = corpora[first]
    assert corpora[first] is rows  # held: asking again reads nothing
    assert corpora._held[0] == first
    other = corpora[second]
    assert corpora._held[0] == second and corpora[first] is not rows  # the first was let go, then read again
    assert [r["_id"] for r in other] == corpora.ids(second)
    assert data.doc_ids(first) == {r["_id"] for r in rows}
    assert corpora.read(first) == rows and corpora._held[0] == first


def test_doc_keys_qualify_only_shared_ids_with_different_texts(folder: Path) -> None:
    data = load_benchmark(folder, RECOR.EVALUATION)
    assert data.doc_keys == {}  # RECOR's ids carry their domain: none is shared
    a, b = data.subsets[:2]
    rows_a, rows_b = data.corpus[a], data.corpus[b]
    shared, same = rows_a[0]["_id"], rows_a[1]["_id"]
    plain = {s: data.corpus.read(s) for s in data.subsets}
    plain[b] = [*rows_b, {**rows_a[0], "text": "another text"}, dict(rows_a[1])]
    keys = dataclasses.replace(data, corpus=plain).doc_keys
    assert keys == {(a, shared): f"{a}:{shared}", (b, shared): f"{b}:{shared}"}  # same text: id kept as is
    assert (a, same) not in keys


def test_string_columns_report_a_wrong_value_at_its_file_and_row(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "README.md").write_text("---\nconfigs:\n- config_name: c\n  data_files:\n  - split: test\n"
                                        "    path: c/*.parquet\n---\n")  # fmt: skip
    pq.write_table(pa.table({"_id": ["a", "b"], "text": ["x", "y"]}), tmp_path / "c" / "0.parquet")
    pq.write_table(pa.table({"_id": ["c", None], "text": ["z", "w"]}), tmp_path / "c" / "1.parquet")
    f = Folder(tmp_path)
    with pytest.raises(DataError) as err:
        f.string_columns("c", "test", ["_id", "text"])
    assert "1.parquet" in str(err.value) and "'_id'" in str(err.value)
    pq.write_table(pa.table({"_id": ["c", "d"], "text": ["z", "w"]}), tmp_path / "c" / "1.parquet")
    assert f.string_columns("c", "test", ["_id", "text"], keep=1) == [["a", "b", "c", "d"]]
    pq.write_table(pa.table({"_id": ["c", "d"]}), tmp_path / "c" / "1.parquet")
    with pytest.raises(DataError, match="has no column 'text'"):
        f.string_columns("c", "test", ["_id", "text"])
