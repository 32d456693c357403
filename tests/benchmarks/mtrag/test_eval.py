"""Subtask A scoring (against pytrec_eval and the official weighting) and the submission checks."""

from __future__ import annotations

import json
import math
import random

import pytest
import pytrec_eval

from convrag.benchmarks.mtrag.scoring import (
    check_submission,
    measures,
    read_input_task_ids,
    read_submission,
    render_tables,
    score_subtask_a,
    write_submission,
)
from convrag.builders.mtrag_source import COLLECTIONS, DOMAINS, read_qrels
from convrag.core.errors import DataError
from convrag.metrics.retrieval.trec import read_run
from tests.conftest import DATA

SRC = DATA / "mtrag"
NAMES = measures()
TREC = {f"nDCG@{k}": f"ndcg_cut_{k}" for k in (1, 3, 5, 10)} | {f"Recall@{k}": f"recall_{k}" for k in (1, 3, 5, 10)}


def _qrels(path):
    out: dict[str, dict[str, int]] = {}
    for qid, did, score, _ in read_qrels(str(path)):
        out.setdefault(qid, {})[did] = score
    return out


@pytest.fixture(scope="module")
def official():
    """The released MTRAG qrels per domain and a random run over them, with ties, misses and extra tasks."""
    qrels = {d: _qrels(SRC / "mtrag-human" / "retrieval_tasks" / d / "qrels" / "dev.tsv") for d in DOMAINS}
    rng = random.Random(7)
    runs = {}
    for d, rels in qrels.items():
        pool = sorted({doc for r in rels.values() for doc in r})
        run = {}
        for i, (qid, r) in enumerate(sorted(rels.items())):
            if i % 25 == 0:
                continue  # judged but not submitted
            docs = rng.sample(pool, 8) + rng.sample(sorted(r), min(2, len(r)))
            run[qid] = {doc: float(rng.choice([1, 2, 2, 3, 5])) for doc in docs}  # many ties
        run[f"unanswerable{d}<::>1"] = {pool[0]: 1.0}  # a submitted task without qrels
        runs[d] = run
    return qrels, runs


def _official_script_rows(qrels, runs, k_values=(1, 3, 5, 10)):
    """What run_retrieval_eval.py computes, written independently with pytrec_eval."""
    rows = {}
    for d, run in runs.items():
        evaluator = pytrec_eval.RelevanceEvaluator(qrels[d], {"ndcg_cut." + ",".join(map(str, k_values)),
                                                              "recall." + ",".join(map(str, k_values))})  # fmt: skip
        scores = evaluator.evaluate(run)
        rows[d] = ({m: round(sum(s[TREC[m]] for s in scores.values()) / len(scores), 5) for m in NAMES}, len(run),
                   scores)  # fmt: skip
    total = sum(c for _, c, _ in rows.values())
    all_row = {m: sum(r[m] * c for r, c, _ in rows.values()) / total for m in NAMES}
    return rows, all_row


def test_scores_equal_pytrec_eval_and_official_script(official):
    qrels, runs = official
    result = score_subtask_a(runs, qrels)
    rows, all_row = _official_script_rows(qrels, runs)
    for d in DOMAINS:
        means, count, per_query = rows[d]
        assert result.domains[d]["count"] == count == len(runs[d])
        assert result.domains[d]["n_judged"] == len(qrels[d])
        assert result.domains[d]["n_evaluated"] == len(per_query) == len(runs[d]) - 1
        assert result.domains[d]["official"] == means
        for qid, values in per_query.items():
            for m in NAMES:
                assert result.per_query[qid][m] == pytest.approx(values[TREC[m]], abs=1e-12), (qid, m)
    assert result.official_all == pytest.approx(all_row, abs=1e-12)
    assert result.unscored_tasks == 4
    # judged tasks missing from the run score 0 in our means (not in the official ones)
    missing = [q for d in DOMAINS for q in qrels[d] if q not in runs[d]]
    assert missing and all(result.per_query[q]["Recall@10"] == 0.0 for q in missing)
    assert len(result.per_query) == 777
    assert result.micro["nDCG@5"] == pytest.approx(sum(s["nDCG@5"] for s in result.per_query.values()) / 777)


def test_official_all_row_by_hand():
    # clapnq: q1 finds its passage first; u1 has no qrels (submitted, unscored) -> count 2, nDCG@3 = 1.0
    # govt: q2's passage at rank 2 -> nDCG@3 = 1/log2(3) = 0.630929..., rounded 0.63093; count 1
    qrels = {"clapnq": {"c<::>1": {"a": 1}}, "govt": {"g<::>1": {"b": 1}, "g<::>2": {"z": 1}}}
    runs = {"clapnq": {"c<::>1": {"a": 2.0, "x": 1.0}, "c<::>9": {"a": 1.0}}, "govt": {"g<::>1": {"y": 2.0, "b": 1.0}}}
    result = score_subtask_a(runs, qrels)
    assert result.domains["clapnq"]["official"]["nDCG@3"] == 1.0
    assert result.domains["govt"]["official"]["nDCG@3"] == 0.63093  # g<::>2 is not in the run: not averaged
    assert result.official_all["nDCG@3"] == pytest.approx((1.0 * 2 + 0.63093 * 1) / 3)
    assert result.official_all["Recall@1"] == pytest.approx((1.0 * 2 + 0.0 * 1) / 3)
    # ours: govt mean counts the missing g<::>2 as 0; macro = mean of the domain means
    assert result.domains["govt"]["ours"]["nDCG@3"] == pytest.approx(1 / math.log2(3) / 2)
    assert result.macro["nDCG@3"] == pytest.approx((1.0 + 1 / math.log2(3) / 2) / 2)
    assert result.micro["nDCG@3"] == pytest.approx((1.0 + 1 / math.log2(3) + 0.0) / 3)


def test_breakdowns_use_labels():
    qrels = {"fiqa": {"a<::>1": {"d1": 1}, "a<::>2": {"d2": 1}}}
    runs = {"fiqa": {"a<::>1": {"d1": 1.0}, "a<::>2": {"d1": 1.0}}}
    labels = {
        "a<::>1": {"answerability": "ANSWERABLE", "multi_turn": "N/A", "standalone": ""},
        "a<::>2": {"answerability": "PARTIAL", "multi_turn": "Follow-up", "standalone": "Non-standalone"},
    }
    groups = score_subtask_a(runs, qrels, labels).groups
    assert groups["answerability"]["ANSWERABLE"]["Recall@1"] == 1.0 and groups["answerability"]["PARTIAL"]["n"] == 1
    assert groups["standalone"] == {
        "(unlabelled)": {"n": 1, **{m: 1.0 for m in NAMES}},
        "Non-standalone": {"n": 1, **{m: 0.0 for m in NAMES}},
    }


def _write(path, items):
    path.write_text("\n".join(i if isinstance(i, str) else json.dumps(i) for i in items) + "\n")
    return path


def test_submission_checks_report_each_problem(tmp_path):
    clap = COLLECTIONS["clapnq"]
    ctx = [{"document_id": f"d{i}", "score": 1.0 / (i + 1)} for i in range(11)]
    path = _write(tmp_path / "sub.jsonl", [
        {"task_id": "a::1", "Collection": clap, "contexts": ctx[:3]},  # '::' accepted
        {"task_id": "a<::>2", "Collection": clap, "contexts": ctx},  # 11 contexts
        "{broken",
        {"task_id": "a<::>3", "contexts": []},  # no Collection
        {"task_id": "a<::>4", "Collection": "ibmcloud", "contexts": [{"score": 1}, {"document_id": "x", "score": "1"}]},
        {"task_id": "a<::>1", "Collection": clap, "contexts": []},  # duplicate
        {"task_id": "a<::>5", "Collection": "banking", "contexts": []},
        {"task_id": "a<::>6", "Collection": "govt", "contexts": [{"document_id": "x", "score": True}]},
    ])  # fmt: skip
    report, submission = check_submission(path, expected_task_ids=["a<::>1", "a<::>2", "a<::>4", "a<::>7"])
    text = "\n".join(report.errors)
    assert f"{path}:2: too many contexts (11); at most 10" in text
    assert f"{path}:3: invalid JSON" in text
    assert f"{path}:4: missing required field 'Collection'" in text
    assert f"{path}:5: contexts[0] missing 'document_id'" in text
    assert f"{path}:5: contexts[1] score must be a finite number, got '1'" in text
    assert f"{path}:6: task 'a<::>1' already submitted on line 1" in text
    assert "unknown MTRAG collection 'banking'" in text
    assert f"{path}:8: contexts[0] score must be a finite number, got True" in text
    assert "missing task_id 'a<::>7'" in text and "task_id 'a<::>6' is not in the input" in text
    assert submission.runs["clapnq"]["a<::>1"] == {"d0": 1.0, "d1": 0.5, "d2": pytest.approx(1 / 3)}
    assert "a<::>4" in submission.runs["cloud"]
    with pytest.raises(DataError, match="format error"):
        read_submission(path)


def test_submission_round_trip_against_sample_input(tmp_path):
    sample = SRC / "scripts" / "evaluation" / "sample_data" / "taskac_input.jsonl"
    ids = read_input_task_ids(sample)
    assert ids[0] == "dd6b6ffd177f2b311abe676261279d2f<::>1" and len(ids) == 10
    runs = {"clapnq": {t: {"x": 1.0, "y": 2.0} for t in ids[:8]}, "govt": {t: {"z": 0.5} for t in ids[8:]}}
    path = tmp_path / "run.jsonl"
    write_submission(runs, path)
    report, _ = check_submission(path, ids)
    assert report.ok and report.warnings == []
    assert read_submission(path, ids).runs == runs
    first = json.loads(path.read_text().splitlines()[0])
    assert first["Collection"] == COLLECTIONS["clapnq"] and first["contexts"][0]["document_id"] == "y"


def test_evaluate_folder_bm25_on_mtrag_un(tmp_path):
    from convrag.builders.mtrag_un import MTRAGUN
    from convrag.hub.export import export_benchmark

    options = {"source": str(SRC)}
    configs = [c for c in MTRAGUN.default_configs(options) if not c.startswith("all-") and "tasks" not in c]
    export_benchmark("mtrag-un", tmp_path / "un", configs=configs, options=options)
    qrels = {d: _qrels(SRC / "mtragun-human" / "retrieval_tasks" / "qrels" / f"{d}.tsv") for d in DOMAINS}
    perfect = {q.replace("<::>", "::"): {doc: 1.0 for doc in rels} for d in DOMAINS for q, rels in qrels[d].items()}
    from convrag.builders.mtrag_un import MTRAGUN as cls
    from convrag.evaluate.report import evaluate_folder, write_outputs

    results, scored = evaluate_folder(tmp_path / "un", cls.EVALUATION, retrievers=["bm25"], n_bootstrap=50,
                                      external_runs={"gold": perfect}, progress=False)  # fmt: skip
    assert results["views"] == ["lastturn", "questions"] and results["corpus_kind"]["fiqa"] == "cited"
    entry = results["results"][0]
    # official weights: every submitted task (507), not only the 332 scored ones
    assert {d: r["count"] for d, r in entry["domains"].items()} == {"clapnq": 142, "cloud": 131, "fiqa": 77,
                                                                    "govt": 157}  # fmt: skip
    assert sum(r["n_judged"] for r in entry["domains"].values()) == len(entry["per_query"]) == 332
    assert 0 < entry["official_all"]["nDCG@5"] <= 1
    ci = entry["micro_ci"]["nDCG@5"]
    assert ci["low"] <= ci["mean"] <= ci["high"] and ci["mean"] == pytest.approx(entry["micro"]["nDCG@5"])
    gold = results["results"][-1]
    assert (gold["system"], gold["view"]) == ("gold", "run") and gold["official_all"]["nDCG@1"] == 1.0
    assert {d: r["count"] for d, r in gold["domains"].items()} == {"clapnq": 83, "cloud": 86, "fiqa": 58, "govt": 105}
    table = render_tables(results)
    assert "| bm25 | lastturn | all (official, weighted) |" in table and "macro (ours)" in table

    # the runs written for the retriever score exactly as the in-memory ones, read back from either format
    paths = write_outputs(results, scored, tmp_path)
    assert sorted(p.name for p in paths if p.parent.name == "runs") == [
        "bm25__lastturn.jsonl", "bm25__lastturn.trec", "bm25__questions.jsonl", "bm25__questions.trec", "qrels.trec"]
    again, _ = evaluate_folder(tmp_path / "un", cls.EVALUATION, retrievers=[], n_bootstrap=50, progress=False,
                               submissions={"sub": tmp_path / "runs" / "bm25__lastturn.jsonl"},
                               external_runs={"trec": read_run(tmp_path / "runs" / "bm25__lastturn.trec")})
    for rescored in again["results"]:
        assert rescored["official_all"] == entry["official_all"] and rescored["per_query"] == entry["per_query"]
