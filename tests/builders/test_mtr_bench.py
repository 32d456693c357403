"""MTR-Bench builder on a hand-written source in the published schema (tests/mtr_bench_fixture.py)."""

from __future__ import annotations

import copy
import json
import random
import time
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from convrag.builders import mtr_bench_source as ms
from convrag.builders.mtr_bench import VIEW_NAMES, MTRBench, iter_corpus
from convrag.core.errors import DataError
from convrag.hub.export import export_benchmark, read_manifest
from tests.mtr_bench_fixture import CORPUS_SCHEMA, SCHEMA_12, write_fixture, write_table

HISTORY_EVENT = "turns whose history differs from the previous turn's messages (kept as given)"
BEYOND_EVENT = "gold document_idx beyond the corpus's last row (qrels kept)"


def _load(folder: Path, config: str, split: str = "test") -> list[dict]:
    return datasets.load_dataset(str(folder), config, split=split).to_list()


def _export(tmp: Path, source, **options) -> Path:
    export_benchmark("mtr-bench", tmp, options={"source": source, **options})
    return tmp


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("mtr")
    fx = write_fixture(root / "src")
    return fx, _export(root / "out", str(fx["folder"]))


def _qid(fx: dict, split: str, index: int) -> str:
    turns = fx["turns"]
    return f"{fx['ids'][split][index // turns]}:{index % turns + 1}"


def test_every_config_loads_with_expected_rows(built):
    fx, out = built
    counts = {"conversations": (4, 2), "queries": (48, 24), "qrels": (48, 24), "candidates": (48, 24),
              "cluster-corpus": (32, 16)}  # fmt: skip
    for config, (test, train) in counts.items():
        assert len(_load(out, config)) == test, config
        assert len(_load(out, config, "train")) == train, config
    assert len(_load(out, "corpus")) == len(fx["corpus"]) == 50
    manifest = read_manifest(out)
    assert manifest["benchmark"] == "mtr-bench"
    assert manifest["evaluation"]["report"] == "mtr-bench"
    assert manifest["evaluation"]["corpus"] == {"full": "corpus", "cluster": "cluster-corpus"}
    assert manifest["report"]["counts"]["conversations: test"] == 4
    assert HISTORY_EVENT not in manifest["report"]["counts"]
    assert "Wikipedia" in (out / "README.md").read_text(encoding="utf-8")


def test_ids_unique_and_stable(built, tmp_path):
    fx, out = built
    again = _export(tmp_path / "again", str(fx["folder"]))
    for config in VIEW_NAMES:
        for split in ("test", "train") if config != "corpus" else ("test",):
            first, second = _load(out, config, split), _load(again, config, split)
            assert first == second, config
            key = "conversation_id" if config == "conversations" else "query-id" if "query-id" in first[0] else "_id"
            ids = [r[key] for r in first]
            assert len(set(ids)) == len(ids), config
    assert [c["conversation_id"] for c in _load(out, "conversations")] == fx["ids"]["test"]
    assert [c["conversation_id"] for c in _load(out, "conversations", "train")] == ["train-00000", "train-00001"]


@pytest.mark.parametrize("split", ["test", "train"])
def test_turn_views_match_the_source_rows(built, split):
    fx, out = built
    queries, qrels = _load(out, "queries", split), _load(out, "qrels", split)
    candidates = _load(out, "candidates", split)
    for i, src in enumerate(fx["rows"][split]):
        qid, m = _qid(fx, split, i), src["messages"]
        q = queries[i]
        assert q["_id"] == qid and q["conversation_id"] == qid.split(":")[0] and q["turn"] == src["turn"]
        assert q["text"] == m[-2]["content"] and q["answer"] == m[-1]["content"]
        assert q["history"] == m[:-2]
        assert q["cluster_idx"] == src["cluster_idx"] and q["switch_turn"] == src["switch_turn"]
        assert qrels[i] == {"query-id": qid, "corpus-id": str(src["ground_truth_document_idx"]), "score": 1}
        assert candidates[i] == {"query-id": qid, "corpus-ids": [str(c["document_idx"]) for c in src["ctxs"]]}


def test_switch_phases_of_a_spliced_conversation(built):
    fx, out = built
    rows = [q for q in _load(out, "queries") if q["conversation_id"] == "test-00002"]
    k = fx["switch"]["test-00002"]
    assert [q["switch_phase"] for q in rows] == (["before switch"] * k + ["first turn after switch"]
                                                 + ["after switch"] * (12 - k - 1))  # fmt: skip
    assert {q["cluster_idx"] for q in rows[:k]} == {5402} and {q["cluster_idx"] for q in rows[k:]} == {7731}
    assert {q["switch_phase"] for q in _load(out, "queries") if q["conversation_id"] == "test-00000"} == {"no switch"}
    convs = {c["conversation_id"]: c for c in _load(out, "conversations")}
    assert convs["test-00002"]["switch_turn"] == k and convs["test-00001"]["switch_turn"] == -1


def test_conversations_view(built):
    fx, out = built
    conv = _load(out, "conversations")[3]
    src = fx["rows"]["test"][36:48]
    assert conv["conversation_id"] == "test-00003" and conv["domain"] == "" and conv["n_turns"] == 12
    for turn, row in zip(conv["turns"], src, strict=True):
        assert turn == {"turn": row["turn"], "speaker": "user", "text": row["messages"][-2]["content"],
                        "answer": row["messages"][-1]["content"],
                        "gold_doc_id": str(row["ground_truth_document_idx"]), "cluster_idx": row["cluster_idx"]}


def test_corpus_and_cluster_corpus(built):
    fx, out = built
    corpus = _load(out, "corpus")
    assert [r["_id"] for r in corpus] == [str(i) for i in range(50)]
    assert [(r["title"], r["text"], r["url"]) for r in corpus] == [(c["title"], c["text"], c["url"])
                                                                  for c in fx["corpus"]]  # fmt: skip
    for split in ("test", "train"):
        union = sorted({c["document_idx"] for r in fx["rows"][split] for c in r["ctxs"]})
        cluster = _load(out, "cluster-corpus", split)
        assert [r["_id"] for r in cluster] == [str(i) for i in union]
        assert all(r == corpus[int(r["_id"])] for r in cluster)


def test_legacy_8turn_release(tmp_path):
    fx = write_fixture(tmp_path / "src", release="8turn")
    out = _export(tmp_path / "out", str(fx["folder"]), release="8turn")
    queries = _load(out, "queries")
    assert len(queries) == 16 and len(_load(out, "queries", "train")) == 8
    assert [c["conversation_id"] for c in _load(out, "conversations")] == ["test-00000", "test-00001"]
    for q, src in zip(queries, fx["rows"]["test"], strict=True):
        assert q["turn"] == len(src["messages"]) // 2 and q["switch_turn"] == 4
        assert q["text"] == src["messages"][-2]["content"] and q["cluster_idx"] == src["cluster_idx"]
    assert [q["_id"] for q in queries[:9]][-2:] == ["test-00000:8", "test-00001:1"]
    assert [q["switch_phase"] for q in queries[3:6]] == ["before switch", "first turn after switch", "after switch"]
    assert len(_load(out, "corpus")) == 50
    with pytest.raises(DataError, match="release=8turn") as err:
        _export(tmp_path / "as12", {"test": str(fx["files"]["test"])}, release="12turn")
    assert (err.value.source, err.value.line) == (str(fx["files"]["test"]), 1)


def test_jsonl_source_equals_parquet(built, tmp_path):
    fx, out = built
    jfx = write_fixture(tmp_path / "src", fmt="jsonl")
    jout = _export(tmp_path / "out", str(jfx["folder"]))
    for config in VIEW_NAMES:
        for split in ("test", "train") if config != "corpus" else ("test",):
            assert _load(jout, config, split) == _load(out, config, split), config


def test_named_sources_and_skipped_parts(built, tmp_path):
    fx, _ = built
    source = {"test": str(fx["files"]["test"])}
    assert MTRBench.default_configs({"source": source}) == ["conversations", "queries", "qrels", "candidates",
                                                             "cluster-corpus"]  # fmt: skip
    summary = export_benchmark("mtr-bench", tmp_path / "a", options={"source": source})
    assert set(summary.rows["queries"]) == {"test"}
    counts = summary.report["counts"]
    assert counts["configs skipped: the source lacks their files"] == 1
    assert counts["splits skipped: the source lacks their files"] == 1
    assert any(k.startswith("gold ids not checked") for k in counts)
    small = write_table(tmp_path / "small.parquet", fx["corpus"][:10], CORPUS_SCHEMA)
    summary = export_benchmark("mtr-bench", tmp_path / "b", configs=["qrels"],
                               options={"source": {**source, "corpus": str(small)}})  # fmt: skip
    beyond = {r["query-id"] for r in _load(tmp_path / "b", "qrels") if int(r["corpus-id"]) >= 10}
    assert summary.report["counts"][BEYOND_EVENT] == len(beyond) > 0


def test_history_mismatch_is_counted_not_fatal(built, tmp_path):
    fx, _ = built
    rows = copy.deepcopy(fx["rows"]["test"])
    # a rewrite of turn 1 carried into one later row's history only
    rows[3]["messages"] = [{"content": "how high is etna", "role": "user"}, *rows[3]["messages"][1:]]
    path = write_table(tmp_path / "test.parquet", rows, SCHEMA_12)
    summary = export_benchmark("mtr-bench", tmp_path / "out", configs=["queries"], options={"source": str(path.parent)})
    assert summary.report["counts"][HISTORY_EVENT] == 2
    assert summary.report["examples"][HISTORY_EVENT] == ["test-00000:4", "test-00000:5"]


def test_default_source_is_the_hub(monkeypatch, tmp_path):
    fx = write_fixture(tmp_path / "hub", layout="hub")
    calls = []

    def fake_snapshot(repo_id, repo_type, allow_patterns, local_files_only=False):
        calls.append((repo_id, repo_type, tuple(allow_patterns)))
        return str(fx["folder"] / ("MTR-DOCUMENT" if repo_id.endswith("MTR-DOCUMENT") else "release"))

    monkeypatch.setattr(ms, "snapshot_download", fake_snapshot)
    summary = export_benchmark("mtr-bench", tmp_path / "out", configs=["qrels", "corpus"])
    assert summary.rows == {"qrels": {"test": 48, "train": 24}, "corpus": {"test": 50}}
    assert ("OkayestProgrammer/mtr-qwen35-fp8-12turn", "dataset", ("*.parquet",)) in calls
    assert ("OkayestProgrammer/MTR-DOCUMENT", "dataset", ("*.parquet",)) in calls


def _bad_source(tmp_path: Path, edit, fmt: str = "jsonl") -> Path:
    fx = write_fixture(tmp_path / "bad", fmt=fmt)
    rows = copy.deepcopy(fx["rows"]["test"])
    edit(rows)
    schema = SCHEMA_12.append(pa.field("conversation_id", pa.string())) if "conversation_id" in rows[0] else SCHEMA_12
    write_table(fx["files"]["test"], rows, schema, fmt)
    return fx["files"]["test"]


def _swap_roles(rows):
    rows[13]["messages"] = [*rows[13]["messages"][:2], {"content": "who was he", "role": "assistant"},
                            *rows[13]["messages"][3:]]  # fmt: skip


def _gold_mismatch(rows):
    other = next(c for c in rows[20]["ctxs"] if c["document_idx"] != rows[20]["ground_truth_document_idx"])
    rows[20]["ground_truth_ctx"] = other


def _duplicate_id(rows):
    for i, r in enumerate(rows):
        r["conversation_id"] = f"c{i // 12}" if i < 36 else "c1"


def _turn_gap(rows):
    del rows[40]  # turn 5 of the 4th conversation is lost: row 41 holds turn 6 after turn 4


def _gold_outside_pool(rows):
    pool = {c["document_idx"] for c in rows[2]["ctxs"]}
    outside = next(i for i in range(50) if i not in pool)
    rows[2]["ground_truth_document_idx"] = outside
    rows[2]["ground_truth_ctx"] = {**rows[2]["ground_truth_ctx"], "document_idx": outside}


@pytest.mark.parametrize("edit,row,message", [
    (_swap_roles, 14, "alternate user/assistant"),
    (_gold_mismatch, 21, "ground_truth_ctx.document_idx"),
    (_duplicate_id, 37, "duplicate conversation_id 'c1'"),
    (_turn_gap, 41, "turn gap"),
    (_gold_outside_pool, 3, "not among the turn's ctxs"),
])  # fmt: skip
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_bad_rows_name_file_and_row(tmp_path, edit, row, message, fmt):
    path = _bad_source(tmp_path, edit, fmt)
    with pytest.raises(DataError, match=message) as err:
        export_benchmark("mtr-bench", tmp_path / "out", configs=["queries"], options={"source": str(path.parent)})
    assert (err.value.source, err.value.line) == (str(path), row)
    assert f"{path}:{row}:" in str(err.value)


def test_bad_files_name_file_and_line(tmp_path):
    path = _bad_source(tmp_path, lambda rows: None)
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(lines[:4] + ['{"messages": [}'] + lines[5:]) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="invalid JSON") as err:
        export_benchmark("mtr-bench", tmp_path / "o1", configs=["qrels"], options={"source": str(path.parent)})
    assert (err.value.source, err.value.line) == (str(path), 5)
    path.write_bytes(b"\n".join(line.encode() for line in lines[:2]) + b"\n{\"messages\": \"\xff\"}\n")
    with pytest.raises(DataError, match="not UTF-8") as err:
        export_benchmark("mtr-bench", tmp_path / "o2", configs=["qrels"], options={"source": str(path.parent)})
    assert err.value.line == 3
    with pytest.raises(DataError, match="does not exist") as err:
        export_benchmark("mtr-bench", tmp_path / "o3", options={"source": str(tmp_path / "nowhere")})
    assert err.value.source == str(tmp_path / "nowhere")
    with pytest.raises(DataError, match="does not exist"):
        export_benchmark("mtr-bench", tmp_path / "o4", options={"source": {"test": str(tmp_path / "no.parquet")}})


def test_conflicting_document_text_is_an_error(tmp_path):
    def edit(rows):
        rows[30]["ctxs"] = copy.deepcopy(rows[30]["ctxs"])
        rows[30]["ctxs"][3]["text"] = "A different text under the same document_idx."

    path = _bad_source(tmp_path, edit, "parquet")
    with pytest.raises(DataError, match="different title/text/url") as err:
        export_benchmark("mtr-bench", tmp_path / "out", configs=["cluster-corpus"],
                         options={"source": str(path.parent)})
    assert err.value.line == 31


def _text(i: int) -> str:
    return random.Random(i).randbytes(200).hex()  # incompressible: Parquet bytes ~ text bytes


def test_corpus_config_streams_a_large_corpus(built, tmp_path, monkeypatch):
    fx, _ = built
    n = 20_000
    path = tmp_path / "corpus.parquet"
    with pq.ParquetWriter(path, CORPUS_SCHEMA) as writer:
        for start in range(0, n, 1_000):
            writer.write_table(pa.Table.from_pylist([{"id": f"p{i}", "url": f"https://en.wikipedia.org/wiki/P{i}",
                                                      "title": f"Passage {i}", "text": _text(i), "naive_quality": 0,
                                                      "edu_quality": 2.5} for i in range(start, start + 1_000)],
                                                    schema=CORPUS_SCHEMA))  # fmt: skip
    peak = 0
    for idx, *_ in iter_corpus([str(path)]):  # Arrow memory stays near one row group, not the file
        peak = max(peak, pa.total_allocated_bytes()) if idx % 250 == 0 else peak
    assert peak < 0.4 * path.stat().st_size
    sizes = []
    original = pq.ParquetFile.iter_batches

    def spy(self, *args, **kwargs):
        sizes.append(kwargs.get("batch_size"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    started = time.perf_counter()
    summary = export_benchmark("mtr-bench", tmp_path / "out", configs=["corpus"],
                               options={"source": {"test": str(fx["files"]["test"]), "corpus": str(path)}})
    assert time.perf_counter() - started < 20
    assert summary.rows == {"corpus": {"test": n}} and summary.report["counts"]["corpus documents"] == n
    assert sizes and max(sizes) <= 2048  # read in batches, never as one table
    corpus = datasets.load_dataset(str(tmp_path / "out"), "corpus", split="test")
    for i in (0, 1, 999, 1_000, 19_999):
        assert corpus[i]["_id"] == str(i) and corpus[i]["title"] == f"Passage {i}"
        assert corpus[i]["text"] == _text(i) and corpus[i]["url"].endswith(f"P{i}")


def test_evaluation_profile_is_declared():
    profile = MTRBench.EVALUATION
    assert profile.report == "mtr-bench" and profile.pool == "config:candidates" and profile.scale == 100.0
    assert profile.groups == ("turn", "switch_phase") and profile.top_k == 100
    assert json.loads(json.dumps(profile.to_dict()))["labels"]["Recall@1"] == "R@1"


@pytest.mark.parametrize("edit,row,message", [
    (lambda rows: rows[5].update(ground_truth_document_idx=str(rows[5]["ground_truth_document_idx"])), 6,
     "'ground_truth_document_idx' must be int"),
    (lambda rows: rows[7].update(messages=[*rows[7]["messages"][:-2], {"content": " ", "role": "user"},
                                           rows[7]["messages"][-1]]), 8, "empty query"),
    (lambda rows: rows[9].update(ctxs=[{**rows[9]["ctxs"][0], "title": None}, *rows[9]["ctxs"][1:]]), 10,
     "missing field 'ctxs\\[0\\].title'"),
])  # fmt: skip
def test_wrong_types_and_empty_queries(tmp_path, edit, row, message):
    path = _bad_source(tmp_path, edit)
    with pytest.raises(DataError, match=message) as err:
        export_benchmark("mtr-bench", tmp_path / "out", configs=["qrels"], options={"source": str(path.parent)})
    assert (err.value.source, err.value.line) == (str(path), row)


def test_legacy_incomplete_block(tmp_path):
    fx = write_fixture(tmp_path / "src", release="8turn", fmt="jsonl")
    path = fx["files"]["test"]
    path.write_text("".join(path.read_text(encoding="utf-8").splitlines(keepends=True)[:12]), encoding="utf-8")
    with pytest.raises(DataError, match="incomplete conversation: 4 rows") as err:
        _export(tmp_path / "out", str(fx["folder"]), release="8turn")
    assert (err.value.source, err.value.line) == (str(path), 12)


def test_a_corpus_out_of_document_idx_order_is_reported(tmp_path):
    """Two corpus rows swapped: the row index no longer equals document_idx, and the build report says where."""
    fx = write_fixture(tmp_path / "src")
    path = fx["files"]["corpus"]
    rows = pq.read_table(path).to_pylist()
    rows[0], rows[17] = rows[17], rows[0]
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(path)), path)
    out = export_benchmark("mtr-bench", tmp_path / "out", configs=["corpus"], options={"source": str(tmp_path / "src")})
    from convrag.builders.mtr_bench import MISALIGNED

    assert out.report["counts"][MISALIGNED] == 2 and out.report["examples"][MISALIGNED] == ["0", "17"]
