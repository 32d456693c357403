"""The retrieval metric: compute.py against pytrec_eval, hand cases, groups, errors, the evaluate module."""

from __future__ import annotations

import doctest
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import pytrec_eval

import convrag.metrics.retrieval.compute as compute
from convrag.metrics.retrieval.compute import (
    GroupsError,
    MeasureError,
    QrelsError,
    RetrievalInputError,
    RunError,
    measure_names,
    parse_measure,
    score_run,
)
from tests.metric_module_checks import check_kwargs_doctests, check_metric_card

REPO = Path(__file__).resolve().parents[3]
KS = (1, 2, 3, 5, 10, 20)
TOL = 1e-9


def random_case(seed: int, ranked_lists: bool = False) -> tuple[dict, dict]:
    """A tie-heavy run and graded qrels with 0 / negative labels, missing, empty and unjudged queries."""
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(40)] + ["D1", "d1x", "a", "é"]
    run: dict = {}
    qrels: dict = {}
    for q in range(60):
        qid = f"q{q}"
        kind = rng.random()
        if kind > 0.08:  # judged
            judged = rng.sample(docs, rng.randint(1, 12))
            grades = [-1, 0, 0, 1, 1, 2, 3] if kind > 0.2 else [-2, 0]  # some queries without a relevant doc
            qrels[qid] = {d: rng.choice(grades) for d in judged}
        if kind < 0.9 or kind > 0.97:  # in the run (some judged queries are missing, some unjudged appear)
            ranked = rng.sample(docs, rng.randint(0 if kind < 0.15 else 1, 30))
            if ranked_lists:
                run[qid] = ranked
            else:
                run[qid] = {d: rng.choice([0.0, 0.5, 1.0, 1.5, -2.0, 3]) for d in ranked}
    return run, qrels


def trec_order(ranking: dict[str, float] | list[str]) -> list[str]:
    if isinstance(ranking, list):
        return ranking
    return [d for _, d in sorted(((float(np.float32(s)), d) for d, s in ranking.items()), reverse=True)]


def as_scores(ranking: list[str]) -> dict[str, float]:
    return {d: float(len(ranking) - i) for i, d in enumerate(ranking)}


def reference(run: dict, qrels: dict) -> tuple[list[str], dict[str, dict[str, float]]]:
    """Per-query values from pytrec_eval (missing queries added as zeros), for every measure of ours."""
    scored = [q for q, j in qrels.items() if any(g >= 1 for g in j.values())]
    qrels_s = {q: qrels[q] for q in scored}
    full = {q: as_scores(trec_order(r)) for q, r in run.items() if r}
    # pytrec_eval sees the raw scores (its own tie-breaking) for scored runs
    raw = {q: {d: float(s) for d, s in r.items()} if isinstance(r, dict) else as_scores(r) for q, r in run.items() if r}
    cuts = ",".join(map(str, KS))
    base = pytrec_eval.RelevanceEvaluator(
        qrels_s, {f"ndcg_cut.{cuts}", f"recall.{cuts}", f"P.{cuts}", f"map_cut.{cuts}", "recip_rank", "ndcg", "map",
                  "num_rel"}).evaluate(raw)  # fmt: skip
    out: dict[str, dict[str, float]] = {}
    for q in scored:
        num_rel = sum(g >= 1 for g in qrels[q].values())
        row = base.get(q)
        values = {}
        for k in KS:
            top = {d: s for d, s in full.get(q, {}).items() if s > len(full[q]) - k} if q in full else {}
            cut = pytrec_eval.RelevanceEvaluator({q: qrels[q]}, {"recip_rank", "num_rel_ret"}).evaluate({q: top})
            cut = cut.get(q, {"recip_rank": 0.0, "num_rel_ret": 0.0})
            values[f"nDCG@{k}"] = row[f"ndcg_cut_{k}"] if row else 0.0
            values[f"Recall@{k}"] = row[f"recall_{k}"] if row else 0.0
            values[f"P@{k}"] = row[f"P_{k}"] if row else 0.0
            values[f"MAP@{k}"] = row[f"map_cut_{k}"] if row else 0.0
            values[f"MRR@{k}"] = cut["recip_rank"]
            values[f"Success@{k}"] = float(cut["num_rel_ret"] > 0)
            values[f"R_cap@{k}"] = cut["num_rel_ret"] / min(k, num_rel)
        values["MRR"] = row["recip_rank"] if row else 0.0
        values["nDCG"] = row["ndcg"] if row else 0.0
        values["MAP"] = row["map"] if row else 0.0
        out[q] = values
    return scored, out


ALL = measure_names(KS, uncut=("MRR", "nDCG", "MAP"))


@pytest.mark.parametrize("ranked_lists", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_matches_pytrec_eval(seed: int, ranked_lists: bool) -> None:
    run, qrels = random_case(seed, ranked_lists)
    scored, ref = reference(run, qrels)
    result = score_run(run, qrels, measures=ALL)
    assert result.query_ids == scored
    assert result.excluded == [q for q in qrels if q not in scored]
    assert result.unjudged == [q for q in run if q not in qrels]
    assert result.missing == [q for q in scored if not run.get(q)]
    for q in scored:
        for m in ALL:
            assert result.per_query[q][m] == pytest.approx(ref[q][m], abs=TOL), (q, m)
    for m in ALL:
        mean = sum(ref[q][m] for q in scored) / len(scored)
        assert result.scores[m] == pytest.approx(mean, abs=TOL), m


def test_case_has_ties_and_edge_queries() -> None:
    run, qrels = random_case(0)
    result = score_run(run, qrels)
    assert result.excluded and result.unjudged and result.missing
    assert any(len(set(r.values())) < len(r) for r in run.values())


def test_tie_break_is_doc_id_descending() -> None:
    run = {"q": {"a": 1.0, "b": 1.0, "c": 1.0, "B": 1.0, "z": 0.5}}
    assert score_run(run, {"q": {"c": 1}}, measures=["MRR"]).scores["MRR"] == 1.0
    assert score_run(run, {"q": {"b": 1}}, measures=["MRR"]).scores["MRR"] == 0.5
    assert score_run(run, {"q": {"B": 1}}, measures=["MRR"]).scores["MRR"] == 0.25  # "B" < "a" < "b"
    assert score_run(run, {"q": {"z": 1}}, measures=["MRR"]).scores["MRR"] == 0.2
    # a ranked list keeps the order given
    assert score_run({"q": ["a", "b", "c"]}, {"q": ["a"]}, measures=["MRR"]).scores["MRR"] == 1.0


def test_scores_tie_at_32_bit_precision_like_trec_eval() -> None:
    run = {"q": {"doc912828": 0.792038689087313, "doc936585": 0.7920386790271728, "doc1": 0.1}}
    qrels = {"q": {"doc936585": 1}}
    expected = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(run)["q"]["recip_rank"]
    assert score_run(run, qrels, measures=["MRR"])["MRR"] == expected == 1.0  # a tie: greater doc id first
    rng = random.Random(7)
    run = {f"q{i}": {f"d{j}": 0.5 + rng.randrange(4) * 1e-7 + rng.random() * 1e-12 for j in range(20)}
           for i in range(30)}  # fmt: skip
    qrels = {q: {f"d{j}": rng.choice([0, 1, 2]) for j in range(0, 20, 3)} | {"d1": 1} for q in run}
    scored, ref = reference(run, qrels)
    result = score_run(run, qrels, measures=ALL)
    assert all(result.per_query[q][m] == pytest.approx(ref[q][m], abs=TOL) for q in scored for m in ALL)


def test_hand_values() -> None:
    run = {"q": ["n1", "r2", "n2", "r1", "n3"]}
    qrels = {"q": {"r1": 1, "r2": 2, "r3": 3, "n1": 0, "n2": -1}}
    r = score_run(run, qrels, measures=["nDCG@3", "Recall@3", "R_cap@2", "Success@1", "Success@2", "MRR@1",
                                        "MRR@5", "MAP@5", "P@4", "MRR"]).scores  # fmt: skip
    ideal3 = 3 + 2 / math.log2(3) + 1 / 2
    assert r["nDCG@3"] == pytest.approx((2 / math.log2(3)) / ideal3, abs=1e-15)
    assert r["Recall@3"] == 1 / 3
    assert r["R_cap@2"] == 1 / 2
    assert (r["Success@1"], r["Success@2"]) == (0.0, 1.0)
    assert (r["MRR@1"], r["MRR@5"], r["MRR"]) == (0.0, 0.5, 0.5)
    assert r["MAP@5"] == pytest.approx((1 / 2 + 2 / 4) / 3, abs=1e-15)
    assert r["P@4"] == 0.5


def test_missing_queries_score_zero_and_count() -> None:
    qrels = {"a": ["d1"], "b": ["d1"], "c": ["d1"], "none": {"d1": 0}}
    run = {"a": ["d1"], "b": [], "extra": ["d1"]}
    r = score_run(run, qrels, measures=["Recall@1"])
    assert r.scores["Recall@1"] == 1 / 3
    assert r.per_query == {"a": {"Recall@1": 1.0}, "b": {"Recall@1": 0.0}, "c": {"Recall@1": 0.0}}
    assert (r.excluded, r.unjudged, r.missing) == (["none"], ["extra"], ["b", "c"])


def test_default_measures_and_names() -> None:
    r = score_run({"q": ["d"]}, {"q": ["d"]})
    assert r.measures == measure_names() and r.measures[-1] == "MRR"
    assert set(r.scores) == {f"{f}@{k}" for f in compute.MEASURE_FAMILIES for k in (1, 3, 5, 10)} | {"MRR"}
    assert r["nDCG@10"] == 1.0
    assert parse_measure("nDCG") == ("nDCG", None) and parse_measure("P@7") == ("P", 7)
    assert score_run({"q": ["d"]}, {"q": ["d"]}, k_values=[2]).measures[0] == "nDCG@2"


def test_groups_and_macro_average() -> None:
    run = {"a": ["d1"], "b": ["x", "d1"], "c": ["x"], "d": ["d1"]}
    qrels = {q: ["d1"] for q in "abcd"} | {"e": {"d1": 0}}
    groups = {"a": "turn1", "b": "turn1", "c": "turn1", "d": 2}
    r = score_run(run, qrels, measures=["MRR", "P@1"], groups=groups, per_query=True)
    assert r.groups == {"2": {"MRR": 1.0, "P@1": 1.0}, "turn1": {"MRR": 0.5, "P@1": 1 / 3}}
    assert r.group_sizes == {"2": 1, "turn1": 3}
    assert r.macro == {"MRR": 0.75, "P@1": (1 + 1 / 3) / 2}
    assert r.scores == {"MRR": 2.5 / 4, "P@1": 0.5}
    out = r.to_dict()
    assert out[compute.MACRO] == r.macro and out["per_query"]["b"]["MRR"] == 0.5
    json.dumps(out)
    with pytest.raises(GroupsError, match="'d'"):
        score_run(run, qrels, groups={"a": "x", "b": "x", "c": "x"})


@pytest.mark.parametrize(
    ("run", "qrels", "kwargs", "error", "match"),
    [
        ([], {"q": ["d"]}, {}, RunError, "mapping"),
        ({"q": "d1"}, {"q": ["d"]}, {}, RunError, "'q'"),
        ({"q": {"d": "high"}}, {"q": ["d"]}, {}, RunError, "'q'.*'high'"),
        ({"p": {"d": 1.0}, "q": {"d": None}}, {"p": ["d"], "q": ["d"]}, {}, RunError, "'q'"),
        ({"q": {"d": float("nan")}}, {"q": ["d"]}, {}, RunError, "'q'.*NaN"),
        ({"q": ["d", "e", "d"]}, {"q": ["d"]}, {}, RunError, "'q'.*duplicate"),
        ({"q": ["d", 3]}, {"q": ["d"]}, {}, RunError, "'q'.*string"),
        ({"q": {"d": 1.0, 7: 2.0}}, {"q": ["d"]}, {}, RunError, "'q'.*string"),
        ({"q": ["d"]}, {"q": ["d", "d"]}, {}, QrelsError, "'q'.*twice"),
        ({"q": ["d"]}, {"q": {"d": 1.5}}, {}, QrelsError, "'q'.*integer"),
        ({"q": ["d"]}, {"q": {"d": "1"}}, {}, QrelsError, "'q'.*integer"),
        ({"q": ["d"]}, {"q": "d"}, {}, QrelsError, "'q'"),
        ({"q": ["d"]}, {1: ["d"]}, {}, QrelsError, "string"),
        ({"q": ["d"]}, {"q": {"d": 0}}, {}, QrelsError, "no query"),
        ({"q": ["d"]}, {"q": ["d"]}, {"measures": ["Recall"]}, MeasureError, "cut-off"),
        ({"q": ["d"]}, {"q": ["d"]}, {"measures": ["F1@3"]}, MeasureError, "unknown"),
        ({"q": ["d"]}, {"q": ["d"]}, {"measures": ["P@0"]}, MeasureError, "positive"),
        ({"q": ["d"]}, {"q": ["d"]}, {"measures": "MRR"}, MeasureError, "sequence"),
        ({"q": ["d"]}, {"q": ["d"]}, {"k_values": [0]}, MeasureError, "positive"),
        ({"q": ["d"]}, {"q": ["d"]}, {"groups": ["a"]}, GroupsError, "mapping"),
    ],
)
def test_errors(run, qrels, kwargs, error, match) -> None:
    with pytest.raises(error, match=match) as info:
        score_run(run, qrels, **kwargs)
    assert isinstance(info.value, RetrievalInputError) and isinstance(info.value, ValueError)


def test_numbers_of_other_types_are_accepted() -> None:
    run = {"q": {"a": np.float32(0.5), "b": 2, "c": True}}
    qrels = {"q": {"a": np.int64(2), "b": 1.0, "c": False}}
    r = score_run(run, qrels, measures=["MRR", "Recall@2"]).scores
    assert r == {"MRR": 1.0, "Recall@2": 0.5}


def test_compute_doctests() -> None:
    import convrag.metrics.retrieval.trec as trec

    for module in (compute, trec):
        failed, attempted = doctest.testmod(module)
        assert attempted > 0 and failed == 0, module.__name__


# --- the evaluate module -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def metric():
    import evaluate

    return evaluate.load(str(REPO / "metrics" / "retrieval"))


def test_evaluate_load_by_relative_path_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    import evaluate

    monkeypatch.chdir(REPO)
    module = evaluate.load("metrics/retrieval")
    assert module.name == "retrieval"
    assert module.compute(predictions=[["a"]], references=[["a"]], measures=["MRR"])["MRR"] == 1.0


@pytest.mark.parametrize("seed", range(3))
def test_evaluate_equals_compute(metric, seed: int) -> None:
    run, qrels = random_case(seed)
    qids = list(qrels)
    graded = [[{"id": d, "grade": g} for d, g in qrels[q].items()] for q in qids]
    scored = [[{"id": d, "score": float(s)} for d, s in run.get(q, {}).items()] for q in qids]
    scored[0] = scored[0] or [{"id": "unjudged", "score": 1.0}]  # the first example picks the feature option
    labels = [random.Random(q).choice(["a", "b"]) for q in qids]
    out = metric.compute(predictions=scored, references=graded, query_ids=qids, measures=ALL, per_query=True,
                         groups=labels)  # fmt: skip
    expected = score_run({q: {i["id"]: i["score"] for i in p} for q, p in zip(qids, scored, strict=True)}, qrels,
                         measures=ALL, groups=dict(zip(qids, labels, strict=True)))  # fmt: skip
    assert {m: out[m] for m in ALL} == expected.scores
    assert out["per_query"] == expected.per_query
    assert out["excluded_queries"] == expected.excluded
    assert (out["groups"], out["group_sizes"], out["macro"]) == (expected.groups, expected.group_sizes,
                                                                  expected.macro)  # fmt: skip
    assert out["num_queries"] == expected.num_queries


@pytest.mark.parametrize("graded", [False, True])
def test_evaluate_ranked_lists_and_batches(metric, graded: bool) -> None:
    run, qrels = random_case(4, ranked_lists=True)
    qids = [q for q in qrels if run.get(q)]
    refs = [[{"id": d, "grade": g} for d, g in qrels[q].items()] if graded
            else [d for d, g in qrels[q].items() if g > 0] for q in qids]  # fmt: skip
    for start in range(0, len(qids), 7):
        metric.add_batch(predictions=[run[q] for q in qids[start:start + 7]], references=refs[start:start + 7])
    out = metric.compute(query_ids=qids, k_values=[1, 5])
    judged = {q: qrels[q] if graded else [d for d, g in qrels[q].items() if g > 0] for q in qids}
    expected = score_run({q: run[q] for q in qids}, judged, k_values=[1, 5])
    assert {m: out[m] for m in expected.measures} == expected.scores
    assert len(out) == len(expected.measures) + 2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"predictions": [["a"], ["b"]], "references": [["a"], ["b"]], "query_ids": ["x", "x"]}, "unique"),
        ({"predictions": [["a"], ["b"]], "references": [["a"], ["b"]], "query_ids": ["x"]}, "query_ids"),
        ({"predictions": [["a", "a"]], "references": [["a"]]}, "'0'.*duplicate"),
        ({"predictions": [[{"id": "a", "score": 1.0}, {"id": "a", "score": 2.0}]], "references": [["a"]]}, "twice"),
        ({"predictions": [["a"]], "references": [[{"id": "a", "grade": 1}, {"id": "a", "grade": 2}]]}, "twice"),
        ({"predictions": [["a"], ["b"]], "references": [["a"], ["b"]], "groups": ["g"]}, "one label per query"),
        ({"predictions": [["a"]], "references": [["a"]], "measures": ["nDCG@x"]}, "unknown measure"),
    ],
)
def test_evaluate_errors(metric, kwargs, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        metric.compute(**kwargs)


def test_evaluate_module_doctests() -> None:
    import convrag.metrics.retrieval.retrieval as module

    check_kwargs_doctests(module)


def test_metric_card_examples_and_front_matter() -> None:
    check_metric_card("retrieval", "evaluate")


def test_evaluate_bulk_and_item_checks_agree(metric) -> None:
    """The same run as plain objects (column-wise checks) and with numpy scores and integer ids (item by item)."""
    run, qrels = random_case(5)
    qids = [q for q in qrels if run.get(q)]
    refs = [[{"id": d, "grade": g} for d, g in qrels[q].items()] for q in qids]
    plain = [[{"id": d, "score": float(s)} for d, s in run[q].items()] for q in qids]
    odd = [[{"id": int(d[1:]) if d[1:].isdigit() and d[0] == "d" else d, "score": np.float32(s)}
            for d, s in run[q].items()] for q in qids]  # fmt: skip
    odd_refs = [[{"id": int(i["id"][1:]) if i["id"][1:].isdigit() and i["id"][0] == "d" else i["id"],
                  "grade": np.int64(i["grade"])} for i in r] for r in refs]  # fmt: skip
    expected = score_run({q: run[q] for q in qids}, {q: qrels[q] for q in qids}, measures=ALL)
    assert metric.compute(predictions=plain, references=refs, query_ids=qids, measures=ALL, per_query=True)[
        "per_query"] == expected.per_query  # fmt: skip
    renamed = metric.compute(predictions=odd, references=odd_refs, query_ids=qids, measures=ALL, per_query=True)
    as_strings = score_run({q: {str(i["id"]): float(i["score"]) for i in p} for q, p in zip(qids, odd, strict=True)},
                           {q: {str(i["id"]): int(i["grade"]) for i in r} for q, r in zip(qids, odd_refs, strict=True)},
                           measures=ALL)  # fmt: skip
    assert renamed["per_query"] == as_strings.per_query
    with pytest.raises(ValueError, match=r"^predictions\[1\]: document 'a' is predicted twice$"):
        metric.compute(predictions=[[], [{"id": "a", "score": 1.0}, {"id": "a", "score": 2.0}]],
                       references=[["a"], ["a"]])  # fmt: skip
    assert metric.compute(predictions=[["a"]], references=[["a"]], measures=["MRR"])["MRR"] == 1.0  # state reset
