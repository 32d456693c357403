"""The vectorised retrieval metric (compute.py + inputs.py) equals pytrec_eval to the bit, per query and cut-off."""

from __future__ import annotations

import random
from collections import UserDict

import numpy as np
import pytest
import pytrec_eval

import convrag.metrics.retrieval.compute as compute
from convrag.metrics.retrieval.compute import RunError, measure_names, score_run

KS = (1, 2, 3, 5, 10, 20, 100)
ALL = measure_names(KS, uncut=("MRR", "nDCG", "MAP"))
DOCS = [f"d{i}" for i in range(150)] + ["D1", "d1x", "a", "é", "ä", "z9"]
# scores that tie, also only as 32-bit floats (0.5 + 1e-9), as +-0.0, or as +-inf after the cast (1e39)
TIED = [0.0, -0.0, 0.5, 0.5 + 1e-9, 1.0, 3, -2.0, 1e39, float("inf"), -1e39, float("-inf")]


def random_case(seed: int) -> tuple[dict, dict]:
    """Graded qrels (negative, zero and positive grades; some queries without a relevant document) and a run
    with ties, empty rankings, judged queries left out and unjudged queries added."""
    rng = random.Random(seed)
    run: dict = {}
    qrels: dict = {}
    for q in range(300):
        qid = f"q{q}"
        kind = rng.random()
        if kind > 0.05:
            grades = [-2, -1, 0, 0, 1, 1, 2, 3] if kind > 0.15 else [-1, 0]
            qrels[qid] = {d: rng.choice(grades) for d in rng.sample(DOCS, rng.randint(1, 25))}
        if kind < 0.9 or kind > 0.97:
            size = rng.choice([0, 1, 5, 30, 100, 150]) if kind > 0.1 else 0
            tie_share = rng.choice([0.0, 0.3, 1.0])
            run[qid] = {d: rng.choice(TIED) if rng.random() < tie_share else rng.gauss(0, 1)
                        for d in rng.sample(DOCS, size)}  # fmt: skip
    return run, qrels


def pytrec_values(run: dict, qrels: dict) -> dict[str, dict[str, float]]:
    """Every measure of ``ALL`` per query from pytrec_eval's own outputs (MRR@k, R_cap@k: from its rank and counts)."""
    cuts = ",".join(map(str, KS))
    specs = {f"ndcg_cut.{cuts}", f"recall.{cuts}", f"P.{cuts}", f"map_cut.{cuts}", f"success.{cuts}", "recip_rank",
             "ndcg", "map", "num_rel"}  # fmt: skip
    raw = pytrec_eval.RelevanceEvaluator(qrels, specs).evaluate(
        {q: {d: float(s) for d, s in r.items()} for q, r in run.items() if r})
    out = {}
    for q, row in raw.items():
        first = round(1 / row["recip_rank"]) if row["recip_rank"] else None
        values = {"MRR": row["recip_rank"], "nDCG": row["ndcg"], "MAP": row["map"]}
        for k in KS:
            hits = round(row[f"P_{k}"] * k)
            values |= {f"nDCG@{k}": row[f"ndcg_cut_{k}"], f"Recall@{k}": row[f"recall_{k}"], f"P@{k}": row[f"P_{k}"],
                       f"MAP@{k}": row[f"map_cut_{k}"], f"Success@{k}": row[f"success_{k}"],
                       f"MRR@{k}": row["recip_rank"] if first is not None and first <= k else 0.0,
                       f"R_cap@{k}": hits / min(k, row["num_rel"])}  # fmt: skip
        out[q] = values
    return out


def check_bit_identical(run: dict, qrels: dict, result: compute.RetrievalResult) -> int:
    """Assert every value equals pytrec_eval's exactly; return how many values were compared."""
    ref = pytrec_values(run, {q: j for q, j in qrels.items() if any(g >= 1 for g in j.values())})
    compared = 0
    for q in result.query_ids:
        for m in ALL:
            expected = ref[q][m] if q in ref else 0.0  # pytrec_eval leaves out queries with no ranking
            assert result.per_query[q][m] == expected, (q, m, result.per_query[q][m], expected)
            compared += 1
    return compared


@pytest.mark.parametrize("seed", range(4))
def test_equals_pytrec_eval_to_the_bit(seed: int) -> None:
    run, qrels = random_case(seed)
    result = score_run(run, qrels, measures=ALL)
    assert result.excluded == [q for q, j in qrels.items() if not any(g >= 1 for g in j.values())]
    assert result.missing == [q for q in result.query_ids if not run.get(q)]
    assert result.unjudged == [q for q in run if q not in qrels]
    assert result.excluded and result.missing and result.unjudged
    assert any(len(set(compute.as_trec_scores(list(r.values())).tolist())) < len(r) for r in run.values())
    compared = check_bit_identical(run, qrels, result)
    assert compared == len(result.query_ids) * len(ALL) > 10_000


def test_blocks_and_ranked_lists_give_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rankings compared one per block, and the run as ranked lists in trec_eval order, change no bit; rankings
    all of one length (compared as a reshaped matrix) equal pytrec_eval too."""
    run, qrels = random_case(11)
    expected = score_run(run, qrels, measures=ALL).values
    ordered = {q: [d for _, d in sorted(zip(compute.as_trec_scores(list(r.values())).tolist(), r, strict=True),
                                        reverse=True)] for q, r in run.items()}  # fmt: skip
    assert np.array_equal(score_run(ordered, qrels, measures=ALL).values, expected)
    monkeypatch.setattr(compute, "_CELLS", 5)
    assert np.array_equal(score_run(run, qrels, measures=ALL).values, expected)
    uniform = {q: r for q, r in run.items() if len(r) == 30}
    assert len(uniform) > 20
    check_bit_identical(uniform, qrels, score_run(uniform, qrels, measures=ALL))


def test_a_tie_at_the_top_of_every_query() -> None:
    """Every retrieved document shares one score: ranks come from doc ids alone (descending)."""
    run = {f"q{i}": {f"d{j:03d}": 1.0 for j in range(200)} for i in range(50)}
    qrels = {q: {f"d{j:03d}": 1 + j % 3 for j in range(i % 7, 200, 9)} for i, q in enumerate(run)}
    result = score_run(run, qrels, measures=ALL)
    assert check_bit_identical(run, qrels, result) == 50 * len(ALL)
    assert result.per_query["q0"]["MRR"] == 0.5  # q0's relevant d198 comes second, after d199


def test_signed_zeros_and_infinities_tie_like_trec_eval() -> None:
    """-0.0 ties 0.0, and 1e39 ties inf (both inf as 32-bit floats): the greater doc id comes first."""
    run = {"zero": {"a": 0.0, "b": -0.0, "c": -1.0}, "inf": {"a": float("inf"), "b": 1e39, "c": 1.0},
           "low": {"a": float("-inf"), "b": -1e39, "c": -1.0}}  # fmt: skip
    qrels = {q: {"a": 1} for q in run}
    result = score_run(run, qrels, measures=ALL)
    assert [result.per_query[q]["MRR"] for q in run] == [0.5, 0.5, 1 / 3]
    assert check_bit_identical(run, qrels, result) == 3 * len(ALL)


def test_bulk_checks_name_the_query_and_document() -> None:
    good = {"a": {"x": 1.0}, "b": {"y": 2.0}}
    qrels = {"a": ["x"], "b": ["y"], "c": ["z"]}
    cases = [
        ({**good, "c": {"z": 1.0, 9: 0.5}}, "query 'c': doc id must be a string, got 9 (int)"),
        ({**good, "c": {"z": 1.0, "w": "0.5"}}, "query 'c': score of document 'w' must be a number, got '0.5'"),
        ({**good, "c": {"w": 0.1, "z": np.float32("nan")}}, "query 'c': score of document 'z' is NaN"),
        ({**good, "c": {"z": 10**400}}, "query 'c': score of document 'z' is too large for a 64-bit float"),
        ({**good, "c": ["z", 4]}, "query 'c': doc id must be a string, got 4 (int)"),
    ]
    for run, message in cases:
        with pytest.raises(RunError) as info:
            score_run(run, qrels, measures=["MRR"])
        assert str(info.value) == message
    # numpy strings and numbers and any Mapping are read like str, float and dict
    odd = {"a": UserDict({np.str_("x"): np.float32(1.0), "v": True}), "b": {"y": np.int64(2)}, "c": {"z": 0.25}}
    assert score_run(odd, qrels, measures=["MRR"]).per_query == {"a": {"MRR": 1.0}, "b": {"MRR": 1.0},
                                                                 "c": {"MRR": 1.0}}  # fmt: skip


def test_tied_scores_at_a_few_thousand_queries_equal_pytrec_eval() -> None:
    """3,000 queries, every other one with its scores on a grid of 1/20 (about 5 documents per score, ordered by
    doc id descending) and some with one score for all: every per-query value equals pytrec_eval's."""
    rng = np.random.default_rng(5)
    run: dict = {}
    qrels: dict = {}
    for q in range(3_000):
        docs = [f"d{i}" for i in rng.choice(5_000, 60, replace=False).tolist()]
        scores = rng.random(60)
        if q % 2:
            scores = np.round(scores * 20) / 20 if q % 10 != 1 else np.ones(60)
        run[f"q{q}"] = dict(zip(docs, scores.tolist(), strict=True))
        judged = docs[: int(rng.integers(1, 8))] + [f"d{i}" for i in rng.integers(0, 5_000, 3).tolist()]
        qrels[f"q{q}"] = {d: int(g) for d, g in zip(judged, rng.integers(0, 4, len(judged)).tolist(), strict=False)}
    result = score_run(run, qrels, measures=ALL)
    assert check_bit_identical(run, qrels, result) == len(result.query_ids) * len(ALL) > 2_500 * len(ALL)
