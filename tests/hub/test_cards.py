"""Every built README is a complete Hub dataset card: metadata the Hub indexes, sizes that match the files, a
citation, and nothing of the machine it was built on."""

from __future__ import annotations

import json
import re
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
from huggingface_hub import DatasetCard, DatasetCardData

from convrag.hub.export import export_benchmark, public_value, size_category
from tests.conftest import DATA
from tests.mtr_bench_fixture import write_fixture

RESOURCES = Path(datasets.__file__).parent / "utils" / "resources"
#: licence identifiers of the Hub's list (https://huggingface.co/docs/hub/repositories-licenses) that we use or
#: that a builder could plausibly declare; "other" needs license_name + license_link
HUB_LICENSES = {"apache-2.0", "mit", "cc-by-4.0", "cc-by-sa-4.0", "cc-by-nc-4.0", "cc0-1.0", "odc-by", "other"}
#: the Hub's task categories / task ids we use (its tasks list)
HUB_TASKS = {"text-retrieval", "question-answering", "text-generation"}
HUB_TASK_IDS = {"document-retrieval", "open-domain-qa", "utterance-retrieval", "extractive-qa"}
REQUIRED = ("pretty_name", "license", "language", "task_categories", "task_ids", "size_categories", "tags",
            "source_datasets")  # fmt: skip


def _build(benchmark: str, out: Path, tmp: Path) -> tuple[Path, str]:
    sources = {
        "stratrag": DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json",
        "recor": DATA / "recor" / "sample",
        "mtrag": DATA / "mtrag",
        "mtrag-un": DATA / "mtrag",
    }
    configs = {"mtrag": ["clapnq-lastturn", "clapnq-qrels", "clapnq-cited-corpus"],
               "mtrag-un": ["clapnq-lastturn", "clapnq-qrels", "clapnq-cited-corpus"]}  # fmt: skip
    source = str(write_fixture(tmp / "src")["folder"]) if benchmark == "mtr-bench" else str(sources[benchmark])
    export_benchmark(benchmark, out, configs=configs.get(benchmark), options={"source": source})
    return out, source


@pytest.fixture(scope="module", params=["stratrag", "recor", "mtrag", "mtrag-un", "mtr-bench"])
def built(request, tmp_path_factory) -> tuple[str, Path, str]:
    tmp = tmp_path_factory.mktemp(request.param)
    folder, source = _build(request.param, tmp / "out", tmp)
    return request.param, folder, source


def test_card_metadata_is_complete_and_valid(built) -> None:
    benchmark, folder, _ = built
    card = DatasetCard.load(folder / "README.md")
    data = card.data.to_dict()
    assert not [k for k in REQUIRED if not data.get(k)], f"{benchmark}: missing card metadata"
    DatasetCardData(**data, ignore_metadata_errors=False)  # huggingface_hub's own parsing of the header
    assert card.data.to_yaml()  # and it serialises back
    languages = json.loads((RESOURCES / "languages.json").read_text())
    sizes = json.loads((RESOURCES / "size_categories.json").read_text())
    assert set(data["language"]) <= set(languages)
    assert data["size_categories"] and set(data["size_categories"]) <= set(sizes)
    assert data["license"] in HUB_LICENSES
    if data["license"] == "other":
        assert re.fullmatch(r"[a-z0-9.-]+", data["license_name"]) and data["license_link"].startswith("https://")
    assert set(data["task_categories"]) <= HUB_TASKS and set(data["task_ids"]) <= HUB_TASK_IDS
    assert all(isinstance(t, str) and t for t in data["tags"])
    assert all(s == "original" or s.startswith("extended|") for s in data["source_datasets"])


def test_card_sizes_match_the_files(built) -> None:
    _, folder, _ = built
    data = DatasetCard.load(folder / "README.md").data.to_dict()
    files = {c["config_name"]: c["data_files"] for c in data["configs"]}
    largest = 0
    for info in data["dataset_info"]:
        paths = [p for item in files[info["config_name"]] for p in folder.glob(item["path"])]
        assert paths and info["download_size"] == sum(p.stat().st_size for p in paths), info["config_name"]
        for split in info["splits"]:
            rows = sum(pq.read_metadata(p).num_rows for p in paths if p.name.startswith(f"{split['name']}-"))
            assert split["num_examples"] == rows
            largest = max(largest, rows)
    assert data["size_categories"] == [size_category(largest)]


def test_card_has_a_citation_and_no_local_path(built) -> None:
    _, folder, source = built
    text = (folder / "README.md").read_text(encoding="utf-8")
    citation = text.split("## Citation", 1)[1]
    assert re.search(r"```bibtex\n@\w+\{\w+,\n", citation) and "{%" not in citation
    for leak in (source, str(Path(source).resolve()), str(DATA), str(DATA.resolve()), "../shared", str(folder)):
        assert leak not in text
    options = DatasetCard.load(folder / "README.md").data.to_dict()["convrag"]["options"]
    assert options["source"] == f"local:{Path(source).resolve().name}"


def test_public_value_keeps_urls_and_hides_paths(tmp_path: Path) -> None:
    url = "https://huggingface.co/datasets/RECOR-Benchmark/RECOR/resolve/main/"
    assert public_value(url) == url
    assert public_value(str(tmp_path / "x.json")) == "local:x.json"
    assert public_value({"dev": "../shared/data/hotpot.json", "n": 3}) == {"dev": "local:hotpot.json", "n": 3}
    assert public_value("borrow") == "borrow" and public_value(7) == 7


@pytest.mark.parametrize(("rows", "category"), [(0, "n<1K"), (999, "n<1K"), (1000, "1K<n<10K"),
                                                (2_021, "1K<n<10K"), (250_000, "100K<n<1M")])  # fmt: skip
def test_size_category(rows: int, category: str) -> None:
    assert size_category(rows) == category
