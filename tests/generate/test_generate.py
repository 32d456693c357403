"""`convrag generate` with scripted backends, on real builds of ../shared/data (MTRAG-UN fiqa, the RECOR sample).

Per mode and benchmark: the lines and their contexts (oracle = the gold passages, retrieved = the top k of the run,
none = no passages), the MTRAG output read back by evaluate-generation's reader and scored by the command, run
files checked (an unknown query or document: exit 2 naming the line), a failed call (no line, counted and
listed), a rerun that repeats no call, and the placeholder warning. Replies are realistic hand-written answers,
some with a reasoning block before ``</think>``.
"""

from __future__ import annotations

import functools
import glob
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import datasets
import pyarrow.parquet as pq
import pytest

import convrag.cli as cli
import convrag.generate.command as command
from convrag.benchmarks.mtrag.scoring import ranked, write_submission
from convrag.core.errors import DataError
from convrag.evaluate.generation import read_built_tasks
from convrag.generate.answer import cut, fit_history, render_prompt
from convrag.generate.command import generator_label
from convrag.generate.tasks import GenItem, Passage
from convrag.llm import LLM, DiskCache, RetryPolicy
from convrag.llm.backends.fake import FakeBackend
from convrag.llm.types import BackendError
from convrag.metrics.retrieval.trec import read_run
from tests.conftest import DATA

FIQA = ["fiqa-tasks", "fiqa-lastturn", "fiqa-questions", "fiqa-qrels", "fiqa-cited-corpus"]
ANSWERS = {
    "market": "<think>The first passage compares the two measures.</think>Market capitalisation is the share price "
              "times the number of shares, while NAV adds up the assets and subtracts the liabilities.",
    "smell": "Smell receptors differ between people: small genetic variants change which odours a person notices.",
}
IDK = "I'm sorry, but the information I have does not let me answer that question."


@pytest.fixture(autouse=True)
def _setup(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No stray LLM configuration, no progress bars."""
    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    datasets.disable_progress_bars()
    yield
    datasets.enable_progress_bars()


def reply(messages: list[dict[str, str]]) -> str:
    """What a working generator says: an answer on the topic of the conversation, or that it cannot answer."""
    conversation = messages[-1]["content"].split("Passages:")[0] + messages[-1]["content"].split("Newest user")[-1]
    if "market" in conversation.lower():
        return ANSWERS["market"]
    if "smell" in conversation.lower():
        return ANSWERS["smell"]
    return IDK if "Passages:" not in messages[-1]["content"] else "The passages say it depends on the situation."


class Scripted:
    """Replaces ``make_llm``: every LLM it makes shares one FakeBackend (calls counted) and uses the given cache."""

    def __init__(self, responder: Callable[[list[dict[str, str]]], str] = reply, spec: str = "openai:gen-model"):
        self.backend = FakeBackend(responder=responder)
        self.spec = spec

    def __call__(self, spec: str, cache: str, concurrency: int) -> LLM:
        return LLM(self.backend, cache=DiskCache(cache), retry=RetryPolicy(max_retries=1), spec=self.spec,
                   max_concurrency=concurrency, sleep=lambda s: None)  # fmt: skip

    def prompts(self) -> list[str]:
        return [c["messages"][-1]["content"] for c in self.backend.calls]


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Scripted:
    fake = Scripted()
    monkeypatch.setattr(command, "make_llm", fake)
    return fake


@functools.cache
def _build(root: str, benchmark: str) -> Path:
    out = Path(root) / benchmark
    if benchmark == "mtrag-un":
        argv = ["build", "mtrag-un", "--source", str(DATA / "mtrag"), "--out", str(out)]
        argv += [x for c in FIQA for x in ("--config", c)]
    else:
        argv = ["build", "recor", "--source", str(DATA / "recor" / "sample"), "--out", str(out)]
    assert cli.main(argv) == 0
    return out


@pytest.fixture
def mtrag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(str(tmp_path_factory.getbasetemp() / "generate-builds"), "mtrag-un")


@pytest.fixture
def recor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(str(tmp_path_factory.getbasetemp() / "generate-builds"), "recor")


def generate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["generate", *argv, "--no-progress"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def rows(folder: Path, config: str) -> list[dict[str, Any]]:
    return [r for f in sorted(glob.glob(str(folder / config / "*.parquet"))) for r in pq.read_table(f).to_pylist()]


def report(out: Path) -> dict[str, Any]:
    return json.loads(out.with_suffix(".report.json").read_text(encoding="utf-8"))


# -- MTRAG: official submission lines ------------------------------------------------------------------------


def test_mtrag_oracle_uses_reference_passages_and_is_read_back(mtrag, scripted, tmp_path, capsys) -> None:
    out = tmp_path / "oracle.jsonl"
    code, stdout, err = generate(capsys, str(mtrag), "--mode", "oracle", "--out", str(out), "--config", "fiqa-tasks",
                                 "--concurrency", "1")  # calls in task order  # fmt: skip
    assert code == 0, err
    tasks = rows(mtrag, "fiqa-tasks")
    got = lines(out)
    assert [g["task_id"] for g in got] == [t["task_id"] for t in tasks] and len(got) == 77
    assert all(set(g) == {"task_id", "predictions"} for g in got)  # Subtask B: no contexts key
    by_question = {t["task_id"]: t for t in tasks}
    first = got[1]
    assert "Market capitalisation is the share price" in first["predictions"][0]["text"]
    assert "<think>" not in first["predictions"][0]["text"] and "</think>" not in json.dumps(got)
    # the prompt of every task holds exactly its reference passages (with text), numbered in order
    for prompt, task in zip(scripted.prompts(), tasks, strict=True):
        gold = [p for p in task["relevant_passages"] if p["text"].strip()]
        assert ("Passages:" in prompt) == bool(gold)
        for n, p in enumerate(gold, start=1):
            assert f"[{n}]" in prompt and cut(p["text"], 1500)[:200] in prompt
        assert f"[{len(gold) + 1}]" not in prompt
        assert prompt.rstrip().endswith("Answer:") and task["input"][-1]["text"].strip() in prompt
    unanswerable = sum(not any(p["text"].strip() for p in t["relevant_passages"]) for t in tasks)
    rep = report(out)
    assert rep["counts"]["without_passages"] == ({"no gold passage with text": unanswerable} if unanswerable else {})
    assert rep["mode"] == "oracle" and rep["scheme"] == "mtrag" and rep["counts"]["answered"] == 77
    assert "0 tasks without an answer" in stdout and "Warning" not in stdout
    read = read_built_tasks(mtrag, out, config="fiqa-tasks")
    assert len(read) == 77 and {t.passage_source for t in read} == {"reference"}
    assert [t.prediction for t in read] == [g["predictions"][0]["text"] for g in got]
    assert read[1].references == [by_question[first["task_id"]]["targets"][0]["text"]]


def test_mtrag_retrieved_with_bm25_is_top_k_of_the_written_run(mtrag, scripted, tmp_path, capsys) -> None:
    out = tmp_path / "bm25.jsonl"
    code, stdout, err = generate(capsys, str(mtrag), "--mode", "retrieved", "--retriever", "bm25", "--k", "3",
                                 "--out", str(out), "--config", "fiqa-tasks", "--max-turns", "6")  # fmt: skip
    assert code == 0, err
    run = read_run(tmp_path / "bm25.run.trec")
    got = lines(out)
    assert len(got) == 6 and set(run) == {g["task_id"] for g in got}
    corpus = {r["_id"]: r["text"] for r in rows(mtrag, "fiqa-cited-corpus")}
    for g in got:
        assert [c["document_id"] for c in g["contexts"]] == ranked(run[g["task_id"]])[:3]
        assert all(c["score"] == run[g["task_id"]][c["document_id"]] for c in g["contexts"])
        assert all(c["text"] == corpus[c["document_id"]] for c in g["contexts"])
    rep = report(out)
    assert (rep["retriever"], rep["strategy"], rep["k"]) == ("bm25", "questions", 3)
    assert rep["run_file_written"].endswith("bm25.run.trec") and "retriever bm25 (questions)" in stdout
    read = read_built_tasks(mtrag, out, config="fiqa-tasks", allow_missing=True)
    assert len(read) == 6 and len(read.missing) == 71 and {t.passage_source for t in read} == {"prediction"}


def test_mtrag_run_file_as_trec_or_official_submission(mtrag, scripted, tmp_path, capsys) -> None:
    """The run files ``convrag evaluate`` writes (TREC, and MTRAG's submission .jsonl) give the same contexts."""
    searched = tmp_path / "all.jsonl"
    assert generate(capsys, str(mtrag), "--mode", "retrieved", "--retriever", "bm25", "--out", str(searched),
                    "--config", "fiqa-tasks")[0] == 0  # fmt: skip
    run = read_run(tmp_path / "all.run.trec")
    write_submission({"fiqa": run}, tmp_path / "submission.jsonl")
    expected = {g["task_id"]: g["contexts"] for g in lines(searched)}
    for given in (tmp_path / "all.run.trec", tmp_path / "submission.jsonl"):
        out = tmp_path / f"from-{given.suffix[1:]}.jsonl"
        code, stdout, err = generate(capsys, str(mtrag), "--mode", "retrieved", "--run", str(given), "--out",
                                     str(out), "--config", "fiqa-tasks", "--max-turns", "4")  # fmt: skip
        assert code == 0, err
        got = lines(out)
        assert len(got) == 4 and all(g["contexts"] == expected[g["task_id"]] for g in got)
        assert report(out)["run"] == str(given) and report(out)["retriever"] is None
        assert not (tmp_path / f"from-{given.suffix[1:]}.run.trec").exists()


def test_mtrag_none_mode_and_evaluate_generation_end_to_end(mtrag, scripted, tmp_path, capsys) -> None:
    out = tmp_path / "closed.jsonl"
    code, _, err = generate(capsys, str(mtrag), "--mode", "none", "--out", str(out), "--config", "fiqa-tasks",
                            "--max-turns", "4")  # fmt: skip
    assert code == 0, err
    got = lines(out)
    assert len(got) == 4 and all(g["contexts"] == [] for g in got)
    assert all("Passages:" not in p and "own knowledge" not in p for p in scripted.prompts())
    assert all("own knowledge" in c["messages"][0]["content"] for c in scripted.backend.calls)
    capsys.readouterr()
    code = cli.main(["evaluate-generation", str(mtrag), "--predictions", str(out), "--config", "fiqa-tasks",
                     "--allow-missing", "--judge", "fake", "--metrics", "rb_llm", "--bootstrap", "20",
                     "--no-progress", "--out", str(tmp_path / "scores")])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads((tmp_path / "scores" / "results.json").read_text())
    assert summary["counts"]["tasks"] == 4 and summary["counts"]["missing_predictions"] == 73
    assert summary["counts"]["empty_contexts"] == 4


def test_run_file_with_unknown_query_or_document_is_an_error_naming_the_line(mtrag, scripted, tmp_path,
                                                                              capsys) -> None:
    task = rows(mtrag, "fiqa-tasks")[0]["task_id"]
    doc, other = (r["_id"] for r in rows(mtrag, "fiqa-cited-corpus")[:2])
    bad_query = tmp_path / "bad-query.trec"
    bad_query.write_text(f"{task} Q0 {doc} 1 3.5 x\n{task} Q0 {other} 2 1.0 x\n"
                         f"nosuchconversation<::>1 Q0 {doc} 1 2.0 x\n")  # fmt: skip
    out = tmp_path / "a.jsonl"
    code, stdout, err = generate(capsys, str(mtrag), "--mode", "retrieved", "--run", str(bad_query),
                                 "--out", str(out), "--config", "fiqa-tasks")  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{bad_query}:3:" in err and "unknown query id" in err and not out.exists()
    assert scripted.backend.calls == []  # checked before any call
    bad_doc = tmp_path / "bad-doc.trec"
    bad_doc.write_text(f"{task} Q0 {doc} 1 3.5 x\n{task} Q0 not-in-the-corpus 2 1.0 x\n")
    code, _, err = generate(capsys, str(mtrag), "--mode", "retrieved", "--run", str(bad_doc), "--out", str(out),
                            "--config", "fiqa-tasks")  # fmt: skip
    assert code == 2 and f"{bad_doc}:2:" in err and "not-in-the-corpus" in err


def test_argument_errors(mtrag, scripted, tmp_path, capsys) -> None:
    out = str(tmp_path / "x.jsonl")
    fiqa = ["--config", "fiqa-tasks"]
    for argv, part in ((["--mode", "retrieved", *fiqa], "exactly one of --retriever SPEC or --run FILE"),
                       (["--mode", "oracle", "--retriever", "bm25", *fiqa], "belong to --mode retrieved"),
                       (["--mode", "retrieved", "--retriever", "bm25", "--k", "11", *fiqa], "at most 10 contexts"),
                       (["--mode", "none", "--concurrency", "0", *fiqa], "--concurrency must be at least 1"),
                       (["--mode", "none"], "tasks config 'all-tasks' was not built")):  # fmt: skip
        code, _, err = generate(capsys, str(mtrag), *argv, "--out", out)
        assert code == 2 and part in err and len(err.strip().splitlines()) == 1, (argv, err)
    assert scripted.backend.calls == [] and not Path(out).exists()


def test_a_failed_call_gives_no_line_and_is_counted(mtrag, monkeypatch, tmp_path, capsys) -> None:
    tasks = rows(mtrag, "fiqa-tasks")[:5]
    failing = tasks[2]["input"][-1]["text"].strip()

    def responder(messages: list[dict[str, str]]) -> str:
        if failing in messages[-1]["content"].rsplit("Newest user question:", 1)[1]:
            raise BackendError("HTTP 400: the prompt is longer than the context window", kind="bad_request")
        return reply(messages)

    fake = Scripted(responder)
    monkeypatch.setattr(command, "make_llm", fake)
    out = tmp_path / "partial.jsonl"
    code, stdout, err = generate(capsys, str(mtrag), "--mode", "oracle", "--out", str(out), "--config", "fiqa-tasks",
                                 "--max-turns", "5")  # fmt: skip
    assert code == 0, err
    got = lines(out)
    assert [g["task_id"] for g in got] == [t["task_id"] for i, t in enumerate(tasks) if i != 2]
    rep = report(out)
    assert rep["without_answer_ids"] == [tasks[2]["task_id"]] and rep["counts"]["without_answer"] == 1
    assert "context window" in rep["failures"][tasks[2]["task_id"]] and rep["llm"]["failures"] == 1
    assert f"1 tasks without an answer: {tasks[2]['task_id']}" in stdout and "--allow-missing" in stdout
    # evaluate-generation needs --allow-missing to score the others; the failed task is listed as missing
    with pytest.raises(DataError, match="tasks have no prediction"):
        read_built_tasks(mtrag, out, config="fiqa-tasks")
    read = read_built_tasks(mtrag, out, config="fiqa-tasks", allow_missing=True)
    assert len(read) == 4 and tasks[2]["task_id"] in read.missing


def test_an_answer_that_is_all_reasoning(mtrag, recor, monkeypatch, tmp_path, capsys) -> None:
    """A reply that is all reasoning is no answer: never written as an empty prediction; with no answer at all the run
    fails (exit 1, one line) and writes only its report, marked incomplete."""
    unfinished = "<think>The user asks about smell receptors. Let me look at the first passage, which says"
    fake = Scripted(lambda messages: unfinished)
    monkeypatch.setattr(command, "make_llm", fake)
    for folder, extra, what in ((mtrag, ["--config", "fiqa-tasks"], "tasks"), (recor, [], "turns")):
        out = tmp_path / f"{Path(folder).name}.jsonl"
        code, _, err = generate(capsys, str(folder), "--mode", "oracle", "--out", str(out), "--max-turns", "2",
                                *extra)  # fmt: skip
        assert code == 1 and not out.exists()
        assert err.count("\n") == 1 and f"no answer for any of 2 {what} (2 reasoning-only replies)" in err
        rep = report(out)
        assert rep["complete"] is False and rep["counts"]["without_answer_by_kind"] == {"reasoning-only reply": 2}


def test_a_dead_endpoint_stops_the_run_and_writes_nothing(recor, monkeypatch, tmp_path, capsys) -> None:
    def refused(messages: list[dict[str, str]]) -> str:
        raise BackendError("connection refused", retryable=True, kind="connection")

    fake = Scripted(refused)
    monkeypatch.setattr(command, "make_llm", fake)
    out = tmp_path / "dead.jsonl"
    code, _, err = generate(capsys, str(recor), "--mode", "none", "--out", str(out), "--concurrency", "1")
    assert code == 2 and "unreachable" in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and not out.with_suffix(".report.json").exists()
    assert len(fake.backend.calls) <= 6  # the breaker stops after 3 failed calls (each retried once)


def test_rerun_repeats_no_call(mtrag, scripted, tmp_path, capsys) -> None:
    out = tmp_path / "again.jsonl"
    argv = [str(mtrag), "--mode", "oracle", "--out", str(out), "--config", "fiqa-tasks", "--max-turns", "5"]
    assert generate(capsys, *argv)[0] == 0
    first = out.read_text()
    assert len(scripted.backend.calls) == 5 and (tmp_path / "again.llm-cache").is_dir()
    code, stdout, _ = generate(capsys, *argv)
    assert code == 0 and len(scripted.backend.calls) == 5 and out.read_text() == first
    rep = report(out)
    assert rep["llm"]["calls"] == 0 and rep["llm"]["cache_hits"] == 5
    assert "LLM: 0 calls" in stdout and "5 cache hits" in stdout


# -- RECOR: one line per turn --------------------------------------------------------------------------------


def _recor_gold(folder: Path) -> dict[str, list[str]]:
    gold: dict[str, list[str]] = {}
    for d in ("biology", "drones", "earth_science", "law"):
        for r in rows(folder, f"{d}-qrels"):
            if r["score"] > 0:
                gold.setdefault(r["query-id"], []).append(r["corpus-id"])
    return gold


def _recor_queries(folder: Path) -> dict[str, dict[str, Any]]:
    return {r["_id"]: {**r, "domain": d} for d in ("biology", "drones", "earth_science", "law")
            for r in rows(folder, f"{d}-queries")}  # fmt: skip


def test_recor_oracle_lines_hold_the_gold_documents(recor, scripted, tmp_path, capsys) -> None:
    out = tmp_path / "oracle.jsonl"
    code, _, err = generate(capsys, str(recor), "--mode", "oracle", "--out", str(out))
    assert code == 0, err
    got, gold, queries = lines(out), _recor_gold(recor), _recor_queries(recor)
    corpus = {r["_id"]: r["text"] for d in ("biology", "drones", "earth_science", "law")
              for r in rows(recor, f"{d}-corpus")}  # fmt: skip
    assert len(got) == len(queries) == 13 and {g["task_id"] for g in got} == set(queries)
    for g in got:
        q = queries[g["task_id"]]
        assert set(g) == {"task_id", "conversation_id", "turn", "domain", "mode", "generator", "contexts",
                          "predictions"}  # fmt: skip
        assert (g["turn"], g["domain"], g["mode"], g["generator"]) == (q["turn"], q["domain"], "oracle",
                                                                      "openai:gen-model")  # fmt: skip
        assert g["conversation_id"] and g["task_id"].startswith(g["conversation_id"])
        in_corpus = [d for d in gold[g["task_id"]] if d in corpus]
        assert sorted(c["document_id"] for c in g["contexts"]) == sorted(in_corpus)
        assert all(c["score"] == 1.0 and c["text"] == corpus[c["document_id"]] for c in g["contexts"])
    smell = next(g for g in got if "smell" in queries[g["task_id"]]["text"].lower())
    assert smell["predictions"][0]["text"] == ANSWERS["smell"]
    later = [p for p in scripted.prompts() if "Earlier conversation:" in p]
    assert later and all("Assistant:" in p for p in later)  # turns after the first see the history


def test_recor_retrieved_from_a_run_file_and_none(recor, scripted, tmp_path, capsys) -> None:
    searched = tmp_path / "bm25.jsonl"
    code, _, err = generate(capsys, str(recor), "--mode", "retrieved", "--retriever", "bm25", "--k", "2",
                            "--out", str(searched))  # fmt: skip
    assert code == 0, err
    assert report(searched)["strategy"] == "history+reasoning"
    run = read_run(tmp_path / "bm25.run.trec")
    # the run written beside the answers, read back with --run: the same top 2 per turn
    again = tmp_path / "from-run.jsonl"
    code, _, err = generate(capsys, str(recor), "--mode", "retrieved", "--run", str(tmp_path / "bm25.run.trec"),
                            "--k", "2", "--out", str(again))  # fmt: skip
    assert code == 0, err
    for g in lines(again):
        assert [c["document_id"] for c in g["contexts"]] == ranked(run[g["task_id"]])[:2]
        assert g["mode"] == "retrieved"
    assert [g["contexts"] for g in lines(again)] == [g["contexts"] for g in lines(searched)]
    closed = tmp_path / "none.jsonl"
    code, _, err = generate(capsys, str(recor), "--mode", "none", "--out", str(closed), "--max-turns", "3")
    assert code == 0, err
    assert [g["contexts"] for g in lines(closed)] == [[], [], []]


def test_placeholder_warning(recor, monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.setattr(command, "make_llm", Scripted(spec="default"))
    out = tmp_path / "p.jsonl"
    code, stdout, _ = generate(capsys, str(recor), "--mode", "none", "--out", str(out), "--llm", "default",
                               "--max-turns", "2")  # fmt: skip
    assert code == 0
    assert "Warning: the answers come from the embedded SmolLM2-135M placeholder" in stdout
    assert "Point --llm at a real model" in stdout and report(out)["placeholder"] is True


def test_benchmark_without_generation_scheme_is_refused(recor, scripted, tmp_path, capsys) -> None:
    copy = tmp_path / "no-gen"
    shutil.copytree(recor, copy)
    readme = copy / "README.md"
    readme.write_text(readme.read_text().replace("generation: judge", "generation: null"))
    code, _, err = generate(capsys, str(copy), "--mode", "oracle", "--out", str(tmp_path / "x.jsonl"))
    assert code == 2 and "no reference answers to generate against" in err


# -- prompt pieces -------------------------------------------------------------------------------------------


def test_cut_fit_history_and_prompt() -> None:
    assert cut("short text ", 50) == "short text"
    long = "word " * 100
    assert cut(long, 42).endswith(" ...") and len(cut(long, 42)) <= 46
    history = [("user", "a" * 30), ("assistant", "b" * 30), ("user", "c" * 30)]
    assert [m["content"][0] for m in fit_history(history, 65)] == ["b", "c"]
    assert fit_history(history, 10) == [{"role": "user", "content": "... " + "c" * 10}]
    assert fit_history(history, 0) == []
    question = "Why? " * 400  # the question is never cut, whatever the budgets
    item = GenItem("t", question, history, [Passage("d1", "x " * 2000, "Title")])
    user = render_prompt(item, passage_chars=100, history_chars=40)[1]["content"]
    assert question.strip() in user and "[1] Title" in user and "c" * 30 in user and "b" * 30 not in user
    system = render_prompt(GenItem("t", "q?"))[0]["content"]
    assert "own knowledge" in system and "cannot answer" in system


def test_generator_label_has_no_secrets() -> None:
    assert generator_label("openai:m@http://user:pw@host:8000/v1;api_key=sk-1") == "openai:m@http://host:8000/v1"
    assert generator_label("default") == "default"


def test_mtr_bench_turns_are_generated_and_read_by_the_judge_scorer(scripted, tmp_path, capsys) -> None:
    from convrag.benchmarks.recor.generation import read_benchmark, read_predictions
    from convrag.hub.export import export_benchmark
    from tests.mtr_bench_fixture import write_fixture

    write_fixture(tmp_path / "source")
    built = export_benchmark("mtr-bench", tmp_path / "built", options={"source": str(tmp_path / "source")}).out_dir
    out = tmp_path / "mtr-oracle.jsonl"
    code, printed, err = generate(capsys, str(built), "--mode", "oracle", "--max-turns", "5", "--out", str(out))
    assert code == 0, err
    got = lines(out)
    assert len(got) == 5 and all(g["mode"] == "oracle" and len(g["contexts"]) == 1 for g in got)
    queries = {r["_id"]: r for r in rows(built, "queries")}
    qrels = {r["query-id"]: r["corpus-id"] for r in rows(built, "qrels")}
    assert all(g["task_id"] in queries and g["contexts"][0]["document_id"] == qrels[g["task_id"]] for g in got)
    bench = read_benchmark(built)
    predictions = read_predictions(out, bench, allow_missing=True)
    test_turns = [q for q in queries if q.startswith("test-")]  # the evaluation split (train rows share the config)
    assert len(predictions.missing) == len(test_turns) - 5 == 43
