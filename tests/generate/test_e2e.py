"""Slow: `convrag generate` with the real embedded model (``--llm default``: SmolLM2-135M through llama.cpp), kept
tiny (48 tokens per answer, short passages; 2 turns per MTRAG-UN run, later turns with their history). MTRAG-UN oracle
and retrieved (bm25) answers are scored by `convrag evaluate-generation` with the default judge; the RECOR sample's
first turn gets all three modes, then the three files are scored together by `convrag evaluate-generation` (RECOR's
five judge dimensions, ROUGE-L, BERTScore, the nDCG@10 of the bm25 run beside the retrieved answers). A rerun on the
same cache makes no LLM call.

One RECOR turn per mode because the judge reads the contexts whole: the first turn's two gold documents (2,502 and
12,896 characters) make prompts of ~3,900 tokens, about a minute each. RECOR's later turns (the history in the
generator's prompt, the default history+reasoning search) run through a scripted model in
tests/generate/test_generate.py, and the judge over nine turns through the embedded model in
tests/benchmarks/recor/test_generation_e2e.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import datasets
import pytest

import convrag.cli as cli
from tests.conftest import DATA

pytest.importorskip("llama_cpp", reason="the default generator needs llama-cpp-python")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TINY = ["--max-tokens", "48", "--passage-chars", "500", "--history-chars", "800", "--llm", "default", "--no-progress",
        "--concurrency", "1"]  # fmt: skip
WARNING = "Warning: the answers come from the embedded SmolLM2-135M placeholder"


@pytest.fixture(autouse=True)
def _setup(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    datasets.disable_progress_bars()
    yield
    datasets.enable_progress_bars()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_mtrag_oracle_and_bm25_answers_scored_by_evaluate_generation(tmp_path: Path, capsys) -> None:
    built = tmp_path / "mtrag-un"
    configs = ["fiqa-tasks", "fiqa-lastturn", "fiqa-questions", "fiqa-qrels", "fiqa-cited-corpus"]
    run(capsys, "build", "mtrag-un", "--source", str(DATA / "mtrag"), "--out", str(built),
        *[x for c in configs for x in ("--config", c)])  # fmt: skip
    oracle, retrieved = tmp_path / "oracle.jsonl", tmp_path / "bm25.jsonl"
    out = run(capsys, "generate", str(built), "--mode", "oracle", "--out", str(oracle), "--config", "fiqa-tasks",
              "--max-turns", "2", *TINY)  # fmt: skip
    assert WARNING in out and "0 tasks without an answer" in out
    got = lines(oracle)
    assert len(got) == 2 and all(set(g) == {"task_id", "predictions"} for g in got)
    assert all(isinstance(g["predictions"][0]["text"], str) for g in got)
    assert any(g["predictions"][0]["text"].strip() for g in got)
    out = run(capsys, "generate", str(built), "--mode", "retrieved", "--retriever", "bm25", "--k", "2",
              "--out", str(retrieved), "--config", "fiqa-tasks", "--max-turns", "2", *TINY)  # fmt: skip
    got = lines(retrieved)
    assert len(got) == 2 and all(len(g["contexts"]) == 2 for g in got)
    assert (tmp_path / "bm25.run.trec").read_text().count("\n") >= 4
    report = json.loads((tmp_path / "bm25.report.json").read_text())
    assert report["placeholder"] and report["llm"]["calls"] == 2 and report["generator"] == "default"
    # a rerun on the same cache repeats no call
    out = run(capsys, "generate", str(built), "--mode", "oracle", "--out", str(oracle), "--config", "fiqa-tasks",
              "--max-turns", "2", *TINY)  # fmt: skip
    assert "LLM: 0 calls" in out and "2 cache hits" in out
    for predictions, name in ((oracle, "oracle"), (retrieved, "retrieved")):
        run(capsys, "evaluate-generation", str(built), "--predictions", str(predictions), "--config", "fiqa-tasks",
            "--allow-missing", "--judge", "default", "--metrics", "rb_alg", "--bootstrap", "20", "--no-progress",
            "--out", str(tmp_path / f"scores-{name}"))  # fmt: skip
        summary = json.loads((tmp_path / f"scores-{name}" / "results.json").read_text())
        assert summary["counts"]["tasks"] == 2 and summary["counts"]["missing_predictions"] == 75
        assert summary["judge"]["placeholder"]


def test_recor_sample_generated_in_every_mode_and_scored(tmp_path: Path, capsys) -> None:
    built = tmp_path / "recor"
    run(capsys, "build", "recor", "--source", str(DATA / "recor" / "sample"), "--out", str(built))
    # on a first turn RECOR's default strategy, history+reasoning, is the query and its reasoning, the reasoning
    # strategy's text (the default refuses to run on turns that have no history at all)
    retrieved = ["--retriever", "bm25", "--strategy", "reasoning", "--k", "2"]
    for mode, extra in (("oracle", []), ("retrieved", retrieved), ("none", [])):
        answers = tmp_path / f"{mode}.jsonl"
        out = run(capsys, "generate", str(built), "--mode", mode, *extra, "--out", str(answers), "--max-turns", "1",
                  *TINY)  # fmt: skip
        assert WARNING in out
        got = lines(answers)
        assert [g["turn"] for g in got] == [1]
        for g in got:
            assert set(g) == {"task_id", "conversation_id", "turn", "domain", "mode", "generator", "contexts",
                              "predictions"}  # fmt: skip
            assert g["mode"] == mode and g["generator"] == "default" and g["domain"] == "biology"
            assert isinstance(g["predictions"][0]["text"], str)
            assert (g["contexts"] == []) == (mode == "none")
            if mode == "oracle":
                assert all(c["score"] == 1.0 for c in g["contexts"])
            if mode == "retrieved":
                assert len(g["contexts"]) == 2
    files = [a for mode in ("oracle", "retrieved", "none") for a in ("--predictions", str(tmp_path / f"{mode}.jsonl"))]
    out = run(capsys, "evaluate-generation", str(built), *files,
              "--judge", "default", "--allow-missing", "--lexical", "rouge-l,bertscore", "--max-tokens", "120",
              "--concurrency", "1", "--cache", str(tmp_path / "judge-cache"), "--out", str(tmp_path / "scores"),
              "--no-progress")  # fmt: skip
    assert "Table 8" in out
    summary = json.loads((tmp_path / "scores" / "results.json").read_text())
    systems = {s["mode"]: s for s in summary["systems"]}
    assert set(systems) == {"oracle", "retrieved", "none"}
    assert all(s["turns"] == 1 and s["judged"] + len(s["failed"]) == 1 for s in systems.values())
    assert summary["counts"]["missing_predictions"] == 3 * 12  # 13 turns in the sample, 1 answered per mode
    rows = [json.loads(x) for x in (tmp_path / "scores" / "per_turn.jsonl").read_text().splitlines()]
    # the bm25 run written beside the retrieved answers gives each retrieved turn its nDCG@10
    assert all(r.get("ndcg@10") is not None for r in rows if r["mode"] == "retrieved")
    assert all(0.0 <= r["lexical"]["rouge-l"] <= 1.0 for r in rows)
