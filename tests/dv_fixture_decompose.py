"""Scripted model replies that trace the RECOR appendix C example (tests/dv_fixture.py) through the D&V stages
``align``, ``aspects`` and ``facts`` (hand-written replies as a model would give them: some with prose around the
JSON, some in code fences).

What the script makes happen (defaults of the stages):

* align: 5 key claims, 4 supported (the disposable-soma claim is not), coverage 0.8, sufficient -> kept.
* aspects (every candidate passing suitability is then covered by the documents as Table 13 says, names
  grounded), round 1: post-reproductive selection, mutation accumulation, late-onset disease example (its type
  written "Example") -> 3 accepted. Round 2: "Weak selection after reproduction" (overlap with post-reproductive
  selection -> rejected), extrinsic mortality, antagonistic pleiotropy, disposable soma theory -> 3 accepted.
  Round 3: "Textbook status of Huntington's" (no overlap, judged "meta" -> rejected) -> nothing added, rounds end.
  Ordering: extraction order PR, MA, LO, EM, AP, DS -> conversation order [0, 1, 2, 4, 5, 3] (Table 13's order).
* facts: 2/1/2/1/0/1 facts verified of 2/1/2/1/2/1 (Table 14: 7 of 9); disposable soma has none -> dropped; five
  aspects remain (appendix C's five turns). The verified facts (texts, documents, reasons) are those of
  tests/dv_fixture_turns.py's ``ASPECTS``, so the turns stage's scripted replies follow on from this script.

How to use it:

* ``replies()`` is a FakeBackend responder: ``FakeBackend(responder=replies())`` answers every prompt of the three
  stages for this item, whatever the order or concurrency (it reads which prompt and which aspect it is from the
  first user message). It raises AssertionError on any other prompt.
* ``reply_for(messages)`` is the same lookup returning None for prompts it does not know, to chain with another
  responder (e.g. the turns stage's): ``lambda m: reply_for(m) or turns_reply(m)``.
* ``ordered_replies()`` lists the same replies in the order one item's calls are made (concurrency 1), for
  ``FakeBackend(script=...)``: 1 align call, 24 aspects calls, 6 facts calls.
* ``judge_responder``, ``extraction``, ``SENTENCES`` and ``GOOD`` build small aspects-stage scripts for tests of
  single rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from tests.dv_fixture import ANSWER

PR, MA, LO = "Post-reproductive selection", "Mutation accumulation", "Late-onset disease example"
EM, AP, DS = "Extrinsic mortality", "Antagonistic pleiotropy", "Disposable soma theory"
OVERLAPPING, META = "Weak selection after reproduction", "Textbook status of Huntington's"
#: the aspects that survive every stage, in conversation order
FINAL_ASPECTS = [PR, MA, LO, AP, EM]
#: verified facts per surviving aspect (Table 14)
VERIFIED = {PR: 2, MA: 1, LO: 2, AP: 1, EM: 1}

ALIGNMENT = """I compared each main claim of the answer with the three documents.

{
  "key_claims": [
    "Selection is weak on traits that only appear after reproduction",
    "Late-acting harmful mutations accumulate over generations",
    "Huntington's disease begins after carriers usually have children",
    "Alleles with early benefits and late costs are kept by selection",
    "Organisms split resources between reproduction and repair"
  ],
  "supported_claims": [
    "Selection is weak on traits that only appear after reproduction",
    "Late-acting harmful mutations accumulate over generations",
    "Huntington's disease begins after carriers usually have children",
    "Alleles with early benefits and late costs are kept by selection"
  ],
  "unsupported_claims": ["Organisms split resources between reproduction and repair"],
  "coverage_percentage": 0.8,
  "is_sufficient": true
}

Only the resource-allocation argument (disposable soma) has no backing in the documents."""


def _aspect(name: str, kind: str, excerpt: str, distinct: str) -> dict[str, str]:
    return {"aspect_name": name, "aspect_type": kind, "excerpt": excerpt, "distinct_from_existing": distinct}


EXTRACTION = [
    json.dumps({"aspects": [
        _aspect(PR, "mechanism", "Natural selection mostly acts on traits that matter before and during the "
                "reproductive years; a mutation whose effects only show after reproduction is under weak selection",
                "First aspect."),
        _aspect(MA, "mechanism", "Over many generations, harmful alleles that act late in life therefore pile up "
                "in a population: this is mutation accumulation.", "Long-term build-up, not the selection rule."),
        _aspect(LO, "Example", "Huntington's disease is the textbook case: symptoms usually begin between the ages "
                "of 30 and 50, and carriers have often had children before they fall ill.",
                "A concrete disease rather than a mechanism."),
    ], "extraction_notes": "Started with the selection argument and its direct consequences."}, indent=2),
    "Here are further aspects that are not covered yet:\n```json\n" + json.dumps({"aspects": [
        _aspect(OVERLAPPING, "detail", "a mutation whose effects only show after reproduction is under weak "
                "selection, because its carriers have already passed on their genes", "Focuses on the reason."),
        _aspect(EM, "implication", "where the environment kills many individuals early, few would live long enough "
                "to profit from slow ageing, so selection favours reproducing early", "Environmental risk."),
        _aspect(AP, "mechanism", "Some alleles even help early in life and harm later, which George Williams called "
                "antagonistic pleiotropy in 1957; selection keeps them because the early benefit outweighs the late "
                "cost.", "Alleles with two opposite effects."),
        _aspect(DS, "mechanism", "The disposable soma theory adds that an organism splits limited resources between "
                "reproduction and bodily repair, so that investing heavily in repair buys a longer life.",
                "A resource trade-off, not a genetic one."),
    ], "extraction_notes": "Four more theories and consequences."}, indent=2) + "\n```",
    json.dumps({"aspects": [
        _aspect(META, "detail", "Huntington's disease is the textbook case",
                "How the example is presented in teaching."),
    ], "extraction_notes": "The answer is nearly exhausted; only one remark is left."}),
]

_NO_OVERLAP = '{"has_overlap": false, "overlaps_with": null, "overlap_type": "no_overlap", "reasoning": "%s"}'
OVERLAP = {
    MA: _NO_OVERLAP % "It describes the build-up over generations, which the selection aspect does not.",
    LO: _NO_OVERLAP % "A specific disease is an example, not the general mechanism.",
    OVERLAPPING: ('```json\n{"has_overlap": true, "overlaps_with": "Post-reproductive selection", '
                  '"overlap_type": "same_claims", "reasoning": "It repeats the claim that selection is weak after '
                  'reproduction."}\n```'),
    EM: _NO_OVERLAP % "Environmental mortality is a separate cause not covered so far.",
    AP: _NO_OVERLAP % "Opposite early and late effects of one allele are new.",
    DS: _NO_OVERLAP % "A resource trade-off is a different theory.",
    META: _NO_OVERLAP % "It is about how the case is used, not about the onset facts.",
}

_SUBSTANTIVE = '{"should_generate": true, "reason": "%s", "aspect_category": "substantive"}'
SUITABILITY = {
    PR: _SUBSTANTIVE % "States how selection strength depends on timing.",
    MA: _SUBSTANTIVE % "Names a mechanism with its cause.",
    LO: _SUBSTANTIVE % "A concrete example with ages.",
    EM: _SUBSTANTIVE % "Explains a cause and its effect.",
    AP: "Verdict:\n" + _SUBSTANTIVE % "A named theory with date and mechanism.",
    DS: _SUBSTANTIVE % "Describes a trade-off mechanism.",
    META: ('{"should_generate": false, "reason": "It only remarks that the case is often cited, without a fact of '
           'its own.", "aspect_category": "meta"}'),
}


def _coverage(score: float, found: list[str], missing: list[str], docs: list[str], fenced: bool = False) -> str:
    body = json.dumps({"coverage_score": score, "facts_found": found, "facts_missing": missing,
                       "supporting_doc_ids": docs, "missing_information": "; ".join(missing) or "nothing essential",
                       "name_grounded": True, "name_issues": "", "suggested_name": ""}, indent=2)
    return f"```json\n{body}\n```" if fenced else body


#: the coverage judge (profile authors) with Table 13's "Cov." figures; every name is grounded
COVERAGE = {
    PR: _coverage(0.85, ["selection acts before and during reproduction", "late effects are weakly selected"], [],
                  ["doc_0"]),
    MA: _coverage(0.9, ["late-acting harmful alleles accumulate"], [], ["doc_1"], fenced=True),
    LO: _coverage(0.8, ["Huntington's onset at 30 to 50", "carriers often have children first"],
                  ["that it is the textbook case"], ["doc_2"]),
    EM: "Coverage check done.\n" + _coverage(0.8, ["high extrinsic mortality favours early reproduction"], [],
                                               ["doc_1"]),
    AP: _coverage(0.85, ["alleles with early benefit and late cost", "Williams 1957"], [], ["doc_0"]),
    DS: _coverage(0.75, ["trade-offs of life history are discussed"],
                  ["resources split between reproduction and repair"], ["doc_0", "doc_1"]),
}

ORDER = ('{"ordered_indices": [0, 1, 2, 4, 5, 3], "reasoning": "Selection principle first, then its consequences '
         'and an example, then the other theories, ending with the environmental implication."}')


def _facts(*facts: tuple[str, bool, str | None, str]) -> str:
    rows = [{"fact": f, "is_supported": s, "supporting_doc_id": d, "reason": r} for f, s, d, r in facts]
    return json.dumps({"extracted_facts": rows, "supported_facts": [f for f, s, _, _ in facts if s],
                       "unsupported_facts": [f for f, s, _, _ in facts if not s],
                       "summary": {"total_extracted": len(rows), "supported_count": sum(s for _, s, _, _ in facts)}},
                      indent=2)


FACTS = {
    PR: _facts(("Natural selection acts mainly on traits that matter before and during reproduction.", True, "doc_0",
                "The document says selection filters genes acting before reproduction."),
               ("Mutations whose effects show only after reproduction are under weak selection.", True, "doc_0",
                "Late-acting genes are said to be barely seen by selection.")),
    MA: "```json\n" + _facts(("Harmful alleles that act late in life accumulate over generations.", True, "doc_1",
                              "Medawar's argument is stated almost word for word.")) + "\n```",
    LO: _facts(("Huntington's disease symptoms usually begin between the ages of 30 and 50.", True, "doc_2",
                "The age range is given explicitly."),
               ("Carriers of the Huntington's allele often have children before they fall ill.", True, "doc_2",
                "The document notes that many carriers have had children by then.")),
    AP: _facts(("Some alleles bring a benefit early in life and a cost late in life.", True, "doc_0",
                "Williams' proposal is described with the same early benefit and late cost.")),
    DS: "Checking the excerpt against the documents:\n" + _facts(
        ("Organisms divide limited resources between reproduction and bodily repair.", False, None,
         "No document discusses how resources are allocated."),
        ("Investing heavily in repair leads to a longer lifespan.", False, None, "Not mentioned in any document.")),
    EM: _facts(("High extrinsic mortality favours earlier reproduction.", True, "doc_1",
                "Populations with many predators or diseases are said to evolve earlier reproduction.")),
}


def _first_user(messages: list[dict[str, str]]) -> str:
    return next(m["content"] for m in messages if m["role"] == "user")


def reply_for(messages: list[dict[str, str]]) -> str | None:
    """The scripted reply to one prompt of the align / aspects / facts stages for the appendix C item; None when
    the prompt is not one of theirs (or not about this item's aspects)."""
    text = _first_user(messages)
    if "coverage_percentage" in text and "Reference answer:" in text:
        return ALIGNMENT
    if "new granular aspects" in text:
        existing = len(re.findall(r"^- \[", text, re.M))
        return {0: EXTRACTION[0], 3: EXTRACTION[1], 6: EXTRACTION[2]}.get(existing)
    if match := re.search(r"^Candidate aspect: (.+) \(", text, re.M):
        return OVERLAP.get(match.group(1))
    if "Categories:" in text and (match := re.search(r"^Aspect: (.+)\nType:", text, re.M)):
        return SUITABILITY.get(match.group(1))
    if "Put these aspects in a good order" in text:
        return ORDER
    if match := re.search(r"^Aspect name: (.+)\nAspect content:", text, re.M):
        return COVERAGE.get(match.group(1))
    if "atomic statements" in text and (match := re.search(r"^Aspect: (.+)\nExcerpt:", text, re.M)):
        return FACTS.get(match.group(1))
    return None


def replies() -> Callable[[list[dict[str, str]]], str]:
    """A FakeBackend responder answering every align / aspects / facts prompt of the appendix C item."""
    def respond(messages: list[dict[str, str]]) -> str:
        reply = reply_for(messages)
        if reply is None:
            raise AssertionError(f"no scripted reply for this prompt: {_first_user(messages)[:200]!r}")
        return reply
    return respond


def ordered_replies() -> list[Any]:
    """The replies in call order for one item at concurrency 1 (align, aspects, facts)."""
    aspects = [EXTRACTION[0], SUITABILITY[PR], COVERAGE[PR], OVERLAP[MA], SUITABILITY[MA], COVERAGE[MA],
               OVERLAP[LO], SUITABILITY[LO], COVERAGE[LO], EXTRACTION[1], OVERLAP[OVERLAPPING], OVERLAP[EM],
               SUITABILITY[EM], COVERAGE[EM], OVERLAP[AP], SUITABILITY[AP], COVERAGE[AP], OVERLAP[DS],
               SUITABILITY[DS], COVERAGE[DS], EXTRACTION[2], OVERLAP[META], SUITABILITY[META], ORDER]
    facts = [FACTS[name] for name in (PR, MA, LO, AP, DS, EM)]
    return [ALIGNMENT, *aspects, *facts]


# -- helpers for tests of single rules ------------------------------------------------------------------------

def judge_responder(extraction: list[str], order: list[str] | None = None,
                    suitability: Callable[[str], str] | None = None,
                    coverage: Callable[[str], str] | None = None) -> Callable[[list[dict[str, str]]], str]:
    """Replies for the aspects stage: extraction rounds in turn, no overlap, substantive, covered by the documents
    (``coverage``: the coverage reply for a prompt text), then ``order``."""
    rounds, orders = list(extraction), list(order or [])

    def respond(messages: list[dict[str, str]]) -> str:
        text = next(m["content"] for m in messages if m["role"] == "user")
        if "new granular aspects" in text:
            return rounds.pop(0) if rounds else '{"aspects": [], "extraction_notes": "nothing left"}'
        if "Candidate aspect:" in text:
            return '{"has_overlap": false, "overlaps_with": null, "overlap_type": "no_overlap", "reasoning": "new"}'
        if "Categories:" in text:
            if suitability is not None:
                return suitability(text)
            return '{"should_generate": true, "reason": "facts", "aspect_category": "substantive"}'
        if "good order" in text:
            return orders.pop(0)
        if "Aspect content:" in text:
            if coverage is not None:
                return coverage(text)
            return '{"coverage_score": 0.9, "name_grounded": true, "suggested_name": ""}'
        raise AssertionError(text[:200])
    return respond


def extraction(*aspects: tuple[str, str, str]) -> str:
    """An extraction reply proposing ``(name, type, excerpt)`` candidates."""
    return json.dumps({"aspects": [{"aspect_name": n, "aspect_type": t, "excerpt": e, "distinct_from_existing": ""}
                                   for n, t, e in aspects], "extraction_notes": ""})


#: the appendix C answer's sentences, and one well-formed candidate aspect per sentence
SENTENCES = [s.strip() + "." for s in ANSWER.split(".") if len(s.strip()) > 20]
GOOD = [(f"Aspect number {i}", "detail", s) for i, s in enumerate(SENTENCES)]
