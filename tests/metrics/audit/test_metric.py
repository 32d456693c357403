"""The `metrics/audit` evaluate module: aggregation rules on hand-computed examples, the raw-turns path with a
scripted judge ensemble (free-text, structured and malformed replies), its doctests and its card."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from convrag.judging.recor import DEPENDENCY_LABELS, PATTERN_LABELS
from convrag.llm import LLM, RetryPolicy
from convrag.llm.backends.fake import FakeBackend
from convrag.metrics.audit.aggregate import aggregate_labels, aggregate_scores
from tests.metric_module_checks import check_kwargs_doctests, check_metric_card

REPO = Path(__file__).resolve().parents[3]
QE, AE, QUAL = "query_evidence", "answer_faithfulness", "answer_quality"
SETS = {"dependency_type": DEPENDENCY_LABELS, "question_pattern": PATTERN_LABELS}


@pytest.fixture(scope="module")
def metric():
    import evaluate

    return evaluate.load(str(REPO / "metrics" / "audit"))


# --------------------------------------------------------------------------------------------- aggregate_scores
def test_unweighted_mean_over_judges_with_failures_counted() -> None:
    out = aggregate_scores(
        judges=["a", "a", "a", "b", "c", "c"],
        dimensions=[QE] * 6,
        scores=[4.0, 2.0, None, 5.0, None, None],
        errors=[None, None, "unparseable: no verdict line", None, "call failed: HTTP 503", "unparseable: Rating: 9"],
    )
    a, b, c = (out["per_judge"][j][QE] for j in "abc")
    assert a == {"mean": 3.0, "n": 2, "failed": 1, "failures": {"unparseable": 1}}
    assert b == {"mean": 5.0, "n": 1, "failed": 0, "failures": {}}
    assert c == {"mean": None, "n": 0, "failed": 2, "failures": {"call failed": 1, "unparseable": 1}}
    # (3 + 5) / 2 = 4.0; pooling the verdicts would give 11 / 3; judge c has no score and is named, not counted as 0
    assert out["overall"][QE] == {"mean": 4.0, "judges": 2, "judges_without_scores": ["c"], "n": 3, "failed": 3}


def test_dimensions_are_kept_apart_and_a_dimension_without_scores_has_no_mean() -> None:
    out = aggregate_scores(["a", "a", "b", "b", "a"], ["completeness", QUAL, "completeness", QUAL, "completeness"],
                           [1.0, None, 0.0, None, 0.0], ["", "call failed: timeout", None, None, None])
    assert out["per_judge"]["a"]["completeness"]["mean"] == pytest.approx(0.5)
    assert out["overall"]["completeness"]["mean"] == pytest.approx(0.25)  # (1/2 + 0) / 2: accuracies averaged
    assert out["overall"][QUAL] == {"mean": None, "judges": 0, "judges_without_scores": ["a", "b"], "n": 0,
                                    "failed": 2}
    # a missing score without a stated reason is still a failure, of kind "no score"
    assert out["per_judge"]["b"][QUAL]["failures"] == {"no score": 1}
    assert list(out["overall"]) == ["completeness", QUAL]


def test_aggregate_scores_needs_parallel_lists() -> None:
    with pytest.raises(ValueError):
        aggregate_scores(["a", "b"], [QE], [3.0, 4.0])


# --------------------------------------------------------------------------------------------- aggregate_labels
def test_label_counts_shares_and_entropy_over_the_whole_set() -> None:
    labels = ["continuation", "coreference", "continuation", None, "continuation", "ellipsis", "ellipsis"]
    out = aggregate_labels(["a"] * 5 + ["b"] * 2, ["dependency_type"] * 7, labels, SETS)
    a, b = out["dependency_type"]["a"], out["dependency_type"]["b"]
    assert a["counts"] == {"coreference": 1, "ellipsis": 0, "substitution": 0, "continuation": 3, "topic_shift": 0,
                           "self_contained": 0}
    assert a["unparsed"] == 1 and a["shares"]["continuation"] == pytest.approx(0.75)
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert a["normalized_entropy"] == pytest.approx(h / math.log(6))  # K = 6 labels in the set, not 2 observed
    assert b["normalized_entropy"] == 0.0 and b["shares"]["ellipsis"] == 1.0


def test_uniform_labels_have_entropy_one_and_no_parsed_label_has_none() -> None:
    out = aggregate_labels(["j"] * 9 + ["k"], ["question_pattern"] * 10, [*PATTERN_LABELS, None], SETS)
    assert out["question_pattern"]["j"]["normalized_entropy"] == pytest.approx(1.0)
    assert list(out["question_pattern"]["j"]["shares"].values()) == pytest.approx([1 / 9] * 9)
    empty = out["question_pattern"]["k"]
    assert (empty["unparsed"], empty["shares"], empty["normalized_entropy"]) == (1, {}, None)


def test_labels_outside_the_set_raise_and_other_dimensions_are_ignored() -> None:
    with pytest.raises(ValueError, match="'back_reference' is not in the dependency_type label set"):
        aggregate_labels(["a"], ["dependency_type"], ["back_reference"], SETS)
    assert aggregate_labels(["a", "a"], [QE, "question_pattern"], ["5", "why"], SETS).keys() == {"question_pattern"}


# ------------------------------------------------------------------------------------ the module, judgments given
def test_module_routes_label_dimensions_and_checks_columns(metric) -> None:
    out = metric.compute(judges=["a", "a", "b", "a"], dimensions=[QE, "question_pattern", QE, "question_pattern"],
                         scores=[4.0, None, 2.0, None], labels=[None, "compare", None, "compare"])
    assert set(out["overall"]) == {QE} and out["overall"][QE]["mean"] == 3.0
    assert out["labels"]["question_pattern"]["a"]["counts"]["compare"] == 2
    with pytest.raises(ValueError, match="errors has 1 entries for 2 verdicts"):
        metric.compute(judges=["a", "b"], dimensions=[QE, QE], scores=[1.0, 2.0], errors=[None])
    custom = metric.compute(judges=["a", "a"], dimensions=["polarity", "polarity"], scores=[None, None],
                            labels=["up", "down"], label_sets={"polarity": ["up", "down"]})
    assert custom["labels"]["polarity"]["a"]["normalized_entropy"] == pytest.approx(1.0) and custom["overall"] == {}


# ------------------------------------------------------------------------------------------- raw turns, judged
PROMPTS = {"audit_query_evidence": QE, "audit_faithfulness": AE, "audit_answer_quality": QUAL}


def which(messages) -> str:
    from convrag.llm import load_prompt

    systems = {load_prompt(p).templates[0][1].strip(): d for p, d in PROMPTS.items()}
    return systems[messages[0]["content"]]


def free_text_judge(spec: str, replies: dict[str, str]) -> tuple[LLM, FakeBackend]:
    backend = FakeBackend(responder=lambda messages: replies[which(messages)])
    return LLM(backend, cache=False, retry=RetryPolicy(max_retries=0), spec=spec), backend


TURNS = {
    "queries": ["Which river feeds the reservoir?", "And who maintains that dam today?"],
    "documents": [["The Alder reservoir is fed by the Wenn, a short river that drains the northern moor."],
                  ["Since 2011 a regional water board has run the Alder dam.",
                   "The dam's crest carries a footpath that is closed in winter."]],
    "answers": ["The Wenn river feeds it.", None],
    "histories": [[], [{"role": "user", "content": "Which river feeds the reservoir?"},
                       {"role": "assistant", "content": "The Wenn, from the northern moor."}]],
}
KEEN = {QE: "The passage names the river outright.\n**Rating:** 5",
        AE: "Everything in the answer is in the passage.\n**Rating:** 5",
        QUAL: "Correct but very short; the moor could be mentioned.\n**Rating:** 4"}
MALFORMED = {QE: "Rating: 7",  # out of the 1-5 scale, no other number
             AE: '{"rating": 9} (I think this is right)',  # JSON with extra text, out of range
             QUAL: "The reply is fine as far as it goes, though brief."}  # prose only


def test_ensemble_on_raw_turns(metric) -> None:
    keen, keen_backend = free_text_judge("keen", KEEN)
    broken, _ = free_text_judge("broken", MALFORMED)

    def structured(messages) -> str:
        ratings = {QE: 2, AE: 3, QUAL: 1}
        return json.dumps({"rationale": "Only part of what is asked is covered.", "rating": ratings[which(messages)]})

    strict = LLM(FakeBackend(responder=structured, supports_schema=True), cache=False,
                 retry=RetryPolicy(max_retries=0), spec="strict")
    out = metric.compute(**TURNS, judge=[keen, strict, broken])

    # Q-E: one verdict per gold document (3); A-E and Qual. only for the turn with an answer (1 each)
    assert out["per_judge"]["keen"] == {QE: {"mean": 5.0, "n": 3, "failed": 0, "failures": {}},
                                        AE: {"mean": 5.0, "n": 1, "failed": 0, "failures": {}},
                                        QUAL: {"mean": 4.0, "n": 1, "failed": 0, "failures": {}}}
    assert {d: s["mean"] for d, s in out["per_judge"]["strict"].items()} == {QE: 2.0, AE: 3.0, QUAL: 1.0}
    assert out["per_judge"]["broken"][QE] == {"mean": None, "n": 0, "failed": 3, "failures": {"unparseable": 3}}
    assert {d: o["mean"] for d, o in out["overall"].items()} == {QE: 3.5, AE: 4.0, QUAL: 2.5}
    assert all(o["judges"] == 2 and o["judges_without_scores"] == ["broken"] for o in out["overall"].values())
    assert out["overall"][QE]["failed"] == 3 and out["overall"][AE]["n"] == 2

    rows = out["verdicts"]
    assert len(rows) == 3 * 5 and {r["judge"] for r in rows} == {"keen", "strict", "broken"}
    qe = [r for r in rows if r["judge"] == "keen" and r["dimension"] == QE]
    assert [(r["item_id"], r["extra"]["doc_id"]) for r in qe] == [("0", "0:0"), ("1", "1:0"), ("1", "1:1")]
    assert qe[0]["rationale"] == "The passage names the river outright." and qe[0]["error"] is None
    bad = [r for r in rows if r["judge"] == "broken"]
    assert all(r["score"] is None and r["error"].startswith("unparseable") for r in bad)
    assert {r["raw"] for r in bad} == set(MALFORMED.values())
    assert {r["rationale"] for r in rows if r["judge"] == "strict"} == {"Only part of what is asked is covered."}

    # the judge saw the current query, the earlier turns and the document, and no answer where there is none
    seen = [c["messages"][-1]["content"] for c in keen_backend.calls if which(c["messages"]) == QE]
    late = next(text for text in seen if "crest carries a footpath" in text)
    assert "And who maintains that dam today?" in late and "The Wenn, from the northern moor." in late
    assert sum(which(c["messages"]) == AE for c in keen_backend.calls) == 1


def test_raw_turns_errors(metric) -> None:
    judge, _ = free_text_judge("keen", KEEN)
    with pytest.raises(ValueError, match="needs judge="):
        metric.compute(queries=["q?"], documents=[["d"]])
    with pytest.raises(ValueError, match="completeness and RECOR's judges run with `convrag audit"):
        metric.compute(queries=["q?"], documents=[["d"]], judge=judge, judge_dimensions=["completeness"])
    with pytest.raises(ValueError, match="documents has 1 entries for 2 queries"):
        metric.compute(queries=["q?", "r?"], documents=[["d"]], judge=judge)


def test_only_chosen_dimensions_are_judged(metric) -> None:
    judge, backend = free_text_judge("keen", KEEN)
    out = metric.compute(**TURNS, judge=judge, judge_dimensions=[QUAL])
    assert set(out["overall"]) == {QUAL} and len(backend.calls) == 1


# ------------------------------------------------------------------------------------------ doctests and card
def test_evaluate_module_doctests() -> None:
    import convrag.metrics.audit.audit as module

    check_kwargs_doctests(module)


def test_metric_card_examples_and_front_matter() -> None:
    check_metric_card("audit", "evaluate")
    card = (REPO / "metrics" / "audit" / "README.md").read_text(encoding="utf-8")
    for needed in ("https://github.com/rangehow/mtr-suite", "2601.05461", "SmolLM2-135M", "H / log K", "1/8"):
        assert needed in card
