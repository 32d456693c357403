"""Issue 12 (trust), generation half: `convrag evaluate-generation` and the LLM layer.

- bad inputs (class 6 / 7 / 8): one stderr line naming the file (and line, or Parquet row), exit 2, no output;
- built folders are read from their Parquet files: replacing a file changes the next result (class 3);
- a dead judge never scores (class 5): connection refused, a server that never answers and HTTP 500 all end
  in exit 2 naming the endpoint, within seconds (the client's breaker); isolated call failures are left out of
  every mean and counted in every table;
- the judge is chosen explicitly, and the embedded placeholder is flagged in every table (class 9).

Bad inputs are derived in tmp_path from the real files in ../shared/data; judges are scripted fakes with
realistic replies (no model is loaded).
"""

from __future__ import annotations

import functools
import glob
import json
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from convrag.cli import main
from convrag.evaluate.generation import render_tables
from convrag.llm import LLM, BackendError, EndpointUnreachable, RetryPolicy, get_llm, is_placeholder, run_batch
from convrag.llm.backends.fake import FakeBackend
from convrag.metrics.generation import judges as judges_module
from convrag.metrics.generation.scorer import GenerationTask, score_generation
from tests.conftest import DATA
from tests.llm.test_faults import FakeServer

RESPONSES = DATA / "mtrag" / "scripts" / "evaluation" / "sample_data" / "responses-10.jsonl"
FAST = ["--metrics", "rb_llm", "--no-progress", "--bootstrap", "20"]


@pytest.fixture(autouse=True)
def _quiet(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No progress bars or stray judge configuration: the tests count stderr lines."""
    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    datasets.disable_progress_bars()
    yield
    datasets.enable_progress_bars()


def realistic(messages: list[dict[str, str]]) -> str:
    """Replies a working judge gives, chosen by the shipped prompts' wording."""
    text = "\n".join(m["content"] for m in messages)
    if "Rating: [[N]]" in text:
        return "The answer matches the reference and stays on the documents.\nRating: [[8]]"
    if '"verdicts"' in text:
        return json.dumps({"verdicts": [{"reason": "stated in passage 1", "supported": "yes"}]})
    if '"claims"' in text:
        return json.dumps({"claims": ["The answer states one fact."]})
    if '"decision"' in text:
        return '{"decision": "yes", "explanation": "It asks which account the user means."}'
    return "no"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["evaluate-generation", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_built(capsys: pytest.CaptureFixture[str], built: Path, predictions: Path, out: Path) -> tuple[int, str, str]:
    """``evaluate-generation`` on the built fiqa tasks with the fake judge (fast settings)."""
    return run_cli(capsys, str(built), "--config", "fiqa-tasks", "--predictions", str(predictions),
                   "--judge", "fake", "--out", str(out), *FAST)  # fmt: skip


def assert_one_line_error(code: int, err: str, *parts: str) -> None:
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("convrag evaluate-generation: error: ")
    for part in parts:
        assert part in err, (part, err)


@functools.lru_cache(maxsize=1)
def _built_fiqa(root: str) -> Path:
    out = Path(root) / "mtrag-un"
    assert (
        main(["build", "mtrag-un", "--source", str(DATA / "mtrag"), "--out", str(out), "--config", "fiqa-tasks"]) == 0
    )
    return out


@pytest.fixture
def built(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A private copy of a real MTRAG-UN build (fiqa tasks), safe to corrupt."""
    source = _built_fiqa(str(tmp_path_factory.getbasetemp() / "shared-build"))
    capsys.readouterr()
    copy = tmp_path / "built"
    shutil.copytree(source, copy)
    return copy


def parquet(folder: Path) -> str:
    return glob.glob(str(folder / "fiqa-tasks" / "*.parquet"))[0]


def rewrite_rows(path: str, change: Callable[[list[dict]], None]) -> None:
    table = pq.read_table(path)
    rows = table.to_pylist()
    change(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)


def predictions_for(folder: Path, path: Path, change: Callable[[list[dict]], None] | None = None) -> Path:
    """A valid submission for every task of ``folder`` (the reference answers as predictions), then ``change``."""
    lines = []
    for row in pq.read_table(parquet(folder)).to_pylist():
        lines.append(
            {"task_id": row["task_id"].replace("<::>", "::"), "predictions": [{"text": row["targets"][0]["text"]}]}
        )
    if change is not None:
        change(lines)
    path.write_text("".join(json.dumps(o) + "\n" for o in lines), encoding="utf-8")
    return path


def responses_copy(tmp_path: Path, change: Callable[[list[dict]], None]) -> Path:
    objs = [json.loads(line) for line in RESPONSES.read_text(encoding="utf-8").splitlines() if line.strip()]
    change(objs)
    path = tmp_path / "responses.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in objs), encoding="utf-8")
    return path


def corrupt_byte(path: Path, line: int, byte: bytes = b"\xff") -> Path:
    lines = path.read_bytes().split(b"\n")
    lines[line - 1] = lines[line - 1][:10] + byte + lines[line - 1][11:]
    path.write_bytes(b"\n".join(lines))
    return path


def _set(i: int, key: str, value: object) -> Callable[[list[dict]], None]:
    return lambda objs: objs[i].update({key: value})


def _pred(i: int, key: str, value: object) -> Callable[[list[dict]], None]:
    return lambda objs: objs[i]["predictions"][0].update({key: value})


def _ctx(n: int = 1, **fields: object) -> list[dict]:
    base = {"document_id": "doc-1", "score": 12.5, "text": "A retrieved passage."}
    return [{**base, **fields} for _ in range(n)]


# --- class 6 / 8: the submission (--predictions) ------------------------------------------------------------------
PREDICTION_CASES = {
    "non-UTF-8": (None, 3, "not UTF-8"),
    "malformed line": (lambda objs: None, 4, "invalid JSON"),
    "text not a string": (_pred(4, "text", 5), 5, "predictions[0] has no 'text' string"),
    "predictions not a list": (_set(4, "predictions", {"text": "x"}), 5, "'predictions' must be a list"),
    "second prediction without text": (_set(4, "predictions", [{"text": "a"}, {"txt": "b"}]), 5, "predictions[1]"),
    "task_id an int": (_set(4, "task_id", 12), 5, "'task_id' must be a string"),
    "contexts an object": (_set(4, "contexts", {"text": "x"}), 5, "'contexts' must be a list"),
    "eleven contexts": (_set(4, "contexts", _ctx(11)), 5, "too many contexts (11)"),
    "context without score": (_set(4, "contexts", _ctx(score=None)), 5, "contexts[0].score must be a number"),
    "context score a string": (_set(4, "contexts", _ctx(score="high")), 5, "contexts[0].score must be a number"),
    "context document_id an int": (_set(4, "contexts", _ctx(document_id=7)), 5, "document_id must be a string"),
    "context without text": (_set(4, "contexts", _ctx(text=None)), 5, "contexts[0].text must be a string"),
    "unknown task": (_set(4, "task_id", "0000::1"), 5, "is not among the 77 tasks"),
    "duplicate task": (lambda objs: objs[4].update(task_id=objs[1]["task_id"]), 5, "appears twice"),
}


@pytest.mark.parametrize("case", list(PREDICTION_CASES))
def test_bad_submission_is_one_line_naming_file_and_line(
    case: str, built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    change, line, message = PREDICTION_CASES[case]
    path = predictions_for(built, tmp_path / "predictions.jsonl", change)
    if case == "non-UTF-8":
        corrupt_byte(path, line)
    if case == "malformed line":
        lines = path.read_text(encoding="utf-8").splitlines()
        lines[line - 1] = lines[line - 1][:-3]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "results"
    code, _, err = run_built(capsys, built, path, out)
    assert_one_line_error(code, err, f"{path}:{line}: ", message)
    assert not out.exists()


# --- class 6 / 7: the responses file and the built folder --------------------------------------------------------
RESPONSES_CASES = {
    "non-UTF-8": (None, 6, "not UTF-8"),
    "empty reference answer": (lambda objs: objs[3]["targets"][0].update(text=" "), 4, "targets[0].text"),
    "no targets": (lambda objs: objs[3].pop("targets"), 4, "missing field 'targets'"),
    "no contexts": (lambda objs: objs[3].pop("contexts"), 4, "missing field 'contexts'"),
    "input an object": (_set(3, "input", {"speaker": "user", "text": "q"}), 4, "'input' must be a list"),
    "context text an int": (lambda objs: objs[3]["contexts"][0].update(text=3), 4, "contexts[0] needs 'text'"),
    "prediction text a list": (_pred(3, "text", ["a"]), 4, "predictions[0] has no 'text' string"),
    "turn not a number": (_set(3, "turn", "three"), 4, "turn must be an integer"),
    "unknown answerability": (_set(3, "answerability", ["MAYBE"]), 4, "unknown answerability"),
    "unknown collection": (_set(3, "collection", "mt-rag-astronomy"), 4, "unknown MTRAG collection 'mt-rag-astronomy'"),
}


@pytest.mark.parametrize("case", list(RESPONSES_CASES))
def test_bad_responses_file_is_one_line_naming_file_and_line(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    change, line, message = RESPONSES_CASES[case]
    path = responses_copy(tmp_path, change or (lambda objs: None))
    if change is None:
        corrupt_byte(path, line, b"\xe9")
    out = tmp_path / "results"
    code, _, err = run_cli(capsys, str(path), "--judge", "fake", "--out", str(out), *FAST)
    assert_one_line_error(code, err, f"{path}:{line}: ", message)
    assert not out.exists()


def _row_change(column: str, value: object) -> Callable[[list[dict]], None]:
    return lambda rows: rows[2].update({column: value})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_row_change("answerability", "MAYBE"), "unknown answerability"),
        (_row_change("targets", [{"speaker": "agent", "text": ""}]), "targets[0].text (a reference answer) is empty"),
        (_row_change("targets", []), "'targets' holds no reference answer"),
        (_row_change("input", []), "'input' (the conversation) is empty"),
    ],
)
def test_bad_built_row_names_its_parquet_file_and_row(
    change, message: str, built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    predictions = predictions_for(built, tmp_path / "predictions.jsonl")
    rewrite_rows(parquet(built), change)
    code, _, err = run_built(capsys, built, predictions, tmp_path / "results")
    assert_one_line_error(code, err, f"{parquet(built)}:3: ", message)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["{built}", "--config", "fiqa-tasks", "--predictions", "{tmp}/missing.jsonl"],
            "missing.jsonl: file does not exist",
        ),
        (["{tmp}/no-such-folder", "--predictions", "{tmp}/p.jsonl"], "no-such-folder: no such file or folder"),
        (["{built}", "--config", "nope-tasks", "--predictions", "{tmp}/p.jsonl"], "config 'nope-tasks' was not built"),
        (
            ["{built}", "--config", "fiqa-tasks", "--split", "train", "--predictions", "{tmp}/p.jsonl"],
            "no split 'train'",
        ),
        (["{built}", "--config", "fiqa-tasks"], "--predictions FILE is required"),
        (
            ["{built}", "--config", "fiqa-tasks", "--predictions", "{tmp}/p.jsonl", "--out", "{tmp}/p.jsonl"],
            "exists and is not a folder",
        ),
        (["{built}", "--config", "fiqa-tasks", "--predictions", "{tmp}"], "is a folder, expected a file"),
    ],
)
def test_missing_or_wrong_paths(
    argv: list[str], message: str, built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    predictions_for(built, tmp_path / "p.jsonl")
    args = [a.format(built=built, tmp=tmp_path) for a in argv]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "results")]
    code, _, err = run_cli(capsys, *args, "--judge", "fake", *FAST)
    assert_one_line_error(code, err, message)
    assert not (tmp_path / "results").exists()


# --- class 3: results reflect the files on disk ------------------------------------------------------------------
def test_replacing_the_parquet_changes_the_next_result(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    predictions = predictions_for(built, tmp_path / "predictions.jsonl")

    def evaluate(out: Path) -> dict:
        code, _, err = run_built(capsys, built, predictions, out)
        assert code == 0, err
        return json.loads((out / "results.json").read_text())

    first = evaluate(tmp_path / "first")
    assert set(first["by"]["answerability"]) == {"ANSWERABLE", "PARTIAL", "UNANSWERABLE", "UNDERSPECIFIED"}
    rewrite_rows(parquet(built), lambda rows: [r.update(answerability="UNANSWERABLE") for r in rows])
    second = evaluate(tmp_path / "second")
    assert (
        set(second["by"]["answerability"]) == {"UNANSWERABLE"}
        and second["by"]["answerability"]["UNANSWERABLE"]["n"] == 77
    )


# --- class 8: what the official checker accepts is accepted, and counted ------------------------------------------
def test_empty_answers_and_empty_contexts_are_accepted_and_counted(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def change(objs: list[dict]) -> None:
        objs[0]["predictions"][0]["text"] = ""
        objs[1]["contexts"] = []
        objs[2]["contexts"] = _ctx(10)

    predictions = predictions_for(built, tmp_path / "predictions.jsonl", change)
    code, out, err = run_built(capsys, built, predictions, tmp_path / "results")
    assert code == 0, err
    counts = json.loads((tmp_path / "results" / "results.json").read_text())["counts"]
    assert counts["empty_predictions"] == 1 and counts["empty_contexts"] == 1 and counts["scored"] == 77
    assert "empty predictions (scored as given" in out and "empty contexts list" in out
    rows = [json.loads(line) for line in (tmp_path / "results" / "per_task.jsonl").read_text().splitlines()]
    assert [r["passage_source"] for r in rows[:3]] == ["reference", "prediction", "prediction"]
    assert rows[1]["n_passages"] == 0 and rows[2]["n_passages"] == 10


# --- class 5: a dead judge never scores --------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(params=["refused", "never answers", "HTTP 500"])
def dead_endpoint(request: pytest.FixtureRequest) -> Iterator[str]:
    """The base URL of an endpoint that refuses connections, accepts them but never answers, or answers 500."""
    if request.param == "refused":
        yield f"http://127.0.0.1:{_free_port()}/v1"
    elif request.param == "never answers":
        with socket.socket() as s:  # listening, never accepting: the client connects and waits
            s.bind(("127.0.0.1", 0))
            s.listen(64)
            yield f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    else:
        server = FakeServer()
        server.script = ["500"] * 1000
        yield server.url
        server.close()


def test_dead_judge_exits_2_naming_the_endpoint_fast(
    dead_endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results"
    t0 = time.perf_counter()
    judge = f"openai:judge@{dead_endpoint};max_retries=1;timeout=1"
    code, stdout, err = run_cli(capsys, str(RESPONSES), "--judge", judge, "--out", str(out), *FAST)
    seconds = time.perf_counter() - t0
    assert_one_line_error(code, err, f"endpoint {dead_endpoint} unreachable", "3 of 3 calls failed")
    assert seconds < 10, seconds
    assert not out.exists() and "RB_llm" not in stdout


def rewrite(llm: LLM, i: int) -> str:
    return llm.chat([{"role": "user", "content": f"Rewrite query {i} so that it stands alone."}]).text


def test_breaker_stops_a_batch_of_20_items_in_seconds(dead_endpoint: str) -> None:
    for concurrency in (1, 4):
        llm = get_llm(
            f"openai:judge@{dead_endpoint}",
            api_key="k",
            cache=False,
            timeout=0.5,
            retry=RetryPolicy(max_retries=2, base_delay=0.1, max_delay=0.2),
        )
        t0 = time.perf_counter()
        with pytest.raises(EndpointUnreachable, match=f"endpoint {dead_endpoint} unreachable") as err:
            run_batch(range(20), functools.partial(rewrite, llm), concurrency=concurrency)
        assert time.perf_counter() - t0 < 10
        assert err.value.endpoint == dead_endpoint and err.value.failed >= 3
    # the breaker stays open: later calls fail at once, without a request
    calls = llm.report.calls
    with pytest.raises(EndpointUnreachable):
        llm.chat([{"role": "user", "content": "one more"}])
    assert llm.report.calls == calls


def test_breaker_resets_on_success_and_skips_backoff_while_suspect() -> None:
    down = BackendError("connection error: refused", retryable=True, kind="connection")
    sleeps: list[float] = []
    backend = FakeBackend(script=[down] * 4 + ["ok"] + [down] * 5 + ["ok"])
    llm = LLM(backend, cache=False, retry=RetryPolicy(max_retries=3), sleep=sleeps.append)
    with pytest.raises(Exception, match="gave up after 4 attempts"):
        llm.chat([{"role": "user", "content": "a"}])  # full retries: nothing is known about the endpoint yet
    assert llm.chat([{"role": "user", "content": "b"}]).text == "ok"  # a success closes the breaker again
    with pytest.raises(Exception, match="gave up after 4 attempts"):
        llm.chat([{"role": "user", "content": "c"}])
    with pytest.raises(Exception, match="gave up after 1 attempts"):  # suspect endpoint: no backoff retries
        llm.chat([{"role": "user", "content": "d"}])
    assert len(sleeps) == 6 and llm.chat([{"role": "user", "content": "e"}]).text == "ok"


def flaky(fail_on: str, error: BackendError) -> LLM:
    """A judge whose calls about one answer fail (not the endpoint: the other calls are answered)."""

    def respond(messages: list[dict[str, str]]) -> str:
        if fail_on in messages[-1]["content"]:
            raise error
        return realistic(messages)

    return LLM(FakeBackend(responder=respond), cache=False, retry=RetryPolicy(max_retries=0))


def tasks(n: int = 4) -> list[GenerationTask]:
    return [
        GenerationTask(
            task_id=f"t{i}",
            prediction=f"Answer {i}: it opened in 1901.",
            references=["It opened in 1901."],
            passages=["The library opened in 1901."],
            conversation=[{"speaker": "user", "text": "When did the library open?"}],
            answerability="ANSWERABLE" if i % 2 else "UNANSWERABLE",
            domain="govt",
            turn=1,
        )
        for i in range(n)
    ]


def test_isolated_call_failures_are_excluded_and_shown_in_every_table() -> None:
    error = BackendError("request failed (400): context length exceeded", kind="client_error")
    result = score_generation(
        tasks(), judge=flaky("Answer 2:", error), metrics=("rb_llm", "rl_f"), n_bootstrap=50, progress=False
    )
    rows = {r["task_id"]: r for r in result.per_task}
    failed = rows["t2"]
    assert failed["excluded"] and failed["excluded_reason"] == "judge call failed"
    assert failed["call_failures"]["idk"] and failed["idk"] is None and failed["rb_llm"] is None
    assert failed["harmonic"] is None and "context length" in failed["errors"]["idk"]
    assert all(not rows[t]["excluded"] and rows[t]["rb_llm"] is not None for t in ("t0", "t1", "t3"))
    counts = result.summary["counts"]
    assert counts["excluded"] == 1 and counts["excluded_by_reason"] == {"judge call failed": 1}
    assert counts["call_failures"]["idk"] == 1 and counts["fallbacks"] == {
        "idk": 0,
        "clarification": 0,
        "rb_llm": 0,
        "rl_f": 0,
    }
    assert result.summary["overall"]["rb_llm"]["n"] == 3  # no 0.5 stands in for the failed task
    md = render_tables(result.to_dict())
    assert md.count("Left out of every mean: 1 of 4 tasks (judge call failed: 1)") == 4  # overall + 3 breakdowns
    assert md.count("> Judge: fake:fake") == 4


def test_every_call_failing_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    error = BackendError("request failed (401): invalid API key", kind="client_error")
    with pytest.raises(Exception, match="a judge call failed on every one of the 4 tasks; first: .*401"):
        score_generation(tasks(), judge=flaky("Answer", error), metrics=("rb_llm",), n_bootstrap=50, progress=False)


# --- class 9: the judge is chosen explicitly; the placeholder is flagged everywhere -------------------------------
def test_no_judge_is_an_error_that_says_how_to_choose_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results"
    code, _, err = run_cli(capsys, str(RESPONSES), "--out", str(out), *FAST)
    assert_one_line_error(
        code, err, "no judge chosen", "--judge", "openai:MODEL@http://HOST:PORT/v1", "--judge default"
    )
    assert not out.exists()
    with pytest.raises(Exception, match="no judge chosen"):
        score_generation(tasks(1), metrics=("rb_llm",), progress=False)


def test_placeholder_judge_is_named_and_flagged_in_every_table(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def fake_get_llm(spec: str) -> LLM:  # the placeholder's spec, without loading the model
        return LLM(FakeBackend(responder=realistic, model="SmolLM2-135M-Instruct.Q4_1.gguf"), cache=False, spec=spec)

    monkeypatch.setattr(judges_module, "get_llm", fake_get_llm)
    out = tmp_path / "results"
    code, stdout, err = run_cli(capsys, str(RESPONSES), "--judge", "default", "--out", str(out), *FAST)
    assert code == 0, err
    md = (out / "results.md").read_text()
    assert md.count("**Warning: these figures come from the embedded SmolLM2-135M placeholder") == 4
    assert md.count("> Judge: default (model SmolLM2-135M-Instruct.Q4_1.gguf)") == 4
    assert "To measure, point --judge at a real model" in stdout
    summary = json.loads((out / "results.json").read_text())
    assert summary["judge"]["placeholder"] is True and summary["judge"]["judges"] == ["default"]
    rows = [json.loads(line) for line in (out / "per_task.jsonl").read_text().splitlines()]
    assert {r["judge"] for r in rows} == {"default"}
    assert is_placeholder("default") and is_placeholder(None) and not is_placeholder("openai:gpt-4o-mini")
    assert is_placeholder("hf:HuggingFaceTB/SmolLM2-135M-Instruct") and not is_placeholder("fake")


def test_real_judge_has_no_placeholder_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = FakeServer()
    server.script = []
    try:
        code, stdout, err = run_cli(
            capsys, str(RESPONSES), "--judge", f"openai:qwen2.5-7b@{server.url}", "--out", str(tmp_path / "r"), *FAST
        )
    finally:
        server.close()
    assert code == 0, err
    assert "Warning" not in stdout and "> Judge: openai:qwen2.5-7b@" in stdout
