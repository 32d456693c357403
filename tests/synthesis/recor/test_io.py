"""RECOR D&V inputs and output: the load stage's three formats (JSONL, BRIGHT with a documents file, MTRAG
conversations) with their checks, and the release stage's files, which the RECOR builder builds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convrag.cli import main
from convrag.core.errors import ConvragError, DataError
from convrag.hub.export import export_benchmark
from convrag.synthesis.engine.pipeline import Pipeline, StageReport, write_json_atomic
from convrag.synthesis.engine.records import read_records, write_shard
from convrag.synthesis.recor.inputs import Load
from convrag.synthesis.recor.release import NO_HISTORY, Release
from tests.conftest import DATA
from tests.dv_fixture import appendix_c_item

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
BRIGHT = DATA / "bright" / "examples" / "biology.jsonl"
MTRAG = DATA / "mtrag" / "mtrag-human" / "conversations" / "conversations.json"


def _item(i: int, **extra):
    return {"id": f"q{i}", "query": f"Why does thing {i} happen?", "answer": f"Because of reason {i}.",
            "documents": [{"doc_id": f"d{i}", "text": f"Reason {i} explains thing {i}."}], "domain": "law", **extra}


def _write(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def _load(tmp_path: Path, source: Path, **options) -> tuple[list[dict], StageReport]:
    out = tmp_path / "run"
    [report] = Pipeline("t", [Load(str(source), **options)]).run(out, progress=False)
    return list(read_records(out / "load")), report


def test_jsonl_items_are_read_with_negatives(tmp_path):
    negatives = _write(tmp_path / "neg.jsonl", [{"doc_id": "n1", "text": "Unrelated statute text."},
                                                {"doc_id": "n2", "text": "Politics only.", "domain": "politics"}])
    source = _write(tmp_path / "items.jsonl", [_item(1, reasoning="Needs the reason."),
                                               _item(2, negatives=[{"doc_id": "own", "text": "Own negative."}])])
    items, report = _load(tmp_path, source, negatives=str(negatives))
    assert [i["id"] for i in items] == ["q1", "q2"] and report.records_out == 2 and report.dropped == {}
    assert items[0]["reasoning"] == "Needs the reason." and items[0]["origin"].endswith("items.jsonl:1")
    assert [d["doc_id"] for d in items[0]["negatives"]] == ["n1"]
    assert [d["doc_id"] for d in items[1]["negatives"]] == ["own", "n1"]


@pytest.mark.parametrize(("row", "message"), [
    ({**_item(1), "answer": ""}, "'answer' must be a non-empty string"),
    ({**_item(1), "domain": "astrology"}, "not one of RECOR's"),
    ({**_item(1), "documents": []}, "'documents' must be a non-empty list"),
    ({**_item(1), "documents": [{"doc_id": "a", "text": "x"}, {"doc_id": "a", "text": "y"}]}, "repeated in the item"),
    ({**_item(1), "id": 1.5}, "'id' must be a non-empty string"),
    ("{not json", "invalid JSON"),
])
def test_bad_jsonl_lines_name_file_and_line(tmp_path, row, message):
    source = _write(tmp_path / "items.jsonl", [_item(0), row])
    with pytest.raises(DataError) as err:
        _load(tmp_path, source)
    assert message in str(err.value) and "items.jsonl:2:" in str(err.value)


def test_duplicate_item_ids_are_refused(tmp_path):
    source = _write(tmp_path / "items.jsonl", [_item(1), _item(1)])
    with pytest.raises(DataError, match="repeated \\(first at line 1\\)"):
        _load(tmp_path, source)


def test_cli_exit_2_on_bad_input(tmp_path, capsys):
    source = _write(tmp_path / "items.jsonl", [{**_item(1), "query": 3}])
    code = main(["synthesize", "recor", "--input", str(source), "--out", str(tmp_path / "o"), "--stages", "load",
                 "--no-progress"])
    assert code == 2 and "items.jsonl" in capsys.readouterr().err


def test_bright_examples_with_a_documents_file(tmp_path):
    docs = FIXTURES / "bright_biology_documents.jsonl"
    items, report = _load(tmp_path, BRIGHT, input_format="bright", documents=str(docs))
    assert sorted(i["id"] for i in items) == ["biology-22", "biology-38"]
    menthol = next(i for i in items if i["id"] == "biology-22")
    assert menthol["domain"] == "biology" and menthol["reasoning"] and "TRPM8" in menthol["answer"]
    assert sorted(d["doc_id"] for d in menthol["documents"]) == ["mints_make_your_mouth_feel_cold/Menthol_2.txt",
                                                                 "mints_make_your_mouth_feel_cold/Menthol_6.txt"]
    assert report.records_in == 103 and report.dropped == {"load: gold documents not in the documents file": 101}
    items, _ = _load(tmp_path / "b", BRIGHT, input_format="bright", documents=str(docs), limit=1)
    assert [i["id"] for i in items] == ["biology-22"]
    with pytest.raises(ConvragError, match="needs --option documents"):
        _load(tmp_path / "c", BRIGHT, input_format="bright")


def test_mtrag_answerable_turns_become_items(tmp_path):
    items, report = _load(tmp_path, MTRAG, input_format="mtrag", domain="law")
    assert items and all(i["domain"] == "law" and i["documents"] and i["answer"].strip() for i in items)
    assert report.records_in == report.records_out + sum(report.dropped.values())
    assert set(report.dropped) <= {"load: MTRAG turn not answerable (or partial)",
                                   "load: MTRAG turn without passages or text"}
    assert report.dropped["load: MTRAG turn not answerable (or partial)"] > 0
    with pytest.raises(ConvragError, match="needs --option domain"):
        _load(tmp_path / "b", MTRAG, input_format="mtrag")


def _turn(n: int, gold: list[str]) -> dict:
    return {"turn": n, "aspect": f"aspect {n}", "sub_question": f"What is part {n}?", "query": f"And part {n}?",
            "answer": f"Part {n} is explained here. It matters.", "gold_doc_ids": gold, "doc_scores": [],
            "subquestion_reasoning": f"Find documents on part {n}.",
            "subquestion_reasoning_metadata": {"target_information": f"part {n}", "relevance_signals": ["p"],
                                               "irrelevance_signals": ["q"]}}


def test_release_files_build_with_the_recor_builder(tmp_path):
    out = tmp_path / "run"
    first = appendix_c_item("aging-0")
    second = appendix_c_item("aging-1")
    second["documents"][0]["text"] = "Another text under the same id."
    rows = [{**first, "turns": [_turn(1, ["Aging_theory_12.txt"]), _turn(2, ["Evolution_38.txt"]),
                                _turn(3, ["Genetics_91.txt", "Evolution_38.txt"])]},
            {**second, "turns": [_turn(1, ["Aging_theory_12.txt"]), _turn(2, ["Genetics_91.txt"]),
                                 _turn(3, ["Evolution_38.txt"])]}]
    (out / "turns").mkdir(parents=True)
    write_shard(out / "turns" / "part-00000.parquet", rows, {"records_in": 2, "first": "aging-0", "last": "aging-1"})
    write_json_atomic(out / "turns" / "report.json", StageReport("turns").to_dict())
    [report] = Pipeline("t", [Release("items.jsonl")]).run(out, progress=False)
    bench = out / "release" / "data" / "benchmark" / "biology_benchmark.jsonl"
    convs = [json.loads(line) for line in bench.read_text().splitlines()]
    assert [c["id"] for c in convs] == ["aging-0", "aging-1"] and convs[0]["task"] == "biology"
    assert convs[0]["metadata"]["num_turns"] == 3 and convs[0]["metadata"]["gold_doc_count"] == 3
    assert convs[0]["turns"][0]["conversation_history"] == NO_HISTORY
    assert convs[0]["turns"][1]["conversation_history"].startswith("Q: And part 1?\nA: Part 1 is explained")
    assert convs[1]["turns"][0]["gold_doc_ids"] == ["aging-1_Aging_theory_12.txt"]
    assert report.figures["document ids qualified with their item id (same id, other text)"] == 1
    summary = export_benchmark("recor", tmp_path / "built", options={"source": str(out / "release")})
    counts = {k: v["test"] for k, v in summary.rows.items()}
    assert counts["biology-conversations"] == 2 and counts["biology-queries"] == 6 and counts["biology-qrels"] == 7
    assert counts["biology-corpus"] == 5  # 3 documents + the qualified one + 1 negative
