"""Scripted model replies for the D&V ``turns`` stage on the appendix C item (tests/dv_fixture.py), written for
these tests: the five verified aspects of the paper's Table 14 (disposable soma has no verified fact and is
absent), and for each of them a sub-question, document ratings, a user query, an answer, a diversity verdict
and a retrieval reasoning annotation, in the mixed formats real models produce (bare JSON, JSON after a
sentence of prose, JSON in a ```json fence).

How to use (also from an end-to-end test over every stage):

* ``facts_item()`` is the item as the ``facts`` stage hands it to ``turns``.
* ``appendix_c_responder()`` returns a function ``messages -> reply`` for
  ``FakeBackend(responder=...)``. It tells the prompt from the JSON schema the LLM layer appends to the
  user message (:func:`prompt_kind`) and the aspect from text only that aspect's prompt holds
  (:func:`aspect_of`), so it answers correctly in any order, under concurrency and on re-asks.
  ``overrides={(kind, aspect): [reply, ...]}`` (aspect 1-based in :data:`ASPECTS` order, kinds as in
  :data:`KINDS`) are served first, one per call, before the standard reply; an exception in the list is raised
  (e.g. a non-retryable ``BackendError`` for a failed call). ``calls`` (a list) collects ``(kind, aspect)``.
  ``fallback`` answers every other prompt (chain the other stages' responders for an end-to-end run:
  ``appendix_c_responder(fallback=other_stages_responder)``).
* ``standard_reply(kind, aspect)`` is the scripted reply itself (to build a variant or a re-ask sequence).
* The outcome: five turns with gold documents :data:`EXPECTED_GOLD` under either profile (``authors``' cut
  ``max(4.0, 0.6 x best)`` and ``convrag``'s 5.0 select the same here); turn 4's ratings are the paper's Table 15
  (8,7,7,0 / 6,5,6,0 / 4,3,5,0, scores 7.15 / 5.40 / 3.65) under a wrong ``final_score`` in the reply.
* Profile ``authors`` adds three kinds: ``answerability`` (:data:`ANSWERABILITY`, all >= 0.40), ``fact_overlap``
  (:data:`FACT_OVERLAP`, all <= 0.80) and ``guidance`` (the retrieval guidance written before scoring, the texts of
  :data:`REASONING`); the answers pass the lexical distinctness rules, and the diversity judge is asked on turn 3
  only (its word similarity to turn 2 is 0.29 > 0.25).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.dv_fixture import DOCUMENTS, appendix_c_item

KINDS = ("subquestion", "scores", "query_first", "query_followup", "answer", "diversity", "reasoning",
         "answerability", "fact_overlap", "guidance")
DOC_IDS = [d["doc_id"] for d in DOCUMENTS]  # Aging_theory_12.txt, Evolution_38.txt, Genetics_91.txt


def _fact(text: str, doc_id: str, reason: str) -> dict[str, Any]:
    return {"fact": text, "supported": True, "doc_id": doc_id, "reason": reason}


ASPECTS: list[dict[str, Any]] = [
    {"name": "Post-reproductive selection", "type": "mechanism", "document_coverage": 0.85,
     "excerpt": "Natural selection mostly acts on traits that matter before and during the reproductive years",
     "facts": [
         _fact("Natural selection acts mainly on traits that matter before and during reproduction.",
               "Aging_theory_12.txt", "The document says selection filters genes acting before reproduction."),
         _fact("Mutations whose effects show only after reproduction are under weak selection.",
               "Aging_theory_12.txt", "Late-acting genes are said to be barely seen by selection.")]},
    {"name": "Mutation accumulation", "type": "mechanism", "document_coverage": 0.9,
     "excerpt": "harmful alleles that act late in life therefore pile up in a population",
     "facts": [_fact("Harmful alleles that act late in life accumulate over generations.", "Evolution_38.txt",
                     "Medawar's argument is stated almost word for word.")]},
    {"name": "Late-onset disease example", "type": "example", "document_coverage": 0.8,
     "excerpt": "Huntington's disease is the textbook case: symptoms usually begin between the ages of 30 and 50",
     "facts": [
         _fact("Huntington's disease symptoms usually begin between the ages of 30 and 50.", "Genetics_91.txt",
               "The age range is given explicitly."),
         _fact("Carriers of the Huntington's allele often have children before they fall ill.", "Genetics_91.txt",
               "The document notes that many carriers have had children by then.")]},
    {"name": "Antagonistic pleiotropy", "type": "mechanism", "document_coverage": 0.85,
     "excerpt": "Some alleles even help early in life and harm later, which George Williams called antagonistic "
                "pleiotropy in 1957",
     "facts": [_fact("Some alleles bring a benefit early in life and a cost late in life.", "Aging_theory_12.txt",
                     "Williams' proposal is described with the same early benefit and late cost.")]},
    {"name": "Extrinsic mortality", "type": "implication", "document_coverage": 0.8,
     "excerpt": "where the environment kills many individuals early, few would live long enough to profit from "
                "slow ageing",
     "facts": [_fact("High extrinsic mortality favours earlier reproduction.", "Evolution_38.txt",
                     "Populations with many predators or diseases are said to evolve earlier reproduction.")]},
]

SUB_QUESTIONS = [
    "Why does natural selection act only weakly on traits that are expressed after the reproductive period?",
    "How do deleterious alleles with late-onset effects accumulate in a population over generations?",
    "Which late-onset genetic disease shows weak selection against an allele expressed after reproduction?",
    "How can natural selection favour alleles that give early-life benefits but late-life costs?",
    "How does high extrinsic mortality shape selection on the timing of reproduction and on lifespan?",
]
QUERIES = [
    "In evolution, why doesn't selection pay much attention to traits that only show up after we've had kids?",
    "So is that why harmful genes can hang around, because they only show up late?",
    "Are there real diseases that stick around because they only hit after people have children?",
    "What about genes that help us when we're young but hurt us when we're older?",
    "Why wouldn't a long life pay off when the environment is full of danger?",
]
ANSWERS = [
    "Natural selection works mostly on traits that affect survival and reproduction before the reproductive "
    "years are over. A mutation whose effects only appear later is barely seen by selection, since its carriers "
    "have usually passed on their genes already.",
    "Yes, that is the idea behind mutation accumulation. Harmful alleles that act late in life are not weeded "
    "out efficiently, because their carriers have already reproduced. Over many generations such mutations "
    "build up in a population.",
    "Huntington's disease is the classic case. Its symptoms usually begin between the ages of 30 and 50, and "
    "many carriers have had children by then. Because the allele is passed on before it causes illness, "
    "selection against it stays weak.",
    "That is antagonistic pleiotropy, an idea Williams put forward in 1957. Some alleles bring a benefit early "
    "in life and a cost late in life. Selection keeps them because the early benefit counts for more than the "
    "later harm.",
    "When predators or disease kill many individuals early, few live long enough to gain anything from a longer "
    "life. Selection then favours reproducing early over investing in long-term survival, so such species tend "
    "to have shorter lives.",
]
#: per aspect, per document (doc_0, doc_1, doc_2): support, completeness, clarity, misleading, the model's own
#: (ignored; for turn 4 deliberately wrong) final_score
RATINGS: list[list[tuple[int, int, int, int, float]]] = [
    [(9, 8, 8, 0, 8.1), (6, 4, 6, 0, 5.1), (3, 2, 6, 1, 3.0)],
    [(5, 4, 7, 0, 4.75), (9, 9, 8, 0, 8.4), (4, 3, 6, 0, 3.8)],
    [(2, 1, 7, 0, 2.35), (3, 2, 6, 0, 3.0), (10, 9, 9, 0, 9.05)],
    [(8, 7, 7, 0, 7.6), (6, 5, 6, 0, 5.9), (4, 3, 5, 0, 4.1)],
    [(2, 1, 7, 0, 2.4), (9, 8, 8, 0, 8.1), (0, 0, 7, 2, 1.0)],
]
EXPECTED_SCORES = [[8.1, 5.1, 2.95], [4.75, 8.4, 3.8], [2.35, 3.0, 9.05], [7.15, 5.4, 3.65], [2.35, 8.1, 0.95]]
EXPECTED_GOLD = [["Aging_theory_12.txt", "Evolution_38.txt"], ["Evolution_38.txt"], ["Genetics_91.txt"],
                 ["Aging_theory_12.txt", "Evolution_38.txt"], ["Evolution_38.txt"]]
VALUE_TYPES = ["", "deepening", "example", "new_facts", "implication"]
REASONING = [
    ("Retrieve documents on how the strength of selection falls with age after reproduction, not documents on "
     "the cellular causes of ageing.", "How selection strength depends on when a trait is expressed",
     ["declining force of selection", "post-reproductive traits", "genes acting late in life"],
     ["telomere shortening", "cell division limits"]),
    ("Look for documents explaining why late-acting harmful mutations build up over generations, and skip "
     "descriptions of single diseases.", "Build-up of late-acting deleterious mutations",
     ["mutation accumulation", "Medawar", "weak selection after reproduction"], ["specific disease genetics"]),
    ("Fetch documents describing an inherited disease whose symptoms start after the usual age of having "
     "children, not general theories of ageing.", "A late-onset inherited disease passed on before symptoms",
     ["Huntington's disease", "onset between 30 and 50", "carriers already have children"],
     ["general ageing theory", "telomeres"]),
    ("Retrieve documents on alleles whose effect on fitness reverses with age, and avoid documents about "
     "neutral or single-effect mutations.", "Alleles with opposite fitness effects early and late in life",
     ["antagonistic pleiotropy", "early benefit with late cost", "Williams 1957 ageing theory"],
     ["neutral mutations", "alleles with a single effect"]),
    ("Look for documents linking outside causes of death such as predators to earlier reproduction, not ones "
     "about repair of the body.", "How environmental death risk shapes reproductive timing",
     ["extrinsic mortality", "predators or disease", "earlier reproduction"], ["somatic repair", "telomerase"]),
]


def _subquestion_reply(i: int) -> str:
    body = json.dumps({"sub_question": SUB_QUESTIONS[i], "confidence": [0.9, 0.85, 0.92, 0.88, 0.8][i],
                       "reasoning": f"It targets the {ASPECTS[i]['name'].lower()} aspect and stays with the "
                                    "question of why ageing was not selected away."})
    return [body, f"Here is a focused sub-question for this aspect:\n{body}", f"```json\n{body}\n```",
            body, f"Sure.\n```json\n{body}\n```\nIt can be answered from the listed fact."][i]


def _scores_reply(i: int) -> str:
    rows = [{"doc_id": f"doc_{j}", "support_score": s, "completeness_score": c, "clarity_score": cl,
             "misleading_score": m, "final_score": f,
             "reasoning": ("Explains this point directly." if s >= 8 else "Covers part of it briefly." if s >= 5
                           else "Mostly about something else.")}
            for j, (s, c, cl, m, f) in enumerate(RATINGS[i])]
    body = json.dumps({"document_scores": rows}, indent=2)
    return f"```json\n{body}\n```" if i % 2 else body


def _query_reply(i: int) -> str:
    if i == 0:
        return json.dumps({"conversational_query": QUERIES[0], "kept_technical_content": True,
                           "natural_language_used": True})
    body = json.dumps({"conversational_query": QUERIES[i],
                       "transition_type": ["", "confirming", "direct", "curious", "probing"][i],
                       "uses_natural_language": True, "references_previous_content": True})
    return f"Here's a natural follow-up:\n\n{body}" if i == 2 else body


def _answer_reply(i: int) -> str:
    body = json.dumps({"answer": ANSWERS[i], "uses_natural_language": True, "avoids_meta_references": True,
                       "focuses_on_available_info": True})
    return f"```json\n{body}\n```" if i == 3 else body


def _diversity_reply(i: int) -> str:
    return json.dumps({"adds_value": True, "value_type": VALUE_TYPES[i],
                       "reason": "It brings in a point the earlier answers did not make."})


def _reasoning_reply(i: int) -> str:
    sentence, target, relevant, irrelevant = REASONING[i]
    body = json.dumps({"reasoning": sentence, "target_information": target, "relevance_signals": relevant,
                       "irrelevance_signals": irrelevant}, indent=1)
    return f"Annotation for this turn:\n{body}" if i == 4 else body


#: per aspect: the answerability judge's coverage of its sub-question, and the fact-overlap judge's similarity of its
#: facts to the earlier turns' (profile authors; aspect 1 has no earlier turn)
ANSWERABILITY = [0.9, 0.85, 0.95, 0.8, 0.75]
FACT_OVERLAP = [0.0, 0.45, 0.3, 0.55, 0.2]


def _answerability_reply(i: int) -> str:
    body = json.dumps({"can_answer": True, "coverage_score": ANSWERABILITY[i],
                       "reason": "The documents state the specific points the question asks about.",
                       "specific_gaps": [] if i % 2 else ["no figures beyond those given"]})
    return f"Assessment:\n```json\n{body}\n```" if i == 2 else body


def _fact_overlap_reply(i: int) -> str:
    body = json.dumps({"similarity": FACT_OVERLAP[i],
                       "reason": "Same field of ageing theory, but the specific claims differ."})
    return f"{body}\nThe new facts concern a different mechanism." if i == 3 else body


def _guidance_reply(i: int) -> str:
    sentence, target, relevant, irrelevant = REASONING[i]
    body = json.dumps({"retrieval_guidance": sentence, "target_information": target, "relevance_signals": relevant,
                       "irrelevance_signals": irrelevant}, indent=2)
    return f"```json\n{body}\n```" if i in (1, 4) else body


STANDARD: dict[str, Callable[[int], str]] = {
    "subquestion": _subquestion_reply, "scores": _scores_reply, "query_first": _query_reply,
    "query_followup": _query_reply, "answer": _answer_reply, "diversity": _diversity_reply,
    "reasoning": _reasoning_reply, "answerability": _answerability_reply, "fact_overlap": _fact_overlap_reply,
    "guidance": _guidance_reply}
#: per kind: the texts of which the latest (highest aspect) present in the prompt names the aspect asked about
MARKERS: dict[str, list[str]] = {
    "subquestion": [a["facts"][0]["fact"] for a in ASPECTS], "scores": SUB_QUESTIONS,
    "query_first": SUB_QUESTIONS, "query_followup": SUB_QUESTIONS, "answer": QUERIES, "diversity": ANSWERS,
    "reasoning": SUB_QUESTIONS, "answerability": SUB_QUESTIONS, "guidance": SUB_QUESTIONS,
    "fact_overlap": [a["facts"][0]["fact"] for a in ASPECTS]}


def standard_reply(kind: str, aspect: int) -> str:
    """The scripted reply of ``kind`` (one of :data:`KINDS`) for the 1-based ``aspect``."""
    return STANDARD[kind](aspect - 1)


def facts_item(item_id: str = "aging-0") -> dict[str, Any]:
    """The appendix C item as the ``facts`` stage writes it: five aspects in conversation order, each with its
    verified facts."""
    return {**appendix_c_item(item_id), "aspects": [json.loads(json.dumps(a)) for a in ASPECTS]}


_SCHEMA_MARK = "It must conform to this JSON schema:"
#: a top-level property of each turns reply schema that no other D&V schema has -> the prompt kind
_SIGNATURES = (("sub_question", "subquestion"), ("document_scores", "scores"),
               ("avoids_meta_references", "answer"), ("adds_value", "diversity"), ("retrieval_guidance", "guidance"),
               ("relevance_signals", "reasoning"), ("specific_gaps", "answerability"), ("similarity", "fact_overlap"))


def prompt_kind(messages: list[dict[str, str]]) -> str | None:
    """Which ``turns`` prompt ``messages`` are (one of :data:`KINDS`), from the top-level properties of the JSON
    schema the LLM layer appends to the first user message; None for any other prompt."""
    first = next((m["content"] for m in messages if m["role"] == "user"), "")
    if _SCHEMA_MARK not in first:
        return None
    try:
        schema = json.loads(first.split(_SCHEMA_MARK, 1)[1].strip())
    except ValueError:
        return None
    properties = set(schema.get("properties") or {})
    for key, kind in _SIGNATURES:
        if key in properties:
            return kind
    if "conversational_query" in properties:
        return "query_followup" if "Assistant:" in first else "query_first"
    return None


def aspect_of(kind: str, messages: list[dict[str, str]]) -> int:
    """The 1-based aspect a ``kind`` prompt asks about (the highest whose marker text it holds)."""
    first = next(m["content"] for m in messages if m["role"] == "user")
    found = [i for i, marker in enumerate(MARKERS[kind], 1) if marker in first]
    if not found:
        raise AssertionError(f"{kind} prompt about no known aspect: {first[:200]!r}")
    return max(found)


def appendix_c_responder(overrides: dict[tuple[str, int], list[Any]] | None = None,
                         calls: list[tuple[str, int]] | None = None,
                         fallback: Callable[[list[dict[str, str]]], str] | None = None,
                         ) -> Callable[[list[dict[str, str]]], str]:
    """A ``FakeBackend`` responder for the five-turn trace (module docstring); prompts of other stages go to
    ``fallback`` (an error without one)."""
    queue = {key: list(replies) for key, replies in (overrides or {}).items()}

    def respond(messages: list[dict[str, str]]) -> str:
        kind = prompt_kind(messages)
        if kind is None:
            if fallback is None:
                raise AssertionError(f"not a turns prompt: {messages[-1]['content'][:120]!r}")
            return fallback(messages)
        aspect = aspect_of(kind, messages)
        if calls is not None:
            calls.append((kind, aspect))
        pending = queue.get((kind, aspect))
        if pending:
            reply = pending.pop(0)
            if isinstance(reply, BaseException):
                raise reply
            return str(reply)
        return standard_reply(kind, aspect)

    return respond
