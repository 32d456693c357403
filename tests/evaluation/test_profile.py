"""Evaluation profiles: declared per builder, recorded in the README, and the only thing the CLI dispatches on."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from convrag.builders import available, get_builder_class
from convrag.builders.profile import EvaluationProfile, profile_of
from convrag.core.errors import ConvragError
from convrag.evaluate.report import evaluate_folder
from convrag.hub.export import export_benchmark, read_manifest
from tests.conftest import DATA, REPO


@pytest.mark.parametrize("name", available())
def test_every_builder_declares_a_profile_that_round_trips(name):
    profile = get_builder_class(name).EVALUATION
    assert EvaluationProfile.from_dict(json.loads(json.dumps(profile.to_dict()))) == profile


def test_profile_validation():
    with pytest.raises(ConvragError, match="unknown aggregation"):
        EvaluationProfile(turns="q", qrels="r", corpus={"c": "c"}, aggregation="median")
    with pytest.raises(ConvragError, match="needs a pool"):
        EvaluationProfile(turns="q", qrels="r", corpus={"c": "c"}, search="pool")
    with pytest.raises(ConvragError, match="unknown keys"):
        EvaluationProfile.from_dict({"turns": "q", "qrels": "r", "corpus": {"c": "c"}, "tables": "x"})


def test_cli_has_no_benchmark_name_branches():
    """``convrag evaluate`` dispatches on the profile: no registered benchmark name in its code (the generation
    scorer's ``--conditioning mtrag-un`` is a metric variant, not a benchmark branch)."""
    import inspect

    from convrag import cli
    from convrag.cli import evaluate as cli_evaluate

    source = "".join(inspect.getsource(f) for f in (cli_evaluate.cmd_evaluate, cli_evaluate._dense_options, cli.main))
    for name in available():
        assert f'"{name}"' not in source and f"'{name}'" not in source, name
    assert "benchmark ==" not in "".join(p.read_text() for p in (REPO / "convrag" / "cli").glob("*.py"))


@pytest.fixture(scope="module")
def recor(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("profile") / "recor"
    export_benchmark("recor", out, options={"source": str(DATA / "recor" / "sample")})
    return out


def test_the_readme_records_the_profile(recor):
    manifest = read_manifest(recor)
    assert profile_of(manifest) == get_builder_class("recor").EVALUATION
    assert manifest["evaluation"]["aggregation"] == "domain-macro"


def test_a_different_profile_changes_the_evaluation_not_the_code(recor):
    """The same folder, read with a profile that pools every turn (no per-domain macro): a plain mean."""
    base = get_builder_class("recor").EVALUATION
    plain = EvaluationProfile.from_dict({**base.to_dict(), "aggregation": "mean", "report": "mtr-bench",
                                         "groups": ["turn"], "measures": ["nDCG@10", "Recall@1"]})  # fmt: skip
    macro, _ = evaluate_folder(recor, base, retrievers=["bm25"], strategies=["baseline"], n_bootstrap=20,
                               progress=False)  # fmt: skip
    mean, _ = evaluate_folder(recor, plain, retrievers=["bm25"], strategies=["baseline"], n_bootstrap=20,
                              progress=False)  # fmt: skip
    per_turn = macro["per_turn"]["bm25"]["baseline"]
    micro = sum(v["nDCG@10"] for v in per_turn.values()) / len(per_turn)
    system = mean["systems"]["bm25|baseline"]  # the profile defines several strategies: named retriever|strategy
    assert system["overall"]["nDCG@10"]["mean"] == pytest.approx(micro)
    assert macro["systems"]["bm25"]["baseline"]["micro"]["nDCG@10"] == pytest.approx(micro)
    assert list(system["groups_by"]["turn"]) == ["1", "2", "3", "4"]


def test_results_follow_the_files_on_disk(recor, tmp_path):
    """Replacing a qrels file (README unchanged) changes the scores: no stale cache."""
    import shutil

    folder = tmp_path / "recor"
    shutil.copytree(recor, folder)
    profile = get_builder_class("recor").EVALUATION
    first, _ = evaluate_folder(folder, profile, retrievers=["bm25"], strategies=["baseline"], n_bootstrap=10,
                               progress=False)  # fmt: skip
    path = next((folder / "law-qrels").glob("*.parquet"))
    table = pq.read_table(path)
    rows = table.to_pylist()
    corpus_ids = [r["_id"] for r in pq.read_table(next((folder / "law-corpus").glob("*.parquet"))).to_pylist()]
    taken = {r["corpus-id"] for r in rows if r["query-id"] == rows[0]["query-id"]}
    moved = [{**rows[0], "corpus-id": next(d for d in corpus_ids if d not in taken)}] + rows[1:]
    pq.write_table(pa.Table.from_pylist(moved, schema=table.schema), path)
    second, _ = evaluate_folder(folder, profile, retrievers=["bm25"], strategies=["baseline"], n_bootstrap=10,
                                progress=False)  # fmt: skip
    law = "systems", "bm25", "baseline", "domains", "law", "nDCG@10"

    def get(results):
        for key in law:
            results = results[key]
        return results

    assert get(first) != get(second)


def _plain(base: EvaluationProfile, **changes) -> EvaluationProfile:
    return EvaluationProfile.from_dict({**base.to_dict(), "aggregation": "mean", "report": "generic",
                                        "groups": ["turn"], **changes})  # fmt: skip


def test_bad_requests_are_clear_errors(recor):
    profile = get_builder_class("recor").EVALUATION
    kw = {"retrievers": ["bm25"], "strategies": ["baseline"], "n_bootstrap": 10, "progress": False}
    with pytest.raises(ConvragError, match="external runs are not part"):
        evaluate_folder(recor, profile, external_runs={"mine": {}}, **kw)
    with pytest.raises(ConvragError, match="nDCG@10"):
        evaluate_folder(recor, profile, measures=["Recall@5"], **kw)
    with pytest.raises(ConvragError, match="already used"):
        evaluate_folder(recor, _plain(profile), external_runs={"bm25": {}}, **kw)


def test_runs_are_as_deep_as_the_deepest_cut_off_and_qualified_ids_map_back(recor):
    profile = _plain(get_builder_class("recor").EVALUATION, measures=["nDCG@10", "Recall@200"], top_k=5)
    results, scored = evaluate_folder(recor, profile, retrievers=["bm25"], strategies=["baseline"], n_bootstrap=10,
                                      progress=False)  # fmt: skip
    assert scored.info["top_k"] == 200
    law = {t.qid: t for t in scored.data.turns if t.domain == "law"}
    qrels = scored.data.qrels["law"]
    gold = {q: {f"law:{d}": 1.0 for d in qrels[q]} for q in law}  # ids written as <subset>:<id>
    results, _ = evaluate_folder(recor, profile, retrievers=[], external_runs={"gold": gold}, n_bootstrap=10,
                                 progress=False)  # fmt: skip
    per_query = results["per_query"]["gold"]
    assert all(per_query[q]["Recall@200"] == 1.0 for q in law)
