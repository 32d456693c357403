"""RECOR evaluation: macro-averaging, paired t-tests, failure bands, complexity, tables, plot, end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from convrag.benchmarks.recor import tables as rt
from convrag.benchmarks.recor.aggregate import MEASURES, analyse, render_tables
from convrag.builders.recor import RECOR
from convrag.evaluate.report import evaluate_folder, write_outputs
from convrag.hub.export import export_benchmark
from tests.conftest import DATA

# two domains with different turn counts: "a" has 1 turn, "b" has 3
TURNS = {
    "a:1:1": {"domain": "a", "conversation_id": "a:1", "turn": 1, "aspects": 3},
    "b:1:1": {"domain": "b", "conversation_id": "b:1", "turn": 1, "aspects": 8},
    "b:1:2": {"domain": "b", "conversation_id": "b:1", "turn": 2, "aspects": 8},
    "b:1:5": {"domain": "b", "conversation_id": "b:1", "turn": 5, "aspects": 8},
}
NDCG = {  # retriever -> strategy -> nDCG@10 per turn (in TURNS order)
    "bm25": {"baseline": [1.0, 0.0, 0.0, 0.5], "history+reasoning": [1.0, 0.2, 0.9, 0.6],
             "history": [1.0, 0.0, 0.4, 0.7]},
    "dense": {"baseline": [0.5, 0.1, 0.3, 0.2], "history+reasoning": [0.7, 0.25, 0.8, 0.4],
              "history": [0.5, 0.1, 0.5, 0.3]},
}  # fmt: skip


def per_turn() -> dict:
    return {r: {s: {q: {m: v for m in MEASURES} for q, v in zip(TURNS, values, strict=True)}
                for s, values in by_s.items()} for r, by_s in NDCG.items()}  # fmt: skip


@pytest.fixture(scope="module")
def results() -> dict:
    return analyse(per_turn(), TURNS, MEASURES, n_bootstrap=200, seed=0)


def test_macro_is_the_mean_of_domain_means_not_the_micro_mean(results: dict) -> None:
    bm25 = results["systems"]["bm25"]["baseline"]
    assert bm25["domains"]["a"]["nDCG@10"] == 1.0
    assert bm25["domains"]["b"]["nDCG@10"] == pytest.approx(0.5 / 3, abs=1e-15)
    assert bm25["macro"]["nDCG@10"] == pytest.approx((1.0 + 0.5 / 3) / 2, abs=1e-15)  # 7/12
    assert bm25["micro"]["nDCG@10"] == pytest.approx(1.5 / 4, abs=1e-15)
    assert bm25["macro"]["nDCG@10"] != pytest.approx(bm25["micro"]["nDCG@10"])
    assert results["n_turns"] == {"a": 1, "b": 3}
    ci = bm25["macro_ci"]["nDCG@10"]
    assert ci["low"] <= ci["mean"] <= ci["high"] and ci["mean"] == bm25["macro"]["nDCG@10"] and ci["n"] == 4
    # the Average row is the mean over retrievers of the macro values
    avg = (bm25["macro"]["nDCG@10"] + results["systems"]["dense"]["baseline"]["macro"]["nDCG@10"]) / 2
    assert results["average"]["baseline"]["mean"] == pytest.approx(avg, abs=1e-15)


def test_stratified_bootstrap_is_deterministic_and_brackets_the_macro() -> None:
    values = {"a": [1.0, 0.0, 0.5], "b": [0.2, 0.4]}
    one, two = rt.macro_bootstrap(values, 500, seed=3), rt.macro_bootstrap(values, 500, seed=3)
    assert one == two and one.mean == pytest.approx((0.5 + 0.3) / 2) and one.low < one.mean < one.high
    assert rt.macro_bootstrap({"a": [0.4, 0.4]}, 100).to_dict() == {"mean": 0.4, "low": 0.4, "high": 0.4, "n": 2}


def test_paired_t_test_matches_scipy(results: dict) -> None:
    rows = {(r["a"], r["b"], r["retriever"]): r for r in results["significance"]}
    assert set(rows) == {(a, b, s) for a, b in [("history+reasoning", "baseline"), ("history", "baseline"),
                                               ("history+reasoning", "history")] for s in ("all", "bm25", "dense")}
    x = np.array(NDCG["bm25"]["history+reasoning"] + NDCG["dense"]["history+reasoning"])
    y = np.array(NDCG["bm25"]["baseline"] + NDCG["dense"]["baseline"])
    ref = stats.ttest_rel(x, y)
    row = rows[("history+reasoning", "baseline", "all")]
    assert row["n"] == 8
    assert row["t"] == pytest.approx(ref.statistic, rel=1e-12)
    assert row["p_ttest"] == pytest.approx(ref.pvalue, rel=1e-12)
    assert row["mean_diff"] == pytest.approx(float((x - y).mean()), abs=1e-15)
    assert row["se"] == pytest.approx(float(np.std(x - y, ddof=1) / math.sqrt(8)), rel=1e-12)
    # Mean Δ (macro): domain means of the pooled differences, then their mean
    d = x - y
    assert row["mean_diff_macro"] == pytest.approx((np.mean(d[[0, 4]]) + np.mean(d[[1, 2, 3, 5, 6, 7]])) / 2, abs=1e-15)
    one = rows[("history", "baseline", "dense")]
    ref1 = stats.ttest_rel(NDCG["dense"]["history"], NDCG["dense"]["baseline"])
    assert one["t"] == pytest.approx(ref1.statistic) and one["p_ttest"] == pytest.approx(ref1.pvalue)


def test_failure_bands_and_turn1_share(results: dict) -> None:
    best = {"q1": 0.95, "q2": 0.8, "q3": 0.79, "q4": 0.5, "q5": 0.3, "q6": 0.29, "q7": 0.0, "q8": 0.1}
    turns = {q: {"turn": 1 if q in ("q1", "q6", "q7") else 3} for q in best}
    fa = rt.failure_analysis(best, turns, "test")
    assert [(b["band"], b["count"]) for b in fa["bands"]] == [("≥ 0.8", 2), ("0.5–0.8", 2), ("0.3–0.5", 1),
                                                             ("< 0.3", 3)]  # fmt: skip
    assert [b["share"] for b in fa["bands"]] == [2 / 8, 2 / 8, 1 / 8, 3 / 8]
    assert fa["failures"] == ["q6", "q7", "q8"] and fa["turn1_failures"] == 2
    assert fa["turn1_share_of_failures"] == 2 / 3 and fa["turn1_share_of_all"] == 3 / 8
    # on the hand-made results: the paper's basis is the best retriever with History+Reasoning
    paper = results["failure_analysis"]["paper"]
    assert paper["basis"] == "retrievers with History+Reasoning"
    assert paper["failures"] == ["b:1:1"] and paper["turn1_share_of_failures"] == 1.0  # max(0.2, 0.25) < 0.3
    assert results["failure_analysis"]["any"]["n_failures"] == 1


def test_turn_position_and_complexity(results: dict) -> None:
    tp = results["turn_position"]
    assert tp["n"] == {"T1": 2, "T2": 1, "T3": 0, "T4": 0, "T5+": 1}
    base = tp["strategies"]["baseline"]
    assert base["by_retriever"]["bm25"] == {"T1": 0.5, "T2": 0.0, "T5+": 0.5}  # T1: macro of a=1.0 and b=0.0
    assert base["average"]["T1"] == pytest.approx((0.5 + 0.3) / 2) and base["trend"] is None
    cx = results["complexity"]
    assert cx["available"] and [r["turns"] for r in cx["rows"]] == [0, 0, 2]
    high = cx["rows"][2]
    assert high["baseline"] == pytest.approx((0.3 + 0.5) / 2) and high["history+reasoning"] == pytest.approx(0.75)
    assert high["delta"] == pytest.approx(0.75 / 0.4 - 1)
    no_aspects = {q: {**t, "aspects": None} for q, t in TURNS.items()}
    assert rt.complexity(per_turn(), no_aspects, ["baseline", "history+reasoning"])["note"].startswith("not available")


def test_tables_shapes_and_outputs(results: dict, tmp_path: Path) -> None:
    md = render_tables(results)
    for title in ("Table 3", "Table 5: nDCG@10 by domain — bm25", "Table 5 (paper shape)", "Table 6", "Table 17",
                  "Table 19", "Failure analysis"):
        assert title in md, title
    t3 = rt.table3(results).splitlines()
    assert t3[0] == "| Retriever | Base | H+R | Hist |" and len(t3) == 2 + 2 + 1  # head, rule, 2 retrievers, Average
    t5 = rt.table5(results, "dense").splitlines()
    assert len(t5) == 2 + 2 + 1 and t5[-1].startswith("| Macro | 4 |")
    t19 = rt.table19(results).splitlines()
    assert t19[0] == "| Strategy | Retriever | T1 | T2 | T3 | T4 | T5+ | Trend T2→T4 |" and len(t19) == 2 + 3 * 3 + 1
    rt.plot_turn_positions(results, str(tmp_path / "plot.png"))
    assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_end_to_end_on_the_real_sample(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="the default backend needs llama-cpp-python")
    from convrag.llm import get_llm

    folder = tmp_path / "recor"
    export_benchmark("recor", folder, options={"source": str(DATA / "recor" / "sample")})
    res, scored = evaluate_folder(folder, RECOR.EVALUATION, retrievers=("bm25", "dense"), n_bootstrap=200,
                                  llm=get_llm("default", cache=tmp_path / "llm"), progress=False)  # fmt: skip
    assert res["strategies"] == ["baseline", "rewrite", "reasoning", "history", "history+reasoning"]
    assert res["n_turns"] == {"biology": 3, "drones": 4, "earth_science": 3, "law": 3}
    assert res["rewrite"]["llm_calls"] == 9 and not res["rewrite"]["failures"]
    for r in ("bm25", "dense"):
        for s in res["strategies"]:
            sysres = res["systems"][r][s]
            values = [*sysres["macro"].values(), *sysres["micro"].values()]
            values += [v for d in sysres["domains"].values() for v in d.values()]
            assert all(0.0 <= v <= 1.0 for v in values) and len(res["per_turn"][r][s]) == 13
    for entry in res["turn_position"]["strategies"].values():
        assert all(0.0 <= v <= 1.0 for v in entry["average"].values()) and entry["average"].keys() >= {"T1", "T2", "T3"}
    assert sum(b["count"] for b in res["failure_analysis"]["paper"]["bands"]) == 13
    assert len(res["significance"]) == 3 * 6  # 4 vs baseline + H+R vs Hist + H+R vs Reas, pooled + 2 retrievers
    write_outputs(res, scored, tmp_path / "results")
    out = tmp_path / "results"
    assert (out / "turn_position.png").read_bytes()[:4] == b"\x89PNG" and len(list((out / "runs").iterdir())) == 11
    saved = json.loads((out / "results.json").read_text())
    assert saved["systems"]["bm25"]["baseline"]["macro"] == res["systems"]["bm25"]["baseline"]["macro"]
    md = (out / "results.md").read_text()
    assert all(t in md for t in ("Table 3", "Table 5", "Table 6", "Table 17", "Table 19", "Failure analysis"))
    print(md)


def test_one_strategy_has_no_comparisons_and_no_plot(results: dict, tmp_path: Path) -> None:
    from convrag.evaluate.report import _plots

    one = {r: {"baseline": by_s["baseline"]} for r, by_s in per_turn().items()}
    single = analyse(one, TURNS, MEASURES, n_bootstrap=0, seed=0)
    assert single["significance"] == [] and list(single["turn_position"]["strategies"]) == ["baseline"]
    assert _plots(single, RECOR.EVALUATION, tmp_path) == {} and not list(tmp_path.iterdir())
    drawn = _plots(results, RECOR.EVALUATION, tmp_path, stem="x-")  # three strategies: a figure that compares
    assert drawn == {"turn_position.png": tmp_path / "x-turn_position.png"}
    assert drawn["turn_position.png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
