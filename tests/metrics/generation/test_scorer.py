"""score_generation end to end with a scripted judge: per-task fields, modes, conditioning variants, breakdowns,
ranking figures, outputs and tables; the evaluate module, its doctests and its card."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from convrag.core.errors import DataError
from convrag.evaluate.generation import evaluate_generation, render_tables, write_outputs
from convrag.metrics.generation.components import BertScorer, harmonic_mean, rouge_l
from convrag.metrics.generation.scorer import GenerationTask, score_generation
from tests.metric_module_checks import check_kwargs_doctests, check_metric_card
from tests.metrics.generation.test_judges import fake_llm, verdicts

REPO = Path(__file__).resolve().parents[3]
FIELDS = {
    "task_id", "answerability", "domain", "turn", "passage_source", "n_passages", "n_references", "recall",
    "rouge_l", "k_precision", "rb_alg_raw", "idk", "idk_label", "idk_output", "clarification",
    "clarification_decision", "clarification_explanation", "clarification_output", "rb_llm_raw", "rb_llm_ratings",
    "rb_llm_judges", "rb_llm_outputs", "rl_f_raw", "rl_f_claims", "rl_f_verdicts", "rl_f_supported", "rl_f_total",
    "rl_f_note", "rl_f_outputs", "rb_alg", "rb_llm", "rl_f", "harmonic", "fallbacks", "errors", "excluded", "extra",
    "judge", "call_failures", "excluded_reason",
}


@functools.lru_cache(maxsize=1)
def minilm() -> BertScorer:
    return BertScorer()


def task(i: int, answerability: str | None, prediction: str = "Bill Belichick has coached since 2000.",
         domain: str = "clapnq", turn: int = 1, passages: tuple[str, ...] = ("Belichick was hired in 2000.",)):
    return GenerationTask(task_id=f"t{i}", prediction=prediction, references=["He was hired in 2000."],
                          passages=list(passages), conversation=[{"speaker": "user", "text": f"question {i}?"}],
                          answerability=answerability, domain=domain, turn=turn)


def judge_by_prediction(idk: dict[str, str], clar: str = '{"decision": "yes", "explanation": "asks"}',
                        rating: str = "Rating: [[8]]"):
    """IDK replies chosen by a marker word in the prediction; everything else fixed."""
    def idk_reply(messages):
        text = messages[-1]["content"]
        return next((reply for marker, reply in idk.items() if marker in text), "no")

    return fake_llm({"idk": idk_reply, "clarification": clar, "rb_llm": rating,
                     "claims": '{"claims": ["Belichick was hired in 2000.", "He won ten titles."]}',
                     "verdicts": verdicts(True, False)})


TASKS = [
    task(1, "ANSWERABLE", domain="clapnq", turn=1),
    task(2, "ANSWERABLE", prediction="MARKIDK I do not know.", domain="govt", turn=2),
    task(3, "UNANSWERABLE", prediction="MARKIDK Sorry, no information.", domain="govt", turn=2),
    task(4, "UNANSWERABLE", domain="clapnq", turn=3),
    task(5, "UNDERSPECIFIED", prediction="Which team do you mean?", domain="fiqa", turn=2),
    task(6, "PARTIAL", prediction="MARKODD partly known", domain="fiqa", turn=1),
]


def run(tasks=TASKS, **kw):
    kw.setdefault("judge", judge_by_prediction({"MARKIDK": "yes", "MARKODD": "hmm"}))
    kw.setdefault("metrics", ("rb_llm", "rl_f"))
    return score_generation(tasks, n_bootstrap=200, progress=False, **kw)


def test_per_task_rows_and_conditioning() -> None:
    result = run()
    rows = {r["task_id"]: r for r in result.per_task}
    assert all(set(r) == FIELDS for r in result.per_task)
    t1, t2, t3, t4, t5, t6 = (rows[f"t{i}"] for i in range(1, 7))
    assert (t1["idk"], t1["rb_llm_raw"], t1["rl_f_raw"], t1["rl_f_supported"], t1["rl_f_total"]) == (0.0, 0.8, 0.5,
                                                                                                     1, 2)
    assert (t1["rb_llm"], t1["rl_f"]) == (0.8, 0.5) and t1["harmonic"] == pytest.approx(harmonic_mean([0.8, 0.5]))
    assert (t2["idk"], t2["rb_llm"], t2["rl_f"], t2["harmonic"]) == (1.0, 0.0, 0.0, 0.0)  # answerable + IDK
    assert (t3["rb_llm"], t3["rl_f"], t3["harmonic"]) == (1.0, 1.0, 1.0)  # unanswerable + IDK
    assert (t4["rb_llm"], t4["rl_f"]) == (0.0, 0.0)  # unanswerable, answered
    assert (t5["clarification"], t5["clarification_decision"], t5["rb_llm"]) == (1.0, "yes", 1.0)
    assert t1["clarification"] is None and t1["fallbacks"]["clarification"] is None
    assert (t6["idk"], t6["idk_label"], t6["fallbacks"]["idk"], t6["rb_llm"]) == (0.5, "hmm", True, 0.8)
    assert t1["rb_alg"] is None and t1["recall"] is None  # not requested
    counts = result.summary["counts"]
    assert counts["fallbacks"] == {"idk": 1, "clarification": 0, "rb_llm": 0, "rl_f": 0}
    assert counts["excluded"] == 0 and counts["scored"] == 6 and counts["clarification_asked"] == 1


def test_strict_mode_excludes_fallback_tasks() -> None:
    official, strict = run(mode="official"), run(mode="strict")
    assert strict.summary["counts"]["excluded"] == 1 and strict.summary["counts"]["excluded_task_ids"] == ["t6"]
    assert official.summary["overall"]["rb_llm"]["n"] == 6 and strict.summary["overall"]["rb_llm"]["n"] == 5
    assert strict.summary["overall"]["rb_llm"]["mean"] == pytest.approx((0.8 + 0 + 1 + 0 + 1) / 5)
    assert official.summary["overall"]["rb_llm"]["mean"] == pytest.approx((0.8 + 0 + 1 + 0 + 1 + 0.8) / 6)
    assert [r["excluded"] for r in strict.per_task] == [False] * 5 + [True]
    assert strict.summary["by"]["domain"]["fiqa"]["n"] == 1


def test_semeval_variant_treats_underspecified_as_answerable() -> None:
    result = run(conditioning="semeval")
    t5 = next(r for r in result.per_task if r["task_id"] == "t5")
    assert t5["clarification"] is None and t5["rb_llm"] == 0.8 and t5["rl_f"] == 0.5
    assert result.summary["conditioning"] == "semeval"
    no = run(judge=judge_by_prediction({"MARKIDK": "yes"}, clar='{"decision": "no", "explanation": "answers"}'))
    assert next(r for r in no.per_task if r["task_id"] == "t5")["rb_llm"] == 0.0


def test_breakdowns_and_ranking_figures() -> None:
    s = run().summary
    assert list(s["by"]["answerability"]) == ["ANSWERABLE", "PARTIAL", "UNANSWERABLE", "UNDERSPECIFIED"]
    assert list(s["by"]["turn"]) == ["1", "2", "3"] and set(s["by"]["domain"]) == {"clapnq", "govt", "fiqa"}
    unans = s["by"]["answerability"]["UNANSWERABLE"]
    assert unans["n"] == 2 and unans["means"]["rb_llm"]["mean"] == 0.5
    assert s["ranking"]["metrics"] == ["rb_llm", "rl_f"]
    means = [s["overall"][m]["mean"] for m in ("rb_llm", "rl_f")]
    assert s["ranking"]["harmonic_of_means"] == pytest.approx(harmonic_mean(means))
    assert s["ranking"]["mean_of_per_task_harmonic"]["mean"] == pytest.approx(s["overall"]["harmonic"]["mean"])
    cell = s["overall"]["rb_llm"]
    assert cell["low"] <= cell["mean"] <= cell["high"] and cell["n"] == 6
    assert "idk" in s["overall"] and "rb_llm_raw" in s["overall"] and "recall" not in s["overall"]
    again = run().summary
    assert again["overall"] == s["overall"]  # deterministic given the seed


def test_undefined_rl_f_and_rb_llm_fallback() -> None:
    judge = fake_llm({"idk": "no", "rb_llm": "no rating here", "claims": '{"claims": []}'})
    result = run(tasks=TASKS[:1] + TASKS[3:4], judge=judge)
    t1, t4 = result.per_task
    assert t1["rl_f_raw"] is None and t1["rl_f"] is None and t1["harmonic"] is None and t1["rl_f_note"] == "no claims"
    assert t4["rl_f"] == 0.0  # unanswerable and answered: conditioned to 0 whatever RL_F is
    assert t1["rb_llm"] == 0.5 and t1["fallbacks"]["rb_llm"]
    counts = result.summary["counts"]
    assert counts["undefined"]["rl_f"] == 1 and counts["fallbacks"]["rb_llm"] == 2
    assert result.summary["overall"]["rl_f"]["n"] == 1


def test_with_rb_alg_and_replaceable_bertscore() -> None:
    tasks = [task(1, "ANSWERABLE"), task(2, "ANSWERABLE", passages=())]
    result = run(tasks=tasks, metrics=("rb_alg",), bertscore_model=minilm())
    t1, t2 = result.per_task
    assert t1["rouge_l"] == rouge_l(tasks[0].prediction, "He was hired in 2000.")
    assert 0.5 < t1["recall"] <= 1 and 0.5 < t1["k_precision"] <= 1 and t2["k_precision"] == 0.0
    assert t1["rb_alg_raw"] == pytest.approx(harmonic_mean([t1["recall"], t1["rouge_l"], t1["k_precision"]]))
    assert t2["rb_alg"] == 0.0 and t1["harmonic"] == t1["rb_alg"]
    assert result.summary["bertscore"]["num_layers"] == 6
    other = run(tasks=tasks, metrics=("rb_alg",), bertscore_model=BertScorer(num_layers=2))
    assert other.summary["bertscore"]["num_layers"] == 2 and other.per_task[0]["recall"] != t1["recall"]


def test_prompt_replaced_through_score_generation(tmp_path: Path) -> None:
    path = tmp_path / "rating.yaml"
    path.write_text("fields: [response, reference]\nuser: 'MY RATER {{ response }} vs {{ reference }}'\n",
                    encoding="utf-8")
    # the custom prompt lacks the shipped wording the fake routes by, so its requests arrive as "idk"
    judge = fake_llm({"idk": lambda m: "Rating: [[3]]" if "MY RATER" in m[-1]["content"] else "no"})
    result = run(tasks=TASKS[:1], judge=judge, prompts={"rb_llm": str(path)}, metrics=("rb_llm",))
    assert result.per_task[0]["rb_llm"] == pytest.approx(0.3)
    assert result.summary["judge"]["prompts"]["rb_llm"] == str(path)


def test_argument_and_input_errors() -> None:
    with pytest.raises(ValueError, match="unknown mode"):
        run(mode="lenient")
    with pytest.raises(ValueError, match="unknown conditioning"):
        run(conditioning="other")
    with pytest.raises(ValueError, match="metrics must be"):
        run(metrics=("rb_alg", "bleu"))
    with pytest.raises(DataError, match="tasks:2: task 't1' appears twice"):
        run(tasks=[task(1, None), task(1, None)])
    with pytest.raises(DataError, match="unknown answerability"):
        run(tasks=[task(1, "SOMETIMES")])
    bare = GenerationTask("x", "p", [], [], [{"speaker": "user", "text": "q"}])
    with pytest.raises(DataError, match="no reference answer"):
        run(tasks=[bare])
    assert run(tasks=[bare], metrics=("rl_f",)).per_task[0]["rl_f_note"] == "no passages"


def test_evaluate_generation_outputs_and_tables(tmp_path: Path) -> None:
    result = evaluate_generation(TASKS, judge=judge_by_prediction({"MARKIDK": "yes", "MARKODD": "?"}),
                                 metrics=("rb_llm", "rl_f"), n_bootstrap=100, progress=False)
    json.dumps(result, allow_nan=False)
    assert result["summary"]["counts"]["missing_predictions"] == 0
    write_outputs(result, tmp_path / "out")
    rows = [json.loads(line) for line in (tmp_path / "out" / "per_task.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and set(rows[0]) == FIELDS
    summary = json.loads((tmp_path / "out" / "results.json").read_text())
    assert summary["counts"]["fallbacks"]["idk"] == 1
    md = (tmp_path / "out" / "results.md").read_text()
    assert md == render_tables(result)
    for text in ("| RB_llm |", "### By answerability", "### By domain", "### By turn", "| UNDERSPECIFIED | 1 |",
                 "harmonic mean of the means", "unreadable judge replies (scored with the official default): idk 1",
                 "excluded: 0", "judge calls that failed (those tasks are never scored): idk 0", "> Judge: fake:fake"):
        assert text in md


# --- the evaluate module -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def metric():
    import evaluate

    return evaluate.load(str(REPO / "metrics" / "generation"))


def test_evaluate_module_matches_score_generation(metric) -> None:
    judge = judge_by_prediction({"MARKIDK": "yes", "MARKODD": "?"})
    out = metric.compute(
        predictions=[t.prediction for t in TASKS], references=[t.references for t in TASKS],
        passages=[t.passages for t in TASKS], conversations=[t.conversation for t in TASKS],
        answerabilities=[t.answerability for t in TASKS], domains=[t.domain for t in TASKS],
        turns=[t.turn for t in TASKS], task_ids=[t.task_id for t in TASKS], judge=judge,
        metrics=["rb_llm", "rl_f"], n_bootstrap=200,
    )  # fmt: skip
    expected = run()
    assert out["rb_llm"] == expected.summary["overall"]["rb_llm"]["mean"]
    assert out["harmonic_of_means"] == expected.summary["ranking"]["harmonic_of_means"]
    assert [r["rl_f"] for r in out["per_task"]] == [r["rl_f"] for r in expected.per_task]
    assert out["summary"]["by"]["domain"].keys() == expected.summary["by"]["domain"].keys()


def test_evaluate_module_settings_at_load_and_errors() -> None:
    import evaluate

    judge = fake_llm({"idk": "yes", "claims": '{"claims": []}'})
    module = evaluate.load(str(REPO / "metrics" / "generation"), judge=judge, metrics=["rl_f"], mode="strict")
    out = module.compute(predictions=["I don't know."], references=["n/a"], passages=[[]],
                         conversations=[[{"speaker": "user", "text": "q"}]], answerabilities=["UNANSWERABLE"])
    assert out["rl_f"] == 1.0 and out["summary"]["mode"] == "strict" and "rb_alg" not in out
    with pytest.raises(ValueError, match="passages has 2 entries for 1 predictions"):
        module.compute(predictions=["a"], references=["b"], passages=[[], []],
                       conversations=[[{"speaker": "user", "text": "q"}]])
    with pytest.raises(ValueError, match="unknown argument"):
        module.compute(predictions=["a"], references=["b"], passages=[[]],
                       conversations=[[{"speaker": "user", "text": "q"}]], judges="x")
    for extra in ({}, {"metrics": ["rouge_l"]}):  # a repeated task id is refused, judged or judge-free
        with pytest.raises(ValueError, match=r"task_ids\[2\] repeats task '7' \(first at task_ids\[0\]\)"):
            module.compute(predictions=["a", "b", "c"], references=["a", "b", "c"], passages=[[], [], []],
                           conversations=[[{"speaker": "user", "text": "q"}]] * 3, task_ids=[7, "8", "7"], **extra)


def test_evaluate_module_doctests() -> None:
    import convrag.metrics.generation.generation as module

    check_kwargs_doctests(module)


def test_metric_card_examples_and_front_matter() -> None:
    check_metric_card("generation", "bert-score")
