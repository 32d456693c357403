"""`select` and `audit` outputs name the judge that made their figures, resolved to its model, and say "placeholder"
when it is the embedded SmolLM2-135M: chosen.yaml, leaderboard.md / .json, pr_curves.png, report.json; summary.md,
summary.json, heatmap.png. The placeholder is recognised by its model name, so a fake OpenAI-compatible server
serving a model named SmolLM2-135M-Instruct stands in for it (the real one is exercised in test_audit_slow.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from PIL import Image

from convrag.seara.evidence import normalize_span
from tests.audit.test_cli import mtr  # noqa: F401  (fixture)
from tests.llm.test_faults import FakeServer
from tests.seara.test_select_facts import CHUNKINGS, _args, _select_over_http, files  # noqa: F401  (fixture)
from tests.seara.test_select_facts import main as cli_main

PLACEHOLDER = "SmolLM2-135M-Instruct"
REAL = "qwen2.5-72b-instruct"


def _description(png: Path) -> str:
    with Image.open(png) as image:
        return str(image.info.get("Description", ""))


@pytest.fixture(scope="module")
def selected(files: dict, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:  # noqa: F811
    """select over 5 questions judged at a fake server, once by a model named like the placeholder, once by another
    model: the two output folders."""
    records = files["records"][:5]
    question_of = {r["question"].strip(): r["_id"] for r in records}
    space = {"depth": 3, "judge": {"facts": "never"},
             "dimensions": {"chunking": {"paragraphs": CHUNKINGS["paragraphs"]},
                            "retrieval": {"bm25": {"retriever": "bm25"}, "bm25s": {"retriever": "bm25s"}}},
             "search": {"strategy": "grid", "bootstrap": 50}}

    def reply(body: dict) -> str:
        text = next(m["content"] for m in body["messages"] if m["role"] == "user")
        qid = next(q for question, q in question_of.items() if question in text)
        relevant = any(normalize_span(s) in normalize_span(text) for s in files["evidence"][qid])
        return ("The passage names exactly what is asked.\n```json\n{\"rationale\": \"states it\", \"grade\": 3}\n```"
                if relevant else '{"rationale": "A different subject.", "grade": 0}')

    outs = {}
    for model in (PLACEHOLDER, REAL):
        folder = tmp_path_factory.mktemp(model.split("-")[0])
        assert _select_over_http(files, folder, records, space, reply, model=model)[0] == 0
        outs[model] = folder / "out"
    return outs


def test_select_outputs_name_the_placeholder_judge(selected: dict[str, Path]) -> None:
    out = selected[PLACEHOLDER]
    header = (out / "chosen.yaml").read_text(encoding="utf-8")
    judge_line = next(line for line in header.splitlines() if line.startswith("# Judge: "))
    assert PLACEHOLDER in judge_line and "placeholder" in judge_line
    chosen = yaml.safe_load(header)
    assert chosen["judge"]["placeholder"] is True and chosen["judge"]["model"] == PLACEHOLDER
    board = (out / "leaderboard.md").read_text(encoding="utf-8")
    assert f"Judge: {PLACEHOLDER} (embedded placeholder" in board and "not a measurement" in board
    assert json.loads((out / "leaderboard.json").read_text(encoding="utf-8"))["judge"]["placeholder"] is True
    assert json.loads((out / "report.json").read_text(encoding="utf-8"))["judge_model"]["model"] == PLACEHOLDER
    foot = _description(out / "pr_curves.png")
    assert "judge" in foot and PLACEHOLDER in foot and "placeholder" in foot
    pools = sorted((out / "pools").iterdir())
    assert pools and all("placeholder" in (p / "leaderboard.md").read_text(encoding="utf-8") for p in pools)


def test_select_outputs_name_a_real_judge_without_the_placeholder_warning(selected: dict[str, Path]) -> None:
    out = selected[REAL]
    chosen = yaml.safe_load((out / "chosen.yaml").read_text(encoding="utf-8"))
    assert chosen["judge"]["model"] == REAL and chosen["judge"]["placeholder"] is False
    assert chosen["judge"]["spec"].startswith(f"openai:{REAL}@http://127.0.0.1:")
    assert "max_retries" not in chosen["judge"]["spec"]  # options after ";" are left out
    for name in ("chosen.yaml", "leaderboard.md", "leaderboard.json", "report.json"):
        text = (out / name).read_text(encoding="utf-8")
        assert REAL in text and "embedded placeholder" not in text and "Warning" not in text, name
    assert REAL in _description(out / "pr_curves.png")


def test_select_with_an_evidence_oracle_names_the_file_not_its_path(files: dict, tmp_path: Path) -> None:  # noqa: F811
    folder = files["folder"]
    space = {"depth": 3, "dimensions": {"chunking": {"paragraphs": CHUNKINGS["paragraphs"]},
                                        "retrieval": {"bm25": {"retriever": "bm25"}}},
             "search": {"strategy": "grid", "bootstrap": 50}}
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space), encoding="utf-8")
    args = _args(folder, tmp_path / "out", "--judge", f"oracle:{folder / 'evidence.jsonl'}")
    args[2] = str(tmp_path / "space.yaml")
    assert cli_main(args) == 0
    chosen = (tmp_path / "out" / "chosen.yaml").read_text(encoding="utf-8")
    assert "# Judge: evidence oracle (evidence.jsonl; labelled evidence spans, no LLM)." in chosen
    assert str(folder) not in chosen


def _audit_over_http(mtr_folder: Path, out: Path, model: str, capsys: pytest.CaptureFixture) -> tuple[int, str]:
    server = FakeServer()
    server.responder = lambda body: "**Justification:** The passage says what the question asks.\n**Rating:** 5"
    try:
        code = cli_main(["audit", str(mtr_folder), "--judge", f"openai:{model}@{server.url};max_retries=0",
                         "--dimensions", "query_evidence", "--sample", "4", "--out", str(out),
                         "--cache", str(out.parent / f"cache-{model}"), "--no-progress"])
    finally:
        server.close()
    return code, capsys.readouterr().out


def test_audit_outputs_name_the_judge_and_each_mean_its_verdict_count(mtr: Path, tmp_path: Path,  # noqa: F811
                                                                      capsys: pytest.CaptureFixture) -> None:
    code, stdout = _audit_over_http(mtr, tmp_path / "p", PLACEHOLDER, capsys)
    assert code == 0
    text = (tmp_path / "p" / "summary.md").read_text(encoding="utf-8")
    assert f"Judges: {PLACEHOLDER} (embedded placeholder, not a measurement)." in text and "Warning:" in text
    row = next(line for line in text.splitlines() if line.startswith("| mtr-bench |"))
    assert "5.00 (n=4)" in row  # the headline mean says how many verdicts it rests on
    summary = json.loads((tmp_path / "p" / "summary.json").read_text(encoding="utf-8"))
    assert summary["judge_models"][0]["placeholder"] is True and summary["judge_models"][0]["model"] == PLACEHOLDER
    assert not Path(summary["benchmarks"]["mtr-bench"]["folder"]).is_absolute()
    assert PLACEHOLDER in _description(tmp_path / "p" / "heatmap.png")
    assert "placeholder" in stdout
    code, _ = _audit_over_http(mtr, tmp_path / "r", REAL, capsys)
    assert code == 0
    for name in ("summary.md", "summary.json"):
        written = (tmp_path / "r" / name).read_text(encoding="utf-8")
        assert REAL in written and "embedded placeholder" not in written and "Warning" not in written
