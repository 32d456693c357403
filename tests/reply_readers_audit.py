"""Readers of the audit and SEARA prompts for the reply-shape corpus (:mod:`tests.reply_shapes`).

Where the product renders its own prompt (MTR-Eval's ``judge_item``, RECOR's judges, the pooled relevance judge,
the SEARA components), the reader calls that product function on a tiny hand-made input and first checks that
the product's messages are those the harness rendered from the reader's ``fields``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from convrag.builders.profile import EvaluationProfile
from convrag.evaluation.data import BenchmarkData
from convrag.judging.items import AuditDoc, AuditItem, AuditSet
from convrag.judging.mtr_eval import Completeness, NegativeSampler, judge_item, make_dimension
from convrag.judging.mtr_eval import document_text as mtr_document_text
from convrag.judging.pooling import LLMRelevanceJudge, history_summary
from convrag.judging.pooling import document_text as pool_document_text
from convrag.judging.recor import ANSWER_CHARS, DOCUMENT_CHARS, conversation_fields, judge_conversation, judge_turn
from convrag.judging.verdict import judge_call
from convrag.llm import LLM, JudgeEnsemble, Message, load_prompt
from convrag.retrievers.llm_rerank import ListwiseReranker
from convrag.retrievers.llm_rewrite import QueryRewriter
from convrag.seara.facts import Chunk, Fact, extract_facts, llm_entailment
from tests.reply_shapes import Reader, json_instruction, no_json_instruction

HISTORY = [{"role": "user", "text": "Tell me about the Golden Gate Bridge."},
           {"role": "assistant", "text": "It is a suspension bridge across the Golden Gate strait in San Francisco."}]
BRIDGE = ("The Golden Gate Bridge opened to vehicular traffic on 28 May 1937 after four years of construction. "
          "At the time it was the longest suspension bridge main span in the world.")

# -- a tiny audit set: one MTR-Eval turn about honeybees, one three-turn conversation about heat pumps ------------
BEES = (AuditDoc("bees-1", "Honeybee lifespan", "Worker honeybees raised in spring or summer live about five to "
                 "six weeks, worn out by foraging. Workers raised in autumn survive the winter and live four to six "
                 "months. A queen can live for several years."),)
BEE_NEGATIVES = (AuditDoc("bees-2", "Bumblebee colonies", "Bumblebee colonies are annual: only young queens "
                          "survive the winter, hibernating in the ground."),
                 AuditDoc("bees-3", "Wax", "Worker bees secrete wax from glands on their abdomen once they are "
                          "about twelve days old."),
                 AuditDoc("bees-4", "Drones", "Drones are male honeybees; they do not forage and are driven out of "
                          "the hive in autumn."))
BEE_ITEM = AuditItem(
    item_id="bees:2", domain="bees", conversation_id="bees", turn=2, query="And how long do they live in summer?",
    history=(("user", "What do worker honeybees do?"),
             ("assistant", "They forage for nectar and pollen, build comb and look after the brood.")),
    gold=BEES, answer="A worker bee born in summer lives for roughly five to six weeks.",
    pool=tuple(d.doc_id for d in BEE_NEGATIVES))
PUMP_DOCS = (AuditDoc("hp-1", "Heat pumps", "A heat pump moves heat from cold outdoor air into a house by "
                      "evaporating a refrigerant outside and condensing it inside, driven by an electric compressor."),
             AuditDoc("hp-2", "Coefficient of performance", "The coefficient of performance (COP) of an air-source "
                      "heat pump falls as the outdoor temperature drops; at -15 C it is often around 2."))
PUMP_TURNS = (("How does a heat pump get warmth out of cold air?",
               "It evaporates a refrigerant outdoors, where even cold air is warmer than the refrigerant, then "
               "compresses it and releases the heat indoors as it condenses.", PUMP_DOCS[:1]),
              ("ok so does that still work when it's freezing out?",
               "Yes, but less efficiently: the COP drops as it gets colder, to around 2 at -15 C.", PUMP_DOCS[1:]),
              ("and what would running one cost compared with a gas boiler?", "", PUMP_DOCS[1:]))
PUMP_ITEMS = tuple(AuditItem(item_id=f"hp:{n}", domain="heat", conversation_id="hp", turn=n, query=q,
                             history=tuple(m for prev, ans, _ in PUMP_TURNS[:n - 1] for m in
                                           (("user", prev), ("assistant", ans))),
                             gold=gold, answer=answer or None)
                   for n, (q, answer, gold) in enumerate(PUMP_TURNS, 1))
AUDIT_SET = AuditSet(
    folder=Path("reply-shapes"), benchmark="mtr-bench", items=[BEE_ITEM, *PUMP_ITEMS],
    documents={"bees": {d.doc_id: d for d in BEES + BEE_NEGATIVES}, "heat": {d.doc_id: d for d in PUMP_DOCS}},
    data=BenchmarkData(split="test", subsets=["bees", "heat"], turns=[], corpus={}, corpus_kind={}, qrels={}),
    profile=EvaluationProfile(turns="queries", qrels="qrels", corpus={"corpus": "corpus"}))
COMPLETENESS = Completeness(NegativeSampler(AUDIT_SET), k=3, seed=0)
COMP_REQUEST = COMPLETENESS.requests(BEE_ITEM, AUDIT_SET)[0]


def _same(messages: list[Message], product: list[Message]) -> None:
    assert messages == product, "the reader's fields do not render the product's prompt"


def verdict(schema: Any, parse: Any) -> Callable[[LLM, list[Message]], Any]:
    """The verdict :func:`judge_call` reads (None when it reports an error)."""

    def read(llm: LLM, messages: list[Message]) -> Any:
        value, _, _, error = judge_call(llm, messages, schema, parse)
        return None if error else value

    return read


def query_evidence(llm: LLM, messages: list[Message]) -> Any:
    """Q-E's verdict as :func:`judge_item` asks for it (its parse, and its parse of a cut-off reply), on the bridge
    question (Q-E's parse does not depend on the request)."""
    dim = make_dimension("query_evidence")
    value, _, _, error = judge_call(llm, messages, dim.schema(None), functools.partial(dim.parse, None),
                                    cut_parse=functools.partial(dim.parse, None, cut=True))
    return None if error else value


def mtr_rating(dimension: str) -> Callable[[LLM, list[Message]], Any]:
    """The 1-5 score MTR-Eval's :func:`judge_item` records for the honeybee turn (None: no verdict)."""

    def read(llm: LLM, messages: list[Message]) -> Any:
        dim = make_dimension(dimension)
        _same(messages, dim.requests(BEE_ITEM, AUDIT_SET)[0].messages)
        (v,) = judge_item(llm, dim, BEE_ITEM, AUDIT_SET) or []
        return v.score

    return read


def mtr_choice(llm: LLM, messages: list[Message]) -> Any:
    """The discriminability verdict: the number of the document named (1-based, as shown) and the score."""
    _same(messages, COMP_REQUEST.messages)
    (v,) = judge_item(llm, COMPLETENESS, BEE_ITEM, AUDIT_SET) or []
    if v.extra["picked"] is None:
        return None
    return {"document": COMP_REQUEST.extra["candidates"].index(v.extra["picked"]) + 1, "score": v.score}


def conversation_scores(llm: LLM, messages: list[Message]) -> Any:
    """RECOR's conversation scores ``{dimension: score or None}`` (default profile ``authors``) with the quoted
    evidence the verdicts keep under ``evidence`` (``{dimension: {field: [quotes]}}``); None when no dimension
    has a score."""
    verdicts = judge_conversation(llm, PUMP_ITEMS, AUDIT_SET)
    scores: dict[str, Any] = {v.dimension: v.score for v in verdicts}
    if all(s is None for s in scores.values()):
        return None
    return {**scores, "evidence": {v.dimension: v.extra["evidence"] for v in verdicts}}


def sent_as_rendered(prompt: str, fields: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """A ``check_request``: no JSON asked for, and the product sent exactly the prompt rendered from ``fields``."""
    rendered = load_prompt(prompt).render(**fields)

    def check(body: dict[str, Any]) -> None:
        no_json_instruction(body)
        assert body["messages"] == rendered, f"{prompt}: the product's messages differ from the reader's fields"

    return check


def turn_label(kind: str, item: AuditItem) -> Callable[[LLM, list[Message]], Any]:
    """The label RECOR's :func:`judge_turn` records (None: no label), as ``{label, evidence}`` when the verdict
    kept a quote (default profile ``authors``)."""

    def read(llm: LLM, messages: list[Message]) -> Any:
        v = judge_turn(llm, kind, item)
        if v.label is None or v.extra.get("evidence") is None:
            return v.label
        return {"label": v.label, "evidence": v.extra["evidence"]}

    return read


def pooled_grade(llm: LLM, messages: list[Message]) -> Any:
    """The 0-3 grade :class:`LLMRelevanceJudge` records for the honeybee turn and its gold document."""
    judge = LLMRelevanceJudge(llm)
    _same(messages, judge.messages(BEE_ITEM, BEES[0]))
    return judge.verdict(BEE_ITEM, BEES[0]).score


SOIL = Chunk("soil-0", "soil", 120, "Earthworms drag leaf litter down into their burrows, where it is broken down. "
             "Their casts are richer in nitrogen and phosphorus than the surrounding soil. Charles Darwin spent "
             "forty years studying them.")


def fact_quotes(llm: LLM, messages: list[Message]) -> Any:
    """The quotes :func:`extract_facts` keeps and rejects for one (question, chunk) pair; None when the pair
    failed (unparseable reply or failed call)."""
    out = extract_facts({"q": EXTRACT_QUERY}, [SOIL], {"q": [SOIL.chunk_id]}, llm, concurrency=1)
    if out.errors:
        return None
    return {"quotes": [u.text for u in out.units], "rejected": [r["quote"] for r in out.rejected]}


EXTRACT_QUERY = "How do earthworms make soil more fertile?"
ENTAIL_FACT = Fact("soil:200-280", "soil", 200, 280, "Worm casts hold more nitrogen and phosphorus than the soil "
                   "around them.", ("q",), ("soil-0",))


def entailed(llm: LLM, messages: list[Message]) -> Any:
    """The verdict of :func:`llm_entailment` (None: no verdict, which matching treats as not entailed)."""
    return llm_entailment(llm)(ENTAIL_FACT, SOIL)


VARIANTS_QUERY = "what did the 1906 earthquake do to San Francisco's water supply?"


def query_variants(llm: LLM, messages: list[Message]) -> Any:
    """The variants :class:`QueryRewriter` keeps after the original; None when the call failed or was unreadable."""
    rewriter = QueryRewriter(llm, n_queries=3, concurrency=1)
    found = rewriter.variants({"q": VARIANTS_QUERY})["q"]
    return None if rewriter.failures else found[1:]


RERANK_QUERY = "symptoms of vitamin B12 deficiency"
RERANK_PASSAGES = {
    "p1": "Vitamin B12 is found almost only in animal foods such as meat, fish, eggs and dairy.",
    "p2": "Lack of vitamin B12 causes tiredness, pale skin, a sore tongue, pins and needles and memory problems.",
    "p3": "Iron deficiency anaemia is the most common form of anaemia worldwide.",
    "p4": "Older adults and people taking metformin are at higher risk of low B12 levels.",
}


def reranked(llm: LLM, messages: list[Message]) -> Any:
    """The window order :class:`ListwiseReranker` makes, as passage numbers (1-based, as shown), with how the
    reply was taken (``complete`` / ``incomplete``); None when the window kept its order for a failure."""
    ids = list(RERANK_PASSAGES)
    reranker = ListwiseReranker(llm, window=len(ids), stride=2, concurrency=1)
    order = reranker.rerank({"q": RERANK_QUERY}, {"q": ids}, RERANK_PASSAGES)["q"]
    if reranker.failures:
        return None
    return {"order": [ids.index(c) + 1 for c in order],
            "taken": "incomplete" if reranker.counts["incomplete_order"] else "complete"}


class Grade(BaseModel):
    """The caller's schema for ``relevance_judge``, as in the library's example."""

    grade: Literal[0, 1, 2]
    reason: str


class Pick(BaseModel):
    """The caller's schema for ``pairwise_judge``: the chosen candidate's shown index."""

    best: int
    reason: str = ""


def library_grade(llm: LLM, messages: list[Message]) -> Any:
    """``llm.structured(msgs, Grade).value.grade``, the library's documented use."""
    return llm.structured(messages, Grade).value.grade


PAIR_QUESTION = "Why is the sky blue?"
PAIR_CANDIDATES = ["Because it reflects the colour of the oceans.",
                   "Air molecules scatter short blue wavelengths of sunlight much more than red ones (Rayleigh "
                   "scattering), so blue light reaches the eye from every part of the sky.",
                   "Blue light is scattered by air."]


def library_pick(llm: LLM, messages: list[Message]) -> Any:
    """The candidate :meth:`JudgeEnsemble.compare` picks with one judge in the shown order."""
    template = load_prompt("pairwise_judge")

    def render(items: list[Any]) -> list[Message]:
        return template.render(question=PAIR_QUESTION, candidates=items)

    _same(messages, render(PAIR_CANDIDATES))
    return JudgeEnsemble([llm]).compare(render, PAIR_CANDIDATES, Pick, "best", shuffle=False).value


def _history(item: AuditItem) -> list[dict[str, str]]:
    return [{"role": role, "text": text} for role, text in item.history]


_CONVERSATION, _ = conversation_fields(PUMP_ITEMS, AUDIT_SET)
RECOR_FIELDS = {  # the default profile, authors: evidence asked for, the two previous turns in full
    "audit_conversation_quality": {**_CONVERSATION, "free_text": True, "answer_chars": ANSWER_CHARS,
                                   "document_chars": DOCUMENT_CHARS},
    "audit_turn_dependency": {"query": PUMP_ITEMS[2].query, "history": list(PUMP_ITEMS[2].history),
                              "free_text": True, "answer_chars": None, "context_turns": 2, "evidence": True},
    "audit_question_pattern": {"query": PUMP_ITEMS[1].query, "free_text": True, "evidence": True},
}

READERS: dict[str, Reader] = {
    "audit_query_evidence": Reader(
        fields={"query": "When did it open?", "document": BRIDGE, "history": HISTORY},
        read=query_evidence, check_request=no_json_instruction),
    "audit_answer_quality": Reader(
        fields={"query": BEE_ITEM.query, "history": _history(BEE_ITEM), "answer": BEE_ITEM.answer,
                "documents": [mtr_document_text(d) for d in BEES]},
        read=mtr_rating("answer_quality"), check_request=no_json_instruction),
    "audit_faithfulness": Reader(
        fields={"query": BEE_ITEM.query, "history": _history(BEE_ITEM), "answer": BEE_ITEM.answer,
                "documents": [mtr_document_text(d) for d in BEES]},
        read=mtr_rating("answer_faithfulness"), check_request=no_json_instruction),
    "audit_discriminability": Reader(
        fields={"query": BEE_ITEM.query, "history": _history(BEE_ITEM),
                "documents": [mtr_document_text(AUDIT_SET.document(BEE_ITEM, d))
                              for d in COMP_REQUEST.extra["candidates"]]},
        read=mtr_choice, check_request=no_json_instruction),
    **{name: Reader(fields=fields, read=read, check_request=sent_as_rendered(name, fields)) for name, fields, read in (
        ("audit_conversation_quality", RECOR_FIELDS["audit_conversation_quality"], conversation_scores),
        ("audit_turn_dependency", RECOR_FIELDS["audit_turn_dependency"], turn_label("dependency", PUMP_ITEMS[2])),
        ("audit_question_pattern", RECOR_FIELDS["audit_question_pattern"], turn_label("pattern", PUMP_ITEMS[1])))},
    "audit_relevance_graded": Reader(
        fields={"query": BEE_ITEM.query, "document": pool_document_text(BEES[0]),
                "history": history_summary(BEE_ITEM.history)},
        read=pooled_grade, check_request=no_json_instruction),
    "seara_fact_extract": Reader(
        fields={"query": EXTRACT_QUERY, "chunk": SOIL.text}, read=fact_quotes, check_request=json_instruction),
    "seara_fact_entail": Reader(
        fields={"fact": ENTAIL_FACT.text, "chunk": SOIL.text}, read=entailed, check_request=json_instruction),
    "seara_query_variants": Reader(
        fields={"query": VARIANTS_QUERY, "n": 3}, read=query_variants, check_request=json_instruction),
    "seara_rerank_listwise": Reader(
        fields={"query": RERANK_QUERY, "passages": list(RERANK_PASSAGES.values())}, read=reranked,
        check_request=json_instruction),
    "relevance_judge": Reader(
        fields={"query": "capital of Australia", "passage": "Canberra, not Sydney, has been the capital of "
                "Australia since 1913; the city was designed by Walter Burley Griffin and Marion Mahony."},
        read=library_grade, check_request=json_instruction),
    "pairwise_judge": Reader(
        fields={"question": PAIR_QUESTION, "candidates": PAIR_CANDIDATES}, read=library_pick,
        check_request=json_instruction),
}
