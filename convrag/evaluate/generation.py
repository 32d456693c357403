"""Generation scoring for the CLI and scripts: JSON-ready results, output files and markdown tables.

    tasks = read_responses("responses.jsonl")  # or read_built_tasks("out/mtrag-un", "predictions.jsonl")
    result = evaluate_generation(tasks, judge="openai:MODEL@http://HOST:PORT/v1")  # score_generation's keywords
    write_outputs(result, "results/generation")           # per_task.jsonl, results.json, results.md
    print(render_tables(result))
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from convrag.core.jsonl import json_safe
from convrag.evaluation.data import Folder
from convrag.llm.replies import answer_checks
from convrag.llm.spec import PLACEHOLDER_WARNING, REAL_MODEL_HINT
from convrag.metrics.generation.aggregate import CONDITIONED, RAW
from convrag.metrics.generation.io import TaskList, tasks_from_rows
from convrag.metrics.generation.scorer import GenerationTask, score_generation

LABELS = {"rb_alg": "RB_alg", "rb_llm": "RB_llm", "rl_f": "RL_F", "harmonic": "per-task harmonic",
          "rb_alg_raw": "RB_alg (raw)", "recall": "BERTScore recall component", "rouge_l": "ROUGE-L",
          "k_precision": "K-Precision", "rb_llm_raw": "RB_llm (raw)", "rl_f_raw": "RL_F (raw)",
          "idk": "IDK judge", "clarification": "clarification judge"}


def evaluate_generation(tasks: Sequence[GenerationTask], **score_kwargs: Any) -> dict[str, Any]:
    """Score ``tasks`` with :func:`score_generation` and return ``{"summary", "per_task"}`` (JSON-ready).
    ``summary["degenerate"]`` says whether the answers scored are all empty or refusals, or mostly one text
    (:func:`convrag.llm.replies.answer_checks`; results.md then opens with them).

    Tasks read with ``allow_missing=True`` carry the ids that had no prediction; they are reported in
    ``summary["counts"]["missing_predictions"]``, and predictions with an empty ``contexts`` list in
    ``summary["counts"]["empty_contexts"]``.
    """
    result = score_generation(tasks, **score_kwargs)
    out = result.to_dict()
    missing = list(getattr(tasks, "missing", []) or [])
    out["summary"]["counts"]["missing_predictions"] = len(missing)
    out["summary"]["counts"]["missing_prediction_ids"] = missing
    out["summary"]["counts"]["empty_contexts"] = getattr(tasks, "empty_contexts", 0)
    out["summary"]["source"] = getattr(tasks, "source", None)
    out["summary"]["degenerate"] = answer_checks([t.prediction for t in tasks])
    return json_safe(out)


def read_built_tasks(folder: str | Path, predictions: str | Path, config: str = "all-tasks", split: str = "test",
                     allow_missing: bool = False) -> TaskList:
    """The tasks of a built MTRAG / MTRAG-UN folder's ``config`` / ``split`` joined with a submission file.

    The rows are read straight from the Parquet files the folder's README lists (no ``load_dataset`` cache, so
    the result always reflects the files on disk); an error in a row names its Parquet file and row.
    """
    built = Folder(folder)
    rows = built.rows(config, split)
    origins = [built.locate(config, split, i) for i in range(1, len(rows) + 1)]
    return tasks_from_rows(rows, str(predictions), allow_missing=allow_missing, origins=origins)


def write_outputs(result: Mapping[str, Any], out_dir: str | Path, digits: int = 4) -> None:
    """Write ``per_task.jsonl`` (one row per task), ``results.json`` (the summary) and ``results.md``; each file
    is written beside its final name and renamed into place, so a failed write leaves no half-written file."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    texts = {"per_task.jsonl": "".join(json.dumps(json_safe(row), ensure_ascii=False) + "\n"
                                       for row in result["per_task"]),
             "results.json": json.dumps(json_safe(result["summary"]), indent=2) + "\n",
             "results.md": render_tables(result, digits=digits)}
    for name, text in texts.items():
        tmp = out / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out / name)


def table_notes(summary: Mapping[str, Any]) -> list[str]:
    """The lines every table carries: the judge models, the placeholder warning, the tasks left out."""
    judge, counts = summary["judge"], summary["counts"]
    models = [spec if spec.endswith(model) else f"{spec} (model {model})"
              for spec, model in zip(judge["judges"], judge.get("models") or judge["judges"], strict=False)]
    lines = [f"Judge: {', '.join(models)}; replies read the {summary['mode']} way."]
    if judge.get("placeholder"):
        lines.append(f"**Warning: {PLACEHOLDER_WARNING}.**")
    if counts["excluded"]:
        reasons = "; ".join(f"{reason}: {n}" for reason, n in counts["excluded_by_reason"].items())
        lines.append(f"**Left out of every mean: {counts['excluded']} of {counts['tasks']} tasks ({reasons}).**")
    return [*(f"> {line}  " for line in lines), ""]


def _fmt(cell: Mapping[str, Any] | None, digits: int) -> str:
    if not cell or cell.get("mean") is None:
        return "-"
    if cell.get("low") is None or cell.get("high") is None:
        return f"{cell['mean']:.{digits}f}"
    return f"{cell['mean']:.{digits}f} [{cell['low']:.{digits}f}, {cell['high']:.{digits}f}]"


def _num(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _table(title: str, groups: Mapping[str, Mapping[str, Any]], metrics: Sequence[str], digits: int,
           notes: Sequence[str]) -> list[str]:
    head = ["group", "n", *[LABELS[m] for m in metrics], "harmonic of means", "mean per-task harmonic"]
    lines = [f"### {title}", "", *notes, "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, g in groups.items():
        rank = g["ranking"]
        cells = [name, str(g["n"]), *[_fmt(g["means"].get(m), digits) for m in metrics],
                 _num(rank["harmonic_of_means"], digits), _fmt(rank["mean_of_per_task_harmonic"], digits)]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def render_tables(result: Mapping[str, Any], digits: int = 4) -> str:
    """Markdown: overall table (conditioned and raw metrics, ranking figures), breakdowns, counts and settings.
    Every table names the judge, carries the placeholder warning when the judge is the embedded placeholder, and
    says how many tasks are left out of it and why."""
    s = result["summary"]
    metrics = [m for m in CONDITIONED if m in s["metrics"]]
    overall, rank, counts = s["overall"], s["ranking"], s["counts"]
    notes = table_notes(s)
    flags = (s.get("degenerate") or {}).get("flags") or []
    lines = (["## Read with care", "", *(f"- Degenerate answers: {f}." for f in flags), ""] if flags else []) + [
        f"## Generation scores ({s['mode']} mode, {s['conditioning']} conditioning)", "", *notes,
             "Means over scored tasks with 95% bootstrap intervals. Conditioned metrics follow the answerability "
             "rules; raw ones are before conditioning.", "", "| metric | mean [95% CI] | n |", "|---|---|---|"]
    for m in [*metrics, "harmonic", *RAW]:
        if m in overall:
            lines.append(f"| {LABELS[m]} | {_fmt(overall[m], digits)} | {overall[m]['n']} |")
    lines += ["", f"Ranking ({', '.join(LABELS[m] for m in rank['metrics'])}): harmonic mean of the means = "
              f"{_num(rank['harmonic_of_means'], digits)}; mean of per-task harmonic means = "
              f"{_fmt(rank['mean_of_per_task_harmonic'], digits)}", ""]
    for by, title in (("answerability", "By answerability"), ("domain", "By domain"), ("turn", "By turn")):
        lines += _table(title, s["by"][by], metrics, digits, notes)
    ids = counts["excluded_task_ids"]
    unread = "scored with the official default" if s["mode"] == "official" else "tasks excluded"
    lines += ["### Counts", "",
              f"- tasks: {counts['tasks']}, scored: {counts['scored']}, excluded: {counts['excluded']}"
              + (f" ({', '.join(ids[:10])}{' ...' if len(ids) > 10 else ''})" if ids else ""),
              "- judge calls that failed (those tasks are never scored): "
              + ", ".join(f"{k} {v}" for k, v in counts["call_failures"].items()),
              f"- unreadable judge replies ({unread}): " + ", ".join(f"{k} {v}" for k, v in counts["fallbacks"].items())
              + f"; tasks with any: {counts['tasks_with_fallback']}",
              "- undefined values left out of a mean: " + ", ".join(
                  f"{LABELS[k]} {v}" for k, v in counts["undefined"].items()),
              f"- clarification judge asked: {counts['clarification_asked']}"]
    if counts.get("empty_predictions"):
        lines.append(f"- empty predictions (scored as given, as the official checker accepts them; BERTScore raw 0 "
                     f"and ROUGE-L 0, so RB_alg 0): {counts['empty_predictions']}")
    if "missing_predictions" in counts:
        lines.append(f"- tasks without a prediction (not scored): {counts['missing_predictions']}")
    if counts.get("empty_contexts"):
        lines.append(f"- predictions with an empty contexts list (no passages to check against): "
                     f"{counts['empty_contexts']}")
    for spec, rep in (s.get("llm_report") or {}).items():
        lines.append(f"- LLM {spec}: {rep['calls']} calls, {rep['failures']} failures, {rep['retries']} retries, "
                     f"{rep['structured_retries']} re-asks, {rep['cache_hits']} cache hits, tokens "
                     f"{rep['prompt_tokens']} in / {rep['completion_tokens']} out")
    bs = s.get("bertscore")
    if bs:
        lines.append(f"- BERTScore: {bs['model']}, layer {bs['num_layers']}, rescaled: {bs['rescale_with_baseline']}"
                     + ("" if bs.get("official") else " (not the official deberta-xlarge-mnli setting)"))
    lines.append(f"- judges: {', '.join(s['judge']['judges'])}")
    if s["judge"].get("placeholder"):
        lines.append(f"- the judge is a placeholder; to measure, {REAL_MODEL_HINT}")
    return "\n".join(lines) + "\n"
