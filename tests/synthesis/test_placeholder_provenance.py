"""Outputs name the model that made them (issue 34): a benchmark synthesized by convrag records the models of its
agents in every stage's params.json, gets its own card (its own pretty_name, the corpus and the generator models,
never the published benchmark's), and ``convrag evaluate`` on it names those models in its tables and results.json,
with a warning when the embedded SmolLM2-135M placeholder wrote it. Dry runs name the model of every stage. Small
evaluate fixes: StratRAG's table says how many records it scored against the paper's 200, groups of few queries are
marked, and RECOR's turn-position plot shows the turns behind each position.

The agents talk over HTTP to a fake OpenAI-compatible server that answers as chat models do (preambles, fenced
JSON, markdown answers; ``tests.synthesis.test_trust_llm.agents``). A model id containing ``SmolLM2-135M`` makes a
spec the placeholder (``convrag.llm.is_placeholder``), so the placeholder's path is exercised without loading it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from convrag.cli import main
from convrag.llm import describe
from convrag.synthesis.engine.pipeline import Pipeline, write_json_atomic
from convrag.synthesis.engine.records import write_shard
from convrag.synthesis.recor.release import Release
from convrag.synthesis.recor.turns import Turns
from tests.llm.test_faults import FakeServer
from tests.synthesis.test_trust_llm import SMALL, _corpus, agents

PLACEHOLDER_ID = "SmolLM2-135M-Instruct"
REAL_ID = "qwen2.5-72b-instruct"


@pytest.fixture
def server() -> Iterator[FakeServer]:
    s = FakeServer()
    s.responder = agents
    yield s
    s.close()


def _spec(model: str, url: str) -> str:
    return f"openai:{model}@{url};max_retries=0;timeout=5"


def _synthesize(tmp_path: Path, url: str, model: str, *extra: str) -> int:
    spec = _spec(model, url)
    return main(["synthesize", "mtr", "--corpus", str(_corpus(tmp_path)), "--out", str(tmp_path / "syn"), *SMALL,
                 "--questioner", spec, "--responder", spec, "--polisher", spec, *extra])


def _card(folder: Path) -> tuple[dict, str]:
    """(YAML header, body) of a built folder's README."""
    _, header, body = (folder / "README.md").read_text(encoding="utf-8").split("---\n", 2)
    return yaml.safe_load(header), body


@pytest.mark.parametrize("model", [PLACEHOLDER_ID, REAL_ID])
def test_a_synthesized_benchmark_names_its_models_in_params_card_and_evaluate(tmp_path, capsys, server,
                                                                              model) -> None:
    placeholder = model == PLACEHOLDER_ID
    assert _synthesize(tmp_path, server.url, model) == 0
    capsys.readouterr()
    # params.json: the spec as given (options with keys left out) and the model it resolves to
    converse = json.loads((tmp_path / "syn" / "converse" / "params.json").read_text(encoding="utf-8"))
    assert converse["params"]["questioner"] == f"openai:{model}@{server.url}"
    assert set(converse["models"]) == {"questioner", "responder"}
    polish = json.loads((tmp_path / "syn" / "polish" / "params.json").read_text(encoding="utf-8"))
    for ident in (*converse["models"].values(), polish["models"]["polisher"]):
        assert ident["model"] == model and ident["placeholder"] is placeholder
        assert ("embedded placeholder" in ident["label"]) is placeholder and "timeout" not in ident["spec"]
    record = json.loads((tmp_path / "syn" / "assemble" / "synthesis.json").read_text(encoding="utf-8"))
    assert record["corpus"] == "local:corpus.jsonl" and record["placeholder"] is placeholder
    assert list(record["models"]) == ["questioner", "responder", "polisher"]

    # the card: its own name and sources, the generator models, never the published MTR-Bench's
    built = tmp_path / "built"
    assert main(["build", "mtr-bench", "--source", str(tmp_path / "syn" / "assemble"), "--out", str(built)]) == 0
    header, body = _card(built)
    assert header["pretty_name"].startswith("Synthetic MTR-Bench-style conversations over corpus.jsonl")
    assert header["pretty_name"] != "MTR-Bench" and header["source_datasets"] == []
    assert "OkayestProgrammer" not in json.dumps(header) + body and "license_link" not in header
    assert header["convrag"]["synthesis"]["models"]["polisher"]["model"] == model
    label = describe(_spec(model, server.url)).label  # the spec for a real model, the file and a warning else
    assert label == (f"{model} (embedded placeholder, not a measurement)" if placeholder
                     else f"openai:{model}@{server.url}")
    shown = label if placeholder else f"openai:{model} (an OpenAI-compatible server)"  # no server address
    assert f"questioner, responder, polisher: {shown}" in body and server.url not in json.dumps(header) + body
    assert ("placeholder" in header["pretty_name"]) is placeholder
    assert ("Warning: written by the embedded placeholder model" in body) is placeholder

    # evaluate: the printed table and results.json name the query writers, with a warning for the placeholder
    out = tmp_path / "results"
    assert main(["evaluate", str(built), "--retrievers", "bm25", "--bootstrap", "20", "--no-progress",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    warning = "WARNING: the queries, answers and gold labels of this benchmark were written by the embedded " \
              "placeholder LLM"
    assert (warning in printed) is placeholder
    assert f"questioner, responder, polisher: {shown}" in printed.split("| Retriever |")[0]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["synthesis"]["placeholder"] is placeholder
    assert {r: m["model"] for r, m in results["synthesis"]["models"].items()} == dict.fromkeys(
        ("questioner", "responder", "polisher"), model)
    assert (warning in (out / "results.md").read_text(encoding="utf-8")) is placeholder


def test_a_model_changed_through_convrag_llm_is_refused_and_older_folders_resume(tmp_path, capsys, server,
                                                                                 monkeypatch) -> None:
    """The parameters record the spec as given ("$CONVRAG_LLM or default"); the models it resolved to are checked
    too, so a rerun under another $CONVRAG_LLM no longer resumes silently with another model."""
    corpus = _corpus(tmp_path)

    def run(model: str, url: str) -> int:
        monkeypatch.setenv("CONVRAG_LLM", _spec(model, url))
        return main(["synthesize", "mtr", "--corpus", str(corpus), "--out", str(tmp_path / "syn"), *SMALL])

    assert run(PLACEHOLDER_ID, server.url) == 0
    calls = len(server.requests)
    other = FakeServer()
    other.responder = agents
    try:  # the same model at another endpoint is the same model: nothing is redone, no call is made
        assert run(PLACEHOLDER_ID, other.url) == 0 and not other.requests
    finally:
        other.close()
    assert capsys.readouterr().out.count("(finished earlier, not rerun)") == 5
    assert run(REAL_ID, server.url) == 2
    err = capsys.readouterr().err
    assert "converse: made with other models (questioner: SmolLM2-135M-Instruct -> qwen2.5-72b-instruct; " \
           "responder: SmolLM2-135M-Instruct -> qwen2.5-72b-instruct); rerun with the same ones, use another " \
           "--out, or give --redo converse" in err
    # a params.json written before models were recorded matches any model: such folders resume as they did
    for stage in ("converse", "polish"):
        path = tmp_path / "syn" / stage / "params.json"
        params = json.loads(path.read_text(encoding="utf-8"))
        del params["models"]
        write_json_atomic(path, params)
    assert run(REAL_ID, server.url) == 0
    assert capsys.readouterr().out.count("(finished earlier, not rerun)") == 5 and len(server.requests) == calls
    # a converse folder written before max_history_tokens existed: the error says how to resume it, and that works
    path = tmp_path / "syn" / "converse" / "params.json"
    params = json.loads(path.read_text(encoding="utf-8"))
    del params["params"]["max_history_tokens"]
    write_json_atomic(path, params)
    inputs = json.loads((tmp_path / "syn" / "inputs.json").read_text(encoding="utf-8"))
    for stage in ("converse", "polish", "assemble"):  # fingerprinted as then: without the key (here: not at all)
        inputs["stages"].pop(stage, None)
    write_json_atomic(tmp_path / "syn" / "inputs.json", inputs)
    assert run(REAL_ID, server.url) == 2
    assert ("it was written before max_history_tokens existed: add --option max_history_tokens=0 to resume it"
            in capsys.readouterr().err)
    monkeypatch.setenv("CONVRAG_LLM", _spec(REAL_ID, server.url))
    assert main(["synthesize", "mtr", "--corpus", str(corpus), "--out", str(tmp_path / "syn"), *SMALL,
                 "--option", "max_history_tokens=0"]) == 0 and len(server.requests) == calls


def test_a_run_finished_before_synthesis_json_existed_still_builds_under_its_own_name(tmp_path, server) -> None:
    assert _synthesize(tmp_path, server.url, PLACEHOLDER_ID) == 0
    (tmp_path / "syn" / "assemble" / "synthesis.json").unlink()
    path = tmp_path / "syn" / "converse" / "params.json"
    params = json.loads(path.read_text(encoding="utf-8"))
    del params["models"]  # as versions before models were recorded wrote it
    write_json_atomic(path, params)
    built = tmp_path / "built"
    assert main(["build", "mtr-bench", "--source", str(tmp_path / "syn" / "assemble"), "--out", str(built)]) == 0
    header, body = _card(built)
    assert header["pretty_name"] == ("Synthetic MTR-Bench-style conversations over corpus.jsonl (MTR-Pipeline) "
                                     "(placeholder LLM: not a benchmark)")
    spec = f"openai:{PLACEHOLDER_ID}"  # the server's address is not published
    assert ("questioner, responder: not recorded (stage converse ran before models were recorded; spec as given: "
            f"{spec})") in body and server.url not in body and server.url not in json.dumps(header)
    assert "polisher: SmolLM2-135M-Instruct (embedded placeholder, not a measurement)" in body
    # a folder whose agents were recorded as "$CONVRAG_LLM or default" (the case) cannot say which model
    # wrote it any more: its card says it may have been the placeholder
    for stage in ("converse", "polish"):
        path = tmp_path / "syn" / stage / "params.json"
        params = json.loads(path.read_text(encoding="utf-8"))
        params.pop("models", None)
        params["params"].update({k: "$CONVRAG_LLM or default" for k in ("questioner", "responder", "polisher")
                                 if k in params["params"]})
        write_json_atomic(path, params)
    again = tmp_path / "again"
    assert main(["build", "mtr-bench", "--source", str(tmp_path / "syn" / "assemble"), "--out", str(again)]) == 0
    header, body = _card(again)
    assert header["pretty_name"].endswith("(models not recorded: possibly the placeholder LLM)")
    assert "it may have been the embedded placeholder" in body


def test_a_release_copied_away_from_its_run_folder_builds_as_the_synthesis(tmp_path, server) -> None:
    """Only the Parquet files, copied to a new folder (no synthesis.json, no run folder): the builder reads the
    synthesis record from their schema metadata, so the card names the synthesis, never the published MTR-Bench."""
    assert _synthesize(tmp_path, server.url, REAL_ID) == 0
    copy = tmp_path / "elsewhere" / "release"
    copy.mkdir(parents=True)
    files = sorted(p.name for p in (tmp_path / "syn" / "assemble").glob("*.parquet"))
    assert "corpus.parquet" in files and "test.parquet" in files
    for name in files:
        shutil.copy(tmp_path / "syn" / "assemble" / name, copy / name)
    built = tmp_path / "built"
    assert main(["build", "mtr-bench", "--source", str(copy), "--out", str(built)]) == 0
    header, body = _card(built)
    assert header["pretty_name"] == "Synthetic MTR-Bench-style conversations over corpus.jsonl (MTR-Pipeline)"
    assert header["source_datasets"] == [] and "OkayestProgrammer" not in json.dumps(header) + body
    assert header["convrag"]["synthesis"]["models"]["questioner"]["model"] == REAL_ID
    assert f"questioner, responder, polisher: openai:{REAL_ID} (an OpenAI-compatible server)" in body


def test_dry_runs_name_the_model_of_each_stage_and_the_placeholder(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    corpus = _corpus(tmp_path)
    assert main(["synthesize", "mtr", "--corpus", str(corpus), "--out", str(tmp_path / "o"), "--dry-run",
                 "--option", "turns=2"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[2:]}
    assert "model: SmolLM2-135M-Instruct.Q4_1.gguf (placeholder);" in lines["converse"]
    assert "model: SmolLM2-135M-Instruct.Q4_1.gguf (placeholder);" in lines["polish"]
    assert "model:" not in lines["curate"] and lines["placeholder:"].startswith("placeholder: the embedded")
    monkeypatch.setenv("CONVRAG_LLM", "openai:gpt-4o-mini")
    assert main(["synthesize", "mtr", "--corpus", str(corpus), "--out", str(tmp_path / "o"), "--dry-run",
                 "--option", "turns=2"]) == 0
    out = capsys.readouterr().out
    assert "model: gpt-4o-mini;" in out and "placeholder" not in out


def test_a_recor_release_synthesized_by_dv_gets_its_own_card(tmp_path) -> None:
    out, spec = tmp_path / "run", "openai:SmolLM2-135M-Instruct@http://127.0.0.1:9/v1"
    items = tmp_path / "law-items.jsonl"
    items.write_text("{}\n", encoding="utf-8")
    (out / "turns").mkdir(parents=True)
    turns = [{"turn": 1, "query": "Why was the appeal allowed?", "answer": "A procedural error was found.",
              "gold_doc_ids": ["d1"]},
             {"turn": 2, "query": "What did the court say about it?", "answer": "It ordered a retrial.",
              "gold_doc_ids": ["d2"]}]
    item = {"id": "q1", "query": "Why did the appeal succeed?", "answer": "Because of a procedural error.",
            "domain": "law", "turns": turns, "negatives": [],
            "documents": [{"doc_id": "d1", "text": "The appeal was allowed for a procedural error."},
                          {"doc_id": "d2", "text": "The court ordered a retrial."}]}
    write_shard(out / "turns" / "part-00000.parquet", [item], {"records_in": 1, "first": "q1", "last": "q1"})
    write_json_atomic(out / "turns" / "report.json", {"stage": "turns", "records_in": 1, "records_out": 1})
    stage = Turns(llm=spec)
    write_json_atomic(out / "turns" / "params.json", {"stage": "turns", "seed": 0, "params": stage.params(),
                                                      "models": stage.models()})
    Pipeline("recor-dv", [Release(str(items))]).run(out, progress=False)
    built = tmp_path / "built"
    assert main(["build", "recor", "--source", str(out / "release"), "--out", str(built)]) == 0
    header, body = _card(built)
    assert header["pretty_name"] == ("Synthetic RECOR-style conversations over law-items.jsonl (RECOR "
                                     "Decomposition-and-Verification) (placeholder LLM: not a benchmark)")
    assert header["source_datasets"] == [] and "BRIGHT" not in json.dumps(header)
    assert "turns: SmolLM2-135M-Instruct (embedded placeholder, not a measurement)" in body


def test_a_real_model_is_named_without_placeholder() -> None:
    ident = describe("openai:qwen2.5-72b-instruct@http://10.0.0.5:8000/v1;api_key=sk-x")
    stage = Turns(llm="openai:qwen2.5-72b-instruct@http://10.0.0.5:8000/v1;api_key=sk-x")
    assert stage.models() == {"llm": ident.to_dict()} and ident.placeholder is False
    assert ident.label == "openai:qwen2.5-72b-instruct@http://10.0.0.5:8000/v1" and "sk-x" not in str(stage.models())


def test_stratrag_says_how_many_records_it_scored_and_marks_small_groups(stratrag_first30, tmp_path, capsys) -> None:
    out = tmp_path / "res"
    assert main(["evaluate", str(stratrag_first30), "--retrievers", "bm25", "--bootstrap", "20", "--no-progress",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert ("The StratRAG paper's Tables 2 and 3 were computed on 200 validation rows; this run scored 30 records "
            "(a smaller set: wider CIs; the means are not the paper's figures).") in printed
    assert "| comparison | 2 † |" in printed and "| bridge | 22 |" in printed
    assert "† fewer than 10 queries (n = 2, 6): one of them moves such a mean by up to 1/n of the measure's range " \
           "(1/2 here), so it is no basis for a comparison." in printed


def test_recor_turn_positions_show_their_counts_and_the_placeholder(monkeypatch, tmp_path) -> None:
    from matplotlib.figure import Figure

    from convrag.benchmarks.recor.tables import plot_turn_positions, table19
    from convrag.evaluation.tables import small_n_note

    drawn: list[Figure] = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: drawn.append(self))
    row = {"T1": 0.5, "T2": 0.4, "T3": 0.3, "T4": 0.2}
    entry = {"average": row, "trend": -0.5, "by_retriever": {"bm25": row}, "trend_by_retriever": {"bm25": -0.5}}
    results = {"turn_position": {"n": {"T1": 13, "T2": 13, "T3": 5, "T4": 1, "T5+": 0},
                                 "strategies": {"baseline": entry, "rewrite": entry}},
               "llm": {"placeholder": "the embedded SmolLM2-135M placeholder", "note": "WARNING"}}
    plot_turn_positions(results, str(tmp_path / "p.png"))
    [fig] = drawn
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == ["T1\nn=13", "T2\nn=13", "T3\nn=5 †", "T4\nn=1 †", "T5+\nn=0"]
    assert [t.get_text() for t in fig.texts] == ["Placeholder: the embedded SmolLM2-135M placeholder ran the LLM "
                                                 "strategies; these figures measure nothing."]
    assert "| Turns |  | 13 | 13 | 5 † | 1 † | 0 |  |" in table19(results)
    assert small_n_note(results["turn_position"]["n"].values(), "turns").startswith(
        "† fewer than 10 turns (n = 1, 5): one of them moves such a mean by up to 1/n of the measure's range (1/1")


@pytest.mark.slow
def test_the_real_default_model_is_named_placeholder_in_params_card_and_evaluate(tmp_path, capsys,
                                                                               monkeypatch) -> None:
    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    corpus = _corpus(tmp_path)
    small = [("turns=1" if a == "turns=2" else a) for a in SMALL] + [
        "--option", "answer_max_tokens=60", "--option", "questioner_doc_chars=300"]
    code = main(["synthesize", "mtr", "--corpus", str(corpus), "--out", str(tmp_path / "syn"), "--stages",
                 "curate,cluster,converse,assemble", *small])
    captured = capsys.readouterr()
    if code == 1:  # the placeholder may fail to write one usable turn: the run says so, nothing to build
        assert "converse dropped all" in captured.err
        pytest.skip("the placeholder wrote no usable conversation")
    assert code == 0, captured.err
    models = json.loads((tmp_path / "syn" / "converse" / "params.json").read_text(encoding="utf-8"))["models"]
    assert models["questioner"]["model"] == "SmolLM2-135M-Instruct.Q4_1.gguf" and models["questioner"]["placeholder"]
    built = tmp_path / "built"
    assert main(["build", "mtr-bench", "--source", str(tmp_path / "syn" / "assemble"), "--out", str(built)]) == 0
    header, body = _card(built)
    assert "placeholder" in header["pretty_name"] and "questioner, responder: SmolLM2-135M-Instruct.Q4_1.gguf" in body
    assert main(["evaluate", str(built), "--retrievers", "bm25", "--bootstrap", "20", "--no-progress",
                 "--out", str(tmp_path / "res")]) == 0
    assert "written by the embedded placeholder LLM" in capsys.readouterr().out
    assert json.loads((tmp_path / "res" / "results.json").read_text(encoding="utf-8"))["synthesis"]["placeholder"]
    assert os.path.isfile(tmp_path / "syn" / "assemble" / "synthesis.json")
