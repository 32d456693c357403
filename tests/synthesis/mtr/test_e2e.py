"""The whole MTR-Pipeline through the embedded local model on real cited MTRAG passages (the ClapNQ ones): curate,
cluster, converse, polish, assemble; killed with SIGKILL while the agents write, resumed, then built with
``convrag build mtr-bench``, scored with ``convrag evaluate`` and audited with ``convrag audit``.

SmolLM2-135M only proves the plumbing here: nothing below measures the quality of what it writes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from convrag.cli import main
from convrag.synthesis.engine.records import read_records
from tests.conftest import PLACEHOLDER_JUDGE, build_mtrag

pytestmark = pytest.mark.slow

#: 3 conversations x 3 turns (switch_ratio=1: two complete ones make a spliced pair) with short prompts, so the local
#: model gets through them in a few minutes: it reads prompts at ~110 tokens/s on 2 cores, so chunks of at most 1,024
#: characters (also what the audit's completeness judge sees: the turn's whole pool), 3 documents of 200 characters
#: for the Questioner, earlier answers cut to 150 characters; the cluster stage embeds the first 32 tokens of a chunk
SMALL = ["--option", "chunk_size=1024", "--option", "max_seq_length=32", "--option", "conversations=3",
         "--option", "turns=3", "--option", "min_turns=1", "--option", "documents_per_turn=3",
         "--option", "questioner_doc_chars=200", "--option", "questioner_history_chars=150",
         "--option", "responder_history_chars=150", "--option", "answer_words=30", "--option", "answer_max_tokens=48",
         "--option", "polish_context_chars=150", "--option", "switch_ratio=1", "--option", "test_fraction=0.5",
         "--concurrency", "2"]


@pytest.fixture(scope="module")
def clapnq_cited(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The passages MTRAG's ClapNQ conversations cite (551), as a convrag corpus folder (config clapnq-cited-corpus)."""
    return build_mtrag(tmp_path_factory, "clapnq-cited-corpus")


def _cache_entries(out: Path) -> set[str]:
    return {p.name for p in (out / "llm-cache").rglob("*.json")} if (out / "llm-cache").is_dir() else set()


def _report(out: Path, stage: str) -> dict:
    return json.loads((out / stage / "report.json").read_text(encoding="utf-8"))


def _tables(out: Path) -> str:
    """Every record of the agent stages and the assembled files, as JSON (NaN written as NaN, so it compares)."""
    tables = {stage: list(read_records(out / stage)) for stage in ("converse", "polish")}
    for split in ("test", "train", "corpus"):
        tables[split] = pq.read_table(out / "assemble" / f"{split}.parquet").to_pylist()
    return json.dumps(tables, sort_keys=True)


def test_pipeline_killed_mid_agents_resumes_builds_and_evaluates(clapnq_cited: Path, tmp_path: Path) -> None:
    out = tmp_path / "syn"
    command = [sys.executable, "-m", "convrag.cli", "synthesize", "mtr", "--corpus", str(clapnq_cited),
               "--out", str(out), "--no-progress", *SMALL]
    env = {k: v for k, v in os.environ.items() if k != "CONVRAG_LLM"} | {"HF_HUB_OFFLINE": "1"}
    log = (tmp_path / "first.log").open("w")
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 1200
    while len(_cache_entries(out)) < 8:  # some turns answered, the converse stage not finished
        assert proc.poll() is None, (tmp_path / "first.log").read_text()
        assert time.monotonic() < deadline, "no LLM reply cached in 20 minutes"
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    log.close()
    finished = _cache_entries(out)
    assert not (out / "converse" / "report.json").exists()

    rerun = subprocess.run(command, env=env, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "Warning: the questioner, responder, polisher ran on the embedded SmolLM2-135M placeholder" in rerun.stdout
    converse = _report(out, "converse")
    # every call that had finished before the kill is answered from the cache, none is made again
    assert converse["llm"]["cache_hits"] == len(finished)
    # no conversation lost or duplicated: each of the 3 clusters is written once or its drop is counted
    records = list(read_records(out / "converse"))
    assert len({r["id"] for r in records}) == len(records) == converse["records_out"]
    assert converse["records_in"] == 3 and converse["records_out"] + sum(converse["dropped"].values()) == 3
    assert records, "every conversation was dropped"
    for rec in records:
        assert [t["turn"] for t in rec["turns"]] == list(range(1, len(rec["turns"]) + 1))
        assert all(t["gold"] in rec["doc_ids"] and t["gold"] in t["drawn"] and t["answer"].strip()
                   for t in rec["turns"])
    polished = list(read_records(out / "polish"))
    assert [r["id"] for r in polished] == [r["id"] for r in records]
    for before, after in zip(records, polished, strict=True):
        assert [t["original_question"] for t in after["turns"]] == [t["question"] for t in before["turns"]]
        assert after["turns"][0]["polish"] == "first turn"

    # the resumed output is the output of an uninterrupted run: redo the agents from the cache only
    first = _tables(out)
    assert main(["synthesize", "mtr", "--corpus", str(clapnq_cited), "--out", str(out), "--no-progress",
                 "--redo", "converse", *SMALL]) == 0
    redone = _report(out, "converse")["llm"]
    # only the Questioner replies that never parsed are asked again (a failure is not cached): 3 attempts each
    assert redone["calls"] == 3 * redone["failures"] and _report(out, "polish")["llm"]["calls"] == 0
    assert _tables(out) == first

    built = tmp_path / "built"
    assert main(["build", "mtr-bench", "--source", str(out / "assemble"), "--out", str(built)]) == 0
    queries = pq.read_table(next((built / "queries").glob("test-*.parquet"))).to_pylist()
    assert len(queries) == len(json.loads(first)["test"])
    assert main(["evaluate", str(built), "--retrievers", "bm25", "--bootstrap", "20", "--no-progress",
                 "--out", str(tmp_path / "results")]) == 0
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    assert len(results["per_query"]["bm25|lastturn"]) == len(queries)
    # and the synthesized benchmark's labels can be audited like any other (one turn, two MTR-Eval judges; all four
    # run through the model on MTRAG in tests/audit/test_slow.py); the placeholder often rambles until max_tokens
    # and gives no usable verdict in a dimension: the run then says so (exit 1, outputs marked incomplete), which is
    # the plumbing working; one reply per request (PLACEHOLDER_JUDGE)
    code = main(["audit", str(built), "--sample", "1", "--dimensions", "query_evidence,completeness",
                 "--judge", PLACEHOLDER_JUDGE, "--out", str(tmp_path / "audit"),
                 "--cache", str(tmp_path / "judges"), "--no-progress"])
    assert code in (0, 1)
    summary = json.loads((tmp_path / "audit" / "summary.json").read_text(encoding="utf-8"))
    assert summary["complete"] is (code == 0)
    verdicts = (tmp_path / "audit" / "verdicts.jsonl").read_text(encoding="utf-8").splitlines()
    assert {json.loads(v)["dimension"] for v in verdicts} == {"query_evidence", "completeness"}
