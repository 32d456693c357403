"""RECOR generation scoring under profile ``authors`` (the RECOR authors' code) against ``convrag`` (our earlier
readings): the judge scale, anchors and history, stemmed ROUGE-L, the BERTScore choice, Table 26, the generator
prompt, and the one line ``evaluate-generation`` prints about scale, settings and comparability."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import convrag.generate.command as gen_command
from convrag.benchmarks.recor.generation import (
    Benchmark,
    JudgeItem,
    judge_answers,
    judge_messages,
    read_predictions,
    score_generation,
)
from convrag.benchmarks.recor.generation_profile import (
    authors_bertscorer,
    bertscore_matches_authors,
    comparability,
    get_profile,
)
from convrag.benchmarks.recor.generation_tables import family_of, render_tables, size_families
from convrag.cli import main
from convrag.evaluation.lexical import LexicalScorer
from convrag.llm import LLM, DiskCache, RetryPolicy
from convrag.llm.backends.fake import FakeBackend
from tests.benchmarks.recor.test_generation import ref, scripted, write_file
from tests.conftest import DATA, json_strings

ITEM = JudgeItem(
    question="Does that shift have something to do with how the red and green cones balance each other?",
    history="Q: Why do red flowers look dark at dusk?\nA: Because of the Purkinje effect: rods take over from cones.",
    reference="Partly: as light fades, rods, which are blind to red, dominate, so reds darken before blues.",
    passages=("Rod cells peak near 498 nm and barely respond to long wavelengths.",
              "The Purkinje shift moves peak sensitivity towards blue in dim light."),
    answer="Yes. In dim light the rods take over, and since they hardly see red, red objects look darker.")


def ten(corr: int, comp: int, rel: int, coh: int, faith: int | None = None) -> str:
    """A 10-point reply as a chat model writes it: a preamble, then a fenced JSON block."""
    grades = {"correctness": corr, "completeness": comp, "relevance": rel, "coherence": coh}
    if faith is not None:
        grades["faithfulness"] = faith
    return "Here are my grades:\n\n```json\n" + json.dumps(grades, indent=2) + "\n```"


def judge(script: list[str]) -> LLM:
    return LLM(FakeBackend(script=script), cache=False, retry=RetryPolicy(max_retries=0), spec="fake:scripted")


# -- the judge ------------------------------------------------------------------------------------------------
def test_authors_prompt_has_anchors_and_documents_but_no_history() -> None:
    authors = judge_messages(ITEM)[1]["content"]
    ours = judge_messages(ITEM, "convrag")[1]["content"]
    assert "whole number from 1 to 10" in authors and "1-3: serious factual errors" in authors
    assert "10: entirely grounded in the documents" in authors
    assert "Purkinje effect: rods take over" not in authors  # the earlier turn is not shown
    assert "---DOCUMENT---" in authors and authors.index(ITEM.passages[0]) < authors.index(ITEM.passages[1])
    assert "from 1 (very poor) to 5 (excellent)" in ours and "Purkinje effect: rods take over" in ours
    assert "1-3:" not in ours
    bare = judge_messages(JudgeItem("q?", "", "r.", (), "a."))[1]["content"]
    assert "faithfulness" not in bare and "---DOCUMENT---" not in bare


def test_ten_point_grades_divided_by_ten_where_convrag_read_one_to_five() -> None:
    # the same five-point-looking reply: 1-10 under authors (5 / 10), 1-5 under convrag ((5 - 1) / 4)
    five_point = ten(5, 4, 5, 5, 5)
    (a,) = judge_answers([ITEM], [judge([five_point])], concurrency=1)
    (c,) = judge_answers([ITEM], [judge([five_point])], concurrency=1, profile="convrag")
    assert a.grades == c.grades == {"correctness": 5, "completeness": 4, "relevance": 5, "coherence": 5,
                                    "faithfulness": 5}
    authors, ours = get_profile("authors"), get_profile("convrag")
    assert sum(authors.normalise(g) for g in a.grades.values()) / 5 == pytest.approx(24 / 50)
    assert sum(ours.normalise(g) for g in c.grades.values()) / 5 == pytest.approx((1 + 0.75 + 1 + 1 + 1) / 5)
    # a 9 is valid on 1-10 and out of range on 1-5 (re-asked there, then the turn fails)
    (a9,) = judge_answers([ITEM], [judge([ten(9, 8, 10, 9, 10)])], concurrency=1)
    (c9,) = judge_answers([ITEM], [judge([ten(9, 8, 10, 9, 10)] * 3)], concurrency=1, profile="convrag")
    assert a9.ok and a9.grades["relevance"] == 10 and not c9.ok and c9.grades == {}
    # an 11 is re-asked under authors; the second reply is used
    (a11,) = judge_answers([ITEM], [judge([ten(11, 8, 9, 9, 9), ten(10, 8, 9, 9, 9)])], concurrency=1)
    assert a11.grades["correctness"] == 10


@pytest.fixture
def bench() -> Benchmark:
    refs = [ref("alpha:c:1", "alpha", 1), ref("alpha:c:2", "alpha", 2), ref("beta:c:1", "beta", 1)]
    qrels = {r.task_id: {"d1": 1} for r in refs}
    return Benchmark("built/recor-mini", "test", {r.task_id: r for r in refs}, qrels, ["alpha", "beta"], "recor",
                     "recor")


def test_hand_computed_authors_scores_and_comparability(tmp_path: Path, bench: Benchmark) -> None:
    ret = write_file(tmp_path / "r.jsonl", "retrieved", {"alpha:c:1": "ra1", "alpha:c:2": "ra2", "beta:c:1": "rb1"})
    none = write_file(tmp_path / "n.jsonl", "none", {"alpha:c:1": "na1", "alpha:c:2": "na2", "beta:c:1": "nb1"})
    replies = {"ra1": ten(10, 10, 10, 10, 10), "ra2": ten(6, 4, 8, 10, 7), "rb1": ten(9, 7, 9, 9, 6),
               "na1": ten(8, 6, 9, 9), "na2": ten(3, 2, 5, 6), "nb1": ten(7, 7, 7, 7)}
    files = [read_predictions(p, bench) for p in (ret, none)]
    result = score_generation(bench, files, [scripted(replies)], concurrency=2)
    s = result["summary"]
    r, n = s["systems"]
    # retrieved: alpha = mean(50/50, 35/50) = 0.85, beta = 40/50 = 0.8; macro 0.825
    assert r["judge_average"]["by_domain"] == pytest.approx({"alpha": 0.85, "beta": 0.8})
    assert r["judge_average"]["macro"] == pytest.approx(0.825)
    assert r["dimensions"]["faithfulness"]["macro"] == pytest.approx(((1.0 + 0.7) / 2 + 0.6) / 2)
    # none: four dimensions / 40; alpha = mean(32/40, 16/40) = 0.6, beta = 0.7
    assert n["judge_average"]["macro"] == pytest.approx(0.65) and "faithfulness" not in n["dimensions"]
    assert s["profile"] == "authors" and "divided by 10" in s["normalisation"] and "disagree" in s["normalisation"]
    comp = s["comparability"]
    assert comp["judge_comparable"] is True and "yes, on the authors' scale (judge fake; paper: GPT-4o)" in comp["line"]
    ours = score_generation(bench, files, [scripted({**replies, "ra1": json.dumps(
        {"correctness": 5, "completeness": 5, "relevance": 5, "coherence": 5, "faithfulness": 5})})], profile="convrag")
    assert ours["summary"]["comparability"]["judge_comparable"] is False
    assert "no (not the authors' scale" in ours["summary"]["comparability"]["line"]
    assert ours["per_turn"][0]["judge_average"] == 1.0 and ours["per_turn"][0]["grades"]["correctness"] == 5


def test_comparability_line_names_scale_settings_and_verdict_per_table() -> None:
    authors, ours = get_profile("authors"), get_profile("convrag")
    real = {"judges": ["openai:gpt-4o@https://x/v1"], "models": ["gpt-4o"], "placeholder": False}
    minilm = {"metrics": ["rouge-l", "meteor", "bertscore"], "unavailable": {"meteor": "no WordNet"},
              "bertscore": {"model": "all-MiniLM-L6-v2", "path": "/m", "num_layers": 6, "rescale_with_baseline": False}}
    roberta = {**minilm, "unavailable": {}, "bertscore": {"model": "roberta-large", "path": "roberta-large",
                                                          "num_layers": 17, "rescale_with_baseline": True}}
    line = comparability(authors, True, real, minilm)["line"]
    assert line.startswith("Scoring profile authors: judge 1-10 per dimension / 10, level anchors, no earlier turns")
    assert "the sources disagree" in line and "ROUGE-L stemmed" in line and "not rescaled" in line
    assert "Table 25 ROUGE-L yes, METEOR not available, BERT-F1 no (paper: roberta-large rescaled, 0.35-0.38)" in line
    assert "\n" not in line
    got = comparability(authors, True, real, roberta)
    assert got["lexical_comparable"] == {"rouge-l": True, "meteor": True, "bertscore": True}
    assert "BERT-F1 yes" in got["line"]
    assert "ROUGE-L no (unstemmed" in comparability(ours, True, real, roberta)["line"]
    assert "not RECOR" in comparability(authors, False, real, None)["line"]
    assert "placeholder judge" in comparability(authors, True, {**real, "placeholder": True}, None)["line"]


# -- lexical metrics ------------------------------------------------------------------------------------------
def test_rouge_l_is_stemmed_under_authors_only() -> None:
    from rouge_score import rouge_scorer

    pred, refr = "Rods dominate in fading light and reds darken.", "As the light fades, rods dominating darkens red."
    stemmed = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True).score(refr, pred)["rougeL"].fmeasure
    plain = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False).score(refr, pred)["rougeL"].fmeasure
    assert stemmed > plain
    authors = LexicalScorer(("rouge-l",), stem=get_profile("authors").stem)
    ours = LexicalScorer(("rouge-l",), stem=get_profile("convrag").stem)
    assert authors.score([pred], [refr])["rouge-l"] == [stemmed] and ours.score([pred], [refr])["rouge-l"] == [plain]
    assert authors.describe()["rouge-l"].endswith("Porter stemming")


def test_authors_bertscore_is_roberta_large_rescaled_when_cached_else_minilm() -> None:
    cached = authors_bertscorer(available=lambda model: model == "roberta-large").describe()
    assert (cached["model"], cached["num_layers"], cached["rescale_with_baseline"]) == ("roberta-large", 17, True)
    assert cached["baseline"] == "bert_score/rescale_baseline/en/roberta-large.tsv"
    assert cached["model_record"]["name"] == "roberta-large" and cached["model_record"]["source"] == "hub"
    assert bertscore_matches_authors(cached)
    offline = authors_bertscorer(available=lambda model: False).describe()
    assert "all-MiniLM-L6-v2" in offline["model"] and not offline["rescale_with_baseline"]
    record = offline["model_record"]
    assert record["name"] == "all-MiniLM-L6-v2" and record["version"] and record["digest"].startswith("sha256:")
    assert not [s for s in json_strings(offline) if os.path.isabs(s) or ".." in s]
    assert not bertscore_matches_authors(offline)


# -- Table 26 -------------------------------------------------------------------------------------------------
def test_families_and_sizes() -> None:
    assert family_of("openai:Qwen/Qwen2.5-72B-Instruct@http://h:8000/v1") == ("qwen", 72.0)
    assert family_of("meta-llama/Meta-Llama-3.1-8B-Instruct") == ("llama", 8.0)
    assert family_of("gemma-3-12b-it") == ("gemma", 12.0)
    got = size_families(["Qwen2.5-7B", "Llama-3.1-8B", "Qwen2.5-72B", "Mistral-7B", "Llama-3.3-70B", "Qwen2.5-14B"])
    assert got == {"qwen": ["Qwen2.5-72B", "Qwen2.5-14B", "Qwen2.5-7B"], "llama": ["Llama-3.3-70B", "Llama-3.1-8B"]}


def test_table_26_rows_and_rag_delta(tmp_path: Path, bench: Benchmark) -> None:
    tids = list(bench.references)
    grade = {("Qwen2.5-72B", "retrieved"): 9, ("Qwen2.5-72B", "none"): 8, ("Qwen2.5-7B", "retrieved"): 7,
             ("Qwen2.5-7B", "none"): 5, ("Qwen2.5-7B", "oracle"): 8, ("Mistral-7B", "none"): 6}
    paths, replies = [], {}
    for (gen, mode), g in grade.items():
        answers = {t: f"{gen} {mode} {t}" for t in tids}
        paths.append(write_file(tmp_path / f"{gen}-{mode}.jsonl", mode, answers, generator=gen))
        replies.update({a: ten(g, g, g, g, None if mode == "none" else g) for a in answers.values()})
    files = [read_predictions(p, bench) for p in paths]
    md = render_tables(score_generation(bench, files, [scripted(replies)], concurrency=4), digits=3)
    table = md.split("### Table 26:")[1].split("###")[0]
    assert "| *qwen family* |" in table and "Mistral" not in table
    assert "| Qwen2.5-72B | - | 0.900 | 0.800 | +10.0 |" in table
    assert "| Qwen2.5-7B | 0.800 | 0.700 | 0.500 | +20.0 |" in table
    assert table.index("Qwen2.5-72B") < table.index("Qwen2.5-7B")


# -- the commands on the real RECOR sample --------------------------------------------------------------------
@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from convrag.hub.export import export_benchmark

    out = tmp_path_factory.mktemp("recor") / "sample"
    export_benchmark("recor", out, options={"source": str(DATA / "recor" / "sample")})
    return out


@pytest.mark.parametrize("profile", ["authors", "convrag"])
def test_evaluate_generation_prints_one_settings_line(profile: str, built: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import convrag.llm

    texts = {t: f"A two-sentence answer to {t}. It names the mechanism." for t in ("law:ex_111149:1",
                                                                                  "drones:ex_3025:1")}
    path = write_file(tmp_path / "retrieved.jsonl", "retrieved", texts, generator="Qwen2.5-7B")
    fake = scripted({v: ten(4, 3, 5, 5, 4) for v in texts.values()})
    monkeypatch.setattr(convrag.llm, "get_llm", lambda spec, **_: fake)
    out = tmp_path / "out"
    argv = ["evaluate-generation", str(built), "--predictions", str(path), "--judge", "openai:gpt-4o@http://x/v1",
            "--allow-missing", "--lexical", "rouge-l", "--out", str(out), "--no-progress"]
    assert main(argv + (["--profile", profile] if profile == "convrag" else [])) == 0
    printed = capsys.readouterr().out.splitlines()
    said = [line for line in printed if "Comparable with RECOR's tables" in line]
    summary = json.loads((out / "results.json").read_text())
    assert said == [summary["comparability"]["line"]] and printed[-1] == said[0]
    assert summary["profile"] == profile and said[0].startswith(f"Scoring profile {profile}: ")
    if profile == "authors":
        assert "yes, on the authors' scale" in said[0] and "Table 25 ROUGE-L yes" in said[0]
        assert summary["systems"][0]["judge_average"]["macro"] == pytest.approx(21 / 50)
    else:
        assert "no (not the authors' scale" in said[0] and "ROUGE-L no (unstemmed" in said[0]
        assert summary["systems"][0]["judge_average"]["macro"] == pytest.approx((0.75 + 0.5 + 1 + 1 + 0.75) / 5)
    assert summary["lexical"]["rouge-l"].endswith("Porter stemming" if profile == "authors" else "no stemming")
    assert summary["comparability"]["line"] in (out / "results.md").read_text()


def test_generate_asks_recor_turns_with_the_authors_prompt(built: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    backend = FakeBackend(responder=lambda messages: "Rods take over in dim light. They barely see red.")

    def make(spec: str, cache: str, concurrency: int) -> Any:
        return LLM(backend, cache=DiskCache(cache), retry=RetryPolicy(max_retries=0), spec="openai:gen",
                   max_concurrency=concurrency)

    monkeypatch.setattr(gen_command, "make_llm", make)
    for profile in ("authors", "convrag"):
        out = tmp_path / f"{profile}.jsonl"
        before = len(backend.calls)
        assert main(["generate", str(built), "--mode", "oracle", "--max-turns", "2", "--out", str(out),
                     "--profile", profile, "--no-progress"]) == 0
        report = json.loads((tmp_path / f"{profile}.report.json").read_text())
        asked = [c["messages"][-1]["content"] for c in backend.calls[before:]]
        assert len(asked) == 2 and report["profile"] == profile
        if profile == "authors":
            assert report["prompt"] == "gen_recor_answer"
            assert all("in 2 to 4 sentences" in a and "Background information:" in a for a in asked)
            assert not any("cannot answer" in a for c in backend.calls[before:] for a in
                           (m["content"] for m in c["messages"]))
        else:
            assert report["prompt"] == "rag_answer"
            assert any("cannot answer" in m["content"] for m in backend.calls[before]["messages"])
    capsys.readouterr()
