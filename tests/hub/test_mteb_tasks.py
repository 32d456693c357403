"""The shipped mteb task classes (``convrag.mteb_tasks``) and MTR-Bench's flat ``query`` config; no model runs here
(tests/hub/test_mteb.py runs mteb through these classes on every benchmark). Hub reads go to the loopback test Hub."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import datasets
import pytest

from convrag import mteb_tasks
from convrag.core.errors import ConvragError
from convrag.hub.export import export_benchmark
from convrag.hub.mteb_layout import history_text
from tests.conftest import DATA
from tests.mtr_bench_fixture import write_fixture


@pytest.fixture(scope="module")
def mtr_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mtr-bench")
    write_fixture(root / "source")
    export_benchmark("mtr-bench", root / "out", options={"source": str(root / "source")})
    return root / "out"


@pytest.mark.parametrize("name", sorted(mteb_tasks.TASKS))
def test_every_task_has_complete_metadata(name: str) -> None:
    meta = mteb_tasks.TASKS[name].metadata
    assert meta.is_filled() and meta.type == "Retrieval" and meta.category == "t2t" and meta.modalities == ["text"]
    assert meta.bibtex_citation.startswith("@") and meta.bibtex_citation.endswith("}")
    assert "{% raw %}" not in meta.bibtex_citation and meta.reference.startswith("https://")
    assert meta.main_score == {"stratrag": "ndcg_at_5", "recor": "ndcg_at_10", "mtrag": "ndcg_at_5",
                               "mtrag-un": "ndcg_at_5", "mtr-bench": "ndcg_at_20"}[name]  # fmt: skip
    assert meta.eval_splits == (["validation"] if name == "stratrag" else ["test"])
    subsets = {"recor": 11, "mtrag": 4, "mtrag-un": 4}
    assert (len(meta.eval_langs) if isinstance(meta.eval_langs, dict) else 0) == subsets.get(name, 0)


def test_get_pins_the_folders_build_and_keeps_the_subsets_it_has(tmp_path: Path) -> None:
    folder = tmp_path / "mtrag"
    export_benchmark("mtrag", folder, configs=["clapnq-lastturn", "clapnq-qrels", "clapnq-cited-corpus"],
                     options={"source": str(DATA / "mtrag")})  # fmt: skip
    task = mteb_tasks.get("mtrag", str(folder))
    assert isinstance(task, mteb_tasks.MTRAG)
    assert task.metadata.dataset == {"path": str(folder), "revision": "convrag-mtrag-1.0.0"}
    assert task.metadata.eval_langs == {"clapnq": ["eng-Latn"]} and task.hf_subsets == ["clapnq"]
    assert mteb_tasks.MTRAG.metadata.dataset == mteb_tasks.UNBUILT  # the shipped class is left as it was
    with pytest.raises(ConvragError, match="built for 'mtrag', not 'mtrag-un'"):
        mteb_tasks.get("mtrag-un", str(folder))


def test_get_takes_a_pinned_hub_revision_and_says_what_is_wrong() -> None:
    task = mteb_tasks.get("stratrag", "someorg/stratrag@0123abc")
    assert task.metadata.dataset == {"path": "someorg/stratrag", "revision": "0123abc"}
    with pytest.raises(ConvragError, match="no mteb task for 'beir'"):
        mteb_tasks.get("beir", "someorg/beir@main")
    with pytest.raises(ConvragError, match="not a Hub dataset repo id"):
        mteb_tasks.get("recor", "no/such/folder")


def test_mtr_bench_query_config_is_flat_and_queries_keep_the_conversation(mtr_bench: Path) -> None:
    queries = datasets.load_dataset(str(mtr_bench), "queries", split="test")
    flat = datasets.load_dataset(str(mtr_bench), "query", split="test")
    assert flat.column_names == ["_id", "text", "history"] and flat["_id"] == queries["_id"]
    assert flat["text"] == queries["text"]
    row = queries[13]
    assert isinstance(row["history"], list) and row["history"][0]["role"] == "user"  # what convrag evaluate reads
    assert flat[13]["history"] == "\n".join(f"{m['role']}: {m['content']}" for m in row["history"])
    assert flat[0]["history"] == "" and history_text(None) == ""


def test_mteb_loads_mtr_bench_flat_and_batches_it(mtr_bench: Path) -> None:
    from mteb._create_dataloaders import create_dataloader
    from mteb.types import PromptType

    task = mteb_tasks.get("mtr-bench", str(mtr_bench))
    task.load_data()
    split = task.dataset["default"]["test"]
    assert len(split["queries"]) == 48 and len(split["relevant_docs"]) == 48 and len(split["corpus"]) == 50
    loader = create_dataloader(split["queries"], task_metadata=task.metadata, prompt_type=PromptType.query,
                               batch_size=16)  # fmt: skip
    batch = next(iter(loader))  # mteb's collate: the nested history column made it raise
    assert len(batch["text"]) == 16 and isinstance(batch["history"][0], str)


def test_get_pins_a_hub_repo_to_its_current_commit_and_mteb_reads_it(stratrag_first30: Path, tmp_path: Path) -> None:
    from tests.hub_server import TOKEN, serve

    with serve(tmp_path / "hub") as url:
        env = {**os.environ, "HF_ENDPOINT": url, "HF_TOKEN": TOKEN, "HF_HOME": str(tmp_path / "hf_home"),
               "HF_HUB_OFFLINE": "0", "HF_DATASETS_OFFLINE": "0", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}  # fmt: skip
        pushed = subprocess.run([sys.executable, "-m", "convrag.cli", "push", str(stratrag_first30), "--repo",
                                 "convrag-test/stratrag-mteb"], env=env, capture_output=True, text=True, timeout=120)
        assert pushed.returncode == 0, pushed.stderr
        script = ("import json, sys\nfrom convrag import mteb_tasks\n"
                  "task = mteb_tasks.get('stratrag', 'convrag-test/stratrag-mteb')\ntask.load_data()\n"
                  "data = task.dataset['default']['validation']\n"
                  "print(json.dumps([task.metadata.dataset, len(data['queries']), len(data['top_ranked'])]))\n")
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        sha = json.loads((tmp_path / "hub/datasets/convrag-test/stratrag-mteb/meta.json").read_text())["sha"]
    dataset, n_queries, n_pools = json.loads(done.stdout.splitlines()[-1])
    assert dataset == {"path": "convrag-test/stratrag-mteb", "revision": sha} and len(sha) == 40
    assert n_queries == n_pools == 30
