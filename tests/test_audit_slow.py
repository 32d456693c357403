"""``convrag audit`` end to end through the embedded local model (SmolLM2-135M) on a sample of real MTRAG tasks
and RECOR's sample, every dimension, plus the missed-relevant estimate with its LLM relevance judge.

The placeholder's verdicts prove the plumbing only: nothing here asserts what the scores are.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convrag.cli import main

from .conftest import DATA

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("audit-slow")
    assert main(["build", "mtrag", "--source", str(DATA / "mtrag"), "--out", str(root / "mtrag")]) == 0
    assert main(["build", "recor", "--source", str(DATA / "recor" / "sample"), "--out", str(root / "recor")]) == 0
    return {"mtrag": root / "mtrag", "recor": root / "recor"}


def test_audit_with_the_local_model(folders: dict[str, Path], tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    out = tmp_path / "audit"
    assert main(["audit", str(folders["mtrag"]), str(folders["recor"]), "--sample", "2", "--out", str(out),
                 "--cache", str(tmp_path / "cache"), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "| Benchmark | Comp. | Comp. x5 | chance | Q-E | A-E | Qual. |" in printed
    assert "SmolLM2-135M placeholder" in printed
    rows = [json.loads(line) for line in (out / "verdicts.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {r["benchmark"] for r in rows} == {"mtrag", "recor"} and all(r["judge"] == "default" for r in rows)
    dims = {r["dimension"] for r in rows}
    assert {"completeness", "query_evidence", "answer_faithfulness", "answer_quality", "dependency_type",
            "question_pattern", "naturalness"} <= dims
    for r in rows:  # every verdict either carries its value or says why not; none is a silent default
        assert (r["score"] is not None or r["label"] is not None) or r["error"], r
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    for name in ("mtrag", "recor"):
        bench = summary["benchmarks"][name]
        assert bench["items"] == 2
        for dim, stats in bench["all"]["overall"].items():
            judged = sum(1 for r in rows if r["benchmark"] == name and r["dimension"] == dim)
            assert stats["n"] + stats["failed"] == judged, dim
    assert summary["llm"]["default"]["calls"] > 0
    assert (out / "heatmap.png").read_bytes()[:4] == b"\x89PNG" or not any(r["score"] is not None for r in rows)

    missed = tmp_path / "missed"
    assert main(["audit", str(folders["recor"]), "--sample", "2", "--dimensions", "query_evidence", "--missed",
                 "--pool-retrievers", "bm25", "--pool-depth", "2", "--out", str(missed),
                 "--cache", str(tmp_path / "cache"), "--no-progress"]) == 0
    report = next(iter(json.loads((missed / "summary.json").read_text(encoding="utf-8"))["missed"].values()))
    assert report["turns"] == 2 and report["judged"] + report["failed"] == report["candidates"]
    assert list(missed.glob("suspected-qrels-*.trec")) and list(missed.glob("rescored-*.md"))
