"""RECOR's Decomposition-and-Verification through the embedded local model on two real BRIGHT biology examples
(their documents from tests/fixtures): killed with SIGKILL while the align stage runs, resumed with no call
repeated, then built with ``convrag build recor`` and scored with ``convrag evaluate`` when the placeholder's
replies leave a turn (otherwise the run must fail honestly: exit 1, the stage marked incomplete, nothing filled in).

SmolLM2-135M only proves the plumbing here: the options are loosened (one aspect and one turn suffice, threshold 0,
excerpts and the turns' form checks not enforced) so that its replies get through; nothing below measures the
quality of what it writes. It runs under ``profile=convrag``: under the default ``authors`` profile the model's
retrieval guidance, written from the facts it mangled, runs past ``max_tokens=256`` and the only turn is rejected
(tried 2026-11-26); that profile's order of steps is traced end to end with scripted replies in
tests/synthesis/recor/test_trace.py and tests/synthesis/recor/test_authors.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from convrag.cli import main
from convrag.synthesis.engine.records import read_records
from tests.conftest import DATA

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
LOOSE = ["--option", "input_format=bright", "--option", f"documents={FIXTURES / 'bright_biology_documents.jsonl'}",
         "--option", "min_coverage=0", "--option", "num_aspects=2", "--option", "max_rounds=1",
         "--option", "min_aspects=1", "--option", "max_facts=2", "--option", "min_turns=1", "--option", "max_turns=2",
         "--option", "threshold=0", "--option", "doc_chars=400", "--option", "min_distinct_documents=1",
         "--option", "enforce_form=false", "--option", "max_tokens=256", "--option", "excerpt_share=0",
         "--option", "profile=convrag", "--concurrency", "2"]


def _entries(out: Path) -> list[Path]:
    return list((out / "llm-cache").rglob("*.json")) if (out / "llm-cache").is_dir() else []


def _report(out: Path, stage: str) -> dict:
    return json.loads((out / stage / "report.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The run killed with SIGKILL while align runs, then rerun to the end (both through the local model): its out
    folder, the calls cached before the kill and the rerun. Module-scoped: the authors-profile test starts from its
    load and align stages."""
    root = tmp_path_factory.mktemp("dv-killed")
    out = root / "dv"
    command = [sys.executable, "-m", "convrag.cli", "synthesize", "recor", "--input",
               str(DATA / "bright" / "examples" / "biology.jsonl"), "--out", str(out), "--no-progress", *LOOSE]
    env = {k: v for k, v in os.environ.items() if k != "CONVRAG_LLM"} | {"HF_HUB_OFFLINE": "1"}
    log = (root / "first.log").open("w")
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 1200
    while not _entries(out):  # align's first call answered; its other item's call is still running
        assert proc.poll() is None, (root / "first.log").read_text()
        assert time.monotonic() < deadline, "the align stage made no call in 20 minutes"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    log.close()
    killed = {"load": (out / "load" / "report.json").is_file(), "align": (out / "align" / "report.json").exists()}
    before_kill = len(_entries(out))
    rerun = subprocess.run(command, env=env, capture_output=True, text=True)
    return {"out": out, "killed": killed, "before_kill": before_kill, "rerun": rerun}


def test_dv_killed_mid_run_resumes_builds_and_evaluates(killed_and_resumed: dict, tmp_path: Path) -> None:
    out, rerun, before_kill = (killed_and_resumed[k] for k in ("out", "rerun", "before_kill"))
    assert killed_and_resumed["killed"] == {"load": True, "align": False}  # killed inside align, after load

    assert "load: 103 in -> 2 out" in rerun.stdout and "(finished earlier, not rerun)" in rerun.stdout
    # every align call that had finished before the kill is answered from the cache, none is made again
    assert _report(out, "align")["llm"]["cache_hits"] == before_kill
    load = _report(out, "load")
    assert load["records_out"] == 2 and load["dropped"] == {"load: gold documents not in the documents file": 101}
    if rerun.returncode != 0:  # the placeholder's replies may leave nothing: an honest failure, nothing filled in
        assert rerun.returncode == 1 and "dropped all" in rerun.stderr, rerun.stdout + rerun.stderr
        stage = next(s for s in ("align", "aspects", "facts", "turns") if (out / s / "incomplete.json").is_file())
        state = json.loads((out / stage / "incomplete.json").read_text(encoding="utf-8"))
        assert state["records_out"] == 0 and sum(state["dropped"].values()) == state["records_in"]
        return
    assert "Warning: the llm ran on the embedded SmolLM2-135M placeholder" in rerun.stdout
    for stage in ("align", "aspects", "facts", "turns"):
        report = _report(out, stage)
        assert report["records_in"] == report["records_out"] + sum(report["dropped"].values())
    items = list(read_records(out / "turns"))
    assert items, f"exit 0 with no item: {_report(out, 'turns')}"
    for item in items:
        assert [t["turn"] for t in item["turns"]] == list(range(1, len(item["turns"]) + 1))
        docs = {d["doc_id"] for d in item["documents"]}
        assert all(t["query"].strip() and t["answer"].strip() and set(t["gold_doc_ids"]) <= docs
                   for t in item["turns"])

    built = tmp_path / "built"
    assert main(["build", "recor", "--source", str(out / "release"), "--out", str(built)]) == 0
    assert main(["evaluate", str(built), "--retrievers", "bm25", "--strategies", "baseline,reasoning",
                 "--bootstrap", "20", "--no-progress", "--out", str(tmp_path / "results")]) == 0
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    turns = sum(len(i["turns"]) for i in items)
    assert sum(results["n_turns"].values()) == turns and len(results["per_turn"]["bm25"]["baseline"]) == turns


def test_dv_authors_profile_through_the_local_model_keeps_turns_or_fails_honestly(killed_and_resumed: dict,
                                                                                  tmp_path: Path,
                                                                                  capsys: pytest.CaptureFixture
                                                                                  ) -> None:
    """Plumbing of the default profile's steps (aspect coverage, answerability, retrieval guidance before scoring)
    through SmolLM2-135M: with those checks loosened to 0 its replies reach the turns stage, where they either give
    a turn or are rejected for a counted reason; a run that keeps nothing exits 1 with one line and marks the stage
    incomplete. Nothing is filled in either way.

    load and align take no profile and the same options here: the run starts from a copy of the killed-and-resumed
    run's folder (its load and align through the local model, align tested there) with ``--redo aspects``, and
    without its LLM cache, so that every call of aspects, facts and turns under this profile reaches the model."""
    out = tmp_path / "dv"
    shutil.copytree(killed_and_resumed["out"], out, ignore=shutil.ignore_patterns("llm-cache"))
    at = LOOSE.index("profile=convrag")
    loose = LOOSE[: at - 1] + LOOSE[at + 1:]  # the default profile
    args = ["synthesize", "recor", "--input", str(DATA / "bright" / "examples" / "biology.jsonl"), "--out", str(out),
            "--no-progress", *loose, "--option", "min_aspect_coverage=0", "--option", "min_answerability=0",
            "--redo", "aspects"]
    rc = main(args)
    captured = capsys.readouterr()
    params = json.loads((out / "aspects" / "params.json").read_text(encoding="utf-8"))
    assert params["params"]["profile"] == "authors"
    turns = out / "turns"
    if rc == 0:
        assert list(read_records(turns))
        return
    assert rc == 1
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "failed:" in err[0]
    stage = next(s for s in ("aspects", "facts", "turns") if (out / s / "incomplete.json").is_file())
    state = json.loads((out / stage / "incomplete.json").read_text(encoding="utf-8"))
    assert state["complete"] is False and state["records_out"] == 0 and state["llm"]["calls"] > 0
    assert sum(state["dropped"].values()) == state["records_in"]
