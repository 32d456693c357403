"""SEARA pooling and judging (convrag.seara): pools, signatures, deduplicated cached judging, cost caps, failures,
pseudo-qrels files read back by convrag.metrics.retrieval.trec and scored by metrics/pr_auc, calibration, and an
oracle judge on StratRAG pools (labels complete within each pool) that must reproduce the true qrels.

Scripted judges answer with hand-written replies chosen by the (question, chunk) they are shown, malformed ones
included; they never echo the prompt.
"""

from __future__ import annotations

import re
import time
import warnings
from pathlib import Path

import pytest

from convrag.cli import main
from convrag.core.schema import QRELS
from convrag.judging.items import AuditSet, load_items
from convrag.judging.pooling import LLMRelevanceJudge, OracleJudge, item_qrels
from convrag.llm import LLM, RetryPolicy, get_llm
from convrag.llm.backends.fake import FakeBackend
from convrag.llm.types import BackendError
from convrag.metrics.retrieval.trec import read_qrels
from convrag.retrievers import get_retriever
from convrag.seara import (
    JudgeBudgetError,
    Judgment,
    PoolMismatchError,
    PseudoQrels,
    build_pool,
    calibrate,
    estimate_judging,
    judge_pool,
    read_qrels_table,
    same_pool,
    score_table,
    write_pseudo_qrels,
    write_qrels_table,
)
from tests.conftest import DATA

REPO = Path(__file__).resolve().parents[2]
HOTPOT = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"

Q1, Q2 = "When was the Eiffel Tower completed?", "Who designed the Eiffel Tower?"
QUERIES = {"q1": Q1, "q2": Q2}
COMPLETED = "The Eiffel Tower was completed in March 1889 as the entrance arch to the World's Fair in Paris."
CHUNKS = {
    "c1": COMPLETED,
    "c2": COMPLETED,  # the same text reached through another chunking
    "c3": "Paris has more than a hundred museums; the Louvre alone receives millions of visitors a year.",
    "c4": "Work on the tower's foundations began in 1887, and the structure took just over two years to build.",
    "d1": "Wrought iron was widely used in nineteenth-century bridges before steel became affordable.",
    "d2": "The tower was designed by the engineers Maurice Koechlin and Emile Nouguier of Gustave Eiffel's firm.",
    "d3": "Gustave Eiffel's company, best known for bridges and viaducts, built the tower for the 1889 fair.",
    "x1": "Bananas are an excellent source of potassium and are eaten all over the world.",
    "x2": "The tower is repainted every seven years, which needs about sixty tonnes of paint.",
    "x3": "Tickets to the top floor can be booked online up to sixty days in advance.",
}
#: (question, chunk) -> the judge's reply; a BackendError is a failed call
REPLIES = {
    (Q1, "c1"): "The document gives the completion date, March 1889, which settles the question.\nRating: 3",
    (Q1, "c3"): "This is about museums in Paris; it never says when the tower was finished.\nRating: 1",
    (Q1, "c4"): "It says the building took just over two years from 1887, so the year can be worked out, but the "
                "date is only implied.\n**Rating:** 2",
    (Q2, "d1"): "A general remark about wrought iron in bridges, unrelated to who designed the tower.\nRating: 0",
    (Q2, "d2"): "The passage names Koechlin and Nouguier as the designers.\n\nRating: 3",
    (Q2, "d3"): "It names Eiffel's company as the builder, part of the answer; the designers are not named.\n"
                "Final rating: 2",
    (Q1, "x1"): "I don't think bananas have much to do with towers, honestly.",  # no verdict line
    (Q1, "x2"): "Repainting is unrelated to the completion date.\nRating: 5",  # off the 0-3 scale
    (Q1, "x3"): BackendError("the request was rejected by the provider's content filter", kind="bad_request"),
}


def _reply(messages: list[dict[str, str]]) -> str:
    prompt = messages[-1]["content"]
    question = re.search(r"Latest question: (.*)", prompt).group(1).strip()
    found = [cid for cid, text in CHUNKS.items() if text in prompt]
    reply = REPLIES[(question, found[0])]  # identical texts (c1, c2) share one entry
    if isinstance(reply, BaseException):
        raise reply
    return reply


def fake_llm(cache: Path | bool, *, backend: FakeBackend | None = None) -> LLM:
    return LLM(backend or FakeBackend(responder=_reply), cache=cache, retry=RetryPolicy(max_retries=0), breaker=0)


class PricedBackend(FakeBackend):
    """A scripted backend billed like a hosted one (the name is not one of the free local backends)."""

    name = "openai"


#: the hand-computed case: configurations A and B, K = 2
RUNS = {"A": {"q1": ["c1", "c3"], "q2": {"d1": 0.9, "d2": 0.4}},
        "B": {"q1": ["c4", "c2"], "q2": ["d3", "d1"]}}


# --- pooling ----------------------------------------------------------------------------------------------------------
def test_pool_union_order_and_signature() -> None:
    pool = build_pool(RUNS, k=2)
    assert pool.query_ids == ("q1", "q2") and pool.configurations == ("A", "B")
    assert pool.entries == {"q1": [("c1", {"A": 1}), ("c4", {"B": 1}), ("c2", {"B": 2}), ("c3", {"A": 2})],
                            "q2": [("d1", {"A": 1, "B": 2}), ("d3", {"B": 1}), ("d2", {"A": 2})]}
    assert pool.size == 7 and pool.pairs()[:2] == [("q1", "c1"), ("q1", "c4")]
    assert pool.predictions("A") == [["c1", "c3"], ["d1", "d2"]]
    with pytest.raises(KeyError, match="not a configuration"):
        pool.predictions("C")
    sig = pool.signature
    assert re.fullmatch(r"pool-[0-9a-f]{16}", sig)
    shuffled = {"B": {"q2": ["d3", "d1"], "q1": ["c4", "c2"]}, "A": {"q2": ["d1", "d2"], "q1": ["c1", "c3"]}}
    assert build_pool(shuffled, k=2).signature == sig  # order of configurations, queries: no effect
    assert build_pool({**RUNS, "A": {**RUNS["A"], "q1": ["c1", "c3", "zz"]}}, k=2).signature == sig  # cut at k
    assert build_pool(RUNS, k=1).signature != sig
    assert build_pool({"A": RUNS["A"], "B2": RUNS["B"]}, k=2).signature != sig
    assert build_pool(RUNS, k=2, query_ids=["q1"]).signature != sig
    deeper = build_pool(RUNS, k=2, query_ids=["q2", "q1", "q9"])
    assert deeper.query_ids == ("q2", "q1", "q9") and deeper.entries["q9"] == [] and deeper.signature != sig
    for bad in ({"A": {"q1": ["c1", "c1"]}}, {}, {"": {"q1": ["c1"]}}):
        with pytest.raises(Exception, match="repeats|at least one|non-empty"):
            build_pool(bad, k=2)
    with pytest.raises(ValueError, match="positive"):
        build_pool(RUNS, k=0)


def test_same_pool_refuses_mixed_signatures() -> None:
    a, b = {"pr_auc": 0.2, "pool_signature": "pool-1/judge-x"}, {"pr_auc": 0.5, "pool_signature": "pool-1/judge-x"}
    assert same_pool({"A": a, "B": b}) == "pool-1/judge-x"
    assert score_table({"A": a, "B": b}, ("pr_auc",)) == ("pool-1/judge-x", [{"configuration": "A", "pr_auc": 0.2},
                                                                             {"configuration": "B", "pr_auc": 0.5}])
    with pytest.raises(PoolMismatchError, match="2 different pools"):
        same_pool({"A": a, "C": {"pr_auc": 0.9, "pool_signature": "pool-2/judge-x"}})
    with pytest.raises(PoolMismatchError, match="no pool signature on C"):
        score_table({"A": a, "C": {"pr_auc": 0.9, "pool_signature": None}})


# --- judging ----------------------------------------------------------------------------------------------------------
def test_judging_dedupes_counts_failures_and_caches(tmp_path: Path) -> None:
    runs = {"A": {"q1": ["c1", "x1", "x2"], "q2": ["d2"]}, "B": {"q1": ["c2", "x3", "c3"], "q2": ["d1"]}}
    pool = build_pool(runs, k=3)
    backend = FakeBackend(responder=_reply)
    printed: list[tuple[str, int]] = []
    pseudo = judge_pool(pool, QUERIES, CHUNKS, fake_llm(tmp_path, backend=backend), concurrency=3,
                        echo=lambda line: printed.append((line, len(backend.calls))))
    assert len(printed) == 1 and printed[0][1] == 0  # the estimate came before any call
    assert "8 pooled pairs, 7 unique judgments, 0 cached -> 7 calls" in printed[0][0]
    assert len(backend.calls) == 7  # c1 and c2 have one text: one call
    j = {(x.query_id, x.chunk_id): x for x in pseudo.judgments}
    assert j["q1", "c1"].key == j["q1", "c2"].key and (j["q1", "c1"].grade, j["q1", "c2"].grade) == (3, 3)
    assert "completion date" in j["q1", "c1"].rationale
    assert pseudo.qrels == {"q1": {"c1": 3, "c2": 3, "c3": 1}, "q2": {"d2": 3, "d1": 0}}  # failures left out
    assert {(x.chunk_id, x.error.split(":")[0]) for x in pseudo.failed} == {
        ("x1", "unparseable"), ("x2", "unparseable"), ("x3", "call failed")}
    assert pseudo.failures == {"unparseable": 2, "call failed": 1}
    assert pseudo.relevant("q1") == ["c1", "c2"] and pseudo.relevant("q2") == ["d2"]
    summary = pseudo.summary()
    assert (summary["pairs"], summary["unique"], summary["judged_pairs"], summary["failed_pairs"]) == (8, 7, 5, 3)
    llm = summary["llm"]
    assert llm["calls"] == 7 and llm["cache_misses"] == 7 and llm["failures"] == 3  # every judgment without a grade
    assert summary["signature"].startswith(pool.signature + "/judge-") and summary["pool"]["pairs"] == 8

    # rerun on the same cache: only the call that failed is made again (answered replies are cached, bad or not)
    again = FakeBackend(responder=_reply)
    rerun = judge_pool(pool, QUERIES, CHUNKS, fake_llm(tmp_path, backend=again), echo=None, max_calls=1)
    assert rerun.estimate.cached == 6 and rerun.estimate.calls == 1 and len(again.calls) == 1
    assert rerun.qrels == pseudo.qrels and rerun.signature == pseudo.signature
    assert rerun.llm["cache_hits"] == 6 and rerun.llm["calls"] == 1


def test_rerun_from_cache_makes_zero_calls(tmp_path: Path) -> None:
    pool = build_pool(RUNS, k=2)
    first = judge_pool(pool, QUERIES, CHUNKS, fake_llm(tmp_path / "cache"), echo=None)
    assert first.failed == [] and first.estimate.calls == 6
    backend = FakeBackend(responder=_reply)
    t0 = time.perf_counter()
    second = judge_pool(pool, QUERIES, CHUNKS, fake_llm(tmp_path / "cache", backend=backend), echo=None, max_calls=0)
    assert backend.calls == [] and second.estimate.cached == 6 and second.llm["calls"] == 0
    assert second.qrels == first.qrels and time.perf_counter() - t0 < 2


def test_cost_estimate_and_hard_cap_refuse_before_any_call(tmp_path: Path) -> None:
    pool = build_pool(RUNS, k=2)
    backend = PricedBackend(responder=_reply, model="gpt-4o-mini")
    llm = fake_llm(tmp_path, backend=backend)
    est = estimate_judging(pool, QUERIES, CHUNKS, llm)
    from convrag.seara.judge import as_doc, as_item

    judge = LLMRelevanceJudge(llm)
    texts = {(q, CHUNKS[c]) for q, c in pool.pairs()}  # 6 unique (question, text): c1 and c2 share one
    chars = sum(len(m["content"]) for q, t in texts for m in judge.messages(as_item(q, QUERIES[q]), as_doc("-", t)))
    assert (est.pairs, est.unique, est.cached, est.calls, est.attempts) == (7, 6, 0, 6, 1)
    assert (est.prompt_tokens, est.completion_tokens, est.free) == (chars // 4, 6 * 256, False)
    assert est.cost_usd == pytest.approx((chars // 4 * 0.15 + 6 * 256 * 0.60) / 1e6)
    assert est.cost_usd_bound == pytest.approx(est.cost_usd)  # free text: one attempt per judgment
    printed: list[str] = []
    with pytest.raises(JudgeBudgetError, match="6 judgments to make exceed max_calls=5"):
        judge_pool(pool, QUERIES, CHUNKS, llm, max_calls=5, echo=printed.append)
    with pytest.raises(JudgeBudgetError, match="exceeds max_cost_usd"):
        judge_pool(pool, QUERIES, CHUNKS, llm, max_cost_usd=est.cost_usd / 2, echo=printed.append)
    assert backend.calls == [] and llm.report.calls == 0 and len(printed) == 2 and "$0.00" in printed[0]
    unpriced = fake_llm(tmp_path, backend=PricedBackend(responder=_reply, model="some-new-model"))
    assert estimate_judging(pool, QUERIES, CHUNKS, unpriced).cost_usd is None
    with pytest.raises(JudgeBudgetError, match="unpriced"):
        judge_pool(pool, QUERIES, CHUNKS, unpriced, max_cost_usd=1.0, echo=None)
    # constrained decoding: the structured-output instruction is in the prompt, and up to 3 attempts are bounded
    structured = estimate_judging(pool, QUERIES, CHUNKS, fake_llm(
        tmp_path, backend=PricedBackend(responder=_reply, model="gpt-4o-mini", supports_schema=True)))
    assert structured.attempts == 3 and structured.prompt_tokens > est.prompt_tokens
    assert structured.cost_usd_bound > 3 * structured.cost_usd
    done = judge_pool(pool, QUERIES, CHUNKS, llm, max_calls=6, echo=None)
    with pytest.warns(UserWarning, match="favour its own family"):  # the circularity guard warns, never blocks
        judge_pool(build_pool({"gpt-4o-mini-rerank": RUNS["A"]}, k=2), QUERIES, CHUNKS, llm, echo=None)
    with warnings.catch_warnings():  # a name is matched as a whole token: a judge "m" is not named by "bm25"
        warnings.simplefilter("error")
        judge_pool(build_pool({"bm25": RUNS["A"]}, k=2), QUERIES, CHUNKS,
                   fake_llm(tmp_path / "m", backend=PricedBackend(responder=_reply, model="m")), echo=None)
    assert len(backend.calls) == 6 and done.llm["cost_usd"] > 0 and done.failed == []


def test_structured_replies_and_malformed_json(tmp_path: Path) -> None:
    replies = {"c1": '{"rationale": "Gives the completion date, March 1889.", "grade": 3}',
               "c4": '{"rationale": "The year can be inferred from the build time.", "grade": "two"}',
               "c3": 'Sure! {"rationale": "About museums.", "grade": 1'}

    def reply(messages: list[dict[str, str]]) -> str:
        first = next(m["content"] for m in messages if m["role"] == "user")
        return next(r for c, r in replies.items() if CHUNKS[c] in first)

    backend = FakeBackend(responder=reply, supports_schema=True)
    pool = build_pool({"A": {"q1": ["c1", "c4", "c3"]}}, k=3)
    pseudo = judge_pool(pool, QUERIES, CHUNKS, fake_llm(tmp_path, backend=backend), echo=None)
    assert pseudo.qrels == {"q1": {"c1": 3, "c3": 1}}  # the truncated object is repaired; "two" never is
    assert pseudo.summary()["estimate"]["attempts"] == 3
    assert pseudo.failures == {"unparseable": 1} and len(backend.calls) == 1 + 3 + 1


# --- files and the metric ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pr_auc():  # noqa: ANN201
    import evaluate

    return evaluate.load(str(REPO / "metrics" / "pr_auc"), "chunks")


def test_pseudo_qrels_files_round_trip_and_score(tmp_path: Path, pr_auc) -> None:  # noqa: ANN001
    import datasets

    pool = build_pool(RUNS, k=2)
    pseudo = judge_pool(pool, QUERIES, CHUNKS, fake_llm(tmp_path / "cache"), echo=None)
    truth = {"q1": {"c1": 3, "c2": 3, "c3": 1, "c4": 2}, "q2": {"d1": 0, "d2": 3, "d3": 2}}
    assert pseudo.qrels == truth
    paths = write_pseudo_qrels(pseudo, tmp_path / "out")
    assert paths["qrels"] == tmp_path / "out" / "pseudo-qrels" / "test-00000-of-00001.parquet"
    assert read_qrels(paths["trec"]) == truth and read_qrels_table(paths["qrels"]) == truth
    assert not list((tmp_path / "out").rglob("*.tmp*"))
    ds = datasets.Dataset.from_parquet(str(paths["qrels"]))
    assert list(ds.features)[:3] == list(QRELS) and ds.features["score"] == QRELS["score"]
    assert set(ds["judge"]) == {"fake:fake"} and len(ds) == 7
    assert read_qrels_table(write_qrels_table(pseudo, tmp_path / "q.jsonl", metadata=False)) == truth
    assert read_qrels_table(write_qrels_table(truth, tmp_path / "plain.parquet")) == truth

    # hand-computed: R'(q1) = 3 (c1, c2, c4), R'(q2) = 2 (d2, d3), K = 2
    sig = pseudo.signature
    qids = list(pool.query_ids)
    res = {"A": pr_auc.compute(predictions=pool.predictions("A"), qrels=read_qrels(paths["trec"]), query_ids=qids,
                               pool_signature=sig),
           "B": pr_auc.compute(predictions=pool.predictions("B"), references=pseudo.references(qids), query_ids=qids,
                               pool_signature=sig)}
    # A: micro (P, R) = (1/2, 1/5), (2/4, 2/5) -> 0.2; macro APs 1/3, (1/2)/2
    assert res["A"]["pr_auc"] == pytest.approx(0.2) and res["A"]["pr_auc_macro"] == pytest.approx((1 / 3 + 1 / 4) / 2)
    # B: micro (2/2, 2/5), (3/4, 3/5) -> 0.4 + 0.15; macro APs 2/3, 1/2
    assert res["B"]["pr_auc"] == pytest.approx(0.55) and res["B"]["pr_auc_macro"] == pytest.approx(7 / 12)
    rows = ds.select_columns(list(QRELS)).to_list()
    assert pr_auc.compute(predictions=pool.predictions("B"), qrels=rows, query_ids=qids)["pr_auc"] == pytest.approx(
        0.55)
    signature, table = score_table(res)
    assert signature == sig and [r["configuration"] for r in table] == ["A", "B"]

    # a pool without B has another signature: its scores refuse to share the table
    alone = build_pool({"A": RUNS["A"]}, k=2)
    solo = judge_pool(alone, QUERIES, CHUNKS, fake_llm(tmp_path / "cache"), echo=None)
    assert solo.estimate.calls == 0 and solo.signature != sig
    res["A alone"] = pr_auc.compute(predictions=alone.predictions("A"), references=solo.references(qids),
                                    query_ids=qids, pool_signature=solo.signature)
    with pytest.raises(PoolMismatchError, match="different pools"):
        score_table(res)


def test_calibration_on_a_hand_made_case() -> None:
    def j(q: str, c: str, grade: int | None) -> Judgment:
        return Judgment(q, c, grade, "", None if grade is not None else "unparseable: no verdict line", f"{q}{c}")

    pseudo = PseudoQrels({"judge": "scripted"}, [j("q1", "c1", 3), j("q1", "c2", 3), j("q1", "c3", 1),
                                                  j("q1", "c4", 2), j("q2", "d1", 0), j("q2", "d2", 3),
                                                  j("q2", "d3", 2), j("q2", "d4", None)])
    labels = {"q1": {"c1": 1, "c3": 2, "c4": 0}, "q2": {"d1": 0, "d2": 1, "d4": 1}}
    cal = calibrate(pseudo, labels)  # labelled: c1 TP, c3 FN, c4 FP, d1 TN, d2 TP; d4 failed
    assert (cal.positives, cal.true_positives, cal.negatives, cal.true_negatives, cal.failed) == (3, 2, 2, 1, 1)
    assert cal.sensitivity == pytest.approx(2 / 3) and cal.specificity == pytest.approx(1 / 2)
    assert cal.kappa == pytest.approx((3 / 5 - 13 / 25) / (1 - 13 / 25))  # = 1/6
    full = calibrate(pseudo, labels, complete=True)  # c2 and d3 become negatives judged relevant
    assert (full.negatives, full.true_negatives, full.specificity) == (4, 1, 0.25)
    assert full.kappa == pytest.approx(-1 / 13)
    strict = calibrate(pseudo, labels, label_cutoff=2)  # only c3 is positive
    assert (strict.positives, strict.true_positives, strict.negatives) == (1, 0, 4)
    only_pos = calibrate(pseudo, {"q1": {"c1": 1}})
    assert only_pos.specificity is None and only_pos.kappa is None and only_pos.measured.startswith("sensitivity only")


# --- validation on StratRAG (labels complete within each turn's pool) -------------------------------------------------
@pytest.fixture(scope="module")
def strat(tmp_path_factory: pytest.TempPathFactory) -> AuditSet:
    out = tmp_path_factory.mktemp("stratrag")
    main(["build", "stratrag", "--source", str(HOTPOT), "--out", str(out)])
    return load_items(out)


def stratrag_runs(strat: AuditSet, k: int) -> dict[str, dict[str, dict[str, float]]]:
    docs = strat.documents[""]
    queries = {it.item_id: it.query for it in strat.items}
    pools = {it.item_id: list(it.pool) for it in strat.items}
    return {name: get_retriever(name).index({d: doc.text for d, doc in docs.items()}, show_progress=False)
            .search(queries, top_k=k, pools=pools, show_progress=False) for name in ("bm25", "random")}


def test_oracle_on_stratrag_pools_reproduces_true_qrels(strat: AuditSet, pr_auc) -> None:  # noqa: ANN001
    pool = build_pool(stratrag_runs(strat, k=5), k=5, query_ids=[it.item_id for it in strat.items])
    truth = item_qrels(strat)
    pseudo = judge_pool(pool, {it.item_id: it for it in strat.items}, strat.documents[""], OracleJudge(truth),
                        echo=None)
    assert pseudo.failed == [] and pseudo.estimate.calls == pool.size and pseudo.llm is None
    expected = {q: {c: 3 if truth[q].get(c, 0) > 0 else 0 for c in pool.chunk_ids(q)} for q in pool.query_ids}
    assert pseudo.qrels == expected
    for q in pool.query_ids:
        assert set(pseudo.relevant(q)) == {d for d, g in truth[q].items() if g > 0} & set(pool.chunk_ids(q))
    cal = calibrate(pseudo, truth, complete=True)
    assert (cal.sensitivity, cal.specificity, cal.kappa) == (1.0, 1.0, 1.0)
    # SEARA's guarantee with a perfect judge: micro PR-AUC under the pool = R_tot / R'_tot x under the truth
    qids = list(pool.query_ids)
    answerable = [q for q in qids if pseudo.relevant(q)]
    r_tot = sum(sum(g > 0 for g in truth[q].values()) for q in answerable)
    r_pool = sum(len(pseudo.relevant(q)) for q in answerable)
    scores = {}
    for name in pool.configurations:
        pseudo_score = pr_auc.compute(predictions=pool.predictions(name), references=pseudo.references(qids),
                                      query_ids=qids, pool_signature=pseudo.signature)
        true_score = pr_auc.compute(predictions=[pool.runs[name][q] for q in answerable], query_ids=answerable,
                                    qrels={q: truth[q] for q in answerable}, unjudged="nonrelevant", k=5,
                                    relevance_level=1)  # StratRAG labels gold 1
        assert pseudo_score["pr_auc"] == pytest.approx(true_score["pr_auc"] * r_tot / r_pool)
        scores[name] = pseudo_score
    assert scores["bm25"]["pr_auc"] > scores["random"]["pr_auc"]
    assert same_pool(scores) == pseudo.signature


def test_llm_judge_on_stratrag_judges_identical_texts_once(strat: AuditSet, tmp_path: Path) -> None:
    pool = build_pool(stratrag_runs(strat, k=10), k=10, query_ids=[it.item_id for it in strat.items[:10]])
    docs = strat.documents[""]

    def reply(messages: list[dict[str, str]]) -> str:  # a crude but honest reader: shared capitalised words
        prompt = messages[-1]["content"]
        question = re.search(r"Latest question: (.*)", prompt).group(1)
        document = prompt.split("Document:", 1)[1].split("Grade the document", 1)[0]
        shared = sorted(set(re.findall(r"\b[A-Z][a-z]{3,}\b", question)) & set(document.split()))
        if not shared:
            return "Nothing in this passage concerns the people or places the question asks about.\nRating: 0"
        return f"The passage discusses {', '.join(shared)}, which the question is about.\nRating: 2"

    backend = FakeBackend(responder=reply)
    pseudo = judge_pool(pool, {it.item_id: it for it in strat.items}, docs, fake_llm(tmp_path, backend=backend),
                        echo=None, concurrency=2)
    unique = {(q, docs[c].text) for q, c in pool.pairs()}
    assert len(backend.calls) == len(unique) < pool.size  # the padding placeholders share one text per turn
    assert pseudo.failed == [] and len(pseudo.judgments) == pool.size
    assert any(g >= 2 for judged in pseudo.qrels.values() for g in judged.values())


# --- the real local model (plumbing only) -----------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_default_local_model_as_judge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("llama_cpp", reason="the default backend needs llama-cpp-python")
    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    runs = {"A": {"q1": ["c1", "c3"], "q2": ["d2", "d1"]}, "B": {"q1": ["c4", "c1"], "q2": ["d3", "d2"]}}
    pool = build_pool(runs, k=2)
    assert [len(pool.chunk_ids(q)) for q in pool.query_ids] == [3, 3]
    printed: list[str] = []
    judge = LLMRelevanceJudge(get_llm("default", cache=tmp_path), max_tokens=160)
    pseudo = judge_pool(pool, QUERIES, CHUNKS, judge, echo=printed.append, max_calls=6)
    assert len(printed) == 1 and "6 calls" in printed[0] and pseudo.estimate.cost_usd == 0.0
    assert len(pseudo.judgments) == 6
    assert all((j.grade in (0, 1, 2, 3)) != (j.error is not None) for j in pseudo.judgments)
    summary = pseudo.summary()
    assert summary["judged_pairs"] + summary["failed_pairs"] == 6
    assert sum(summary["failures"].values()) == len({j.key for j in pseudo.failed})
    assert summary["llm"]["calls"] >= 6 and summary["llm"]["cost_usd"] == 0
    print(printed[0], {k: summary[k] for k in ("judged_pairs", "failed_pairs", "failures")}, summary["llm"]["calls"])
    write_pseudo_qrels(pseudo, tmp_path / "out")
    assert read_qrels_table(tmp_path / "out" / "pseudo-qrels" / "test-00000-of-00001.parquet") == pseudo.qrels
