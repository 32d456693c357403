"""RECOR builder: the real pilot sample in ../shared/data/recor/sample (read in place) and a synthetic release."""

from __future__ import annotations

import json

import datasets
import pytest

from convrag.builders.recor import RECOR
from convrag.core.errors import DataError
from convrag.hub.export import export_benchmark, read_manifest
from tests.conftest import DATA

SAMPLE = DATA / "recor" / "sample"
MISSING = "gold documents missing from every corpus (qrels kept)"


def _load(folder, config):
    return datasets.load_dataset(str(folder), config, split="test")


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    out = tmp_path_factory.mktemp("recor") / "sample"
    return export_benchmark("recor", out, options={"source": str(SAMPLE)})


def test_sample_counts(sample):
    rows = {k: v["test"] for k, v in sample.rows.items()}
    assert rows["all-conversations"] == 4
    assert rows["all-queries"] == 13
    assert rows["all-qrels"] == 32
    assert rows["all-corpus"] == 15
    expected_qrels = sum(1 for line in (SAMPLE / "qrels.txt").read_text().splitlines() if line.strip())
    assert rows["all-qrels"] == expected_qrels
    for d, (convs, turns) in {"law": (1, 3), "drones": (1, 4), "biology": (1, 3), "earth_science": (1, 3)}.items():
        assert rows[f"{d}-conversations"] == convs and rows[f"{d}-queries"] == turns
    # domains absent from the sample are skipped, not failed
    assert "politics-queries" not in rows
    assert sample.report["counts"]["configs skipped: the source lacks their files"] == 7 * 4
    assert sample.report["counts"].get(MISSING, 0) == 0
    for config, per_split in sample.rows.items():
        assert len(_load(sample.out_dir, config)) == per_split["test"], config
    assert read_manifest(sample.out_dir)["benchmark"] == "recor"


def test_sample_ids_and_qrels_match_the_shipped_trec_file(sample):
    queries = _load(sample.out_dir, "all-queries")
    ids = queries["_id"]
    assert len(set(ids)) == len(ids) == 13
    assert "biology:2:1" in ids and "drones:ex_3025:4" in ids
    qrels = _load(sample.out_dir, "all-qrels")
    ours = {(q["query-id"], q["corpus-id"]) for q in qrels}
    shipped = set()
    by_conv = {q["conversation_id"].split(":", 1)[1]: q["domain"] for q in queries}
    for line in (SAMPLE / "qrels.txt").read_text().splitlines():
        qid, _, doc, score = line.split()
        cid, turn = qid.split("#turn")
        shipped.add((f"{by_conv[cid]}:{cid}:{turn}", doc))
        assert score == "1"
    assert ours == shipped
    corpus_ids = set(_load(sample.out_dir, "all-corpus")["_id"])
    assert {doc for _, doc in ours} <= corpus_ids


def test_sample_record_field_by_field(sample):
    raw = [json.loads(line) for line in (SAMPLE / "benchmark.jsonl").read_text().splitlines() if line.strip()]
    src = next(c for c in raw if c["id"] == "ex_111149")
    conv = next(c for c in _load(sample.out_dir, "law-conversations") if c["id"] == "ex_111149")
    assert conv["conversation_id"] == "law:ex_111149" and conv["domain"] == "law" and conv["task"] == "law"
    assert conv["original_query"] == src["original_query"]
    assert conv["original_answer"] == src["original_answer"]
    assert conv["metadata"] == src["metadata"]
    assert len(conv["turns"]) == 3
    for got, want in zip(conv["turns"], src["turns"], strict=True):
        assert got["turn"] == want["turn_id"] and got["speaker"] == "user" and got["text"] == want["query"]
        assert got["answer"] == want["answer"] and got["gold_doc_ids"] == want["gold_doc_ids"]
        assert got["conversation_history"] == want["conversation_history"]
        assert got["subquestion_reasoning"] == want["subquestion_reasoning"]
        meta = want["subquestion_reasoning_metadata"]
        assert got["target_information"] == meta["target_information"]
        assert got["relevance_signals"] == meta["relevance_signals"]
        assert got["irrelevance_signals"] == meta["irrelevance_signals"]
    query = next(q for q in _load(sample.out_dir, "law-queries") if q["_id"] == "law:ex_111149:2")
    turn = src["turns"][1]
    assert query == {
        "_id": "law:ex_111149:2",
        "text": turn["query"],
        "domain": "law",
        "conversation_id": "law:ex_111149",
        "turn": 2,
        "history": turn["conversation_history"],
        "reasoning": turn["subquestion_reasoning"],
    }
    docs = {d["_id"]: d for d in _load(sample.out_dir, "law-corpus")}
    shipped = json.loads((SAMPLE / "documents.jsonl").read_text().splitlines()[0])
    assert docs[shipped["doc_id"]] == {
        "_id": shipped["doc_id"],
        "title": "",
        "text": shipped["content"],
        "domain": "law",
    }


# ---------------------------------------------------------------- synthetic release


def _turn(tid, gold):
    return {
        "turn_id": tid,
        "query": f"q{tid}",
        "answer": f"a{tid}",
        "gold_doc_ids": gold,
        "conversation_history": "No previous conversation." if tid == 1 else "Q: q1\nA: a1",
        "subquestion_reasoning": f"r{tid}",
        "subquestion_reasoning_metadata": {
            "target_information": "t",
            "relevance_signals": ["x"],
            "irrelevance_signals": ["y"],
        },
    }


def _conv(cid, task, turns):
    return {
        "id": cid,
        "task": task,
        "original_query": "oq",
        "original_answer": "oa",
        "turns": turns,
        "metadata": {
            "created_at": "2025-12-22",
            "gold_doc_count": 2,
            "method": "m",
            "num_turns": len(turns),
            "source": "bright",
            "version": "v",
        },
    }


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture
def release(tmp_path):
    root = tmp_path / "release"
    b, c = root / "data" / "benchmark", root / "data" / "corpus"
    _write(b / "biology_benchmark.jsonl", [_conv("1", "biology", [_turn(1, ["bio/a.txt"]), _turn(2, ["bio/b.txt"])])])
    _write(
        c / "biology_documents.jsonl",
        [
            {"doc_id": "bio/a.txt", "content": "A"},
            {"doc_id": "bio/b.txt", "content": "B"},
            {"doc_id": "bio/neg.txt", "content": "negative"},
        ],
    )
    # same bare id "1" in another domain, one gold document absent from every corpus
    _write(b / "economics_benchmark.jsonl", [_conv("1", "economics", [_turn(1, ["eco/a.txt", "eco/gone.txt"])])])
    _write(
        c / "economics_documents.jsonl",
        [{"doc_id": "eco/a.txt", "content": "E"}, {"doc_id": "eco/neg.txt", "content": "negative"}],
    )
    _write(b / "Drones_benchmark.jsonl", [_conv("ex_7", "drones", [_turn(1, ["drones_ex_7_doc_0"])])])
    _write(c / "Drones_documents.jsonl", [{"doc_id": "drones_ex_7_doc_0", "content": "D"}])
    return root


def test_synthetic_release(release, tmp_path):
    options = {"source": str(release)}
    configs = RECOR.default_configs(options)
    assert {c.split("-")[0] for c in configs} == {"all", "biology", "economics", "drones"}
    summary = export_benchmark("recor", tmp_path / "out", options=options)
    rows = {k: v["test"] for k, v in summary.rows.items()}
    assert rows["all-conversations"] == 3 and rows["all-queries"] == 4 and rows["all-qrels"] == 5
    assert rows["all-corpus"] == 6 and rows["economics-corpus"] == 2 and rows["drones-queries"] == 1
    queries = _load(summary.out_dir, "all-queries")
    assert sorted(queries["_id"]) == ["biology:1:1", "biology:1:2", "drones:ex_7:1", "economics:1:1"]
    convs = _load(summary.out_dir, "all-conversations")
    assert sorted(convs["conversation_id"]) == ["biology:1", "drones:ex_7", "economics:1"]
    assert set(_load(summary.out_dir, "drones-conversations")["task"]) == {"drones"}
    qrels = _load(summary.out_dir, "economics-qrels")
    assert sorted(qrels["corpus-id"]) == ["eco/a.txt", "eco/gone.txt"] and set(qrels["score"]) == {1}
    counts, examples = summary.report["counts"], summary.report["examples"]
    assert counts[MISSING] == 1 and examples[MISSING] == ["economics:eco/gone.txt"]
    assert counts["numeric conversation ids (BRIGHT-sourced; qualified with the domain)"] == 2
    assert any("Drones" in event and n == 1 for event, n in counts.items())
    assert counts["configs skipped: the source lacks their files"] == 8 * 4
    assert "eco/gone.txt" in read_manifest(summary.out_dir)["report"]["examples"][MISSING][0]


def test_shared_document_ids_are_qualified_in_all(release, tmp_path):
    corpus = release / "data" / "corpus"
    _write(
        corpus / "economics_documents.jsonl",
        [{"doc_id": "eco/a.txt", "content": "E"}, {"doc_id": "bio/neg.txt", "content": "other text"}],
    )
    summary = export_benchmark(
        "recor", tmp_path / "out", configs=["all-corpus", "biology-corpus"], options={"source": str(release)}
    )
    ids = _load(summary.out_dir, "all-corpus")["_id"]
    assert len(ids) == len(set(ids)) and {"biology:bio/neg.txt", "economics:bio/neg.txt"} <= set(ids)
    assert "bio/neg.txt" in _load(summary.out_dir, "biology-corpus")["_id"]


def test_malformed_line_names_file_and_line(release, tmp_path):
    path = release / "data" / "benchmark" / "economics_benchmark.jsonl"
    path.write_text(path.read_text() + "{not json\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"economics_benchmark\.jsonl:2: invalid JSON"):
        export_benchmark("recor", tmp_path / "out", configs=["economics-queries"], options={"source": str(release)})
    path.write_text(json.dumps(_conv("9", "economics", [{"query": "no id"}])) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"economics_benchmark\.jsonl:1: missing field 'turns\[0\]\.turn_id'"):
        export_benchmark("recor", tmp_path / "out2", configs=["economics-queries"], options={"source": str(release)})


def test_repeated_document_ids_in_a_corpus_file(release, tmp_path):
    corpus = release / "data" / "corpus" / "biology_documents.jsonl"
    rows = [{"doc_id": "bio/a.txt", "content": "A"}, {"doc_id": "bio/b.txt", "content": "B"},
            {"doc_id": "bio/a.txt", "content": "A"}]  # fmt: skip
    _write(corpus, rows)
    summary = export_benchmark("recor", tmp_path / "out", configs=["biology-corpus"], options={"source": str(release)})
    assert sorted(_load(summary.out_dir, "biology-corpus")["_id"]) == ["bio/a.txt", "bio/b.txt"]  # same text: once
    assert summary.report["counts"]["documents repeated in a corpus file (kept once)"] == 1
    _write(corpus, [*rows, {"doc_id": "bio/b.txt", "content": "not B"}])
    with pytest.raises(DataError, match=r"biology_documents\.jsonl:4: document 'bio/b.txt' repeated with a "
                                        r"different text \(first on line 2\)"):  # fmt: skip
        export_benchmark("recor", tmp_path / "out2", configs=["biology-corpus"], options={"source": str(release)})
