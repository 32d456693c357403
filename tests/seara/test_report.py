"""SEARA selection statistics and reports (convrag.seara.stats, convrag.seara.report): the vectorised micro PR-AUC
against metrics/pr_auc, the paired bootstrap, the cheaper-wins pick, factorial effects, leaderboard, YAML choice
and plots. No LLM is involved: everything here is arithmetic on judged pools."""

from __future__ import annotations

import csv
import json
import random
from fractions import Fraction

import numpy as np
import pytest
import yaml

from convrag.core.errors import ConvragError
from convrag.metrics.pr_auc.compute import aggregate, score_chunks
from convrag.seara.pool import PoolMismatchError
from convrag.seara.report import (
    leaderboard,
    leaderboard_rows,
    plot_interaction,
    plot_pr_curves,
    write_choice,
    write_leaderboard,
)
from convrag.seara.stats import (
    BootstrapResult,
    SelectionError,
    bootstrap,
    factorial_effects,
    holm,
    pick,
    query_counts,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SIG = "pool-0123456789abcdef/judge-abcdef012345"

# q1: R' = 3 (a, c, x; x never retrieved); q2: R' = 1 (e; d is grade 1 < 2); q3: R' = 0 (excluded)
QRELS = {"q1": {"a": 3, "b": 0, "c": 2, "x": 2}, "q2": {"d": 1, "e": 2}, "q3": {"f": 0, "g": 1}}
RUN = {"q1": ["a", "b", "c"], "q2": ["d", "e"], "q3": ["f"]}


def _random_case(seed: int, n_queries: int = 40, n_configs: int = 4, k: int = 8):
    rng = random.Random(seed)
    qrels = {f"q{i}": {f"c{j}": rng.choice([0, 0, 1, 2, 3]) for j in range(15)} for i in range(n_queries)}
    qrels["q0"] = {f"c{j}": rng.choice([0, 1]) for j in range(15)}  # R' = 0
    runs = {f"cfg{c}": {q: rng.sample(sorted(qrels[q]), rng.randint(0, k)) for q in qrels} for c in range(n_configs)}
    return runs, qrels


# ------------------------------------------------------------------------------------------------ counts / micro
def test_hand_computed_micro_pr_auc_equals_aggregate():
    # k=1: TP 1 (a) + 0 (d), D 2 -> R 1/4, P 1/2; k=2: TP 1 + 1 (e), D 4 -> R 2/4, P 2/4;
    # k=3: TP 2 + 1, D 3 + 2 -> R 3/4, P 3/5. Area = 1/4 * 1/2 + 1/4 * 1/2 + 1/4 * 3/5 = 2/5
    expected = Fraction(1, 4) * Fraction(1, 2) * 2 + Fraction(1, 4) * Fraction(3, 5)
    assert expected == Fraction(2, 5)
    counts = query_counts(RUN, QRELS, 3)
    assert [q.relevant for q in counts] == [3, 1, 0]
    reference = aggregate(counts, 3)["pr_auc"]
    result = bootstrap({"run": RUN}, QRELS, 3, n_boot=50)
    assert result.point["run"] == reference == score_chunks(RUN, QRELS, k=3)["pr_auc"]
    assert result.point["run"] == pytest.approx(0.4, abs=1e-15)
    assert result.query_ids == ("q1", "q2") and result.excluded_query_ids == ("q3",)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_vectorised_point_equals_metric_bit_for_bit(seed):
    runs, qrels = _random_case(seed)
    result = bootstrap(runs, qrels, 8, n_boot=20, seed=seed)
    for name, run in runs.items():
        assert result.point[name] == score_chunks(run, qrels, k=8)["pr_auc"]


def test_query_counts_errors():
    with pytest.raises(SelectionError, match="no judgment"):
        query_counts({"q1": ["a", "zz"]}, QRELS, 3)
    assert query_counts({"q1": ["a", "zz"]}, QRELS, 3, unjudged="nonrelevant")[0].found == (1, 1)
    with pytest.raises(SelectionError, match="no judgments"):
        query_counts({"q9": ["a"]}, QRELS, 3)
    with pytest.raises(SelectionError, match="repeats|twice"):
        query_counts({"q1": ["a", "a"]}, QRELS, 3)
    with pytest.raises(SelectionError, match="no query has a relevant"):
        bootstrap({"r": {"q3": ["f"]}}, {"q3": {"f": 0}}, 3)
    assert issubclass(SelectionError, ConvragError)


# ---------------------------------------------------------------------------------------------------- bootstrap
def test_bootstrap_deterministic_ci_contains_point_and_identical_runs_differ_by_zero():
    runs, qrels = _random_case(7)
    runs["copy"] = {q: list(v) for q, v in runs["cfg0"].items()}
    first = bootstrap(runs, qrels, 8, n_boot=300, seed=11)
    again = bootstrap(runs, qrels, 8, n_boot=300, seed=11)
    other = bootstrap(runs, qrels, 8, n_boot=300, seed=12)
    assert np.array_equal(first.samples, again.samples)
    assert not np.array_equal(first.samples, other.samples)
    assert first.samples.shape == (5, 300)
    for name in runs:
        low, high = first.ci(name)
        assert low <= first.point[name] <= high and low < high
    same = first.diff("copy", "cfg0")
    assert (same.diff, same.low, same.high, same.share_a_better) == (0.0, 0.0, 0.0, 0.0)
    assert first.p_value("copy", "cfg0") == 1.0
    pairs = first.pairs()
    assert len(pairs) == 5 * 4
    ab, ba = first.diff("cfg1", "cfg2"), first.diff("cfg2", "cfg1")
    assert ab.diff == -ba.diff and ab.low == pytest.approx(-ba.high) and ab.high == pytest.approx(-ba.low)
    assert json.dumps(first.summary())


def test_bootstrap_resamples_are_paired():
    runs, qrels = _random_case(5)
    result = bootstrap(runs, qrels, 8, n_boot=200, seed=3)
    # each configuration alone, same seed: same resamples, so the same per-resample values
    alone = bootstrap({"cfg2": runs["cfg2"]}, qrels, 8, n_boot=200, seed=3)
    assert np.array_equal(alone.samples[0], result.samples[result.configurations.index("cfg2")])


# --------------------------------------------------------------------------------------------------------- pick
def _result(points: dict[str, float], samples: dict[str, np.ndarray]) -> BootstrapResult:
    names = tuple(points)
    return BootstrapResult(configurations=names, point=points, samples=np.vstack([samples[n] for n in names]),
                           query_ids=("q",), excluded_query_ids=(), k=10, level=2, n_boot=1001, seed=0, alpha=0.05)


def test_pick_cheaper_within_ci_wins():
    base = np.full(1001, 0.50)
    samples = {"big": base, "small": base + np.linspace(-0.03, 0.01, 1001), "weak": base - 0.2}
    result = _result({"big": 0.50, "small": 0.49, "weak": 0.30}, samples)
    choice = pick(result, {"big": 10, "small": 1, "weak": 0.5})
    assert choice.winner == "small" and choice.best_by_point == "big" and choice.runner_up == "big"
    assert choice.tied == ("big", "small")
    assert choice.reason.startswith("cheaper within CI")
    assert set(choice.holm) == {"big", "weak"}
    # equal costs: the better point estimate wins
    assert pick(result, {"big": 1, "small": 1, "weak": 1}).winner == "big"


def test_pick_clear_winner():
    base = np.linspace(0.55, 0.65, 1001)
    result = _result({"a": 0.6, "b": 0.4, "c": 0.3}, {"a": base, "b": base - 0.2, "c": base - 0.3})
    choice = pick(result, {"a": 100, "b": 1, "c": 1})
    assert (choice.winner, choice.best_by_point, choice.runner_up, choice.tied) == ("a", "a", "b", ("a",))
    assert choice.reason.startswith("clear winner")
    with pytest.raises(SelectionError, match="no cost for c"):
        pick(result, {"a": 1, "b": 1})


def test_holm():
    adjusted = holm({"x": 0.01, "y": 0.04, "z": 0.03})
    assert adjusted == pytest.approx({"x": 0.03, "z": 0.06, "y": 0.06})


# ---------------------------------------------------------------------------------------------------- factorial
def _design():
    factors, scores = {}, {}
    for w in ("none", "llm"):
        for f in ("off", "on"):
            for r in ("none", "ce"):
                name = f"{w}-{f}-{r}"
                factors[name] = {"rewriter": w, "filter": f, "reranker": r}
                # 0.40 + 0.10 filter + 0.04 reranker + 0.08 (rewriter and filter): rewriter helps only with filter
                scores[name] = 0.40 + 0.10 * (f == "on") + 0.04 * (r == "ce") + 0.08 * (w == "llm" and f == "on")
    return scores, factors


def test_factorial_effects_on_hand_made_2x2x2():
    scores, factors = _design()
    effects = factorial_effects(scores, factors)
    assert effects["levels"] == {"rewriter": ["none", "llm"], "filter": ["off", "on"], "reranker": ["none", "ce"]}
    assert effects["main_effects"]["filter"]["on"] == pytest.approx(0.14)
    assert effects["main_effects"]["rewriter"]["llm"] == pytest.approx(0.04)
    assert effects["main_effects"]["reranker"]["ce"] == pytest.approx(0.04)
    table = effects["interactions"]["rewriter x filter"]
    assert table == {"none": pytest.approx({"off": 0.42, "on": 0.52}), "llm": pytest.approx({"off": 0.42, "on": 0.60})}
    assert effects["interaction_effects"]["rewriter x filter"] == pytest.approx(0.08)
    assert effects["interaction_effects"]["rewriter x reranker"] == pytest.approx(0.0, abs=1e-12)
    assert effects["grand_mean"] == pytest.approx(0.40 + 0.05 + 0.02 + 0.02)
    flipped = factorial_effects(scores, factors, levels={"rewriter": ["llm", "none"], "filter": ["on", "off"],
                                                         "reranker": ["ce", "none"]})  # fmt: skip
    assert flipped["main_effects"]["filter"]["off"] == pytest.approx(-0.14)


def test_factorial_refuses_incomplete_design():
    scores, factors = _design()
    del scores["llm-on-ce"], factors["llm-on-ce"]
    with pytest.raises(SelectionError, match="not a full balanced factorial"):
        factorial_effects(scores, factors)
    with pytest.raises(SelectionError, match="same"):
        factorial_effects({"x": 1.0}, {"y": {"a": "1"}})


# -------------------------------------------------------------------------------------------------- leaderboard
def _results(signature_b: str = SIG):
    run_b = {"q1": ["b", "a"], "q2": ["e"], "q3": ["g"]}
    return {"good": score_chunks(RUN, QRELS, k=3, pool_signature=SIG),
            "poor": score_chunks(run_b, QRELS, k=3, pool_signature=signature_b)}


def test_leaderboard_table_and_notes(tmp_path):
    results = _results()
    boot = bootstrap({"good": RUN, "poor": {"q1": ["b", "a"], "q2": ["e"], "q3": ["g"]}}, QRELS, 3, n_boot=100,
                     pool_signature=SIG)  # fmt: skip
    signature, rows = leaderboard_rows(results, bootstrap=boot, judge_calls={"good": 5, "poor": 3},
                                       costs={"good": 2.0, "poor": 1.0})  # fmt: skip
    assert signature == SIG
    # poor: q1 [b, a], q2 [e]: k=1 TP 1 / D 2 (R 1/4, P 1/2); k=2 TP 2 / D 3 (R 2/4, P 2/3); k=3 unchanged
    assert [r["configuration"] for r in rows] == ["good", "poor"]
    assert rows[1]["pr_auc"] == pytest.approx(1 / 4 * 1 / 2 + 1 / 4 * 2 / 3)
    by_name = {r["configuration"]: r for r in rows}
    assert by_name["good"]["pr_auc"] == pytest.approx(0.4) and by_name["good"]["cost_rank"] == 2
    assert by_name["poor"]["cost_rank"] == 1 and by_name["good"]["ci_low"] <= 0.4 <= by_name["good"]["ci_high"]
    text = leaderboard(results, bootstrap=boot, judge_calls={"good": 5}, calibration={"kappa": 0.61})
    assert "| good | 0.4000 [" in text and "95% CI" in text
    assert "3 queries, 1 excluded (R' = 0" in text and SIG in text and "pool-relative" in text
    assert "Judge calibration: kappa 0.610." in text
    paths = write_leaderboard(tmp_path / "lb", results, bootstrap=boot, costs={"good": 2.0, "poor": 1.0})
    assert {p.name for p in paths.values()} == {"leaderboard.md", "leaderboard.csv", "leaderboard.json"}
    with paths["csv"].open(encoding="utf-8") as handle:
        table = list(csv.DictReader(handle))
    assert {r["configuration"]: float(r["pr_auc"]) for r in table}["good"] == pytest.approx(0.4)
    payload = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert payload["pool_signature"] == SIG and payload["bootstrap"]["n_boot"] == 100


def test_leaderboard_refuses_mixed_or_missing_signatures():
    with pytest.raises(PoolMismatchError, match="different pools"):
        leaderboard(_results("pool-ffffffffffffffff/judge-abcdef012345"))
    with pytest.raises(PoolMismatchError, match="no pool signature"):
        leaderboard({"a": score_chunks(RUN, QRELS, k=3)})
    boot = bootstrap({"good": RUN}, QRELS, 3, n_boot=10)  # no signature recorded
    with pytest.raises(PoolMismatchError):
        leaderboard({"good": _results()["good"]}, bootstrap=boot)
    other_k = bootstrap({"good": RUN}, QRELS, 1, n_boot=10, pool_signature=SIG)
    with pytest.raises(ConvragError, match="differs"):
        leaderboard({"good": _results()["good"]}, bootstrap=other_k)


# -------------------------------------------------------------------------------------------------- YAML, plots
def test_write_choice_round_trips(tmp_path):
    dims = {"chunking": "nms", "filter": {"quality": "on", "poi": "off"}, "reranker": "llm_window"}
    metrics = {"pr_auc": np.float64(0.4321), "ci": [0.40, 0.46], "n_scored": np.int64(120)}
    path = write_choice(tmp_path / "choice.yaml", "nms+filters+llm", dims, metrics, SIG, reason="cheaper within CI")
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# SEARA choice") and "# This choice: cheaper within CI" in text
    loaded = yaml.safe_load(text)
    assert loaded == {"configuration": "nms+filters+llm", "pool_signature": SIG, "measure": "chunks",
                      "measure_reason": None, "judge": None, "dimensions": dims,
                      "metrics": {"pr_auc": 0.4321, "ci": [0.40, 0.46], "n_scored": 120}}  # fmt: skip


def test_pr_curve_png_and_csv(tmp_path):
    result = score_chunks(RUN, QRELS, k=3, pool_signature=SIG)
    curve = result["curve"]
    curves = {"good": {"recall": curve["recall_micro"], "precision": curve["precision_micro"], "k": curve["k"],
                       "pr_auc": result["pr_auc"]},
              "empty_first": {"recall": [0.0, 0.25], "precision": [None, 0.5], "k": [1, 2], "pr_auc": 0.125}}
    png, points = plot_pr_curves(tmp_path / "plots" / "pr.png", curves, "stage 1", SIG)
    assert png.read_bytes()[:8] == PNG_MAGIC and points == tmp_path / "plots" / "pr.csv"
    with points.open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    good = [(int(r["k"]), float(r["recall"]), float(r["precision"])) for r in rows if r["configuration"] == "good"]
    assert good == list(zip(curve["k"], curve["recall_micro"], curve["precision_micro"], strict=True))
    assert good == [(1, 0.25, 0.5), (2, 0.5, 0.5), (3, 0.75, 0.6)]
    skipped = [(int(r["k"]), float(r["precision"])) for r in rows if r["configuration"] == "empty_first"]
    assert skipped == [(2, 0.5)]


def test_interaction_png(tmp_path):
    scores, factors = _design()
    effects = factorial_effects(scores, factors)
    for x, line in (("filter", "rewriter"), ("rewriter", "filter")):
        png = plot_interaction(tmp_path / f"{x}.png", effects, x, line, pool_signature=SIG)
        assert png.read_bytes()[:8] == PNG_MAGIC
    with pytest.raises(ConvragError, match="no interaction table"):
        plot_interaction(tmp_path / "x.png", effects, "filter", "chunking")


def test_fact_columns_choose_when_asked_and_their_bootstrap_must_match() -> None:
    from convrag.seara import fact_level
    from convrag.seara.facts import Chunk, Fact, FactSet
    from convrag.seara.report import ReportError, leaderboard, leaderboard_rows
    from convrag.seara.stats import bootstrap_counts

    text = "Ada wrote the first program. She worked with Babbage. The engine was never built."
    chunks = {"para": Chunk("para", "d", 0, text), "s1": Chunk("s1", "d", 0, text[:28]),
              "s2": Chunk("s2", "d", 29, text[29:52]), "s3": Chunk("s3", "d", 53, text[53:])}
    facts = FactSet({"d:0-28": Fact("d:0-28", "d", 0, 28, text[:28], ("q",), ()),
                     "d:29-52": Fact("d:29-52", "d", 29, 52, text[29:52], ("q",), ())},
                    {"q": ["d:0-28", "d:29-52"]})
    runs = {"paragraph": {"q": ["para"]}, "sentences": {"q": ["s3", "s1", "s2"]}}
    # chunk-level: the sentence chunking has two relevant units to the paragraph chunking's one
    qrels = {"q": {"para": 3, "s1": 3, "s2": 3, "s3": 0}}
    chunk = {n: score_chunks(r, qrels, k=3, pool_signature=SIG) for n, r in runs.items()}
    fact = fact_level.score_runs(runs, chunks, facts, 3, ["q"], pool_signature=SIG)
    assert fact["paragraph"]["pr_auc"] == 1.0 and fact["sentences"]["pr_auc"] == pytest.approx(0.5 * 0.5 + 0.5 * 2 / 3)
    counts = {n: fact_level.query_counts(r, chunks, facts, 3, ["q"]) for n, r in runs.items()}
    boot = bootstrap_counts(counts, 3, n_boot=20, pool_signature=SIG)
    assert boot.point == {n: fact[n]["pr_auc"] for n in runs}  # bit for bit
    _, rows = leaderboard_rows(chunk, facts=fact, fact_bootstrap=boot, headline="facts")
    assert [r["configuration"] for r in rows] == ["paragraph", "sentences"]
    assert rows[0]["fact_recall_at_k"] == 1.0 and rows[0]["fact_ci_low"] == rows[0]["fact_ci_high"] == 1.0
    assert "fact PR-AUC [95% CI] (chooses)" in leaderboard(chunk, facts=fact, fact_bootstrap=boot, headline="facts")
    other = bootstrap_counts({n: counts[n] for n in reversed(list(runs))}, 2, n_boot=20, pool_signature=SIG)
    with pytest.raises(ReportError, match="fact-level bootstrap PR-AUC"):
        leaderboard_rows(chunk, facts=fact, fact_bootstrap=other, headline="facts")
    with pytest.raises(ReportError, match="headline"):
        leaderboard_rows(chunk, headline="facts")


def test_an_interaction_axis_never_blows_up_a_difference_of_nothing() -> None:
    from convrag.seara.report import MIN_SPAN, y_limits

    low, high = y_limits([0.7554, 0.7562, 0.7558, 0.7560])  # a factor with no effect: drawn flat
    assert high - low == pytest.approx(MIN_SPAN) and low < 0.7554 and high > 0.7562
    assert y_limits([0.2, 0.8]) == pytest.approx((0.14, 0.86))  # a real effect keeps its own range
    assert y_limits([0.99, 1.0])[1] == 1.0 and y_limits([0.0, 0.001])[0] == 0.0  # within [0, 1]
