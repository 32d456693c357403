"""The readers behind the degenerate-output checks, on replies in the shapes instruction-tuned models write."""

from __future__ import annotations

import pytest

from convrag.llm.replies import answer_checks, constant_verdicts, is_non_answer


@pytest.mark.parametrize("text", [
    "Honestly I could not say.", "N/A", "Unknown.", "I don't know.", "I have no idea.",
    "I'm sorry, but I can't help with that request.", "Well, I can't really tell from this conversation.",
    "There is not enough context to rewrite the question.", "<think>The user wants a rewrite.</think>\n\nnone", "  ",
])  # fmt: skip
def test_replies_that_give_nothing(text: str) -> None:
    assert is_non_answer(text)


@pytest.mark.parametrize("text", [
    "What causes volcanic eruptions in Iceland?", "None of the index funds charge a load fee?",
    "How do I know whether a fund is tax-exempt?", "Unknown pleasures: which album was it on?",
    "I don't know the exact figure, but the fund reported about $2 billion in assets in 2020, mostly in bonds "
    "and short-term deposits, according to its annual report published that spring.",
])  # fmt: skip
def test_queries_and_answers_that_say_something(text: str) -> None:
    assert not is_non_answer(text)


def test_answer_checks() -> None:
    assert answer_checks(["OK.", "ok.", " OK. ", "The NAV is assets less liabilities."])["flags"] == [
        "3 of 4 answers are the same text ('OK.')"]
    refused = answer_checks(["I'm sorry, but I can't help with that.", "", "I'm sorry, but I cannot assist."])
    assert refused["flags"] == ["every one of the 3 answers is empty or a refusal"]
    assert (refused["empty"], refused["refusals"]) == (1, 2)
    half = answer_checks(["", "I'm sorry, but I can't help with that.", "Paris.", "Lyon is second."])
    assert half["flags"] == ["2 of 4 answers are empty (1) or refusals (1)"]
    varied = ["Paris.", "It opened in 1889.", "About 330 metres.", "Gustave Eiffel's company built it."]
    assert answer_checks(varied)["flags"] == [] and answer_checks([])["flags"] == []


def test_constant_verdicts_need_enough_items() -> None:
    assert constant_verdicts([4.0] * 12).startswith("all 12 verdicts are 4: the judge does not tell")
    assert constant_verdicts(["how"] * 10 + [None]).startswith("all 10 verdicts are how")
    assert constant_verdicts([4.0] * 9) is None and constant_verdicts([4.0] * 11 + [3.0]) is None
