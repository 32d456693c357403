"""D&V stages align, aspects and facts with scripted backends: the RECOR appendix C example traced (Tables 13 and
14), malformed and out-of-range replies, re-asks, unparsable replies and failed calls (each counted), option
checks, and the three stages run through the engine with resume and the LLM cache."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from convrag.core.errors import ConvragError
from convrag.llm import LLM, DiskCache, RetryPolicy, load_prompt
from convrag.llm.backends.fake import FakeBackend
from convrag.llm.types import BackendError, LLMError
from convrag.synthesis.engine.pipeline import Pipeline, StageContext, StageReport, write_json_atomic
from convrag.synthesis.engine.records import read_records, write_shard
from convrag.synthesis.recor import common as dv_common
from convrag.synthesis.recor.align import Align
from convrag.synthesis.recor.aspects import ASPECT_TYPES, Aspects, excerpt_from
from convrag.synthesis.recor.common import Drop, Tokens
from convrag.synthesis.recor.facts import Facts
from tests import dv_fixture_decompose as fx
from tests.dv_fixture import ANSWER, appendix_c_item
from tests.dv_fixture_decompose import GOOD, SENTENCES, extraction, judge_responder


def make_llm(*script: Any, responder: Any = None) -> tuple[LLM, FakeBackend]:
    backend = FakeBackend(script=list(script), responder=responder)
    return LLM(backend, cache=False, retry=RetryPolicy(max_retries=0)), backend


def first_user(call: dict[str, Any]) -> str:
    return next(m["content"] for m in call["messages"] if m["role"] == "user")


def aspect_item(names: tuple[str, ...] = (fx.PR, fx.MA, fx.LO, fx.AP, fx.DS, fx.EM)) -> dict[str, Any]:
    """The appendix C item as the aspects stage leaves it (conversation order)."""
    record = fx_trace()[1]
    by_name = {a["name"]: a for a in record["aspects"]}
    return {**record, "aspects": [by_name[n] for n in names]}


def fx_trace() -> tuple[dict[str, Any], dict[str, Any]]:
    """The align and aspects records of the appendix C item under the fixture's replies."""
    llm, _ = make_llm(responder=fx.replies())
    aligned = Align().handle(appendix_c_item(), llm, Tokens()).record
    assert aligned is not None
    aspected = Aspects().handle(aligned, llm, Tokens()).record
    assert aspected is not None
    return aligned, aspected


# -- the appendix C example ------------------------------------------------------------------------------------

def test_appendix_c_traced_through_align_aspects_and_facts() -> None:
    llm, backend = make_llm(responder=fx.replies())
    item = appendix_c_item()
    align = Align().handle(item, llm, Tokens())
    assert align.record is not None and len(backend.calls) == 1
    alignment = align.record["alignment"]
    assert alignment["coverage"] == 0.8 and alignment["sufficient"] is True
    assert len(alignment["key_claims"]) == 5 and len(alignment["unsupported_claims"]) == 1

    aspects = Aspects().handle(align.record, llm, Tokens())
    assert len(backend.calls) == 1 + 24  # 18 as before, and a coverage check per suitable candidate (profile authors)
    record = aspects.record
    assert record is not None
    assert [a["name"] for a in record["aspects"]] == [fx.PR, fx.MA, fx.LO, fx.AP, fx.DS, fx.EM]  # Table 13's order
    assert [a["type"] for a in record["aspects"]] == ["mechanism", "mechanism", "example", "mechanism", "mechanism",
                                                      "implication"]
    assert all(a["excerpt"] and excerpt_from(a["excerpt"], ANSWER) for a in record["aspects"])
    fates = {(e["name"], e["round"]): e["fate"] for e in record["aspect_log"]}
    assert fates[(fx.OVERLAPPING, 2)] == "rejected: overlap" and fates[(fx.META, 3)] == "rejected: meta"
    assert sorted(r for (_, r), f in fates.items() if f == "accepted") == [1, 1, 1, 2, 2, 2]  # six over two rounds
    assert dict(aspects.counts) == {"aspects: aspect accepted": 6, "aspects: aspect rejected: overlap": 1,
                                    "aspects: aspect rejected: meta": 1}
    assert aspects.tokens.prompt > 0 and aspects.tokens.completion > 0
    assert [a["document_coverage"] for a in record["aspects"]] == [0.85, 0.9, 0.8, 0.85, 0.75, 0.8]  # Table 13

    facts = Facts().handle(record, llm, Tokens())
    assert len(backend.calls) == 1 + 24 + 6
    final = facts.record
    assert final is not None
    assert [a["name"] for a in final["aspects"]] == fx.FINAL_ASPECTS
    assert {a["name"]: len(a["facts"]) for a in final["aspects"]} == fx.VERIFIED  # Table 14: 2/1/2/1/1
    assert all(f["supported"] for a in final["aspects"] for f in a["facts"])
    docs = {a["name"]: {f["doc_id"] for f in a["facts"]} for a in final["aspects"]}
    assert docs == {fx.PR: {"Aging_theory_12.txt"}, fx.MA: {"Evolution_38.txt"}, fx.LO: {"Genetics_91.txt"},
                    fx.AP: {"Aging_theory_12.txt"}, fx.EM: {"Evolution_38.txt"}}
    soma = next(entry for entry in final["fact_log"] if entry["name"] == fx.DS)
    assert soma["kept"] is False and soma["verified"] == 0 and len(soma["extracted"]) == 2
    assert {f["fate"] for f in soma["extracted"]} == {"not supported"}
    assert dict(facts.counts) == {"facts: facts extracted": 9, "facts: facts verified": 7,
                                  "facts: fact rejected: not supported": 2,
                                  "facts: aspect rejected: no verified fact": 1}


def test_the_ordered_script_gives_the_same_trace() -> None:
    llm, backend = make_llm(*fx.ordered_replies())
    item = appendix_c_item()
    for stage in (Align(), Aspects(), Facts()):
        item = stage.handle(item, llm, Tokens()).record
    assert not backend.script and len(backend.calls) == 31
    assert [a["name"] for a in item["aspects"]] == fx.FINAL_ASPECTS


def test_prompts_carry_the_inputs() -> None:
    llm, backend = make_llm(responder=fx.replies())
    item = appendix_c_item()
    for stage in (Align(max_documents=2, doc_chars=120), Aspects(conversation_strategy="From basics to risks."),
                  Facts()):
        item = stage.handle(item, llm, Tokens()).record
    prompts = [first_user(c) for c in backend.calls]
    assert "[doc_0]" in prompts[0] and "[doc_1]" in prompts[0] and "[doc_2]" not in prompts[0]  # max_documents
    assert "Telomere" not in prompts[0] and "..." in prompts[0]  # negatives never shown; documents cut
    extract = [p for p in prompts if "new granular aspects" in p]
    assert len(extract) == 3 and "No aspects have been found yet" in extract[0]
    assert "Find 3 new" in extract[0] and f"] {fx.PR}:" in extract[1] and f"] {fx.EM}:" in extract[2]
    assert all(t in extract[0] for t in ASPECT_TYPES) and item["query"] in extract[0] and ANSWER in extract[0]
    overlap = next(p for p in prompts if p.startswith(f"Candidate aspect: {fx.OVERLAPPING}"))
    assert f"- {fx.PR} (mechanism)" in overlap and fx.EM not in overlap  # only the aspects accepted so far
    order = next(p for p in prompts if "good order" in p)
    assert "From basics to risks." in order and f"3. [implication] {fx.EM}" in order
    facts = [p for p in prompts if "atomic statements" in p]
    assert len(facts) == 6 and all("[doc_2]" in p and "between 1 and 5 facts" in p for p in facts)


def test_shipped_prompts_render_every_field() -> None:
    docs = [{"label": "doc_0", "text": "Some text."}]
    rendered = load_prompt("dv_fact_verify").render(name="N", excerpt="E", documents=docs, max_facts=2)
    assert "between 1 and 2 facts" in rendered[-1]["content"]
    rendered = load_prompt("dv_aspect_extract").render(query="q", reasoning="", answer="a", num_aspects=2,
                                                      existing=[])
    assert "Why the answer fits" not in rendered[-1]["content"]  # an item without reasoning


# -- align -----------------------------------------------------------------------------------------------------

ALIGN_OK = ('{"key_claims": ["a", "b"], "supported_claims": ["a", "b"], "unsupported_claims": [], '
            '"coverage_percentage": %s, "is_sufficient": %s}')


def test_align_reasks_an_out_of_range_coverage_and_reads_a_fenced_reply() -> None:
    llm, backend = make_llm("Sure!\n" + ALIGN_OK % ("1.7", "true"), "```json\n" + ALIGN_OK % ("0.85", "true") + "\n```")
    out = Align().handle(appendix_c_item(), llm, Tokens())
    assert out.record is not None and out.record["alignment"]["coverage"] == 0.85
    assert len(backend.calls) == 2
    assert "coverage_percentage" in backend.calls[1]["messages"][-1]["content"]  # the error was fed back


@pytest.mark.parametrize(("replies", "options", "reason"), [
    ([ALIGN_OK % ("0.9", "false")], {}, "align: judged insufficient"),
    ([ALIGN_OK % ("0.4", "true")], {}, "align: coverage below min_coverage"),
    ([ALIGN_OK % ("0.4", "true")], {"min_coverage": 0.3}, None),
    (['{"key_claims": [], "coverage_percentage": 0.9, "is_sufficient": true}'] * 3, {},
     "align: alignment: reply unparsable after re-asks"),
    (["The documents look fine to me.", "Coverage is high.", '{"coverage_percentage": "high"'], {},
     "align: alignment: reply unparsable after re-asks"),
])
def test_align_drops_by_counted_reason(replies: list[str], options: dict[str, Any], reason: str | None) -> None:
    llm, backend = make_llm(*replies)
    if reason is None:
        assert Align(**options).handle(appendix_c_item(), llm, Tokens()).record is not None
        return
    with pytest.raises(Drop) as drop:
        Align(**options).handle(appendix_c_item(), llm, Tokens())
    assert drop.value.reason == reason and len(backend.calls) == len(replies)


def test_a_failed_call_drops_the_item_and_is_counted(tmp_path: Path) -> None:
    llm, _ = make_llm(ALIGN_OK % ("0.9", "true"), BackendError("scripted bad request", kind="bad_request"))
    stage = Align(concurrency=1)
    stage._llm = llm
    ctx = StageContext(out=tmp_path, folder=tmp_path / "align", seed=0, progress=False)
    rows, drops = stage.process([appendix_c_item("a-0"), appendix_c_item("a-1")], ctx)
    assert [r["id"] for r in rows] == ["a-0"] and rows[0]["tokens"]["align"][0] > 0
    assert dict(drops) == {"align: llm: call failed after retries": 1}


# -- aspects ---------------------------------------------------------------------------------------------------

def test_candidates_are_checked_before_any_judge_call() -> None:
    bad = extraction(("Unknown kind", "overview", SENTENCES[0]), ("Made up", "detail", "Telomeres protect the ends "
                     "of chromosomes from fraying."), ("", "detail", SENTENCES[1]), ("Empty excerpt", "step", " "),
                     *GOOD[:3], ("aspect NUMBER 0", "detail", SENTENCES[3]))
    llm, backend = make_llm(responder=judge_responder([bad], order=['{"ordered_indices": [2, 0, 1]}']))
    out = Aspects().handle(appendix_c_item(), llm, Tokens())
    assert out.record is not None
    assert [a["name"] for a in out.record["aspects"]] == ["Aspect number 2", "Aspect number 0", "Aspect number 1"]
    assert dict(out.counts) == {"aspects: aspect rejected: unknown type": 1,
                                "aspects: aspect rejected: excerpt not from the answer": 1,
                                "aspects: aspect rejected: empty name or excerpt": 2,
                                "aspects: aspect rejected: duplicate name": 1, "aspects: aspect accepted": 3}
    # 2 extraction rounds (the second finds nothing), 1 suitability + 2 x (overlap, suitability), 3 coverage checks,
    # 1 ordering
    assert len(backend.calls) == 2 + 5 + 3 + 1
    assert [e["fate"] for e in out.record["aspect_log"]][:4] == [
        "rejected: unknown type", "rejected: excerpt not from the answer", "rejected: empty name or excerpt",
        "rejected: empty name or excerpt"]


def test_excerpt_rule() -> None:
    assert excerpt_from("selection keeps them because the early benefit outweighs the late cost", ANSWER)
    assert excerpt_from("Selection keeps these because the early benefit outweighs the late cost", ANSWER)  # 9/10
    assert not excerpt_from("Selection keeps these because early benefits outweigh the late cost", ANSWER)  # 7/10
    assert not excerpt_from("Early benefits of such genes are worth more than costs later on", ANSWER)
    assert not excerpt_from("...", ANSWER)


def test_ordering_is_reasked_and_kept_in_extraction_order_when_never_usable() -> None:
    good = extraction(*GOOD[:3])
    llm, backend = make_llm(responder=judge_responder([good], order=[
        '{"ordered_indices": [0, 1, 1], "reasoning": "x"}', '{"ordered_indices": [2, 1, 0], "reasoning": "fixed"}']))
    out = Aspects().handle(appendix_c_item(), llm, Tokens())
    assert [a["name"] for a in out.record["aspects"]] == ["Aspect number 2", "Aspect number 1", "Aspect number 0"]
    assert "each number from 0 to 2 exactly once" in backend.calls[-1]["messages"][-1]["content"]
    never = ['{"ordered_indices": [1, 2, 3]}', "First aspect 0, then 1, then 2.", '{"ordered_indices": [0, 1]}']
    llm, _ = make_llm(responder=judge_responder([good], order=never))
    out = Aspects().handle(appendix_c_item(), llm, Tokens())
    assert [a["name"] for a in out.record["aspects"]] == ["Aspect number 0", "Aspect number 1", "Aspect number 2"]
    assert out.counts["aspects: ordering unusable, extraction order kept"] == 1


def test_unparsable_judges_reject_the_candidate_and_unparsable_extraction_ends_the_rounds() -> None:
    def suitability(text: str) -> str:
        if "Aspect number 1" in text:
            return "I think this one is fine."  # never JSON: 3 attempts, then the candidate is rejected
        if "Aspect number 2" in text:
            return '{"should_generate": true, "reason": "x", "aspect_category": "boilerplate"}'
        return '{"should_generate": true, "reason": "facts", "aspect_category": "substantive"}'
    rounds = [extraction(*GOOD[:3]), "Here are more aspects: [aspect 4: ...", "still thinking", "no JSON"]
    llm, backend = make_llm(responder=judge_responder(rounds, suitability=suitability))
    with pytest.raises(Drop) as drop:
        Aspects().handle(appendix_c_item(), llm, Tokens())
    assert drop.value.reason == "aspects: fewer than min_aspects aspects"
    assert dict(drop.value.counts) == {"aspects: aspect accepted": 1,
                                       "aspects: aspect rejected: suitability check unparsable": 2,
                                       "aspects: round rejected: reply unparsable after re-asks": 1}
    # round 1: aspect 0 judged once (and its coverage), 1 and 2 re-asked
    assert len(backend.calls) == 1 + 1 + 1 + 2 * (1 + 3) + 3
    llm, _ = make_llm(responder=judge_responder(rounds, suitability=suitability))
    out = Aspects(min_aspects=1).handle(appendix_c_item(), llm, Tokens())
    assert [a["name"] for a in out.record["aspects"]] == ["Aspect number 0"]


def test_max_aspects_caps_the_rounds() -> None:
    rounds = [extraction(*GOOD[:3]), extraction(*GOOD[3:6])]
    llm, backend = make_llm(responder=judge_responder(rounds, order=['{"ordered_indices": [0, 1, 2, 3]}']))
    out = Aspects(max_aspects=4, num_aspects=3).handle(appendix_c_item(), llm, Tokens())
    assert len(out.record["aspects"]) == 4
    assert out.counts["aspects: aspect rejected: max_aspects reached"] == 2
    extract = [first_user(c) for c in backend.calls if "new granular aspects" in first_user(c)]
    assert len(extract) == 2 and "Find 1 new" in extract[1]  # only the room left is asked for


def test_an_overlap_reply_that_stays_unparsable_rejects_the_candidate() -> None:
    others = judge_responder([extraction(*GOOD[:2])])

    def respond(messages: list[dict[str, str]]) -> str:
        text = next(m["content"] for m in messages if m["role"] == "user")
        if "Candidate aspect:" in text:
            return '{"has_overlap": "maybe"}'
        return others(messages)
    llm, _ = make_llm(responder=respond)
    out = Aspects(min_aspects=1).handle(appendix_c_item(), llm, Tokens())
    assert out.counts["aspects: aspect rejected: overlap check unparsable"] == 1
    assert len(out.record["aspects"]) == 1


# -- facts -----------------------------------------------------------------------------------------------------

def _fact(text: str, supported: bool, doc: Any) -> dict[str, Any]:
    return {"fact": text, "is_supported": supported, "supporting_doc_id": doc, "reason": "r"}


def test_fact_labels_are_mapped_and_unknown_documents_counted() -> None:
    replies = {
        fx.PR: json.dumps({"extracted_facts": [_fact("Selection acts mainly before reproduction", True, "doc_7"),
                                               _fact("Late-acting mutations face weak selection", True, 0)]}),
        fx.MA: json.dumps({"extracted_facts": [_fact("Late harmful alleles accumulate over generations", True,
                                                     "Evolution_38.txt"),
                                               _fact("Selection against late alleles is weak", True, "doc_1, doc_0")]}),
        fx.LO: json.dumps({"extracted_facts": [_fact(f"fact {i} about Huntington's onset", True, "[doc_2]")
                                               for i in range(7)]}),
        fx.AP: "The first fact: early benefits but late costs.",
    }
    fixed_lo = json.dumps({"extracted_facts": [_fact("Huntington's starts between 30 and 50", True, "doc 2")]})
    calls: list[str] = []

    def respond(messages: list[dict[str, str]]) -> str:
        text = next(m["content"] for m in messages if m["role"] == "user")
        name = text.split("\n", 1)[0].removeprefix("Aspect: ")
        calls.append(name)
        if name == fx.LO and calls.count(fx.LO) == 2:
            return fixed_lo  # the re-ask after 7 facts
        return replies[name]
    llm, _ = make_llm(responder=respond)
    out = Facts().handle(aspect_item((fx.PR, fx.MA, fx.LO, fx.AP)), llm, Tokens())
    assert out.record is not None
    facts = {a["name"]: [(f["fact"], f["doc_id"]) for a in [a] for f in a["facts"]] for a in out.record["aspects"]}
    assert facts == {fx.PR: [("Late-acting mutations face weak selection", "Aging_theory_12.txt")],
                     fx.MA: [("Late harmful alleles accumulate over generations", "Evolution_38.txt"),
                             ("Selection against late alleles is weak", "Evolution_38.txt")],
                     fx.LO: [("Huntington's starts between 30 and 50", "Genetics_91.txt")]}
    assert calls.count(fx.LO) == 2 and calls.count(fx.AP) == 3
    assert dict(out.counts) == {"facts: facts extracted": 5, "facts: facts verified": 4,
                                "facts: fact rejected: unknown document": 1,
                                "facts: aspect rejected: reply unparsable after re-asks": 1}
    log = {e["name"]: e for e in out.record["fact_log"]}
    assert log[fx.PR]["extracted"][0]["doc_label"] == "doc_7" and log[fx.AP] == {
        "name": fx.AP, "extracted": [], "verified": 0, "kept": False}


def test_facts_drop_an_item_left_with_too_few_aspects_and_propagate_a_failed_call() -> None:
    none = json.dumps({"extracted_facts": [_fact("Something the documents do not say at all", False, None)]})
    llm, _ = make_llm(responder=lambda m: none)
    with pytest.raises(Drop) as drop:
        Facts().handle(aspect_item(), llm, Tokens())
    assert drop.value.reason == "facts: fewer than min_aspects aspects with a verified fact"
    assert drop.value.counts["facts: aspect rejected: no verified fact"] == 6
    llm, _ = make_llm(BackendError("scripted bad request", kind="bad_request"))
    with pytest.raises(LLMError):
        Facts().handle(aspect_item(), llm, Tokens())


# -- options ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("cls", "options", "message"), [
    (Align, {"min_coverage": 1.5}, "min_coverage must be a number from 0 to 1"),
    (Align, {"min_coverage": "0.5"}, "min_coverage"),
    (Align, {"doc_chars": 10}, "doc_chars must be a whole number >= 50"),
    (Align, {"max_documents": 0}, "max_documents"),
    (Aspects, {"num_aspects": True}, "num_aspects"),
    (Aspects, {"max_rounds": 0}, "max_rounds"),
    (Aspects, {"min_aspects": 5, "max_aspects": 4}, "must not exceed max_aspects"),
    (Aspects, {"conversation_strategy": " "}, "conversation_strategy"),
    (Facts, {"max_facts": 0}, "max_facts"),
    (Facts, {"min_aspects": 2.5}, "min_aspects"),
    (Facts, {"concurrency": 0}, "concurrency"),
])
def test_options_are_checked(cls: type, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConvragError, match=message):
        cls(**options)


def test_params_hold_every_option() -> None:
    assert Align(min_coverage=1).params() == {"llm": "$CONVRAG_LLM or default", "shard_size": 32,
                                              "min_coverage": 1.0, "doc_chars": 2000, "max_documents": 10,
                                              "max_tokens": None}
    assert set(Aspects().params()) >= {"num_aspects", "max_rounds", "max_aspects", "min_aspects",
                                       "conversation_strategy"}
    assert set(Facts(llm="fake").params()) == {"llm", "shard_size", "max_facts", "doc_chars", "min_aspects",
                                               "max_tokens"}
    assert Facts(max_tokens=64).cap(700) == 64 and Facts().cap(700) == 700
    with pytest.raises(ConvragError, match="max_tokens must be a whole number >= 16"):
        Aspects(max_tokens=8)
    json.dumps([Align().params(), Aspects().params(), Facts().params()])


# -- through the engine ----------------------------------------------------------------------------------------

OTHER_ANSWER = "Telomeres shorten with every cell division, which limits how often most body cells can divide."
INSUFFICIENT = ('{"key_claims": ["Telomeres shorten with each division"], "supported_claims": [], '
                '"unsupported_claims": ["Telomeres shorten with each division"], "coverage_percentage": 0.0, '
                '"is_sufficient": false}')


def test_three_stages_through_the_engine_resume_without_new_calls(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "run"
    (out / "load").mkdir(parents=True)
    items = [appendix_c_item("aging-0"), {**appendix_c_item("telomere-0"), "answer": OTHER_ANSWER}]
    write_shard(out / "load" / "part-00000.parquet", items, {"records_in": 2, "first": "aging-0",
                                                             "last": "telomere-0", "dropped": {}})
    write_json_atomic(out / "load" / "report.json", StageReport("load", 2, 2).to_dict())
    calls: list[int] = []

    def respond(messages: list[dict[str, str]]) -> str:
        calls.append(1)
        return INSUFFICIENT if OTHER_ANSWER in messages[-1]["content"] else fx.replies()(messages)

    def role_llm(spec: str | None, ctx: StageContext, concurrency: int) -> LLM:
        return LLM(FakeBackend(responder=respond), cache=DiskCache(ctx.out / "llm-cache"), report=ctx.llm_report,
                   retry=RetryPolicy(max_retries=0), max_concurrency=concurrency)
    monkeypatch.setattr(dv_common, "role_llm", role_llm)

    def run() -> dict[str, StageReport]:
        stages = [Align(shard_size=1), Aspects(shard_size=1), Facts(shard_size=1)]
        return {r.stage: r for r in Pipeline("recor-dv", stages).run(out, progress=False)}

    reports = run()
    assert len(calls) == 2 + 24 + 6
    assert (reports["align"].records_in, reports["align"].records_out) == (2, 1)
    assert reports["align"].dropped == {"align: judged insufficient": 1}
    assert reports["aspects"].figures["aspects: aspect rejected: overlap"] == 1
    assert reports["aspects"].llm["calls"] == 24
    assert reports["facts"].figures["facts: facts verified"] == 7
    assert reports["facts"].figures["facts: aspect rejected: no verified fact"] == 1
    [record] = list(read_records(out / "facts"))
    assert [a["name"] for a in record["aspects"]] == fx.FINAL_ASPECTS
    assert [len(a["facts"]) for a in record["aspects"]] == [2, 1, 2, 1, 1]
    assert set(record["tokens"]) == {"align", "aspects", "facts"}
    saved = json.loads((out / "facts" / "report.json").read_text())
    assert saved["figures"]["facts: facts extracted"] == 9

    again = run()  # finished stages are not rerun
    assert len(calls) == 32 and all(r.resumed for r in again.values())

    for stage in ("aspects", "facts"):  # as if killed before writing anything: the LLM cache answers
        shutil.rmtree(out / stage)
    redone = run()
    assert len(calls) == 32 and redone["aspects"].llm["cache_hits"] == 24 and redone["aspects"].llm["calls"] == 0
    assert list(read_records(out / "facts")) == [record]


def test_the_facts_output_is_what_the_turns_fixture_starts_from() -> None:
    from tests.dv_fixture_turns import ASPECTS

    llm, _ = make_llm(responder=fx.replies())
    record = Facts().handle(aspect_item(), llm, Tokens()).record
    assert [{**a, "excerpt": ""} for a in record["aspects"]] == [{**a, "excerpt": ""} for a in ASPECTS]
