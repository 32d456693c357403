"""`convrag audit` end to end with scripted judges (no model): dry run, outputs, exclusion of malformed verdicts,
the ensemble mean, --sample, argument errors and the --missed estimate on StratRAG.

The judges are FakeBackend responders that tell which prompt they got by its system message and reply with
hand-written verdicts, some of them malformed in realistic ways (a rating of 7, prose only, JSON with text
around it, a label outside the set, a missing criterion line).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import zlib
from pathlib import Path

import pytest

import convrag.audit.runner
from convrag.cli import main
from convrag.hub.export import export_benchmark
from convrag.llm import LLM, RetryPolicy, load_prompt
from convrag.llm.backends.fake import FakeBackend
from tests.conftest import DATA
from tests.mtr_bench_fixture import write_fixture

ALPHA, BETA = "fake:alpha", "fake:beta"
PROMPTS = ("audit_query_evidence", "audit_discriminability", "audit_faithfulness", "audit_answer_quality",
           "audit_conversation_quality", "audit_turn_dependency", "audit_question_pattern", "audit_relevance_graded")
SYSTEMS = {load_prompt(name).templates[0][1].strip(): name for name in PROMPTS}
RECOR_DOMAINS = ("biology", "drones", "earth_science", "law")
SCORED = ("completeness", "query_evidence", "answer_faithfulness", "answer_quality", "naturalness", "turn_coherence",
          "question_quality", "groundedness")
PNG = b"\x89PNG\r\n\x1a\n"


def prompt_of(messages: list[dict[str, str]]) -> str:
    return SYSTEMS[messages[0]["content"]]


def user(messages: list[dict[str, str]]) -> str:
    return messages[-1]["content"]


def odd_one(text: str, every: int) -> bool:
    """A deterministic, order-free choice of about one request in ``every``."""
    return zlib.crc32(text.encode()) % every == 0


def relevance(messages: list[dict[str, str]]) -> str:
    """0-3 grade by word overlap between the latest question and the document; some replies give no grade."""
    text = user(messages)
    query = text.split("Latest question:", 1)[1].split("\n", 1)[0]
    document = text.split("Document:\n", 1)[1].split("\n\nGrade the document", 1)[0]
    if odd_one(document, 6):
        return "The document touches on the question, though I am not sure how much."
    words = {w for w in re.findall(r"[a-z]{5,}", query.lower())}
    shared = sorted(words & set(re.findall(r"[a-z]{5,}", document.lower())))
    if len(shared) >= 2:
        return f"It discusses {shared[0]} and {shared[1]}, which is what the question asks about.\nRating: 3"
    return "Same general area, but it does not say what the user asked.\nRating: 1"


def alpha(messages: list[dict[str, str]]) -> str:
    name = prompt_of(messages)
    if name == "audit_query_evidence":
        return "**Justification:** The passage states what the question asks for, in so many words.\n**Rating:** 5"
    if name == "audit_discriminability":
        if odd_one(user(messages), 2):
            return '{"document": 2} - the second candidate matches the wording best.'
        return "The first candidate mentions the very thing the question asks about.\n**Document ID:** [1]"
    if name == "audit_faithfulness":
        return "Each statement of the answer can be found in the evidence.\n**Rating:** 4"
    if name == "audit_answer_quality":
        return "Accurate and to the point, if brief.\n**Rating:** 4"
    if name == "audit_conversation_quality":
        return ("The user sounds relaxed (\"ok so\", \"I guess\"); every question picks up the previous reply and "
                "the replies keep to their sources.\nNaturalness: 4\nTurn coherence: 5\nQuestion quality: 4\n"
                "Groundedness: 3")
    if name == "audit_turn_dependency":
        return "The question says \"it\" for the thing named in the previous reply.\nDependency type: coreference"
    if name == "audit_question_pattern":
        return "It asks how a process unfolds (\"how does\").\nQuestion pattern: how"
    return relevance(messages)


def beta(messages: list[dict[str, str]]) -> str:
    name = prompt_of(messages)
    if name == "audit_query_evidence":
        if odd_one(user(messages), 3):
            return "Rating: 7"
        return "Only part of the question is covered by this passage.\n**Rating:** 3"
    if name == "audit_discriminability":
        return "The second candidate fits the topic of the question best.\n**Document ID:** [2]"
    if name == "audit_faithfulness":
        return "The answer seems to follow the evidence, more or less."  # never a rating
    if name == "audit_answer_quality":
        return "It misses the core of what was asked.\n**Rating:** 2"
    if name == "audit_conversation_quality":
        return "Stiff wording, but the turns connect.\nNaturalness: 2\nTurn coherence: 4\nQuestion quality: 3"
    if name == "audit_turn_dependency":
        if odd_one(user(messages), 2):
            return "It points back at the earlier answer.\nDependency type: back-reference"
        return "A full question on the same subject, with no pointer back.\nDependency type: continuation"
    if name == "audit_question_pattern":
        return "A plain fact is wanted.\nQuestion pattern: what"
    return "Unrelated to the question.\nRating: 0"


RESPONDERS = {ALPHA: alpha, BETA: beta}


class Judges:
    """A stand-in for ``convrag.audit.runner.make_judges``: scripted LLMs, one FakeBackend per spec."""

    def __init__(self) -> None:
        self.backends: dict[str, FakeBackend] = {}
        self.asked: list[list[str]] = []

    def __call__(self, specs, cache=None, concurrency: int = 4) -> list[LLM]:
        self.asked.append(list(specs))
        out = []
        for spec in specs:
            self.backends[spec] = FakeBackend(responder=RESPONDERS[spec], model=spec.split(":")[1])
            out.append(LLM(self.backends[spec], cache=False, retry=RetryPolicy(max_retries=0), spec=spec))
        return out


def audit(argv: list[str], judges: Judges | None = None) -> tuple[int, str, str]:
    """Run ``convrag audit`` with ``make_judges`` patched; return (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        mp.setattr(convrag.audit.runner, "make_judges", judges or Judges())
        code = main(["audit", *argv, "--no-progress"])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def recor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("recor") / "built"
    assert main(["build", "recor", "--source", str(DATA / "recor" / "sample"), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def mtr(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mtr")
    write_fixture(root / "src")
    export_benchmark("mtr-bench", root / "out", options={"source": str(root / "src")})
    return root / "out"


@pytest.fixture(scope="module")
def strat(stratrag_first30: Path) -> Path:
    return stratrag_first30


@pytest.fixture(scope="module")
def full(recor: Path, mtr: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One audit of RECOR's sample and the MTR-Bench fixture, every dimension, two judges."""
    out = tmp_path_factory.mktemp("audit") / "out"
    judges = Judges()
    code, stdout, _ = audit([str(recor), str(mtr), "--judge", ALPHA, "--judge", BETA, "--out", str(out)], judges)
    assert code == 0
    rows = [json.loads(line) for line in (out / "verdicts.jsonl").read_text(encoding="utf-8").splitlines()]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return {"out": out, "stdout": stdout, "rows": rows, "summary": summary, "judges": judges}


def table_row(markdown: str, name: str) -> list[str]:
    """The cells of the first table row that starts with ``| name |``."""
    line = next(ln for ln in markdown.splitlines() if ln.startswith(f"| {name} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_dry_run_counts_every_call_and_writes_nothing(full: dict, recor: Path, mtr: Path, tmp_path: Path) -> None:
    judges = Judges()
    out = tmp_path / "never"
    code, stdout, _ = audit([str(recor), str(mtr), "--judge", ALPHA, "--judge", BETA, "--out", str(out),
                             "--dry-run"], judges)
    assert code == 0 and not out.exists() and judges.asked == []
    rows = [ln.split() for ln in stdout.splitlines() if ln.split() and ln.split()[0] in ("recor", "mtr-bench")]
    assert [(r[0], r[1]) for r in rows] == [("recor", ALPHA), ("recor", BETA), ("mtr-bench", ALPHA),
                                            ("mtr-bench", BETA)]
    calls = {(r[0], r[1]): int(r[2].replace(",", "")) for r in rows}
    assert all(r[-1] == "$0.0000" for r in rows)  # scripted backends cost nothing
    # the estimate replays the real prompts: as many calls as the real run made, per judge
    for spec in (ALPHA, BETA):
        assert calls[("recor", spec)] + calls[("mtr-bench", spec)] == len(full["judges"].backends[spec].calls)


def test_verdicts_jsonl(full: dict) -> None:
    rows = full["rows"]
    keys = {"benchmark", "domain", "item_id", "judge", "dimension", "score", "label", "rationale", "error"}
    assert rows and all(keys <= set(r) for r in rows)
    assert {r["benchmark"] for r in rows} == {"recor", "mtr-bench"} and {r["judge"] for r in rows} == {ALPHA, BETA}
    assert {r["dimension"] for r in rows} == {*SCORED, "dependency_type", "question_pattern"}
    assert {r["domain"] for r in rows if r["benchmark"] == "recor"} == set(RECOR_DOMAINS)
    assert all((r["score"] is None) == (r["error"] is not None) for r in rows if r["dimension"] in SCORED)
    qe = [r for r in rows if r["judge"] == ALPHA and r["dimension"] == "query_evidence"]
    assert {r["rationale"] for r in qe} == {"The passage states what the question asks for, in so many words."}
    bad = [r for r in rows if r["judge"] == BETA and r["dimension"] == "query_evidence" and r["error"]]
    assert bad and all(r["raw"] == "Rating: 7" and r["error"].startswith("unparseable") for r in bad)
    # conversation scores are one verdict per conversation and dimension, keyed by the conversation
    nat = [r for r in rows if r["benchmark"] == "recor" and r["dimension"] == "naturalness" and r["judge"] == ALPHA]
    assert len(nat) == 4 and all(r["item_id"].split(":")[0] in RECOR_DOMAINS for r in nat)
    # Comp. records the shuffled candidates and the gold position; the score says whether the pick was the gold
    comp = [r for r in rows if r["dimension"] == "completeness" and r["score"] is not None]
    for r in comp:
        gold = r["extra"]["candidates"][r["extra"]["gold_positions"][0] - 1]
        assert r["score"] == float(r["extra"]["picked"] == gold)


def test_malformed_verdicts_are_excluded_and_counted(full: dict) -> None:
    for bench, agg in full["summary"]["benchmarks"].items():
        for judge in (ALPHA, BETA):
            for dim in SCORED:
                mine = [r for r in full["rows"] if (r["benchmark"], r["judge"], r["dimension"]) == (bench, judge, dim)]
                scores = [r["score"] for r in mine if r["score"] is not None]
                stats = agg["all"]["per_judge"][judge][dim]
                assert (stats["n"], stats["failed"]) == (len(scores), len(mine) - len(scores))
                assert stats["mean"] == (pytest.approx(sum(scores) / len(scores)) if scores else None)
        per_judge = agg["all"]["per_judge"]
        assert per_judge[BETA]["query_evidence"]["failures"]["unparseable"] > 0
        assert per_judge[BETA]["answer_faithfulness"]["n"] == 0  # prose only, every time
        assert per_judge[BETA]["groundedness"]["failed"] == per_judge[ALPHA]["groundedness"]["n"] > 0
        assert per_judge[ALPHA]["completeness"]["failed"] == 0  # JSON with text around it is read too
        labels = agg["all"]["labels"]["dependency_type"]
        assert labels[BETA]["unparsed"] > 0 and labels[BETA]["counts"]["continuation"] > 0
        assert labels[ALPHA]["unparsed"] == 0


def test_overall_is_the_unweighted_mean_of_the_judges_means(full: dict) -> None:
    for bench in ("recor", "mtr-bench"):
        agg = full["summary"]["benchmarks"][bench]["all"]
        qe = agg["per_judge"]
        assert (qe[ALPHA]["query_evidence"]["mean"], qe[BETA]["query_evidence"]["mean"]) == (5.0, 3.0)
        assert qe[ALPHA]["query_evidence"]["n"] > qe[BETA]["query_evidence"]["n"]  # a weighted mean would exceed 4
        overall = agg["overall"]
        assert overall["query_evidence"]["mean"] == 4.0 and overall["query_evidence"]["judges"] == 2
        assert overall["answer_quality"]["mean"] == 3.0 and overall["naturalness"]["mean"] == 3.0
        comp = [agg["per_judge"][j]["completeness"]["mean"] for j in (ALPHA, BETA)]
        assert overall["completeness"]["mean"] == pytest.approx(sum(comp) / 2)
        assert overall["answer_faithfulness"]["mean"] == 4.0
        assert overall["answer_faithfulness"]["judges_without_scores"] == [BETA]
        assert overall["groundedness"]["judges_without_scores"] == [BETA]
    recor = full["summary"]["benchmarks"]["recor"]
    assert set(recor["domains"]) == set(RECOR_DOMAINS)
    assert recor["domains"]["law"]["overall"]["query_evidence"]["mean"] == 4.0


def test_summary_markdown_heatmap_and_printout(full: dict) -> None:
    out = full["out"]
    text = (out / "summary.md").read_text(encoding="utf-8")
    assert text in full["stdout"] and "verdicts.jsonl" in full["stdout"] and "heatmap.png" in full["stdout"]
    assert "| Benchmark | Comp. | Comp. x5 | chance | Q-E | A-E | Qual. |" in text
    for name in ("recor", "mtr-bench", *(f"recor / {d}" for d in RECOR_DOMAINS)):
        cells = table_row(text, name)[1:]
        assert all(re.fullmatch(r"\S+ \(n=\d+(, \d+ excluded)?\)", c) for c in (cells[0], *cells[3:]))  # counts
        comp, comp5, chance, qe, ae, qual = [c.split(" (")[0] for c in cells]
        assert (qe, ae, qual) == ("4.00", "4.00", "3.00")
        assert float(comp5) == pytest.approx(5 * float(comp), abs=0.01)
        if name in ("recor", "mtr-bench"):  # chance = mean of 1 / candidates shown (MTR-Bench: 8)
            assert 1 / 8 <= float(chance) <= 1 / 2 and (name == "recor" or float(chance) == pytest.approx(0.125))
    summary = full["summary"]["benchmarks"]["mtr-bench"]["all"]["overall"]
    n, failed = summary["completeness"]["n"], summary["completeness"]["failed"]
    assert table_row(text, "mtr-bench")[1] == (f"{summary['completeness']['mean']:.3f} (n={n}"
                                               + (f", {failed} excluded)" if failed else ")"))
    assert "## RECOR quality judges" in text
    recor_quality = text.split("## RECOR quality judges", 1)[1]
    assert [c.split(" (")[0] for c in table_row(recor_quality, "recor")[1:]] == ["3.00", "4.50", "3.50", "3.00"]
    assert f"- recor, dependency_type, {ALPHA}: coreference" in text
    assert re.search(rf"- mtr-bench, question_pattern, {BETA}: what 100%.*entropy 0\.000; unparsed 0", text)
    excluded = full["summary"]["benchmarks"]["recor"]["all"]["per_judge"][BETA]["query_evidence"]["failed"]
    assert f"| recor | {BETA} | query_evidence | 3.000 |" in text
    assert any(ln.startswith(f"| recor | {BETA} | query_evidence |") and ln.endswith(f"| {excluded} |")
               for ln in text.splitlines())
    assert (out / "heatmap.png").read_bytes()[:8] == PNG
    assert full["summary"]["judges"] == [ALPHA, BETA] and full["summary"]["dimensions"][0] == "completeness"


def test_sample_audits_that_many_turns(mtr: Path, tmp_path: Path) -> None:
    code, _, _ = audit([str(mtr), "--judge", ALPHA, "--dimensions", "question_pattern,query_evidence", "--sample",
                        "5", "--out", str(tmp_path)])
    assert code == 0
    rows = [json.loads(ln) for ln in (tmp_path / "verdicts.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len({r["item_id"] for r in rows if r["dimension"] == "question_pattern"}) == 5
    assert {r["dimension"] for r in rows} == {"question_pattern", "query_evidence"}
    summary = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    assert summary["sample"] == 5 and summary["benchmarks"]["mtr-bench"]["items"] == 5


@pytest.mark.parametrize("extra, message", [
    (["--dimensions", "query_evidence,novelty"], "--dimensions: unknown 'novelty'"),
    (["--negatives", "0"], "--negatives must be at least 1, got 0"),
    (["--sample", "0"], "--sample must be at least 1, got 0"),
])
def test_bad_arguments(recor: Path, tmp_path: Path, extra: list[str], message: str) -> None:
    code, stdout, stderr = audit([str(recor), "--judge", ALPHA, "--out", str(tmp_path / "out"), *extra])
    assert code == 2 and stdout == "" and not (tmp_path / "out").exists()
    assert stderr.count("\n") == 1 and stderr.startswith("convrag audit: error: ") and message in stderr


def test_out_naming_a_file_and_folders_not_built(recor: Path, tmp_path: Path) -> None:
    taken = tmp_path / "taken.txt"
    taken.write_text("notes\n", encoding="utf-8")
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "README.md").write_text("# My notes\n\nNot a benchmark.\n", encoding="utf-8")
    cases = [([str(recor), "--out", str(taken)], "--out names a file"),
             ([str(plain), "--out", str(tmp_path / "o")], "not written by `convrag build`"),
             ([str(tmp_path / "missing"), "--out", str(tmp_path / "o")], "no such folder")]
    for argv, message in cases:
        code, _, stderr = audit([*argv, "--judge", ALPHA])
        assert code == 2 and stderr.count("\n") == 1 and message in stderr
    assert taken.read_text(encoding="utf-8") == "notes\n" and not (tmp_path / "o").exists()


def test_missed_relevant_on_stratrag(strat: Path, tmp_path: Path) -> None:
    judges = Judges()
    code, stdout, _ = audit([str(strat), "--judge", ALPHA, "--dimensions", "question_pattern", "--sample", "8",
                             "--missed", "--pool-retrievers", "bm25,random", "--out", str(tmp_path)], judges)
    assert code == 0
    stem = "stratrag-fake_alpha"
    missed = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))["missed"]
    assert set(missed) == {stem}
    report = missed[stem]
    assert report["pool"] == {"k": 10, "retrievers": ["bm25", "random"], "strategy": "baseline"}
    assert report["turns"] == 8 and report["judged"] + report["failed"] == report["candidates"] > 0
    # every relevance reply without a grade is counted (pooled and calibration verdicts alike), never graded
    replies = [c["messages"] for c in judges.backends[ALPHA].calls
               if prompt_of(c["messages"]) == "audit_relevance_graded"]
    silent = sum(relevance(m).startswith("The document touches") for m in replies)
    assert silent > 0 and report["failures"] == {"unparseable": silent}
    calibration = report["calibration"]
    assert calibration["positives"] + calibration["failed"] == 16  # the 2 gold documents of each of the 8 turns
    assert calibration["measured"].startswith("sensitivity only") and calibration["specificity"] is None

    lines = (tmp_path / f"suspected-qrels-{stem}.trec").read_text(encoding="utf-8").splitlines()
    assert len(lines) == report["suspected"] == report["suspected_qrels_lines"] > 0
    sampled = {r["item_id"] for r in map(json.loads, (tmp_path / "verdicts.jsonl").read_text().splitlines())}
    for line in lines:
        qid, zero, _, grade = line.split()
        assert qid in sampled and zero == "0" and grade == "3"
    table = (tmp_path / f"rescored-{stem}.md").read_text(encoding="utf-8")
    assert table.startswith("| system |") and "| bm25 |" in table and "| random |" in table
    assert "Kendall's tau, official vs augmented ranking" in table
    assert [row["system"] for row in report["rescored"]] == ["bm25", "random"]
    assert f"missed-relevant, stratrag, {ALPHA}: {report['suspected']:,} suspected" in stdout


def test_two_judges_of_one_model_are_told_apart_in_summary_md() -> None:
    from convrag.audit.report import judge_lines

    label = "openai:qwen2.5-72b (an OpenAI-compatible server)"
    summary = {"judge_models": [{"label": label, "placeholder": False}] * 2,
               "llm": {"openai:qwen2.5-72b@http://h/v1;temperature=0": {},
                       "openai:qwen2.5-72b@http://h/v1;temperature=0.7": {}}}
    (line, _) = judge_lines(summary)
    assert line == (f"Judges: {label} (judge openai:qwen2.5-72b@http://h/v1;temperature=0); {label} (judge "
                    "openai:qwen2.5-72b@http://h/v1;temperature=0.7).")
    one = {"judge_models": [{"label": label, "placeholder": False}], "llm": {"x": {}}}
    assert judge_lines(one)[0] == f"Judges: {label}."


def test_the_heatmap_labels_completeness_as_the_tables_x5_column(tmp_path: Path) -> None:
    """The heatmap draws Comp. x 5 (every cell on the 1-5 axis) and says so, as the table's "Comp. x5" column."""
    from convrag.audit.report import _column, heatmap

    assert _column("completeness") == "Comp. x5" and _column("naturalness") == "Natural."
    summary = {"benchmarks": {"b": {"all": {"per_judge": {"j": {"completeness": {"mean": 0.8},
                                                                 "naturalness": {"mean": 4.0}}}}}}}
    assert heatmap(summary, tmp_path / "h.png") == tmp_path / "h.png"
