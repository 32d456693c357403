"""D&V stage ``turns`` under profile ``convrag`` (our earlier readings; the default profile ``authors`` is tested
in tests/synthesis/recor/test_authors.py) with scripted backends: the appendix C five-turn trace (turn 4's scores
7.15 / 5.40 / 3.65 under a wrong final_score; its scripted replies mix bare JSON, JSON after prose and JSON in
```json fences, all read without a re-ask), malformed and rejected replies, the conversation-level checks, and one
run through the engine (resumed with no new calls)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from convrag.core.errors import ConvragError
from convrag.llm import LLM, DiskCache, RetryPolicy
from convrag.llm.backends.fake import FakeBackend
from convrag.llm.types import BackendError
from convrag.synthesis.engine.pipeline import Pipeline, StageContext, StageReport, write_json_atomic
from convrag.synthesis.engine.records import read_records, write_shard
from convrag.synthesis.recor import common as dv_common
from convrag.synthesis.recor.common import Drop, Tokens
from convrag.synthesis.recor.turn_agents import (
    Checker,
    QueryReply,
    document_score,
    meta_reference,
    opener,
    query_check,
    sentences,
)
from convrag.synthesis.recor.turn_checks import select_gold
from convrag.synthesis.recor.turns import Turns, document_diversity, key_facts, parse_sentences, value_kind
from tests.dv_fixture import NEGATIVES
from tests.dv_fixture_turns import (
    ANSWERS,
    ASPECTS,
    EXPECTED_GOLD,
    EXPECTED_SCORES,
    QUERIES,
    RATINGS,
    SUB_QUESTIONS,
    appendix_c_responder,
    facts_item,
    prompt_kind,
    standard_reply,
)

Calls = list[tuple[str, int]]


def make_llm(overrides: dict[tuple[str, int], list[Any]] | None = None) -> tuple[LLM, FakeBackend, Calls]:
    calls: Calls = []
    backend = FakeBackend(responder=appendix_c_responder(overrides, calls))
    return LLM(backend, cache=False, retry=RetryPolicy(max_retries=0)), backend, calls


def run_item(overrides: dict[tuple[str, int], list[Any]] | None = None, item: dict[str, Any] | None = None,
             **options: Any) -> tuple[dict[str, Any], Counter[str], FakeBackend, Calls]:
    llm, backend, calls = make_llm(overrides)
    outcome = Turns(**{"profile": "convrag", **options}).handle(item or facts_item(), llm, Tokens())
    assert outcome.record is not None
    return outcome.record, outcome.counts, backend, calls


def dropped(overrides: dict[tuple[str, int], list[Any]] | None = None, item: dict[str, Any] | None = None,
            **options: Any) -> Drop:
    llm, _, _ = make_llm(overrides)
    with pytest.raises(Drop) as caught:
        Turns(**{"profile": "convrag", **options}).handle(item or facts_item(), llm, Tokens())
    return caught.value


def scores_json(ratings: dict[str, tuple[int, int, int, int]]) -> str:
    return json.dumps({"document_scores": [
        {"doc_id": label, "support_score": s, "completeness_score": c, "clarity_score": cl, "misleading_score": m,
         "final_score": 9.9, "reasoning": "Rated on the content."} for label, (s, c, cl, m) in ratings.items()]})


def user_of(backend: FakeBackend, kind: str) -> list[str]:
    return [next(m["content"] for m in c["messages"] if m["role"] == "user") for c in backend.calls
            if prompt_kind(c["messages"]) == kind]


def retry_messages(backend: FakeBackend, kind: str) -> list[str]:
    return [c["messages"][-1]["content"] for c in backend.calls
            if prompt_kind(c["messages"]) == kind and len(c["messages"]) > 2]


# -- the appendix C trace ------------------------------------------------------------------------------------

def test_appendix_c_item_becomes_five_grounded_turns() -> None:
    llm, backend, calls = make_llm()
    tokens = Tokens()
    outcome = Turns(profile="convrag").handle(facts_item(), llm, tokens)
    turns = outcome.record["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3, 4, 5]
    assert [t["aspect"] for t in turns] == [a["name"] for a in ASPECTS]
    assert [t["sub_question"] for t in turns] == SUB_QUESTIONS
    assert [t["query"] for t in turns] == QUERIES and [t["answer"] for t in turns] == ANSWERS
    assert [t["gold_doc_ids"] for t in turns] == EXPECTED_GOLD
    assert [[r["score"] for r in t["doc_scores"]] for t in turns] == EXPECTED_SCORES
    # turn 4 is the paper's Table 15; the reply's own final_score (7.6 / 5.9 / 4.1) is ignored
    t4 = turns[3]
    assert [(r["doc_id"], r["support"], r["completeness"], r["clarity"], r["misleading"], r["score"], r["selected"])
            for r in t4["doc_scores"]] == [("Aging_theory_12.txt", 8, 7, 7, 0, 7.15, True),
                                           ("Evolution_38.txt", 6, 5, 6, 0, 5.40, True),
                                           ("Genetics_91.txt", 4, 3, 5, 0, 3.65, False)]
    assert t4["subquestion_reasoning_metadata"] == {
        "target_information": "Alleles with opposite fitness effects early and late in life",
        "relevance_signals": ["antagonistic pleiotropy", "early benefit with late cost", "Williams 1957 ageing theory"],
        "irrelevance_signals": ["neutral mutations", "alleles with a single effect"]}
    assert t4["subquestion_reasoning"].startswith("Retrieve documents on alleles")
    assert outcome.counts == Counter() and tokens.prompt > 0 and tokens.completion > 0
    assert outcome.record["aspects"] == facts_item()["aspects"]  # the upstream keys are kept
    # 6 calls per turn, no diversity check on turn 1, no re-asks
    assert Counter(kind for kind, _ in calls) == {"subquestion": 5, "scores": 5, "query_first": 1,
                                                  "query_followup": 4, "answer": 5, "diversity": 4, "reasoning": 5}


def test_the_prompts_show_what_each_step_needs_and_nothing_more() -> None:
    _, _, backend, _ = run_item()
    negative = NEGATIVES[0]["text"][:40]
    scoring = user_of(backend, "scores")
    assert all("[doc_0]" in p and "[doc_2]" in p and "[doc_3]" not in p and negative not in p for p in scoring)
    assert "Huntington's disease symptoms usually begin" in scoring[2]  # the aspect's key facts
    answers = user_of(backend, "answer")
    assert "Huntington's disease is caused" in answers[2] and "Medawar" not in answers[2]  # gold text only
    assert "[doc_" not in answers[2] and "(this is the first message)" in answers[0]
    followups = user_of(backend, "query_followup")
    assert "Opening words already used by earlier user messages: in evolution, so is, are there" in followups[2]
    assert "fewer than 20 words" in user_of(backend, "query_first")[0]
    # history: the last three exchanges only
    assert QUERIES[0] not in followups[3] and all(q in followups[3] for q in QUERIES[1:4])
    subq = user_of(backend, "subquestion")
    assert "(none yet)" in subq[0] and all(q in subq[4] for q in SUB_QUESTIONS[:4])
    reasoning = user_of(backend, "reasoning")[2]
    assert reasoning.index("[doc_2] Huntington") < reasoning.index("Other candidate documents")


def test_document_score_is_the_papers_formula_exactly() -> None:
    assert document_score(8, 7, 7, 0) == 7.15 and document_score(6, 5, 6, 0) == 5.40
    assert document_score(4, 3, 5, 0) == 3.65 and document_score(10, 10, 10, 0) == 9.5
    assert document_score(0, 0, 0, 10) == -0.5
    rows = [{"doc_id": "a", "score": 5.0}, {"doc_id": "b", "score": 6.2}, {"doc_id": "c", "score": 5.0},
            {"doc_id": "d", "score": 4.99}]
    # ties keep document order; the threshold is inclusive
    assert select_gold(rows, "convrag", 5.0)[0] == ["b", "a", "c"]


def test_rule_helpers() -> None:
    assert opener("So, is that why?") == "so is" and opener("  What ABOUT genes") == "what about"
    assert sentences("That is it. Williams wrote in 1957! Why? yes") == ["That is it.", "Williams wrote in 1957!",
                                                                          "Why?", "yes"]
    assert meta_reference("As the Document says, it grows.") == "Document"
    assert meta_reference("According to this, yes.") == "According to"
    assert meta_reference("Sourced from the sea.") is None and meta_reference("A documentary.") is None
    assert key_facts({"facts": [{"fact": " A  fact. ", "supported": True}, {"fact": "B.", "supported": False}]}) \
        == ["A fact."]
    check = query_check(20, ["so is"], Checker())
    assert check(QueryReply(conversational_query=" ".join(["word"] * 19))) is None
    assert "has 20 words" in check(QueryReply(conversational_query=" ".join(["word"] * 20)))
    assert "opening" in check(QueryReply(conversational_query="So,  is it?")) and check(QueryReply(
        conversational_query="  ")) is not None
    assert value_kind(" Repetitive") == "repetitive" and value_kind("boring") == "other type"
    assert value_kind("") == "no type"
    assert parse_sentences("2-4") == (2, 4) and parse_sentences([1, 3]) == (1, 3)
    assert document_diversity([{"gold_doc_ids": ["a"]}, {"gold_doc_ids": ["b"]}])
    assert not document_diversity([{"gold_doc_ids": ["a", "b"]}, {"gold_doc_ids": ["a", "b"]}])
    assert document_diversity([{"gold_doc_ids": ["a", "b"]}]) and not document_diversity([{"gold_doc_ids": ["a"]}])
    assert document_diversity([{"gold_doc_ids": ["a"]}], 1)
    assert not document_diversity([{"gold_doc_ids": ["a"]}, {"gold_doc_ids": ["a", "b"]}], 3)


def test_fixture_responder_passes_other_prompts_on() -> None:
    other = [{"role": "user", "content": 'Align.\n\nIt must conform to this JSON schema:\n{"properties": '
                                         '{"coverage": {"type": "number"}}}'}]
    assert prompt_kind(other) is None
    assert appendix_c_responder(fallback=lambda m: '{"coverage": 0.9}')(other) == '{"coverage": 0.9}'
    with pytest.raises(AssertionError, match="not a turns prompt"):
        appendix_c_responder()(other)


# -- malformed and rejected replies --------------------------------------------------------------------------

def test_out_of_range_rating_is_re_asked() -> None:
    bad = scores_json({"doc_0": (11, 7, 7, 0), "doc_1": (6, 5, 6, 0), "doc_2": (4, 3, 5, 0)})
    record, counts, backend, calls = run_item({("scores", 4): [bad]})
    assert calls.count(("scores", 4)) == 2 and counts == Counter()
    assert [r["score"] for r in record["turns"][3]["doc_scores"]] == [7.15, 5.4, 3.65]
    assert "support_score" in retry_messages(backend, "scores")[0]


def test_missing_document_and_unknown_label_are_counted() -> None:
    partial = ("I rated the two documents that matter:\n"
               + scores_json({"doc_1": (9, 9, 8, 0), "doc_7": (9, 9, 9, 0), "doc_0": (5, 4, 7, 0)}))
    record, counts, _, calls = run_item({("scores", 2): [partial]})
    t2 = record["turns"][1]
    assert [r["doc_id"] for r in t2["doc_scores"]] == ["Aging_theory_12.txt", "Evolution_38.txt"]
    assert t2["gold_doc_ids"] == ["Evolution_38.txt"] and calls.count(("scores", 2)) == 1
    assert counts == {"turns: document not scored": 1, "turns: unknown document label ignored": 1}


def test_candidates_are_cut_to_max_candidates() -> None:
    # two candidates: doc_2 (Genetics_91.txt) is never shown, so the Huntington turn finds no document
    two = {("scores", a): [scores_json({"doc_0": RATINGS[a - 1][0][:4], "doc_1": RATINGS[a - 1][1][:4]})]
           for a in range(1, 5)}
    two[("scores", 1)].insert(0, standard_reply("scores", 1))  # three entries for two documents: re-asked
    two[("scores", 5)] = [scores_json({"doc_1": RATINGS[4][1][:4], "doc_2": RATINGS[4][2][:4]})]
    record, counts, backend, calls = run_item(two, max_candidates=2)
    assert [t["aspect"] for t in record["turns"]] == ["Post-reproductive selection", "Mutation accumulation",
                                                     "Antagonistic pleiotropy", "Extrinsic mortality"]
    assert [t["gold_doc_ids"] for t in record["turns"]] == [EXPECTED_GOLD[i] for i in (0, 1, 3, 4)]
    assert counts == {"turns: turn rejected: no document above threshold": 1,
                      "turns: unknown document label ignored": 1, "turns: document not scored": 1}
    assert calls.count(("scores", 1)) == 2 and "at most 2" in retry_messages(backend, "scores")[0]
    assert all("[doc_2]" not in p for p in user_of(backend, "scores"))


def test_long_query_and_repeated_opener_are_re_asked() -> None:
    long = json.dumps({"conversational_query": "So I keep wondering, in plain terms, why do the harmful genes keep "
                       "on hanging around in families for so long?"})
    repeat = json.dumps({"conversational_query": "So is there any real disease that sticks around like that?",
                         "transition_type": "confirming"})
    record, counts, backend, calls = run_item({("query_followup", 2): [long], ("query_followup", 3): [repeat]})
    assert [t["query"] for t in record["turns"]] == QUERIES and counts == Counter()
    assert calls.count(("query_followup", 2)) == 2 and calls.count(("query_followup", 3)) == 2
    retries = retry_messages(backend, "query_followup")
    assert "has 21 words" in retries[0] and "'so is'" in retries[1]


def test_meta_reference_and_short_answer_are_re_asked() -> None:
    meta = json.dumps({"answer": "The document says that Huntington's starts between 30 and 50. Carriers often "
                                 "have children first."})
    short = '{"answer": "Some alleles help early and harm late."}'
    record, counts, backend, calls = run_item({("answer", 3): [meta], ("answer", 4): [short]})
    assert [t["answer"] for t in record["turns"]] == ANSWERS and counts == Counter()
    retries = retry_messages(backend, "answer")
    assert "'document'" in retries[0] and "1 sentence(s)" in retries[1]


def test_with_enforce_form_off_failing_replies_are_kept_and_counted() -> None:
    meta = json.dumps({"answer": "The document says that Huntington's starts between 30 and 50. Carriers often "
                                 "have children first."})
    long = json.dumps({"conversational_query": "So I keep wondering, in plain terms, why do the harmful genes keep "
                       "on hanging around in families for so long?"})
    record, counts, _, calls = run_item({("answer", 3): [meta], ("query_followup", 2): [long]}, enforce_form=False)
    assert record["turns"][2]["answer"].startswith("The document says") and record["turns"][1]["query"].startswith(
        "So I keep wondering")
    assert calls.count(("answer", 3)) == 1 and calls.count(("query_followup", 2)) == 1
    assert counts == Counter({"turns: kept with answer with a meta reference (enforce_form off)": 1,
                              "turns: kept with query too long (enforce_form off)": 1})


def test_repetitive_turn_is_rejected_and_numbering_stays_consecutive() -> None:
    verdict = ('{"adds_value": false, "value_type": "repetitive", "reason": "It restates the late-acting '
               'mutation point."}')
    record, counts, _, calls = run_item({("diversity", 3): [verdict]})
    assert [t["turn"] for t in record["turns"]] == [1, 2, 3, 4]
    assert [t["aspect"] for t in record["turns"]] == [ASPECTS[i]["name"] for i in (0, 1, 3, 4)]
    assert counts == {"turns: turn rejected: adds no value (repetitive)": 1}
    assert ("reasoning", 3) not in calls  # nothing more is spent on a rejected turn


@pytest.mark.parametrize(("overrides", "reason"), [
    ({("subquestion", 2): ["I think the key question here is about mutation build-up."] * 3},
     "sub-question unparsable after re-asks"),
    ({("subquestion", 2): [json.dumps({"sub_question": SUB_QUESTIONS[0]})] * 3}, "sub-question repeated after re-asks"),
    ({("query_followup", 2): [json.dumps({"conversational_query": QUERIES[0]})] * 3},
     "query with a repeated opener after re-asks"),
    ({("answer", 2): ['{"answer": "Yes."}'] * 3}, "answer with a wrong sentence count after re-asks"),
    ({("reasoning", 2): [json.dumps({"reasoning": "Find Medawar. Skip telomeres.", "target_information": "x",
                                     "relevance_signals": ["a", "b"], "irrelevance_signals": ["c"]})] * 3},
     "retrieval reasoning not one sentence after re-asks"),
    ({("scores", 2): ['{"document_scores": [{"doc_id": "doc_1", "support_score": "high"}]}'] * 3},
     "document scores unparsable after re-asks"),
])
def test_a_reply_that_never_passes_rejects_the_turn(overrides: dict[tuple[str, int], list[Any]], reason: str) -> None:
    record, counts, _, _ = run_item(overrides)
    assert [t["aspect"] for t in record["turns"]] == [ASPECTS[i]["name"] for i in (0, 2, 3, 4)]
    assert counts == {f"turns: turn rejected: {reason}": 1}


def test_a_failed_call_drops_the_item_with_its_reason() -> None:
    llm, _, _ = make_llm({("answer", 2): [BackendError("HTTP 400: context length exceeded", retryable=False)]})
    stage = Turns(profile="convrag")
    stage._llm = llm
    rows, drops = stage.process([facts_item("a")], None)  # type: ignore[arg-type]
    assert rows == [] and drops == {"turns: llm: call failed after retries": 1}


# -- conversation level --------------------------------------------------------------------------------------

def test_fewer_than_min_turns_drops_the_item() -> None:
    item = {**facts_item(), "aspects": facts_item()["aspects"][:2]}
    drop = dropped(item=item)
    assert drop.reason == "turns: fewer than 3 turns" and drop.counts == Counter()
    never = {("answer", a): ['{"answer": "Yes."}'] * 3 for a in (2, 3, 4)}
    drop = dropped(never)
    assert drop.reason == "turns: fewer than 3 turns"
    assert drop.counts == {"turns: turn rejected: answer with a wrong sentence count after re-asks": 3}


def test_no_document_diversity_drops_the_item() -> None:
    same = scores_json({"doc_0": (1, 1, 5, 0), "doc_1": (9, 8, 8, 0), "doc_2": (1, 1, 5, 0)})
    drop = dropped({("scores", a): [same] for a in range(1, 6)})
    assert drop.reason == "turns: no document diversity across turns"
    # an item with one document cannot vary its documents: not checked
    item = {**facts_item(), "documents": facts_item()["documents"][1:2]}
    one = scores_json({"doc_0": (9, 8, 8, 0)})
    record, _, _, _ = run_item({("scores", a): [one] for a in range(1, 6)}, item=item)
    assert [t["gold_doc_ids"] for t in record["turns"]] == [["Evolution_38.txt"]] * 5
    # min_distinct_documents=1 turns the check off; 3 asks for all three documents
    record, _, _, _ = run_item({("scores", a): [same] for a in range(1, 6)}, min_distinct_documents=1)
    assert len(record["turns"]) == 5
    record, _, _, _ = run_item(min_distinct_documents=3)
    assert len(record["turns"]) == 5
    repetitive = '{"adds_value": false, "value_type": "repetitive", "reason": "Nothing new."}'
    drop = dropped({("diversity", 3): [repetitive]}, min_distinct_documents=3)  # Genetics_91.txt never gold
    assert drop.reason == "turns: no document diversity across turns"
    assert drop.counts == {"turns: turn rejected: adds no value (repetitive)": 1}


def test_max_turns_is_respected() -> None:
    record, _, _, calls = run_item(max_turns=3)
    assert [t["turn"] for t in record["turns"]] == [1, 2, 3]
    assert {aspect for _, aspect in calls} == {1, 2, 3}


def test_options_are_validated_and_recorded() -> None:
    for bad in ({"threshold": 11}, {"min_turns": 5, "max_turns": 4}, {"answer_sentences": "4-2"},
                {"max_candidates": 0}, {"query_words": True}, {"answer_sentences": "two"},
                {"min_distinct_documents": 0}, {"temperature": 3}, {"profile": "paper"},
                {"min_answerability": 1.5}, {"subquestion_attempts": 0}, {"diversity_retries": -1}):
        with pytest.raises(ConvragError):
            Turns(**bad)
    params = Turns(answer_sentences=(2, 4), llm="fake", profile="convrag").params()
    assert params["answer_sentences"] == "2-4" and params["threshold"] == 5.0 and params["llm"] == "fake"
    assert params["profile"] == "convrag" and "min_answerability" not in params
    assert json.loads(json.dumps(params)) == params


# -- through the engine ----------------------------------------------------------------------------------------

def test_engine_run_resumes_with_no_new_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "run"
    short = {**facts_item("aging-2"), "aspects": facts_item()["aspects"][:2]}
    items = [facts_item("aging-0"), facts_item("aging-1"), short]
    (out / "facts").mkdir(parents=True)
    write_shard(out / "facts" / "part-00000.parquet", items, {"records_in": 3, "first": "aging-0",
                                                              "last": "aging-2", "dropped": {}})
    write_json_atomic(out / "facts" / "report.json", StageReport("facts", 3, 3).to_dict())
    calls: Calls = []

    def role_llm(spec: str | None, ctx: StageContext, concurrency: int) -> LLM:
        repetitive = '{"adds_value": false, "value_type": "repetitive", "reason": "Said before."}'
        backend = FakeBackend(responder=appendix_c_responder({("diversity", 3): [repetitive]}, calls))
        return LLM(backend, cache=DiskCache(out / "llm-cache"), report=ctx.llm_report,
                   retry=RetryPolicy(max_retries=0), max_concurrency=concurrency)

    monkeypatch.setattr(dv_common, "role_llm", role_llm)

    def run() -> StageReport:
        return Pipeline("recor-dv", [Turns(concurrency=1, profile="convrag")]).run(out, progress=False)[0]

    report = run()
    assert report.records_in == 3 and report.records_out == 2
    assert report.dropped == {"turns: fewer than 3 turns": 1}
    # the rejected turn of each kept item is counted (the verdict is cached, so the second item gets it too)
    assert report.figures == {"turns: turn rejected: adds no value (repetitive)": 2}
    # the items are alike: the later ones' prompts are the first one's, answered from the cache
    assert report.llm["calls"] == len(calls) == 28 and report.llm["cache_hits"] == 28 + 11
    records = list(read_records(out / "turns"))
    assert [r["id"] for r in records] == ["aging-0", "aging-1"] and [len(r["turns"]) for r in records] == [4, 4]
    assert records[0]["turns"][2]["doc_scores"][1]["score"] == 5.4 and records[1]["tokens"]["turns"][0] > 0
    assert run().resumed and len(calls) == 28
    # a run killed before the stage finished: its shard is redone from the cache, with no new call
    (out / "turns" / "report.json").unlink()
    (out / "turns" / "part-00000.parquet").unlink()
    again = run()
    assert not again.resumed and again.records_out == 2 and len(calls) == 28
    assert again.llm["calls"] == 0 and again.llm["cache_hits"] == 28 * 2 + 11
    assert again.dropped == report.dropped and again.figures == report.figures
    assert list(read_records(out / "turns")) == records
