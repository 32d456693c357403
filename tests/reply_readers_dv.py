"""Readers of the RECOR Decomposition-and-Verification prompts for the reply-shape corpus (:mod:`tests.reply_shapes`).

Every D&V stage reads its replies with :func:`convrag.synthesis.recor.common.ask` (the stage's schema, check and
cut-off rule; the LLM layer re-asks when the check or the JSON reading fails). Each reader calls it as its stage
does (the turns stage through its own helper ``Turns._ask``), with the fields of the RECOR appendix C item
(tests/dv_fixture.py), then applies the stage's own rule that turns the reply into what it keeps: the reading.
A reply that stays unreadable after the re-asks is no reading (None).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from convrag.llm import LLM, Message
from convrag.synthesis.recor import align as dv_align
from convrag.synthesis.recor import aspects as dv_aspects
from convrag.synthesis.recor import facts as dv_facts
from convrag.synthesis.recor import turn_agents as agents
from convrag.synthesis.recor import turn_checks as checks
from convrag.synthesis.recor import turns as dv_turns
from convrag.synthesis.recor.common import Tokens, ask, doc_labels, documents_field, sampling
from tests.dv_fixture import ANSWER, DOCUMENTS, QUERY, REASONING
from tests.dv_fixture_turns import ANSWERS, ASPECTS, QUERIES, SUB_QUESTIONS
from tests.reply_shapes import Reader, json_instruction

SHOWN = documents_field(DOCUMENTS, 2000)
TURNS = dv_turns.Turns()
LOW, HIGH = TURNS.answer_sentences
HISTORY = [{"query": q, "answer": a} for q, a in zip(QUERIES[:3], ANSWERS[:3], strict=True)]
FACTS = [f["fact"] for f in ASPECTS[3]["facts"]]  # antagonistic pleiotropy, turn 4 of appendix C
ACCEPTED = [{"name": a["name"], "type": a["type"], "excerpt": a["excerpt"]} for a in ASPECTS[:2]]


def reader(prompt: str, schema: type[BaseModel], max_tokens: int, fields: dict[str, Any], *,
           check: Callable[[], Any] | None = None, cut: Callable[[Any], Any] | None = None,
           then: Callable[[Any], Any] = lambda value: value) -> Reader:
    """A reader of an align / aspects / facts prompt: ``ask`` as the stage calls it (``check()`` makes a fresh check
    per reply), then ``then``; the request must carry the JSON instruction (nothing enforces it)."""

    def read(llm: LLM, messages: list[Message]) -> Any:
        value = ask(llm, prompt, fields, schema, sampling(0.0, max_tokens), Tokens(),
                    check=check() if check is not None else None, cut=cut)
        return then(value)

    return Reader(fields=fields, read=read, check_request=json_instruction)


# -- align, aspects, facts ----------------------------------------------------------------------------------

def screened(reply: dv_aspects.ExtractionReply) -> list[dict[str, str]]:
    """Each proposed aspect with the fate of the stage's call-free rules (``passes`` or ``rejected: <why>``)."""
    out = []
    for cand in reply.aspects:
        fate, aspect = dv_aspects.screen(cand, ACCEPTED, ANSWER)
        out.append({**(aspect or {"name": cand.aspect_name, "type": cand.aspect_type}), "fate": fate or "passes"})
    return out


def ordering(llm: LLM, messages: list[Message]) -> list[int] | None:
    """The stage's aspect order; None when it fell back to the extraction order (a counted failure)."""
    counts: Counter[str] = Counter()
    aspects = [{"name": a["name"], "type": a["type"]} for a in ASPECTS]
    order = dv_aspects.Aspects().order(aspects, llm, Tokens(), counts)
    return None if counts else order


EXTRACT_FIELDS = {"query": QUERY, "reasoning": REASONING, "answer": ANSWER, "num_aspects": 3, "existing": ACCEPTED}
ORDER_FIELDS = {"conversation_strategy": dv_aspects.DEFAULT_STRATEGY,
                "aspects": [{"index": i, "type": a["type"], "name": a["name"]} for i, a in enumerate(ASPECTS)]}
CANDIDATE = {"name": "Antagonistic pleiotropy", "type": "mechanism", "excerpt": ASPECTS[3]["excerpt"]}
FACT_FIELDS = {"name": ASPECTS[2]["name"], "excerpt": ASPECTS[2]["excerpt"], "documents": SHOWN, "max_facts": 5}

DECOMPOSE: dict[str, Reader] = {
    "dv_alignment": reader("dv_alignment", dv_align.AlignmentReply, dv_align.MAX_TOKENS,
                           {"answer": ANSWER, "documents": SHOWN}, check=lambda: dv_align.check_alignment),
    "dv_aspect_extract": reader("dv_aspect_extract", dv_aspects.ExtractionReply, dv_aspects.EXTRACT_TOKENS,
                                EXTRACT_FIELDS, cut=dv_aspects.complete_aspects, then=screened),
    "dv_aspect_overlap": reader("dv_aspect_overlap", dv_aspects.OverlapReply, dv_aspects.JUDGE_TOKENS,
                                {**CANDIDATE, "existing": ACCEPTED}, then=lambda r: r.has_overlap),
    "dv_aspect_suitability": reader("dv_aspect_suitability", dv_aspects.SuitabilityReply, dv_aspects.JUDGE_TOKENS,
                                    CANDIDATE, then=lambda r: r.aspect_category.strip().lower()),
    "dv_aspect_order": Reader(fields=ORDER_FIELDS, read=ordering, check_request=json_instruction),
    "dv_aspect_coverage": reader("dv_aspect_coverage", dv_aspects.CoverageReply, dv_aspects.COVERAGE_TOKENS,
                                 {"name": CANDIDATE["name"], "excerpt": CANDIDATE["excerpt"], "documents": SHOWN},
                                 then=lambda r: {"coverage": r.coverage_score, "name_grounded": r.name_grounded,
                                                 "suggested_name": " ".join(r.suggested_name.split())}),
    "dv_fact_verify": reader("dv_fact_verify", dv_facts.fact_reply(5), dv_facts.MAX_TOKENS, FACT_FIELDS,
                             check=lambda: dv_facts.fact_check(5),
                             then=lambda r: dv_facts.verdicts(r, DOCUMENTS)),
}


# -- turns ----------------------------------------------------------------------------------------------------

def scores(reply: agents.DocScoresReply) -> list[list[Any]]:
    """``[doc_id, score]`` per scored candidate, in document order (the stage's own score)."""
    return [[r["doc_id"], r["score"]] for r in checks.score_rows(reply, DOCUMENTS, Counter())]


def diversity(reply: agents.DiversityReply) -> dict[str, Any]:
    """The verdict and the value type as the stage counts it."""
    return {"adds_value": reply.adds_value, "value_type": dv_turns.value_kind(reply.value_type)}


def annotation(reply: agents.ReasoningReply | agents.GuidanceReply) -> dict[str, Any]:
    """The annotation as the stage stores it (whitespace collapsed)."""
    text = reply.reasoning if isinstance(reply, agents.ReasoningReply) else reply.retrieval_guidance
    return {"reasoning": agents.squash(text), "target_information": agents.squash(reply.target_information),
            "relevance_signals": [agents.squash(s) for s in reply.relevance_signals],
            "irrelevance_signals": [agents.squash(s) for s in reply.irrelevance_signals]}


def step(name: str, prompt: str, schema: type[BaseModel], fields: dict[str, Any], *,
         check: Callable[[agents.Checker], Any] | None = None, judge: bool = False, max_tokens: int | None = None,
         then: Callable[[Any], Any]) -> Reader:
    """A turns-stage reader: the stage's own call helper (``Turns._ask``: sampling, check, cut-off rule); a turn it
    rejects is no reading."""

    def read(llm: LLM, messages: list[Message]) -> Any:
        checker = agents.Checker()
        try:
            value = TURNS._ask(name, llm, prompt, fields, schema, Tokens(), check(checker) if check else None, checker,
                               judge=judge, max_tokens=max_tokens)
        except dv_turns._Rejected:
            return None
        return then(value)

    return Reader(fields=fields, read=read, check_request=json_instruction)


OPENERS = [agents.opener(q) for q in QUERIES[:3]]
TURN_READERS: dict[str, Reader] = {
    "dv_subquestion": step(
        "sub-question", "dv_subquestion", agents.SubQuestionReply,
        {"query": QUERY, "reasoning": REASONING, "aspect_name": ASPECTS[3]["name"], "aspect_type": ASPECTS[3]["type"],
         "facts": FACTS, "previous": SUB_QUESTIONS[:3]},
        check=lambda c: agents.subquestion_check(SUB_QUESTIONS[:3], c), then=lambda r: agents.squash(r.sub_question)),
    "dv_doc_scores": step(
        "document scores", "dv_doc_scores", agents.scores_schema(len(DOCUMENTS)),
        {"sub_question": SUB_QUESTIONS[3], "reasoning": REASONING, "facts": FACTS, "documents": SHOWN},
        check=lambda c: agents.scores_check(doc_labels(DOCUMENTS), c), judge=True,
        max_tokens=max(TURNS.max_tokens, dv_turns.SCORE_TOKENS * len(DOCUMENTS)), then=scores),
    "dv_query_first": step(
        "query", "dv_query_first", agents.QueryReply,
        {"topic": QUERY, "sub_question": SUB_QUESTIONS[0], "max_words": TURNS.query_words},
        check=lambda c: agents.query_check(TURNS.query_words, [], c),
        then=lambda r: agents.squash(r.conversational_query)),
    "dv_query_followup": step(
        "query", "dv_query_followup", agents.QueryReply,
        {"topic": QUERY, "history": HISTORY, "sub_question": SUB_QUESTIONS[3], "openers": OPENERS,
         "max_words": TURNS.query_words},
        check=lambda c: agents.query_check(TURNS.query_words, OPENERS, c),
        then=lambda r: agents.squash(r.conversational_query)),
    "dv_answer": step(
        "answer", "dv_answer", agents.AnswerReply,
        {"history": HISTORY, "query": QUERIES[3], "documents": [SHOWN[0]["text"], SHOWN[1]["text"]],
         "min_sentences": LOW, "max_sentences": HIGH},
        check=lambda c: agents.answer_check(LOW, HIGH, c), then=lambda r: agents.squash(r.answer)),
    "dv_turn_diversity": step(
        "diversity", "dv_turn_diversity", agents.DiversityReply, {"history": HISTORY, "answer": ANSWERS[3]},
        judge=True, then=diversity),
    "dv_retrieval_reasoning": step(
        "retrieval reasoning", "dv_retrieval_reasoning", agents.ReasoningReply,
        {"query": QUERIES[3], "sub_question": SUB_QUESTIONS[3], "aspect_name": ASPECTS[3]["name"], "facts": FACTS,
         "selected": SHOWN[:2], "others": SHOWN[2:]},
        check=agents.reasoning_check, then=annotation),
    "dv_retrieval_guidance": step(
        "retrieval reasoning", "dv_retrieval_guidance", agents.GuidanceReply,
        {"query": QUERY, "reasoning": REASONING, "sub_question": SUB_QUESTIONS[3], "facts": FACTS},
        check=agents.guidance_check, then=annotation),
    "dv_answerability": step(
        "answerability", "dv_answerability", checks.AnswerabilityReply,
        {"sub_question": SUB_QUESTIONS[3], "facts": FACTS, "documents": SHOWN}, judge=True,
        then=lambda r: r.coverage_score),
    "dv_fact_overlap": step(
        "fact overlap", "dv_fact_overlap", checks.FactOverlapReply,
        {"facts": FACTS, "earlier": [f["fact"] for a in ASPECTS[:3] for f in a["facts"]][:8]}, judge=True,
        then=lambda r: r.similarity),
}

READERS: dict[str, Reader] = {**DECOMPOSE, **TURN_READERS}
