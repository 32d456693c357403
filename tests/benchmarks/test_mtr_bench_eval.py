"""``convrag evaluate`` on an MTR-Bench build: the authors' protocol through the one evaluation path."""

from __future__ import annotations

import json

import pytest

from convrag.cli import main
from convrag.evaluation.data import load_benchmark
from convrag.hub.export import export_benchmark
from convrag.retrievers.strategies import dialogue_text
from tests.mtr_bench_fixture import write_fixture


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("mtr-eval")
    write_fixture(root / "source")
    export_benchmark("mtr-bench", root / "out", options={"source": str(root / "source")})
    return root / "out"


def test_history_strategy_is_the_authors_serialisation(built):
    from convrag.builders.mtr_bench import MTRBench

    data = load_benchmark(built, MTRBench.EVALUATION)
    turn = next(t for t in data.turns if t.position == 3)
    text = dialogue_text(turn)
    lines = text.split("\n")
    assert lines[0].startswith("User: ") and lines[1].startswith("Agent: ") and len(lines) == 5
    assert lines[-1] == f"User: {turn.query.strip()}" and text.tail == (lines[-1],)
    assert data.corpus_kind == {"": "full"} and len(data.corpus[""]) == 50


def test_evaluate_prints_the_paper_tables(built, tmp_path, capsys):
    out = tmp_path / "res"
    assert main(["evaluate", str(built), "--retrievers", "bm25", "--bootstrap", "50", "--no-progress",
                 "--out", str(out)]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "| Retriever | Strategy | R@1 | R@5 | R@20 | MRR@20 | nDCG@20 |" in printed
    assert "nDCG@20 by turn position" in printed and "Hard topic switches" in printed
    results = json.loads((out / "results.json").read_text())
    assert set(results["systems"]) == {"bm25|history", "bm25|lastturn"} and results["scale"] == 100.0
    system = results["systems"]["bm25|lastturn"]
    per_query = results["per_query"]["bm25|lastturn"]
    hit1 = sum(v["Recall@1"] for v in per_query.values()) / len(per_query)
    assert system["overall"]["Recall@1"]["mean"] == pytest.approx(hit1) and len(per_query) == 48
    assert all(v["Recall@1"] in (0.0, 1.0) for v in per_query.values())  # one gold per turn: a hit rate
    assert list(system["groups_by"]["turn"]) == [str(t) for t in range(1, 13)]
    phases = system["groups_by"]["switch_phase"]
    assert {p: phases[p]["n"] for p in phases} == {"no switch": 24, "before switch": 10,
                                                  "first turn after switch": 2, "after switch": 12}
    assert f"| bm25 | lastturn | {hit1 * 100:.4f} [" in printed  # x100 in the table, unscaled in the JSON
    assert (out / "per_turn.png").read_bytes()[:4] == b"\x89PNG"
    assert {p.name for p in (out / "runs").iterdir()} == {"bm25__history.trec", "bm25__lastturn.trec",
                                                          "qrels.trec"}


def test_extended_recall_pool_search_and_cluster_corpus(built, tmp_path):
    out = tmp_path / "res"
    assert main(["evaluate", str(built), "--retrievers", "bm25", "--strategies", "lastturn", "--bootstrap", "20",
                 "--measures", "Recall@1,Recall@5,Recall@20,Recall@100,Recall@1000", "--no-progress",
                 "--out", str(out)]) == 0  # fmt: skip
    full = json.loads((out / "results.json").read_text())["systems"]["bm25|lastturn"]["overall"]
    assert full["Recall@1000"]["mean"] == 1.0 and full["Recall@100"]["mean"] == 1.0  # 50 documents
    assert main(["evaluate", str(built), "--retrievers", "bm25", "--strategies", "lastturn", "--bootstrap", "20",
                 "--search", "pool", "--no-progress", "--out", str(out)]) == 0  # fmt: skip
    pooled = json.loads((out / "results.json").read_text())
    assert pooled["pool_restricted"] and pooled["systems"]["bm25|lastturn"]["overall"]["Recall@20"]["mean"] == 1.0
    assert main(["evaluate", str(built), "--retrievers", "bm25", "--corpus", "cluster", "--bootstrap", "20",
                 "--no-progress", "--out", str(out)]) == 0  # fmt: skip
    assert main(["evaluate", str(built), "--retrievers", "bm25", "--corpus", "nope", "--out", str(out)]) == 2


def test_per_turn_plot_positions_mark_small_groups() -> None:
    from convrag.evaluation.turn_tables import position_labels

    assert position_labels({"1": {"n": 40}, "2": {"n": 9}, "12": {"n": 1}}) == ["1\nn=40", "2\nn=9 †", "12\nn=1 †"]
