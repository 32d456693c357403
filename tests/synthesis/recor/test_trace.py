"""RECOR's appendix C example traced through the whole D&V pipeline with scripted replies, from the command
line: ``convrag synthesize recor`` (load, align, aspects, facts, turns, release), then ``convrag build recor``
and ``convrag evaluate`` on what it wrote. The replies are the stage tests' hand-written ones
(tests/dv_fixture_decompose.py, tests/dv_fixture_turns.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tests.dv_fixture_decompose as decompose
from convrag.cli import main
from convrag.llm import LLM, DiskCache, RetryPolicy
from convrag.llm.backends.fake import FakeBackend
from convrag.synthesis.engine.pipeline import StageContext
from convrag.synthesis.engine.records import read_records
from convrag.synthesis.recor import common as dv_common
from tests.dv_fixture import appendix_c_item
from tests.dv_fixture_turns import EXPECTED_GOLD, EXPECTED_SCORES, QUERIES, appendix_c_responder


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    made: list[int] = []
    respond = appendix_c_responder(fallback=decompose.replies())

    def counted(messages: list[dict[str, str]]) -> str:
        made.append(1)
        return respond(messages)

    def role_llm(spec: str | None, ctx: StageContext, concurrency: int) -> LLM:
        return LLM(FakeBackend(responder=counted), cache=DiskCache(ctx.out / "llm-cache"), report=ctx.llm_report,
                   retry=RetryPolicy(max_retries=0), max_concurrency=concurrency)

    monkeypatch.setattr(dv_common, "role_llm", role_llm)
    return made


def _report(out: Path, stage: str) -> dict:
    return json.loads((out / stage / "report.json").read_text(encoding="utf-8"))


def test_appendix_c_traced_from_input_file_to_scored_benchmark(tmp_path, calls, capsys):
    source = tmp_path / "items.jsonl"
    item = appendix_c_item()
    source.write_text(json.dumps({k: v for k, v in item.items() if k != "origin"}) + "\n", encoding="utf-8")
    out = tmp_path / "dv"
    command = ["synthesize", "recor", "--input", str(source), "--out", str(out), "--no-progress", "--llm", "scripted"]
    assert main(command) == 0
    printed = capsys.readouterr().out
    assert f"Build it: convrag build recor --source {out}/release --out BUILT" in printed

    # aspects: six accepted (one overlap and one meta candidate rejected); facts: disposable soma 0/2 -> dropped
    aspects = _report(out, "aspects")["figures"]
    assert aspects["aspects: aspect accepted"] == 6
    assert sum(v for k, v in aspects.items() if k.startswith("aspects: aspect rejected")) == 2
    [after_aspects] = read_records(out / "aspects")
    assert [a["name"] for a in after_aspects["aspects"]] == [decompose.PR, decompose.MA, decompose.LO,
                                                             decompose.AP, decompose.DS, decompose.EM]
    facts = _report(out, "facts")["figures"]
    assert facts["facts: aspect rejected: no verified fact"] == 1
    assert (facts["facts: facts extracted"], facts["facts: facts verified"]) == (9, 7)
    [after_facts] = read_records(out / "facts")
    assert [a["name"] for a in after_facts["aspects"]] == decompose.FINAL_ASPECTS
    # turns: five, turn 4 scored 7.15 / 5.40 / 3.65 by our formula, the first two selected
    [after_turns] = read_records(out / "turns")
    turns = after_turns["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3, 4, 5] and [t["query"] for t in turns] == QUERIES
    assert [[round(s["score"], 2) for s in t["doc_scores"]] for t in turns] == EXPECTED_SCORES
    assert turns[3]["gold_doc_ids"] == ["Aging_theory_12.txt", "Evolution_38.txt"]
    assert [t["gold_doc_ids"] for t in turns] == EXPECTED_GOLD
    for stage in ("aspects", "turns"):  # the default profile, recorded with the stage's parameters
        assert json.loads((out / stage / "params.json").read_text())["params"]["profile"] == "authors"

    # a rerun over the finished folder makes no call; --redo turns is answered from the cache alone
    made = len(calls)
    assert main(command) == 0 and len(calls) == made
    assert main([*command, "--redo", "turns"]) == 0 and len(calls) == made
    assert list(read_records(out / "turns"))[0]["turns"] == turns

    built = tmp_path / "built"
    assert main(["build", "recor", "--source", str(out / "release"), "--out", str(built)]) == 0
    convs = [json.loads(line) for line in
             (out / "release" / "data" / "benchmark" / "biology_benchmark.jsonl").read_text().splitlines()]
    assert len(convs) == 1 and convs[0]["metadata"]["num_turns"] == 5
    assert convs[0]["turns"][3]["subquestion_reasoning_metadata"]["relevance_signals"]
    assert main(["evaluate", str(built), "--retrievers", "bm25", "--strategies", "baseline,history+reasoning",
                 "--bootstrap", "10", "--no-progress", "--out", str(tmp_path / "results")]) == 0
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    assert results["n_turns"] == {"biology": 5} and len(results["per_turn"]["bm25"]["baseline"]) == 5
