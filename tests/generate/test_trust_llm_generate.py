"""Issue 29 (trust in the LLM pipelines), classes 2, 3 and 5 for `convrag generate`, `evaluate-generation` and
`evaluate`. Every LLM call goes over HTTP to a fake OpenAI-compatible server (tests/test_llm_faults.FakeServer).

- class 2: a reply that is empty, white space only or all reasoning is no answer: never written as an empty
  prediction; when no turn gets one, `generate` exits 1 with one line naming the counts and writes only its report,
  marked incomplete; with some answers it exits 0 and counts the others;
- class 3: an output that is an input, or a file / folder the command does not own, is refused (exit 2, one line,
  inputs byte-identical, no LLM call); an earlier output of the same command is replaced;
- class 5: an empty prediction is scored (BERTScore raw 0, bert_score's rule), never a crash; a clarification reply
  nested thousands of levels deep scores IBM's 0.5 (official mode) or is an unreadable reply (strict mode).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest

from convrag.cli import main
from convrag.core.out_folder import OWNER_MARKER, claim_out
from convrag.metrics.generation.components import BertScorer
from tests.evaluate.test_trust_generation import (
    RESPONSES,
    _built_fiqa,
    parquet,
    predictions_for,
    realistic,
    responses_copy,
)
from tests.generate.test_generate import _build
from tests.llm.test_faults import FakeServer

FAST = ["--bootstrap", "20", "--no-progress"]
ANSWER = ("Market capitalisation is the share price times the number of shares outstanding; the net asset value "
          "adds up what the fund owns and subtracts what it owes.")  # fmt: skip


@pytest.fixture(autouse=True)
def _quiet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No stray LLM configuration, judge replies cached per test, no progress bars (the tests count stderr lines)."""
    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    monkeypatch.setenv("CONVRAG_CACHE_DIR", str(tmp_path / "convrag-cache"))
    datasets.disable_progress_bars()
    yield
    datasets.enable_progress_bars()


@pytest.fixture(scope="module")
def shared_server() -> Iterator[FakeServer]:
    s = FakeServer()
    yield s
    s.close()


@pytest.fixture
def server(shared_server: FakeServer) -> FakeServer:
    """The module's fake server, with no script, no recorded request and the realistic judge / generator replies."""
    shared_server.script, shared_server.requests = [], []
    shared_server.responder = lambda body: reply(body["messages"])
    return shared_server


@pytest.fixture(scope="module")
def mtrag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The MTRAG-UN fiqa tasks build of test_trust_generation (read only here)."""
    return _built_fiqa(str(tmp_path_factory.getbasetemp() / "shared-build"))


@pytest.fixture(scope="module")
def recor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The RECOR sample build of test_generate (read only here)."""
    return _build(str(tmp_path_factory.getbasetemp() / "generate-builds"), "recor")


def reply(messages: list[dict[str, str]]) -> str:
    """A generator's answer for the `rag_answer` prompt, the judges' realistic replies otherwise."""
    if "Newest user question" in messages[-1]["content"]:
        return ANSWER
    return realistic(messages)


def spec(server: FakeServer, model: str = "test-model") -> str:
    return f"openai:{model}@{server.url};max_retries=0;timeout=5"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def snapshot(*paths: Path) -> dict[str, str]:
    """sha256 of every file under ``paths`` (files or folders)."""
    files = [f for p in paths for f in ([p] if p.is_file() else sorted(p.rglob("*"))) if f.is_file()]
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def one_line(code: int, err: str, command: str, expected: int, *parts: str) -> None:
    kind = "failed" if expected == 1 else "error"
    assert code == expected, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"convrag {command}: {kind}: "), err
    for part in parts:
        assert part in err, (part, err)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# --- class 2: an empty reply is no answer -------------------------------------------------------------------------
EMPTY_SHAPES = {
    "empty content": ("", "empty replies"),
    "white space": ("  \n\n \t", "empty replies"),
    "closed reasoning only": ("<think>The user asks how market capitalisation differs from NAV. The first passage "
                              "defines both terms, so I can answer from it.</think>\n\n", "reasoning-only replies"),
    "reasoning cut off": ("<think>Let me look at the passages. Passage 1 says the market value of a fund is",
                          "reasoning-only replies"),
}  # fmt: skip


@pytest.mark.parametrize("shape", list(EMPTY_SHAPES))
def test_no_answer_for_any_turn_fails_with_one_line_and_writes_only_the_report(
    shape: str, mtrag: Path, server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, kind = EMPTY_SHAPES[shape]
    server.responder = lambda body: text
    out = tmp_path / "answers.jsonl"
    before = snapshot(mtrag)
    code, stdout, err = cli(capsys, "generate", str(mtrag), "--mode", "oracle", "--config", "fiqa-tasks",
                            "--max-turns", "3", "--out", str(out), "--llm", spec(server), "--no-progress")  # fmt: skip
    report_path = tmp_path / "answers.report.json"
    one_line(code, err, "generate", 1, f"no answer for any of 3 tasks (3 {kind})", f"wrote only {report_path}",
             "no answers file")  # fmt: skip
    assert len(server.requests) == 3 and not out.exists() and snapshot(mtrag) == before
    report = json.loads(report_path.read_text())
    assert report["complete"] is False and report["answers_written"] is False
    assert report["incomplete_reason"] in err and report["counts"]["answered"] == 0
    assert report["counts"]["without_answer_by_kind"] == {kind.replace("replies", "reply"): 3}
    assert "0 of 3 tasks answered" in stdout


def test_no_answer_for_any_judge_scored_turn(recor: Path, server: FakeServer, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = lambda body: ""
    out = tmp_path / "none.jsonl"
    code, _, err = cli(capsys, "generate", str(recor), "--mode", "none", "--max-turns", "2", "--out", str(out),
                       "--llm", spec(server), "--no-progress")  # fmt: skip
    one_line(code, err, "generate", 1, "no answer for any of 2 turns (2 empty replies)")
    assert not out.exists()


def test_some_answers_exit_0_and_the_empty_ones_are_counted_never_written(
    mtrag: Path, server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def respond(body: dict) -> str:  # one call at a time: task 2 gets an empty reply, task 4 only reasoning
        return {2: "", 4: "<think>The passages do not say.</think>"}.get(len(server.requests), ANSWER)

    server.responder = respond
    out = tmp_path / "answers.jsonl"
    code, stdout, err = cli(capsys, "generate", str(mtrag), "--mode", "oracle", "--config", "fiqa-tasks",
                            "--max-turns", "5", "--concurrency", "1", "--out", str(out), "--llm", spec(server),
                            "--no-progress")  # fmt: skip
    assert code == 0 and err == "", err
    ids = _task_ids(mtrag, 5)
    got = lines(out)
    assert [g["task_id"] for g in got] == [ids[0], ids[2], ids[4]]
    assert all(g["predictions"][0]["text"] == ANSWER for g in got)
    report = json.loads((tmp_path / "answers.report.json").read_text())
    assert report["complete"] is True and report["counts"]["without_answer_by_kind"] == {
        "empty reply": 1, "reasoning-only reply": 1}  # fmt: skip
    assert report["failures"][report["without_answer_ids"][0]].startswith("empty reply")
    assert "2 tasks without an answer" in stdout and "(1 empty reply, 1 reasoning-only reply)" in stdout


# --- class 3: inputs are never outputs ---------------------------------------------------------------------------
def _task_ids(mtrag: Path, n: int) -> list[str]:
    return [r["task_id"] for r in pq.read_table(parquet(mtrag)).to_pylist()[:n]]


def _generate_case(case: str, mtrag: Path, tmp: Path) -> tuple[list[str], list[Path], str]:
    """(extra arguments, files that must stay byte-identical, the error's words) of one refused generate run."""
    if case == "--out is the --run file":
        run = tmp / "bm25.trec"
        run.write_text("".join(f"{t} Q0 doc-{i} 1 {9.5 - i} bm25\n" for i, t in enumerate(_task_ids(mtrag, 3))))
        return ["--mode", "retrieved", "--run", str(run), "--out", str(run)], [run], "--out is an input"
    if case == "--out is a user's file":
        mine = tmp / "notes.jsonl"
        mine.write_text('{"task_id": "mine", "note": "my own answers, written by hand"}\n')
        return ["--mode", "oracle", "--out", str(mine)], [mine], "--out exists and is not an earlier `convrag generate`"
    if case == "the report beside --out is a user's file":
        mine = tmp / "answers.report.json"
        mine.write_text('{"notes": "my own report"}\n')
        words = "is not a report of `convrag generate`"
        return ["--mode", "oracle", "--out", str(tmp / "answers.jsonl")], [mine], words
    return ["--mode", "oracle", "--out", str(tmp / "a.jsonl"), "--cache", str(mtrag)], [], "--cache is an input"


@pytest.mark.parametrize("case", ["--out is the --run file", "--out is a user's file",
                                  "the report beside --out is a user's file", "--cache is the built folder"])
def test_generate_refuses_to_write_over_an_input_or_a_user_file(
    case: str, mtrag: Path, server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, kept, words = _generate_case(case, mtrag, tmp_path)
    before = snapshot(mtrag, *kept)
    code, _, err = cli(capsys, "generate", str(mtrag), "--config", "fiqa-tasks", "--max-turns", "2",
                       "--llm", spec(server), "--no-progress", *argv)  # fmt: skip
    one_line(code, err, "generate", 2, words)
    assert snapshot(mtrag, *kept) == before and server.requests == []
    assert not (tmp_path / "a.jsonl").exists() and not (tmp_path / "answers.jsonl").exists()


def test_generate_replaces_its_own_earlier_output(mtrag: Path, server: FakeServer, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "answers.jsonl"
    argv = ["generate", str(mtrag), "--mode", "oracle", "--config", "fiqa-tasks", "--max-turns", "2",
            "--out", str(out), "--no-progress"]  # fmt: skip
    server.responder = lambda body: ""
    assert cli(capsys, *argv, "--llm", spec(server))[0] == 1  # only the report, marked incomplete
    server.responder = lambda body: ANSWER
    code, _, err = cli(capsys, *argv, "--llm", spec(server, "other-model"))
    assert code == 0, err
    assert len(lines(out)) == 2 and json.loads(out.with_suffix(".report.json").read_text())["complete"] is True
    code, _, err = cli(capsys, *argv, "--llm", spec(server, "other-model"))
    assert code == 0 and len(server.requests) == 4, err  # the rerun replaced its own files from the cache


def test_generate_without_answers_removes_the_earlier_runs_answers_and_run_file(
    recor: Path, server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Model A answers into ans.jsonl (with its bm25 run file); model B then answers nothing into the same --out:
    exit 1, and A's answers and run file are gone, so no answers stand beside a report that names B."""
    out = tmp_path / "ans.jsonl"
    run_path, report_path = tmp_path / "ans.run.trec", tmp_path / "ans.report.json"
    notes = tmp_path / "ans.notes.txt"
    notes.write_text("my notes on model A\n", encoding="utf-8")
    argv = ["generate", str(recor), "--mode", "retrieved", "--retriever", "bm25", "--k", "2", "--max-turns", "2",
            "--out", str(out), "--no-progress"]  # fmt: skip
    code, _, err = cli(capsys, *argv, "--llm", spec(server, "model-a"))
    assert code == 0 and len(lines(out)) == 2 and run_path.is_file(), err
    server.responder = lambda body: "<think>The passages do not say; I should"
    code, stdout, err = cli(capsys, *argv, "--llm", spec(server, "model-b"))
    one_line(code, err, "generate", 1, "no answer for any of 2 turns (2 reasoning-only replies)",
             f"wrote only {report_path}", f"removed the earlier run's {out} and {run_path}")  # fmt: skip
    assert not out.exists() and not run_path.exists()
    report = json.loads(report_path.read_text())
    assert report["generator"].startswith("openai:model-b@") and report["counts"]["answered"] == 0
    assert report["complete"] is False and report["run_file_written"] is None and report["incomplete_reason"] in err
    assert notes.read_text(encoding="utf-8") == "my notes on model A\n"
    assert "0 of 2 turns answered" in stdout
    # a second empty run has nothing of another run to remove
    code, _, err = cli(capsys, *argv, "--llm", spec(server, "model-b"))
    one_line(code, err, "generate", 1, "no answers file")
    assert "removed" not in err and notes.exists()


def _evaluate_generation_case(case: str, mtrag: Path, recor: Path, server: FakeServer, tmp: Path,
                              capsys: pytest.CaptureFixture[str]) -> tuple[list[str], Path, str]:
    """(arguments, the --out folder, the error's words) of one refused evaluate-generation run."""
    out = tmp / "scores"
    out.mkdir()
    if case == "predictions saved as --out/per_turn.jsonl (RECOR)":
        predictions = out / "per_turn.jsonl"
        code, _, err = cli(capsys, "generate", str(recor), "--mode", "none", "--max-turns", "2",
                           "--out", str(predictions), "--llm", spec(server), "--no-progress")  # fmt: skip
        assert code == 0, err
        server.requests = []
        return [str(recor), "--predictions", str(predictions)], out, "--out contains the input"
    if case == "predictions inside --out (MTRAG)":
        predictions = predictions_for(mtrag, out / "predictions.jsonl")
        return [str(mtrag), "--config", "fiqa-tasks", "--predictions", str(predictions)], out, "contains the input"
    if case == "responses file inside --out":
        responses = responses_copy(out, lambda objs: None)
        return [str(responses)], out, "--out contains the input"
    (out / "results.md").write_text("# My notes on the generation runs\n")
    return [str(RESPONSES)], out, f"it has no {OWNER_MARKER}"


EG_CASES = ["predictions saved as --out/per_turn.jsonl (RECOR)", "predictions inside --out (MTRAG)",
            "responses file inside --out", "--out holds a user's results.md"]  # fmt: skip


@pytest.mark.parametrize("case", EG_CASES)
def test_evaluate_generation_refuses_an_out_folder_with_an_input_or_not_its_own(
    case: str, mtrag: Path, recor: Path, server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, out, words = _evaluate_generation_case(case, mtrag, recor, server, tmp_path, capsys)
    before = snapshot(out, mtrag, recor)
    code, stdout, err = cli(capsys, "evaluate-generation", *argv, "--judge", spec(server, "judge"), "--metrics",
                            "rb_llm", "--lexical", "rouge-l", "--out", str(out), *FAST)  # fmt: skip
    one_line(code, err, "evaluate-generation", 2, str(out), words)
    assert snapshot(out, mtrag, recor) == before and server.requests == [] and stdout == ""
    assert not (out / OWNER_MARKER).exists()


def test_evaluate_generation_into_a_new_folder_then_again_into_it(server: FakeServer, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "new" / "scores"
    argv = ["evaluate-generation", str(RESPONSES), "--judge", spec(server, "judge"), "--metrics", "rb_llm",
            "--out", str(out), *FAST]  # fmt: skip
    assert cli(capsys, *argv)[0] == 0 and (out / OWNER_MARKER).is_file()
    assert cli(capsys, *argv)[0] == 0 and (out / "per_task.jsonl").is_file()
    # a run that fails before writing leaves no folder behind
    missing = tmp_path / "missing.jsonl"
    code, _, err = cli(capsys, "evaluate-generation", str(missing), "--judge", spec(server, "judge"),
                       "--out", str(tmp_path / "other" / "scores"), *FAST)  # fmt: skip
    one_line(code, err, "evaluate-generation", 2, "missing.jsonl")
    assert not (tmp_path / "other").exists()


@pytest.mark.parametrize("case", ["--out holds a user's results.md", "--run file inside --out"])
def test_evaluate_refuses_an_out_folder_with_an_input_or_not_its_own(
    case: str, mtrag: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results"
    if case == "--out holds a user's results.md":
        out.mkdir()
        (out / "results.md").write_text("# BM25 on fiqa: my numbers from last week\n")
        argv, words = [], f"it has no {OWNER_MARKER}"
    else:
        claim_out(out, [], "evaluate")  # an earlier evaluation's folder, with a run the user now wants to score
        (out / "runs").mkdir()
        run = out / "runs" / "bm25.trec"
        run.write_text("".join(f"{t} Q0 doc-{i} 1 {9.5 - i} bm25\n" for i, t in enumerate(_task_ids(mtrag, 3))))
        argv, words = ["--run", f"old={run}"], "--out contains the input"
    before = snapshot(out, mtrag)
    code, _, err = cli(capsys, "evaluate", str(mtrag), "--retrievers", "bm25", *argv, "--out", str(out),
                       "--bootstrap", "0", "--no-progress")  # fmt: skip
    one_line(code, err, "evaluate", 2, str(out), words)
    assert snapshot(out, mtrag) == before


# --- class 5: empty predictions and deeply nested judge replies ----------------------------------------------------
def test_empty_predictions_are_scored_with_bertscore_raw_0_never_a_crash(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def empty(objs: list[dict]) -> None:
        del objs[5:]
        objs[1]["predictions"][0]["text"] = ""
        objs[2]["predictions"][0]["text"] = "  \n "

    responses = responses_copy(tmp_path, empty)
    out = tmp_path / "scores"
    code, stdout, err = cli(capsys, "evaluate-generation", str(responses), "--judge", spec(server, "judge"),
                            "--metrics", "rb_alg,rb_llm", "--out", str(out), *FAST)  # fmt: skip
    assert code == 0 and "Traceback" not in err and "Empty candidate" not in err, err  # no bert_score warning
    rows = lines(out / "per_task.jsonl")
    for row in rows[1:3]:
        assert (row["recall"], row["rouge_l"], row["k_precision"], row["rb_alg_raw"]) == (0.5, 0.0, 0.5, 0.0)
    assert all(r["rb_alg_raw"] > 0 for r in rows[3:])
    summary = json.loads((out / "results.json").read_text())
    assert summary["counts"]["empty_predictions"] == 2 and summary["counts"]["scored"] == 5
    assert "empty predictions (scored as given" in stdout and "so RB_alg 0): 2" in stdout


def test_empty_side_follows_bert_scores_rule_with_rescaling(tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.tsv"
    baseline.write_text("LAYER,P,R,F\n" + "".join(f"{i},0.{i}1,0.{i}2,0.{i}3\n" for i in range(7)))
    scorer = BertScorer(rescale_with_baseline=True, baseline_path=str(baseline))
    pair = ("The fund's NAV is assets minus liabilities.", "NAV is what the fund owns less what it owes.")
    p, r, f = scorer.score(["", pair[0], "x"], ["A reference answer.", pair[1], " "])
    b = (0.61, 0.62, 0.63)  # layer 6, MiniLM's last
    expected = tuple(pytest.approx(-x / (1 - x), abs=1e-6) for x in b)
    assert (p[0], r[0], f[0]) == expected and (p[2], r[2], f[2]) == expected
    alone = scorer._load().score([pair[0]], [pair[1]])
    assert (p[1], r[1], f[1]) == tuple(float(t[0]) for t in alone)


DEPTH = 3000
NESTED = {
    "array in the object": '{"decision": ' + "[" * DEPTH + "]" * DEPTH + ', "explanation": "asks"}',
    "fenced": "```json\n" + '{"decision": ' + "[" * DEPTH + "]" * DEPTH + "}\n```",
    "objects": '{"decision": ' + '{"d": ' * DEPTH + '"yes"' + "}" * DEPTH + "}",
    "bare arrays": "[" * DEPTH + "]" * DEPTH,
}


def nested_judge(text: str, roles: tuple[str, ...] = ('"decision"',)) -> Callable[[dict], str]:
    """Realistic replies, except ``text`` for the conversations (re-asks included) holding one of ``roles``."""

    def respond(body: dict) -> str:
        asked = "\n".join(m["content"] for m in body["messages"])
        return text if any(r in asked for r in roles) else reply(body["messages"])

    return respond


def _underspecified(objs: list[dict]) -> None:
    for i in (1, 2, 3):
        objs[i]["answerability"] = ["UNDERSPECIFIED"]


@pytest.mark.parametrize("shape", list(NESTED))
def test_deeply_nested_clarification_reply_scores_the_official_half(
    shape: str, server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.responder = nested_judge(NESTED[shape])
    responses = responses_copy(tmp_path, _underspecified)
    out = tmp_path / "scores"
    code, _, err = cli(capsys, "evaluate-generation", str(responses), "--judge", spec(server, "judge"),
                       "--metrics", "rb_llm", "--out", str(out), *FAST)  # fmt: skip
    assert code == 0 and err == "", err
    rows = lines(out / "per_task.jsonl")
    asked = [r for r in rows if r["answerability"] == "UNDERSPECIFIED"]
    assert len(asked) == 3 and all(r["clarification"] == 0.5 and r["fallbacks"]["clarification"] for r in asked)
    assert all(r["rb_llm"] == 0.0 and not r["excluded"] for r in asked)  # clarification != 1 -> 0, as IBM's rule
    counts = json.loads((out / "results.json").read_text())["counts"]
    assert counts["fallbacks"]["clarification"] == 3 and counts["clarification_asked"] == 3


def test_deeply_nested_structured_replies_are_unreadable_in_strict_mode(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.responder = nested_judge(NESTED["array in the object"], ('"decision"', '"claims"'))  # re-asks too
    responses = responses_copy(tmp_path, _underspecified)
    out = tmp_path / "scores"
    code, _, err = cli(capsys, "evaluate-generation", str(responses), "--judge", spec(server, "judge"),
                       "--mode", "strict", "--metrics", "rb_llm,rl_f", "--out", str(out), *FAST)  # fmt: skip
    assert code == 0 and err == "", err
    rows = lines(out / "per_task.jsonl")
    assert all(r["rl_f_raw"] is None and r["fallbacks"]["rl_f"] and "nested too deep" in r["errors"]["rl_f"]
               for r in rows)  # fmt: skip
    asked = [r for r in rows if r["answerability"] == "UNDERSPECIFIED"]
    assert all(r["clarification"] is None and r["fallbacks"]["clarification"] for r in asked)
    assert all(r["excluded_reason"] == "unreadable judge reply (strict mode)" and r["rb_llm"] is None for r in rows)
    assert not any(r["call_failures"]["clarification"] or r["call_failures"]["rl_f"] for r in rows)


# --- degenerate output: one text for every answer, a judge that never varies --------------------------------------
def test_identical_answers_and_constant_verdicts_are_flagged(recor: Path, server: FakeServer, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A generator that answers "OK." to every turn: generate's report and one stderr line say so, and so do
    evaluate-generation's results.json, results.md and console, where a judge that grades every answer alike is
    flagged too; an audit judge that labels every turn "how" is flagged in summary.json, summary.md and on the
    console."""
    answers = tmp_path / "ok.jsonl"
    server.responder = lambda body: "OK."
    code, _, err = cli(capsys, "generate", str(recor), "--mode", "none", "--out", str(answers), "--llm", spec(server),
                       "--no-progress")
    assert code == 0, err
    report = json.loads((tmp_path / "ok.report.json").read_text(encoding="utf-8"))
    n = report["counts"]["answered"]
    assert n >= 10 and report["degenerate"]["flags"] == [f"{n} of {n} answers are the same text ('OK.')"]
    assert err.strip() == (f"convrag generate: warning: degenerate answers: {n} of {n} answers are the same text "
                           "('OK.') (report: degenerate)")

    # a judge that gives every answer the same grades, in the authors' bare form (criteria order, no passages)
    server.responder = lambda body: "2, 2, 3, 5"
    out = tmp_path / "scores"
    code, _, err = cli(capsys, "evaluate-generation", str(recor), "--predictions", str(answers), "--judge",
                       spec(server, "judge"), "--lexical", "rouge-l", "--out", str(out), *FAST)
    assert code == 0, err
    summary = json.loads((out / "results.json").read_text(encoding="utf-8"))
    flags = [f for checks in summary["degenerate"].values() for f in checks["flags"]]
    assert flags == [f"{n} of {n} answers are the same text ('OK.')"]
    md = (out / "results.md").read_text(encoding="utf-8")
    assert md.startswith("## Read with care\n\n") and "degenerate answers: " in md.split("\n## ", 1)[0]
    assert f"degenerate answers: {n} of {n} answers are the same text ('OK.')" in err
    assert sorted(summary["constant_verdicts"]) == ["coherence", "completeness", "correctness", "relevance"]
    assert summary["constant_verdicts"]["coherence"].startswith(f"all {n} verdicts are 5: the judge does not tell")
    assert f"Judge dimension coherence: all {n} verdicts are 5" in md and f"all {n} verdicts are 5" in err

    server.responder = lambda body: 'It asks how something works.\nEvidence: "how"\nQuestion pattern: how'
    audit = tmp_path / "audit"
    code, _, err = cli(capsys, "audit", str(recor), "--dimensions", "question_pattern", "--judge",
                       spec(server, "judge"), "--no-progress", "--out", str(audit))
    assert code == 0, err
    flagged = json.loads((audit / "summary.json").read_text(encoding="utf-8"))["benchmarks"]["recor"]
    [constant] = flagged["constant_verdicts"]
    assert constant["dimension"] == "question_pattern" and constant["text"].startswith("all 13 verdicts are how")
    assert "## Read with care" in (audit / "summary.md").read_text(encoding="utf-8")
    assert "convrag audit: warning: recor, " in err and "question_pattern: all 13 verdicts are how" in err
