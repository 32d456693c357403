"""A non-editable install: the wheel of this checkout installed into a folder of its own, then every metric loaded
with ``evaluate.load(convrag.metrics.path(name))`` from a working directory outside the repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(240)

#: run in the child: import convrag from the installed folder, load and compute each metric, print the results
CHILD = r"""
import json, sys
import evaluate
import convrag, convrag.metrics as metrics

out = {"convrag": convrag.__file__, "paths": {n: metrics.path(n) for n in metrics.NAMES}}
retrieval = evaluate.load(metrics.path("retrieval"))
out["retrieval"] = retrieval.compute(predictions=[["d3", "d1", "d2"], ["d5", "d4"]], references=[["d1"], ["d4", "d6"]],
                                     measures=["Recall@1", "Recall@2", "MRR"])
generation = evaluate.load(metrics.path("generation"))
out["generation"] = generation.compute(predictions=["Paris is the capital."], references=["The capital is Paris."],
                                       metrics=["rouge_l"])["rouge_l"]
audit = evaluate.load(metrics.path("audit"))
res = audit.compute(judges=["a", "a", "b", "b"], dimensions=["query_evidence"] * 4, scores=[5.0, 3.0, 2.0, None],
                    errors=[None, None, None, "unparseable: no rating"])
out["audit"] = [res["overall"]["query_evidence"]["mean"], res["per_judge"]["b"]["query_evidence"]["failed"]]
chunks = evaluate.load(metrics.path("pr_auc"), "chunks")
grades = {"c1": 3, "c2": 0, "c3": 2, "c4": 1, "c5": 0, "c8": 2, "c9": 3}
res = chunks.compute(predictions=[["c1", "c2", "c3", "c4", "c5"]],
                     references=[[{"id": c, "grade": g} for c, g in grades.items()]])
out["pr_auc_chunks"] = [res["pr_auc"], res["per_query"][0]["r_prime"]]
facts = evaluate.load(metrics.path("pr_auc"), "facts")
out["pr_auc_facts"] = facts.compute(predictions=[["A|gt", "noise"]], references=[["f1"]],
                                    chunk_facts={"A|gt": ["f1"], "noise": []})["pr_auc"]
try:
    metrics.path("bleu")
except Exception as exc:
    out["unknown"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""

#: what a clean checkout holds besides the package sources (never copied into the build)
IGNORED = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                                 ".ruff_cache", "out", "results", ".cache")


def _pip(*args: str, cwd: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_metrics_load_from_a_non_editable_install(tmp_path: Path) -> None:
    """The wheel ships every metric's module files, README.md and requirements.txt; each metric loads by the path
    ``convrag.metrics.path`` gives, imports its sibling modules from there and computes the documented values."""
    src = tmp_path / "src"  # a copy, so the build leaves nothing (build/, *.egg-info) in the checkout
    shutil.copytree(REPO, src, ignore=IGNORED)
    _pip("wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "wheels"), str(src), cwd=tmp_path)
    wheel = next((tmp_path / "wheels").glob("convrag-*.whl"))
    site = tmp_path / "site"
    _pip("install", "--no-deps", "--no-compile", "-q", "--target", str(site), str(wheel), cwd=tmp_path)
    for name in ("retrieval", "generation", "audit", "pr_auc"):
        folder = site / "convrag" / "metrics" / name
        assert {"README.md", "requirements.txt", f"{name}.py", "__init__.py"} <= {p.name for p in folder.iterdir()}

    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "mods")}
    proc = subprocess.run([sys.executable, "-c", CHILD], cwd=work, env=env, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps(out, indent=1))
    assert Path(out["convrag"]).is_relative_to(site), out["convrag"]  # the installed copy, not the checkout
    assert all(Path(p).is_relative_to(site / "convrag" / "metrics") for p in out["paths"].values())
    assert out["retrieval"] == {"Recall@1": 0.0, "Recall@2": 0.75, "MRR": 0.5, "num_queries": 2,
                                "excluded_queries": []}
    assert out["generation"] == pytest.approx(0.5)  # ROUGE-L F of "Paris is the capital." vs its reordering
    assert out["audit"] == [3.0, 1]  # (mean 4.0 of judge a + 2.0 of judge b) / 2; one unreadable verdict of b
    assert out["pr_auc_chunks"][0] == pytest.approx(5 / 12) and out["pr_auc_chunks"][1] == 4
    assert out["pr_auc_facts"] == 1.0
    assert out["unknown"].startswith("ConvragError: unknown metric 'bleu'")
