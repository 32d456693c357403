"""RECOR's quality judges with scripted judges: the conversation judge's inputs (RECOR sample build), one reply ->
four verdicts, per-dimension failures, free-text parsing; turn labels (first-turn rule, label reading); label
distributions and RECOR's normalised entropy."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from convrag.benchmarks.recor.judges_tables import (
    RECOR_DEPENDENCY_COUNTS,
    RECOR_DEPENDENCY_ENTROPY,
    RECOR_PATTERN_COUNTS,
    RECOR_PATTERN_ENTROPY,
    label_distribution,
)
from convrag.cli import main
from convrag.core.errors import ConvragError
from convrag.judging.items import AuditSet, conversations, load_items
from convrag.judging.recor import (
    DEPENDENCY_LABELS,
    DIMENSIONS,
    PATTERN_LABELS,
    judge_conversation,
    judge_turn,
    match_label,
    normalized_entropy,
)
from convrag.judging.verdict import Verdict
from convrag.llm import LLM, BackendError, RetryPolicy
from convrag.llm.backends.fake import FakeBackend
from tests.conftest import DATA

SCORES_JSON = json.dumps({"rationale": "Casual openers like 'Oh,' and contractions throughout; each question picks up "
                                       "the receptor point from the reply before it.",
                          "scores": {"naturalness": 4, "turn_coherence": 5, "question_quality": 4,
                                     "groundedness": 3}})
PROSE = """The user sounds relaxed ("Oh, does having...", "I wonder if"), though turn 1 is a little stiff.
Each question builds on the previous reply, and the three questions ask different things.
Turn 3's answer mentions odor panels, which the third source backs; turn 2 adds an animal claim not in D1.

**Naturalness:** 4
Turn coherence: 5/5
- Question quality (1-5): 4
Groundedness: 3"""


@pytest.fixture(scope="module")
def recor(tmp_path_factory: pytest.TempPathFactory) -> AuditSet:
    out = tmp_path_factory.mktemp("recor") / "built"
    assert main(["build", "recor", "--source", str(DATA / "recor" / "sample"), "--out", str(out)]) in (0, None)
    return load_items(out)


def scripted(*replies: str | BaseException, schema: bool = False) -> tuple[LLM, FakeBackend]:
    backend = FakeBackend(script=list(replies), supports_schema=schema)
    return LLM(backend, cache=False, retry=RetryPolicy(max_retries=0), structured_attempts=1), backend


def conversation(recor: AuditSet, key: str) -> list:
    return conversations(recor.items)[key]


def user_text(backend: FakeBackend, call: int = 0) -> str:
    return "\n".join(m["content"] for m in backend.calls[call]["messages"] if m["role"] == "user")


def by_dimension(verdicts: list[Verdict]) -> dict[str, Verdict]:
    return {v.dimension: v for v in verdicts}


# -- conversation level ---------------------------------------------------------------------------------------
def test_conversation_judge_sees_every_turn_in_order_and_the_gold_documents(recor: AuditSet) -> None:
    items = conversation(recor, "law:law:ex_111149")
    llm, backend = scripted(PROSE)
    verdicts = judge_conversation(llm, list(reversed(items)), recor)  # order comes from the turn numbers
    assert len(backend.calls) == 1
    text = user_text(backend)
    positions = [text.index(it.query) for it in items]
    assert positions == sorted(positions) and len(items) == 3
    for it in items:  # answers are short here: shown whole, after their own query
        assert text.index(" ".join(it.answer.split())[:80]) > text.index(it.query)
    gold = {d.doc_id: d for it in items for d in it.gold}
    for doc in gold.values():
        assert " ".join(doc.text.split())[:60] in text
    assert text.count("Sources for this turn:") == 3
    assert "[...]" in text  # the long statute texts are cut, and the prompt says so
    assert "Can copyright be claimed retroactively" in text  # RECOR's original query, the question-quality topic
    assert "Groundedness: <1-5>" in text  # no schema: the free-text format is asked for
    v = verdicts[0]
    assert v.item_id == "law:law:ex_111149" and v.extra["turns"] == [it.item_id for it in items]
    assert sorted(v.extra["documents"]) == sorted(gold) and v.extra["documents_cut"] > 0 and v.extra["topic"]


def test_long_answers_are_cut_and_a_conversation_without_answers_gets_no_groundedness(recor: AuditSet) -> None:
    items = conversation(recor, "biology:biology:2")
    long = [dataclasses.replace(items[0], answer="Receptors vary a lot between people. " * 40), *items[1:]]
    llm, backend = scripted(PROSE)
    verdicts = judge_conversation(llm, long, recor)
    assert verdicts[0].extra["answers_cut"] == 1
    assert "Receptors vary a lot between people. " * 40 not in user_text(backend)
    bare = [dataclasses.replace(it, answer=None) for it in items]
    llm, backend = scripted(PROSE.replace("Groundedness: 3", ""))
    verdicts = judge_conversation(llm, bare, recor)
    assert [v.dimension for v in verdicts] == list(DIMENSIONS[:3])
    assert "groundedness -" not in user_text(backend) and "(no reply recorded)" in user_text(backend)


def test_one_structured_reply_gives_four_verdicts(recor: AuditSet) -> None:
    llm, backend = scripted(SCORES_JSON, schema=True)
    verdicts = judge_conversation(llm, conversation(recor, "biology:biology:2"), recor)
    assert [v.dimension for v in verdicts] == list(DIMENSIONS)
    assert [v.score for v in verdicts] == [4.0, 5.0, 4.0, 3.0]
    assert all(v.error is None and v.judge == "fake:fake" and v.item_id == "biology:biology:2" for v in verdicts)
    assert verdicts[0].rationale.startswith("Casual openers")
    schema = backend.calls[0]["json_schema"]
    inner = schema["$defs"]["ConversationScoreSet"]
    assert inner["required"] == list(DIMENSIONS) and inner["properties"]["groundedness"]["maximum"] == 5
    assert "Groundedness: <1-5>" not in user_text(backend)


@pytest.mark.parametrize(("scores", "bad", "why"), [
    ({"naturalness": 4, "turn_coherence": 5, "question_quality": 4}, "groundedness", "no score"),
    ({"naturalness": 4, "turn_coherence": 6, "question_quality": 4, "groundedness": 5}, "turn_coherence",
     "score 6 is outside 1-5"),
    ({"naturalness": 4.5, "turn_coherence": 5, "question_quality": 4, "groundedness": 5}, "naturalness",
     "not a whole number"),
    ({"naturalness": "high", "turn_coherence": 5, "question_quality": 4, "groundedness": 5}, "naturalness",
     "not a whole number"),
])
def test_a_bad_score_fails_only_its_dimension(recor: AuditSet, scores: dict, bad: str, why: str) -> None:
    llm, _ = scripted(json.dumps({"rationale": "Mostly fine.", "scores": scores}), schema=True)
    verdicts = by_dimension(judge_conversation(llm, conversation(recor, "biology:biology:2"), recor))
    assert verdicts[bad].score is None and verdicts[bad].error.startswith(f"unparseable: {bad}:")
    assert why in verdicts[bad].error
    kept = [v for d, v in verdicts.items() if d != bad]
    assert all(v.error is None and v.score == float(scores[v.dimension]) for v in kept)


def test_free_text_score_lines(recor: AuditSet) -> None:
    llm, _ = scripted(PROSE)
    verdicts = judge_conversation(llm, conversation(recor, "biology:biology:2"), recor)
    assert [v.score for v in verdicts] == [4.0, 5.0, 4.0, 3.0] and all(v.error is None for v in verdicts)
    assert verdicts[0].rationale.startswith("The user sounds relaxed")
    assert "Naturalness" not in verdicts[0].rationale and "Groundedness:" not in verdicts[0].rationale


@pytest.mark.parametrize(("reply", "expected"), [
    # the last line per criterion counts (a corrected score)
    (PROSE + "\nOn reflection turn 2 is unsupported.\nGroundedness: 2", [4.0, 5.0, 4.0, 2.0]),
    # one criterion missing, another out of range
    (PROSE.replace("Turn coherence: 5/5", "").replace("Groundedness: 3", "Groundedness: 7"), [4.0, None, 4.0, None]),
    # JSON with extra text around it, flat keys
    ('Here is my assessment:\n{"naturalness": 3, "turn_coherence": 4, "question_quality": 5, "groundedness": 5}\n'
     "Hope this helps.", [3.0, 4.0, 5.0, 5.0]),
    # a sentence with a colon is not a score line
    ("Coherence is strong: every question follows on.\nNaturalness: 5\nTurn coherence: 4\nQuestion quality: 4\n"
     "Groundedness: 5", [5.0, 4.0, 4.0, 5.0]),
])
def test_free_text_partial_and_corrected_replies(recor: AuditSet, reply: str, expected: list) -> None:
    llm, _ = scripted(reply)
    verdicts = judge_conversation(llm, conversation(recor, "biology:biology:2"), recor)
    assert [v.score for v in verdicts] == expected
    assert all((v.error is None) == (v.score is not None) for v in verdicts)


def test_prose_without_scores_and_failed_calls(recor: AuditSet) -> None:
    items = conversation(recor, "biology:biology:2")
    llm, _ = scripted("The conversation reads well and stays on smell receptors throughout, with good sources.")
    verdicts = judge_conversation(llm, items, recor)
    assert all(v.score is None and v.error.startswith("unparseable: no verdict line") for v in verdicts)
    llm, _ = scripted(BackendError("server said 400", retryable=False))
    verdicts = judge_conversation(llm, items, recor)
    assert len(verdicts) == 4 and all(v.error.startswith("call failed:") for v in verdicts)
    with pytest.raises(ConvragError, match="one conversation"):
        judge_conversation(llm, recor.items, recor)


# -- turn level -----------------------------------------------------------------------------------------------
def test_first_turn_is_self_contained_by_rule(recor: AuditSet) -> None:
    first = conversation(recor, "drones:drones:ex_3025")[0]
    llm, backend = scripted()
    v = judge_turn(llm, "dependency", first)
    assert not backend.calls
    assert (v.label, v.error, v.score, v.extra["rule"]) == ("self_contained", None, None, "first turn")


def test_turn_judges_inputs(recor: AuditSet) -> None:
    items = conversation(recor, "drones:drones:ex_3025")
    llm, backend = scripted("The question says 'it', pointing at the drone from before.\nDependency type: coreference",
                            "It asks about the outcome.\nQuestion pattern: effect")
    assert judge_turn(llm, "dependency", items[3], "convrag").label == "coreference"
    text = user_text(backend, 0)  # convrag: every earlier turn (authors: the two before it, tested apart)
    assert all(q.query in text for q in items[:3]) and text.index(items[2].query) < text.index(items[3].query)
    assert judge_turn(llm, "pattern", items[3]).label == "effect"
    text = user_text(backend, 1)
    assert items[3].query in text and items[0].query not in text  # RECOR shows the question alone
    with pytest.raises(ConvragError, match="unknown turn judge"):
        judge_turn(llm, "intent", items[3])


@pytest.mark.parametrize(("kind", "reply", "label"), [
    ("dependency", {"rationale": "'this process' stands for the filtering step.", "dependency_type": "substitution"},
     "substitution"),
    ("dependency", {"rationale": "Moves on to costs.", "dependency_type": "Topic shift"}, "topic_shift"),
    ("pattern", {"rationale": "A hypothetical.", "question_pattern": "What-If"}, "what_if"),
    ("dependency", {"rationale": "Needs nothing before it.", "dependency_type": "standalone"}, None),
    ("pattern", {"rationale": "Asks for a mechanism."}, None),
])
def test_structured_labels(recor: AuditSet, kind: str, reply: dict, label: str | None) -> None:
    item = conversation(recor, "drones:drones:ex_3025")[2]
    llm, _ = scripted(json.dumps(reply), schema=True)
    v = judge_turn(llm, kind, item)
    assert v.label == label and v.score is None and v.rationale == reply["rationale"]
    if label is None:
        assert v.error.startswith("unparseable:")
        assert ("'standalone' is not one of" in v.error) if "standalone" in json.dumps(reply) else "names no" in v.error


@pytest.mark.parametrize(("kind", "reply", "label"), [
    ("dependency", "It continues the battery topic without pointing back.\nDependency type: continuation",
     "continuation"),
    ("dependency", "'those' needs the earlier turn.\nDependency type: **Coreference**", "coreference"),
    ("dependency", "The user turns to regulations.\nLabel: topic shift.", "topic_shift"),
    ("pattern", "It wants a yes or no.\nQuestion pattern: confirm (checks what the user understood)", "confirm"),
    ("pattern", "Asks what a term means.\nQuestion pattern: what", "what"),
    ("pattern", 'Sure! {"rationale": "Asks for cases.", "question_pattern": "example"} Done.', "example"),
    ("dependency", "Could be coreference or continuation.\nDependency type: coreference or continuation", None),
    ("dependency", "This is clearly coreference.\nI hope that helps.", None),
    ("pattern", "Question pattern: speculation", None),
])
def test_free_text_labels(recor: AuditSet, kind: str, reply: str, label: str | None) -> None:
    item = conversation(recor, "drones:drones:ex_3025")[2]
    llm, _ = scripted(reply)
    v = judge_turn(llm, kind, item)
    assert v.label == label and (v.error is None) == (label is not None)
    if label is not None:  # the reasoning without the label line
        assert v.rationale == ("Asks for cases." if "{" in reply else reply.split("\n")[0])


@pytest.mark.parametrize(("text", "labels", "expected"), [
    ("topic_shift", DEPENDENCY_LABELS, "topic_shift"),
    ("Topic shift", DEPENDENCY_LABELS, "topic_shift"),  # decision: case and separators do not matter
    ("SELF-CONTAINED", DEPENDENCY_LABELS, "self_contained"),
    ('"more detail"', PATTERN_LABELS, "more_detail"),
    ("what if", PATTERN_LABELS, "what_if"),  # "what" inside "what if" does not count
    ("topicshift", DEPENDENCY_LABELS, None),
    ("why or how", PATTERN_LABELS, None),
    (None, PATTERN_LABELS, None),
])
def test_match_label(text: str | None, labels: tuple[str, ...], expected: str | None) -> None:
    assert match_label(text, labels) == expected


# -- distributions ------------------------------------------------------------------------------------------------
def test_normalized_entropy() -> None:
    assert normalized_entropy([5] * 6, 6) == pytest.approx(1.0)
    assert normalized_entropy(dict.fromkeys(PATTERN_LABELS, 3), 9) == pytest.approx(1.0)
    assert normalized_entropy([7, 0, 0], 6) == 0.0
    assert normalized_entropy([4, 4], 6) == pytest.approx(math.log(2) / math.log(6))
    assert normalized_entropy([4, 4], 2) == pytest.approx(1.0)  # the label set, not the observed labels, sets k
    assert normalized_entropy([0, 0], 6) is None and normalized_entropy([], 6) is None
    # RECOR's own figures come out of its counts with this normalisation
    assert round(normalized_entropy(RECOR_DEPENDENCY_COUNTS, 6), 2) == RECOR_DEPENDENCY_ENTROPY
    assert round(normalized_entropy(RECOR_PATTERN_COUNTS, 9), 2) == RECOR_PATTERN_ENTROPY
    with pytest.raises(ValueError, match="at least 2"):
        normalized_entropy([3], 1)
    with pytest.raises(ValueError, match="only k=2"):
        normalized_entropy([1, 1, 1], 2)
    with pytest.raises(ValueError, match="negative"):
        normalized_entropy([2, -1], 6)


def verdict(label: str | None, error: str | None = None) -> Verdict:
    return Verdict("t", "fake:fake", "dependency_type", None, label, "", "", error, {})


def test_label_distribution() -> None:
    vs = [verdict("coreference")] * 3 + [verdict("continuation"),
                                         verdict(None, "unparseable: 'standalone' is not one of the labels"),
                                         verdict(None, "call failed: timeout")]
    dist = label_distribution(vs, DEPENDENCY_LABELS, "convrag")  # H / log of the label set (authors: apart)
    assert dist["counts"] == {"coreference": 3, "ellipsis": 0, "substitution": 0, "continuation": 1,
                              "topic_shift": 0, "self_contained": 0}
    assert dist["shares"]["coreference"] == 0.75 and dist["shares"]["continuation"] == 0.25
    assert (dist["parsed"], dist["unparseable"], dist["errors"]) == (4, 2, {"unparseable": 1, "call failed": 1})
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))  # 0.5623 nats
    assert dist["entropy"] == pytest.approx(h / math.log(6)) == pytest.approx(0.3138, abs=1e-4)
    empty = label_distribution([verdict(None, "call failed: x")], PATTERN_LABELS, "convrag")
    assert (empty["parsed"], empty["shares"], empty["entropy"], empty["unparseable"]) == (0, {}, None, 1)
    with pytest.raises(ValueError, match="not in the label set"):
        label_distribution([verdict("why")], DEPENDENCY_LABELS)

