"""Cautions computed from the data: the shipped RECOR sample (3-4 documents per domain) is saturated at @10 and its
domains are small groups; MTRAG scored over the cited passages is a reduced corpus; StratRAG's 10-paragraph pools
at Recall@5 carry no caution. Each shows in results.json, at the top of results.md and in the plot's footnote."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from convrag.cli import main
from tests.conftest import DATA


def _evaluate(folder: Path, out: Path, *args: str) -> tuple[dict, str]:
    assert main(["evaluate", str(folder), "--bootstrap", "20", "--no-progress", "--out", str(out), *args]) == 0
    return json.loads((out / "results.json").read_text()), (out / "results.md").read_text()


def test_recor_sample_is_saturated_and_small(tmp_path: Path) -> None:
    built = tmp_path / "recor"
    assert main(["build", "recor", "--source", str(DATA / "recor" / "sample"), "--out", str(built)]) == 0
    results, md = _evaluate(built, tmp_path / "res", "--retrievers", "bm25", "--strategies", "baseline,reasoning")
    kinds = {c["kind"]: c for c in results["caveats"]}
    assert set(kinds) == {"saturated", "small-groups"}
    saturated = kinds["saturated"]
    assert saturated["saturated"] == ["Recall@10"] and saturated["largest_search_space"] == 4
    assert saturated["measures"] == ["nDCG@10", "MAP@10", "Recall@10", "MRR@10"]
    # the caution is true of the figures: Recall@10 is 1.0 for every turn
    assert {v["Recall@10"] for v in results["per_turn"]["bm25"]["baseline"].values()} == {1.0}
    assert md.startswith("## Read with care\n\n- For every query the corpus searched holds at most 4 documents")
    assert "biology (n=3), drones (n=4), earth_science (n=3), law (n=3)" in md.split("\n\n#")[0]
    note = Image.open(tmp_path / "res" / "turn_position.png").info["Description"]
    assert note == "Read with care: Recall@10 saturated, small groups (see results.md)."


def test_mtrag_over_its_cited_passages_says_the_corpus_is_reduced(tmp_path: Path) -> None:
    built = tmp_path / "mtrag"
    assert main(["build", "mtrag", "--source", str(DATA / "mtrag"), "--out", str(built)]) == 0
    results, md = _evaluate(built, tmp_path / "res", "--retrievers", "bm25", "--strategies", "lastturn")
    assert [c["kind"] for c in results["caveats"]] == ["reduced-corpus"]
    assert results["caveats"][0]["text"].startswith(
        "Scored against the 'cited' corpus (2,021 documents; clapnq, cloud, fiqa, govt), not the benchmark's own "
        "'full' corpus: a far smaller search space")
    assert md.startswith("## Read with care\n\n- Scored against the 'cited' corpus")
    assert "Corpus per domain: clapnq cited, cloud cited, fiqa cited, govt cited." in md


def test_stratrag_pools_carry_no_caution(stratrag_first30: Path, tmp_path: Path) -> None:
    results, md = _evaluate(stratrag_first30, tmp_path / "res", "--retrievers", "bm25")
    assert results["caveats"] == []
    assert "Read with care" not in md
