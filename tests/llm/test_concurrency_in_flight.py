"""Every LLM-facing command keeps the requested number of requests in flight at an OpenAI-compatible server that
answers after a fixed delay (tests.llm.test_faults.FakeServer, which counts requests in flight itself), and writes
the achieved figures (``in_flight``: limit, peak, time-weighted mean, busy seconds) into its report. The delay is
1 s so that the client's own work between a reply and the next request (slower on a loaded machine) stays small
beside it.

One set-up per command, run in-process through ``convrag.cli.main`` at concurrency 16 with at least 48 requests:
``select`` (judge and LLM reranker, ``judge.concurrency``), ``audit`` (question pattern, query-evidence and the
missed-relevant estimate; two judges at once), ``generate`` and ``evaluate --strategies llm-rewrite``. Replies are
what a served model writes for each prompt: fenced JSON, rating lines after a rationale, a preamble before a
rewritten query.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from convrag.cli import main
from convrag.llm import LLM, RunReport, load_prompt
from convrag.llm.backends.fake import FakeBackend
from tests.conftest import DATA
from tests.llm.test_faults import FakeServer

HOTPOT = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"
FIQA = ["fiqa-tasks", "fiqa-lastturn", "fiqa-questions", "fiqa-qrels", "fiqa-cited-corpus"]
LIMIT = 16
DELAY = 1.0
SYSTEMS = {load_prompt(name).templates[0][1].strip(): name
           for name in ("audit_question_pattern", "audit_query_evidence", "audit_relevance_graded",
                        "seara_rerank_listwise", "rag_answer", "query_rewrite")}  # fmt: skip


def prompt_name(body: dict[str, Any]) -> str:
    """Which prompt a request carries (by its system message); the SEARA judge's prompt is the default."""
    system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "").strip()
    return SYSTEMS.get(system, "judge")


def relevance(text: str) -> str:
    """A grade by the words of five letters or more that the latest question and the document share."""
    query = text.split("Latest question:", 1)[1].split("\n", 1)[0]
    document = text.split("Document:\n", 1)[1]
    shared = sorted(set(re.findall(r"[a-z]{5,}", query.lower())) & set(re.findall(r"[a-z]{5,}", document.lower())))
    if shared:
        return f"It discusses {shared[0]}, which is what the question asks about.\nRating: 3"
    return "Same general area, but it does not say what the user asked.\nRating: 1"


def reply(body: dict[str, Any]) -> str:
    """A served model's reply to each prompt these commands send."""
    name = prompt_name(body)
    if name == "seara_rerank_listwise":
        return 'Ranked by how directly each passage answers:\n```json\n{"order": [2, 1, 4, 3]}\n```'
    if name == "audit_question_pattern":
        return "The user wants a single fact about a named entity.\nQuestion pattern: what"
    if name == "audit_query_evidence":
        return "**Justification:** The passage states the fact the question asks for.\n**Rating:** 4"
    if name == "audit_relevance_graded":
        return relevance(body["messages"][-1]["content"])
    if name == "rag_answer":
        return "Market capitalisation is the share price times the shares outstanding; NAV sums assets less debts."
    if name == "query_rewrite":
        return "Sure! Here is the rewritten query:\nHow do index funds differ from ETFs in fees and trading?"
    return json.dumps({"rationale": "The chunk states part of what the question asks.", "grade": 2})


@pytest.fixture
def server() -> Iterator[FakeServer]:
    s = FakeServer()
    s.delay = DELAY
    s.responder = reply
    yield s
    s.close()


def spec(s: FakeServer) -> str:
    return f"openai:served-model@{s.url};max_retries=0;timeout=30"


def check(s: FakeServer, flight: dict[str, Any], requests: int) -> None:
    """The server's (peak, mean) requests in flight, checked against the bound and the command's own figures."""
    peak, mean = s.in_flight()
    print(f"{len(s.requests)} requests: server peak {peak}, mean {mean:.2f}; report {flight}")
    assert len(s.requests) >= requests >= 48
    assert peak == LIMIT and mean >= 12
    assert flight["limit"] == LIMIT and flight["peak"] == peak
    assert flight["mean"] >= 12 and flight["busy_seconds"] > 0


def test_the_report_counts_requests_in_flight_over_busy_time() -> None:
    """Two LLMs sharing a report: limits add up; the mean leaves out the time when nothing was out."""
    clock = iter([0.0, 1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 14.0, 15.0])
    report = RunReport(clock=lambda: next(clock))
    report.add_limit(2)
    report.add_limit(3)
    assert report.in_flight() == {"limit": 5, "peak": 0, "mean": 0.0, "busy_seconds": 0.0}
    with report.flight(), report.flight():  # out 0 -> 3 and 1 -> 2
        pass
    with report.flight():  # out 10 -> 11
        pass
    with report.flight():  # out 12 -> 15, still out when read at 14
        flight = report.in_flight()
    # busy 0..3 (4 request-seconds), 10..11 (1) and 12..14 (2); the gaps 3..10 and 11..12 are not busy
    assert flight == {"limit": 5, "peak": 2, "mean": 1.167, "busy_seconds": 6.0}
    assert "in flight: mean 1.1, peak 2 of limit 5 over 7.0 s" in report.summary()  # 8 request-seconds / 7 s


def _select_files(folder: Path, n: int) -> None:
    records = json.loads(HOTPOT.read_text(encoding="utf-8"))[:n]
    seen: dict[str, str] = {}
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
        for r in records:
            for title, sentences in r["context"]:
                if title not in seen:
                    seen[title] = f"d{len(seen) + 1}"
                    f.write(json.dumps({"_id": seen[title], "title": title, "text": "".join(sentences)}) + "\n")
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": r["_id"], "text": r["question"]}) + "\n"
                                                  for r in records), encoding="utf-8")  # fmt: skip
    space = {"depth": 4, "judge": {"concurrency": LIMIT},
             "dimensions": {"retrieval": {"bm25": {"retriever": "bm25"}},
                            "reranker": {"none": {}, "llm": {"kind": "llm", "window": 4, "stride": 2}}},
             "search": {"strategy": "grid", "bootstrap": 50}}  # fmt: skip
    (folder / "space.yaml").write_text(yaml.safe_dump(space), encoding="utf-8")


def test_select_keeps_judge_concurrency_in_flight(server: FakeServer, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """16 queries: the LLM reranker at its own server (``--llm``, one window per query: 16 requests), then the judge
    (16 x 4 pooled chunks: 64 requests), both bounded by ``judge.concurrency``."""
    _select_files(tmp_path, 16)
    out = tmp_path / "out"
    components = FakeServer()
    components.delay, components.responder = DELAY, reply
    try:
        code = main(["select", "--space", str(tmp_path / "space.yaml"), "--corpus", str(tmp_path / "corpus.jsonl"),
                     "--queries", str(tmp_path / "queries.jsonl"), "--out", str(out), "--judge", spec(server),
                     "--llm", spec(components), "--cache", str(tmp_path / "cache"), "--no-progress"])  # fmt: skip
    finally:
        components.close()
    printed, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    judge, reranker = report["judge_llm"], report["runner"]["components"]["reranker:llm"]
    assert reranker["windows"] == len(components.requests) == 16
    check(server, judge["in_flight"], judge["calls"])
    assert components.in_flight()[0] == reranker["in_flight"]["peak"] == reranker["in_flight"]["limit"] == LIMIT
    assert f"peak {LIMIT} of limit {LIMIT}" in printed


def test_audit_keeps_concurrency_in_flight(server: FakeServer, stratrag_first30: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """20 StratRAG turns judged on question pattern (a call per turn) and query-evidence (a call per gold document:
    40), then the missed-relevant estimate over a bm25 pool of depth 2 (a call per unlabelled pooled document and
    per labelled one)."""
    out = tmp_path / "out"
    code = main(["audit", str(stratrag_first30), "--judge", spec(server), "--dimensions",
                 "question_pattern,query_evidence", "--sample", "20", "--missed", "--pool-retrievers", "bm25",
                 "--pool-depth", "2", "--concurrency", str(LIMIT), "--cache", str(tmp_path / "cache"),
                 "--out", str(out), "--no-progress"])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    (llm,) = summary["llm"].values()
    missed = next(iter(summary["missed"].values()))
    assert missed["candidates"] > 0
    check(server, llm["in_flight"], llm["calls"])
    assert f"peak {LIMIT} of limit {LIMIT}" in printed


def test_audit_judges_run_at_the_same_time(stratrag_first30: Path) -> None:
    """Two judges sharing one report, 4 calls in flight each: they judge at the same time (peak 8, the summed
    limit), and their verdicts keep judge order."""
    from convrag.audit.runner import run_audit
    from convrag.judging.items import load_items

    shared = RunReport()
    pattern = "A plain fact about a person is wanted.\nQuestion pattern: what"
    judges = [LLM(FakeBackend(responder=lambda _: pattern, model=name, delay=0.2), cache=False, report=shared,
                  max_concurrency=4, spec=f"fake:{name}") for name in ("alpha", "beta")]
    run = run_audit(load_items(stratrag_first30, sample=8), judges, ["question_pattern"], concurrency=4,
                    progress=False)
    assert [v.judge for v in run.verdicts] == ["fake:alpha"] * 8 + ["fake:beta"] * 8
    assert {v.label for v in run.verdicts} == {"what"}
    flight = shared.in_flight()
    assert flight["limit"] == flight["peak"] == 8 and flight["mean"] >= 6  # one after the other: peak 4


def test_generation_judges_given_as_specs_get_the_concurrency_as_their_bound() -> None:
    """evaluate-generation's judges (MTRAG scorer): a spec is bounded by --concurrency unless it sets its own."""
    from convrag.metrics.generation.scorer import _clients

    ready = LLM(FakeBackend(), cache=False, max_concurrency=2)
    made = _clients(["openai:judge@http://127.0.0.1:9/v1", "openai:judge@http://127.0.0.1:9/v1;max_concurrency=3",
                     ready], 16)
    assert [c.max_concurrency for c in made] == [16, 3, 2] and made[2] is ready


@pytest.fixture(scope="module")
def fiqa(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MTRAG-UN's fiqa conversations built from ../shared/data (77 tasks)."""
    out = tmp_path_factory.mktemp("fiqa") / "mtrag-un"
    argv = ["build", "mtrag-un", "--source", str(DATA / "mtrag"), "--out", str(out)]
    assert main([*argv, *(x for c in FIQA for x in ("--config", c))]) == 0
    return out


def run_generate(fiqa: Path, s: FakeServer, tmp: Path) -> Callable[[], dict[str, Any]]:
    out = tmp / "answers.jsonl"
    assert main(["generate", str(fiqa), "--mode", "oracle", "--config", "fiqa-tasks", "--llm", spec(s),
                 "--concurrency", str(LIMIT), "--out", str(out), "--no-progress"]) == 0
    return lambda: json.loads(out.with_suffix(".report.json").read_text(encoding="utf-8"))


def test_generate_keeps_concurrency_in_flight(server: FakeServer, fiqa: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    report = run_generate(fiqa, server, tmp_path)()
    printed = capsys.readouterr().out
    assert report["counts"]["answered"] == 77
    check(server, report["llm"]["in_flight"], 77)
    assert f"peak {LIMIT} of limit {LIMIT}" in printed and f"peak {LIMIT} of limit {LIMIT}" in report["llm_summary"]


def test_evaluate_rewrite_keeps_concurrency_in_flight(server: FakeServer, fiqa: Path, tmp_path: Path) -> None:
    out = tmp_path / "eval"
    assert main(["evaluate", str(fiqa), "--strategies", "llm-rewrite", "--retrievers", "bm25", "--llm", spec(server),
                 "--concurrency", str(LIMIT), "--bootstrap", "0", "--out", str(out), "--no-progress"]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    rewrite = results["rewrites"]["llm-rewrite"]
    assert rewrite["llm"] == f"openai:served-model@{server.url}"  # the bound is not part of the model's name
    check(server, rewrite["in_flight"], rewrite["llm_calls"])


def test_concurrency_flag_errors(fiqa: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", str(fiqa), "--concurrency", "0", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--concurrency must be at least 1, got 0" in err
