"""The convrag command: help texts, build, evaluate, and errors on bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import datasets
import pytest

from convrag.cli import main
from tests.conftest import DATA

DEV = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"


@pytest.mark.parametrize("command", [[], ["build"], ["evaluate"], ["evaluate-generation"], ["push"], ["list"]])
def test_help_for_every_subcommand(command):
    proc = subprocess.run([sys.executable, "-m", "convrag.cli", *command, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "usage: convrag" in proc.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "stratrag"
    assert main(["build", "stratrag", "--source", str(DEV), "--out", str(out)]) == 0
    return out


def test_build_writes_loadable_folder(built, capsys):
    assert datasets.load_dataset(str(built), "queries", split="validation").num_rows == 30
    assert main(["build", "stratrag", "--source", str(DEV), "--out", str(built)]) == 2
    assert "not empty" in capsys.readouterr().err


def test_build_options_and_errors(tmp_path, capsys):
    out = tmp_path / "borrow"
    assert main(["build", "stratrag", "--source", f"validation={DEV}", "--option", "fill=borrow",
                 "--option", "max_validation=5", "--config", "all", "--out", str(out)]) == 0  # fmt: skip
    records = datasets.load_dataset(str(out), "all", split="validation")
    assert records.num_rows == 5 and all(len(p) == 15 for p in records["doc_pool"])
    assert main(["build", "nosuch", "--out", str(tmp_path / "x")]) == 2
    assert "unknown benchmark" in capsys.readouterr().err
    assert main(["build", "stratrag", "--option", "fill", "--out", str(tmp_path / "y")]) == 2
    assert "key=value" in capsys.readouterr().err


def test_evaluate_lexical_baselines_and_external_run(built, tmp_path, capsys):
    run_file = tmp_path / "gold.trec"
    qrels = datasets.load_dataset(str(built), "qrels", split="validation")
    run_file.write_text("".join(f"{r['query-id']} Q0 {r['corpus-id']} 1 1.0 gold\n" for r in qrels))
    out = tmp_path / "results"
    code = main(["evaluate", str(built), "--retrievers", "random,bm25", "--run", f"oracle={run_file}",
                 "--out", str(out), "--bootstrap", "200", "--no-progress"])  # fmt: skip
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    assert set(results["systems"]) == {"random", "bm25", "oracle"}
    oracle = results["systems"]["oracle"]["overall"]
    assert oracle["Recall@2"]["mean"] == 1.0 and oracle["nDCG@5"]["mean"] == 1.0
    assert results["systems"]["bm25"]["overall"]["MRR"]["mean"] > results["systems"]["random"]["overall"]["MRR"]["mean"]
    assert set(results["systems"]["bm25"]["groups"]) == {"bridge", "comparison", "yes-no"}
    assert (out / "runs" / "bm25.trec").exists()
    table = capsys.readouterr().out
    assert "| Retriever | R@1 | R@2 | R@5 | MRR | NDCG@5 |" in table


def test_evaluate_rejects_unknown_doc_ids_in_a_run(built, tmp_path, capsys):
    run_file = tmp_path / "bad.trec"
    run_file.write_text("val_000000 Q0 doc_99999999_00 1 1.0 x\n")
    code = main(["evaluate", str(built), "--retrievers", "", "--run", f"bad={run_file}",
                 "--out", str(tmp_path / "res")])
    assert code == 2
    err = capsys.readouterr().err
    assert "unknown doc ids" in err and "doc_99999999_00" in err and "bad" in err


@pytest.mark.slow
def test_evaluate_all_four_baselines_main_job(built, tmp_path, capsys):
    """The README's main job: random, BM25, dense (shipped MiniLM) and hybrid on the StratRAG build."""
    out = tmp_path / "all"
    assert main(["evaluate", str(built), "--out", str(out), "--bootstrap", "200", "--no-progress"]) == 0
    results = json.loads((out / "results.json").read_text())
    overall = {name: s["overall"] for name, s in results["systems"].items()}
    assert list(overall) == ["random", "bm25", "dense", "hybrid"]
    ndcg = {name: o["nDCG@5"]["mean"] for name, o in overall.items()}
    # the paper's ordering (Table 2) holds on these 30 real dev records
    assert ndcg["random"] < ndcg["bm25"] < ndcg["dense"] <= ndcg["hybrid"]
    assert results["systems"]["dense"]["config"]["name"] == "dense"
    assert len(results["significance"]) == 6 * 5
    assert "## hybrid by question_type" in capsys.readouterr().out


def test_evaluate_recor_folder_dispatches_to_the_recor_tables(tmp_path, capsys):
    out = tmp_path / "recor"
    assert main(["build", "recor", "--source", str(DATA / "recor" / "sample"), "--out", str(out)]) == 0
    res = tmp_path / "res"
    assert main(["evaluate", str(out), "--retrievers", "bm25", "--strategies", "baseline,history",
                 "--bootstrap", "50", "--no-progress", "--out", str(res)]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "Table 19" in printed and "Failure analysis" in printed
    results = json.loads((res / "results.json").read_text())
    assert results["benchmark"] == "recor"
    assert (res / "turn_position.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["evaluate", str(out), "--retrievers", "bm25", "--strategies", "nope", "--out", str(res)]) == 2
    assert "nope" in capsys.readouterr().err


def test_evaluate_mtrag_folder_writes_tables_and_runs(tmp_path, capsys):
    from convrag.benchmarks.mtrag.scoring import check_submission

    out = tmp_path / "mtrag"
    configs = [f"{d}-{v}" for d in ("clapnq", "govt") for v in ("lastturn", "qrels", "cited-corpus")]
    args = ["build", "mtrag", "--source", str(DATA / "mtrag"), "--out", str(out)]
    assert main([*args, *(a for c in configs for a in ("--config", c))]) == 0
    res = tmp_path / "res"
    assert main(["evaluate", str(out), "--retrievers", "bm25", "--bootstrap", "20", "--no-progress",
                 "--out", str(res)]) == 0  # fmt: skip
    assert "| bm25 | lastturn | all (official, weighted) |" in capsys.readouterr().out
    results = json.loads((res / "results.json").read_text())
    assert results["benchmark"] == "mtrag" and "_runs" not in results
    scored = {q for entry in results["results"] for q in entry["per_query"]}
    trec = (res / "runs" / "bm25__lastturn.trec").read_text().splitlines()
    assert {line.split()[0] for line in trec} >= scored and all(len(line.split()) == 6 for line in trec)
    report, submission = check_submission(res / "runs" / "bm25__lastturn.jsonl")
    assert report.ok and set(submission.runs) == {"clapnq", "govt"}


RESPONSES = DATA / "mtrag" / "scripts" / "evaluation" / "sample_data" / "responses-10.jsonl"


def test_evaluate_generation_on_a_built_tasks_config_and_a_submission(tmp_path, capsys):
    from convrag.hub.export import export_benchmark

    folder = tmp_path / "mtrag"
    export_benchmark("mtrag", folder, configs=["all-tasks"], options={"source": str(DATA / "mtrag")})
    predictions = tmp_path / "submission.jsonl"
    lines = [json.loads(line) for line in RESPONSES.read_text().splitlines()]
    predictions.write_text("".join(json.dumps({"task_id": r["task_id"], "predictions": r["predictions"]}) + "\n"
                                   for r in lines))  # fmt: skip
    out = tmp_path / "res"
    args = ["evaluate-generation", str(folder), "--predictions", str(predictions), "--judge", "fake",
            "--metrics", "rb_alg", "--bootstrap", "50", "--no-progress", "--out", str(out)]  # fmt: skip
    assert main(args) == 2
    assert "have no prediction" in capsys.readouterr().err
    assert main([*args, "--allow-missing"]) == 0
    assert "RB_alg" in capsys.readouterr().out
    rows = [json.loads(line) for line in (out / "per_task.jsonl").read_text().splitlines()]
    assert sorted(r["task_id"] for r in rows) == sorted(r["task_id"].replace("::", "<::>") for r in lines)
    assert all(r["passage_source"] == "reference" for r in rows)
    results = json.loads((out / "results.json").read_text())
    assert results["counts"]["missing_predictions"] == 842 - 10


@pytest.fixture(scope="module")
def recor_built(tmp_path_factory):
    out = tmp_path_factory.mktemp("recor-defaults") / "recor"
    assert main(["build", "recor", "--source", str(DATA / "recor" / "sample"), "--out", str(out)]) == 0
    return out


def _llm_calls(monkeypatch) -> list:
    """Record every LLM the evaluation makes (by spec), answering with the fake echo backend."""
    import convrag.llm as llm

    made, real = [], llm.get_llm
    monkeypatch.setattr(llm, "get_llm", lambda spec=None, **kw: made.append(spec) or real("fake", **kw))
    return made


def test_default_strategies_leave_out_the_llm_rewrite_and_say_so(recor_built, tmp_path, monkeypatch, capsys):
    """RECOR's defaults hold the LLM `rewrite`: without --llm / $CONVRAG_LLM it is skipped (one line saying how to
    include it, recorded in results.json) and no LLM is made; the README's profile is recorded as declared."""
    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    made = _llm_calls(monkeypatch)
    res = tmp_path / "res"
    assert main(["evaluate", str(recor_built), "--retrievers", "bm25", "--bootstrap", "20", "--no-progress",
                 "--out", str(res)]) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert ("convrag evaluate: skipped the LLM strategy rewrite (no --llm or $CONVRAG_LLM given); include it with "
            "--strategies baseline,reasoning,history,history+reasoning,rewrite --llm SPEC") in err
    results = json.loads((res / "results.json").read_text())
    assert list(results["per_turn"]["bm25"]) == ["baseline", "reasoning", "history", "history+reasoning"]
    assert results["strategies_skipped"]["names"] == ["rewrite"] and made == []
    assert "rewrite" in results["profile"]["strategies"]


@pytest.mark.parametrize("how", ["env", "named"])
def test_llm_strategies_run_with_an_llm_or_when_named(recor_built, tmp_path, monkeypatch, capsys, how):
    """$CONVRAG_LLM brings the default `rewrite` back; `--strategies rewrite` without an LLM still runs it, on the
    default LLM (spec None: $CONVRAG_LLM, else the embedded placeholder)."""
    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    made = _llm_calls(monkeypatch)
    if how == "env":
        monkeypatch.setenv("CONVRAG_LLM", "fake")
    res = tmp_path / how
    named = ["--strategies", "baseline,rewrite"] if how == "named" else []
    assert main(["evaluate", str(recor_built), "--retrievers", "bm25", "--bootstrap", "20", "--no-progress",
                 *named, "--out", str(res)]) == 0  # fmt: skip
    assert "skipped" not in capsys.readouterr().err
    results = json.loads((res / "results.json").read_text())
    assert "rewrite" in results["per_turn"]["bm25"] and "strategies_skipped" not in results
    assert made == [None]


def test_recor_build_report_leaves_out_only_documents_nothing_cites(tmp_path, capsys):
    """Every document of the flat sample is in its domain's corpus (each config parses one domain, and a
    document another domain cites is that domain's, not "left out"); a document no conversation cites and no
    domain prefix names is the one counted as left out."""
    sample = DATA / "recor" / "sample"
    report_key = "flat-source documents that no conversation cites and no domain prefix names (left out)"
    assert main(["build", "recor", "--source", str(sample), "--out", str(tmp_path / "recor")]) == 0
    printed = capsys.readouterr().out
    documents = len((sample / "documents.jsonl").read_text().splitlines())
    corpus = sum(int(n) for n in re.findall(r"^  corpus documents: \w+: (\d+)$", printed, re.M))
    assert (documents, corpus) == (15, 15) and "left out" not in printed
    stray = tmp_path / "stray"
    stray.mkdir()
    for name in ("benchmark.jsonl", "documents.jsonl"):
        (stray / name).write_text((sample / name).read_text())
    with (stray / "documents.jsonl").open("a") as handle:
        handle.write(json.dumps({"doc_id": "nowhere/stray_0.txt", "content": "Cited by no turn."}) + "\n")
    assert main(["build", "recor", "--source", str(stray), "--out", str(tmp_path / "stray-built")]) == 0
    assert f"  {report_key}: 1 (e.g. nowhere/stray_0.txt)" in capsys.readouterr().out
