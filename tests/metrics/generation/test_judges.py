"""Generation judges with a scripted fake LLM: parsing rules (strict reading; the official one is tested in
test_judges_official.py), official defaults, RL_F steps, call failures, replaceable prompts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from convrag.llm import LLM, PromptError
from convrag.llm.backends.fake import FakeBackend
from convrag.metrics.generation.judges import (
    DEFAULT_PROMPTS,
    GenerationJudges,
    conversation_text,
    parse_idk,
    parse_rating,
    rating_value,
    resolve_prompt,
)

CONV = [{"speaker": "user", "text": "Who coaches the Patriots?"},
        {"speaker": "agent", "text": "Bill Belichick."},
        {"speaker": "user", "text": "Since when?"}]


def role_of(messages: list[dict[str, str]]) -> str:
    """Which judge prompt a request comes from (by the wording of the shipped prompts)."""
    text = "\n".join(m["content"] for m in messages)
    if "Rating: [[N]]" in text:
        return "rb_llm"
    if '"verdicts"' in text:
        return "verdicts"
    if '"claims"' in text:
        return "claims"
    if '"decision"' in text:
        return "clarification"
    return "idk"


def fake_llm(replies: dict[str, str | Callable[[list[dict[str, str]]], str]], *, model: str = "fake",
             attempts: int = 1) -> LLM:
    """An LLM answering each judge role with a fixed reply (or a function of the messages)."""
    def respond(messages: list[dict[str, str]]) -> str:
        reply = replies[role_of(messages)]
        return reply(messages) if callable(reply) else reply

    return LLM(FakeBackend(responder=respond, model=model), cache=False, structured_attempts=attempts)


def verdicts(*flags: bool) -> str:
    return json.dumps({"verdicts": [{"reason": "r", "supported": "yes" if f else "no"} for f in flags]})


@pytest.mark.parametrize(("text", "value", "label", "fallback"), [
    ("yes", 1.0, "yes", False),
    ("Yes.", 1.0, "yes", False),
    ("No.", 0.0, "no", False),
    ("no, it answers", 0.0, "no", False),
    ("Partial", 0.5, "partial", False),
    ('"yes"', 1.0, "yes", False),
    ("  **No** - the reply answers", 0.0, "no", False),
    ("- yes: it cannot answer", 1.0, "yes", False),
    ("1. yes", 1.0, "yes", False),
    ("Yesterday", None, None, True),
    ("The reply says yes", None, None, True),
    ("", None, None, True),
    (None, None, None, True),
    ("...", None, None, True),
])
def test_idk_first_alphabetic_token(text, value, label, fallback) -> None:
    assert parse_idk(text) == (value, label, fallback)


def test_idk_judge_records_raw_and_fallback() -> None:
    judges = GenerationJudges(fake_llm({"idk": "Partial: it answers half"}))
    out = judges.idk(CONV, "Since 2000, but I do not know the month.")
    assert (out.value, out.label, out.fallback, out.raw) == (0.5, "partial", False, "Partial: it answers half")
    out = GenerationJudges(fake_llm({"idk": "Maybe"})).idk(CONV, "x")
    assert (out.value, out.label, out.fallback) == (0.5, "maybe", True)  # official: any other word is 0.5
    out = GenerationJudges(fake_llm({"idk": "Maybe"}), mode="strict").idk(CONV, "x")
    assert (out.value, out.label, out.fallback) == (None, None, True)  # strict: unreadable


def test_idk_sees_the_conversation_as_speaker_lines() -> None:
    llm = fake_llm({"idk": "no"})
    GenerationJudges(llm).idk(CONV, "Since 2000.")
    sent = llm.backend.calls[0]["messages"][-1]["content"]
    assert conversation_text(CONV) in sent and "user: Since when?" in sent and "Since 2000." in sent


@pytest.mark.parametrize(("reply", "value", "decision", "fallback"), [
    ('{"decision": "yes", "explanation": "asks which year"}', 1.0, "yes", False),
    ('```json\n{"decision": "No", "explanation": "answers directly"}\n```', 0.0, "no", False),
    ('{"decision": "maybe", "explanation": "?"}', 0.5, None, True),
    ("I think it asks.", 0.5, None, True),
])
def test_clarification_json_and_fallback(reply, value, decision, fallback) -> None:
    out = GenerationJudges(fake_llm({"clarification": reply})).clarification(CONV, "Which team do you mean?")
    assert (out.value, out.decision, out.fallback) == (value, decision, fallback)
    assert out.raw == reply and out.error is None and not out.call_failed


@pytest.mark.parametrize(("text", "rating"), [
    ("Good answer.\nRating: [[7]]", 7.0),
    ("Rating: [[8.5]]", 8.5),
    ("Rating: 9", 9.0),
    ("I'd say 6 out of 10.", 6.0),
    ("Score 7/10", 7.0),
    ("Use the form Rating: [[5]], for example Rating: [[5]].\nMy verdict: [[3]]", 3.0),
    ("Rating: [[0]]", 0.0),
    ("Rating: [[12]]", 12.0),
    ("no number at all", None),
    ("", None),
])
def test_rating_parse(text, rating) -> None:
    assert parse_rating(text) == rating


def test_rating_range_and_fallback() -> None:
    assert rating_value(7.0) == (0.7, False)
    assert rating_value(10.0) == (1.0, False)
    assert rating_value(0.0) == (None, True)
    assert rating_value(11.0) == (None, True)
    assert rating_value(None) == (None, True)


def test_rb_llm_median_over_judges_with_fallbacks() -> None:
    judges = GenerationJudges([fake_llm({"rb_llm": "Rating: [[9]]"}, model="a"),
                               fake_llm({"rb_llm": "no rating"}, model="b"),
                               fake_llm({"rb_llm": "Rating: [[4]]"}, model="c")])
    out = judges.rb_llm(CONV, "Since 2000.", "He was hired in 2000.", ["Belichick was hired in 2000."])
    assert out.value == pytest.approx(0.5)  # median of 0.9, 0.5 (fallback), 0.4
    assert out.ratings == [9.0, None, 4.0] and out.fallbacks == [False, True, False] and out.fallback
    assert out.judges == ["fake:a", "fake:b", "fake:c"]
    one = GenerationJudges(fake_llm({"rb_llm": "Rating: [[3]]"})).rb_llm(CONV, "r", "a", [])
    assert one.value == pytest.approx(0.3) and not one.fallback


def test_rb_llm_prompt_holds_every_part() -> None:
    llm = fake_llm({"rb_llm": "Rating: [[6]]"})
    GenerationJudges(llm).rb_llm(CONV, "He started in 2000.", "Since 2000.", ["Passage one.", "Passage two."])
    sent = llm.backend.calls[0]["messages"][-1]["content"]
    for part in ("user: Who coaches the Patriots?\nagent: Bill Belichick.", "Since when?", "He started in 2000.",
                 "Since 2000.", "(1) Passage one.", "(2) Passage two."):
        assert part in sent
    assert "user: Since when?" not in sent  # the current question is shown on its own


def test_rl_f_claims_then_verdicts() -> None:
    llm = fake_llm({"claims": '{"claims": ["Belichick was hired in 2000.", "He won six titles.",'
                              ' "he won six  titles."]}', "verdicts": verdicts(True, False)})
    out = GenerationJudges(llm).rl_f(CONV, "Since 2000; he won six titles.", ["Belichick was hired in 2000."])
    assert out.claims == ["Belichick was hired in 2000.", "He won six titles."]  # the repeat counts once
    assert out.verdicts == [True, False] and out.supported == 1 and out.value == 0.5 and not out.fallback
    claims_request = llm.backend.calls[0]["messages"][-1]["content"]
    assert conversation_text(CONV) in claims_request
    verdict_request = llm.backend.calls[1]["messages"][-1]["content"]
    assert "1. Belichick was hired in 2000." in verdict_request and "(1) Belichick was hired" in verdict_request


def test_rl_f_zero_claims_no_passages_and_failures() -> None:
    none = GenerationJudges(fake_llm({"claims": '{"claims": []}'})).rl_f(CONV, "I don't know.", ["p"])
    assert none.value is None and none.note == "no claims" and not none.fallback
    llm = fake_llm({"claims": '{"claims": ["A fact."]}', "verdicts": verdicts(True)})
    bare = GenerationJudges(llm).rl_f(CONV, "A fact.", [])
    assert bare.value == 0.0 and bare.verdicts == [False] and bare.note == "no passages"
    assert len(llm.backend.calls) == 1  # no verification call without passages
    broken = GenerationJudges(fake_llm({"claims": "not json"})).rl_f(CONV, "x", ["p"])
    assert broken.value is None and broken.fallback and "UnparsableReply" in broken.error
    assert not broken.call_failed
    wrong = GenerationJudges(fake_llm({"claims": '{"claims": ["a", "b"]}', "verdicts": verdicts(True)}))
    out = wrong.rl_f(CONV, "x", ["p"])
    assert out.value is None and out.fallback and "exactly 2 verdicts" in out.error


def test_call_failures_are_caught_and_flagged_not_scored() -> None:
    from convrag.llm import BackendError

    def boom(messages):
        raise BackendError("bad request", retryable=False, kind="client_error")

    llm = LLM(FakeBackend(responder=boom), cache=False)
    judges = GenerationJudges(llm)
    idk = judges.idk(CONV, "x")
    rating = judges.rb_llm(CONV, "r", "x", ["p"])
    clar = judges.clarification(CONV, "x")
    assert idk.call_failed and not idk.fallback and idk.value is None and "bad request" in idk.error
    assert rating.call_failed and not rating.fallback and rating.value is None and rating.errors[0]
    assert clar.call_failed and not clar.fallback and clar.value is None
    assert llm.report.failures == 3


def test_custom_prompt_file_is_used(tmp_path: Path) -> None:
    path = tmp_path / "my_idk.yaml"
    path.write_text("description: test\nfields: [response]\nuser: |\n  CUSTOM IDK PROMPT :: {{ response }}\n",
                    encoding="utf-8")
    llm = fake_llm({"idk": "yes"})
    judges = GenerationJudges(llm, prompts={"idk": str(path)})
    assert judges.idk(CONV, "the answer").value == 1.0
    assert llm.backend.calls[0]["messages"] == [{"role": "user", "content": "CUSTOM IDK PROMPT :: the answer"}]
    assert judges.describe()["prompts"]["idk"] == str(path)
    assert judges.describe()["prompts"]["rb_llm"].endswith("gen_rb_llm.yaml")


def test_prompt_by_name_and_errors(tmp_path: Path) -> None:
    for role, name in DEFAULT_PROMPTS.items():
        assert resolve_prompt(name, role).name == name
    bad = tmp_path / "bad.yaml"
    bad.write_text("fields: [response, secret]\nuser: '{{ response }} {{ secret }}'\n", encoding="utf-8")
    with pytest.raises(PromptError, match=r"declares fields \['secret'\]"):
        GenerationJudges(fake_llm({}), prompts={"idk": str(bad)})
    with pytest.raises(PromptError, match="unknown judge prompt"):
        GenerationJudges(fake_llm({}), prompts={"idkk": "gen_idk"})
    with pytest.raises(PromptError, match="not found"):
        GenerationJudges(fake_llm({}), prompts={"idk": str(tmp_path / "missing.yaml")})
    with pytest.raises(PromptError, match="no prompt named"):
        GenerationJudges(fake_llm({}), prompts={"idk": "no_such_prompt"})
