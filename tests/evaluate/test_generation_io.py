"""Readers of generation inputs: the official responses file and built tasks rows + a submission file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from convrag.core.errors import DataError
from convrag.metrics.generation.io import read_predictions, read_responses, tasks_from_rows
from tests.conftest import DATA

RESPONSES = DATA / "mtrag" / "scripts" / "evaluation" / "sample_data" / "responses-10.jsonl"


def write_lines(path: Path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def response(task_id: str = "c1::2", **over) -> dict:
    obj = {"task_id": task_id, "turn": 2, "collection": "mt-rag-govt-elser-512-100-20240611",
           "input": [{"speaker": "user", "text": "q1"}, {"speaker": "agent", "text": "a1"},
                     {"speaker": "user", "text": "q2"}],
           "targets": [{"speaker": "agent", "text": "ref"}], "contexts": [{"document_id": "d", "text": "p"}],
           "answerability": ["ANSWERABLE"], "Multi-Turn": math.nan, "predictions": [{"text": "pred"}]}
    obj.update(over)
    return obj


def test_read_real_responses() -> None:
    tasks = read_responses(str(RESPONSES))
    assert len(tasks) == 10 and tasks.source == str(RESPONSES) and tasks.missing == []
    first = tasks[0]
    assert first.task_id == "dd6b6ffd177f2b311abe676261279d2f::1" and first.answerability == "UNANSWERABLE"
    assert first.domain == "clapnq" and first.turn == 1 and first.passages == [] and first.passage_source == "contexts"
    assert first.prediction.startswith("I do not have specific information")
    assert first.conversation[-1] == {"speaker": "user", "text": "where do the arizona cardinals play this week"}
    assert [t.domain for t in tasks].count("govt") == 2
    assert all(len(t.references) == 1 and t.conversation[-1]["speaker"] == "user" for t in tasks)
    assert [len(t.passages) for t in tasks] == [0, 3, 4, 2, 3, 2, 2, 2, 2, 3]


def test_literal_strings_and_nan(tmp_path: Path) -> None:
    obj = response(input=str([{"speaker": "user", "text": "q"}]), answerability="['PARTIAL']", turn="2",
                   contexts="[]")
    tasks = read_responses(write_lines(tmp_path / "r.jsonl", [json.dumps(obj)]))
    assert tasks[0].conversation == [{"speaker": "user", "text": "q"}] and tasks[0].answerability == "PARTIAL"
    assert tasks[0].turn == 2 and tasks[0].passages == []


@pytest.mark.parametrize(("obj", "match"), [
    ("{not json", "invalid JSON"),
    (json.dumps(response(task_id="")), "'task_id' is empty"),
    (json.dumps(response(predictions=[])), "no predictions"),
    (json.dumps(response(predictions=[{"txt": "x"}])), "no 'text'"),
    (json.dumps(response(input=[])), "conversation"),
    (json.dumps(response(input=[{"text": "no speaker"}])), r"input\[0\]"),
    (json.dumps(response(answerability=["MAYBE"])), "unknown answerability"),
    (json.dumps(response(turn="two")), "turn must be an integer"),
    (json.dumps(response(contexts="[broken")), "not a list or dict literal"),
])
def test_responses_errors_name_file_and_line(tmp_path: Path, obj: str, match: str) -> None:
    path = write_lines(tmp_path / "r.jsonl", [json.dumps(response("c0::1")), obj])
    with pytest.raises(DataError, match=match) as err:
        read_responses(path)
    assert err.value.source == path and err.value.line == 2 and f"{path}:2:" in str(err.value)


def test_responses_duplicate(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "r.jsonl", [json.dumps(response()), "", json.dumps(response())])
    with pytest.raises(DataError, match="appears twice .first on line 1.") as err:
        read_responses(path)
    assert err.value.line == 3


# --- built tasks rows + submission ------------------------------------------------------------------------------
def row(cid: str, turn: int, answerability: str = "ANSWERABLE") -> dict:
    return {"task_id": f"{cid}<::>{turn}", "conversation_id": cid, "turn": turn, "domain": "fiqa",
            "collection": "mt-rag-fiqa-beir-elser-512-100-20240501", "question": "q",
            "input": [{"speaker": "user", "text": f"question {turn}"}],
            "targets": [{"speaker": "agent", "text": f"reference {turn}"}], "answerability": answerability,
            "multi_turn": "Follow-up", "question_type": ["Factoid"], "standalone": "", "scored": True,
            "relevant_passages": [{"document_id": "d1", "title": "", "text": "gold passage"},
                                  {"document_id": "d2", "title": "", "text": ""}]}


ROWS = [row("c1", 1), row("c1", 2, "UNANSWERABLE"), row("c2", 1, "UNDERSPECIFIED")]


def pred(task_id: str, text: str = "an answer", **over) -> str:
    return json.dumps({"task_id": task_id, "predictions": [{"text": text}], **over})


def test_join_rows_and_predictions(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "p.jsonl", [
        pred("c1::1"), pred("c1<::>2", contexts=[{"document_id": "x", "score": 2.5, "text": "retrieved"}]),
        pred("c2::1")])
    tasks = tasks_from_rows(ROWS, path)
    assert [t.task_id for t in tasks] == ["c1<::>1", "c1<::>2", "c2<::>1"] and tasks.missing == []
    first, second, third = tasks
    assert first.passages == ["gold passage"] and first.passage_source == "reference"
    assert first.extra["passages_without_text"] == 1 and first.references == ["reference 1"]
    assert second.passages == ["retrieved"] and second.passage_source == "prediction"
    assert second.answerability == "UNANSWERABLE" and third.answerability == "UNDERSPECIFIED"
    assert first.domain == "fiqa" and first.turn == 1 and first.extra["multi_turn"] == "Follow-up"


def test_missing_predictions(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "p.jsonl", [pred("c1::1")])
    with pytest.raises(DataError, match=r"2 of 3 tasks have no prediction \(c1<::>2, c2<::>1\)") as err:
        tasks_from_rows(ROWS, path)
    assert err.value.source == path
    tasks = tasks_from_rows(ROWS, path, allow_missing=True)
    assert len(tasks) == 1 and tasks.missing == ["c1<::>2", "c2<::>1"]


@pytest.mark.parametrize(("lines", "match", "line"), [
    ([pred("c1::1"), pred("c9::1")], "'c9<::>1' is not among the 3 tasks", 2),
    ([pred("c1::1"), pred("c1<::>1")], r"appears twice \(first on line 1\)", 2),
    ([pred("c1::1"), json.dumps({"task_id": "c1::2"})], "missing field 'predictions'", 2),
    ([pred("c1::1"), pred("c1")], "malformed task id", 2),
    ([pred("c1::1", contexts=[{"id": "x"}])], r"contexts\[0\].document_id must be a string", 1),
])
def test_prediction_errors_name_file_and_line(tmp_path: Path, lines, match, line) -> None:
    path = write_lines(tmp_path / "p.jsonl", lines)
    with pytest.raises(DataError, match=match) as err:
        tasks_from_rows(ROWS, path, allow_missing=True)
    assert err.value.source == path and err.value.line == line


def test_row_errors(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "p.jsonl", [pred("c1::1")])
    with pytest.raises(DataError, match="appears twice") as err:
        tasks_from_rows([ROWS[0], ROWS[0]], path)
    assert err.value.source == "tasks rows" and err.value.line == 2
    with pytest.raises(DataError, match="unknown answerability"):
        tasks_from_rows([{**ROWS[0], "answerability": "NOPE"}], path)


def test_read_predictions_keeps_contexts(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "p.jsonl", [pred("c1::1", contexts=[]), pred("c1::2")])
    got = read_predictions(path)
    assert got == {"c1<::>1": (1, "an answer", []), "c1<::>2": (2, "an answer", None)}
