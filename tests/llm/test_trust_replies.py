"""Issue 29, class 1: a real judge's verdicts are read, over HTTP, whatever the server enforces.

- ``convrag audit`` with an ``openai:`` judge and ``response_format=none`` sends the MTR-Eval prompts as written (no
  JSON instruction, no response_format) and reads ``**Rating:** 4`` as 4 (it used to count every such verdict
  unreadable);
- a server that rejects ``response_format`` (HTTP 400) makes the client fall back once per format, with one warning
  each and a count in the run report, not once per call; once nothing is enforced, judges ask for their own format;
- a server that accepts a schema but whose model answers in free text is still read by the rating line;
- the schema OpenAI's strict mode gets: every property required, ``additionalProperties: false``, small integer
  ranges as enums.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from convrag.cli import main
from convrag.judging.mtr_eval import RatingReply
from convrag.judging.verdict import judge_call, parse_rating
from convrag.llm import get_llm, load_prompt
from convrag.llm.backends.openai_http import strict_schema
from convrag.llm.structured import json_schema_for
from tests.llm.test_faults import FakeServer

PROMPT_OF = {load_prompt(n).templates[0][1].strip(): n for n in (
    "audit_query_evidence", "audit_discriminability", "audit_faithfulness", "audit_answer_quality")}


def judge_reply(body: dict) -> str:
    """What an instruction-tuned judge writes when asked for the MTR-Eval formats in free text."""
    name = PROMPT_OF.get(body["messages"][0]["content"])
    if name == "audit_discriminability":
        return "Candidate 2 names the exact event the question asks about.\n**Document ID:** [2]"
    if name == "audit_query_evidence":
        return ("The question asks for a fact the document states in its second sentence, so nothing is missing."
                "\n\n**Rating:** 4")
    return "Everything the answer says is in the evidence, in nearly the same words.\n**Rating:** 5"


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    s = FakeServer()
    yield s
    s.close()


@pytest.fixture(scope="module")
def strat(stratrag_first30: Path) -> Path:
    return stratrag_first30


def test_audit_reads_rating_lines_with_response_format_none(server: FakeServer, strat: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = judge_reply
    first = len(server.requests)
    out = tmp_path / "audit"
    judge = f"openai:judge-model@{server.url};response_format=none;max_retries=0;timeout=5"
    code = main(["audit", str(strat), "--judge", judge, "--dimensions", "mtr-eval", "--sample", "3",
                 "--out", str(out), "--cache", str(tmp_path / "cache"), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in (out / "verdicts.jsonl").read_text(encoding="utf-8").splitlines()]
    qe = [r for r in rows if r["dimension"] == "query_evidence"]
    assert qe and all(r["score"] == 4 and r["error"] is None for r in qe)
    assert all(r["error"] is None for r in rows), [r["error"] for r in rows if r["error"]][:3]
    assert {r["score"] for r in rows if r["dimension"] in ("answer_faithfulness", "answer_quality")} == {5}
    sent = server.requests[first:]
    assert sent and all("response_format" not in b for b in sent)
    assert all("JSON schema" not in b["messages"][-1]["content"] for b in sent)  # the prompts' own format was asked


def test_rejected_response_format_falls_back_once_and_says_so(server: FakeServer,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    server.responder = judge_reply
    server.script = ["reject_response_format"] * 40
    first = len(server.requests)
    llm = get_llm(f"openai:judge-model@{server.url};max_retries=0;timeout=5", cache=False)
    messages = load_prompt("audit_query_evidence").render(query="When did it open?", document="It opened in 1937.")
    assert not llm.free_text  # auto: a schema is asked for until the server refuses
    with caplog.at_level(logging.WARNING, logger="convrag.llm"):
        results = [judge_call(llm, messages, RatingReply, parse_rating) for _ in range(5)]
    server.script = []
    assert [r[0] for r in results] == [4] * 5 and all(r[3] is None for r in results)
    sent = server.requests[first:]
    with_format = [b["response_format"]["type"] for b in sent if "response_format" in b]
    assert with_format == ["json_schema", "json_object", "json_object"]  # each style tried once, not per call
    assert len(sent) == 3 + 5  # three refusals, then one request per verdict
    assert llm.free_text and llm.report.response_format_fallbacks == 3
    warnings = [r.getMessage() for r in caplog.records if "rejected response_format" in r.getMessage()]
    assert len(warnings) == 3 and warnings[-1].endswith("using none from now on")
    # once nothing is enforced, the judge prompt goes out as written
    assert "JSON schema" not in sent[-1]["messages"][-1]["content"]


def test_free_text_reply_under_an_accepted_schema_is_read_by_its_rating_line(server: FakeServer) -> None:
    server.responder = judge_reply  # the server takes json_schema but its model ignores it
    llm = get_llm(f"openai:judge-model@{server.url};max_retries=0;timeout=5", cache=False)
    messages = load_prompt("audit_query_evidence").render(query="When did it open?", document="It opened in 1937.")
    value, rationale, raw, error = judge_call(llm, messages, RatingReply, parse_rating)
    assert (value, error) == (4, None) and "second sentence" in rationale and raw.endswith("**Rating:** 4")
    body = server.requests[-1]
    assert body["response_format"]["type"] == "json_schema" and body["response_format"]["json_schema"]["strict"]


def test_strict_schema_form() -> None:
    from pydantic import BaseModel, Field

    class Claim(BaseModel):
        text: str = Field(max_length=300)
        supported: bool = False

    class Reply(BaseModel):
        rationale: str
        rating: int = Field(ge=1, le=5)
        claims: list[Claim] = Field(default_factory=list, max_length=8)

    schema = strict_schema(json_schema_for(Reply))
    assert schema["required"] == ["rationale", "rating", "claims"] and schema["additionalProperties"] is False
    assert schema["properties"]["rating"]["enum"] == [1, 2, 3, 4, 5]
    assert "minimum" not in schema["properties"]["rating"] and "maxItems" not in schema["properties"]["claims"]
    claim = schema["$defs"]["Claim"]
    assert claim["required"] == ["text", "supported"] and claim["additionalProperties"] is False
    assert "maxLength" not in claim["properties"]["text"] and "default" not in claim["properties"]["supported"]
    assert json_schema_for(Reply)["properties"]["rating"]["maximum"] == 5  # the original is left as it was


@pytest.mark.slow
def test_free_text_judging_through_the_local_model() -> None:
    """The unconstrained path through the embedded model: the prompt goes out as written and its reply is read by the
    rating-line rule, or counted unreadable (plumbing only: the placeholder's rating means nothing)."""
    from convrag.llm import SamplingParams

    llm = get_llm("default", constrained=False, cache=False)
    assert llm.free_text
    messages = load_prompt("audit_query_evidence").render(
        query="When did the Golden Gate Bridge open?",
        document="The Golden Gate Bridge opened to traffic on 28 May 1937 after four years of construction.")
    value, rationale, raw, error = judge_call(llm, messages, RatingReply, parse_rating,
                                              params=SamplingParams(max_tokens=96))
    llm.close()
    assert raw.strip() and llm.report.calls == 1
    assert (value is None) == (error is not None)
    if value is None:
        assert error.startswith("unparseable: no verdict line") and parse_rating(raw) is None
    else:
        assert value == parse_rating(raw) and 1 <= value <= 5


def test_query_evidence_worked_example_follows_its_own_levels() -> None:
    """Class 7: an on-topic document that cannot answer is level 1 ("cannot answer"), in the rubric and in the worked
    example alike (the authors' example rates it 1; ours used to say 2)."""
    text = load_prompt("audit_query_evidence").render(query="q", document="d")[-1]["content"]
    example = text.split("Worked example.", 1)[1].split("Now the case to judge.", 1)[0]
    assert "never" in example and parse_rating(example) == 1
    level_1 = next(line for line in text.splitlines() if line.startswith("1 = "))
    assert "cannot answer" in level_1


@pytest.mark.parametrize("reply", [
    '{"rationale": "Document 2 covers 3 of the points asked for.", "rating": 9}',  # out of range
    '{"rationale": "Document 2 covers 4 of the points and',  # cut off inside the object
])
def test_json_that_fails_the_schema_is_never_read_from_its_digits(server: FakeServer, reply: str) -> None:
    """Under an enforced format, a JSON reply that does not validate is re-asked and, still failing, is no verdict:
    the digits of its rationale are never taken for the rating."""
    server.responder = lambda body: reply
    llm = get_llm(f"openai:judge-model@{server.url};max_retries=0;timeout=5", cache=False, structured_attempts=2)
    messages = load_prompt("audit_query_evidence").render(query="When did it open?", document="It opened in 1937.")
    value, _, raw, error = judge_call(llm, messages, RatingReply, parse_rating)
    assert value is None and error.startswith("unparseable") and raw == reply


def test_a_400_about_something_else_is_not_a_format_rejection(server: FakeServer) -> None:
    """A prompt over the context length (HTTP 400) fails that call; the server's schema support is not given up."""
    server.script = ["400"]  # {"error": {"message": "injected 400"}}: nothing about response_format
    server.responder = judge_reply
    llm = get_llm(f"openai:judge-model@{server.url};max_retries=0;timeout=5", cache=False)
    messages = load_prompt("audit_query_evidence").render(query="When did it open?", document="It opened in 1937.")
    value, _, _, error = judge_call(llm, messages, RatingReply, parse_rating)
    assert value is None and error.startswith("call failed") and "400" in error
    assert not llm.free_text and llm.report.response_format_fallbacks == 0
    value, _, _, error = judge_call(llm, messages, RatingReply, parse_rating)  # the next call still asks for a schema
    assert (value, error) == (4, None) and server.requests[-1]["response_format"]["type"] == "json_schema"
