"""The `metrics/pr_auc` evaluate module (SEARA's PR-AUC): the memo's worked example and edge cases, cross-checks
against sklearn, pytrec_eval and an exact brute force, the micro ordering property under pool shrinkage, the facts
config, input errors, doctests and the metric card."""

from __future__ import annotations

import doctest
import random
from fractions import Fraction
from pathlib import Path

import pytest
import pytrec_eval
from sklearn.metrics import average_precision_score

import convrag.metrics.pr_auc.inputs as inputs
from convrag.metrics.pr_auc.compute import score_chunks
from convrag.metrics.pr_auc.facts import score_facts
from convrag.metrics.pr_auc.inputs import PrAucInputError, fuse_rankings
from tests.metric_module_checks import check_kwargs_doctests, check_metric_card

REPO = Path(__file__).resolve().parents[3]
INTEGRATIONS = ("step", "trapezoid", "interp_all", "interp11")

# the memo's worked example: relevant at ranks 1 and 3 of 5, R' = 4 (two pooled relevant chunks missed)
EXAMPLE_RUN = {"q": ["c1", "c2", "c3", "c4", "c5"]}
EXAMPLE_POOL = {"q": {"c1": 3, "c2": 0, "c3": 2, "c4": 1, "c5": 0, "c8": 2, "c9": 3}}


@pytest.fixture(scope="module")
def metric():
    import evaluate

    return evaluate.load(str(REPO / "metrics" / "pr_auc"), "chunks")


@pytest.fixture(scope="module")
def fact_metric():
    import evaluate

    return evaluate.load(str(REPO / "metrics" / "pr_auc"), "facts")


# ------------------------------------------------------------------------------------------ exact brute force
def brute_force(run: dict, qrels: dict, k: int, level: int = 2, per_k: bool = False) -> dict:
    """Every average and integrator in exact fractions, written independently of compute.py."""
    relevant = {q: {d for d, g in j.items() if g >= level} for q, j in qrels.items()}
    scored = [q for q in qrels if relevant[q]]
    lists = {q: list(run.get(q, []))[:k] for q in qrels}

    def tp(q, cut):
        return sum(d in relevant[q] for d in lists[q][:cut])

    def den(q, cut):
        return cut if per_k else min(cut, len(lists[q]))

    def areas(points):
        out, last, prev_p = {}, Fraction(0), Fraction(1)
        step = trap = interp = Fraction(0)
        defined = [(r, p) for r, p in points if p is not None]
        for i, (r, p) in enumerate(defined):
            step += (r - last) * p
            interp += (r - last) * max(pp for _, pp in defined[i:])
            trap += (r - last) * (p + prev_p) / 2
            last, prev_p = r, p
        eleven = [max([p for r, p in defined if r >= Fraction(t, 10)], default=Fraction(0)) for t in range(11)]
        out.update(step=step, trapezoid=trap, interp_all=interp, interp11=sum(eleven) / 11)
        return out

    total = sum(len(relevant[q]) for q in scored)
    micro = []
    for cut in range(1, k + 1):
        d = sum(den(q, cut) for q in scored)
        hits = sum(tp(q, cut) for q in scored)
        micro.append((Fraction(hits, total), Fraction(hits, d) if d else None))
    points = [(sum(Fraction(tp(q, c), len(relevant[q])) for q in scored) / len(scored),
               sum(Fraction(tp(q, c), den(q, c)) if den(q, c) else Fraction(0) for q in scored) / len(scored))
              for c in range(1, k + 1)]  # fmt: skip
    per_query = {q: areas([(Fraction(tp(q, c), len(relevant[q])), Fraction(tp(q, c), c))
                           for c in range(1, len(lists[q]) + 1)]) for q in scored}  # fmt: skip
    return {"micro": areas(micro), "points": areas(points),
            "macro": {n: sum(v[n] for v in per_query.values()) / len(scored) for n in INTEGRATIONS},
            "per_query": {q: v["step"] for q, v in per_query.items()}}  # fmt: skip


def random_case(rng: random.Random, n_queries: int = 8, depth: int = 6) -> tuple[dict, dict]:
    docs = [f"d{i}" for i in range(15)]
    qrels = {f"q{i}": {d: rng.choice([0, 0, 1, 2, 3]) for d in rng.sample(docs, rng.randint(1, 12))}
             for i in range(n_queries)}  # fmt: skip
    run = {q: rng.sample(sorted(j), rng.randint(0, min(depth, len(j)))) for q, j in qrels.items() if rng.random() > .1}
    return run, qrels


# ------------------------------------------------------------------------------------------- worked example
def test_worked_example_numbers() -> None:
    out = score_chunks(EXAMPLE_RUN, EXAMPLE_POOL)
    for average in ("micro", "macro", "points"):
        values = out["alternatives"][average]
        assert values["step"] == pytest.approx(5 / 12, abs=1e-12)  # 0.417
        assert values["trapezoid"] == pytest.approx(19 / 48, abs=1e-12)  # 0.396, anchored at (0, 1)
        assert values["interp11"] == pytest.approx(5 / 11, abs=1e-12)  # 0.455
        assert values["interp_all"] == pytest.approx(5 / 12, abs=1e-12)
    assert out["pr_auc"] == out["pr_auc_macro"] == out["map_at_k"] == out["per_query"][0]["ap"]
    assert (round(out["pr_auc"], 3), round(out["alternatives"]["micro"]["trapezoid"], 3),
            round(out["alternatives"]["macro"]["interp11"], 3)) == (0.417, 0.396, 0.455)  # fmt: skip
    assert out["curve"]["recall_micro"] == [0.25, 0.25, 0.5, 0.5, 0.5]
    assert out["curve"]["precision_micro"] == pytest.approx([1, 0.5, 2 / 3, 0.5, 0.4])
    assert out["per_query"][0]["r_prime"] == 4 and out["settings"]["k"] == 5


def test_worked_example_sklearn_pitfalls() -> None:
    labels = [1, 0, 1, 0, 0]
    # fed the retrieved labels only, sklearn divides by the relevant *retrieved* chunks: 0.833, not 0.417
    assert average_precision_score(labels, [5, 4, 3, 2, 1]) == pytest.approx(5 / 6)
    # the two missed chunks appended with one very low score: 0.702 (distinct low scores: 0.685); still wrong
    assert average_precision_score(labels + [1, 1], [5, 4, 3, 2, 1, 0, 0]) == pytest.approx(0.7024, abs=1e-4)
    assert average_precision_score(labels + [1, 1], [7, 6, 5, 4, 3, 2, 1]) == pytest.approx(0.6845, abs=1e-4)
    # RAGAS-style context precision: mean of P@k over relevant retrieved ranks, also 0.833
    assert pytest.approx(5 / 6) == (1 + 2 / 3) / 2
    assert score_chunks(EXAMPLE_RUN, EXAMPLE_POOL)["pr_auc"] == pytest.approx(5 / 12)


def test_evaluate_reproduces_worked_example(metric) -> None:
    graded = [{"id": d, "grade": g} for d, g in EXAMPLE_POOL["q"].items()]
    out = metric.compute(predictions=[EXAMPLE_RUN["q"]], references=[graded], query_ids=["q"], pool_signature="p1")
    assert out == score_chunks(EXAMPLE_RUN, EXAMPLE_POOL, pool_signature="p1")
    assert out["pool_signature"] == out["settings"]["pool_signature"] == "p1"


# ------------------------------------------------------------------------------------------------ cross-checks
@pytest.mark.parametrize("seed", range(30))
def test_matches_exact_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    run, qrels = random_case(rng)
    per_k = seed % 2 == 1
    k = rng.choice([None, 3, 8])
    out = score_chunks(run, qrels, k=k, precision_denominator="k" if per_k else "retrieved")
    depth = out["settings"]["k"]
    if not out["n_scored"]:
        return
    expected = brute_force(run, qrels, depth, per_k=per_k)
    for average in ("micro", "macro", "points"):
        for name in INTEGRATIONS:
            assert out["alternatives"][average][name] == pytest.approx(float(expected[average][name]), abs=1e-12)
    assert {r["query_id"]: r["ap"] for r in out["per_query"]} == pytest.approx(
        {q: float(v) for q, v in expected["per_query"].items()}, abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_per_query_ap_matches_pytrec_eval_on_the_pool(seed: int) -> None:
    rng = random.Random(100 + seed)
    run, qrels = random_case(rng, n_queries=30, depth=10)
    out = score_chunks(run, qrels)
    ours = {r["query_id"]: r["ap"] for r in out["per_query"]}
    scored_runs = {q: {d: float(len(r) - i) for i, d in enumerate(r)} for q, r in run.items() if r}
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"map"}, relevance_level=2).evaluate(scored_runs)
    compared = 0
    for q, value in ours.items():
        if q in scored_runs:
            assert value == pytest.approx(ref[q]["map"], abs=1e-12)
            compared += 1
        else:
            assert value == 0.0  # a judged query with nothing retrieved scores 0 (pytrec_eval drops it)
    assert compared > 5


@pytest.mark.parametrize("seed", range(10))
def test_per_query_ap_matches_sklearn_when_the_list_holds_every_pooled_relevant(seed: int) -> None:
    rng = random.Random(200 + seed)
    ranking = [f"c{i}" for i in range(rng.randint(2, 12))]
    labels = [rng.random() < 0.4 for _ in ranking]
    labels[rng.randrange(len(labels))] = True
    qrels = {"q": {c: 2 if rel else 0 for c, rel in zip(ranking, labels, strict=True)}}
    out = score_chunks({"q": ranking}, qrels)
    expected = average_precision_score(labels, list(range(len(ranking), 0, -1)))
    assert out["per_query"][0]["ap"] == pytest.approx(expected, abs=1e-12)


# -------------------------------------------------------------------------------------- ordering property
def pooled(runs: list[dict], truth: dict, extra: dict | None = None) -> dict:
    """Judgments (a perfect judge: the true grade) of the union of the runs' lists, plus ``extra`` items."""
    out = {}
    for q in truth:
        items = {d for run in runs for d in run.get(q, [])} | set((extra or {}).get(q, []))
        out[q] = {d: truth[q][d] for d in items}
    return out


def order_agrees(a: list[float], b: list[float], tol: float = 1e-9) -> bool:
    def sign(x: float, y: float) -> int:
        return 0 if abs(x - y) <= tol * max(1.0, abs(x), abs(y)) else (1 if x > y else -1)

    return all(sign(a[i], a[j]) == sign(b[i], b[j]) for i in range(len(a)) for j in range(i + 1, len(a)))


@pytest.mark.parametrize("precision_denominator", ["retrieved", "k"])
def test_micro_order_is_unchanged_when_the_pool_shrinks_with_a_perfect_judge(precision_denominator: str) -> None:
    """Memo section 2.4: the same K-deep pool of all compared systems, a perfect judge, the same query set (those
    with a pooled relevant item): micro PR-AUC under any pool is one constant times the true one, for every
    system, so the micro order never changes. The macro mean carries no such guarantee (it flips here)."""
    rng = random.Random(7)
    macro_flips = 0
    for _ in range(300):
        depth, n_docs = rng.randint(2, 8), rng.randint(10, 40)
        docs = [f"d{i}" for i in range(n_docs)]
        truth = {f"q{i}": {d: rng.choice([0, 0, 0, 1, 2, 3]) for d in docs} for i in range(rng.randint(2, 7))}
        systems = [{q: rng.sample(docs, rng.choice([depth, depth, rng.randint(0, depth)])) for q in truth}
                   for _ in range(rng.randint(2, 6))]  # fmt: skip
        small = pooled(systems, truth)
        bigger = pooled(systems, truth, {q: rng.sample(docs, n_docs // 2) for q in truth})
        keep = [q for q in truth if any(g >= 2 for g in small[q].values())]
        if not keep:
            continue
        scores: dict[str, list[float]] = {}
        totals: dict[str, int] = {}
        for name, judged in (("small", small), ("bigger", bigger), ("truth", truth)):
            outs = [score_chunks({q: s[q] for q in keep}, {q: judged[q] for q in keep}, k=depth,
                                 precision_denominator=precision_denominator) for s in systems]  # fmt: skip
            assert all(o["n_excluded"] == 0 for o in outs)
            scores[name] = [o["pr_auc"] for o in outs]
            scores[name + "_macro"] = [o["pr_auc_macro"] for o in outs]
            totals[name] = sum(r["r_prime"] for r in outs[0]["per_query"])
        for name in ("small", "bigger"):
            assert order_agrees(scores[name], scores["truth"])
            assert [v * totals[name] for v in scores[name]] == pytest.approx(
                [v * totals["truth"] for v in scores["truth"]], rel=1e-9, abs=1e-12)
        macro_flips += not order_agrees(scores["small_macro"], scores["truth_macro"])
    assert macro_flips > 0


def test_memo_counter_example_macro_flips_micro_does_not() -> None:
    a = {"q1": ["r1", "r2", "n1"], "q2": ["n5", "n6", "n7"]}
    b = {"q1": ["n2", "n3", "n4"], "q2": ["s1", "n8", "n9"]}
    pool = {"q1": {"r1": 3, "r2": 2, "n1": 0, "n2": 1, "n3": 0, "n4": 0},
            "q2": {"s1": 3, "s2": 2, "n5": 0, "n6": 0, "n7": 1, "n8": 0, "n9": 0}}  # fmt: skip
    truth = {"q1": {**pool["q1"], **{f"u{i}": 2 for i in range(8)}}, "q2": pool["q2"]}
    res = {(s, j): score_chunks(run, judged) for s, run in (("A", a), ("B", b))
           for j, judged in (("pseudo", pool), ("true", truth))}  # fmt: skip
    table = {key: (r["pr_auc_macro"], r["recall_at_k"]) for key, r in res.items()}
    assert table[("A", "pseudo")] == pytest.approx((0.5, 0.5))
    assert table[("A", "true")] == pytest.approx((0.1, 1 / 6))
    assert table[("B", "pseudo")] == pytest.approx((0.25, 0.25))
    assert table[("B", "true")] == pytest.approx((0.25, 1 / 12))
    assert res[("A", "pseudo")]["pr_auc"] > res[("B", "pseudo")]["pr_auc"]
    assert res[("A", "true")]["pr_auc"] > res[("B", "true")]["pr_auc"]


# ------------------------------------------------------------------------------------ edge cases (memo 2.6)
def test_no_pooled_relevant_is_excluded_counted_listed() -> None:
    run = {"q1": ["a", "b"], "q2": ["x", "y", "z"]}
    qrels = {"q1": {"a": 2, "b": 0}, "q2": {"x": 1, "y": 0, "z": 0}}
    out = score_chunks(run, qrels)
    assert (out["n_scored"], out["n_excluded"], out["excluded_query_ids"]) == (1, 1, ["q2"])
    assert [r["query_id"] for r in out["per_query"]] == ["q1"]
    assert out["curve"]["precision_micro"] == [1.0, 0.5, 0.5] and out["pr_auc"] == 1.0  # K = 3, the longest list
    junk = score_chunks(run, qrels, include_unanswerable_in_precision=True)
    assert junk["curve"]["precision_micro"] == [0.5, 0.25, 0.2]  # 1 / (1 + 1), 1 / (2 + 2), 1 / (2 + 3)
    assert junk["pr_auc"] == 0.5 and junk["pr_auc_macro"] == 1.0
    assert junk["settings"]["include_unanswerable_in_precision"] is True
    nothing = score_chunks({"q": ["a"]}, {"q": {"a": 0}})
    assert nothing["pr_auc"] is None and nothing["pr_auc_macro"] is None and nothing["per_query"] == []


def test_short_lists_stop_and_precision_denominators() -> None:
    run = {"q1": ["a"], "q2": ["b", "c", "d"]}
    qrels = {"q1": {"a": 2, "e": 2}, "q2": {"b": 0, "c": 3, "d": 0}}
    out = score_chunks(run, qrels, return_query_curves=True)
    assert [len(r["precision"]) for r in out["per_query"]] == [1, 3]  # each query's curve stops at its n
    assert out["curve"]["precision_micro"] == pytest.approx([1 / 2, 2 / 3, 2 / 4])  # D(k) = sum of min(k, n_q)
    assert out["per_query"][0]["precision_at_k"] == 1.0  # 1 relevant of 1 retrieved
    by_k = score_chunks(run, qrels, precision_denominator="k")
    assert by_k["curve"]["precision_micro"] == pytest.approx([1 / 2, 2 / 4, 2 / 6])
    assert by_k["per_query"][0]["precision_at_k"] == pytest.approx(1 / 3)
    assert by_k["pr_auc_macro"] == out["pr_auc_macro"]  # a query's own area stops at n either way


def test_empty_ranking_scores_zero_and_adds_nothing_to_micro_counts() -> None:
    qrels = {"q1": {"a": 2, "b": 0}, "q2": {"c": 2}}
    out = score_chunks({"q1": ["a", "b"], "q2": []}, qrels)
    alone = score_chunks({"q1": ["a", "b"]}, {"q1": qrels["q1"]})
    assert out["per_query"][1] == {"query_id": "q2", "ap": 0.0, "pr_auc": 0.0, "r_prime": 1, "n_retrieved": 0,
                                   "recall_at_k": 0.0, "precision_at_k": None}  # fmt: skip
    assert out["curve"]["precision_micro"] == alone["curve"]["precision_micro"]
    assert out["pr_auc"] == pytest.approx(alone["pr_auc"] / 2)  # R'_tot doubles
    missing = score_chunks({"q1": ["a", "b"]}, qrels)  # judged but absent from the run: the same as empty
    assert missing["missing_query_ids"] == ["q2"] and missing["pr_auc"] == out["pr_auc"]


def test_duplicates_error_or_keep_first() -> None:
    with pytest.raises(PrAucInputError, match=r"query 'q': 'a' is ranked twice \(ranks 1 and 3\)"):
        score_chunks({"q": ["a", "b", "a"]}, {"q": {"a": 2, "b": 0}})
    kept = score_chunks({"q": ["a", "b", "a", "c"]}, {"q": {"a": 2, "b": 0, "c": 2}}, duplicates="keep_first")
    assert kept == score_chunks({"q": ["a", "b", "c"]}, {"q": {"a": 2, "b": 0, "c": 2}}, duplicates="keep_first")


def test_fusion_of_several_lists_before_scoring() -> None:
    lists = [["a", "b", "c"], ["c", "d", "a"]]
    assert fuse_rankings(lists) == ["c", "a", "d", "b"]  # a and c tie at 1/61 + 1/63, b and d at 1/62: greater id
    assert fuse_rankings(lists, method="round_robin") == ["a", "c", "b", "d"]
    assert fuse_rankings([["x"], ["y"]], rrf_k=0) == ["y", "x"]
    with pytest.raises(PrAucInputError, match="method"):
        fuse_rankings(lists, method="borda")


def test_cutoffs_are_prefixes_of_one_list() -> None:
    qrels = {"q": {"a": 2, "b": 0, "c": 3, "d": 2, "e": 0}}
    cut = score_chunks({"q": ["b", "a", "e", "c", "d"]}, qrels, k=3)
    prefix = score_chunks({"q": ["b", "a", "e"]}, qrels)
    assert cut["pr_auc"] == prefix["pr_auc"] and cut["curve"] == prefix["curve"]
    longer = score_chunks({"q": ["b", "a", "e"]}, qrels, k=5)  # a common K past the list: recall flat
    assert longer["curve"]["recall_micro"][2:] == [1 / 3] * 3 and longer["pr_auc"] == prefix["pr_auc"]


def test_graded_judgments_binarised_at_the_relevance_level() -> None:
    run, qrels = {"q": ["a", "b", "c"]}, {"q": {"a": 1, "b": 2, "c": 3}}
    assert score_chunks(run, qrels)["per_query"][0]["r_prime"] == 2
    assert score_chunks(run, qrels)["pr_auc"] == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert score_chunks(run, qrels, relevance_level=1)["pr_auc"] == 1.0
    assert score_chunks(run, {"q": ["b", "c"]})["pr_auc"] == score_chunks(run, qrels)["pr_auc"]  # ids = binarised


def test_scores_order_ties_like_trec_eval() -> None:
    qrels = {"q": {"a": 2, "b": 0, "c": 0}}
    out = score_chunks({"q": ["a", "b", "c"]}, qrels, scores={"q": [1.0, 1.0, 2.0]}, return_query_curves=True)
    assert out["per_query"][0]["precision"] == [0.0, 0.0, 1 / 3]  # c (2.0), then b before a (tie, id descending)
    tie32 = score_chunks({"q": ["a", "b"]}, qrels, scores={"q": [0.79203867903, 0.79203868909]})
    assert tie32["pr_auc"] == 0.5  # equal as 32-bit floats: b first


def test_unjudged_chunks_error_or_count() -> None:
    with pytest.raises(PrAucInputError, match=r"query 'q': 'z' \(rank 2\) has no judgment"):
        score_chunks({"q": ["a", "z"]}, {"q": {"a": 2}})
    out = score_chunks({"q": ["a", "z"]}, {"q": {"a": 2}}, unjudged="nonrelevant")
    assert out["n_unjudged"] == 1 and out["curve"]["precision_micro"] == [1.0, 0.5]
    assert score_chunks({"q": ["a", "z"]}, {"q": ["a"]})["n_unjudged"] == 0  # relevant ids: the rest is non-relevant


def test_mteb_qrels_rows() -> None:
    rows = [{"query-id": "q", "corpus-id": d, "score": g} for d, g in EXAMPLE_POOL["q"].items()]
    assert score_chunks(EXAMPLE_RUN, rows)["pr_auc"] == score_chunks(EXAMPLE_RUN, EXAMPLE_POOL)["pr_auc"]


# ----------------------------------------------------------------------------------------------- facts config
def test_facts_make_different_chunkings_comparable() -> None:
    """The paper's Figure 2: "A||gt" and "gt||B" hold the same fact; as chunks each misses the other."""
    pool = {"q": {"A|gt": 3, "gt|B": 3, "noise": 0}}
    for top in ("A|gt", "gt|B"):
        assert score_chunks({"q": [top, "noise"]}, pool)["recall_at_k"] == 0.5
        out = score_facts({"q": [top, "noise"]}, {"q": ["gt"]}, chunk_facts={"A|gt": ["gt"], "gt|B": ["gt"]})
        assert out["recall_at_k"] == 1.0 and out["pr_auc"] == 1.0 and out["settings"]["coverage"] == "mapping"


def test_fact_recall_counts_each_fact_once() -> None:
    covers = {"c1": ["f1", "f2"], "c2": ["f2"], "c3": [], "c4": ["f3", "x9"]}
    out = score_facts({"q": ["c1", "c2", "c3", "c4"]}, {"q": ["f1", "f2", "f3", "f4"]}, chunk_facts=covers)
    assert out["curve"]["recall_micro"] == [0.5, 0.5, 0.5, 0.75]  # x9 is another query's fact: ignored
    assert out["pr_auc"] == pytest.approx(0.5 * 1 + 0.25 * 3 / 4)
    judged = score_facts({"q": ["c1", "c2", "c3", "c4"]}, {"q": ["f1", "f2", "f3", "f4"]}, chunk_facts=covers,
                         relevant_chunks={"q": ["c1", "c3"]})  # fmt: skip
    assert judged["curve"]["precision_micro"] == [1.0, 0.5, 2 / 3, 0.5]
    with pytest.raises(PrAucInputError, match="'c4' covers 'x9'"):
        score_facts({"q": ["c4"]}, {"q": ["f3"]}, chunk_facts={"q": covers})  # per-query mapping: strict


def test_fact_spans_threshold_split_facts_and_char_precision() -> None:
    spans = {"A": ["d", 0, 20], "B": ["d", 10, 30], "left": ["d", 0, 15], "right": ["d", 15, 40],
             "clip1": ["d", 11, 40], "clip3": ["d", 13, 40], "far": ["e", 0, 10]}  # fmt: skip
    facts = {"f": ["d", 10, 20]}

    def run(*chunks, **kw):
        return score_facts({"q": list(chunks)}, {"q": ["f"]}, chunk_spans=spans, fact_spans=facts, **kw)

    assert run("clip1")["recall_at_k"] == 1.0  # 9 of 10 characters: at the 0.9 threshold
    assert run("clip3")["recall_at_k"] == 0.0 and run("clip3", coverage_threshold=0.7)["recall_at_k"] == 1.0
    split = run("left", "far", "right")
    assert split["curve"]["recall_micro"] == [0.0, 0.0, 1.0]  # covered once both halves are in
    assert split["curve"]["precision_micro"] == pytest.approx([1.0, 0.5, 2 / 3])  # chunks sharing a character
    char = run("A", "far", precision_unit="char")
    assert char["curve"]["precision_micro"] == [0.5, 1 / 3] and char["pr_auc"] == 0.5
    assert run("B", precision_unit="char")["pr_auc"] == 0.5
    with pytest.raises(PrAucInputError, match="'nowhere' .* has no span"):
        run("A", "nowhere")


def test_fact_metric_module(fact_metric) -> None:
    out = fact_metric.compute(predictions=[["A", "far"], []], references=[["f"], []], query_ids=["q1", "q2"],
                              chunk_spans={"A": ["d", 0, 20], "far": ["e", 0, 10]}, fact_spans={"f": ["d", 10, 20]},
                              precision_unit="char", pool_signature="facts-v1")  # fmt: skip
    assert out["pr_auc"] == 0.5 and out["excluded_query_ids"] == ["q2"] and out["pool_signature"] == "facts-v1"
    per_query = fact_metric.compute(predictions=[["a", "b"]], references=[["f1", "f2"]],
                                    chunk_facts=[{"a": ["f2"], "b": ["f1"]}])  # fmt: skip
    assert per_query["pr_auc"] == 1.0


# ------------------------------------------------------------------------------------------------ input errors
@pytest.mark.parametrize(
    ("run", "qrels", "kwargs", "match"),
    [
        ({"q": ["a"]}, {"q": {"a": 4}}, {}, r"query 'q': 'a' has grade 4; grades are integers 0-3"),
        ({"q": ["a"]}, {"q": {"a": -1}}, {}, "grade -1"),
        ({"q": ["a"]}, {"q": {"a": 2.5}}, {}, "grade 2.5"),
        ({"q": ["a"]}, {"q": {"a": "2"}}, {}, "grade '2'"),
        ({"q": ["a"]}, {"q": {"a": True}}, {}, "grade True"),
        ({"q": ["a"]}, {"q": [{"id": "a", "grade": 2}, {"id": "a", "grade": 1}]}, {}, "'a' is judged twice"),
        ({"q": ["a"]}, {"q": ["a", "a"]}, {}, "listed twice"),
        ({"q": [1]}, {"q": {"a": 2}}, {}, r"query 'q': the ranking\[0\] must be an id string"),
        ({"q": "abc"}, {"q": {"a": 2}}, {}, "must be a list of id strings"),
        ({"q": ["a"], "r": ["b"]}, {"q": {"a": 2}}, {}, "query 'r' is ranked but has no judgments"),
        ({"q": ["a"]}, {"q": {"a": 2}}, {"relevance_level": 0}, "relevance_level"),
        ({"q": ["a"]}, {"q": {"a": 2}}, {"k": 0}, "k must be a positive integer"),
        ({"q": ["a"]}, {"q": {"a": 2}}, {"integration": "simpson"}, "integration"),
        ({"q": ["a"]}, {"q": {"a": 2}}, {"precision_denominator": "all"}, "precision_denominator"),
        ({"q": ["a"]}, {"q": {"a": 2}}, {"scores": {"q": [1.0, 2.0]}}, "scores must be a list of 1 numbers"),
        ({"q": ["a"]}, {"q": {"a": 2}}, {"pool_signature": 3}, "pool_signature"),
        ({"q": ["a"]}, [{"query-id": "q", "corpus-id": "a"}], {}, r"qrels\[0\] must be a row"),
    ],
)
def test_score_chunks_errors(run, qrels, kwargs, match) -> None:
    with pytest.raises(PrAucInputError, match=match):
        score_chunks(run, qrels, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "either as chunk_facts or as chunk_spans"),
        ({"chunk_facts": {}, "chunk_spans": {}}, "either as chunk_facts"),
        ({"chunk_facts": {}, "precision_unit": "char"}, "needs chunk_spans"),
        ({"chunk_spans": {"a": ["d", 5, 5]}, "fact_spans": {"f": ["d", 0, 3]}}, "0 <= start < end"),
        ({"chunk_spans": {"a": ["d", 0, 9]}, "fact_spans": {}}, "fact 'f' has no span"),
        ({"chunk_facts": {}, "coverage_threshold": 0}, "coverage_threshold"),
        ({"chunk_facts": {"q": {"a": ["f"]}, "a": ["f"]}}, "not a mix"),
    ],
)
def test_score_facts_errors(kwargs, match) -> None:
    with pytest.raises(PrAucInputError, match=match):
        score_facts({"q": ["a"]}, {"q": ["f"]}, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"predictions": [["a", "a"]], "references": [["a"]]}, "query '0': 'a' is ranked twice"),
        ({"predictions": [["a"]], "references": [[{"id": "a", "grade": 5}]]}, r"references\[0\]\[0\]: grade 5"),
        ({"predictions": [["a"], ["b"]], "references": [["a"], [{"id": "b", "grade": 2}]]}, "one form"),
        ({"predictions": [[3]], "references": [["a"]]}, r"predictions\[0\]\[0\]: expected an id string"),
        ({"predictions": ["ab"], "references": [["a"]]}, r"predictions\[0\] must be a list"),
        ({"predictions": [["a"]], "references": [["a"]], "query_ids": ["x", "y"]}, "2 ids for 1 predictions"),
        ({"predictions": [["a"], ["b"]], "references": [["a"], ["b"]], "query_ids": ["x", "x"]}, "'x' is given twice"),
        ({"predictions": [["a"]], "references": [["a"]], "chunk_facts": {}}, r"unknown option\(s\).*chunk_facts"),
        ({"predictions": [["a"]], "references": [["a"]], "qrels": {"0": {"a": 2}}}, "no references"),
        ({"predictions": [["a"]], "qrels": {"x": {"a": 2}}}, "query '0' is ranked but has no judgments"),
        ({"predictions": [["a"]], "references": [["a"]], "scores": [[1.0], [2.0]]}, "one entry per query"),
    ],
)
def test_evaluate_errors(metric, kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        metric.compute(**kwargs)


# ------------------------------------------------------------------------------------------ the evaluate module
def test_evaluate_load_by_relative_path_and_configs(monkeypatch: pytest.MonkeyPatch) -> None:
    import evaluate

    import convrag.metrics.pr_auc as package

    monkeypatch.chdir(REPO)
    assert package.__file__.endswith("metrics/pr_auc/__init__.py")
    default = evaluate.load("metrics/pr_auc")
    chunks = evaluate.load("metrics/pr_auc", "chunks")
    assert default.name == "pr_auc" and chunks.config_name == "chunks"
    assert default.compute(predictions=[["a"]], references=[["a"]])["pr_auc"] == 1.0
    assert evaluate.load("metrics/pr_auc", "facts").config_name == "facts"
    with pytest.raises(ValueError, match="unknown config 'docs'"):
        evaluate.load("metrics/pr_auc", "docs")


@pytest.mark.parametrize("seed", range(3))
def test_evaluate_equals_compute_with_batches(metric, seed: int) -> None:
    rng = random.Random(300 + seed)
    run, qrels = random_case(rng, n_queries=12)
    qids = list(qrels)
    graded = [[{"id": d, "grade": g} for d, g in qrels[q].items()] for q in qids]
    preds = [run.get(q, []) for q in qids]
    for start in range(0, len(qids), 5):
        metric.add_batch(predictions=preds[start:start + 5], references=graded[start:start + 5])
    out = metric.compute(query_ids=qids, k=4, integration="trapezoid", return_query_curves=True)
    assert out == score_chunks(dict(zip(qids, preds, strict=True)), qrels, k=4, integration="trapezoid",
                               return_query_curves=True)  # fmt: skip
    via_qrels = metric.compute(predictions=[run[q] for q in run], query_ids=list(run), qrels=qrels, k=4)
    assert via_qrels == score_chunks(run, qrels, k=4)


def test_evaluate_module_doctests() -> None:
    import convrag.metrics.pr_auc.pr_auc as module

    check_kwargs_doctests(module)


def test_compute_doctests() -> None:
    failed, attempted = doctest.testmod(inputs)
    assert attempted > 0 and failed == 0


def test_metric_card_examples_and_front_matter() -> None:
    check_metric_card("pr_auc", "evaluate")
    card = (REPO / "metrics" / "pr_auc" / "README.md").read_text(encoding="utf-8")
    for needed in ("average_precision_score", "ordering guarantee", "Σ_{k=1..K} (R_μ(k) − R_μ(k−1)) · P_μ(k)",
                   "SPEAR", "pool-relative"):
        assert needed in card
