"""Issue 29, classes 2 and 3 for `convrag audit` and `convrag select`, through the real HTTP client against a fake
OpenAI-compatible server: a run whose judge gives no usable verdict ends with exit 1, one stderr line naming the
dimension (audit) or pool (select) and the counts, its outputs marked incomplete and nothing scored from a failed
call; some usable verdicts are a result (exit 0, failures counted); --out never is, holds or overwrites an input or
a user's own folder, and a rerun into the command's own earlier --out works.

The unusable replies are unusable under any reading: HTTP 429 for ever, bodies that are not JSON, no choices,
ratings out of range (JSON and "**Rating:** 9") and refusals.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from convrag.cli import main
from tests.conftest import DATA
from tests.llm.test_faults import FakeServer

HOTPOT = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"
REFUSAL = "I'm sorry, but I can't evaluate this document."
UNUSABLE = {
    "429": "429",
    "bad body": "badbody",
    "empty choices": "empty_choices",
    "json rating 9": 'content:{"rationale": "The passage answers the question in full.", "rating": 9}',
    "bold rating 9": "content:The passage answers the question in full.\n\n**Rating:** 9",
    "refusal": f"content:{REFUSAL}",
}
FAILED_KIND = {"429": "call failed", "bad body": "call failed", "empty choices": "call failed"}


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` by relative path -> SHA-256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, list[str]]:
    """``convrag ARGV``: (exit code, stdout, non-blank stderr lines)."""
    capsys.readouterr()
    code = main([*argv, "--no-progress"])
    captured = capsys.readouterr()
    return code, captured.out, [line for line in captured.err.splitlines() if line.strip()]


@pytest.fixture
def server() -> Iterator[FakeServer]:
    s = FakeServer()
    yield s
    s.close()


def judge(server: FakeServer) -> str:
    return f"openai:test-model@{server.url};max_retries=0;timeout=5"


def counts(message: str, name: str) -> tuple[int, int, dict[str, int]]:
    """(items, requests, {failure kind: n}) of ``name`` in a failure line ``... name (I items, R requests: ...)``."""
    m = re.search(rf"{name} \((\d+) items, (\d+) requests: ([^)]*)\)", message)
    assert m, message
    kinds = {kind: int(n) for n, kind in re.findall(r"(\d+) ([a-z ]+?)(?:,|$)", m.group(3))}
    return int(m.group(1)), int(m.group(2)), kinds


# ------------------------------------------------------------------------------------------------ audit
@pytest.fixture(scope="module")
def recor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("recor") / "built"
    assert main(["build", "recor", "--source", str(DATA / "recor" / "sample"), "--out", str(out)]) == 0
    return out


def audit(capsys: pytest.CaptureFixture[str], folder: Path, server: FakeServer, out: Path, cache: Path,
          dimensions: str = "query_evidence,question_pattern") -> tuple[int, str, list[str]]:
    return run(capsys, "audit", str(folder), "--judge", judge(server), "--dimensions", dimensions, "--sample", "2",
               "--out", str(out), "--cache", str(cache))


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "verdicts.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("kind", list(UNUSABLE))
def test_audit_without_a_usable_verdict_fails_naming_the_dimensions(
        kind: str, recor: Path, server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server.script = [UNUSABLE[kind]] * 500
    before = snapshot(recor)
    code, stdout, err = audit(capsys, recor, server, tmp_path / "out", tmp_path / "cache")
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith("convrag audit: failed: no usable verdict for query_evidence (")
    verdicts = rows(tmp_path / "out")
    for dim in ("query_evidence", "question_pattern"):
        mine = [r for r in verdicts if r["dimension"] == dim]
        items, requests, kinds = counts(err[0], dim)
        assert (items, requests) == (len({r["item_id"] for r in mine}), len(mine)) and requests >= 2
        assert sum(kinds.values()) == requests and set(kinds) <= {"call failed", "unparseable"}
        if kind in FAILED_KIND:
            assert kinds == {FAILED_KIND[kind]: requests}
        # nothing is scored or labelled from a failed call or an unreadable reply
        assert all(r["score"] is None and r["label"] is None and r["error"] for r in mine)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    assert summary["complete"] is False and "query_evidence" in summary["incomplete"]
    stats = summary["benchmarks"]["recor"]["all"]["per_judge"][f"openai:test-model@{server.url}"]["query_evidence"]
    assert stats["mean"] is None and stats["n"] == 0 and stats["failed"] == requests_of(verdicts, "query_evidence")
    markdown = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert markdown.startswith("INCOMPLETE: no usable verdict for query_evidence") and markdown in stdout
    assert not (tmp_path / "out" / "heatmap.png").exists()
    assert snapshot(recor) == before


def requests_of(verdicts: list[dict], dimension: str) -> int:
    return sum(r["dimension"] == dimension for r in verdicts)


def half_refused(body: dict) -> str:
    """A usable JSON verdict for about half the (item, document) pairs, a refusal for the others (re-asks too)."""
    if zlib.crc32(body["messages"][1]["content"].encode()) % 2:
        return json.dumps({"rationale": "The passage states what the question asks for.", "rating": 4})
    return REFUSAL


def test_audit_with_some_usable_verdicts_succeeds_and_counts_the_failures(
        recor: Path, server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = half_refused
    code, stdout, err = audit(capsys, recor, server, tmp_path / "out", tmp_path / "cache", "query_evidence")
    assert code == 0 and err == []
    verdicts = rows(tmp_path / "out")
    scored = [r for r in verdicts if r["score"] is not None]
    assert 0 < len(scored) < len(verdicts) and all(r["score"] == 4.0 for r in scored)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    assert summary["complete"] is True and "incomplete" not in summary
    qe = summary["coverage"]["recor"]["query_evidence"]
    assert (qe["usable"], qe["requests"]) == (len(scored), len(verdicts))
    assert qe["failed"] == {"unparseable": len(verdicts) - len(scored)}
    overall = summary["benchmarks"]["recor"]["all"]["overall"]["query_evidence"]
    assert (overall["mean"], overall["n"], overall["failed"]) == (4.0, len(scored), len(verdicts) - len(scored))
    assert not stdout.startswith("INCOMPLETE") and (tmp_path / "out" / "heatmap.png").exists()


def test_audit_missed_estimate_without_a_usable_grade_fails(
        recor: Path, server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Q-E verdicts are usable, every relevance grade of the --missed estimate is refused: the estimate is named."""
    def reply(body: dict) -> str:
        if body["messages"][0]["content"].startswith("You check search results"):  # audit_relevance_graded
            return REFUSAL
        return json.dumps({"rationale": "The passage states what the question asks for.", "rating": 4})

    server.responder = reply
    out = tmp_path / "out"
    code, _, err = run(capsys, "audit", str(recor), "--judge", judge(server), "--dimensions", "query_evidence",
                       "--sample", "2", "--missed", "--pool-retrievers", "bm25", "--pool-depth", "3", "--out", str(out),
                       "--cache", str(tmp_path / "cache"))
    assert code == 1 and len(err) == 1, err
    m = re.match(r"convrag audit: failed: no usable verdict for the missed-relevant estimate recor-\S+ \((\d+) "
                 r"candidates: (\d+) failed; calibration included, (\d+) unparseable\)", err[0])
    assert m and m.group(1) == m.group(2) and int(m.group(3)) > int(m.group(1)) > 0, err[0]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["complete"] is False and "query_evidence" not in summary["incomplete"]
    assert summary["coverage"]["recor"]["query_evidence"]["usable"] > 0
    assert (next(out.glob("suspected-qrels-*.trec"))).read_text(encoding="utf-8") == ""


def test_audit_dead_endpoint_still_ends_the_run_with_exit_2(
        recor: Path, server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server.script = ["500"] * 100
    code, _, err = audit(capsys, recor, server, tmp_path / "out", tmp_path / "cache")
    assert code == 2 and len(err) == 1 and f"endpoint {server.url} unreachable" in err[0], err
    assert not (tmp_path / "out" / "summary.json").exists()


def test_audit_out_never_overwrites_an_input_or_a_users_folder(
        recor: Path, server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = half_refused
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "summary.md").write_text("# My own audit notes\n", encoding="utf-8")
    before, notes = snapshot(recor), snapshot(mine)
    cases = [(mine, "is not a results folder of `convrag audit`"), (recor, "is an input of this command"),
             (recor.parent, "contains the input")]
    for out, message in cases:
        code, _, err = audit(capsys, recor, server, out, tmp_path / "cache")
        assert code == 2 and len(err) == 1 and err[0].startswith("convrag audit: error: ") and message in err[0]
    assert server.requests == []  # refused before any judge call
    assert snapshot(mine) == notes and snapshot(recor) == before
    assert not (recor.parent / "verdicts.jsonl").exists()
    # the command's own earlier --out is reused: after a failed run, and again after a good one
    out = tmp_path / "results"
    server.responder, server.script = None, ["429"] * 100
    assert audit(capsys, recor, server, out, tmp_path / "cache")[0] == 1
    server.responder, server.script = half_refused, []
    assert audit(capsys, recor, server, out, tmp_path / "cache", "query_evidence")[0] == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["complete"] is True and {r["dimension"] for r in rows(out)} == {"query_evidence"}
    assert snapshot(recor) == before


def graded(body: dict) -> str:
    """A fenced JSON grade 0-3 (by the prompt) for a relevance request, a JSON 1-5 rating for the others."""
    if body["messages"][0]["content"].startswith("You check search results"):  # audit_relevance_graded
        grade = zlib.crc32(body["messages"][1]["content"].encode()) % 4
        verdict = json.dumps({"rationale": "Judged on what the passage says.", "grade": grade})
        return f"Here is my assessment:\n```json\n{verdict}\n```"
    return json.dumps({"rationale": "The passage states what the question asks for.", "rating": 4})


def test_audit_rerun_into_its_out_removes_the_earlier_runs_outputs_only(
        recor: Path, server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run with --missed, then one without into the same --out: the estimate's files of the first are removed,
    a file of the user's in the folder is left as it was, and every output is what summary.json lists."""
    server.responder = graded
    out = tmp_path / "out"
    argv = ["audit", str(recor), "--judge", judge(server), "--dimensions", "query_evidence", "--sample", "2",
            "--out", str(out), "--cache", str(tmp_path / "cache")]
    code, _, err = run(capsys, *argv, "--missed", "--pool-retrievers", "bm25", "--pool-depth", "1")
    assert code == 0 and err == [], err
    missed = {p.name for p in out.iterdir() if p.name.startswith(("suspected-qrels-", "missed-verdicts-", "rescored-"))}
    assert len(missed) == 3, missed
    first = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert missed <= set(first["files"]) and "heatmap.png" in first["files"]
    (out / "notes.txt").write_text("Judge looks lenient on Q-E; recheck by hand.\n", encoding="utf-8")
    (out / "rescored-mine.md").write_text("my own table, never listed by an audit\n", encoding="utf-8")
    kept = snapshot(out)
    code, stdout, err = run(capsys, *argv)
    assert code == 0 and err == [], err
    names = {p.name for p in out.iterdir()}
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert not names & missed and "missed" not in summary
    assert f"Removed the earlier audit's {', '.join(sorted(missed))} (not written by this run)" in stdout
    assert names == {*summary["files"], ".convrag-out.json", "notes.txt", "rescored-mine.md"}  # no temporary file
    mine = ("notes.txt", "rescored-mine.md")
    assert {n: kept[n] for n in mine} == {n: snapshot(out)[n] for n in mine}
    # a run that dies in the estimate (Q-E verdicts cached and staged, then a dead endpoint for the deeper pool's
    # documents) leaves the earlier outputs whole and no temporary file
    before = snapshot(out)
    server.responder, server.script, server.requests = None, ["500"] * 100, []
    code, _, err = run(capsys, *argv, "--missed", "--pool-retrievers", "bm25", "--pool-depth", "3")
    assert code == 2 and len(err) == 1 and "unreachable" in err[0], err
    assert server.requests and all(r["messages"][0]["content"].startswith("You check search results")
                                   for r in server.requests)
    assert snapshot(out) == before and {p.name for p in out.iterdir()} == names


# ------------------------------------------------------------------------------------------------ select
@pytest.fixture(scope="module")
def user_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's folder: the paragraphs of three HotpotQA questions (corpus.jsonl), the questions (queries.jsonl) and
    a grid space of two BM25 retrievers at depth 3 (space.yaml)."""
    folder = tmp_path_factory.mktemp("user")
    records = json.loads(HOTPOT.read_text(encoding="utf-8"))[:3]
    ids: dict[str, str] = {}
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
        for r in records:
            for title, sentences in r["context"]:
                if title not in ids:
                    ids[title] = f"d{len(ids) + 1}"
                    f.write(json.dumps({"_id": ids[title], "title": title, "text": "".join(sentences)}) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps({"_id": r["_id"], "text": r["question"]}) + "\n")
    space = {"depth": 3, "dimensions": {"retrieval": {"bm25": {"retriever": "bm25"}, "bm25s": {"retriever": "bm25s"}}},
             "search": {"strategy": "grid", "bootstrap": 50}}
    (folder / "space.yaml").write_text(yaml.safe_dump(space, sort_keys=False), encoding="utf-8")
    return folder


def select(capsys: pytest.CaptureFixture[str], files: Path, server: FakeServer, out: Path,
           cache: Path) -> tuple[int, str, list[str]]:
    return run(capsys, "select", "--space", str(files / "space.yaml"), "--corpus", str(files / "corpus.jsonl"),
               "--queries", str(files / "queries.jsonl"), "--judge", judge(server), "--cache", str(cache),
               "--out", str(out))


SELECT_UNUSABLE = {**{k: v for k, v in UNUSABLE.items() if k in ("429", "bad body", "refusal")},
                   "json grade 9": 'content:{"rationale": "It answers the question.", "grade": 9}'}


@pytest.mark.parametrize("kind", list(SELECT_UNUSABLE))
def test_select_without_a_usable_judgment_fails_naming_the_pool(
        kind: str, user_files: Path, server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server.script = [SELECT_UNUSABLE[kind]] * 500
    before = snapshot(user_files)
    out = tmp_path / "chosen"
    code, stdout, err = select(capsys, user_files, server, out, tmp_path / "cache")
    assert code == 1 and len(err) == 1, err
    m = re.match(r"convrag select: failed: pool 'grid': every query has a failed judgment, nothing can be scored "
                 r"\((\d+) failed pairs; unique judgments failed: (\d+) (call failed|unparseable)\)", err[0])
    assert m, err[0]
    assert kind not in FAILED_KIND or m.group(3) == "call failed"
    pairs, unique = map(int, re.search(r"(\d+) pooled pairs, (\d+) unique judgments", stdout).groups())
    assert (int(m.group(1)), int(m.group(2))) == (pairs, unique) and unique > 0
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["complete"] is False and report["incomplete"] in err[0] and report["pools"] == []
    if kind in FAILED_KIND:
        assert report["judge_llm"]["failures"] == report["judge_llm"]["calls"] == unique
    # no leaderboard, curve or choice that could pass for a result
    assert {p.name for p in out.iterdir()} == {".convrag-out.json", "report.json"}
    assert "Chosen:" not in stdout and "PR-AUC" not in stdout
    assert snapshot(user_files) == before


def grade_but_refuse_one_question(body: dict) -> str:
    """Grades 0 or 3 (by the passage), and a refusal for every passage of the first question."""
    user = body["messages"][1]["content"]  # the prompt itself, also in a re-ask
    if "Latest question: Were Scott Derrickson" in user:
        return REFUSAL
    grade = 3 if zlib.crc32(user.encode()) % 2 else 0
    return json.dumps({"rationale": "Judged by what the passage says.", "grade": grade})


def test_select_with_some_usable_judgments_chooses_and_counts_the_failures(
        user_files: Path, server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = grade_but_refuse_one_question
    out = tmp_path / "chosen"
    code, stdout, err = select(capsys, user_files, server, out, tmp_path / "cache")
    assert code == 0 and err == [] and "Chosen:" in stdout
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["complete"] is True and len(report["pools"][0]["failed_queries"]) == 1
    judgments = report["pools"][0]["judgments"]
    assert judgments["failures"] == {"unparseable": judgments["pairs"] - judgments["judged_pairs"]}
    assert 0 < judgments["failed_pairs"] < judgments["pairs"]
    assert (out / "chosen.yaml").exists() and (out / "leaderboard.md").exists()


def test_select_out_never_overwrites_an_input_or_a_users_folder(
        user_files: Path, server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = grade_but_refuse_one_question
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "summary.md").write_text("# Which retriever? My notes\n", encoding="utf-8")
    before, notes = snapshot(user_files), snapshot(mine)
    cases = [(mine, "is not a results folder of `convrag select`"), (user_files, "contains the input"),
             (user_files / "queries.jsonl", "names an existing file")]
    for out, message in cases:
        code, _, err = select(capsys, user_files, server, out, tmp_path / "cache")
        assert code == 2 and len(err) == 1 and err[0].startswith("convrag select: error: ") and message in err[0]
    # an --out inside a corpus folder would be read back as corpus by the next run
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "docs.jsonl").write_bytes((user_files / "corpus.jsonl").read_bytes())
    code, _, err = run(capsys, "select", "--space", str(user_files / "space.yaml"), "--corpus", str(corpus),
                       "--queries", str(user_files / "queries.jsonl"), "--judge", judge(server),
                       "--cache", str(tmp_path / "cache"), "--out", str(corpus / "sel"))
    assert code == 2 and len(err) == 1 and "is inside the input folder" in err[0] and not (corpus / "sel").exists()
    assert server.requests == []
    assert snapshot(mine) == notes and snapshot(user_files) == before
    # its own earlier --out is replaced whole: a failed run leaves no stale leaderboard of the good one before it
    out = tmp_path / "chosen"
    assert select(capsys, user_files, server, out, tmp_path / "cache")[0] == 0
    assert (out / "leaderboard.md").exists()
    server.responder, server.script = None, ["429"] * 100
    assert select(capsys, user_files, server, out, tmp_path / "cache-2")[0] == 1
    assert not (out / "leaderboard.md").exists() and (out / "report.json").exists()
    server.responder, server.script = grade_but_refuse_one_question, []
    assert select(capsys, user_files, server, out, tmp_path / "cache-2")[0] == 0
    assert json.loads((out / "report.json").read_text(encoding="utf-8"))["complete"] is True
    assert snapshot(user_files) == before
