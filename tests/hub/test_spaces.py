"""The metric folders as Hugging Face Spaces: each app.py runs on current gradio and answers through gradio's client
with the metric's own numbers; each folder's requirements.txt covers what its modules import. A metric folder may
import convrag (it is developed inside the repo); the Space folder ``convrag space`` assembles from it imports nothing
outside itself and its requirements (convrag, not on PyPI, is vendored) and answers with convrag's development
install out of reach."""

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

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ["retrieval", "generation", "audit", "pr_auc"]
SDK = {"gradio"}  # installed by the Space's sdk, not by requirements.txt


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


def _serve(name: str, log: Path, timeout: float = 180.0, argv: list[str] | None = None) -> Iterator[str]:
    """Start ``python metrics/<name>/app.py`` (or ``python *argv``) on 127.0.0.1 (offline, no analytics); yield its
    URL once it answers."""
    port = _free_port()
    env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port),
           "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    url = f"http://127.0.0.1:{port}/"
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, *(argv or [str(REPO / "metrics" / name / "app.py")])],
                                   cwd=log.parent, env=env, stdout=out, stderr=subprocess.STDOUT)
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


def _expected_generation(example: dict[str, str]) -> dict[str, float]:
    """The judge-free components of the development module on the Space's example (passages: blank-line blocks)."""
    passages = [block.replace("\n", " ") for block in example["passages"].split("\n\n")]
    scorer = components.BertScorer()
    recall = components.recall_batch([example["answer"]], [example["reference"]], scorer)[0]
    rouge = components.rouge_l(example["answer"], example["reference"])
    k_precision = components.k_precision_batch([example["answer"]], [passages], scorer)[0]
    return {"recall": recall, "rouge_l": rouge, "k_precision": k_precision,
            "rb_alg_raw": components.rb_alg(recall, rouge, k_precision)}


@pytest.fixture(scope="module")
def generation_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _serve("generation", tmp_path_factory.mktemp("generation-space") / "server.log")


@pytest.mark.slow
def test_generation_space_judge_free_example(generation_url: str) -> None:
    example = _load_app("generation").EXAMPLE
    table, note = _client(generation_url).predict(*example.values(), "ANSWERABLE", "", "", api_name="/score")
    got = {row["metric"]: row["value"] for row in _rows(table)}
    assert got == pytest.approx(_expected_generation(example), abs=1e-6)
    assert got["k_precision"] > 0.5 and "Judge-free" in note
    table, note = _client(generation_url).predict(*list(example.values())[:2], "", *list(example.values())[3:],
                                                  "ANSWERABLE", "", "", api_name="/score")
    assert {row["metric"]: row["value"] for row in _rows(table)}["k_precision"] == 0.0 and "No passages" in note


# ---- assembled Space folders (`convrag space METRIC --out DIR`): convrag vendored, nothing imported from outside

# Run a Space's app.py as the Hub would (``python app.py``: the folder first on sys.path) with the development install
# of convrag out of reach: its editable-install finder and the checkout's sys.path entries are dropped, and an audit
# hook reports ("LEAK path") every file opened inside the checkout (its virtual environment excepted).
ISOLATED = """
import os, runpy, sys
space, repo, prefix = sys.argv[1], os.path.realpath(sys.argv[2]), os.path.realpath(sys.prefix)
def in_checkout(path):
    real = os.path.realpath(path)
    return real.startswith(repo + os.sep) and not real.startswith(prefix + os.sep)
def audit(event, args):
    if event == "open" and isinstance(args[0], (str, os.PathLike)) and in_checkout(os.fspath(args[0])):
        print("LEAK", os.fspath(args[0]), file=sys.stderr, flush=True)
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.path_hooks[:] = [h for h in sys.path_hooks if not getattr(h, "__module__", "").startswith("__editable__")]
sys.path[:] = [space] + [p for p in sys.path if p and "__editable__" not in p and os.path.realpath(p) != repo]
sys.path_importer_cache.clear()
sys.addaudithook(audit)
import convrag
print("CONVRAG", convrag.__file__, flush=True)
sys.argv = [os.path.join(space, "app.py")]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.fixture(scope="module")
def spaces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every metric's Space folder, written by the CLI."""
    from convrag.cli import main

    root = tmp_path_factory.mktemp("spaces")
    for name in FOLDERS:
        assert main(["space", name, "--out", str(root / name)]) == 0
    return {name: root / name for name in FOLDERS}


def _space_imports(space: Path) -> list[tuple[str, str, bool]]:
    """(file, absolute import's module, inside a function?) for every .py file of the Space, vendored ones included."""
    found = []
    for path in space.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        lazy = {id(inner) for function in functions for inner in ast.walk(function)}
        for node in ast.walk(tree):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module] if (
                isinstance(node, ast.ImportFrom) and node.level == 0) else []  # fmt: skip
            found += [(str(path.relative_to(space)), module, id(node) in lazy) for module in modules]
    return found


@pytest.mark.parametrize("name", FOLDERS)
def test_assembled_space_imports_only_itself_and_its_requirements(name: str, spaces: dict[str, Path]) -> None:
    from convrag.hub.spaces import BROUGHT_BY

    space = spaces[name]
    meta = json.loads((space / ".convrag-space.json").read_text(encoding="utf-8"))
    local = {path.stem for path in space.glob("*.py")}
    requirements = _requirements(space)
    assert "convrag" not in requirements and not SDK & requirements
    assert _requirements(REPO / "metrics" / name) <= requirements  # the metric's own list is kept
    distributions = packages_distributions()
    uncovered, unresolved = [], []
    for file, module, lazy in _space_imports(space):
        top = module.split(".")[0]
        if top == "convrag":  # vendored: the module (or the package an attribute is taken from) is in the folder
            relative = Path(*module.split("."))
            if not ((space / relative).with_suffix(".py").is_file() or (space / relative / "__init__.py").is_file()):
                unresolved.append(f"{file}: {module}")
        elif top not in local | SDK | set(sys.stdlib_module_names) | {"__future__"}:
            dists = {_normal(d) for d in distributions.get(top, [])}
            brought = BROUGHT_BY.get(top, set()) & requirements
            if not (dists & requirements or brought or (lazy and top in meta["optional"])):
                uncovered.append(f"{file}: {top}")
    assert not unresolved, f"{name}: convrag imports not vendored: {unresolved}"
    assert not uncovered, f"{name}: imports not covered by requirements.txt: {sorted(set(uncovered))}"
    vendored = {str(p.relative_to(space)) for p in (space / "convrag").rglob("*.py")} if meta["vendored"] else set()
    assert bool(vendored) == (name in ("generation", "audit")) and all(  # copied unchanged from the checkout
        (space / v).read_bytes() == _development_file(v).read_bytes() for v in vendored)
    assert (space / "README.md").read_bytes() == (REPO / "metrics" / name / "README.md").read_bytes()


def _development_file(vendored: str) -> Path:
    """The checkout's file of a vendored path ``convrag/...`` (convrag.builders and convrag.metrics live at the top)."""
    parts = Path(vendored).parts
    top_level = parts[1] in ("builders", "metrics", "synthesis", "dataset_cards")
    return REPO / Path(*parts[1:]) if top_level else REPO / vendored


def _serve_space(space: Path, log: Path) -> Iterator[str]:
    yield from _serve(space.name, log, argv=["-c", ISOLATED, str(space), str(REPO)])


def _check_isolated(space: Path, log: Path) -> None:
    text = log.read_text(errors="replace")
    assert f"CONVRAG {space / 'convrag' / '__init__.py'}" in text
    assert "LEAK" not in text, [line for line in text.splitlines() if line.startswith("LEAK")][:5]


@pytest.mark.slow
def test_assembled_generation_space_answers_without_development_convrag(spaces: dict[str, Path],
                                                                        tmp_path: Path) -> None:
    example = _load_app("generation").EXAMPLE
    log = tmp_path / "server.log"
    for url in _serve_space(spaces["generation"], log):
        table, note = _client(url).predict(*example.values(), "ANSWERABLE", "", "", api_name="/score")
        got = {row["metric"]: row["value"] for row in _rows(table)}
        assert got == pytest.approx(_expected_generation(example), abs=1e-6) and "Judge-free" in note
    _check_isolated(spaces["generation"], log)


@pytest.mark.slow
def test_assembled_audit_space_answers_without_development_convrag(spaces: dict[str, Path], tmp_path: Path) -> None:
    app = _load_app("audit")
    metric = evaluate.load(str(REPO / "metrics" / "audit"))
    # raw turns judged by the scripted (echo) judge: runs the vendored convrag.audit / convrag.llm and its prompts
    raw = {"queries": ["Which bridge links Denmark and Sweden?"], "judge": "fake",
           "documents": [["The Oresund Bridge links Denmark and Sweden."]]}
    log = tmp_path / "server.log"
    for url in _serve_space(spaces["audit"], log):
        for arguments in (json.loads(app.EXAMPLE_JUDGMENTS), raw):
            table, result = _client(url).predict(json.dumps(arguments), "", "", api_name="/score")
            assert result == json.loads(json.dumps(metric.compute(**arguments)))
            assert [row["mean"] for row in _rows(table) if row["judge"] == "overall"] == [
                v["mean"] for v in result["overall"].values()]
    assert result["verdicts"] and result["overall"]["query_evidence"]["n"] == 1
    _check_isolated(spaces["audit"], log)


def test_space_command_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from convrag.cli import main

    assert main(["space", "nonsense", "--out", str(tmp_path / "a")]) == 2
    assert "unknown metric 'nonsense'" in capsys.readouterr().err and not (tmp_path / "a").exists()
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine", encoding="utf-8")
    for extra in ([], ["--overwrite"]):  # not empty; and with --overwrite, not a previous Space folder
        assert main(["space", "pr_auc", "--out", str(tmp_path / "taken"), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "convrag space: error:" in err
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["notes.txt"]
    assert main(["space", "pr_auc", "--out", str(tmp_path / "space")]) == 0
    assert main(["space", "pr_auc", "--out", str(tmp_path / "space")]) == 2 and "--overwrite" in capsys.readouterr().err
    (tmp_path / "space" / "stale.txt").write_text("old", encoding="utf-8")
    assert main(["space", "retrieval", "--out", str(tmp_path / "space"), "--overwrite"]) == 0
    assert "retrieval" in capsys.readouterr().out and not (tmp_path / "space" / "stale.txt").exists()
    assert (tmp_path / "space" / "trec.py").is_file() and sorted(p.name for p in tmp_path.iterdir()) == [
        "space", "taken"]  # no work folders or lock files left beside it


def test_space_says_how_to_run_it_here_and_which_extra_gradio_comes_with(tmp_path, capsys, monkeypatch) -> None:
    import importlib.util

    from convrag.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gradio" else real(name, *a))
    assert main(["space", "pr_auc", "--out", str(tmp_path / "space")]) == 0
    printed = capsys.readouterr().out
    assert f"Try it here (needs gradio: pip install 'convrag[spaces]'): python {tmp_path / 'space' / 'app.py'}" \
        in printed
    import tomllib

    from tests.conftest import REPO

    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert any(req.startswith("gradio") for req in extras["spaces"])
