"""Official mode reads judge replies exactly as IBM's MTRAG evaluation scripts do (judge_utils.py /
judge_wrapper.py): one parametrised test per judge feeds every reply shape through the plain parser and through
the judge in official mode, asserting the value the official rules give (hand-computed from those rules), and
that official mode never re-asks. Conditioning lets an undecided IDK ("unknown" / None) pass the raw metric."""

from __future__ import annotations

import math

import pytest

from convrag.metrics.generation.components import condition
from convrag.metrics.generation.judges import GenerationJudges
from convrag.metrics.generation.parsers import (
    official_clarification,
    official_idk,
    official_rating,
    parse_idk,
    parse_rating,
)
from convrag.metrics.generation.scorer import GenerationTask, score_generation
from tests.metrics.generation.test_judges import CONV, fake_llm, verdicts

RAW = 0.42  # a raw metric value, to see what the conditioning lets through

# reply -> the official IDK value (1 / 0 / 0.5, "unknown" when the reply does not start with a word)
IDK_SHAPES = [
    ("yes", 1.0),
    ("Yes.", 1.0),
    ("YES - the reply admits it", 1.0),
    (" no", 0.0),
    ("\n\nNo.", 0.0),
    ("no, it answers the question", 0.0),
    ("NO", 0.0),
    ("Partial", 0.5),
    ("partial: it answers half", 0.5),
    ("maybe", 0.5),
    ("Yesterday", 0.5),  # the whole word counts: "yesterday" is not "yes"
    ("yes-ish", 1.0),  # the word ends at the hyphen
    ("Noted, it says yes", 0.5),
    ("**Yes**", "unknown"),
    ('"yes"', "unknown"),
    ("- yes", "unknown"),
    ("1", "unknown"),
    ("1. yes", "unknown"),
    ("", "unknown"),
    ("   ", "unknown"),
    ("é yes", "unknown"),
]


@pytest.mark.parametrize(("reply", "expected"), IDK_SHAPES)
def test_idk_official(reply: str, expected: float | str) -> None:
    assert official_idk(reply) == expected
    llm = fake_llm({"idk": reply})
    out = GenerationJudges(llm).idk(CONV, "an answer")
    assert len(llm.backend.calls) == 1 and out.raw == reply and not out.call_failed
    assert out.value == (None if expected == "unknown" else expected)
    assert (out.label == "unknown") == (expected == "unknown") and out.fallback == (
        expected in ("unknown", 0.5) and "artial" not in reply
    )
    # conditioning of an UNANSWERABLE task: IDK 1 -> 1, 0 / 0.5 -> 0, undecided -> the raw value passes
    conditioned = condition(RAW, "UNANSWERABLE", out.value, None)
    assert conditioned == {1.0: 1.0, 0.0: 0.0, 0.5: 0.0}.get(expected, RAW)
    assert condition(RAW, "UNANSWERABLE", expected, None) == conditioned  # "unknown" itself gives the same


def test_idk_official_failed_call_values() -> None:
    """What the official reader gives a failed call's missing reply (None / NaN) -- the value that lets the raw
    metric through. (Our scorer never scores a failed call: see test_trust_generation.)"""
    assert official_idk(None) is None and official_idk(math.nan) is None and official_idk(3) is None
    for label in ("UNANSWERABLE", "CONVERSATIONAL", "ANSWERABLE", "PARTIAL", None):
        assert condition(RAW, label, None, None) == RAW
        assert condition(RAW, label, "unknown", None) == RAW
    assert condition(RAW, "UNANSWERABLE", 0.5, None) == 0.0 and condition(RAW, "ANSWERABLE", 0.5, None) == RAW
    assert condition(RAW, "UNDERSPECIFIED", "unknown", 0.5) == 0.0  # mtrag-un: only clarification 1 scores
    assert condition(RAW, "UNDERSPECIFIED", "unknown", 1.0) == 1.0
    assert condition(RAW, "UNDERSPECIFIED", "unknown", None, "semeval") == RAW  # semeval: no UNDERSPECIFIED row
    assert condition(RAW, "UNDERSPECIFIED", 1.0, None, "semeval") == 0.0


# reply -> the official RB_llm value (the last matching pattern's first match / 10; 0.5 when none or out of range)
RATING_SHAPES = [
    ("Good answer.\nRating: [[8]]", 0.8),
    ("[7]", 0.7),  # the single-bracket pattern
    ("Rating: [[8.5]]", 0.85),
    ("Score: 9", 0.9),
    ("Score: 8.6/10", 0.86),
    ("I would say 6 out of 10.", 0.6),
    ("Rating: [[0]]", 0.5),  # 0 is out of range
    ("Rating: [[11]]", 0.5),  # 1.1 is out of range
    ("Rating: 10", 1.0),
    ("[[10]]", 1.0),
    ("Rating: [[7/10]]", 0.7),
    ("Rating: [[8", 0.8),  # a reply cut off mid-rating
    ("Overall Rating: 7.5", 0.75),
    ("Score: 0.9", 0.09),  # read as 0.9 out of 10
    ("Score: 4\n[Rating]\n9", 0.9),  # "[Rating]\n9" is a later pattern than "Score: 4"
    ("Rating: [[3]]\nOverall Rating: 9", 0.3),  # "Rating: [[3" (a late pattern) wins
    ("It is 7 out of 10 at best. Rating: [[6]]", 0.7),  # "out of 10" is the last pattern
    ("[[5]] at first, then [[9]]", 0.5),  # the FIRST match of a pattern counts (5), not the last
    ("for example: Rating: [[5]]\nMy rating: [[8]]", 0.8),  # the example line is cut
    ('Reply "Rating: [[rating]]", for example: "Rating: [[5]]".\nWeak answer.', 0.5),
    ("The response deserves a nine.", 0.5),
    ("", 0.5),
    (None, 0.5),  # str(None) holds no rating
]


@pytest.mark.parametrize(("reply", "expected"), RATING_SHAPES)
def test_rating_official(reply: str | None, expected: float) -> None:
    assert official_rating(reply) == pytest.approx(expected)
    if reply is None:
        return
    llm = fake_llm({"rb_llm": reply})
    out = GenerationJudges(llm).rb_llm(CONV, "He started in 2000.", "Since 2000.", ["Belichick was hired in 2000."])
    assert len(llm.backend.calls) == 1 and out.raw == [reply] and not out.call_failed
    assert out.value == pytest.approx(expected)


def test_rating_official_median_of_judges() -> None:
    judges = GenerationJudges(
        [
            fake_llm({"rb_llm": "[7]"}, model="a"),
            fake_llm({"rb_llm": "no rating"}, model="b"),
            fake_llm({"rb_llm": "Rating: [[9]]"}, model="c"),
        ]
    )
    out = judges.rb_llm(CONV, "r", "a", ["p"])
    assert out.value == pytest.approx(0.7) and out.fallbacks == [False, True, False]  # median of 0.7, 0.5, 0.9
    assert parse_rating("[7]") is None  # our strict reading does not take single brackets


# reply -> the official clarification value (decision yes 1, no 0, anything else or no readable JSON 0.5)
CLARIFICATION_SHAPES = [
    ('{"decision": "yes", "explanation": "asks which year"}', 1.0),
    ('```json\n{"decision": "no", "explanation": "answers directly"}\n```', 0.0),
    ('Here it is:\n```json\n{"decision": "yes"}\n```\nDone.', 1.0),
    ('{"decision": "Yes", "explanation": "asks"}', 1.0),  # lower-cased
    ('{"decision": " yes ", "explanation": "asks"}', 0.5),  # not stripped
    ('{"decision": true, "explanation": "asks"}', 0.5),  # not a string
    ('{"decision": null}', 0.5),
    ('{"explanation": "no decision given"}', 0.5),
    ('{"decision": "maybe"}', 0.5),
    ('{"decision": "yes", "details": {"asks": true}}', 0.5),  # bare JSON ends at the first "}": broken
    ('```json\n{"decision": "yes", "details": {"asks": true}}\n```', 1.0),  # fenced: whole object
    ('{"decision": "yes", "explanation": "use {braces}"}', 0.5),  # the first "}" is inside the string
    (r'{"decision": "no", "explanation": "matches \d and \$ signs"}', 0.0),  # invalid escapes removed
    (r'{"decision": "yes", "explanation": "a \"quoted\" word"}', 1.0),  # valid escapes kept
    ('{"decision": "no"} {"decision": "yes"}', 0.0),  # two objects: the first one
    ('```json\n{"decision": "yes"}\n```\n```json\n{"decision": "no"}\n```', 1.0),  # two fences: the first
    ('```json\n{"decision": "yes"}', 0.5),  # an open fence hides the JSON after it
    ("{'decision': 'yes'}", 0.5),  # Python quotes are not JSON
    ("{}", 0.5),
    ("The reply asks the user which plan they mean, so yes.", 0.5),  # no JSON at all
    ("", 0.5),
    (None, 0.5),
]


@pytest.mark.parametrize(("reply", "expected"), CLARIFICATION_SHAPES)
def test_clarification_official(reply: str | None, expected: float) -> None:
    assert official_clarification(reply) == expected
    if reply is None:
        return
    llm = fake_llm({"clarification": reply})
    out = GenerationJudges(llm).clarification(CONV, "Which team do you mean?")
    assert len(llm.backend.calls) == 1 and out.raw == reply and not out.call_failed  # one call, no re-ask
    assert out.value == expected and out.fallback == (expected == 0.5)
    assert condition(RAW, "UNDERSPECIFIED", 0.0, out.value) == (1.0 if expected == 1.0 else 0.0)


def test_official_mode_never_reasks_strict_mode_does() -> None:
    for mode, calls in (("official", 1), ("strict", 3)):
        llm = fake_llm({"clarification": "I think it asks.", "claims": "not json"}, attempts=3)
        judges = GenerationJudges(llm, mode=mode)
        clar = judges.clarification(CONV, "x")
        assert len(llm.backend.calls) == calls and clar.fallback
        assert clar.value == (0.5 if mode == "official" else None)
        llm.backend.calls.clear()
        rl_f = judges.rl_f(CONV, "x", ["p"])
        assert len(llm.backend.calls) == calls and rl_f.value is None and rl_f.fallback and not rl_f.call_failed


def task(i: int, answerability: str) -> GenerationTask:
    return GenerationTask(
        task_id=f"t{i}",
        prediction="**Yes** I cannot tell from the documents.",
        references=["The documents do not say."],
        passages=["An unrelated passage."],
        conversation=[{"speaker": "user", "text": "When did it open?"}],
        answerability=answerability,
    )


def test_unknown_idk_passes_the_raw_metric_through_official_and_is_excluded_in_strict() -> None:
    judge = fake_llm(
        {
            "idk": "**Yes**",
            "rb_llm": "Rating: [[8]]",
            "claims": '{"claims": ["It cannot tell."]}',
            "verdicts": verdicts(False),
        }
    )
    tasks = [task(1, "UNANSWERABLE"), task(2, "ANSWERABLE")]
    official = score_generation(tasks, judge=judge, metrics=("rb_llm", "rl_f"), n_bootstrap=50, progress=False)
    for row in official.per_task:
        assert row["idk"] is None and row["idk_label"] == "unknown" and row["fallbacks"]["idk"]
        assert (row["rb_llm"], row["rl_f"], row["excluded"]) == (0.8, 0.0, False)  # raw values pass through
    assert official.summary["counts"]["fallbacks"]["idk"] == 2 and official.summary["counts"]["excluded"] == 0
    strict = score_generation(tasks, judge=judge, mode="strict", metrics=("rb_llm",), n_bootstrap=50, progress=False)
    assert [r["idk"] for r in strict.per_task] == [1.0, 1.0]  # strict reads "**Yes**" as yes
    assert [r["rb_llm"] for r in strict.per_task] == [1.0, 0.0]
    assert parse_idk("**Yes**")[0] == 1.0
