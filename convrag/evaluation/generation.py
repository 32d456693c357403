"""Generation scoring for the CLI and scripts: JSON-ready results, output files and markdown tables.

    tasks = read_responses("responses.jsonl")             # or tasks_from_rows(rows, "predictions.jsonl")
    result = evaluate_generation(tasks, judge="default")  # keyword arguments of score_generation
    write_outputs(result, "results/generation")           # per_task.jsonl, results.json, results.md
    print(render_tables(result))
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from convrag.jsonl import json_safe
from convrag.metrics.generation.aggregate import CONDITIONED, RAW
from convrag.metrics.generation.scorer import GenerationTask, score_generation

LABELS = {"rb_alg": "RB_alg", "rb_llm": "RB_llm", "rl_f": "RL_F", "harmonic": "per-task harmonic",
          "rb_alg_raw": "RB_alg (raw)", "recall": "BERTScore recall component", "rouge_l": "ROUGE-L",
          "k_precision": "K-Precision", "rb_llm_raw": "RB_llm (raw)", "rl_f_raw": "RL_F (raw)",
          "idk": "IDK judge", "clarification": "clarification judge"}


def evaluate_generation(tasks: Sequence[GenerationTask], **score_kwargs: Any) -> dict[str, Any]:
    """Score ``tasks`` with :func:`score_generation` and return ``{"summary", "per_task"}`` (JSON-ready).

    Tasks read with ``allow_missing=True`` carry the ids that had no prediction; they are reported in
    ``summary["counts"]["missing_predictions"]``.
    """
    result = score_generation(tasks, **score_kwargs)
    out = result.to_dict()
    missing = list(getattr(tasks, "missing", []) or [])
    out["summary"]["counts"]["missing_predictions"] = len(missing)
    out["summary"]["counts"]["missing_prediction_ids"] = missing
    out["summary"]["source"] = getattr(tasks, "source", None)
    return json_safe(out)


def write_outputs(result: Mapping[str, Any], out_dir: str | Path, digits: int = 4) -> None:
    """Write ``per_task.jsonl`` (one row per task), ``results.json`` (the summary) and ``results.md``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "per_task.jsonl").open("w", encoding="utf-8") as handle:
        for row in result["per_task"]:
            handle.write(json.dumps(json_safe(row), ensure_ascii=False) + "\n")
    (out / "results.json").write_text(json.dumps(json_safe(result["summary"]), indent=2) + "\n", encoding="utf-8")
    (out / "results.md").write_text(render_tables(result, digits=digits), encoding="utf-8")


def _fmt(cell: Mapping[str, Any] | None, digits: int) -> str:
    if not cell or cell.get("mean") is None:
        return "-"
    return f"{cell['mean']:.{digits}f} [{cell['low']:.{digits}f}, {cell['high']:.{digits}f}]"


def _num(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _table(title: str, groups: Mapping[str, Mapping[str, Any]], metrics: Sequence[str], digits: int) -> list[str]:
    head = ["group", "n", *[LABELS[m] for m in metrics], "harmonic of means", "mean per-task harmonic"]
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, g in groups.items():
        rank = g["ranking"]
        cells = [name, str(g["n"]), *[_fmt(g["means"].get(m), digits) for m in metrics],
                 _num(rank["harmonic_of_means"], digits), _fmt(rank["mean_of_per_task_harmonic"], digits)]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def render_tables(result: Mapping[str, Any], digits: int = 4) -> str:
    """Markdown: overall table (conditioned and raw metrics, ranking figures), breakdowns, counts and settings."""
    s = result["summary"]
    metrics = [m for m in CONDITIONED if m in s["metrics"]]
    overall, rank, counts = s["overall"], s["ranking"], s["counts"]
    lines = [f"## Generation scores ({s['mode']} mode, {s['conditioning']} conditioning)", "",
             "Means over scored tasks with 95% bootstrap intervals. Conditioned metrics follow the answerability "
             "rules; raw ones are before conditioning.", "", "| metric | mean [95% CI] | n |", "|---|---|---|"]
    for m in [*metrics, "harmonic", *RAW]:
        if m in overall:
            lines.append(f"| {LABELS[m]} | {_fmt(overall[m], digits)} | {overall[m]['n']} |")
    lines += ["", f"Ranking ({', '.join(LABELS[m] for m in rank['metrics'])}): harmonic mean of the means = "
              f"{_num(rank['harmonic_of_means'], digits)}; mean of per-task harmonic means = "
              f"{_fmt(rank['mean_of_per_task_harmonic'], digits)}", ""]
    for by, title in (("answerability", "By answerability"), ("domain", "By domain"), ("turn", "By turn")):
        lines += _table(title, s["by"][by], metrics, digits)
    fb = counts["fallbacks"]
    lines += ["### Counts", "",
              f"- tasks: {counts['tasks']}, scored: {counts['scored']}, excluded (strict mode): {counts['excluded']}"
              + (f" ({', '.join(counts['excluded_task_ids'][:10])}{' ...' if counts['excluded'] > 10 else ''})"
                 if counts["excluded"] else ""),
              "- judge fallbacks (0.5 or undefined): " + ", ".join(f"{k} {v}" for k, v in fb.items())
              + f"; tasks with any fallback: {counts['tasks_with_fallback']}",
              "- undefined values left out of a mean: " + ", ".join(
                  f"{LABELS[k]} {v}" for k, v in counts["undefined"].items()),
              f"- clarification judge asked: {counts['clarification_asked']}"]
    if "missing_predictions" in counts:
        lines.append(f"- tasks without a prediction (not scored): {counts['missing_predictions']}")
    for spec, rep in (s.get("llm_report") or {}).items():
        lines.append(f"- LLM {spec}: {rep['calls']} calls, {rep['failures']} failures, {rep['retries']} retries, "
                     f"{rep['structured_retries']} re-asks, {rep['cache_hits']} cache hits, tokens "
                     f"{rep['prompt_tokens']} in / {rep['completion_tokens']} out")
    bs = s.get("bertscore")
    if bs:
        lines.append(f"- BERTScore: {bs['model']}, layer {bs['num_layers']}, rescaled: {bs['rescale_with_baseline']}"
                     + ("" if bs.get("official") else " (not the official deberta-xlarge-mnli setting)"))
    lines.append(f"- judges: {', '.join(s['judge']['judges'])}")
    return "\n".join(lines) + "\n"
