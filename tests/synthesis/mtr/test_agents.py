"""MTR-Pipeline agents with scripted backends: the seeded draw, the Questioner's prompts and parsing, the
Responder's messages and unusable replies, and the Polisher's rejection rules."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from convrag.core.errors import ConvragError
from convrag.llm import LLM, RetryPolicy, load_prompt
from convrag.llm.backends.fake import FakeBackend
from convrag.llm.types import BackendError, LLMFailure, UnparsableReply
from convrag.synthesis.engine.roles import AgentError, cut
from convrag.synthesis.mtr.agents import Doc, Exchange, Polisher, Questioner, Responder, draw_documents, rejection

LIGHTHOUSE = (
    "The Bell Rock Lighthouse, off the coast of Angus, Scotland, is the world's oldest surviving sea-washed "
    "lighthouse.[1] It was built between 1807 and 1810 by Robert Stevenson on the Inchcape reef, which is "
    "covered by the sea for all but a few hours of each tide [2]. The masonry was dovetailed so that the tower "
    "could withstand the force of the waves, a technique taken from Smeaton's Eddystone tower.[3]"
)
POOL = [
    Doc("d0", "Bell Rock Lighthouse", LIGHTHOUSE),
    Doc("d1", "Robert Stevenson", "Robert Stevenson was a Scottish civil engineer famed for designing and "
        "building a series of lighthouses, and the grandfather of the novelist Robert Louis Stevenson.[4]"),
    Doc("d2", "Inchcape", "Inchcape is a reef 18 km off the east coast of Scotland. A legend tells of an abbot "
        "who fixed a bell to the rock to warn sailors."),
    Doc("d3", "Smeaton's Tower", "The third Eddystone lighthouse, designed by John Smeaton, pioneered the use "
        "of hydraulic lime and dovetailed granite blocks."),
    Doc("d4", "Lighthouse keeper", "Keepers trimmed the wicks, wound the clockwork that turned the lens and "
        "kept a log of the weather; Bell Rock was staffed until it was automated in 1988."),
    Doc("d5", "Fresnel lens", "A compact lens made of concentric prisms that lets a lighthouse beam be seen "
        "more than 20 nautical miles away."),
]
HISTORY = [
    Exchange("When was the Bell Rock Lighthouse built?",
             "The Bell Rock Lighthouse was built between 1807 and 1810. Construction was only possible for a few "
             "hours at low tide, so workers lived on a ship anchored nearby and rowed out to the reef whenever the "
             "rock was exposed, which made progress slow and dangerous during the first two summers."),
    Exchange("Who was the engineer behind it?",
             "It was designed and built by Robert Stevenson, who worked with John Rennie as consulting engineer. "
             "Stevenson went on to build many more Scottish lighthouses, and several of his sons and grandsons "
             "continued the family business of lighthouse engineering for more than a century."),
]


def make_llm(*script: Any, responder: Any = None) -> tuple[LLM, FakeBackend]:
    backend = FakeBackend(script=list(script), responder=responder)
    return LLM(backend, cache=False, retry=RetryPolicy(max_retries=0)), backend


def user_text(messages: list[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in messages if m["role"] == "user")


def words(messages: list[dict[str, str]]) -> int:
    return sum(len(m["content"].split()) for m in messages)


# -- the draw --------------------------------------------------------------------------------------------------

def test_draw_is_seeded_by_key_and_never_repeats_a_document() -> None:
    first = draw_documents(POOL, 5, "0:c000001:1")
    assert first == draw_documents(POOL, 5, "0:c000001:1")
    assert len(first) == 5 and len({d.doc_id for d in first}) == 5
    draws = {tuple(d.doc_id for d in draw_documents(POOL, 5, f"0:c000001:{t}")) for t in range(1, 13)}
    assert len(draws) > 1
    seeds = {tuple(d.doc_id for d in draw_documents(POOL, 5, f"{seed}:c000001:1")) for seed in range(12)}
    assert len(seeds) > 1


def test_draw_larger_than_pool_takes_every_document_once() -> None:
    drawn = draw_documents(POOL[:3], 5, "0:c000002:4")
    assert sorted(d.doc_id for d in drawn) == ["d0", "d1", "d2"]
    assert draw_documents([], 5, "k") == []


# -- Questioner prompts ------------------------------------------------------------------------------------------

def test_first_turn_prompt_numbers_cut_and_cleans_the_documents() -> None:
    llm, _ = make_llm()
    drawn = draw_documents(POOL, 6, "0:c000003:1")
    msgs = Questioner(llm, doc_chars=127).messages(drawn, [], "0:c000003:1")
    text = user_text(msgs)
    mine = text.split("Now your turn", 1)[1]
    for i, d in enumerate(drawn, 1):
        assert f"[{i}] {d.title}" in mine
    assert "Questions you already asked" not in text and "User:" not in text
    assert not re.search(r"\[\d\](?! )", mine)  # only the "[N] title" numbering is left, no citation markers
    cut_text = "The Bell Rock Lighthouse, off the coast of Angus, Scotland, is the world's oldest surviving " \
               "sea-washed lighthouse. It was built..."
    assert cut_text in mine and "Inchcape reef" not in mine


def test_next_turn_prompt_lists_every_earlier_question_and_cuts_answers() -> None:
    llm, _ = make_llm()
    drawn = POOL[:5]
    msgs = Questioner(llm, history_answer_chars=80).messages(drawn, HISTORY, "0:c000004:3")
    mine = user_text(msgs).split("Now your turn", 1)[1]
    assert "1. When was the Bell Rock Lighthouse built?\n2. Who was the engineer behind it?" in mine
    assert "User: Who was the engineer behind it?" in mine
    assert "Assistant: The Bell Rock Lighthouse was built between 1807 and 1810. Construction was only..." in mine
    assert "rowed out" not in mine and "grandsons" not in mine
    assert "[5] Lighthouse keeper" in mine


def test_example_is_chosen_by_key() -> None:
    llm, _ = make_llm()
    q = Questioner(llm)
    assert q.messages(POOL[:5], [], "0:c1:1") == q.messages(POOL[:5], [], "0:c1:1")
    for history, prompt in (([], "mtr_questioner_first"), (HISTORY, "mtr_questioner_next")):
        examples = load_prompt(prompt).optional["examples"]
        shown = {user_text(q.messages(POOL[:5], history, f"0:c{i}:2")).split("Now your turn")[0] for i in range(60)}
        assert len(shown) == len(examples) == (5 if history else 3)


@pytest.mark.parametrize("prompt", ["mtr_questioner_first", "mtr_questioner_next"])
def test_every_example_reply_is_valid_json_naming_a_shown_document(prompt: str) -> None:
    for example in load_prompt(prompt).optional["examples"]:
        msgs = load_prompt(prompt).render(documents=[], history=HISTORY, example=example) if "next" in prompt \
            else load_prompt(prompt).render(documents=[], example=example)
        reply = json.loads(user_text(msgs).split("Reply: ", 1)[1].split("\n", 1)[0])
        assert 1 <= reply["document"] <= len(example["documents"])
        assert reply["question"] == example["question"]


# -- Questioner parsing ------------------------------------------------------------------------------------------

def test_ask_clean_json_records_the_gold_and_tokens() -> None:
    reply = '{"document": 2, "question": "Who designed the lighthouse on the Inchcape reef?"}'
    llm, backend = make_llm(reply)
    drawn = POOL[:5]
    q = Questioner(llm).ask(drawn, [], "0:c5:1")
    assert (q.text, q.number, q.gold) == ("Who designed the lighthouse on the Inchcape reef?", 2, POOL[1])
    assert q.prompt_tokens == words(backend.calls[0]["messages"]) and q.completion_tokens == len(reply.split())
    params = backend.calls[0]["params"]
    assert (params.temperature, params.top_p, params.max_tokens, params.seed) == (0.8, 0.95, 256, 0)


def test_ask_reads_json_in_prose_and_code_fences() -> None:
    prose = ('Sure! Document 3 is about the reef, so here is my question:\n'
             '```json\n{"document": 3, "question": "Why is there a legend about a bell on that reef?"}\n```')
    llm, _ = make_llm(prose)
    q = Questioner(llm).ask(POOL[:5], HISTORY, "0:c6:3")
    assert (q.number, q.gold.doc_id, q.text) == (3, "d2", "Why is there a legend about a bell on that reef?")


def test_ask_reasks_after_an_out_of_range_document() -> None:
    bad = '{"document": 6, "question": "How far can the beam of a Fresnel lens be seen?"}'
    good = '{"document": 5, "question": "what did the keepers actually do all day?"}'
    llm, backend = make_llm(bad, good)
    q = Questioner(llm).ask(POOL[:5], HISTORY, "0:c7:3")
    assert len(backend.calls) == 2
    assert "1 to 5" in backend.calls[1]["messages"][-1]["content"]
    assert (q.number, q.gold.doc_id, q.text) == (5, "d4", "what did the keepers actually do all day?")
    assert q.completion_tokens == len(bad.split()) + len(good.split())
    assert q.prompt_tokens == words(backend.calls[0]["messages"]) + words(backend.calls[1]["messages"])


def test_ask_reasks_after_a_blank_question_and_gives_up_when_never_valid() -> None:
    llm, backend = make_llm('{"document": 1, "question": "  "}', '{"document": 1, "question": "[1]"}',
                            "I think document 1 is the most interesting one.")
    with pytest.raises(UnparsableReply) as err:
        Questioner(llm).ask(POOL[:5], [], "0:c8:1")
    assert len(backend.calls) == 3 and "question is empty" in backend.calls[1]["messages"][-1]["content"]
    assert err.value.last_text == "I think document 1 is the most interesting one."


@pytest.mark.parametrize("raw", ["[3] Why did they put a bell on the reef?", "Question: Why did they put a bell on "
                                 "the reef?", "**Question:** [3] Why did they put a bell on the reef?"])
def test_ask_removes_a_number_or_label_in_front_of_the_question(raw: str) -> None:
    llm, _ = make_llm(json.dumps({"document": 3, "question": raw}))
    assert Questioner(llm).ask(POOL[:5], HISTORY, "0:c9:3").text == "Why did they put a bell on the reef?"


# -- Responder ---------------------------------------------------------------------------------------------------

def test_responder_messages_hold_history_then_only_the_gold_document() -> None:
    llm, _ = make_llm()
    msgs = Responder(llm, history_answer_chars=100, answer_words=120).messages(
        HISTORY, "how did they keep the waves from knocking it down?", POOL[0])
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "120 words" in msgs[0]["content"]
    assert msgs[1]["content"] == HISTORY[0].question and msgs[3]["content"] == HISTORY[1].question
    assert msgs[2]["content"].endswith("...") and len(msgs[2]["content"]) <= 103 and "rowed" not in msgs[2]["content"]
    last = msgs[-1]["content"]
    assert "Bell Rock Lighthouse" in last and "dovetailed" in last and "[1]" not in last and "[3]" not in last
    assert last.rstrip().endswith("how did they keep the waves from knocking it down?")
    assert all(d.text[:40] not in last for d in POOL[1:])


def test_responder_drops_reasoning_and_counts_tokens() -> None:
    reply = ("<think>\nThe user asks about the dovetailing; the text says blocks were interlocked.\n</think>\n\n"
             "Stevenson borrowed an idea from Smeaton's Eddystone tower: the granite blocks were cut with dovetail "
             "joints so that each course locked into the next, turning the tower into one solid mass.")
    llm, backend = make_llm(reply)
    ans = Responder(llm).answer(HISTORY, "how did they keep the waves from knocking it down?", POOL[0])
    assert ans.text.startswith("Stevenson borrowed") and "<think>" not in ans.text and "user asks" not in ans.text
    assert ans.completion_tokens == len(reply.split()) and ans.prompt_tokens == words(backend.calls[0]["messages"])
    assert backend.calls[0]["params"].max_tokens == 512


@pytest.mark.parametrize("reply", ["", "   \n", "[ERROR: generation failed]",
                                   "<think>The tower was built from granite and sandstone, so I should",
                                   "<think>ok</think>\n\n  "])
def test_responder_unusable_reply_raises(reply: str) -> None:
    llm, _ = make_llm(reply)
    with pytest.raises(AgentError):
        Responder(llm).answer([], "When was the Bell Rock Lighthouse built?", POOL[0])


# -- Polisher ----------------------------------------------------------------------------------------------------

Q = "When was the construction of the Bell Rock Lighthouse finally completed?"


def test_polisher_prompt_context() -> None:
    llm, _ = make_llm()
    empty = user_text(Polisher(llm).messages([], Q))
    assert "(Start of conversation)" in empty and Q in empty
    ctx = user_text(Polisher(llm, context_answer_chars=50).messages(HISTORY, Q))
    assert "(Start of conversation)" not in ctx
    assert "[User]: When was the Bell Rock Lighthouse built?" in ctx
    assert f"[Assistant]: {HISTORY[0].answer[:50]}...\n" in ctx


@pytest.mark.parametrize("reply, text", [("when did they finish it", "when did they finish it"),
                                         ('"when did they finally finish it?"', "when did they finally finish it?"),
                                         ("\u201cso when was it done\u201d", "so when was it done"),
                                         ("<think>shorten it</think>\nwhen was it finished", "when was it finished")])
def test_polisher_accepts_casual_rewrites(reply: str, text: str) -> None:
    llm, backend = make_llm(reply)
    rw = Polisher(llm).polish(HISTORY, Q)
    assert (rw.text, rw.status) == (text, "rewritten")
    assert rw.completion_tokens == len(reply.split()) and rw.prompt_tokens == words(backend.calls[0]["messages"])
    params = backend.calls[0]["params"]
    assert (params.temperature, params.top_p, params.max_tokens) == (0.8, 0.9, 100)


@pytest.mark.parametrize("reply, status", [
    ('Sure, here is a more casual version: "when did it open"', "meta phrase: here is"),
    ("Certainly! when did they finish it", "meta phrase: certainly"),
    ("I'd rewrite it as: when was it done", "meta phrase: rewrite"),
    ("so like when exactly did they finally get the whole lighthouse on the rock finished, was it 1810 or later "
     "because i read somewhere it took years", "too long"),
    ("ok", "too short"),
    ('"it?"', "too short"),
    ("when did they finish it\nor did it take longer?", "several lines"),
    ("When was the construction of the Bell Rock  Lighthouse finally completed?", "unchanged"),
])
def test_polisher_rejections_keep_the_original(reply: str, status: str) -> None:
    llm, _ = make_llm(reply)
    rw = Polisher(llm).polish(HISTORY, Q)
    assert (rw.text, rw.status) == (Q, status)


def test_polisher_failure_propagates() -> None:
    llm, _ = make_llm(BackendError("HTTP 503 from the server", retryable=True, kind="server_error"))
    with pytest.raises(LLMFailure):
        Polisher(llm).polish(HISTORY, Q)


def test_rejection_thresholds() -> None:
    assert rejection("abcdefghij", "abcdefghijklm") is None  # 13 <= 1.3 * 10
    assert rejection("abcdefghij", "abcdefghijklmn") == "too long"
    assert rejection("what year?", "why") == "too short"  # length 3: one rule, <= min_chars
    assert rejection("what year?", "when") is None
    assert rejection("what year?", "when", min_chars=4) == "too short"
    assert rejection("what year?", "SURE, when", meta_phrases=("sure,",)) == "meta phrase: sure,"
    assert rejection("what year?", "what  year?\n") == "unchanged"
    assert rejection("What year?", "what year?") is None


def test_cut_backs_off_to_a_word_boundary() -> None:
    assert cut("short text", 20) == "short text"
    assert cut("the tower was dovetailed", 16) == "the tower was..."
    assert cut("the tower was dovetailed", 13) == "the tower was..."
    assert cut("dovetailed granite", 5) == "dovet..."
    assert cut("the tower was dovetailed", 16, at_word=False) == "the tower was do..."


def test_questioner_needs_documents() -> None:
    llm, backend = make_llm()
    with pytest.raises(ConvragError, match="no documents"):
        Questioner(llm).ask([], [], "0:c10:1")
    assert backend.calls == []


# -- the history budget (max_history_tokens) ---------------------------------------------------------------------

def _real_exchanges(n: int) -> list[Exchange]:
    """``n`` real question / answer pairs of one MTRAG conversation after another (human-written texts)."""
    from tests.conftest import DATA

    conversations = json.loads((DATA / "mtrag" / "mtrag-human" / "conversations" / "conversations.json").read_text())
    out: list[Exchange] = []
    for conv in conversations:
        msgs = conv["messages"]
        out += [Exchange(q["text"], a["text"]) for q, a in zip(msgs[::2], msgs[1::2], strict=False)
                if q["speaker"] == "user" and a["speaker"] == "agent"]
        if len(out) >= n:
            return out[:n]
    raise AssertionError("not enough MTRAG turns")


def test_history_budget_cuts_oldest_turns_first_and_never_the_current_turn() -> None:
    from convrag.synthesis.engine.tokens import count_tokens, history_cuts, keep_recent, prompt_tokens
    from convrag.synthesis.mtr.agents import history_cut_figures

    history = _real_exchanges(11)  # turn 12 of a conversation
    question, budget = "and what happened to the keepers after it was automated?", 500
    for cls, make in ((Questioner, lambda a: a.messages(POOL[:5], history, "0:c1:12")),
                      (Responder, lambda a: a.messages(history, question, POOL[0]))):
        whole, capped, off = cls(None), cls(None, max_history_tokens=budget), cls(None, max_history_tokens=0)
        costs = [capped.turn_tokens(h) for h in history]
        assert sum(costs) > budget  # the whole history would pass the budget
        shown = capped.shown_history(history)
        assert shown == history[-len(shown):] and 0 < len(shown) < len(history)  # the latest turns, oldest cut first
        assert sum(capped.turn_tokens(h) for h in shown) <= budget < sum(costs[-len(shown) - 1:])
        text = "\n".join(m["content"] for m in make(capped))
        assert all(h.question in text for h in shown) and history[0].question not in text
        assert (question if cls is Responder else POOL[4].title) in text  # the current turn is never cut
        if cls is Questioner:
            assert all(strip(d.text)[:60] in text for d in POOL[:5])  # nor the documents
        assert make(off) == make(whole) and off.shown_history(history) == history  # 0: nothing is cut
        print(f"\n{cls.__name__} at turn 12: {prompt_tokens(make(whole)):,} prompt tokens with the whole history "
              f"({sum(costs):,} of history), {prompt_tokens(make(capped)):,} with max_history_tokens={budget} "
              f"({len(history) - len(shown)} oldest of 11 turns left out)")
        assert prompt_tokens(make(whole)) - prompt_tokens(make(capped)) >= sum(costs) - budget
    # every turn of the conversation: the history shown never passes the budget, and the counts add up
    responder = Responder(None, max_history_tokens=budget)
    costs = [responder.turn_tokens(h) for h in history]
    kept = [keep_recent(costs[:t], budget) for t in range(12)]
    assert all(sum(costs[t - k:t]) <= budget for t, k in enumerate(kept)) and kept[:3] == [0, 1, 2]
    assert history_cuts(costs, budget) == (sum(1 for t, k in enumerate(kept[:11]) if k < t),
                                           sum(t - k for t, k in enumerate(kept[:11])))
    assert history_cuts(costs, None) == (0, 0) and count_tokens("") == 0
    figures = history_cut_figures([history], Questioner(None, max_history_tokens=budget), Responder(None))
    assert figures["history_cut_responder"] == "no budget (max_history_tokens=0)"
    assert re.fullmatch(r"\d+ prompts left \d+ earlier turns out \(max_history_tokens=500\)",
                        figures["history_cut_questioner"])


def strip(text: str) -> str:
    return re.sub(r"[ \t]*\[\d+\]", "", text)


def test_history_within_the_budget_renders_the_prompt_of_today_byte_for_byte() -> None:
    llm, _ = make_llm()
    for budget in (None, 0, 10_000):
        q = Questioner(llm, max_history_tokens=budget)
        assert q.messages(POOL[:5], HISTORY, "0:c000004:3") == Questioner(llm).messages(POOL[:5], HISTORY,
                                                                                        "0:c000004:3")
        r = Responder(llm, max_history_tokens=budget)
        assert r.messages(HISTORY, Q, POOL[0]) == Responder(llm).messages(HISTORY, Q, POOL[0])
