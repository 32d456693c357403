"""The shipped mteb task classes (``convrag.mteb_tasks``: the current-turn and the conversation views), a built
folder's content revision and MTR-Bench's flat ``query`` config; no model runs here (tests/hub/test_mteb.py and
test_mteb_conversation.py run mteb through these classes). Hub reads go to the loopback test Hub."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import datasets
import pytest

from convrag import mteb_tasks
from convrag.core.errors import ConvragError
from convrag.hub.export import export_benchmark
from convrag.hub.mteb_layout import content_revision, history_text
from convrag.retrievers.strategies import get_strategy
from tests.conftest import DATA
from tests.mtr_bench_fixture import write_fixture


@pytest.fixture(scope="module")
def mtr_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mtr-bench")
    write_fixture(root / "source")
    export_benchmark("mtr-bench", root / "out", options={"source": str(root / "source")})
    return root / "out"


@pytest.mark.parametrize(("name", "view"), [*((n, "turn") for n in sorted(mteb_tasks.TASKS)),
                                             *((n, "conversation") for n in sorted(mteb_tasks.CONVERSATION_TASKS))])
def test_every_task_has_complete_metadata(name: str, view: str) -> None:
    meta = (mteb_tasks.TASKS if view == "turn" else mteb_tasks.CONVERSATION_TASKS)[name].metadata
    assert meta.name == mteb_tasks.TASKS[name].metadata.name + ("-Conversation" if view == "conversation" else "")
    if name != "stratrag":  # every multi-turn task says which view it is and what its queries are
        assert {"turn": "Current-turn view: ", "conversation": "Conversation view: "}[view] in meta.description
        assert ("`{role, content}` messages" in meta.description) == (view == "conversation")
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
    assert task.metadata.dataset == {"path": str(folder), "revision": content_revision(folder)}
    assert task.metadata.eval_langs == {"clapnq": ["eng-Latn"]} and task.hf_subsets == ["clapnq"]
    assert mteb_tasks.MTRAG.metadata.dataset == mteb_tasks.UNBUILT  # the shipped class is left as it was
    with pytest.raises(ConvragError, match="built for 'mtrag', not 'mtrag-un'"):
        mteb_tasks.get("mtrag-un", str(folder))
    with pytest.raises(ConvragError, match="no mtrag subset has the configs the conversation view reads"):
        mteb_tasks.get("mtrag", str(folder), view="conversation")  # built without clapnq-tasks


def test_get_says_which_views_there_are(mtr_bench: Path) -> None:
    with pytest.raises(ConvragError, match="no mteb task for 'stratrag' in the conversation view"):
        mteb_tasks.get("stratrag", "someorg/stratrag@0123abc", view="conversation")
    with pytest.raises(ConvragError, match="unknown mteb view 'history'; known: turn, conversation"):
        mteb_tasks.get("recor", "someorg/recor@0123abc", view="history")
    task = mteb_tasks.get("mtr-bench", str(mtr_bench), view="conversation")
    assert isinstance(task, mteb_tasks.MTRBenchConversation) and task.metadata.name == "MTR-Bench-Conversation"
    assert task.metadata.dataset == mteb_tasks.get("mtr-bench", str(mtr_bench)).metadata.dataset
    assert mteb_tasks.RECORConversation.metadata.eval_langs == mteb_tasks.RECOR.metadata.eval_langs


def test_a_built_folders_revision_is_a_digest_of_its_data(mtr_bench: Path, tmp_path: Path) -> None:
    revision = content_revision(mtr_bench)
    assert len(revision) == 64 and int(revision, 16) >= 0 and content_revision(mtr_bench) == revision
    assert mteb_tasks.get("mtr-bench", str(mtr_bench)).metadata.dataset["revision"] == revision
    source = mtr_bench.parent / "source"
    export_benchmark("mtr-bench", tmp_path / "again", options={"source": str(source)})
    assert content_revision(tmp_path / "again") == revision  # the same build, elsewhere and later
    shutil.copytree(mtr_bench, tmp_path / "copy")
    assert content_revision(tmp_path / "copy") == revision
    export_benchmark("mtr-bench", tmp_path / "fewer", configs=["queries", "qrels", "corpus"],
                     options={"source": str(source)})  # fmt: skip
    assert content_revision(tmp_path / "fewer") != revision
    (corpus,) = (tmp_path / "copy" / "corpus").glob("*.parquet")
    table = datasets.Dataset.from_parquet(str(corpus))
    table.map(lambda row: {"text": row["text"].replace("Etna", "Vesuvius")}).to_parquet(str(corpus))
    assert content_revision(tmp_path / "copy") != revision  # one corpus text changed, the same files and sizes


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


def test_mteb_loads_mtr_bench_conversations_and_batches_them(mtr_bench: Path) -> None:
    from mteb._create_dataloaders import create_dataloader
    from mteb.types import PromptType

    task = mteb_tasks.get("mtr-bench", str(mtr_bench), view="conversation")
    task.load_data()
    split = task.dataset["default"]["test"]
    assert len(split["queries"]) == 48 and len(split["relevant_docs"]) == 48 and len(split["corpus"]) == 50
    queries = datasets.load_dataset(str(mtr_bench), "queries", split="test")
    row = queries[13]
    assert split["queries"][13] == {"id": row["_id"], "text": [*row["history"], {"role": "user",
                                                                                  "content": row["text"]}]}
    loader = create_dataloader(split["queries"], task_metadata=task.metadata, prompt_type=PromptType.query,
                               batch_size=16)  # fmt: skip
    batch = next(iter(loader))
    assert batch["conversation"][13] == split["queries"][13]["text"]  # what an encoder is given, with its text:
    assert batch["text"][13] == "; ".join(f"{m['role']}: {m['content']}" for m in batch["conversation"][13])
    turns = {t.qid: t for t in _turns(mtr_bench)}
    assert batch["text"][13] == get_strategy("conversation").format(turns[row["_id"]])  # convrag's strategy


def _turns(folder: Path) -> list:
    from convrag.builders import get_builder_class
    from convrag.evaluation.data import Folder, read_turns

    return read_turns(Folder(folder), get_builder_class("mtr-bench").EVALUATION, "", "test")


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
