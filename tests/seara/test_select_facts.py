"""`convrag select` across chunkings: minimal facts choose, the evidence oracle on the command line, failed
extractions left out and listed, bad evidence files refused (real HotpotQA dev-distractor records)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from convrag.cli import main
from convrag.seara.evidence import normalize_span
from convrag.seara.inputs import read_corpus
from convrag.seara.runner import Runner
from convrag.seara.space import load_space
from tests.conftest import DATA
from tests.llm.test_faults import FakeServer

HOTPOT = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"
CHUNKINGS = {"paragraphs": {"strategy": "original"}, "sent1": {"strategy": "sentences", "n": 1},
             "sent3": {"strategy": "sentences", "n": 3}, "r256": {"strategy": "recursive", "chunk_size": 256},
             "r512": {"strategy": "recursive", "chunk_size": 512}}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The 30 questions as a user's files: corpus.jsonl (unique paragraphs), queries.jsonl, evidence.jsonl (the
    supporting sentences), and a grid space over five chunkings with bm25, depth 10."""
    folder = tmp_path_factory.mktemp("facts")
    records = json.loads(HOTPOT.read_text(encoding="utf-8"))
    seen: dict[str, str] = {}
    evidence: dict[str, list[str]] = {}
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
        for r in records:
            context = dict((t, s) for t, s in r["context"])
            evidence[r["_id"]] = [context[t][i].strip() for t, i in r["supporting_facts"] if i < len(context[t])]
            for title, sentences in r["context"]:
                if title not in seen:
                    seen[title] = f"d{len(seen) + 1}"
                    f.write(json.dumps({"_id": seen[title], "title": title, "text": "".join(sentences)}) + "\n")
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": r["_id"], "text": r["question"]}) + "\n"
                                                  for r in records), encoding="utf-8")  # fmt: skip
    (folder / "evidence.jsonl").write_text("".join(json.dumps({"query_id": q, "evidence": v}) + "\n"
                                                   for q, v in evidence.items()), encoding="utf-8")  # fmt: skip
    space = {"depth": 10, "dimensions": {"chunking": CHUNKINGS, "retrieval": {"bm25": {"retriever": "bm25"}}},
             "search": {"strategy": "grid", "bootstrap": 200}}
    (folder / "space.yaml").write_text(yaml.safe_dump(space, sort_keys=False), encoding="utf-8")
    return {"folder": folder, "evidence": evidence, "records": records}


def _args(folder: Path, out: Path, *extra: str) -> list[str]:
    return ["select", "--space", str(folder / "space.yaml"), "--corpus", str(folder / "corpus.jsonl"), "--queries",
            str(folder / "queries.jsonl"), "--out", str(out), "--no-progress", *extra]


def _select_over_http(files: dict, folder: Path, records: list, space: dict, reply: Callable[[dict], str],
                      options: str = "max_retries=0", model: str = "test-model") -> tuple[int, FakeServer]:
    """``convrag select`` on ``records``' questions and ``space`` (written into ``folder``), judged by an LLM at a
    fake OpenAI-compatible server whose replies ``reply(body)`` writes; the exit code and the (closed) server."""
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": r["_id"], "text": r["question"]}) + "\n"
                                                  for r in records), encoding="utf-8")  # fmt: skip
    (folder / "space.yaml").write_text(yaml.safe_dump(space), encoding="utf-8")
    server = FakeServer()
    server.responder = reply
    try:
        args = _args(files["folder"], folder / "out", "--judge", f"openai:{model}@{server.url};{options}")
        args[2], args[6] = str(folder / "space.yaml"), str(folder / "queries.jsonl")
        return main(args), server
    finally:
        server.close()


def _true_evidence_recall(folder: Path, evidence: dict[str, list[str]]) -> dict[str, float]:
    """Each configuration's evidence recall at K, computed here from select's own runs: evidence spans contained
    (whitespace-normalised, case-insensitive) in one of its top-10 chunks / all spans."""
    space = load_space(folder / "space.yaml")
    queries = {q: "" for q in evidence}
    queries.update({json.loads(line)["_id"]: json.loads(line)["text"]
                    for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines()})
    runner = Runner(space, read_corpus(folder / "corpus.jsonl"), queries, lambda spec: None, echo=None)
    truth = {}
    for config in space.full_grid():
        run = runner.run(config, list(queries))
        found = total = 0
        for q, spans in evidence.items():
            texts = [normalize_span(runner.texts[c]) for c in run[q]]
            total += len(spans)
            found += sum(any(normalize_span(s) in t for t in texts) for s in spans)
        truth[config.name] = found / total
    return truth


def test_the_evidence_oracle_picks_paragraphs_and_facts_follow_the_true_evidence_recall(
        files: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = files["folder"]
    out = tmp_path / "out"
    evidence_file = folder / "evidence.jsonl"
    before = evidence_file.read_bytes()
    assert main(_args(folder, out, "--judge", f"oracle:{evidence_file}")) == 0
    printed = capsys.readouterr().out
    chosen = yaml.safe_load((out / "chosen.yaml").read_text(encoding="utf-8"))
    assert chosen["configuration"] == "paragraphs/none/bm25/none/none"
    assert chosen["measure"] == "facts" and "differ in chunking" in chosen["measure_reason"]
    assert "# Measure: fact-level" in (out / "chosen.yaml").read_text(encoding="utf-8")
    board = json.loads((out / "leaderboard.json").read_text(encoding="utf-8"))
    assert board["headline"] == "facts"
    fact = {r["configuration"]: r["fact_pr_auc"] for r in board["rows"]}
    truth = _true_evidence_recall(folder, files["evidence"])
    by_truth = sorted(truth, key=lambda n: -truth[n])
    assert sorted(fact, key=lambda n: -fact[n]) == by_truth  # the fact-level column orders as the truth does
    assert len(set(truth.values())) == len(truth)  # no tie hides a disagreement
    # with the evidence as facts, fact recall at K is the true evidence recall itself
    for row in board["rows"]:
        assert row["fact_recall_at_k"] == pytest.approx(truth[row["configuration"]])
        assert row["fact_ci_low"] <= row["fact_pr_auc"] <= row["fact_ci_high"]
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    facts = report["pools"][0]["facts"]
    assert facts["source"] == "evidence" and facts["counts"]["unfound"] == 0
    assert facts["counts"]["found"] == facts["counts"]["spans"] == sum(map(len, files["evidence"].values()))
    assert report["judge_llm"] is None and "evidence oracle, no LLM call" in printed
    assert "fact PR-AUC" in printed and "(chooses)" in printed
    assert evidence_file.read_bytes() == before


def test_unfound_evidence_is_counted_and_a_rerun_follows_the_changed_file(files: dict, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    folder = files["folder"]
    small = tmp_path / "evidence.jsonl"
    evidence = dict(list(files["evidence"].items()))
    small.write_text("".join(json.dumps({"query_id": q, "evidence": v}) + "\n" for q, v in evidence.items()),
                     encoding="utf-8")
    out = tmp_path / "out"
    space = yaml.safe_load((folder / "space.yaml").read_text(encoding="utf-8"))
    space["dimensions"]["chunking"] = {k: CHUNKINGS[k] for k in ("paragraphs", "sent1")}
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({**space, "judge": {"model": "oracle:evidence.jsonl"}}),
                                         encoding="utf-8")  # a relative oracle path is read beside the space
    args = _args(folder, out)
    args[2] = str(tmp_path / "space.yaml")
    assert main(args) == 0
    first = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert first["pools"][0]["facts"]["counts"]["unfound"] == 0
    qid = next(iter(evidence))
    evidence[qid] = [*evidence[qid], "A sentence that no paragraph of this corpus contains."]
    small.write_text("".join(json.dumps({"query_id": q, "evidence": v}) + "\n" for q, v in evidence.items()),
                     encoding="utf-8")
    capsys.readouterr()
    assert main(args) == 0
    printed = capsys.readouterr().out
    again = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert again["pools"][0]["facts"]["counts"]["unfound"] == 1
    assert again["pools"][0]["facts"]["unfound"] == {qid: ["A sentence that no paragraph of this corpus contains."]}
    assert "1 evidence spans were found in no document" in printed
    assert again["judge"] != first["judge"] or again["pools"][0]["signature"] != first["pools"][0]["signature"]


@pytest.mark.parametrize("content, where", [
    (b'{"query_id": "q", "evidence": ["x"]}\n{"query_id": "q2", "evidence": [\n', ":2:"),
    (b'{"query_id": "q", "evidence": []}\n', ":1:"),
    (b'{"query_id": "q", "evidence": ["  "]}\n', ":1:"),
    (b'{"query_id": "q", "evidence": ["x"]}\n{"query_id": "q", "evidence": ["y"]}\n', ":2:"),
    (b'{"query_id": "q", "evidence": ["caf\xe9"]}\n', ":1:"),
])
def test_a_bad_evidence_file_is_one_line_exit_2_and_nothing_written(files: dict, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture, content: bytes,
                                                                   where: str) -> None:
    bad = tmp_path / "evidence.jsonl"
    bad.write_bytes(content)
    out = tmp_path / "out"
    assert main(_args(files["folder"], out, "--judge", f"oracle:{bad}")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0] and where in err[0]
    assert not out.exists() and bad.read_bytes() == content


def test_queries_missing_from_the_evidence_are_an_error_naming_the_file(files: dict, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    part = tmp_path / "part.jsonl"
    part.write_text("".join(json.dumps({"query_id": q, "evidence": v}) + "\n"
                            for q, v in list(files["evidence"].items())[:10]), encoding="utf-8")  # fmt: skip
    out = tmp_path / "out"
    assert main(_args(files["folder"], out, "--judge", f"oracle:{part}")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(part) in err[0] and "20" in err[0]
    assert not out.exists()
    # a line for a query that is not one of the queries (a typo) names its line
    typo = tmp_path / "typo.jsonl"
    lines = [json.dumps({"query_id": q, "evidence": v}) for q, v in files["evidence"].items()]
    lines.insert(3, json.dumps({"query_id": "5a8b57f25542995d1e6f137X", "evidence": ["Some span."]}))
    typo.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(_args(files["folder"], out, "--judge", f"oracle:{typo}")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{typo}:4:" in err[0] and "5a8b57f25542995d1e6f137X" in err[0] and not out.exists()
    # --out may not be the evidence file
    assert main(_args(files["folder"], part, "--judge", f"oracle:{part}")) == 2
    assert "--out" in capsys.readouterr().err


# --------------------------------------------------------------------------------- an LLM judge over HTTP
def test_a_failed_extraction_is_counted_listed_and_left_out_over_http(files: dict, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    """A real OpenAI-compatible client path: the judge grades by the supporting sentences, the extractor quotes
    them in fenced JSON after a preamble, and for one question the extractor only ever refuses in prose."""
    records = files["records"][:6]
    folder = tmp_path
    evidence = {r["_id"]: files["evidence"][r["_id"]] for r in records}
    question_of = {r["question"].strip(): r["_id"] for r in records}
    broken = records[0]["_id"]
    space = {"depth": 3, "judge": {"concurrency": 2},
             "dimensions": {"chunking": {k: CHUNKINGS[k] for k in ("paragraphs", "sent3")},
                            "retrieval": {"bm25": {"retriever": "bm25"}}},
             "search": {"strategy": "grid", "bootstrap": 100}}

    def question(text: str) -> str:
        for q, qid in question_of.items():
            if q in text:
                return qid
        raise AssertionError("no known question in the prompt")

    def reply(body: dict) -> str:
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")  # a re-ask repeats it first
        qid = question(user)
        if "List the shortest stretches" in user:  # the fact extractor
            if qid == broken:
                return "I'm sorry, but I can't extract quotes from this passage."
            passage = user.split("Passage:", 1)[1].split("List the shortest stretches")[0]
            quotes = [s for s in evidence[qid] if normalize_span(s) in normalize_span(passage)]
            return "Sure! Here are the exact quotes:\n```json\n" + json.dumps({"quotes": quotes}) + "\n```"
        relevant = any(normalize_span(s) in normalize_span(user) for s in evidence[qid])
        return json.dumps({"rationale": "It states what the question asks." if relevant else "Another topic.",
                           "grade": 3 if relevant else 0})

    out = tmp_path / "out"
    assert _select_over_http(files, folder, records, space, reply, "max_retries=0;timeout=5")[0] == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    facts = report["pools"][0]["facts"]
    assert facts["source"] == "llm" and facts["failed_queries"] == [broken]
    assert facts["counts"]["unparseable"] >= 1 and facts["counts"]["accepted"] > 0
    assert {e["query_id"] for e in facts["errors"]} == {broken}
    board = json.loads((out / "leaderboard.json").read_text(encoding="utf-8"))
    for row in board["rows"]:  # the chunk-level score keeps the query, the fact-level one leaves it out
        assert row["n_scored"] + row["n_excluded"] == 6
        assert row["fact_n_scored"] <= 5
    assert broken in (out / "leaderboard.md").read_text(encoding="utf-8")
    assert f"Failed fact extraction ({broken})" in printed
    assert report["fact_totals"]["failed_queries"] == 1 and report["fact_totals"]["calls"] > 0


@pytest.mark.parametrize("mode, chunkings, measure, fact_column", [
    ("never", ("paragraphs", "sent1"), "chunks", False),
    ("always", ("sent3",), "chunks", True),
])
def test_judge_facts_never_and_always(files: dict, tmp_path: Path, mode: str, chunkings: tuple, measure: str,
                                      fact_column: bool) -> None:
    folder = files["folder"]
    space = yaml.safe_load((folder / "space.yaml").read_text(encoding="utf-8"))
    space["dimensions"]["chunking"] = {k: CHUNKINGS[k] for k in chunkings}
    space["dimensions"]["retrieval"]["bm25s"] = {"retriever": "bm25s"}
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({**space, "judge": {"facts": mode}}), encoding="utf-8")
    args = _args(folder, tmp_path / "out", "--judge", f"oracle:{folder / 'evidence.jsonl'}")
    args[2] = str(tmp_path / "space.yaml")
    assert main(args) == 0
    chosen = yaml.safe_load((tmp_path / "out" / "chosen.yaml").read_text(encoding="utf-8"))
    board = json.loads((tmp_path / "out" / "leaderboard.json").read_text(encoding="utf-8"))
    assert chosen["measure"] == measure and board["headline"] == "chunks"
    assert all((row["fact_pr_auc"] is not None) == fact_column for row in board["rows"])
    if mode == "never":
        assert "judge.facts is never" in chosen["measure_reason"]
    else:
        assert chosen["measure_reason"] == "chunk-level: every configuration uses chunking sent3"


def test_no_usable_fact_where_facts_must_choose_exits_1_with_an_incomplete_report(
        files: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Every extraction reply is a refusal: the judged pool cannot be scored on facts, so nothing is chosen."""
    records = files["records"][:3]
    space = {"depth": 2, "dimensions": {"chunking": {k: CHUNKINGS[k] for k in ("paragraphs", "sent3")}},
             "search": {"strategy": "grid", "bootstrap": 50}}

    def reply(body: dict) -> str:
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        if "List the shortest stretches" in user:
            return "As an AI model I cannot quote documents verbatim."
        return json.dumps({"rationale": "It answers the question.", "grade": 3})

    assert _select_over_http(files, tmp_path, records, space, reply)[0] == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "failed:" in err[0] and "no query has a usable fact" in err[0]
    report = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert report["complete"] is False and "minimal facts choose" in report["incomplete"]
    assert sorted(report["pools"][0]["facts"]["failed_queries"]) == sorted(r["_id"] for r in records)
    assert not (tmp_path / "out" / "chosen.yaml").exists() and not (tmp_path / "out" / "leaderboard.md").exists()


def test_the_judge_keeps_judge_concurrency_requests_in_flight(files: dict, tmp_path: Path) -> None:
    """`judge.concurrency` reaches the judge LLM's own limit (it used to stay at the client's default of 4)."""
    records = files["records"][:6]
    space = {"depth": 4, "judge": {"concurrency": 8}, "dimensions": {"retrieval": {"bm25": {"retriever": "bm25"}}},
             "search": {"strategy": "grid", "bootstrap": 50}}
    state = {"now": 0, "peak": 0}
    lock = threading.Lock()

    def reply(body: dict) -> str:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.15)
        with lock:
            state["now"] -= 1
        return json.dumps({"rationale": "It names the answer.", "grade": 3})

    rc, server = _select_over_http(files, tmp_path, records, space, reply)
    assert rc == 0 and len(server.requests) == 24 and state["peak"] == 8


def test_a_rewriter_that_only_refuses_is_named_over_http(files: dict, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    """An LLM rewriter whose every reply declines (a refusal inside the JSON asked for, or 'N/A'): no variant is
    used, every query counts as a failed rewrite, and select says on stderr that its rows measure nothing of the
    rewriter (the judge grades by the supporting sentences)."""
    records = files["records"][:4]
    evidence = {r["_id"]: files["evidence"][r["_id"]] for r in records}
    space = {"depth": 3, "judge": {"concurrency": 2, "facts": "never"},
             "dimensions": {"chunking": {"paragraphs": CHUNKINGS["paragraphs"]},
                            "retrieval": {"bm25": {"retriever": "bm25"}},
                            "rewriter": {"none": {}, "multi": {"kind": "llm", "n_queries": 2}}},
             "search": {"strategy": "grid", "bootstrap": 50}}
    refusals = iter(['{"queries": ["I\'m sorry, but I can\'t help with rewriting that request."]}',
                     '{"queries": ["N/A"]}'] * 50)

    def reply(body: dict) -> str:
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        if "Write up to" in user and "search queries" in user:
            return next(refusals)
        relevant = any(normalize_span(s) in normalize_span(user) for r in records for s in evidence[r["_id"]])
        return json.dumps({"rationale": "It states it." if relevant else "Another topic.",
                           "grade": 3 if relevant else 0})

    code, _ = _select_over_http(files, tmp_path, records, space, reply, "max_retries=0;timeout=5")
    err = capsys.readouterr().err
    assert code == 0, err
    report = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    rewriter = report["runner"]["components"]["rewriter:multi"]
    assert rewriter["failures"] == {"no_usable_variant": 4} and rewriter["failed"] == rewriter["requests"] == 4
    assert "convrag select: warning: rewriter 'multi': all 4 LLM calls failed or gave nothing usable" in err
    assert "so their rows measure nothing of the rewriter" in err


def test_a_judge_that_grades_every_pair_alike_is_flagged_over_http(files: dict, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    """Every pair graded 3 (the highest): the choice is written, and one warning says it rests on nothing."""
    records = files["records"][:4]
    space = {"depth": 3, "judge": {"concurrency": 2, "facts": "never"},
             "dimensions": {"chunking": {"paragraphs": CHUNKINGS["paragraphs"]},
                            "retrieval": {"bm25": {"retriever": "bm25"}, "bm25s": {"retriever": "bm25s"}}},
             "search": {"strategy": "grid", "bootstrap": 50}}
    reply = '{"rationale": "The passage fully answers the question.", "grade": 3}'
    code, _ = _select_over_http(files, tmp_path, records, space, lambda body: reply, "max_retries=0;timeout=5")
    err = capsys.readouterr().err
    assert code == 0, err
    assert "convrag select: warning: the judge's grades over the final pool: all " in err
    assert "verdicts are 3: the judge does not tell these items apart" in err


def test_a_judge_that_gives_every_request_the_highest_grade_fails_on_facts_with_exit_1(
        files: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The sweep's case: one reply (grade 3) to every request, across two chunkings (so facts choose). The fact
    extractor receives the grade too, which quotes nothing: no query has a fact its lists can reach. That is a
    failed run (exit 1, one line saying so, the report marked incomplete), never bad input (exit 2)."""
    records = files["records"][:4]
    space = {"depth": 3, "judge": {"concurrency": 2},
             "dimensions": {"chunking": {k: CHUNKINGS[k] for k in ("paragraphs", "sent3")},
                            "retrieval": {"bm25": {"retriever": "bm25"}}},
             "search": {"strategy": "grid", "bootstrap": 50}}
    reply = '{"rationale": "The passage fully answers the question.", "grade": 3}'
    code, server = _select_over_http(files, tmp_path, records, space, lambda body: reply, "max_retries=0;timeout=5")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1, err
    failed = [line for line in err if "failed:" in line]
    assert len(failed) == 1 and "no query has a usable fact" in failed[0] and "unparseable" in failed[0], err
    report = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert report["complete"] is False
    assert sorted(report["pools"][0]["facts"]["failed_queries"]) == sorted(r["_id"] for r in records)
    assert not (tmp_path / "out" / "chosen.yaml").exists()
