"""RECOR-style generation scoring with scripted judges: reading judge replies (prose-wrapped, out of range,
missing faithfulness, unparsable), hand-computed domain-macro means over a two-domain, three-mode example, turn
buckets, Pearson r against scipy, ROUGE-L against rouge_score, bad prediction files, and the CLI dispatch."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from scipy.stats import pearsonr

from convrag.benchmarks.recor.generation import (
    Benchmark,
    JudgeItem,
    Reference,
    judge_answers,
    normalise,
    read_predictions,
    score_generation,
    turn_bucket,
)
from convrag.benchmarks.recor.generation_tables import pearson, render_tables, write_outputs
from convrag.cli import main
from convrag.cli.evaluate import _generation_scheme
from convrag.core.errors import DataError
from convrag.evaluation import lexical as lx
from convrag.llm import LLM, RetryPolicy, load_prompt
from convrag.llm.backends.fake import FakeBackend
from tests.conftest import DATA

ANSWER = re.compile(r"\[(?:Assistant's|Generated) answer\]\n(.*?)\n\n(?:Reply with|Give each)", re.S)


def grades(corr: int, comp: int, rel: int, coh: int, faith: int | None = None, why: str = "Mostly right.") -> str:
    reply = {"correctness": corr, "completeness": comp, "relevance": rel, "coherence": coh}
    if faith is not None:
        reply["faithfulness"] = faith
    return json.dumps({**reply, "rationale": why})


def scripted(replies: dict[str, str]) -> LLM:
    """A judge whose reply depends on the answer it is shown (so concurrency cannot reorder the script)."""

    def respond(messages: list[dict[str, str]]) -> str:
        prompt = next(m["content"] for m in messages if m["role"] == "user")
        return replies[ANSWER.search(prompt).group(1).strip()]

    return LLM(FakeBackend(responder=respond), cache=False, retry=RetryPolicy(max_retries=0), spec="fake:scripted")


def ref(tid: str, domain: str, turn: int) -> Reference:
    return Reference(tid, f"{domain}:c", turn, domain, f"Question {tid}?", "" if turn == 1 else "Q: earlier\nA: reply",
                     f"The reference answer of {tid} explains the mechanism in two sentences.")


@pytest.fixture
def bench() -> Benchmark:
    refs = [ref("alpha:c:1", "alpha", 1), ref("alpha:c:5", "alpha", 5), ref("alpha:c:6", "alpha", 6),
            ref("beta:c:1", "beta", 1), ref("beta:c:2", "beta", 2)]
    qrels = {"alpha:c:1": {"d1": 1}, "alpha:c:5": {"d2": 1}, "alpha:c:6": {"d4": 1}, "beta:c:1": {"d3": 1},
             "beta:c:2": {"d5": 1}}
    return Benchmark("built/recor-mini", "test", {r.task_id: r for r in refs}, qrels, ["alpha", "beta"], "recor")


def write_file(path: Path, mode: str, answers: dict[str, str], generator: str = "Gen-7B") -> Path:
    lines = []
    for tid, text in answers.items():
        contexts = [] if mode == "none" else [{"document_id": "d1", "text": f"Passage for {tid}.", "score": 1.0}]
        lines.append(json.dumps({"task_id": tid, "conversation_id": tid.rsplit(":", 1)[0], "turn": 1,
                                 "domain": tid.split(":")[0], "mode": mode, "generator": generator,
                                 "contexts": contexts, "predictions": [{"text": text}]}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_normalisation_and_turn_buckets() -> None:
    assert [normalise(s, "convrag") for s in (1, 2, 3, 4, 5)] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert [normalise(s) for s in (1, 5, 10)] == [0.1, 0.5, 1.0]  # the authors' scale is the default
    assert [turn_bucket(t) for t in (1, 2, 4, 5, 9)] == ["T1", "T2", "T4", "T5+", "T5+"]


def test_judge_replies_prose_out_of_range_missing_faithfulness_and_unparsable() -> None:
    script = [
        # prose around a fenced JSON object: read
        "Here is my assessment of the answer.\n```json\n" + grades(4, 3, 5, 5, 4) + "\n```\nI hope this helps.",
        # a 6 is out of range: re-asked, the second reply is used
        grades(6, 4, 4, 4, 4), grades(5, 4, 4, 4, 4, "Correct and grounded in passage 1."),
        # faithfulness left out although passages were given: re-asked
        grades(3, 3, 4, 4), grades(3, 3, 4, 4, 2, "Claims a date that no passage gives."),
        # never a JSON object: after three replies the turn fails, it gets no score
        "The answer is quite good overall.", "I would say 4 out of 5.", "Good answer!",
        # no passages: four dimensions only, an extra faithfulness is ignored
        grades(2, 2, 3, 4, 5, "Misses the second half of the question."),
    ]
    backend = FakeBackend(script=script)
    judge = LLM(backend, cache=False, retry=RetryPolicy(max_retries=0), spec="fake:scripted")
    passages = ("Olfactory receptors bind odorant molecules.",)
    items = [JudgeItem("Why?", "", "Because.", passages, f"Answer {i}.") for i in range(4)]
    items.append(JudgeItem("Why?", "Q: a\nA: b", "Because.", (), "Answer 4."))
    out = judge_answers(items, [judge], concurrency=1, profile="convrag")
    assert out[0].grades == {"correctness": 4, "completeness": 3, "relevance": 5, "coherence": 5, "faithfulness": 4}
    assert out[1].grades["correctness"] == 5 and out[1].rationale == "Correct and grounded in passage 1."
    assert out[2].grades["faithfulness"] == 2
    assert not out[3].ok and "UnparsableReply" in out[3].failure and out[3].grades == {}
    assert out[4].grades == {"correctness": 2, "completeness": 2, "relevance": 3, "coherence": 4}
    assert len(backend.calls) == 9 and judge.report.structured_retries == 4 and judge.report.failures == 1
    asked = [c["messages"][1]["content"] for c in backend.calls]
    assert "faithfulness" in asked[0] and "faithfulness" not in asked[-1].split("[Latest question]")[0]


def test_two_judges_take_the_per_dimension_median_and_one_failure_fails_the_turn() -> None:
    a = LLM(FakeBackend(script=[grades(5, 5, 5, 5), grades(4, 4, 4, 4)]), cache=False, spec="fake:a")
    b = LLM(FakeBackend(script=[grades(2, 4, 5, 3), "no idea", "still no idea", "none"]), cache=False,
            retry=RetryPolicy(max_retries=0), spec="fake:b")
    items = [JudgeItem("q", "", "r", (), "x"), JudgeItem("q", "", "r", (), "y")]
    out = judge_answers(items, [a, b], concurrency=1)
    assert out[0].grades == {"correctness": 3.5, "completeness": 4.5, "relevance": 5.0, "coherence": 4.0}
    assert not out[1].ok and out[1].failure.startswith("fake:b: UnparsableReply")


def example(tmp_path: Path) -> tuple[list[Any], LLM]:
    """Three modes of one generator on the five-turn, two-domain benchmark, with grades scripted per answer."""
    ret = {"alpha:c:1": "ret a1", "alpha:c:5": "ret a5", "alpha:c:6": "ret a6", "beta:c:1": "ret b1"}  # b2 missing
    none = {t: f"none {t}" for t in ("alpha:c:1", "alpha:c:5", "alpha:c:6", "beta:c:1", "beta:c:2")}
    oracle = {t: f"oracle {t}" for t in none}
    replies = {"ret a1": grades(5, 5, 5, 5, 5), "ret a5": grades(3, 3, 3, 3, 3),
               "ret a6": "Sorry, I cannot grade this answer.", "ret b1": grades(1, 1, 1, 1, 5)}
    for tid, g in zip(none, (5, 2, 3, 1, 5), strict=True):
        replies[f"none {tid}"] = grades(g, g, g, g, 5)  # the extra faithfulness is not asked and not used
        replies[f"oracle {tid}"] = grades(4, 4, 4, 4, 4)
    files = [write_file(tmp_path / "oracle.jsonl", "oracle", oracle),
             write_file(tmp_path / "retrieved.jsonl", "retrieved", ret),
             write_file(tmp_path / "none.jsonl", "none", none)]
    return files, scripted(replies)


def test_hand_computed_domain_macro_means(tmp_path: Path, bench: Benchmark) -> None:
    paths, judge = example(tmp_path)
    files = [read_predictions(p, bench, allow_missing=True) for p in paths]
    assert [f.mode for f in files] == ["oracle", "retrieved", "none"] and files[1].missing == ["beta:c:2"]
    result = score_generation(bench, files, [judge], concurrency=3, profile="convrag")
    oracle, ret, none = result["summary"]["systems"]
    # retrieved: alpha = mean(1.0, 0.5) = 0.75 (a6 failed, left out); beta = b1 = mean(0, 0, 0, 0, 1) = 0.2
    assert ret["judge_average"]["by_domain"] == pytest.approx({"alpha": 0.75, "beta": 0.2})
    assert ret["judge_average"]["macro"] == pytest.approx(0.475)  # the micro mean would be 0.5667
    assert ret["failed"].keys() == {"alpha:c:6"} and ret["judged"] == 3 and ret["missing"] == ["beta:c:2"]
    assert ret["dimensions"]["faithfulness"]["macro"] == pytest.approx((0.75 + 1.0) / 2)
    assert ret["dimensions"]["correctness"]["macro"] == pytest.approx((0.75 + 0.0) / 2)
    # turn positions: T1 = macro(alpha 1.0, beta 0.2) = 0.6; T5+ = a5 only (a6 failed) = 0.5
    assert {b: v["macro"] for b, v in ret["by_turn"].items()} == pytest.approx({"T1": 0.6, "T5+": 0.5})
    # none: four dimensions; alpha = mean(1, 0.25, 0.5), beta = mean(0, 1)
    assert set(none["dimensions"]) == {"correctness", "completeness", "relevance", "coherence"}
    assert none["judge_average"]["macro"] == pytest.approx(((1 + 0.25 + 0.5) / 3 + 0.5) / 2)
    assert {b: v["macro"] for b, v in none["by_turn"].items()} == pytest.approx(
        {"T1": (1.0 + 0.0) / 2, "T2": 1.0, "T5+": (0.25 + 0.5) / 2})
    assert oracle["judge_average"]["macro"] == pytest.approx(0.75) and oracle["judged"] == 5
    rows = {(r["mode"], r["task_id"]): r for r in result["per_turn"]}
    assert rows[("retrieved", "alpha:c:6")]["judge_average"] is None and not rows[("retrieved", "alpha:c:6")]["judged"]
    assert rows[("retrieved", "beta:c:1")]["normalised"] == {"correctness": 0.0, "completeness": 0.0,
                                                             "relevance": 0.0, "coherence": 0.0, "faithfulness": 1.0}
    counts = result["summary"]["counts"]
    assert counts == {"turns": 14, "judged": 13, "judge_failures": 1, "missing_predictions": 1}
    md = render_tables(result)
    for title in ("Table 7:", "Table 21:", "Table 22:", "Table 8:", "Table 23:", "Table 24:", "Figure 3:"):
        assert title in md
    assert "| Gen-7B | 0.7500 | 0.4750 | 0.5417 |" in render_tables(result, digits=4)  # Table 8 row
    assert "Left out of every mean: 1 of 14" in md and "alpha:c:6" in md


def test_correlation_uses_our_ndcg_and_equals_scipy(tmp_path: Path, bench: Benchmark) -> None:
    paths, judge = example(tmp_path)
    run = Path(f"{paths[1]}.run.trec")  # found beside the retrieved-mode file
    run.write_text("alpha:c:1 Q0 d1 1 9.0 r\nalpha:c:5 Q0 d9 1 9.0 r\nalpha:c:5 Q0 d2 2 8.0 r\n"
                   "beta:c:1 Q0 beta:d3 1 9.0 r\nalpha:c:6 Q0 d4 1 9.0 r\n", encoding="utf-8")
    files = [read_predictions(p, bench, allow_missing=True) for p in paths]
    assert files[1].run_path == str(run) and files[0].run_path is None
    result = score_generation(bench, files, [judge], profile="convrag")
    ret = result["summary"]["systems"][1]
    rows = {r["task_id"]: r for r in result["per_turn"] if r["mode"] == "retrieved"}
    ndcg5 = 1 / 1.5849625007211563  # relevant at rank 2: 1 / log2(3)
    assert rows["alpha:c:1"]["ndcg@10"] == 1.0 and rows["alpha:c:5"]["ndcg@10"] == pytest.approx(ndcg5)
    assert rows["beta:c:1"]["ndcg@10"] == 1.0  # the "<subset>:" prefix of a shared id is dropped
    c = ret["correlation"]
    assert c["domains"]["alpha"]["ndcg@10"] == pytest.approx((1 + ndcg5) / 2)  # a6 failed: not in either mean
    assert c["pearson_domains"]["r"] is None and c["pearson_domains"]["note"] == "n/a (needs >= 3 domains)"
    want = pearsonr([1.0, ndcg5, 1.0], [1.0, 0.5, 0.2])
    assert c["pearson_turns"]["r"] == pytest.approx(want.statistic) and c["pearson_turns"]["n"] == 3
    assert c["pearson_turns"]["p"] == pytest.approx(want.pvalue)
    assert "Table 9:" in render_tables(result) and "n/a (needs >= 3 domains)" in render_tables(result)


def test_pearson_matches_scipy_and_says_why_not() -> None:
    xs, ys = [0.733, 0.732, 0.572, 0.682, 0.455], [0.856, 0.856, 0.867, 0.858, 0.851]
    got = pearson(xs, ys, "domains")
    assert got["r"] == pytest.approx(pearsonr(xs, ys).statistic) and got["p"] == pytest.approx(pearsonr(xs, ys).pvalue)
    assert pearson([0.1, 0.2], [0.3, 0.4], "domains")["note"] == "n/a (needs >= 3 domains)"
    assert pearson([0.5, 0.5, 0.5], [0.1, 0.2, 0.3], "turns")["r"] is None


def test_rouge_l_equals_rouge_score_and_meteor_is_reported_not_faked() -> None:
    from rouge_score import rouge_scorer

    pred = "Extending a term keeps works protected longer, while restoration brings lapsed works back."
    ref_ = "Extending a copyright term lengthens protection; restoration revives copyright in lapsed works."
    direct = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False).score(ref_, pred)["rougeL"].fmeasure
    assert lx.rouge_l(pred, ref_) == direct

    class Bert:  # stands in for BertScorer: (P, R, F) per pair
        def score(self, cands: list[str], refs: list[str]) -> tuple[list[float], list[float], list[float]]:
            return [0.1] * len(cands), [0.2] * len(cands), [0.5 + 0.1 * i for i in range(len(cands))]

        def describe(self) -> dict[str, Any]:
            return {"model": "stub", "num_layers": 6, "rescale_with_baseline": False}

    scorer = lx.LexicalScorer(("rouge-l", "meteor", "bertscore"), bertscorer=Bert())
    got = scorer.score([pred, "An answer.", pred], [ref_, ref_, "  "])
    assert got["rouge-l"][0] == direct and got["rouge-l"][2] is None  # empty reference: no value
    assert got["bertscore"] == [0.5, 0.6, None]
    if lx.meteor_status() is None:  # WordNet data installed here: METEOR is computed
        assert 0.0 < got["meteor"][0] < 1.0
    else:
        assert got["meteor"] == [None, None, None]
        assert scorer.unavailable["meteor"] == lx.METEOR_UNAVAILABLE
        assert "nltk.download('wordnet') needs network" in lx.METEOR_UNAVAILABLE
    with pytest.raises(ValueError, match="unknown lexical metric"):
        lx.parse_metrics("rouge-l,bleu")


LINE = {"task_id": "alpha:c:1", "conversation_id": "alpha:c", "turn": 1, "domain": "alpha", "mode": "retrieved",
        "generator": "Gen-7B", "contexts": [{"document_id": "d1", "text": "p", "score": 1.0}],
        "predictions": [{"text": "An answer."}]}
BAD = {
    "unknown id": ([LINE, {**LINE, "task_id": "alpha:c:99"}], 2, "unknown task id 'alpha:c:99'"),
    "duplicate id": ([LINE, LINE], 2, "duplicate task id 'alpha:c:1' (first on line 1)"),
    "empty prediction": ([{**LINE, "predictions": [{"text": "  "}]}], 1, "missing or empty prediction"),
    "no predictions": ([{k: v for k, v in LINE.items() if k != "predictions"}], 1, "missing or empty prediction"),
    "bad mode": ([{**LINE, "mode": "closed-book"}], 1, "mode must be one of oracle, retrieved, none"),
    "mixed modes": ([LINE, {**LINE, "task_id": "beta:c:1", "mode": "oracle"}], 2, "one mode per file"),
    "mixed generators": ([LINE, {**LINE, "task_id": "beta:c:1", "generator": "Other"}], 2, "one generator per file"),
    "contexts not a list": ([{**LINE, "contexts": "p"}], 1, "'contexts' must be a list, got str"),
    "none with contexts": ([{**LINE, "mode": "none"}], 1, "mode 'none' gives the generator no passages"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_prediction_file_is_one_error_naming_file_and_line(case: str, tmp_path: Path, bench: Benchmark) -> None:
    rows, line, message = BAD[case]
    path = tmp_path / "preds.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_predictions(path, bench, allow_missing=True)
    assert str(err.value).startswith(f"{path}:{line}: ") and message in str(err.value)


def test_invalid_json_and_missing_turns(tmp_path: Path, bench: Benchmark) -> None:
    path = tmp_path / "preds.jsonl"
    path.write_text(json.dumps(LINE) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:2: "):
        read_predictions(path, bench)
    path.write_text(json.dumps(LINE) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="4 of 5 benchmark turns have no prediction.*--allow-missing"):
        read_predictions(path, bench)
    assert read_predictions(path, bench, allow_missing=True).missing == ["alpha:c:5", "alpha:c:6", "beta:c:1",
                                                                        "beta:c:2"]


# -- the command on the real RECOR sample, with a scripted judge ----------------------------------------------
@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from convrag.hub.export import export_benchmark

    out = tmp_path_factory.mktemp("recor") / "sample"
    export_benchmark("recor", out, options={"source": str(DATA / "recor" / "sample")})
    return out


def test_command_scores_a_built_recor_folder(built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    import convrag.llm

    assert _generation_scheme(built) == "judge"
    tids = ["law:ex_111149:1", "law:ex_111149:2", "drones:ex_3025:1"]
    texts = {t: f"A short answer to {t}." for t in tids}
    path = write_file(tmp_path / "retrieved.jsonl", "retrieved", texts, generator="Qwen2.5-7B")
    # named as `convrag generate` names it: FILE.run.trec beside FILE.jsonl
    (tmp_path / "retrieved.run.trec").write_text("law:ex_111149:1 Q0 law_ex_111149_doc_2 1 3.0 bm25\n")
    judge = scripted({v: grades(4, 3, 5, 5, 4) for v in texts.values()})
    monkeypatch.setattr(convrag.llm, "get_llm", lambda spec, **_: judge)
    out = tmp_path / "out"
    code = main(["evaluate-generation", str(built), "--predictions", str(path), "--judge", "openai:judge@http://x/v1",
                 "--allow-missing", "--lexical", "rouge-l", "--out", str(out), "--no-progress", "--profile", "convrag"])
    assert code == 0
    summary = json.loads((out / "results.json").read_text())
    (system,) = summary["systems"]
    assert system["judged"] == 3 and len(system["missing"]) == 10 and summary["counts"]["turns"] == 3
    assert system["judge_average"]["macro"] == pytest.approx((0.75 + 0.5 + 1 + 1 + 0.75) / 5)
    assert set(system["judge_average"]["by_domain"]) == {"law", "drones"}
    assert system["correlation"]["pearson_domains"]["note"] == "n/a (needs >= 3 domains)"
    rows = [json.loads(x) for x in (out / "per_turn.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in rows] == tids and rows[0]["ndcg@10"] > 0 and rows[2]["ndcg@10"] == 0.0
    assert all(0.0 <= r["lexical"]["rouge-l"] <= 1.0 for r in rows)
    assert (out / "results.md").is_file() and (out / "llm_report.json").is_file()
    printed = capsys.readouterr().out
    assert "Table 7:" in printed and "openai:judge@http://x/v1: LLM: 3 calls" in printed and "Warning" not in printed


def test_command_errors_are_one_line(built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({**LINE, "task_id": "law:ex_111149:1"}) + "\n" + "[1, 2]\n", encoding="utf-8")
    args = ["evaluate-generation", str(built), "--predictions", str(path), "--judge", "fake", "--out",
            str(tmp_path / "o")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{path}:2:" in err
    good = write_file(tmp_path / "g.jsonl", "none", {"law:ex_111149:1": "An answer."})
    assert main(["evaluate-generation", str(built), "--predictions", str(good), "--predictions", str(good),
                 "--judge", "fake", "--allow-missing", "--out", str(tmp_path / "o")]) == 2
    assert "given twice" in capsys.readouterr().err
    assert main(["evaluate-generation", str(built), "--predictions", str(good), "--run", str(good), "--judge", "fake",
                 "--allow-missing", "--out", str(tmp_path / "o")]) == 2
    assert "retrieved-mode" in capsys.readouterr().err
    assert main(["evaluate-generation", str(built), "--predictions", str(good), "--judge", "fake", "--allow-missing",
                 "--lexical", "", "--cache", str(tmp_path / "c"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err  # the fake backend echoes the prompt: no reply is a grade
    assert "every judge call failed (1 answers)" in err and "UnparsableReply" in err
    assert not (tmp_path / "o").exists()


def test_mtrag_folders_keep_the_mtrag_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from convrag.builders.mtrag import MTRAG

    folder = tmp_path / "mtrag"
    folder.mkdir()
    header = {"convrag": {"benchmark": "mtrag", "evaluation": MTRAG.EVALUATION.to_dict()}}
    (folder / "README.md").write_text(f"---\n{yaml.safe_dump(header)}---\n# MTRAG\n", encoding="utf-8")
    assert _generation_scheme(folder) == "mtrag"
    assert _generation_scheme(tmp_path) is None  # no README: the MTRAG path reports what is wrong
    assert main(["evaluate-generation", str(folder), "--predictions", "a.jsonl", "--predictions", "b.jsonl",
                 "--judge", "fake"]) == 2
    assert "exactly one --predictions file" in capsys.readouterr().err


def test_prompt_renders_with_and_without_passages() -> None:
    prompt = load_prompt("gen_recor_judge")
    with_p = prompt.render(question="q", answer="a", reference="r", history="Q: x\nA: y", passages=["p1"],
                           profile="convrag")[1]["content"]
    without = prompt.render(question="q", answer="a", reference="r", profile="convrag")[1]["content"]
    assert "- faithfulness:" in with_p and "(1) p1" in with_p and "Q: x" in with_p
    assert "faithfulness" not in without and "(none: this is the first turn)" in without


def test_write_outputs_writes_four_files(tmp_path: Path, bench: Benchmark) -> None:
    paths, judge = example(tmp_path)
    files = [read_predictions(p, bench, allow_missing=True) for p in paths]
    result = score_generation(bench, files, [judge], profile="convrag")
    write_outputs(result, tmp_path / "o")
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["llm_report.json", "per_turn.jsonl",
                                                                   "results.json", "results.md"]
    assert len((tmp_path / "o" / "per_turn.jsonl").read_text().splitlines()) == 14


def test_mtr_bench_has_one_group_and_answers_from_its_queries(tmp_path: Path) -> None:
    from convrag.benchmarks.recor.generation import read_benchmark
    from convrag.hub.export import export_benchmark
    from tests.mtr_bench_fixture import write_fixture

    write_fixture(tmp_path / "source")
    export_benchmark("mtr-bench", tmp_path / "out", options={"source": str(tmp_path / "source")})
    bench = read_benchmark(tmp_path / "out")
    assert bench.domains == ["all"] and bench.name == "mtr-bench"
    first, *_ = bench.references.values()
    assert first.answer.strip() and first.turn == 1 and first.history == ""
    later = next(r for r in bench.references.values() if r.turn == 3)
    assert later.answer.strip() and later.history  # earlier turns rendered for the judge
    path = write_file(tmp_path / "p.jsonl", "none", {first.task_id: "An answer."})
    judge = scripted({"An answer.": grades(3, 3, 3, 3)})
    result = score_generation(bench, [read_predictions(path, bench, allow_missing=True)], [judge], profile="convrag")
    (system,) = result["summary"]["systems"]
    assert system["judge_average"]["by_domain"] == {"all": 0.5} and system["judge_average"]["macro"] == 0.5


def test_a_bad_run_file_fails_before_any_judge_call(tmp_path: Path, bench: Benchmark) -> None:
    paths, judge = example(tmp_path)
    run = tmp_path / "retrieved.run.trec"
    run.write_text("alpha:c:1 Q0 d1 1 9.0 r\nalpha:c:5 Q0 d2 first 8.0 r\n", encoding="utf-8")
    files = [read_predictions(p, bench, allow_missing=True) for p in paths]
    with pytest.raises(DataError, match=rf"{re.escape(str(run))}:2"):
        score_generation(bench, files, [judge])
    assert judge.backend.calls == []
