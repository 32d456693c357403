"""Provenance of results: `convrag evaluate org/name` and `convrag export org/name` record the Hub repo id, the
revision sha and the endpoint (loopback Hub, tests/hub_server.py); a local folder is recorded relative to the working
directory; no absolute local path (tmp folders, the Hugging Face cache) is written into results.json, the export
marker or a built folder's README."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import huggingface_hub
import pytest

from convrag.cli import main
from convrag.core.manifest import read_manifest
from convrag.core.provenance import hub_url, local_path, public_report, relative_paths
from tests.conftest import json_strings
from tests.hub_server import TOKEN, serve
from tests.mtr_bench_fixture import write_fixture

REPO_ID = "convrag-test/provenance-mini"
EVALUATE = ["--retrievers", "bm25", "--bootstrap", "0", "--no-progress"]
# One client process (huggingface_hub reads HF_ENDPOINT at import): push, evaluate by repo id and by the pinned sha,
# export; the working directory is a folder of the test, so that relative paths name nothing outside it.
CLIENT = """
import sys
from huggingface_hub import HfApi
from convrag.cli import main
repo, built, *common = sys.argv[1:]
assert main(["push", built, "--repo", repo]) == 0
sha = HfApi().dataset_info(repo).sha
open("sha.txt", "w").write(sha)
assert main(["evaluate", repo, *common, "--out", "by-id"]) == 0
assert main(["evaluate", f"{repo}@{sha}", *common, "--out", "by-sha"]) == 0
assert main(["export", repo, "--format", "beir", "--out", "beir"]) == 0
"""


def _no_absolute_path(path: Path, *folders: Path) -> None:
    """No string of the JSON file ``path`` is an absolute path, and none of ``folders`` appears in its text."""
    text = path.read_text(encoding="utf-8")
    absolute = [s for s in json_strings(json.loads(text)) if os.path.isabs(s)]
    assert not absolute, absolute[:5]
    for folder in folders:
        assert str(folder) not in text and str(folder.resolve()) not in text, folder


@pytest.fixture(scope="module")
def hub_run(stratrag_first30: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Push the StratRAG build to the loopback Hub, then evaluate and export it by repo id (see CLIENT)."""
    root, home, work = (tmp_path_factory.mktemp(n) for n in ("hub", "hf_home", "work"))
    with serve(root) as url:
        env = {**os.environ, "HF_ENDPOINT": url, "HF_TOKEN": TOKEN, "HF_HOME": str(home), "HF_HUB_OFFLINE": "0",
               "HF_DATASETS_OFFLINE": "0", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}  # fmt: skip
        done = subprocess.run([sys.executable, "-c", CLIENT, REPO_ID, str(stratrag_first30), *EVALUATE], env=env,
                              cwd=work, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return {"url": url, "home": home, "work": work, "root": root, "sha": (work / "sha.txt").read_text()}


def test_evaluate_by_repo_id_records_repo_revision_and_endpoint(hub_run, stratrag_first30):
    work, sha = hub_run["work"], hub_run["sha"]
    server_sha = json.loads((hub_run["root"] / "datasets" / REPO_ID / "meta.json").read_text())["sha"]
    assert len(sha) == 40 and sha == server_sha
    for out, requested in (("by-id", "main"), ("by-sha", sha)):
        results = json.loads((work / out / "results.json").read_text())
        assert results["source"] == {"repo_id": REPO_ID, "revision": sha, "requested_revision": requested,
                                     "endpoint": hub_run["url"]}  # fmt: skip
        assert "folder" not in results and results["systems"]["bm25"]["overall"]
        _no_absolute_path(work / out / "results.json", hub_run["home"], stratrag_first30, work)
        assert "snapshots" not in (work / out / "results.json").read_text()


def test_export_by_repo_id_records_repo_revision_and_endpoint(hub_run, stratrag_first30):
    marker = hub_run["work"] / "beir" / "convrag-export.json"
    assert json.loads(marker.read_text())["source"] == {
        "repo_id": REPO_ID, "revision": hub_run["sha"], "requested_revision": "main", "endpoint": hub_run["url"]}
    _no_absolute_path(marker, hub_run["home"], stratrag_first30, hub_run["work"])


def test_local_folder_and_run_file_are_recorded_relative_to_the_working_directory(stratrag_first30, tmp_path,
                                                                                   monkeypatch):  # fmt: skip
    """The folder, an external run given by its absolute path, and the export marker name paths relative to the
    working directory."""
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "mine.trec"
    run.parent.mkdir()
    run.write_text("val_000000 Q0 doc_00002000_02 1 4.5 mine\nval_000000 Q0 doc_00002000_00 2 4.1 mine\n")
    assert main(["evaluate", str(stratrag_first30), *EVALUATE, "--run", f"mine={run}", "--out", "r"]) == 0
    results = json.loads((tmp_path / "r" / "results.json").read_text())
    relative = Path(os.path.relpath(stratrag_first30, tmp_path)).as_posix()
    assert results["source"] == {"folder": relative} and not os.path.isabs(relative)
    assert results["systems"]["mine"]["config"]["source"] == "runs/mine.trec"
    _no_absolute_path(tmp_path / "r" / "results.json", tmp_path, stratrag_first30)
    assert main(["export", str(stratrag_first30), "--format", "trec", "--out", "trec"]) == 0
    assert json.loads((tmp_path / "trec" / "convrag-export.json").read_text())["source"] == {"folder": relative}
    _no_absolute_path(tmp_path / "trec" / "convrag-export.json", tmp_path, stratrag_first30)


def test_build_report_names_source_files_without_their_absolute_path(tmp_path):
    """MTR-Bench reports a turn without switch_turn as ``file:line``; the README writes the file inside the source
    folder as ``local:<folder>/<file>``, in the YAML block and in the card text."""
    files = write_fixture(tmp_path / "src", fmt="jsonl")["files"]
    lines = files["test"].read_text().splitlines()
    first = json.loads(lines[0])
    first["switch_turn"] = None
    files["test"].write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    assert main(["build", "mtr-bench", "--source", str(tmp_path / "src"), "--out", str(tmp_path / "built")]) == 0
    report = read_manifest(tmp_path / "built")["report"]
    assert report["examples"]["turns without switch_turn (taken as -1: no hard switch)"] == ["local:src/test.jsonl:1"]
    readme = (tmp_path / "built" / "README.md").read_text()
    assert str(tmp_path) not in readme and readme.count("local:src/test.jsonl:1") == 2


def test_hub_cache_paths_become_pinned_hub_urls(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    sha = "a" * 40
    snapshot = cache / "datasets--org--my-data" / "snapshots" / sha
    assert hub_url(snapshot / "corpus" / "validation-00000.parquet") == \
        f"hf://datasets/org/my-data@{sha}/corpus/validation-00000.parquet"  # fmt: skip
    assert hub_url(snapshot) == f"hf://datasets/org/my-data@{sha}"
    assert local_path(cache / "models--sentence-transformers--all-MiniLM-L6-v2" / "snapshots" / sha) == \
        f"hf://sentence-transformers/all-MiniLM-L6-v2@{sha}"  # fmt: skip
    assert hub_url(cache / "datasets--org--my-data" / "blobs" / "x") is None and hub_url(tmp_path / "x") is None


def test_report_and_results_scrubbing_keeps_ids_and_missing_paths(tmp_path, monkeypatch):
    """Only absolute paths of existing files are rewritten: ids holding slashes and paths that name nothing stay."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.jsonl").write_text("{}\n")
    given = str(tmp_path / "data" / "a.jsonl")
    report = {"examples": {"e": [f"{given}:7", "AC/DC", "/m/0abc12", f"in {given} (row 3)"]}, "counts": {"e": 4}}
    assert public_report(report, str(tmp_path / "data")) == {
        "examples": {"e": ["local:data/a.jsonl:7", "AC/DC", "/m/0abc12", "in local:data/a.jsonl (row 3)"]},
        "counts": {"e": 4}}  # fmt: skip
    assert public_report({"x": [given]}, None) == {"x": ["local:a.jsonl"]}
    assert relative_paths({"model": given, "ids": ["/m/0abc12", "q1"], "n": 3}) == {
        "model": "data/a.jsonl", "ids": ["/m/0abc12", "q1"], "n": 3}  # fmt: skip
