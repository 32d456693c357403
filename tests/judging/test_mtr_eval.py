"""MTR-Eval dimensions: reply parsing, each dimension's inputs, negatives, the seeded shuffle, both judge paths."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from convrag.builders.stratrag_rules import PAD_TEXT
from convrag.cli import main
from convrag.hub.export import export_benchmark
from convrag.judging.items import AuditDoc, load_items
from convrag.judging.mtr_eval import (
    DIMENSIONS,
    LABELS,
    Completeness,
    NegativeSampler,
    RatingReply,
    document_text,
    judge_item,
    make_dimension,
    negatives,
)
from convrag.judging.verdict import Verdict, free_text_rationale, judge_call, parse_choice, parse_rating
from convrag.llm import LLM, EndpointUnreachable, RetryPolicy
from convrag.llm.backends.fake import FakeBackend
from convrag.llm.types import BackendError
from tests.conftest import DATA  # noqa: E402
from tests.mtr_bench_fixture import write_fixture

HOTPOT = str(DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json")


@pytest.fixture(scope="module")
def mtr(tmp_path_factory):
    root = tmp_path_factory.mktemp("mtr")
    write_fixture(root / "src")
    export_benchmark("mtr-bench", root / "out", options={"source": str(root / "src")})
    return load_items(root / "out")


@pytest.fixture(scope="module")
def strat_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("strat") / "out"
    main(["build", "stratrag", "--source", HOTPOT, "--out", str(out)])
    return out


@pytest.fixture(scope="module")
def strat(strat_dir):
    return load_items(strat_dir)


@pytest.fixture(scope="module")
def strat_nopool(strat_dir):
    # StratRAG's profile searches pools by default, so pools=False still fills them: drop them here
    s = load_items(strat_dir, pools=False)
    s.items = [replace(it, pool=None) for it in s.items]
    return s


def llm(*script, responder=None, schema=False, **kw):
    return LLM(FakeBackend(script=script, responder=responder, supports_schema=schema), cache=False,
               retry=RetryPolicy(max_retries=0), **kw)


def user_text(messages):
    return "\n".join(m["content"] for m in messages if m["role"] == "user")


def late_turn(audit_set):
    return next(it for it in audit_set.items if it.turn >= 4 and it.answer)


# ---------------------------------------------------------------- parsing
@pytest.mark.parametrize("text, expected", [
    ("**Justification:** The passage gives the eruption year directly.\n\n**Rating:** 5", 5),
    ("The document names the river but not its length.\nRating: 3", 3),
    ("**Rating**: 2\n\nOn reflection the table does list the figure.\n**Rating:** 4", 4),  # last one wins
    # the last labelled rating is out of range: no verdict (the authors' rule would read the 3 of "the 3 parts")
    ("A score of 1 would be too harsh; the text covers 2 of the 3 parts.\nRating: 7", None),
    ("My rating 1 stands: nothing in the passage is on topic.", 1),  # a label without colon
    ("I would put this at 4 out of 5 since a detail is missing.", 4),  # the 5 is the scale, never the rating
    ("Score: 4/5", 4),
    ("Rating: 7", None),
    ("Rating: 10", None),
    ("The passage is about something else entirely, so it cannot be used.", None),
    ("Overall roughly 3.5 on a 10-point feel.", None),
])
def test_parse_rating(text, expected):
    assert parse_rating(text) == expected


def test_parse_rating_other_scale():
    assert parse_rating("Relevance is marginal.\n**Rating:** 0", low=0, high=3) == 0
    assert parse_rating("**Rating:** 5", low=0, high=3) is None


@pytest.mark.parametrize("text, expected", [
    ("Document [3] is the only one about lava tubes.\n**Document ID:** [3]", 3),
    ("Only the second passage mentions the dance.\nDocument ID: [2].", 2),
    ("[1] and [4] both fit, but [4] names the year.\n**Document ID:** **[4]**  \n", 4),
    ("**Document ID:** [3] because it mentions the caldera.", None),  # not at the end
    ("**Document ID:** [9]", None),  # out of range for 8 documents
    ("**Document ID:** [0]", None),
    ("I pick document 5.", None),
])
def test_parse_choice(text, expected):
    assert parse_choice(text, 8) == expected


def test_free_text_rationale_drops_labels_and_verdict_line():
    text = "**Justification:** The text states the height of the summit.\n\n**Rating:** 5"
    assert free_text_rationale(text) == "The text states the height of the summit."
    picked = "Document 2: about bread. Document 5 names the river.\n**Document ID:** [5]"
    assert free_text_rationale(picked) == "Document 2: about bread. Document 5 names the river."


def test_verdict_to_dict_is_json_ready():
    v = Verdict("q1", "fake:fake", "query_evidence", 4.0, None, "ok", "ok\nRating: 4", None, {"doc_id": "d1"})
    assert json.loads(json.dumps(v.to_dict()))["extra"] == {"doc_id": "d1"}


def test_document_text_cut_and_markers():
    doc = AuditDoc("d", "Basalt", "Lava [1] cools into basalt [23]. " + "columnar jointing " * 300)
    text = document_text(doc, 200)
    assert text.startswith("Basalt\nLava cools into basalt.") and "[1]" not in text and "[23]" not in text
    assert len(text) <= 202 and text.endswith(" …")
    assert text[:-2].split()[-1] in ("columnar", "jointing")  # never cut inside a word
    assert document_text(AuditDoc("e", "Etna", "Etna is a volcano."), 200) == "Etna is a volcano."


# ---------------------------------------------------------------- inputs
def test_dimension_names():
    assert set(DIMENSIONS) == set(LABELS) and LABELS["completeness"] == "Comp."
    with pytest.raises(ValueError):
        make_dimension("fluency")
    with pytest.raises(ValueError):
        make_dimension("completeness")


def test_current_turn_with_history(mtr):
    item = late_turn(mtr)
    first_question = item.history[0][1]
    sampler = NegativeSampler(mtr)
    for name in DIMENSIONS:
        (req, *_) = make_dimension(name, sampler=sampler).requests(item, mtr)
        text = user_text(req.messages)
        assert f"question (judge this one): {item.query}" in text or f"Latest question: {item.query}" in text
        assert f"User: {first_question}" in text  # the first turn appears as history only
        assert f"question (judge this one): {first_question}" not in text
        assert f"Latest question: {first_question}" not in text
        assert f"Assistant: {item.history[1][1]}" in text


def test_query_evidence_one_request_per_gold(strat):
    item = strat.items[0]
    reqs = make_dimension("query_evidence").requests(item, strat)
    assert [r.extra["doc_id"] for r in reqs] == [g.doc_id for g in item.gold] and len(reqs) == 2
    for req, gold, other in zip(reqs, item.gold, item.gold[::-1], strict=True):
        assert gold.text[:100] in user_text(req.messages) and other.text[:100] not in user_text(req.messages)


def test_answer_dimensions_show_every_gold_and_skip_without_answer(strat):
    item = strat.items[0]
    for name in ("answer_faithfulness", "answer_quality"):
        (req,) = make_dimension(name).requests(item, strat)
        text = user_text(req.messages)
        assert all(g.text[:100] in text for g in item.gold) and "[1]\n" in text and "[2]\n" in text
        assert f"Answer to {'check' if name == 'answer_faithfulness' else 'rate'}: {item.answer}" in text
        judge = llm()
        assert judge_item(judge, name, replace(item, answer=None), strat) is None
        assert judge.backend.calls == []


# ---------------------------------------------------------------- negatives and shuffle
def test_negatives_from_cluster_pool(mtr):
    sampler, first_k = NegativeSampler(mtr), NegativeSampler(mtr, whole_pool=False)
    for item in mtr.items:
        golds = {g.doc_id for g in item.gold}
        negs = sampler.negatives(item, 7)
        assert negs == [d for d in item.pool if d not in golds] and not golds & set(negs)  # the whole cluster
        assert first_k.negatives(item, 3) == negs[:3]  # the earlier reading: the first k
    assert negatives(mtr.items[0], mtr, k=3) == sampler.negatives(mtr.items[0], 3)
    assert negatives(mtr.items[0], mtr, k=3, whole_pool=False) == first_k.negatives(mtr.items[0], 3)


def test_pool_negatives_skip_placeholders_and_top_up(strat):
    sampler = NegativeSampler(strat)
    padded = [it for it in strat.items if any(strat.documents[""][d].text == PAD_TEXT for d in it.pool)]
    assert padded
    for item in padded:
        golds = {g.doc_id for g in item.gold}
        usable = [d for d in item.pool if d not in golds and strat.documents[""][d].text != PAD_TEXT]
        negs = sampler.negatives(item, 7)
        assert len(negs) == max(7, len(usable)) and len(set(negs)) == len(negs) and not golds & set(negs)
        assert all(strat.documents[""][d].text != PAD_TEXT for d in negs)
        assert negs[:len(usable)] == usable  # the whole usable pool first, in stored order
        assert sampler.source(item) == ("pool" if len(usable) >= 7 else "pool+bm25")
    # a comparison turn whose pool holds only its two golds and padding: all 7 negatives come from BM25
    bare = next(it for it in padded if all(d in {g.doc_id for g in it.gold} or strat.documents[""][d].text == PAD_TEXT
                                           for d in it.pool))
    assert len(sampler.negatives(bare, 7)) == 7 and sampler.source(bare) == "pool+bm25"


def test_negatives_from_bm25_never_gold(strat_nopool):
    sampler = NegativeSampler(strat_nopool, retriever="bm25")
    for item in strat_nopool.items[:10]:
        negs = sampler.negatives(item, 7)
        assert len(negs) == 7 and not {g.doc_id for g in item.gold} & set(negs)
        assert sampler.source(item) == "bm25"
    assert len(sampler._indexes) == 1  # one index per subset, reused
    # a query made of a gold's own text puts that gold first in BM25; it must still be left out
    item = replace(strat_nopool.items[0], query=strat_nopool.items[0].gold[0].text)
    negs = sampler.negatives(item, 7)
    assert len(negs) == 7 and not {g.doc_id for g in item.gold} & set(negs)


def test_shuffle_seeded_and_gold_position(mtr):
    sampler = NegativeSampler(mtr)
    a, b, c = (Completeness(sampler, seed=s) for s in (0, 0, 1))
    positions = []
    for item in mtr.items:
        (ra,), (rb,), (rc,) = (d.requests(item, mtr) for d in (a, b, c))
        assert ra.extra == rb.extra and ra.messages == rb.messages  # same seed, same order
        (pos,) = ra.extra["gold_positions"]
        assert ra.extra["candidates"][pos - 1] == item.gold[0].doc_id
        assert len(ra.extra["candidates"]) == max(8, len(set(item.pool)))
        shown = document_text(item.gold[0])
        assert f"[{pos}]\n{shown}" in user_text(ra.messages)
        positions.append(pos)
        assert sorted(ra.extra["candidates"]) == sorted(rc.extra["candidates"])
    assert len(set(positions)) >= 5  # the gold is not parked in one slot
    orders = [(a.requests(it, mtr)[0].extra["candidates"], c.requests(it, mtr)[0].extra["candidates"])
              for it in mtr.items]
    assert sum(x != y for x, y in orders) >= len(orders) // 2  # another seed, other orders


def test_one_seeded_gold_among_several(strat):
    comp = Completeness(NegativeSampler(strat))
    first_gold_drawn = set()
    for item in strat.items:
        (req,) = comp.requests(item, strat)
        golds = {g.doc_id for g in item.gold}
        shown = [d for d in req.extra["candidates"] if d in golds]
        assert len(shown) == 1 and req.extra["gold_positions"] == [req.extra["candidates"].index(shown[0]) + 1]
        assert comp.requests(item, strat)[0].extra == req.extra
        first_gold_drawn.add(shown[0] == item.gold[0].doc_id)
    assert first_gold_drawn == {True, False}  # either gold can be drawn


def test_completeness_gold_only_pool_and_no_negatives(mtr):
    item = replace(mtr.items[0], pool=(mtr.items[0].gold[0].doc_id,))
    (req,) = Completeness(NegativeSampler(mtr)).requests(item, mtr)
    assert len(req.extra["candidates"]) == 8 and req.extra["negatives_source"] == "pool+bm25"

    class NoNegatives(NegativeSampler):
        def negatives(self, item, k=7):
            return []

    judge = llm()
    assert judge_item(judge, Completeness(NoNegatives(mtr)), item, mtr) is None and judge.backend.calls == []


# ---------------------------------------------------------------- judging
def test_completeness_score_by_pick(mtr):
    sampler = NegativeSampler(mtr)
    item = late_turn(mtr)
    (req,) = make_dimension("completeness", sampler=sampler).requests(item, mtr)
    gold_pos = req.extra["gold_positions"][0]
    other = 1 if gold_pos != 1 else 2
    replies = [f"Only this passage explains the explosivity index.\n**Document ID:** [{gold_pos}]",
               f"Passage {other} talks about eruptions in general, which fits best.\n**Document ID:** [{other}]"]
    (hit,), (miss,) = (judge_item(llm(r), "completeness", item, mtr, sampler) for r in replies)
    assert (hit.score, hit.label, hit.extra["picked"]) == (1.0, "gold", item.gold[0].doc_id)
    assert (miss.score, miss.label, miss.extra["picked"]) == (0.0, "negative", req.extra["candidates"][other - 1])
    assert hit.extra["candidates"] == req.extra["candidates"] and hit.extra["negatives_source"] == "pool"
    assert hit.rationale == "Only this passage explains the explosivity index." and hit.judge == "fake:fake"
    (bad,) = judge_item(llm("Several passages could fit; hard to say. [3] maybe, or [5]?"), "completeness", item,
                        mtr, sampler)
    assert bad.score is None and bad.error.startswith("unparseable") and bad.extra["picked"] is None


def test_structured_path(strat, mtr):
    item = strat.items[0]
    replies = ['{"rationale": "The passage states his nationality outright.", "rating": 5}',
               'Here is my verdict: {"rationale": "Nationality is given only for one of the two men.", '
               '"rating": 3} Hope that helps.']
    judge = llm(*replies, schema=True)
    v1, v2 = judge_item(judge, "query_evidence", item, strat)
    assert (v1.score, v1.rationale, v1.extra["doc_id"]) == (5.0, "The passage states his nationality outright.",
                                                             item.gold[0].doc_id)
    assert v2.score == 3.0 and v2.error is None and "Hope that helps" in v2.raw
    assert all(c["json_schema"] is not None for c in judge.backend.calls)
    sampler = NegativeSampler(mtr)
    it = late_turn(mtr)
    (req,) = make_dimension("completeness", sampler=sampler).requests(it, mtr)
    pos = req.extra["gold_positions"][0]
    (v,) = judge_item(llm(json.dumps({"rationale": "It defines the index.", "document": pos}), schema=True),
                      "completeness", it, mtr, sampler)
    assert v.score == 1.0 and v.extra["picked"] == it.gold[0].doc_id
    # a document number past the 8 shown fails validation on every attempt: unparseable, not a score
    (v,) = judge_item(llm(responder=lambda m: '{"rationale": "The ninth one.", "document": 9}', schema=True),
                      "completeness", it, mtr, sampler)
    assert v.score is None and v.error.startswith("unparseable") and '"document": 9' in v.raw


def test_fallback_path(strat):
    item = strat.items[0]
    reply = ("**Justification:** Both passages are about the two directors, and the answer 'yes' follows from "
             "them naming both as American.\n\n**Rating:** 4")
    judge = llm(reply, reply)
    fa, qu = (judge_item(judge, d, item, strat)[0] for d in ("answer_faithfulness", "answer_quality"))
    assert fa.score == qu.score == 4.0 and fa.dimension == "answer_faithfulness"
    assert fa.rationale.startswith("Both passages") and "Rating" not in fa.rationale and fa.raw == reply
    assert all(c["json_schema"] is None for c in judge.backend.calls)


@pytest.mark.parametrize("reply", [
    "The answer looks reasonable but I cannot tell how well it is supported.",
    "Rating: 7\nThe answer adds a lot of detail not found anywhere.",
])
def test_unparseable_reply_is_kept_without_score(strat, reply):
    (v,) = judge_item(llm(reply), "answer_quality", strat.items[0], strat)
    assert v.score is None and v.error.startswith("unparseable") and v.raw == reply


def test_call_failure_and_dead_endpoint(strat):
    bad_request = BackendError("400 bad request: context too long", retryable=False, kind="bad_request")
    (v,) = judge_item(llm(bad_request), "answer_faithfulness", strat.items[0], strat)
    assert v.score is None and v.error.startswith("call failed") and v.raw == ""
    refused = BackendError("connection refused", retryable=True, kind="connection")
    with pytest.raises(EndpointUnreachable):
        judge_item(llm(refused, breaker=1), "answer_faithfulness", strat.items[0], strat)
    for schema in (False, True):
        with pytest.raises(EndpointUnreachable):
            judge_call(llm(refused, breaker=1, schema=schema), [{"role": "user", "content": "Rate this."}],
                       RatingReply, parse_rating)
