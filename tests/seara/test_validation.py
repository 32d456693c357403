"""SEARA offline validation on truth sets with complete labels (memo 6.7): convrag.seara.validation and the
benchmarks/validate_seara.py script. The fast tests use the family without the dense model.

Facts checks: tests/seara/test_facts.py already checks items (i)-(iii) of memo 6.7 item 6 on hand-built runs
through the extraction pipeline; here they are checked on BM25 runs over five chunkings with real offsets."""

from __future__ import annotations

import importlib.util
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from convrag.judging.items import AuditDoc
from convrag.seara.judge import as_item
from convrag.seara.validation import (
    LengthBiasedOracleJudge,
    TruthSet,
    ValidationError,
    compare,
    default_configurations,
    judged_qrels,
    load_hotpotqa,
    load_mtrag,
    make_judge,
    make_runs,
    micro_pr_auc,
    pooled_subsets,
    restrict,
    tau_ap,
    validate,
)
from convrag.seara.validation_facts import CHUNKINGS, chunk_document, facts_checks, query_document
from tests.conftest import DATA, REPO

K = 10
SCRIPT = REPO / "benchmarks" / "validate_seara.py"


@pytest.fixture(scope="module")
def hotpot() -> TruthSet:
    return load_hotpotqa(DATA / "hotpotqa")


@pytest.fixture(scope="module")
def hotpot_runs(hotpot: TruthSet) -> dict:
    return make_runs(hotpot, default_configurations(dense=False), K)


@pytest.fixture(scope="module")
def mtrag() -> TruthSet:
    return load_mtrag(DATA / "mtrag").head(60)


@pytest.fixture(scope="module")
def mtrag_runs(mtrag: TruthSet) -> dict:
    return make_runs(mtrag, default_configurations(dense=False), K)


def test_hotpotqa_truth_set(hotpot: TruthSet) -> None:
    assert len(hotpot.queries) == 40  # 10 train + 30 dev records, none excluded
    for qid, pool in hotpot.pools.items():
        assert len(pool) == len(set(pool)) == 15 and set(hotpot.qrels[qid]) == set(pool[:2])
        assert all(not hotpot.corpus[d].startswith("__no_content__") for d in pool)  # borrowed, never padded
        for d, s, e in hotpot.facts[qid]:
            assert d in hotpot.qrels[qid] and hotpot.corpus[d][s:e] == hotpot.corpus[d][s:e].strip()
    first = "5a8b57f25542995d1e6f1371"  # the first dev record
    d, s, e = hotpot.facts[first][0]
    assert hotpot.corpus[d][s:e] == ("Scott Derrickson (born July 16, 1966) is an American director, screenwriter "
                                     "and producer.")


def test_mtrag_truth_set(mtrag: TruthSet) -> None:
    full = load_mtrag(DATA / "mtrag")
    assert (len(full.queries), len(full.corpus)) == (777, 2021)
    assert full.pools is None and all(full.qrels.values())
    assert all(d in full.corpus for rel in full.qrels.values() for d in rel)
    assert list(mtrag.queries) == list(full.queries)[:60] and len(mtrag.corpus) == 2021


def test_family_gives_different_rankings(hotpot: TruthSet, hotpot_runs: dict) -> None:
    assert len(hotpot_runs) == 8
    for name, run in hotpot_runs.items():
        depth = {"bm25@5": 5, "bm25s@3": 3}.get(name, K)
        assert all(len(r) == depth and set(r) <= set(hotpot.pools[q]) for q, r in run.items())
    assert hotpot_runs["bm25@5"] == {q: r[:5] for q, r in hotpot_runs["bm25"].items()}
    assert len({json.dumps(r, sort_keys=True) for r in hotpot_runs.values()}) == 8


@pytest.mark.parametrize("name", ["hotpot", "mtrag"])
def test_oracle_with_every_configuration_pooled_is_exact(name: str, request: pytest.FixtureRequest) -> None:
    """pseudo = true x (sum R_q / sum R'_q) x (queries / queries with R'_q > 0) for every configuration (module
    docstring of convrag.seara.validation), so tau-b = 1, tau_AP = 1, top-1 agrees and regret = 0."""
    truth, runs = request.getfixturevalue(name), request.getfixturevalue(f"{name}_runs")
    pseudo_qrels = judged_qrels(truth, runs, K, make_judge("oracle", truth, 0))  # through judge_pool
    for q, graded in pseudo_qrels.items():
        assert {d for d, g in graded.items() if g == 3} == set(graded) & set(truth.qrels[q])
    true, pseudo = micro_pr_auc(runs, truth.qrels, K), micro_pr_auc(runs, pseudo_qrels, K)
    found = [sum(g == 3 for g in v.values()) for v in pseudo_qrels.values()]
    factor = sum(map(len, truth.qrels.values())) / sum(found) * len(found) / sum(f > 0 for f in found)
    # hotpotqa: the random configurations reach every gold paragraph of the 15-paragraph pools; mtrag: some true
    # relevant passages are in no configuration's top K (some queries have none pooled), and the factor is above 1
    assert factor == 1.0 if name == "hotpot" else (factor > 1 and 0 in found)
    for c in runs:
        assert pseudo[c] == pytest.approx(true[c] * factor, rel=1e-12)
    row = validate(truth, runs, K, judges=["oracle"], pooled=(), seeds=2)["rows"][0]
    assert (row["pooled"], row["tau_b_mean"], row["tau_b_min"], row["tau_ap_mean"], row["top1_share"]) == (
        8, 1.0, 1.0, 1.0, 1.0)
    assert row["regret_mean"] == row["regret_max"] == 0.0


def test_compare_hand_checked() -> None:
    true = {"a": 0.5, "b": 0.4, "c": 0.3}
    # pairs ab, ac discordant, bc concordant: tau = (1 - 2) / 3; pseudo picks b: regret 0.5 - 0.4
    # tau_AP over the pseudo order b, c, a: C(c) = 1 of 1, C(a) = 0 of 2 -> 2 / 2 * (1 + 0) - 1 = 0
    out = compare(true, {"a": 0.1, "b": 0.3, "c": 0.2})
    assert out["tau_b"] == pytest.approx(-1 / 3) and out["chosen"] == "b" and not out["top1"]
    assert out["tau_ap"] == 0.0
    assert out["regret"] == pytest.approx(0.1)
    # a pseudo tie is broken by order; a true tie at the top makes either choice agree (regret 0)
    tie = compare({"a": 0.5, "b": 0.5, "c": 0.1}, {"b": 0.2, "a": 0.2, "c": 0.0})
    assert tie["chosen"] == "b" and tie["top1"] and tie["regret"] == 0.0 and tie["tau_b"] == tie["tau_ap"] == 1.0
    assert compare(true, {"a": 0.3, "b": 0.2, "c": 0.1}) == {"tau_b": 1.0, "tau_ap": 1.0, "top1": True, "regret": 0.0,
                                                             "chosen": "a"}
    assert tau_ap([3, 2, 1, 0], [0, 1, 2, 3]) == -1.0
    # a tie in the pseudo values only counts 1/2: order a, b (tie), c -> C(b) = 1/2, C(c) = 2 -> 2/2 * 1.5 - 1
    assert tau_ap([2, 1, 0], [1, 1, 0]) == 0.5


def test_noisy_judges_reproducible_and_flip_rate_zero_is_the_oracle(hotpot: TruthSet, hotpot_runs: dict) -> None:
    oracle = judged_qrels(hotpot, hotpot_runs, K, make_judge("oracle", hotpot, 0))
    assert judged_qrels(hotpot, hotpot_runs, K, make_judge("noisy-0", hotpot, 3)) == oracle
    assert judged_qrels(hotpot, hotpot_runs, K, make_judge("length-0", hotpot, 3)) == oracle
    noisy = judged_qrels(hotpot, hotpot_runs, K, make_judge("noisy-0.2", hotpot, 1))
    flips = sum(noisy[q][d] != g for q, v in oracle.items() for d, g in v.items())
    pairs = sum(map(len, oracle.values()))
    assert 0.1 < flips / pairs < 0.3
    a = validate(hotpot, hotpot_runs, K, judges=["noisy-0.2"], pooled=(2,), seeds=3)
    b = validate(hotpot, hotpot_runs, K, judges=["noisy-0.2"], pooled=(2,), seeds=3)
    assert a == b
    for row in a["rows"]:
        assert -1 <= row["tau_b_min"] <= row["tau_b_mean"] <= 1 and row["regret_max"] >= row["regret_mean"] >= 0
    assert min(r["tau_b_min"] for r in a["rows"]) < 1  # flips at 20% do reorder this family
    zero = validate(hotpot, hotpot_runs, K, judges=["noisy-0", "oracle"], pooled=(2, 4), seeds=2)["rows"]
    assert [{**r, "judge": ""} for r in zero[:3]] == [{**r, "judge": ""} for r in zero[3:]]


def test_length_judge_flips_long_texts_more() -> None:
    qrels = {"q": {f"rel{i}": 3 for i in range(4000)}}
    judge = LengthBiasedOracleJudge(qrels, 0.1, reference_length=200, seed=0)
    item = as_item("q", "a question")

    def rate(prefix: str, length: int) -> float:
        docs = [AuditDoc(f"{prefix}{i}", "", "x" * length) for i in range(4000)]
        return sum(judge.verdict(item, d).extra["flipped"] for d in docs) / len(docs)

    # false positives: rate * L / 200 = 0.05 at L = 100, 0.2 at L = 400, capped at 1; false negatives: 0.1 always
    assert rate("short", 100) == pytest.approx(0.05, abs=0.015)
    assert rate("long", 400) == pytest.approx(0.2, abs=0.025)
    assert rate("huge", 5000) == 1.0
    assert rate("rel", 100) == pytest.approx(0.1, abs=0.02) and rate("rel", 5000) == rate("rel", 100)
    doc = AuditDoc("long7", "", "x" * 400)
    assert judge.verdict(item, doc) == judge.verdict(item, doc)


def test_length_judge_on_the_hotpot_pool(hotpot: TruthSet, hotpot_runs: dict) -> None:
    judged = [judged_qrels(hotpot, hotpot_runs, K, make_judge("length-0.1", hotpot, s)) for s in range(5)]
    negatives = [(q, d) for q, v in judged[0].items() for d in v if d not in hotpot.qrels[q]]
    median = sorted(len(hotpot.corpus[d]) for _, d in negatives)[len(negatives) // 2]

    def fp(long: bool) -> float:
        pairs = [(q, d) for q, d in negatives if (len(hotpot.corpus[d]) > median) == long]
        return sum(j[q][d] == 3 for j in judged for q, d in pairs) / (len(pairs) * len(judged))

    assert fp(True) > 2 * fp(False) > 0


def test_pooled_subsets_and_restrict(hotpot: TruthSet, hotpot_runs: dict) -> None:
    names = list(hotpot_runs)
    assert pooled_subsets(names, 99, 0) == names
    two = pooled_subsets(names, 2, 4)
    assert two == pooled_subsets(names, 2, 4) and len(two) == 2 and two == [n for n in names if n in two]
    assert len({tuple(pooled_subsets(names, 2, s)) for s in range(10)}) > 1
    with pytest.raises(ValidationError):
        pooled_subsets(names, 0, 0)
    oracle = judged_qrels(hotpot, hotpot_runs, K, make_judge("oracle", hotpot, 0))
    sub = restrict(oracle, {"bm25s@3": hotpot_runs["bm25s@3"]}, K, list(hotpot.queries))
    assert sub == {q: {d: oracle[q][d] for d in hotpot_runs["bm25s@3"][q]} for q in hotpot.queries}


@pytest.mark.parametrize("kind", ["noisy-0.2", "length-0.2"])
def test_a_sub_pool_judged_directly_equals_the_restriction(kind: str, hotpot: TruthSet, hotpot_runs: dict) -> None:
    """A pair gets the same verdict wherever it is pooled: validate's reuse of the full pool's judgments is exact."""
    sub = {c: hotpot_runs[c] for c in ("bm25", "random")}
    judge = make_judge(kind, hotpot, 3)
    assert judged_qrels(hotpot, sub, K, judge) == restrict(judged_qrels(hotpot, hotpot_runs, K, judge), sub, K,
                                                           list(hotpot.queries))


def test_unknown_judge_and_too_few_configurations(hotpot: TruthSet, hotpot_runs: dict) -> None:
    with pytest.raises(ValidationError, match="unknown judge"):
        make_judge("perfect", hotpot, 0)
    with pytest.raises(ValidationError, match="unknown judge"):
        make_judge("noisy-lots", hotpot, 0)
    with pytest.raises(ValidationError, match="in \\[0, 1\\]"):
        make_judge("length-1.5", hotpot, 0)
    with pytest.raises(ValidationError, match="reference_length"):
        LengthBiasedOracleJudge({}, 0.1, 0)
    with pytest.raises(ValidationError, match="configurations"):
        validate(hotpot, {"bm25": hotpot_runs["bm25"]}, K)


def test_chunkings_are_verbatim_and_tile_the_paragraphs(hotpot: TruthSet) -> None:
    qid = next(iter(hotpot.queries))
    text, offsets = query_document(hotpot, qid)
    for how in CHUNKINGS:
        chunks = chunk_document(hotpot, qid, how)
        assert all(text[c.start:c.end] == c.text and c.doc_id == qid for c in chunks)
    windows = chunk_document(hotpot, qid, "window-300+150")
    assert [c.start for c in windows[:3]] == [0, 150, 450] and windows[-1].end == len(text)
    pairs = chunk_document(hotpot, qid, "paragraph-pair")
    assert len(pairs) == 8 and pairs[0].text == text[:offsets[sorted(offsets)[1]] + len(
        hotpot.corpus[sorted(offsets)[1]])]


def test_facts_checks_memo_6_7_item_6(hotpot: TruthSet) -> None:
    out = facts_checks(hotpot, K)
    rows = out["chunkings"]
    assert out["facts"] == 105 and set(rows) == set(CHUNKINGS)
    for r in rows.values():
        assert r["fact_recall"] == r["sentence_recall"]  # (i)
        assert r["ideal_fact_recall"] == 1.0 and r["ideal_chunk_recall"] < 0.3  # (ii) the artefact
    # (ii) the pool counts each chunking's copy of the evidence: the ideal runs' chunk recalls add up to 1
    assert math.fsum(r["ideal_chunk_recall"] for r in rows.values()) == pytest.approx(1.0)
    # (iii) measured on this data: chunk precision prefers the coarsest chunking, char precision the finest
    assert out["coarsest"] == out["best_chunk_precision"] == "paragraph-pair"
    assert out["best_char_precision"] == "sentence"
    assert rows["paragraph-pair"]["char_precision"] < rows["paragraph"]["char_precision"] < rows["sentence"][
        "char_precision"]
    with pytest.raises(ValidationError, match="no pools"):
        query_document(TruthSet("x", {"q": "?"}, {}, {"q": {}}), "q")


def _script():
    spec = importlib.util.spec_from_file_location("validate_seara", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("argv", [["--k", "0"], ["--dataset", "trec"], ["--seeds", "x"], ["--pooled", "2,,3"],
                                  ["--data", "/nonexistent/folder"]])
def test_script_bad_arguments_exit_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        _script().main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("validate_seara: error: ")


def test_script_missing_data_exits_1_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert _script().main(["--data", str(tmp_path), "--dataset", "mtrag"]) == 1
    last = capsys.readouterr().err.splitlines()[-1]
    assert last == f"validate_seara: mtrag: MTRAG folder not found: {tmp_path}/mtrag"
    with pytest.raises(ValidationError, match="no HotpotQA file"):
        load_hotpotqa(tmp_path)


def test_script_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "v.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--no-dense", "--max-queries", "6", "--seeds", "2",
                           "--json", str(out)], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for title in ("== hotpotqa: 6 queries", "== mtrag: 6 queries", "configuration table", "validation table",
                  "facts checks", "noisy-0.05", "length-0.1"):
        assert title in proc.stdout
    assert "judging the pool" in proc.stderr
    data = json.loads(out.read_text())
    assert set(data) == {"hotpotqa", "mtrag"} and len(data["mtrag"]["rows"]) == 5 * 3
    assert data["hotpotqa"]["rows"][2] | {"chosen": None} == {
        "judge": "oracle", "pooled": 8, "tau_b_mean": 1.0, "tau_b_min": 1.0, "tau_ap_mean": 1.0, "top1_share": 1.0,
        "regret_mean": 0.0, "regret_max": 0.0, "chosen": None}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_dense_family_oracle_exact_on_hotpotqa(hotpot: TruthSet) -> None:
    runs = make_runs(hotpot, default_configurations(dense=True), K)
    assert len(runs) == 9
    row = validate(hotpot, runs, K, judges=["oracle"], pooled=(), seeds=1)["rows"][0]
    assert (row["tau_b_min"], row["regret_max"]) == (1.0, 0.0)


def test_seeded_draws_do_not_use_global_random_state(hotpot: TruthSet, hotpot_runs: dict) -> None:
    random.seed(1)
    a = judged_qrels(hotpot, hotpot_runs, K, make_judge("noisy-0.1", hotpot, 2))
    random.seed(2)
    assert judged_qrels(hotpot, hotpot_runs, K, make_judge("noisy-0.1", hotpot, 2)) == a
