"""Readers that turn MTRAG files into :class:`GenerationTask` lists; every bad input names its file and line.

- :func:`read_responses`: the official evaluation input, one task per line with its predictions
  (``input``, ``targets``, ``contexts``, ``answerability``, ``collection``, ``turn``, ``predictions[0].text``).
  Passages are the line's ``contexts`` (``passage_source="contexts"``).
- :func:`tasks_from_rows`: rows of a built MTRAG / MTRAG-UN ``*-tasks`` config joined with a predictions file in
  the official submission format (``task_id`` + ``predictions[0].text``, optionally ``contexts``). Passages are
  the prediction's own ``contexts`` when the line has that key (Subtask C, ``passage_source="prediction"``),
  else the task's reference passages (Subtask B, ``passage_source="reference"``).

Fields stored as Python-literal strings (as in some release files: ``"[{'speaker': ...}]"``) are parsed, NaN
means "no value". Reference passages without text are left out and counted in ``extra["passages_without_text"]``.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterable, Mapping
from typing import Any

from convrag.builders.mtrag_source import normalize_domain, normalize_task_id

from convrag.errors import DataError
from convrag.jsonl import read_jsonl

from .components import ComponentError, normalize_answerability
from .scorer import GenerationTask


class TaskList(list):
    """A list of tasks that also says where they came from and which tasks had no prediction."""

    def __init__(self, tasks: Iterable[GenerationTask] = (), *, source: str = "",
                 missing: list[str] | None = None) -> None:
        super().__init__(tasks)
        self.source = source
        self.missing = list(missing or [])


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _literal(value: Any, name: str, path: str, line: int) -> Any:
    """A field value; a string holding a Python/JSON list or dict is parsed."""
    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            return ast.literal_eval(value.strip())
        except (ValueError, SyntaxError) as exc:
            raise DataError(f"field {name!r} is a string that is not a list or dict literal: {exc}", path,
                            line) from exc
    return value


def _messages(value: Any, name: str, path: str, line: int, *, need_speaker: bool = True) -> list[dict[str, str]]:
    value = _literal(value, name, path, line)
    if _missing(value):
        return []
    if not isinstance(value, list):
        raise DataError(f"field {name!r} must be a list, got {type(value).__name__}", path, line)
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, Mapping) or not isinstance(m.get("text"), str) or (
                need_speaker and not isinstance(m.get("speaker"), str)):
            keys = "'speaker' and 'text'" if need_speaker else "'text'"
            raise DataError(f"{name}[{i}] needs {keys} strings", path, line)
        out.append({"speaker": str(m.get("speaker", "")), "text": m["text"]})
    return out


def _prediction_text(obj: Mapping[str, Any], path: str, line: int) -> str:
    preds = _literal(obj.get("predictions"), "predictions", path, line)
    if not isinstance(preds, list) or not preds:
        raise DataError("no predictions: expected 'predictions': [{'text': ...}]", path, line)
    first = preds[0]
    text = first.get("text") if isinstance(first, Mapping) else None
    if not isinstance(text, str):
        raise DataError("predictions[0] has no 'text' string", path, line)
    if not text.strip():
        raise DataError("predictions[0].text is empty", path, line)
    return text


def _answerability(value: Any, path: str, line: int) -> str | None:
    value = _literal(value, "answerability", path, line)
    if _missing(value):
        return None
    try:
        return normalize_answerability(value)
    except ComponentError as exc:
        raise DataError(str(exc), path, line) from exc


def _turn(value: Any, task_id: str, path: str, line: int) -> int | None:
    if _missing(value) or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise DataError(f"task {task_id!r}: turn must be an integer, got {value!r}", path, line)


def _domain(value: Any) -> str | None:
    if _missing(value) or not str(value).strip():
        return None
    try:
        return normalize_domain(str(value))
    except DataError:
        return str(value)


def read_responses(path: str) -> TaskList:
    """Tasks with predictions from an official evaluation input file (e.g. ``responses-10.jsonl``)."""
    tasks = TaskList(source=str(path))
    first_line: dict[str, int] = {}
    for line, obj in read_jsonl(str(path)):
        task_id = obj.get("task_id")
        if not isinstance(task_id, str) or not task_id.strip():
            raise DataError("missing 'task_id'", path, line)
        if task_id in first_line:
            raise DataError(f"task {task_id!r} appears twice (first on line {first_line[task_id]})", path, line)
        first_line[task_id] = line
        conversation = _messages(obj.get("input"), "input", path, line)
        if not conversation:
            raise DataError(f"task {task_id!r}: 'input' (the conversation) is missing or empty", path, line)
        targets = _messages(obj.get("targets"), "targets", path, line, need_speaker=False)
        contexts = _messages(obj.get("contexts"), "contexts", path, line, need_speaker=False)
        extra = {k: obj[k] for k in ("conversation_id", "task_type", "dataset") if isinstance(obj.get(k), str)}
        tasks.append(GenerationTask(
            task_id=task_id, prediction=_prediction_text(obj, path, line),
            references=[t["text"] for t in targets], passages=[c["text"] for c in contexts],
            conversation=conversation,
            answerability=_answerability(obj.get("answerability", obj.get("Answerability")), path, line),
            domain=_domain(obj.get("domain", obj.get("collection", obj.get("Collection")))),
            turn=_turn(obj.get("turn"), task_id, path, line), passage_source="contexts", extra=extra,
        ))  # fmt: skip
    return tasks


def read_predictions(path: str) -> dict[str, tuple[int, str, list[str] | None]]:
    """{canonical task id: (line, prediction text, context texts or None)} of a submission file."""
    out: dict[str, tuple[int, str, list[str] | None]] = {}
    for line, obj in read_jsonl(str(path)):
        raw_id = obj.get("task_id")
        if not isinstance(raw_id, str) or not raw_id.strip():
            raise DataError("missing 'task_id'", path, line)
        task_id = normalize_task_id(raw_id, str(path), line)
        if task_id in out:
            raise DataError(f"task {raw_id!r} appears twice (first on line {out[task_id][0]})", path, line)
        text = _prediction_text(obj, str(path), line)
        contexts = None
        if "contexts" in obj and not _missing(obj["contexts"]):
            contexts = [c["text"] for c in _messages(obj["contexts"], "contexts", str(path), line,
                                                      need_speaker=False)]
        out[task_id] = (line, text, contexts)
    return out


def tasks_from_rows(rows: Iterable[Mapping[str, Any]], predictions_path: str, *,
                    allow_missing: bool = False) -> TaskList:
    """Join built ``*-tasks`` rows with a submission file. Unknown task ids are errors; tasks without a prediction
    are an error unless ``allow_missing`` (then they are left out and listed in ``TaskList.missing``)."""
    preds = read_predictions(predictions_path)
    tasks = TaskList(source=str(predictions_path))
    seen: set[str] = set()
    for index, row in enumerate(rows, start=1):
        where = "tasks rows"
        raw_id = row.get("task_id")
        if not isinstance(raw_id, str) or not raw_id:
            raise DataError("row without a task_id", where, index)
        task_id = normalize_task_id(raw_id, where, index)
        if task_id in seen:
            raise DataError(f"task {raw_id!r} appears twice", where, index)
        seen.add(task_id)
        if task_id not in preds:
            tasks.missing.append(task_id)
            continue
        _, text, contexts = preds[task_id]
        conversation = _messages(row.get("input"), "input", where, index)
        if not conversation:
            raise DataError(f"task {task_id!r}: 'input' is empty", where, index)
        targets = _messages(row.get("targets"), "targets", where, index, need_speaker=False)
        extra: dict[str, Any] = {k: row[k] for k in ("conversation_id", "multi_turn", "standalone", "collection")
                                 if isinstance(row.get(k), str) and row[k]}
        if contexts is None:
            reference = [p.get("text") or "" for p in (row.get("relevant_passages") or [])]
            passages = [p for p in reference if p.strip()]
            extra["passages_without_text"] = len(reference) - len(passages)
            source = "reference"
        else:
            passages, source = contexts, "prediction"
        tasks.append(GenerationTask(
            task_id=task_id, prediction=text, references=[t["text"] for t in targets], passages=passages,
            conversation=conversation, answerability=_answerability(row.get("answerability"), where, index),
            domain=_domain(row.get("domain")), turn=_turn(row.get("turn"), task_id, where, index),
            passage_source=source, extra=extra,
        ))  # fmt: skip
    unknown = sorted(set(preds) - seen, key=lambda t: preds[t][0])
    if unknown:
        first = unknown[0]
        raise DataError(f"task {first!r} is not among the {len(seen)} tasks of the config"
                        + (f" ({len(unknown) - 1} more unknown ids)" if len(unknown) > 1 else ""),
                        str(predictions_path), preds[first][0])
    if tasks.missing and not allow_missing:
        shown = ", ".join(tasks.missing[:5]) + (" ..." if len(tasks.missing) > 5 else "")
        raise DataError(f"{len(tasks.missing)} of {len(seen)} tasks have no prediction ({shown}); "
                        "pass allow_missing=True to score the others", str(predictions_path))
    return tasks
