"""The metric folders as Hugging Face Spaces: each app.py runs on current gradio and answers through gradio's client
with the metric's own numbers; each folder's requirements.txt covers what its modules import, and none needs
convrag (not on PyPI)."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from importlib.metadata import packages_distributions
from pathlib import Path
from types import ModuleType
from typing import Any

import evaluate
import pytest
from packaging.requirements import Requirement

from convrag.metrics.generation import components
from convrag.metrics.retrieval.trec import read_qrels, read_run

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ["retrieval", "generation", "audit", "pr_auc"]
SDK = {"gradio"}  # installed by the Space's sdk, not by requirements.txt
NEEDS_VENDORING = {"generation", "audit"}  # still import convrag.errors / convrag.llm / ... (not on PyPI)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imports(folder: Path) -> set[str]:
    """Top-level names of every absolute import (lazy ones inside functions included) of the folder's modules."""
    names: set[str] = set()
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def _requirements(folder: Path) -> set[str]:
    lines = (folder / "requirements.txt").read_text(encoding="utf-8").splitlines()
    return {_normal(Requirement(line).name) for line in lines if line.strip() and not line.startswith("#")}


@pytest.mark.parametrize("name", FOLDERS)
def test_requirements_cover_third_party_imports(name: str) -> None:
    folder = REPO / "metrics" / name
    local = {path.stem for path in folder.glob("*.py")}
    third_party = {n for n in _imports(folder) - local - SDK - {"convrag"} if n not in sys.stdlib_module_names}
    distributions = packages_distributions()
    unknown = sorted(n for n in third_party if n not in distributions)
    assert not unknown, f"{name}: imports not installed here, so not mapped to a distribution: {unknown}"
    wanted = {n: {_normal(d) for d in distributions[n]} for n in third_party}
    missing = sorted(n for n, dists in wanted.items() if not dists & _requirements(folder))
    assert not missing, f"metrics/{name}/requirements.txt lacks the distribution of {missing}"
    assert "convrag" not in _requirements(folder)
    meta = (folder / "README.md").read_text(encoding="utf-8").split("---")[1]
    assert re.search(r"^sdk_version: 6\.\d+\.\d+$", meta, re.M), f"{name}: sdk_version is not gradio 6"


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(
    n in NEEDS_VENDORING, reason="the module still imports convrag: vendor what it needs into the folder",
    strict=True)) for n in FOLDERS])  # fmt: skip
def test_folder_does_not_import_convrag(name: str) -> None:
    assert "convrag" not in _imports(REPO / "metrics" / name)


def _load_app(name: str) -> ModuleType:
    """metrics/<name>/app.py imported (not launched)."""
    spec = importlib.util.spec_from_file_location(f"{name}_space_app", REPO / "metrics" / name / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve(name: str, log: Path, timeout: float = 180.0) -> Iterator[str]:
    """Start ``python metrics/<name>/app.py`` on 127.0.0.1 (offline, no analytics); yield its URL once it answers."""
    port = _free_port()
    env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port),
           "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    url = f"http://127.0.0.1:{port}/"
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, str(REPO / "metrics" / name / "app.py")], cwd=log.parent,
                                   env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while True:
            assert process.poll() is None, f"{name} app exited:\n{log.read_text(errors='replace')[-3000:]}"
            assert time.monotonic() < deadline, f"{name} app did not answer in {timeout} s"
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _client(url: str) -> Any:
    from gradio_client import Client

    return Client(url, verbose=False, download_files=False)


def _rows(frame: dict[str, Any]) -> list[dict[str, Any]]:
    """A gradio Dataframe value as a list of row dicts."""
    return [dict(zip(frame["headers"], row, strict=True)) for row in frame["data"]]


@pytest.fixture(scope="module")
def retrieval_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _serve("retrieval", tmp_path_factory.mktemp("retrieval-space") / "server.log")


def _expected_retrieval(run: dict[str, Any], qrels: dict[str, Any], k_values: list[int]) -> dict[str, Any]:
    """compute() of the evaluate module on every query of the qrels, then the run's unjudged queries."""
    query_ids = list(qrels) + [q for q in run if q not in qrels]
    ranked = [[{"id": d, "score": s} for d, s in run.get(q, {}).items()] for q in query_ids]
    judged = [[{"id": d, "grade": g} for d, g in qrels.get(q, {}).items()] for q in query_ids]
    return evaluate.load(str(REPO / "metrics" / "retrieval")).compute(
        predictions=ranked, references=judged, query_ids=query_ids, k_values=k_values, per_query=True)


def test_retrieval_space_scores_trec_example(retrieval_url: str, tmp_path: Path) -> None:
    app = _load_app("retrieval")
    (tmp_path / "run.trec").write_text(app.EXAMPLE_RUN, encoding="utf-8")
    (tmp_path / "qrels.trec").write_text(app.EXAMPLE_QRELS, encoding="utf-8")
    expected = _expected_retrieval(read_run(tmp_path / "run.trec"), read_qrels(tmp_path / "qrels.trec"), [1, 3, 5, 10])
    means, per_query, note = _client(retrieval_url).predict(app.EXAMPLE_RUN, app.EXAMPLE_QRELS, "1, 3, 5, 10",
                                                            api_name="/score")
    got = {row["measure"]: row["value"] for row in _rows(means)}
    assert got == {m: v for m, v in expected.items() if isinstance(v, float)}
    assert len(got) == 7 * 4 + 1  # seven families at four cut-offs, and MRR
    assert {row.pop("query_id"): row for row in _rows(per_query)} == expected["per_query"]
    assert f"{expected['num_queries']} queries scored" in note and "q4" in note and expected["excluded_queries"]


def test_retrieval_space_scores_json_example(retrieval_url: str) -> None:
    app = _load_app("retrieval")
    ranked = json.loads(app.EXAMPLE_RUN_JSON)  # lists, best first: as scores, decreasing with the rank
    run = {q: {d: float(-i) for i, d in enumerate(docs)} for q, docs in ranked.items()}
    expected = _expected_retrieval(run, json.loads(app.EXAMPLE_QRELS_JSON), [1, 3])
    means, _, _ = _client(retrieval_url).predict(app.EXAMPLE_RUN_JSON, app.EXAMPLE_QRELS_JSON, "1, 3",
                                                 api_name="/score")
    assert {row["measure"]: row["value"] for row in _rows(means)} == {
        m: v for m, v in expected.items() if isinstance(v, float)}


@pytest.fixture(scope="module")
def generation_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _serve("generation", tmp_path_factory.mktemp("generation-space") / "server.log")


@pytest.mark.slow
def test_generation_space_judge_free_example(generation_url: str) -> None:
    app = _load_app("generation")
    example = app.EXAMPLE
    passages = [block.replace("\n", " ") for block in example["passages"].split("\n\n")]
    scorer = components.BertScorer()
    recall = components.recall_batch([example["answer"]], [example["reference"]], scorer)[0]
    rouge = components.rouge_l(example["answer"], example["reference"])
    k_precision = components.k_precision_batch([example["answer"]], [passages], scorer)[0]
    table, note = _client(generation_url).predict(*example.values(), "ANSWERABLE", "", "", api_name="/score")
    got = {row["metric"]: row["value"] for row in _rows(table)}
    assert got == pytest.approx({"recall": recall, "rouge_l": rouge, "k_precision": k_precision,
                                 "rb_alg_raw": components.rb_alg(recall, rouge, k_precision)}, abs=1e-6)
    assert got["k_precision"] > 0.5 and "Judge-free" in note
    table, note = _client(generation_url).predict(*list(example.values())[:2], "", *list(example.values())[3:],
                                                  "ANSWERABLE", "", "", api_name="/score")
    assert {row["metric"]: row["value"] for row in _rows(table)}["k_precision"] == 0.0 and "No passages" in note
