"""Missed-relevant estimator (convrag.judging.pooling / convrag.judging.missed).

Validated where the truth is known: StratRAG built from the HotpotQA sample labels every pool document (2 gold,
the rest not relevant). Oracle judges built from the complete labels must find nothing missing; with one gold
document hidden from the qrels of every turn they must find the hidden ones; noisy oracles must degrade. Unit
tests cover the pool union, failures, the suspected-qrels file, Kendall's tau and the LLM judge's reading of
scripted replies.
"""

from __future__ import annotations

import dataclasses
import random
import re
from pathlib import Path

import pytest

from convrag.cli import main
from convrag.core.errors import ConvragError
from convrag.judging.items import AuditDoc, AuditItem, AuditSet, load_items
from convrag.judging.missed import (
    CALIBRATION,
    MissedReport,
    TurnEstimate,
    check_estimate,
    estimate_missed,
    rescore,
    write_suspected_qrels,
)
from convrag.judging.pooling import (
    POOLED,
    LLMRelevanceJudge,
    NoisyOracleJudge,
    OracleJudge,
    Pool,
    RelevanceJudge,
    history_summary,
    item_qrels,
    parse_grade,
    pool,
    pool_runs,
    relevance_verdict,
)
from convrag.judging.verdict import Verdict
from convrag.llm import LLM, RetryPolicy
from convrag.llm.backends.fake import FakeBackend
from convrag.llm.types import BackendError
from convrag.metrics.retrieval.compute import score_run
from convrag.metrics.retrieval.trec import read_qrels
from tests.conftest import DATA

HOTPOT = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"
FLIPS = (0.0, 0.1, 0.3)


@pytest.fixture(scope="module")
def strat(tmp_path_factory: pytest.TempPathFactory) -> AuditSet:
    out = tmp_path_factory.mktemp("stratrag")
    main(["build", "stratrag", "--source", str(HOTPOT), "--out", str(out)])
    return load_items(out)


@pytest.fixture(scope="module")
def pooled(strat: AuditSet) -> Pool:
    return pool(strat, ("bm25", "random"), k=10)


def hide_one_gold(audit_set: AuditSet, seed: int = 0) -> tuple[AuditSet, dict[str, set[str]]]:
    """The set with one of each turn's gold documents (seeded choice) removed from qrels and items."""
    hidden = {it.item_id: {random.Random(f"hide:{seed}:{it.item_id}").choice(sorted(g.doc_id for g in it.gold))}
              for it in audit_set.items}
    qrels = {s: {q: {d: g for d, g in rel.items() if d not in hidden.get(q, ())} for q, rel in by_q.items()}
             for s, by_q in audit_set.data.qrels.items()}
    items = [dataclasses.replace(it, gold=tuple(g for g in it.gold if g.doc_id not in hidden[it.item_id]))
             for it in audit_set.items]
    return dataclasses.replace(audit_set, items=items, data=dataclasses.replace(audit_set.data, qrels=qrels)), hidden


@pytest.fixture(scope="module")
def hidden(strat: AuditSet) -> tuple[AuditSet, dict[str, set[str]]]:
    return hide_one_gold(strat)


# --- pooling ----------------------------------------------------------------------------------------------------------
def test_pool_runs_union_ranks_and_order() -> None:
    runs = {"bm25": {"q1": {"a": 3.0, "b": 2.0, "c": 1.0}, "q2": {"e": 1.0}},
            "dense": {"q1": ["c", "d", "a"]}}
    assert pool_runs(runs, k=2) == {
        "q1": [("a", {"bm25": 1}), ("c", {"dense": 1}), ("b", {"bm25": 2}), ("d", {"dense": 2})],
        "q2": [("e", {"bm25": 1})]}
    deep = pool_runs(runs, k=3, item_ids=["q1", "q3"])
    assert deep["q1"] == [("a", {"bm25": 1, "dense": 3}), ("c", {"bm25": 3, "dense": 1}), ("b", {"bm25": 2}),
                          ("d", {"dense": 2})]
    assert deep["q3"] == []


def test_pool_over_stratrag_turn_pools(strat: AuditSet, pooled: Pool) -> None:
    assert len(strat.items) == 30 and set(pooled) == {it.item_id for it in strat.items}
    assert (pooled.k, pooled.strategy, pooled.retrievers) == (10, "baseline", ("bm25", "random"))
    for it in strat.items:
        entries = pooled[it.item_id]
        assert {d for d, _ in entries} <= set(it.pool)  # StratRAG searches each turn's own 15-document pool
        assert 10 <= len(entries) <= 15
        for name, run in pooled.runs.items():
            ranked = list(run[it.item_id])
            assert len(ranked) == 10
            assert {d: r[name] for d, r in entries if name in r} == {d: i + 1 for i, d in enumerate(ranked)}
    with pytest.raises(ValueError, match="distinct"):
        pool(strat, ("bm25", "bm25"))


# --- the judges -------------------------------------------------------------------------------------------------------
def test_oracle_judges(strat: AuditSet) -> None:
    full = item_qrels(strat)
    it = strat.items[0]
    gold, other = it.gold[0], strat.document(it, next(d for d in it.pool if d not in full[it.item_id]))
    oracle = OracleJudge(full)
    assert (oracle.grade(it, gold), oracle.grade(it, other)) == (3, 0)
    v = oracle.verdict(it, gold)
    assert (v.item_id, v.judge, v.dimension, v.score, v.label, v.error) == (it.item_id, "oracle", POOLED, 3.0,
                                                                            "answers", None)
    assert v.extra["doc_id"] == gold.doc_id
    with pytest.raises(ValueError):
        NoisyOracleJudge(full, 1.5)
    docs = [(i, strat.document(i, d)) for i in strat.items for d in i.pool]
    a = [NoisyOracleJudge(full, 0.3, seed=1).grade(i, d) for i, d in docs]
    assert a == [NoisyOracleJudge(full, 0.3, seed=1).grade(i, d) for i, d in reversed(docs)][::-1]  # order-free
    assert a != [NoisyOracleJudge(full, 0.3, seed=2).grade(i, d) for i, d in docs]
    flips = [NoisyOracleJudge(full, 0.3, seed=1).verdict(i, d).extra["flipped"] for i, d in docs]
    assert 0.25 < sum(flips) / len(flips) < 0.35  # 450 seeded draws
    assert all((g == 3) == ((full[i.item_id].get(d.doc_id, 0) > 0) != f)
               for (i, d), g, f in zip(docs, a, flips, strict=True))


# --- validation where the truth is known ------------------------------------------------------------------------------
def test_oracle_finds_nothing_missing_with_complete_labels(strat: AuditSet, pooled: Pool) -> None:
    report = estimate_missed(strat, pooled, OracleJudge(item_qrels(strat)))
    assert len(report.turns) == 30 and all(t.n_new == 0 for t in report.turns)
    assert report.mean_new == 0.0 and report.share_with_new == 0.0 and report.mean_sparsity == 0.0
    assert sum(t.candidates for t in report.turns) == sum(len(v) for v in pooled.values()) - sum(
        sum(d in {g.doc_id for g in it.gold} for d, _ in pooled[it.item_id]) for it in strat.items)
    cal = report.calibration
    assert (cal.positives, cal.sensitivity, cal.negatives, cal.specificity) == (60, 1.0, 0, None)
    assert cal.measured.startswith("sensitivity only")
    assert report.failures == {} and report.pool == {"k": 10, "retrievers": ["bm25", "random"],
                                                     "strategy": "baseline"}
    assert {v.dimension for v in report.verdicts} == {POOLED, CALIBRATION}
    assert all(v.extra["official_grade"] is None for v in report.verdicts if v.dimension == POOLED)


def test_oracle_finds_the_hidden_gold(strat: AuditSet, pooled: Pool, hidden: tuple) -> None:
    reduced, truth = hidden
    oracle = OracleJudge(item_qrels(strat))  # knows the full truth
    report = estimate_missed(reduced, pooled, oracle)
    check = check_estimate(report, pooled, truth)
    print(f"\nk=10 oracle: found {check.found}, correct {check.correct}, hidden {check.missing}, "
          f"hidden in pool {check.missing_pooled}: precision {check.precision}, recall over pooled hidden "
          f"{check.recall_pooled}, recall over all hidden {check.recall}")
    assert check.precision == 1.0 and check.recall_pooled == 1.0
    assert check.missing == 30 and report.suspected == {q: {d: 3 for d in v} for q, v in truth.items()
                                                        if v & {d for d, _ in pooled[q]}}
    assert report.mean_sparsity == pytest.approx(0.5 * check.missing_pooled / 30)  # 1 of 2 relevant hidden
    assert report.calibration.sensitivity == 1.0 and report.calibration.positives == 30
    # a shallow pool misses some hidden documents: recall over all of them drops, over the pooled ones stays 1
    shallow = pool_runs(pooled.runs, k=2, item_ids=list(pooled))
    check = check_estimate(estimate_missed(reduced, shallow, oracle), shallow, truth)
    print(f"k=2 oracle: hidden in pool {check.missing_pooled}/{check.missing}: precision {check.precision}, "
          f"recall over pooled hidden {check.recall_pooled}, recall over all hidden {check.recall:.3f}")
    assert check.precision == 1.0 and check.recall_pooled == 1.0
    assert check.missing_pooled < check.missing and check.recall == pytest.approx(check.missing_pooled / 30)


def test_noisy_oracle_degrades(strat: AuditSet, pooled: Pool, hidden: tuple) -> None:
    reduced, truth = hidden
    full = item_qrels(strat)
    figures: dict[float, list[tuple]] = {}
    for flip in FLIPS:
        for seed in range(5):
            report = estimate_missed(reduced, pooled, NoisyOracleJudge(full, flip, seed=seed))
            check = check_estimate(report, pooled, truth)
            figures.setdefault(flip, []).append((check.precision, check.recall_pooled, report.calibration.sensitivity,
                                                 check.found - check.correct, report.mean_sparsity))
    print("\nflip  seed-0: precision recall(pooled) sensitivity false-missed mean-s | mean of seeds 0-4")
    for flip, rows in figures.items():
        mean = [sum(r[i] for r in rows) / len(rows) for i in range(5)]
        print(f"{flip:.1f}  {rows[0][0]:.3f} {rows[0][1]:.3f} {rows[0][2]:.3f} {rows[0][3]:3d} {rows[0][4]:.3f} | "
              + " ".join(f"{x:.3f}" for x in mean))
    first = {f: rows[0] for f, rows in figures.items()}
    assert first[0.0] == (1.0, 1.0, 1.0, 0, 0.5)
    assert first[0.3][0] < first[0.1][0] < first[0.0][0]  # precision
    assert first[0.3][2] < first[0.1][2] < first[0.0][2]  # sensitivity
    assert 0 < first[0.1][3] < first[0.3][3]  # false "missed" documents appear, more with more noise
    assert first[0.3][4] > first[0.1][4] > 0.5  # s inflated by false positives
    means = {f: [sum(r[i] for r in rows) / len(rows) for i in range(5)] for f, rows in figures.items()}
    for i in (0, 1, 2):  # precision, recall over pooled hidden, sensitivity: monotone on average
        assert means[0.3][i] < means[0.1][i] < means[0.0][i] == 1.0


def test_rescore_with_augmented_qrels_restores_full_scores(strat: AuditSet, pooled: Pool, hidden: tuple) -> None:
    reduced, truth = hidden
    full = item_qrels(strat)
    report = estimate_missed(reduced, pooled, OracleJudge(full))
    measures = ("nDCG@10", "Recall@10", "P@5", "MRR")
    table = rescore(reduced, pooled, report, measures)
    truth_table = rescore(strat, pooled, estimate_missed(strat, pooled, OracleJudge(full)), measures)
    print("\n" + table.markdown())
    assert table.suspected == 30 and table.systems == ["bm25", "random"]
    for s in table.systems:
        assert table.augmented[s].scores == truth_table.official[s].scores
        assert table.augmented[s].scores == score_run(pooled.runs[s], full, measures=list(measures)).scores
        assert table.official[s].scores != table.augmented[s].scores
    assert table.ranking("official", "nDCG@10") == table.ranking("augmented", "nDCG@10") == {"bm25": 1, "random": 2}
    assert table.tau["nDCG@10"] == 1.0
    # a shallow pool: turns whose hidden document is pooled score exactly as under the full labels
    shallow = pool_runs(pooled.runs, k=2, item_ids=list(pooled))
    part = rescore(reduced, pooled, estimate_missed(reduced, shallow, OracleJudge(full)), measures)
    covered = [q for q, v in truth.items() if v & {d for d, _ in shallow[q]}]
    assert 0 < len(covered) < 30
    for s in part.systems:
        full_scores = score_run(pooled.runs[s], full, measures=list(measures)).per_query
        assert all(part.augmented[s].per_query[q] == full_scores[q] for q in covered)
    # retriever specs are run here, to the deepest cut-off, with the pool's query strategy
    again = rescore(reduced, ["bm25", "random"], report, measures)
    assert {s: r.scores for s, r in again.augmented.items()} == {s: r.scores for s, r in table.augmented.items()}


def test_kendall_tau_on_a_hand_made_ranking_change(strat: AuditSet) -> None:
    it = strat.items[0]
    one = dataclasses.replace(strat, items=[it])
    a, b = sorted(g.doc_id for g in it.gold)
    x, y, z, w = [d for d in it.pool if d not in (a, b)][:4]
    report = MissedReport("hand", 2, [TurnEstimate(it.item_id, it.domain, 2, 5, 3, judged=3, new={x: 3})], None,
                          [], {})
    runs = {"A": {it.item_id: [y, a, x]}, "B": {it.item_id: [x, y, a]}, "C": {it.item_id: [y, z, w, a]}}
    table = rescore(one, runs, report, ("MRR",))
    assert {s: r.scores["MRR"] for s, r in table.official.items()} == pytest.approx({"A": 1 / 2, "B": 1 / 3,
                                                                                      "C": 1 / 4})
    assert {s: r.scores["MRR"] for s, r in table.augmented.items()} == pytest.approx({"A": 1 / 2, "B": 1.0,
                                                                                       "C": 1 / 4})
    assert table.ranking("official", "MRR") == {"A": 1, "B": 2, "C": 3}
    assert table.ranking("augmented", "MRR") == {"A": 2, "B": 1, "C": 3}
    assert table.tau["MRR"] == pytest.approx(1 / 3)  # one discordant pair of three
    assert table.rows()[1] == {"system": "B", "MRR": pytest.approx(1 / 3), "MRR augmented": 1.0, "MRR rank": 2,
                               "MRR rank augmented": 1}
    assert "Kendall's tau" in table.markdown() and "0.333" in table.markdown()
    assert rescore(one, {"A": runs["A"]}, report, ("MRR",)).tau["MRR"] is None  # one system: undefined


# --- failures, calibration with negatives, the qrels file -------------------------------------------------------------
class FlakyJudge(RelevanceJudge):
    """Raises for ``boom`` documents, gives no readable grade for ``mute`` ones, else grades 3 / 0 by ``good``."""

    name = "flaky"

    def __init__(self, boom: set[str], mute: set[str], good: set[str]) -> None:
        self.boom, self.mute, self.good = boom, mute, good

    def verdict(self, item: AuditItem, doc: AuditDoc, dimension: str = POOLED) -> Verdict:
        if doc.doc_id in self.boom:
            raise RuntimeError("connection reset")
        if doc.doc_id in self.mute:
            return relevance_verdict(item, doc, self.name, dimension, None, "", "I cannot tell.",
                                     "unparseable: no grade")
        return relevance_verdict(item, doc, self.name, dimension, 3 if doc.doc_id in self.good else 0, "", "", None)


def test_failures_are_counted_and_excluded(strat: AuditSet) -> None:
    one, two = strat.items[:2]
    sub = dataclasses.replace(strat, items=[one, two])
    p1 = [d for d in one.pool if d not in {g.doc_id for g in one.gold}][:4]
    p2 = [d for d in two.pool if d not in {g.doc_id for g in two.gold}][:2]
    pooled = {one.item_id: [(d, {"bm25": i + 1}) for i, d in enumerate(p1)],
              two.item_id: [(d, {"bm25": i + 1}) for i, d in enumerate(p2)]}
    judge = FlakyJudge(boom={p1[0], p2[0], one.gold[0].doc_id}, mute={p1[1], p2[1]},
                       good={p1[2]} | {g.doc_id for g in one.gold + two.gold})
    report = estimate_missed(sub, pooled, judge)
    t1, t2 = report.turns
    assert (t1.candidates, t1.judged, t1.failed, t1.new) == (4, 2, 2, {p1[2]: 3})
    assert (t2.candidates, t2.judged, t2.failed, t2.counted) == (2, 0, 2, False)  # every candidate failed
    assert report.failures == {"call failed": 3, "unparseable": 2}
    assert report.turns_without_verdict == 1 and report.mean_new == 1.0 and report.share_with_new == 1.0
    assert report.mean_sparsity == pytest.approx(1 / 3)  # turn 2 excluded, not counted as 0
    assert (report.calibration.positives, report.calibration.failed, report.calibration.sensitivity) == (3, 1, 1.0)
    failed = [v for v in report.verdicts if v.score is None]
    assert len(failed) == 5 and all(v.error for v in failed)
    raised = next(v for v in failed if v.extra["doc_id"] == p1[0])
    assert raised.error.startswith("call failed: ") and "connection reset" in raised.error
    assert raised.extra["ranks"] == {"bm25": 1} and raised.judge == "flaky"
    assert report.summary()["failed"] == 4 and report.summary()["turns_counted"] == 1


def test_explicit_negatives_give_specificity(strat: AuditSet) -> None:
    it = strat.items[0]
    negatives = [d for d in it.pool if d not in {g.doc_id for g in it.gold}][:3]
    qrels = {s: {q: dict(r) for q, r in by_q.items()} for s, by_q in strat.data.qrels.items()}
    qrels[it.domain][it.item_id].update({d: 0 for d in negatives})
    sub = dataclasses.replace(strat, items=[it], data=dataclasses.replace(strat.data, qrels=qrels))
    pooled = {it.item_id: [(d, {"bm25": i + 1}) for i, d in enumerate(it.pool[:8])]}
    report = estimate_missed(sub, pooled, OracleJudge(item_qrels(strat)))
    pooled_negatives = {d for d, _ in pooled[it.item_id]} & set(negatives)
    labelled = set(qrels[it.domain][it.item_id])
    assert report.turns[0].candidates == sum(d not in labelled for d in it.pool[:8]) < 8 - len(pooled_negatives)
    cal = report.calibration
    assert (cal.negatives, cal.specificity, cal.sensitivity, cal.kappa) == (3, 1.0, 1.0, 1.0)
    assert cal.measured.startswith("sensitivity and specificity")
    noisy = estimate_missed(sub, pooled, FlakyJudge(set(), set(), good=set(negatives[:1]) | {it.gold[0].doc_id}))
    assert (noisy.calibration.specificity, noisy.calibration.sensitivity) == (pytest.approx(2 / 3), 0.5)
    assert noisy.calibration.kappa == pytest.approx(1 / 6)  # observed 3/5 against 13/25 by chance
    assert estimate_missed(sub, pooled, OracleJudge(item_qrels(strat)), calibrate=False).calibration is None
    with pytest.raises(ConvragError, match="not in the pool"):
        estimate_missed(strat, pooled, OracleJudge({}))


def test_suspected_qrels_file(strat: AuditSet, pooled: Pool, hidden: tuple, tmp_path: Path) -> None:
    reduced, truth = hidden
    report = estimate_missed(reduced, pooled, OracleJudge(item_qrels(strat)))
    path = tmp_path / "suspected-qrels.txt"
    assert write_suspected_qrels(report, path) == 30
    lines = path.read_text().splitlines()
    assert len(lines) == 30 and all(re.fullmatch(r"\S+ 0 \S+ [0-3]", line) for line in lines)
    assert [line.split()[0] for line in lines] == [it.item_id for it in reduced.items]  # audit order
    assert read_qrels(path) == {q: {d: 3 for d in v} for q, v in truth.items()}
    qualified = MissedReport("hand", 2, [TurnEstimate("q1", "fiqa", 1, 3, 2, 2, 0, {"d1": 2, "d2": 3})], None, [],
                             {}, written_ids={("q1", "d1"): "fiqa:d1"})
    assert write_suspected_qrels(qualified, tmp_path / "q.txt") == 2
    assert (tmp_path / "q.txt").read_text() == "q1 0 fiqa:d1 2\nq1 0 d2 3\n"


# --- the LLM judge with scripted replies ------------------------------------------------------------------------------
ITEM = AuditItem(item_id="c7:3", domain="", conversation_id="c7", turn=3, query="And when did it open?",
                 history=(("user", "Which museum did Frank Gehry design in Bilbao?"),
                          ("assistant", "The Guggenheim Museum Bilbao."),
                          ("user", "Is it on the river?"), ("assistant", "Yes, it sits on the Nervion.")),
                 gold=())
DOC = AuditDoc("d42", "Guggenheim Museum Bilbao", "The museum, designed by Frank Gehry, was inaugurated on "
               "18 October 1997 by King Juan Carlos I.")

REPLIES = {
    "plain": ("The user asks for the opening date of the Bilbao Guggenheim. The document gives the inauguration "
              "date, 18 October 1997, so it answers the question.\nRating: 3", 3, None),
    "bold": ("**Reasoning:** The passage is about the museum's architect but gives no date at all.\n**Rating:** 1",
             1, None),
    "grade label": ("It names the museum and its opening year, which is what was asked.\nGrade: 3", 3, None),
    "two ratings": ("At first sight only the architect is covered. Rating: 1\nLooking again, the second sentence "
                    "states the inauguration date.\nRating: 3", 3, None),
    "json with chatter": ('Here is my assessment:\n{"rationale": "The text states when the museum was inaugurated.",'
                          ' "grade": 3}\nLet me know if you need more.', 3, None),
    "rating of 7": ("The document fully settles the question.\nRating: 7", None, "unparseable"),
    "half grade": ("Partly useful: the year is there, the month is not.\nRating: 2.5", None, "unparseable"),
    "prose only": ("This passage discusses the 2 wings the architect added in 1997 and is clearly helpful for the "
                   "user.", None, "unparseable"),
    "json grade out of range": ('{"rationale": "Answers it.", "grade": 4}', None, "unparseable"),
}


def fake_llm(*replies: str | BaseException, schema: bool = False) -> tuple[LLM, FakeBackend]:
    backend = FakeBackend(script=list(replies), supports_schema=schema)
    return LLM(backend, cache=False, retry=RetryPolicy(max_retries=0)), backend


@pytest.mark.parametrize("case", list(REPLIES))
def test_llm_judge_reads_free_text_replies(case: str) -> None:
    reply, grade, error = REPLIES[case]
    llm, _ = fake_llm(reply)
    v = LLMRelevanceJudge(llm).verdict(ITEM, DOC)
    assert (v.item_id, v.judge, v.dimension, v.raw, v.extra) == ("c7:3", "fake:fake", POOLED, reply, {"doc_id": "d42"})
    if grade is None:
        assert v.score is None and v.label is None and v.error.startswith(error)
    else:
        assert v.score == grade and v.label == ("related", "partial", "answers")[grade - 1] and v.error is None
        assert v.rationale and reply.splitlines()[-1] not in v.rationale and "{" not in v.rationale
    assert parse_grade(reply) == grade


def test_llm_judge_prompt_and_params() -> None:
    llm, backend = fake_llm(REPLIES["plain"][0])
    judge = LLMRelevanceJudge(llm, history_messages=3, history_chars=20)
    assert judge.grade(ITEM, DOC) == 3
    call = backend.calls[0]
    assert call["params"].temperature == 0.0 and call["json_schema"] is None
    text = "\n".join(m["content"] for m in call["messages"])
    assert "Latest question: And when did it open?" in text
    assert "(1 earlier messages left out)" in text and "Assistant: The Guggenheim ..." in text
    assert "Which museum did Frank Gehry" not in text  # left out of the summary
    assert "Guggenheim Museum Bilbao\nThe museum, designed by Frank Gehry" in text and '"Rating: N"' in text
    assert history_summary(()) == ""


def test_llm_judge_structured_output_and_failures() -> None:
    llm, backend = fake_llm('{"rationale": "Gives the inauguration date asked for.", "grade": 3}', schema=True)
    v = LLMRelevanceJudge(llm).verdict(ITEM, DOC, dimension=CALIBRATION)
    assert (v.score, v.label, v.rationale, v.dimension) == (3.0, "answers", "Gives the inauguration date asked for.",
                                                            CALIBRATION)
    assert backend.calls[0]["json_schema"]["properties"]["grade"]["maximum"] == 3
    bad = '{"rationale": "Very relevant.", "grade": 5}'
    llm, _ = fake_llm(bad, bad, bad, schema=True)  # every re-ask gives an out-of-range grade
    v = LLMRelevanceJudge(llm).verdict(ITEM, DOC)
    assert v.score is None and v.error.startswith("unparseable") and v.raw == bad
    llm, _ = fake_llm(BackendError("HTTP 500 from the judge server"))
    v = LLMRelevanceJudge(llm).verdict(ITEM, DOC)
    assert v.score is None and v.error.startswith("call failed") and "HTTP 500" in v.error


@pytest.mark.slow
def test_default_pool_with_dense_retriever(strat: AuditSet) -> None:
    """The default pool (bm25 + the shipped MiniLM dense retriever): an oracle still finds nothing missing."""
    pooled = pool(strat)
    assert pooled.retrievers == ("bm25", "dense")
    assert any(set(r) == {"bm25", "dense"} for docs in pooled.values() for _, r in docs)
    report = estimate_missed(strat, pooled, OracleJudge(item_qrels(strat)))
    assert report.mean_new == 0.0 and report.calibration.sensitivity == 1.0
