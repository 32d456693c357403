"""Each source file is opened once per export: the builder configs share one parse of every source."""

from __future__ import annotations

import json
import os
import shutil
import sys
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from convrag.hub.export import export_benchmark
from tests.conftest import DATA

OPENS: Counter | None = None


def _count_opens(event: str, args: tuple) -> None:
    if OPENS is not None and event == "open" and isinstance(args[0], (str, os.PathLike)) and args[1] == "r":
        OPENS[os.path.realpath(args[0])] += 1


sys.addaudithook(_count_opens)


@pytest.fixture
def opens():
    """Counter of file opens for reading (real path -> count) while the test runs."""
    global OPENS
    OPENS = Counter()
    try:
        yield OPENS
    finally:
        OPENS = None


def _files(root: Path) -> list[str]:
    return sorted(os.path.realpath(p) for p in root.rglob("*") if p.is_file())


def test_stratrag_sources_read_and_rules_applied_once(tmp_path, opens, monkeypatch):
    from convrag.builders import stratrag

    train = shutil.copy(DATA / "hotpotqa" / "hotpot_train_v1.1.first10.indent4.json", tmp_path / "train.json")
    dev = shutil.copy(DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json", tmp_path / "dev.json")
    calls = Counter()
    real = stratrag.build_split
    monkeypatch.setattr(stratrag, "build_split", lambda split, *a: calls.update([split]) or real(split, *a))
    sources = {"train": str(train), "validation": str(dev)}
    summary = export_benchmark("stratrag", tmp_path / "out", options={"source": sources})
    assert len(summary.rows) == 7
    assert {p: opens[os.path.realpath(p)] for p in (train, dev)} == {train: 1, dev: 1}
    assert calls == {"train": 1, "validation": 1}


def test_recor_sample_files_opened_once(tmp_path, opens):
    source = shutil.copytree(DATA / "recor" / "sample", tmp_path / "sample")
    summary = export_benchmark("recor", tmp_path / "out", options={"source": str(source)})
    assert len(summary.rows) > 4  # several domains and views share the two files
    assert {name: opens[os.path.realpath(source / name)] for name in ("benchmark.jsonl", "documents.jsonl")} == {
        "benchmark.jsonl": 1, "documents.jsonl": 1}


def test_mtrag_release_and_corpus_zip_opened_once(tmp_path, opens):
    source = tmp_path / "mtrag"
    shutil.copytree(DATA / "mtrag" / "mtrag-human", source / "mtrag-human")
    (source / "corpora" / "passage_level").mkdir(parents=True)
    for domain in ("clapnq", "cloud", "fiqa", "govt"):
        with zipfile.ZipFile(source / "corpora" / "passage_level" / f"{domain}.jsonl.zip", "w") as archive:
            archive.writestr(f"{domain}.jsonl", "".join(
                json.dumps({"_id": f"{domain}-{i}", "title": "t", "text": f"passage {i}"}) + "\n" for i in range(50)))
    corpus = source / "corpora" / "passage_level" / "clapnq.jsonl.zip"
    summary = export_benchmark("mtrag", tmp_path / "out", options={"source": str(source)})
    assert {"clapnq-corpus", "all-corpus"} <= set(summary.rows)  # two configs read the same zip
    assert summary.rows["clapnq-corpus"]["test"] == 50 and summary.rows["all-corpus"]["test"] == 200
    counts = {p: opens[p] for p in _files(source)}
    assert counts[os.path.realpath(corpus)] == 1
    assert set(counts.values()) <= {0, 1}, {p: n for p, n in counts.items() if n > 1}
    assert sum(counts.values()) > 1


def test_mtrag_plain_jsonl_corpus_opened_once(tmp_path, opens):
    source = tmp_path / "mtrag"
    shutil.copytree(DATA / "mtrag" / "mtrag-human", source / "mtrag-human")
    (source / "corpora" / "passage_level").mkdir(parents=True)
    for domain in ("clapnq", "cloud", "fiqa", "govt"):
        (source / "corpora" / "passage_level" / f"{domain}.jsonl").write_text("".join(
            json.dumps({"_id": f"{domain}-{i}", "title": "t", "text": f"passage {i}"}) + "\n" for i in range(20)))
    summary = export_benchmark("mtrag", tmp_path / "out", options={"source": str(source)})
    assert summary.rows["clapnq-corpus"]["test"] == 20 and summary.rows["all-corpus"]["test"] == 80
    corpora = _files(source / "corpora")
    assert len(corpora) == 4 and {p: opens[p] for p in corpora} == dict.fromkeys(corpora, 1)


def test_mtr_bench_splits_parsed_and_opened_once(tmp_path, opens, monkeypatch):
    from convrag.builders import mtr_bench_source as ms
    from tests.mtr_bench_fixture import write_fixture

    fx = write_fixture(tmp_path / "src", fmt="jsonl")
    parsed = Counter()
    real = ms.Parser.conversations
    monkeypatch.setattr(ms.Parser, "conversations",
                        lambda self, files: parsed.update([self.split]) or real(self, files))  # fmt: skip
    summary = export_benchmark("mtr-bench", tmp_path / "out", options={"source": str(fx["folder"])})
    assert {"queries", "qrels", "candidates", "conversations", "cluster-corpus", "corpus"} <= set(summary.rows)
    assert parsed == {"test": 1, "train": 1}  # six configs share one parse of each split
    files = {name: os.path.realpath(path) for name, path in fx["files"].items()}
    assert opens[files["test"]] == 1 and opens[files["train"]] == 1
    # the corpus: streamed once by its config, plus one line count (shared by all configs) for the gold check
    assert 1 <= opens[files["corpus"]] <= 2
