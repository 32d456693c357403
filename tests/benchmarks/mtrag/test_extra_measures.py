"""MTRAG's extra measures: any measure of the retrieval metric beside the official nDCG@k / Recall@k, shown in our
rows only and marked as not official; the official rows unchanged bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import pytrec_eval

from convrag.benchmarks.mtrag.scoring import ranked, score_subtask_a, split_measures
from convrag.benchmarks.mtrag.tables import render_tables
from convrag.cli import main
from convrag.metrics.retrieval.compute import MeasureError
from convrag.metrics.retrieval.trec import read_qrels, read_run
from tests.conftest import DATA

ASKED = "nDCG@5,RR@10,AP@10,P@5"
EXTRA = ["RR@10", "AP@10", "P@5"]
#: pytrec_eval's name of each extra measure (RR@10 is recip_rank over the run cut at 10)
TREC = {"RR@10": "recip_rank", "AP@10": "map_cut_10", "P@5": "P_5"}
FAST = ["--retrievers", "bm25", "--bootstrap", "50", "--no-progress"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MTRAG's clapnq and govt tasks over their cited passages."""
    out = tmp_path_factory.mktemp("extra") / "mtrag"
    configs = [f"{d}-{v}" for d in ("clapnq", "govt") for v in ("lastturn", "qrels", "cited-corpus")]
    assert main(["build", "mtrag", "--source", str(DATA / "mtrag"), "--out", str(out),
                 *(a for c in configs for a in ("--config", c))]) == 0  # fmt: skip
    return out


@pytest.fixture(scope="module")
def evaluated(built: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The results folders of the same evaluation asked for nDCG@5 with the extras, and for nDCG@5 alone."""
    root = tmp_path_factory.mktemp("extra-res")
    assert main(["evaluate", str(built), *FAST, "--measures", ASKED, "--out", str(root / "extra")]) == 0
    assert main(["evaluate", str(built), *FAST, "--measures", "nDCG@5", "--out", str(root / "official")]) == 0
    return root / "extra", root / "official"


def _json(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text(encoding="utf-8"))


def test_split_measures_by_name_and_alias() -> None:
    assert split_measures(["nDCG@5", "RR@10", "AP@10", "P@5"]) == ((5,), EXTRA)
    assert split_measures(["R@3", "MRR", "nDCG", "Success@1"]) == ((3,), ["MRR", "nDCG", "Success@1"])
    assert split_measures(["P@5"]) == ((), ["P@5"])
    with pytest.raises(MeasureError, match="unknown measure 'Foo@3'"):
        split_measures(["nDCG@5", "Foo@3"])


def test_extras_leave_the_official_rows_bit_for_bit() -> None:
    qrels = {"clapnq": {"a": {"d1": 1, "d2": 1}, "b": {"d3": 1}, "c": {"d9": 1}},
             "govt": {"g": {"x": 1}, "h": {"y": 1}}}  # fmt: skip
    runs = {"clapnq": {"a": {"d0": 3.0, "d2": 2.0, "d1": 2.0, "d7": 1.0}, "b": {"d5": 1.0, "d3": 0.5},
                       "z": {"d1": 1.0}},
            "govt": {"g": {"x": 0.25, "q": 0.75}}}  # fmt: skip
    plain = score_subtask_a(runs, qrels, k_values=(1, 3))
    extra = score_subtask_a(runs, qrels, k_values=(1, 3), extra_measures=["RR@10", "P@3"])
    assert extra.official_all == plain.official_all
    assert {d: r["official"] for d, r in extra.domains.items()} == {d: r["official"] for d, r in plain.domains.items()}
    assert all("RR@10" not in r["official"] and "RR@10" in r["ours"] for r in extra.domains.values())
    assert extra.per_query["a"]["RR@10"] == 1 / 2 and extra.per_query["c"]["P@3"] == 0.0  # c is missing: 0
    assert extra.to_dict()["measures"] == ["nDCG@1", "nDCG@3", "Recall@1", "Recall@3", "RR@10", "P@3"]
    assert (extra.to_dict()["official_measures"], extra.to_dict()["extra_measures"]) == (plain.to_dict()["measures"],
                                                                                          ["RR@10", "P@3"])  # fmt: skip
    only = score_subtask_a(runs, qrels, k_values=(), extra_measures=["P@3"])
    assert only.official_all == {} and only.macro["P@3"] == extra.macro["P@3"]


def test_evaluate_marks_the_extra_columns_and_keeps_the_official_rows(evaluated: tuple[Path, Path]) -> None:
    extra, official = evaluated
    results, alone = _json(extra), _json(official)
    assert results["official_measures"] == alone["measures"] == ["nDCG@5", "Recall@5"]
    assert results["extra_measures"] == EXTRA and results["measures"] == ["nDCG@5", "Recall@5", *EXTRA]
    assert alone["extra_measures"] == []
    for entry, plain in zip(results["results"], alone["results"], strict=True):
        assert (entry["system"], entry["view"]) == (plain["system"], plain["view"])
        assert entry["official_all"] == plain["official_all"]  # bit for bit, and no extra measure in it
        assert {d: r["official"] for d, r in entry["domains"].items()} == \
            {d: r["official"] for d, r in plain["domains"].items()}  # fmt: skip
        for q, scores in plain["per_query"].items():
            assert {m: entry["per_query"][q][m] for m in scores} == scores
        assert set(entry["micro"]) == set(entry["micro_ci"]) == set(results["measures"])
        assert all(set(r["ours"]) == set(results["measures"]) for r in entry["domains"].values())
    text = (extra / "results.md").read_text(encoding="utf-8")
    head = next(line for line in text.splitlines() if line.startswith("| system |"))
    assert head == "| system | view | row | nDCG@5 | Recall@5 | RR@10 (extra) | AP@10 (extra) | P@5 (extra) |"
    assert 'Columns marked "(extra)" (RR@10, AP@10, P@5) are not Subtask A measures' in text
    assert "| clapnq (ours) |" in text and "| clapnq (ours) |" not in (official / "results.md").read_text()
    # every official row of the nDCG@5-only report, with no value in the extra columns
    rows = [line for line in (official / "results.md").read_text(encoding="utf-8").splitlines() if "official" in line
            and line.startswith("|")]  # fmt: skip
    assert len(rows) == 1 + 3  # the summary's row (one view built: lastturn), then the two domains and "all"
    for row in rows:
        assert row + " - | - | - |" in text


def test_extra_values_are_pytrec_evals(evaluated: tuple[Path, Path]) -> None:
    extra, _ = evaluated
    results = _json(extra)
    qrels = {q: dict(rels) for q, rels in read_qrels(extra / "runs" / "qrels.trec").items()}
    for entry in results["results"]:
        run = read_run(extra / "runs" / f"{entry['system']}__{entry['view']}.trec")
        top10 = {q: {d: scores[d] for d in ranked(scores)[:10]} for q, scores in run.items()}
        trec = pytrec_eval.RelevanceEvaluator(qrels, set(TREC.values())).evaluate(top10)
        assert len(entry["per_query"]) > 100
        for q, scores in entry["per_query"].items():
            for m, name in TREC.items():
                assert scores[m] == pytest.approx(trec.get(q, {}).get(name, 0.0), abs=1e-12), (q, m)


def test_only_extra_measures_say_there_is_no_official_row(built: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", str(built), *FAST, "--strategies", "lastturn", "--measures", "RR@10,P@5",
                 "--out", str(tmp_path / "res")]) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert "no official Subtask A measure was asked (RR@10, P@5 are extra measures)" in err
    results = _json(tmp_path / "res")
    assert results["official_measures"] == [] and results["k_values"] == []
    assert all(e["official_all"] == {} for e in results["results"])
    text = (tmp_path / "res" / "results.md").read_text(encoding="utf-8")
    assert "No official Subtask A measure was asked" in text and "(official" not in text
    assert render_tables(results, 4) in text
    assert (tmp_path / "res" / "runs" / "bm25__lastturn.jsonl").is_file()  # the submission file is still written


@pytest.mark.parametrize(("measures", "says"), [("nDCG@5,Foo@3", "unknown measure 'Foo@3'"),
                                                ("ndcg@5", "unknown measure 'ndcg@5'"),
                                                ("nDCG@5,nDCG@5", "measures are repeated: nDCG@5")])  # fmt: skip
def test_bad_measures_are_one_line_exit_2(built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          measures: str, says: str) -> None:
    capsys.readouterr()
    assert main(["evaluate", str(built), *FAST, "--measures", measures, "--out", str(tmp_path / "res")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err
    assert not (tmp_path / "res" / "results.json").exists()
