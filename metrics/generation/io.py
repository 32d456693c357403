"""Readers that turn MTRAG files into :class:`GenerationTask` lists; every bad input names its file and line.

- :func:`read_responses`: the official evaluation input, one task per line with its predictions (``task_id``,
  ``input``, ``targets``, ``contexts``, ``predictions``, plus ``answerability``, ``collection``, ``turn``); passages
  are the line's ``contexts`` (``passage_source="contexts"``).
- :func:`tasks_from_rows`: rows of a built MTRAG / MTRAG-UN ``*-tasks`` config (each with its Parquet file and row)
  joined with predictions in the official submission format (``task_id`` + ``predictions``, optionally ``contexts``);
  passages are the prediction's ``contexts`` when the line has that key (Subtask C, ``passage_source="prediction"``),
  else the task's reference passages (Subtask B, ``passage_source="reference"``).

Checks follow the official ``scripts/evaluation/format_checker.py`` where it applies: ``task_id`` a string;
``predictions`` objects with a string ``text`` (an empty answer accepted and counted); at most :data:`MAX_CONTEXTS`
``contexts`` with a string ``document_id`` and a numeric ``score`` (an empty list accepted and counted); task ids
exactly the tasks' ids. We differ (as the metric card states): a submission line may leave out ``input`` and
``contexts``, every context needs a string ``text``, ``score`` may not be a bool, and a responses file needs
``targets`` but its ``contexts`` are not checked for ``document_id`` / ``score`` / count. Reference answers must be
non-empty strings; Python-literal strings (``"[{'speaker': ...}]"``) are parsed; NaN is "no value" where optional.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from convrag.builders.mtrag_source import normalize_domain, normalize_task_id
from convrag.core.errors import DataError
from convrag.core.jsonl import is_a, read_jsonl, type_name

from .components import ComponentError, normalize_answerability
from .scorer import GenerationTask

MAX_CONTEXTS = 10
"""The most contexts a submission line may carry (the official checker's limit)."""


class TaskList(list):
    """A list of tasks that also says where they came from, which tasks had no prediction, and how many
    predictions were empty or came with an empty ``contexts`` list."""

    def __init__(self, tasks: Iterable[GenerationTask] = (), *, source: str = "",
                 missing: list[str] | None = None) -> None:
        super().__init__(tasks)
        self.source = source
        self.missing = list(missing or [])
        self.empty_contexts = 0


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _literal(value: Any, name: str, path: str, line: int | None) -> Any:
    """A field value; a string holding a Python/JSON list or dict is parsed."""
    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            return ast.literal_eval(value.strip())
        except (ValueError, SyntaxError) as exc:
            raise DataError(f"field {name!r} is a string that is not a list or dict literal: {exc}", path,
                            line) from exc
    return value


def _list(obj: Mapping[str, Any], name: str, path: str, line: int | None, *, required: bool) -> list[Any] | None:
    """The list in field ``name`` (literal strings parsed); None when absent and not ``required``."""
    value = _literal(obj.get(name), name, path, line)
    if _missing(value):
        if required:
            raise DataError(f"missing field {name!r}", path, line)
        return None
    if not isinstance(value, list):
        raise DataError(f"field {name!r} must be a list, got {type_name(value)}", path, line)
    return value


def _messages(items: Sequence[Any], name: str, path: str, line: int | None, *,
              need_speaker: bool = True) -> list[dict[str, str]]:
    out = []
    for i, m in enumerate(items):
        if not isinstance(m, Mapping) or not isinstance(m.get("text"), str) or (
                need_speaker and not isinstance(m.get("speaker"), str)):
            keys = "'speaker' and 'text'" if need_speaker else "'text'"
            raise DataError(f"{name}[{i}] needs {keys} strings", path, line)
        out.append({"speaker": str(m.get("speaker", "")), "text": m["text"]})
    return out


def _conversation(obj: Mapping[str, Any], task_id: str, path: str, line: int | None) -> list[dict[str, str]]:
    conversation = _messages(_list(obj, "input", path, line, required=True) or [], "input", path, line)
    if not conversation:
        raise DataError(f"task {task_id!r}: 'input' (the conversation) is empty", path, line)
    return conversation


def _references(obj: Mapping[str, Any], task_id: str, path: str, line: int | None) -> list[str]:
    """The reference answers (``targets`` texts): at least one, none empty."""
    targets = _messages(_list(obj, "targets", path, line, required=True) or [], "targets", path, line,
                        need_speaker=False)
    if not targets:
        raise DataError(f"task {task_id!r}: 'targets' holds no reference answer", path, line)
    for i, t in enumerate(targets):
        if not t["text"].strip():
            raise DataError(f"task {task_id!r}: targets[{i}].text (a reference answer) is empty", path, line)
    return [t["text"] for t in targets]


def _prediction_text(obj: Mapping[str, Any], path: str, line: int) -> str:
    """The first prediction's text; every prediction must be an object with a string ``text`` ("" allowed)."""
    preds = _list(obj, "predictions", path, line, required=True) or []
    if not preds:
        raise DataError("no predictions: expected 'predictions': [{'text': ...}]", path, line)
    for i, p in enumerate(preds):
        if not isinstance(p, Mapping):
            raise DataError(f"predictions[{i}] must be an object, got {type_name(p)}", path, line)
        if not isinstance(p.get("text"), str):
            raise DataError(f"predictions[{i}] has no 'text' string", path, line)
    return preds[0]["text"]


def _submission_contexts(obj: Mapping[str, Any], path: str, line: int) -> list[str] | None:
    """Texts of a submission line's ``contexts`` (None when the line has none), checked as the official checker
    checks them, plus a string ``text``."""
    contexts = _list(obj, "contexts", path, line, required=False)
    if contexts is None:
        return None
    if len(contexts) > MAX_CONTEXTS:
        raise DataError(f"too many contexts ({len(contexts)}); at most {MAX_CONTEXTS} are allowed", path, line)
    for i, c in enumerate(contexts):
        if not isinstance(c, Mapping):
            raise DataError(f"contexts[{i}] must be an object, got {type_name(c)}", path, line)
        if not isinstance(c.get("document_id"), str):
            raise DataError(f"contexts[{i}].document_id must be a string, got {type_name(c.get('document_id'))}",
                            path, line)
        if not is_a(c.get("score"), (int, float)):
            raise DataError(f"contexts[{i}].score must be a number, got {type_name(c.get('score'))}", path, line)
        if not isinstance(c.get("text"), str):
            raise DataError(f"contexts[{i}].text must be a string (the judges read it), got "
                            f"{type_name(c.get('text'))}", path, line)
    return [c["text"] for c in contexts]


def _answerability(value: Any, path: str, line: int | None) -> str | None:
    value = _literal(value, "answerability", path, line)
    if _missing(value):
        return None
    try:
        return normalize_answerability(value)
    except ComponentError as exc:
        raise DataError(str(exc), path, line) from exc


def _turn(value: Any, task_id: str, path: str, line: int | None) -> int | None:
    if _missing(value) or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise DataError(f"task {task_id!r}: turn must be an integer, got {value!r}", path, line)


def _domain(value: Any, path: str | None = None, line: int | None = None) -> str | None:
    """The MTRAG domain of a collection name; unknown names are kept as written, or, with ``path`` (an official
    responses file, whose collections are MTRAG's), an error at that line (never scored as a domain of its own)."""
    if _missing(value) or not str(value).strip():
        return None
    try:
        return normalize_domain(str(value), path, line)
    except DataError:
        if path is not None:
            raise
        return str(value)


def _task_id(obj: Mapping[str, Any], path: str, line: int) -> str:
    task_id = obj.get("task_id")
    if task_id is None:
        raise DataError("missing 'task_id'", path, line)
    if not isinstance(task_id, str):
        raise DataError(f"'task_id' must be a string, got {type_name(task_id)}", path, line)
    if not task_id.strip():
        raise DataError("'task_id' is empty", path, line)
    return task_id


def read_responses(path: str) -> TaskList:
    """Tasks with predictions from an official evaluation input file (e.g. ``responses-10.jsonl``)."""
    tasks = TaskList(source=str(path))
    first_line: dict[str, int] = {}
    for line, obj in read_jsonl(str(path)):
        task_id = _task_id(obj, path, line)
        if task_id in first_line:
            raise DataError(f"task {task_id!r} appears twice (first on line {first_line[task_id]})", path, line)
        first_line[task_id] = line
        conversation = _conversation(obj, task_id, path, line)
        references = _references(obj, task_id, path, line)
        contexts = _messages(_list(obj, "contexts", path, line, required=True) or [], "contexts", path, line,
                             need_speaker=False)
        tasks.empty_contexts += not contexts
        extra = {k: obj[k] for k in ("conversation_id", "task_type", "dataset") if isinstance(obj.get(k), str)}
        tasks.append(GenerationTask(
            task_id=task_id, prediction=_prediction_text(obj, path, line), references=references,
            passages=[c["text"] for c in contexts], conversation=conversation,
            answerability=_answerability(obj.get("answerability", obj.get("Answerability")), path, line),
            domain=_domain(obj.get("domain", obj.get("collection", obj.get("Collection"))), path, line),
            turn=_turn(obj.get("turn"), task_id, path, line), passage_source="contexts", extra=extra,
        ))  # fmt: skip
    return tasks


def read_predictions(path: str) -> dict[str, tuple[int, str, list[str] | None]]:
    """{canonical task id: (line, prediction text, context texts or None)} of a submission file."""
    out: dict[str, tuple[int, str, list[str] | None]] = {}
    for line, obj in read_jsonl(str(path)):
        raw_id = _task_id(obj, str(path), line)
        task_id = normalize_task_id(raw_id, str(path), line)
        if task_id in out:
            raise DataError(f"task {raw_id!r} appears twice (first on line {out[task_id][0]})", path, line)
        out[task_id] = (line, _prediction_text(obj, str(path), line), _submission_contexts(obj, str(path), line))
    return out


Origin = tuple[str, int | None]
"""Where a built row comes from: (Parquet file, 1-based row number in it)."""


def tasks_from_rows(rows: Iterable[Mapping[str, Any]], predictions_path: str, *, allow_missing: bool = False,
                    origins: Sequence[Origin] | None = None) -> TaskList:
    """Join built ``*-tasks`` rows with a submission file. Unknown task ids are errors; tasks without a prediction
    are an error unless ``allow_missing`` (then they are left out and listed in ``TaskList.missing``).
    ``origins[i]``: the file and row of ``rows[i]``, named by errors in it (default: ``tasks rows``, index)."""
    preds = read_predictions(predictions_path)
    tasks = TaskList(source=str(predictions_path))
    seen: set[str] = set()
    for index, row in enumerate(rows, start=1):
        where, at = origins[index - 1] if origins is not None else ("tasks rows", index)
        raw_id = row.get("task_id")
        if not isinstance(raw_id, str) or not raw_id:
            raise DataError("no task_id", where, at)
        task_id = normalize_task_id(raw_id, where, at)
        if task_id in seen:
            raise DataError(f"task {raw_id!r} appears twice", where, at)
        seen.add(task_id)
        if task_id not in preds:
            tasks.missing.append(task_id)
            continue
        _, text, contexts = preds[task_id]
        extra: dict[str, Any] = {k: row[k] for k in ("conversation_id", "multi_turn", "standalone", "collection")
                                 if isinstance(row.get(k), str) and row[k]}
        if contexts is None:
            reference = [p.get("text") or "" for p in (row.get("relevant_passages") or [])]
            passages = [p for p in reference if p.strip()]
            extra["passages_without_text"] = len(reference) - len(passages)
            source = "reference"
        else:
            passages, source = contexts, "prediction"
            tasks.empty_contexts += not contexts
        tasks.append(GenerationTask(
            task_id=task_id, prediction=text, references=_references(row, task_id, where, at), passages=passages,
            conversation=_conversation(row, task_id, where, at),
            answerability=_answerability(row.get("answerability"), where, at),
            domain=_domain(row.get("domain")), turn=_turn(row.get("turn"), task_id, where, at),
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
