"""Readers of the generation, MTR-Pipeline, strategy and LLM-layer prompts for the reply-shape corpus
(:mod:`tests.reply_shapes`).

Every reader calls the product's own function with the ``llm`` it is given. Two test doubles stand in for a call
that is not the one under test: :class:`ClaimsGiven` answers step 1 of RL_F (claim extraction) so that the reply
reaches step 2, and :class:`FirstReply` answers the first request of a structured or free-text read with an
unreadable reply so that the reply under test is the answer to the product's re-ask.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

from convrag.benchmarks.recor.generation import JudgeItem, judge_answers
from convrag.generate.answer import generate_answers
from convrag.generate.tasks import GenItem, Passage
from convrag.judging.mtr_eval import RatingReply
from convrag.llm import LLM, Completion, Message, load_prompt
from convrag.llm.structured import Parsed, ParseError, compact_schema, json_schema_for, parse_structured
from convrag.metrics.generation.judges import MODES, GenerationJudges, conversation_text
from convrag.retrievers.strategies import Turn, rewrite_text
from convrag.synthesis.engine.roles import AgentError, cut
from convrag.synthesis.mtr.agents import Doc, Exchange, Polisher, Questioner, Responder, strip_markers
from tests.reply_shapes import Reader, json_instruction, no_json_instruction

# --- MTRAG generation judges (metrics/generation/judges.py) ---------------------------------------------------------
CONVERSATION = [
    {"speaker": "user", "text": "How do I renew my passport by mail?"},
    {"speaker": "agent", "text": "You can renew by mail with form DS-82 if your current passport is undamaged and "
                                 "was issued within the last 15 years."},
    {"speaker": "user", "text": "How long does it take to get it back?"},
]
IDK_REPLY = ("The documents explain which form to use, but they do not say how long processing takes, so I "
             "cannot tell you the waiting time.")
VAGUE = [{"speaker": "user", "text": "What is the battery life?"}]
CLARIFY_REPLY = "Battery life depends on the model. Which phone do you have?"
REFERENCE = "Routine processing takes 6 to 8 weeks; expedited service takes 2 to 3 weeks for an extra fee."
RB_REPLY = "Routine renewals by mail take about 6 to 8 weeks. You can pay extra for expedited service."
PASSPORT_PASSAGES = [
    "Routine service: 6-8 weeks. Expedited service: 2-3 weeks, for an additional $60 fee.",
    "Form DS-82 is used to renew a passport by mail. Your most recent passport must be submitted with the form.",
]
CLAIMS_ANSWER = ("The Eiffel Tower is 330 metres tall. It was completed in 1889 for the World's Fair, and it was "
                 "the tallest structure in the world until 1930.")
TOWER_TURNS = [{"speaker": "user", "text": "Tell me about the Eiffel Tower."}]
CLAIMS = ["The Eiffel Tower is 330 metres tall.", "The Eiffel Tower was completed in 1889.",
          "The Eiffel Tower was the tallest structure in the world until 1930."]
TOWER_PASSAGES = [
    "The Eiffel Tower, completed in 1889 as the entrance arch of the Exposition Universelle, is 330 m tall "
    "including its antennas.",
    "It was the tallest man-made structure in the world until the Chrysler Building in New York was finished "
    "in 1930.",
]


def both_modes(judge: Callable[[GenerationJudges], Any]) -> Callable[[LLM, list[Message]], Any]:
    """A reader of one judge in official mode (the CLI's default) and strict mode: ``{"official", "strict"}``,
    each None where that mode reads nothing (official: its default was used, counted as a fallback; strict: a
    counted parse failure); None when neither mode reads anything."""

    def read(llm: LLM, messages: list[Message]) -> Any:
        got = {mode: judge(GenerationJudges(llm, mode=mode)) for mode in MODES}
        return None if all(v is None for v in got.values()) else got

    return read


def kept(judgement: Any, value: Any) -> Any:
    """``value`` unless the judgement fell back to a default or its call failed."""
    return None if judgement.fallback or judgement.call_failed else value


def idk(judges: GenerationJudges) -> Any:
    j = judges.idk(CONVERSATION, IDK_REPLY)
    return kept(j, j.value)


def clarification(judges: GenerationJudges) -> Any:
    j = judges.clarification(VAGUE, CLARIFY_REPLY)
    return kept(j, j.value)


def rb_llm(judges: GenerationJudges) -> Any:
    j = judges.rb_llm(CONVERSATION, REFERENCE, RB_REPLY, PASSPORT_PASSAGES)
    return kept(j, j.value)


def claims(judges: GenerationJudges) -> Any:
    j = judges.rl_f(TOWER_TURNS, CLAIMS_ANSWER, [])  # no passages: the claims are read, step 2 is not called
    return kept(j, j.claims)


class ClaimsGiven:
    """The judge LLM with RL_F step 1 (claim extraction) answered by ``CLAIMS`` without a call; step 2 goes on."""

    def __init__(self, llm: LLM) -> None:
        self.llm = llm

    def structured(self, messages: list[Message], schema: Any, *args: Any, **kwargs: Any) -> Parsed[Any]:
        if isinstance(schema, dict) and "claims" in schema.get("properties", {}):
            return Parsed(value={"claims": list(CLAIMS)}, text=json.dumps({"claims": CLAIMS}))
        return self.llm.structured(messages, schema, *args, **kwargs)


def verdicts(judges: GenerationJudges) -> Any:
    judges.llms = [ClaimsGiven(judges.primary)]  # type: ignore[list-item]
    j = judges.rl_f(TOWER_TURNS, CLAIMS_ANSWER, TOWER_PASSAGES)
    return kept(j, j.verdicts)


# --- RECOR generation judge (convrag/benchmarks/recor/generation.py) ------------------------------------------------
RECOR_ITEM = JudgeItem(
    question="And how long does the battery last on a full charge?",
    history="Q: Which e-bike did the review test?\nA: The Vela Urban 2, a commuter bike with a 500 Wh battery.",
    reference="The review measured about 80 km of mixed riding on a full charge in the middle assist level.",
    passages=("On a full charge the Vela Urban 2 covered 80 km of mixed city riding in the middle assist mode.",),
    answer="It lasts around 80 km on a full charge if you ride in the middle assist level.")


def recor(llm: LLM, messages: list[Message]) -> Any:
    (outcome,) = judge_answers([RECOR_ITEM], [llm], concurrency=1)
    return outcome.grades if outcome.ok else None


# --- MTR-Pipeline agents (synthesis/mtr/agents.py)
# ----------------------------------------------------------------------
DRAWN = [
    Doc("d1", "Gatun Lake", "An artificial lake formed by damming the Chagres River in 1913.[1] Ships cross about "
        "33 km of it between the Atlantic and Pacific lock flights."),
    Doc("d2", "Panama Canal locks", "Each lock chamber is 320 m long and 33.5 m wide. About 197 million litres "
        "of fresh water flow out to sea with every ship that passes.[2]"),
    Doc("d3", "Panamax", "Ships built to the largest size the original locks could take: 294 m long and 32.3 m "
        "wide, with at most 12 m of draft."),
]
MTR_HISTORY = [Exchange("How do ships get across Panama if the oceans are at different heights?",
                        "They are lifted by locks to Gatun Lake, 26 m above sea level, cross it, and are lowered "
                        "again by locks on the other side.")]
MTR_KEY = "7:conv-0003:2"
MTR_QUESTION = "How much fresh water is lost to the sea each time a ship goes through the Panama Canal locks?"
GOLD = DRAWN[1]


def questioner_fields(prompt: str, history: list[Exchange]) -> dict[str, Any]:
    """The fields :meth:`Questioner.messages` fills in for ``DRAWN`` (same example draw, same cut texts)."""
    example = random.Random(f"example:{MTR_KEY}").choice(load_prompt(prompt).optional["examples"])
    documents = [{"number": i, "title": d.title, "text": cut(strip_markers(d.text), 800)}
                 for i, d in enumerate(DRAWN, 1)]
    fields: dict[str, Any] = {"documents": documents, "example": example}
    if history:
        fields["history"] = [{"question": h.question, "answer": cut(h.answer, 240)} for h in history]
    return fields


def questioner(history: list[Exchange]) -> Callable[[LLM, list[Message]], Any]:
    def read(llm: LLM, messages: list[Message]) -> Any:
        try:
            q = Questioner(llm).ask(DRAWN, history, MTR_KEY)
        except AgentError:  # an unusable reply, counted by the stage
            return None
        return {"document": q.number, "question": q.text}

    return read


def responder(llm: LLM, messages: list[Message]) -> Any:
    try:
        return Responder(llm).answer(MTR_HISTORY, MTR_QUESTION, GOLD).text
    except AgentError:
        return None


def polisher(llm: LLM, messages: list[Message]) -> Any:
    r = Polisher(llm).polish(MTR_HISTORY, MTR_QUESTION)
    return {"text": r.text, "status": r.status}


# --- query rewriting (convrag/retrievers/strategies.py) and answering (convrag/generate/answer.py)
# -----------------------------
REWRITE_TURN = Turn("q7", "When did it open?", history=(
    ("user", "Tell me about the Golden Gate Bridge."),
    ("assistant", "It is a suspension bridge across the Golden Gate strait in San Francisco.")))


def rewrite(llm: LLM, messages: list[Message]) -> Any:
    return str(rewrite_text(REWRITE_TURN, llm))


RAG_ITEM = GenItem("task-42", "Can I bring it as hand luggage?", history=[
    ("user", "What is the baggage allowance on an economy ticket?"),
    ("assistant", "One checked bag of up to 23 kg and one cabin bag of up to 8 kg.")],
    passages=[Passage("doc-1", "Musical instruments may travel in the cabin if they fit in the overhead bin "
                               "(max 118 x 35 x 23 cm). Larger instruments need their own seat.", "Instruments"),
              Passage("doc-2", "Cabin bags must not exceed 55 x 40 x 23 cm, handles and wheels included.",
                      "Cabin baggage")])


def rag(llm: LLM, messages: list[Message]) -> Any:
    return generate_answers([RAG_ITEM], llm, concurrency=1).answers.get(RAG_ITEM.task_id)


def recor_answer(llm: LLM, messages: list[Message]) -> Any:
    return generate_answers([RAG_ITEM], llm, concurrency=1, prompt="gen_recor_answer").answers.get(RAG_ITEM.task_id)


# --- the LLM layer's own instructions (convrag/llm/client.py) -------------------------------------------------------
RATING_TASK: list[Message] = [{"role": "user", "content": (
    "Rate from 1 to 5 how well the document answers the question, and give your reasons first.\n"
    "Question: When did the Golden Gate Bridge open?\n"
    "Document: The Golden Gate Bridge opened to vehicular traffic on 28 May 1937.")}]
SCHEMA_JSON = json.dumps(compact_schema(json_schema_for(RatingReply)), ensure_ascii=False)
BAD_STRUCTURED = "The document gives the exact opening date, so it answers the question fully. I would rate it 5."


def parse_error(text: str) -> str:
    """The message the LLM layer feeds back for an unreadable structured reply ``text``."""
    try:
        parse_structured(text, RatingReply)
    except ParseError as exc:
        return str(exc)
    raise AssertionError(f"{text!r} is readable")


class FirstReply:
    """A backend that answers the first request with ``text`` itself and sends every later one to ``backend``."""

    def __init__(self, backend: Any, text: str) -> None:
        self.backend, self.text, self.answered = backend, text, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    def complete(self, messages: list[Message], params: Any, *, json_schema: Any = None,
                 timeout: float | None = None) -> Completion:
        if not self.answered:
            self.answered = True
            return Completion(text=self.text)
        return self.backend.complete(messages, params, json_schema=json_schema, timeout=timeout)


def structured_rating(llm: LLM, messages: list[Message]) -> Any:
    return llm.structured(RATING_TASK, RatingReply).value


def after(bad: str, read: Callable[[LLM], Any]) -> Callable[[LLM, list[Message]], Any]:
    """``read`` with the first reply ``bad``: the reply under test answers the product's re-ask."""

    def go(llm: LLM, messages: list[Message]) -> Any:
        llm.backend = FirstReply(llm.backend, bad)
        return read(llm)

    return go


def reask_request(prompt: str, error: str, bad: str, *, json: bool) -> Callable[[dict[str, Any]], None]:
    """The re-ask carries the bad reply, then ``prompt`` rendered with the error the product found."""
    (expected,) = load_prompt(prompt).render(error=error)

    def check(body: dict[str, Any]) -> None:
        assert "response_format" not in body
        assert body["messages"][-2] == {"role": "assistant", "content": bad}
        assert body["messages"][-1]["content"] == expected["content"]
        assert ("JSON" in body["messages"][-3]["content"]) is json

    return check


READERS: dict[str, Reader] = {
    "gen_idk": Reader(
        fields={"conversation": conversation_text(CONVERSATION), "response": IDK_REPLY},
        read=both_modes(idk), check_request=no_json_instruction),
    "gen_clarification": Reader(
        fields={"conversation": conversation_text(VAGUE), "response": CLARIFY_REPLY},
        read=both_modes(clarification), check_request=json_instruction),
    "gen_rb_llm": Reader(
        fields={"previous_conversation": conversation_text(CONVERSATION[:-1]), "question": CONVERSATION[-1]["text"],
                "reference": REFERENCE, "response": RB_REPLY, "passages": PASSPORT_PASSAGES},
        read=both_modes(rb_llm), check_request=no_json_instruction),
    "gen_faithfulness_claims": Reader(
        fields={"question": conversation_text(TOWER_TURNS), "response": CLAIMS_ANSWER},
        read=both_modes(claims), check_request=json_instruction),
    "gen_faithfulness_verdicts": Reader(
        fields={"passages": TOWER_PASSAGES, "claims": CLAIMS},
        read=both_modes(verdicts), check_request=json_instruction),
    "gen_recor_judge": Reader(
        fields={"question": RECOR_ITEM.question, "history": RECOR_ITEM.history, "reference": RECOR_ITEM.reference,
                "passages": list(RECOR_ITEM.passages), "answer": RECOR_ITEM.answer},
        read=recor, check_request=json_instruction),
    "mtr_questioner_first": Reader(
        fields=questioner_fields("mtr_questioner_first", []), read=questioner([]), check_request=json_instruction),
    "mtr_questioner_next": Reader(
        fields=questioner_fields("mtr_questioner_next", MTR_HISTORY), read=questioner(MTR_HISTORY),
        check_request=json_instruction),
    "mtr_responder": Reader(
        fields={"answer_words": 150, "title": GOLD.title, "text": strip_markers(GOLD.text), "question": MTR_QUESTION},
        read=responder, check_request=no_json_instruction),
    "mtr_polisher": Reader(
        fields={"history": [{"question": h.question, "answer": cut(h.answer, 300, at_word=False)}
                            for h in MTR_HISTORY], "question": MTR_QUESTION},
        read=polisher, check_request=no_json_instruction),
    "query_rewrite": Reader(
        fields={"history": [{"role": r, "text": t} for r, t in REWRITE_TURN.history], "question": REWRITE_TURN.query},
        read=rewrite, check_request=no_json_instruction),
    "rag_answer": Reader(
        fields={"question": RAG_ITEM.question, "history": [{"role": r, "content": t} for r, t in RAG_ITEM.history],
                "passages": [{"number": i, "title": p.title, "text": p.text}
                             for i, p in enumerate(RAG_ITEM.passages, 1)]},
        read=rag, check_request=no_json_instruction),
    "gen_recor_answer": Reader(
        fields={"question": RAG_ITEM.question, "history": [{"role": r, "content": t} for r, t in RAG_ITEM.history],
                "passages": [{"number": i, "title": p.title, "text": p.text}
                             for i, p in enumerate(RAG_ITEM.passages, 1)]},
        read=recor_answer, check_request=no_json_instruction),
    "structured_output": Reader(
        fields={"schema_json": SCHEMA_JSON}, read=structured_rating, check_request=json_instruction),
    "structured_retry": Reader(
        fields={"error": parse_error(BAD_STRUCTURED)},
        read=after(BAD_STRUCTURED, lambda llm: llm.structured(RATING_TASK, RatingReply).value),
        check_request=reask_request("structured_retry", parse_error(BAD_STRUCTURED), BAD_STRUCTURED, json=True)),
}
