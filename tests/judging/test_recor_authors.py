"""RECOR's judges under the two profiles, where the authors' code (``authors``, the default) and convrag's earlier
readings (``convrag``) diverge: naturalness over the whole conversation or the user's turns, quoted evidence kept
or not asked, dependency context of two turns or every turn, entropy over the labels observed or the label set.
Hand-made conversations and label counts; entropies computed by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import convrag.audit.runner
from convrag.benchmarks.recor.judges_tables import (
    RECOR_DEPENDENCY_COUNTS,
    RECOR_PATTERN_COUNTS,
    apply_profile,
    domain_table,
    label_distribution,
)
from convrag.builders.profile import EvaluationProfile
from convrag.cli import main
from convrag.core.errors import ConvragError
from convrag.evaluation.data import BenchmarkData
from convrag.judging.items import AuditDoc, AuditItem, AuditSet
from convrag.judging.recor import DEPENDENCY_LABELS, PATTERN_LABELS, judge_conversation, judge_turn
from convrag.judging.recor_profile import EVIDENCE_FIELDS, context, observed_entropy, profile_entropy
from convrag.judging.verdict import Verdict
from convrag.llm import LLM, RetryPolicy
from convrag.llm.backends.fake import FakeBackend
from tests.conftest import DATA

# -- a hand-made four-turn conversation about sourdough --------------------------------------------------------
DOCS = (AuditDoc("sd-1", "Sourdough starter", "A sourdough starter is flour and water fermented by wild yeasts and "
                 "lactic acid bacteria; fed daily, it doubles in four to eight hours at room temperature."),
        AuditDoc("sd-2", "Cold retard", "Proofing shaped dough in the fridge overnight slows the yeast, lets acids "
                 "build up and gives a tangier loaf with a blistered crust."))
LONG_REPLY = ("Yes. Lactic acid bacteria make most of the sour taste while the yeasts make the gas. " * 9).strip()
TURNS = (("What actually is a sourdough starter?", "Flour and water fermented by wild yeasts and bacteria.",
          DOCS[:1]),
         ("ok so how often do I have to feed it?", "Daily at room temperature; it should double in 4-8 hours.",
          DOCS[:1]),
         ("Is it the bacteria that make it sour?", LONG_REPLY, DOCS[:1]),
         ("and does leaving the dough in the fridge change that?", "Yes: a cold overnight proof makes it tangier.",
          DOCS[1:]))
ITEMS = tuple(AuditItem(item_id=f"sd:{n}", domain="baking", conversation_id="sd", turn=n, query=q,
                        history=tuple(m for prev, ans, _ in TURNS[:n - 1]
                                      for m in (("user", prev), ("assistant", ans))),
                        gold=gold, answer=answer) for n, (q, answer, gold) in enumerate(TURNS, 1))
AUDIT = AuditSet(folder=Path("hand-made"), benchmark="mtr-bench", items=list(ITEMS),
                 documents={"baking": {d.doc_id: d for d in DOCS}},
                 data=BenchmarkData(split="test", subsets=["baking"], turns=[], corpus={}, corpus_kind={}, qrels={}),
                 profile=EvaluationProfile(turns="queries", qrels="qrels", corpus={"corpus": "corpus"}))

FREE_TEXT_REPLY = """Both speakers sound relaxed and each question picks up the previous reply; the fridge question
is a fair follow-on. The replies stay close to the two sources.

Natural phrases: "ok so how often do I have to feed it?"; "Yes: a cold overnight proof"
Unnatural phrases: none
Good connections: "turn 3 builds on the bacteria named in turn 1"
Weak connections: none
Unclear references: "that" in turn 4
Aspects covered: "what a starter is"; "feeding"; "sourness"; "cold proofing"
Repeated questions: none
Weak questions: "What actually is a sourdough starter?"
Supported claims: "doubles in four to eight hours"
Unsupported claims: none
Made up content: none

Naturalness: 4
Turn coherence: 5
Question quality: 4
Groundedness: 5"""


def scripted(*replies: str, schema: bool = False) -> tuple[LLM, FakeBackend]:
    backend = FakeBackend(script=list(replies), supports_schema=schema)
    return LLM(backend, cache=False, retry=RetryPolicy(max_retries=0), structured_attempts=1), backend


def user_text(backend: FakeBackend, call: int = 0) -> str:
    return "\n".join(m["content"] for m in backend.calls[call]["messages"] if m["role"] == "user")


# -- naturalness scope and conversation evidence ----------------------------------------------------------------
def test_naturalness_is_judged_on_the_whole_conversation_only_under_authors() -> None:
    llm, backend = scripted(FREE_TEXT_REPLY, FREE_TEXT_REPLY)
    authors = judge_conversation(llm, ITEMS, AUDIT)  # the default
    judge_conversation(llm, ITEMS, AUDIT, "convrag")
    new, old = user_text(backend, 0), user_text(backend, 1)
    assert "the whole conversation, the user's questions and the assistant's replies" in new
    assert "the wording of the user's turns" not in new
    assert "judge only the wording of the user's turns" in old and "whole conversation" not in old
    assert {v.extra["profile"] for v in authors} == {"authors"}
    with pytest.raises(ConvragError, match="unknown RECOR judge profile"):
        judge_conversation(llm, ITEMS, AUDIT, "paper")


def test_free_text_evidence_is_kept_per_dimension_under_authors_only() -> None:
    llm, backend = scripted(FREE_TEXT_REPLY, FREE_TEXT_REPLY)
    verdicts = {v.dimension: v for v in judge_conversation(llm, ITEMS, AUDIT)}
    assert [v.score for v in verdicts.values()] == [4.0, 5.0, 4.0, 5.0]
    assert 'Natural phrases: "..."; "..."' in user_text(backend, 0)
    assert verdicts["naturalness"].extra["evidence"] == {
        "natural_phrases": ["ok so how often do I have to feed it?", "Yes: a cold overnight proof"],
        "unnatural_phrases": []}
    assert verdicts["turn_coherence"].extra["evidence"]["unclear_references"] == ["that"]
    assert verdicts["question_quality"].extra["evidence"]["aspects_covered"] == [
        "what a starter is", "feeding", "sourness", "cold proofing"]
    assert set(verdicts["groundedness"].extra["evidence"]) == {n for n, _ in EVIDENCE_FIELDS["groundedness"]}
    rationale = verdicts["naturalness"].rationale  # the evidence and score lines are not the reasoning
    assert rationale.startswith("Both speakers") and "Natural phrases" not in rationale
    assert "Groundedness" not in rationale
    old = judge_conversation(llm, ITEMS, AUDIT, "convrag")
    assert all("evidence" not in v.extra for v in old) and "Natural phrases" not in user_text(backend, 1)
    assert [c["params"].max_tokens for c in backend.calls] == [1000, 400]  # room for eleven evidence lists
    assert [v.score for v in old] == [4.0, 5.0, 4.0, 5.0]  # the extra lines do not disturb the scores


def test_structured_evidence_schema_and_reply() -> None:
    reply = json.dumps({
        "rationale": "Casual on both sides; turn 4 leans on 'that'.",
        "evidence": {"naturalness": {"natural_phrases": ["ok so"], "unnatural_phrases": []},
                     "turn_coherence": {"good_connections": ["3 -> 4"], "weak_connections": [],
                                        "unclear_references": ["that"]},
                     "question_quality": {"aspects_covered": ["feeding"], "repeated_questions": [],
                                          "weak_questions": []},
                     "groundedness": {"supported_claims": ["4-8 hours"], "unsupported_claims": ["most of the sour"],
                                      "made_up_content": []}},
        "scores": {"naturalness": 5, "turn_coherence": 4, "question_quality": 3, "groundedness": 4}})
    llm, backend = scripted(reply, schema=True)
    verdicts = {v.dimension: v for v in judge_conversation(llm, ITEMS, AUDIT)}
    schema = backend.calls[0]["json_schema"]
    assert schema["required"] == ["rationale", "evidence", "scores"]
    assert schema["properties"]["evidence"]["properties"]["groundedness"]["required"] == [
        "supported_claims", "unsupported_claims", "made_up_content"]
    assert verdicts["groundedness"].score == 4.0
    assert verdicts["groundedness"].extra["evidence"]["unsupported_claims"] == ["most of the sour"]
    assert verdicts["naturalness"].rationale.startswith("Casual on both sides")
    llm, backend = scripted(json.dumps({"rationale": "ok", "scores": {"naturalness": 5, "turn_coherence": 4,
                                                                      "question_quality": 3, "groundedness": 4}}),
                            schema=True)
    old = judge_conversation(llm, ITEMS, AUDIT, "convrag")
    assert backend.calls[0]["json_schema"]["required"] == ["rationale", "scores"]
    assert all("evidence" not in v.extra and v.error is None for v in old)


# -- turn judges: evidence and dependency context ---------------------------------------------------------------
def test_turn_judges_keep_the_quoted_evidence_under_authors() -> None:
    item = ITEMS[3]
    llm, _ = scripted('"that" points back at the sourness discussed before.\nEvidence: "change that"\n'
                      "Dependency type: coreference",
                      '{"rationale": "Asks for a consequence of a step.", "evidence": "does leaving the dough in the '
                      'fridge change", "question_pattern": "effect"}')
    dep = judge_turn(llm, "dependency", item)
    assert (dep.label, dep.extra["evidence"]) == ("coreference", "change that")
    assert dep.rationale == '"that" points back at the sourness discussed before.'
    pat = judge_turn(llm, "pattern", item)
    assert (pat.label, pat.extra["evidence"]) == ("effect", "does leaving the dough in the fridge change")
    llm, backend = scripted('{"rationale": "r", "evidence": "x", "dependency_type": "coreference"}', schema=True)
    judge_turn(llm, "dependency", item)
    assert backend.calls[0]["json_schema"]["required"] == ["rationale", "evidence", "dependency_type"]
    llm, backend = scripted("Points back.\nDependency type: coreference")
    old = judge_turn(llm, "dependency", item, "convrag")
    assert old.label == "coreference" and "evidence" not in old.extra and "Evidence:" not in user_text(backend)


def test_dependency_context_is_the_two_previous_turns_in_full_under_authors() -> None:
    item = ITEMS[3]
    llm, backend = scripted("Dependency type: coreference", "Dependency type: coreference")
    judge_turn(llm, "dependency", item)
    judge_turn(llm, "dependency", item, "convrag")
    new, old = user_text(backend, 0), user_text(backend, 1)
    assert TURNS[0][0] not in new and TURNS[0][1] not in new  # turn 1 is three turns back
    assert all(TURNS[n][0] in new for n in (1, 2)) and LONG_REPLY in new  # shown whole (RECOR's code)
    assert "at most the last 2" in new and "[...]" not in new
    assert all(TURNS[n][0] in old for n in range(3)) and LONG_REPLY not in old and "[...]" in old
    # the selection itself: from the second-to-last user message on; fewer turns than two: all of them
    assert context(item.history, "authors") == item.history[2:]
    assert context(ITEMS[1].history, "authors") == ITEMS[1].history
    assert context(item.history, "convrag") == item.history


# -- entropy: labels observed (authors) or label-set size (convrag) ---------------------------------------------
def test_entropy_divides_by_the_labels_observed_under_authors() -> None:
    # 3 coreference, 1 continuation: H = -(3/4 ln 3/4 + 1/4 ln 1/4) = 0.562335 nats
    counts = {"coreference": 3, "ellipsis": 0, "substitution": 0, "continuation": 1, "topic_shift": 0,
              "self_contained": 0}
    assert observed_entropy(counts) == pytest.approx(0.562335 / 0.693147, abs=1e-6)  # / ln 2 = 0.811278
    assert profile_entropy(counts, 6, "convrag") == pytest.approx(0.562335 / 1.791759, abs=1e-6)  # / ln 6 = 0.313845
    # a Table-31-like domain: self_contained 2, continuation 3, coreference 3 -> H = 1.082196 nats
    domain = [2, 3, 3, 0, 0, 0]
    assert profile_entropy(domain, 6, "authors") == pytest.approx(1.082196 / 1.098612, abs=1e-6)  # 0.985057
    assert profile_entropy(domain, 6, "convrag") == pytest.approx(1.082196 / 1.791759, abs=1e-6)  # 0.603985
    assert observed_entropy([5, 0, 0]) == 0.0 and observed_entropy([0, 0]) is None  # the authors' 0 for one label
    assert observed_entropy([2, 2, 2]) == pytest.approx(1.0)
    # every label observed (Tables 29 and 30): the two readings agree
    for table, k in ((RECOR_DEPENDENCY_COUNTS, 6), (RECOR_PATTERN_COUNTS, 9)):
        assert profile_entropy(table, k, "authors") == pytest.approx(profile_entropy(table, k, "convrag"))
    verdicts = [Verdict(f"t{i}", "j", "dependency_type", None, lb, "", "", None, {})
                for i, lb in enumerate(["coreference"] * 3 + ["continuation"])]
    assert label_distribution(verdicts, DEPENDENCY_LABELS)["entropy"] == pytest.approx(0.811278, abs=1e-6)
    assert label_distribution(verdicts, DEPENDENCY_LABELS, "convrag")["entropy"] == pytest.approx(0.313845, abs=1e-6)


def _slot(counts: dict[str, int], labels: tuple[str, ...]) -> dict:
    full = {lb: counts.get(lb, 0) for lb in labels}
    return {"counts": full, "unparsed": 0, "shares": {}, "normalized_entropy": None}


def _summary() -> dict:
    dep = {"self_contained": 2, "continuation": 3, "coreference": 3}
    scores = {"naturalness": {"mean": 4.5}, "turn_coherence": {"mean": 5.0}, "question_quality": {"mean": 4.0},
              "groundedness": {"mean": 4.75}}
    biology = {"overall": scores, "per_judge": {},
               "labels": {"dependency_type": {"j": _slot(dep, DEPENDENCY_LABELS)},
                          "question_pattern": {"j": _slot({"how": 4, "why": 4}, PATTERN_LABELS)}}}
    law = {"overall": {}, "per_judge": {}, "labels": {"dependency_type": {"j": _slot({"continuation": 4},
                                                                                      DEPENDENCY_LABELS)}}}
    return {"benchmarks": {"recor": {"all": {"overall": scores, "per_judge": {}, "labels": {}},
                                     "domains": {"biology": biology, "law": law}}}}


def test_summary_entropy_and_the_table_31_shape_follow_the_profile() -> None:
    authors, old = _summary(), _summary()
    apply_profile(authors, "authors")
    apply_profile(old, "convrag")
    a_bio, o_bio = (s["benchmarks"]["recor"]["domains"]["biology"]["labels"] for s in (authors, old))
    assert a_bio["dependency_type"]["j"]["normalized_entropy"] == pytest.approx(0.985057, abs=1e-6)
    assert o_bio["dependency_type"]["j"]["normalized_entropy"] == pytest.approx(0.603985, abs=1e-6)
    assert a_bio["question_pattern"]["j"]["normalized_entropy"] == pytest.approx(1.0)  # how 4, why 4: ln 2 / ln 2
    assert o_bio["question_pattern"]["j"]["normalized_entropy"] == pytest.approx(math.log(2) / math.log(9))
    assert (authors["profile"], old["profile"]) == ("authors", "convrag")
    assert authors["entropy_denominator"] == "log of the number of labels observed"
    table = domain_table(authors)
    assert "| recor / biology | 4.50 | 5.00 | 4.00 | 4.75 | 0.99 | 4.38 / 4.98 / 4.47 / 4.74 / 0.93 |" in table
    assert "| recor / law | n/a | n/a | n/a | n/a | 0.00 | 4.34 / 5.00 / 4.47 / 4.74 / 0.74 |" in table
    assert "H / log of the number of labels observed" in table
    assert "| recor / biology | 4.50 | 5.00 | 4.00 | 4.75 | 0.60 |" in domain_table(old)
    assert domain_table({"benchmarks": {"x": {"all": {}, "domains": {}}}}) == ""


# -- the command ------------------------------------------------------------------------------------------------
def _responder(messages: list[dict[str, str]]) -> str:
    text = messages[-1]["content"]
    if "Give each criterion a whole number" in text:
        return FREE_TEXT_REPLY
    if "Dependency type: <label>" in text:
        question = text.rsplit("Question to label:", 1)[1].split("Labels", 1)[0]
        label = "coreference" if " it" in question else "continuation"
        return f'The question reads on from before.\nEvidence: "it"\nDependency type: {label}'
    return 'It asks how something works.\nEvidence: "how"\nQuestion pattern: how'


@pytest.mark.parametrize("profile", ["authors", "convrag"])
def test_audit_command_records_the_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, profile: str) -> None:
    built = tmp_path / "built"
    assert main(["build", "recor", "--source", str(DATA / "recor" / "sample"), "--out", str(built)]) in (0, None)
    monkeypatch.setattr(convrag.audit.runner, "make_judges", lambda specs, cache=None, concurrency=4: [
        LLM(FakeBackend(responder=_responder), cache=False, retry=RetryPolicy(max_retries=0), spec="fake:j")])
    out = tmp_path / "audit"
    assert main(["audit", str(built), "--dimensions", "recor", "--judge", "fake:j", "--out", str(out),
                 "--no-progress", "--profile", profile]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["profile"] == profile
    rows = [json.loads(line) for line in (out / "verdicts.jsonl").read_text(encoding="utf-8").splitlines()]
    nat = [r for r in rows if r["dimension"] == "naturalness"]
    assert nat and all(r["extra"]["profile"] == profile for r in nat)
    assert all(("evidence" in r["extra"]) == (profile == "authors") for r in nat)
    dep = summary["benchmarks"]["recor"]["domains"]["biology"]["labels"]["dependency_type"]["fake:j"]
    observed = [n for n in dep["counts"].values() if n]
    expected = (observed_entropy(observed) if profile == "authors" else profile_entropy(observed, 6, "convrag"))
    assert 2 <= len(observed) < 6 and dep["normalized_entropy"] == pytest.approx(expected)  # the readings differ
    assert "## RECOR Table 31 shape" in (out / "summary.md").read_text(encoding="utf-8")
