"""Rendering and writing evaluation results: the profile's paper-shaped tables, plots, runs and JSON.

``evaluate_folder`` is what ``convrag evaluate`` calls: profile -> engine -> aggregation -> this module.
Written files (``out``): ``results.json`` (strict JSON, NaN as null, unrounded), ``results.md`` (the tables),
``runs/<system>.trec`` (one strategy) or ``runs/<system>__<strategy>.trec``, official submission files when
the profile names a submission format, and the report's plots (``turn_position.png`` for RECOR-shaped
reports, ``per_turn.png`` for MTR-Bench-shaped ones).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from convrag.evaluation.aggregate import aggregate, system_name
from convrag.evaluation.engine import Scored, add_external, check_external_run, merged_run, run_benchmark
from convrag.evaluation.profile import EvaluationProfile
from convrag.jsonl import json_safe
from convrag.metrics.retrieval.trec import safe_token, write_run


def _generic(results: Mapping[str, Any], digits: int) -> str:
    from convrag.evaluation.tables import render_report

    return render_report(results, f"{results.get('benchmark', 'benchmark')} retrieval baselines", digits=digits)


def _mtrag(results: Mapping[str, Any], digits: int) -> str:
    from convrag.evaluation.mtrag import render_tables

    return render_tables(results, digits=digits)


def _recor(results: Mapping[str, Any], digits: int) -> str:
    from convrag.evaluation.recor_tables import render_tables

    return render_tables(results, digits=digits)


def _mtr_bench(results: Mapping[str, Any], digits: int) -> str:
    from convrag.evaluation.turn_tables import render_tables

    return render_tables(results, digits=digits)


RENDERERS: dict[str, Callable[[Mapping[str, Any], int], str]] = {
    "generic": _generic, "stratrag": _generic, "mtrag": _mtrag, "recor": _recor, "mtr-bench": _mtr_bench,
}  # fmt: skip


def render(results: Mapping[str, Any], profile: EvaluationProfile, digits: int = 4) -> str:
    """Markdown report in the shape the profile names."""
    if profile.report not in RENDERERS:
        from convrag.errors import ConvragError

        raise ConvragError(f"unknown report shape {profile.report!r}; known: {', '.join(RENDERERS)}")
    return RENDERERS[profile.report](results, digits)


def _plots(results: Mapping[str, Any], profile: EvaluationProfile, out: Path) -> list[Path]:
    if profile.report == "recor":
        from convrag.evaluation.recor_tables import plot_turn_positions

        plot_turn_positions(results, str(out / "turn_position.png"))
        return [out / "turn_position.png"]
    if profile.report == "mtr-bench":
        from convrag.evaluation.turn_tables import plot_per_turn

        plot_per_turn(results, str(out / "per_turn.png"))
        return [out / "per_turn.png"]
    return []


def write_outputs(results: Mapping[str, Any], scored: Scored, out_dir: str | Path, digits: int = 4) -> list[Path]:
    """Write results.json, results.md, the plots and every retriever's run (see module docstring)."""
    out = Path(out_dir)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    paths = [out / "results.json", out / "results.md"]
    paths[0].write_text(json.dumps(json_safe(results), indent=1, allow_nan=False) + "\n", encoding="utf-8")
    paths[1].write_text(render(results, scored.profile, digits), encoding="utf-8")
    paths += _plots(results, scored.profile, out)
    for (system, strategy) in scored.runs:
        if "type" in scored.configs.get(system, {}):
            continue  # external runs and submissions are the user's own files
        stem = safe_token(system_name(scored, system, strategy).replace("|", "__"))
        write_run(merged_run(scored, system, strategy), out / "runs" / f"{stem}.trec",
                  tag=safe_token(system_name(scored, system, strategy)))  # fmt: skip
        paths.append(out / "runs" / f"{stem}.trec")
        if scored.profile.submission == "mtrag":
            from convrag.evaluation.mtrag import write_submission

            write_submission(scored.runs[(system, strategy)], out / "runs" / f"{stem}.jsonl")
            paths.append(out / "runs" / f"{stem}.jsonl")
    return paths


def evaluate_folder(
    folder: str | Path,
    profile: EvaluationProfile,
    external_runs: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
    submissions: Mapping[str, str | Path] | None = None,
    n_bootstrap: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    **options: Any,
) -> tuple[dict[str, Any], Scored]:
    """Run and score ``folder`` as ``profile`` says (``options``: see :func:`run_benchmark`), add external runs
    and official-format submissions, aggregate. Returns the JSON-ready results and the scored state."""
    if profile.aggregation == "domain-macro" and (external_runs or submissions):
        from convrag.errors import ConvragError

        raise ConvragError("this benchmark's tables compare retrievers x strategies per domain; external runs are "
                           "not part of them (score a run file with the retrieval metric instead)")  # fmt: skip
    scored = run_benchmark(str(folder), profile, **options)
    normalize = None
    if profile.submission == "mtrag":
        from convrag.builders.mtrag_source import normalize_task_id as normalize
    for name, run in (external_runs or {}).items():
        add_external(scored, name, "run", check_external_run(run, scored.data, name, normalize))
    for name, path in (submissions or {}).items():
        add_external(scored, name, "submission", _read_submission(profile, path, scored))
    if not scored.per_turn:
        from convrag.errors import ConvragError

        raise ConvragError("nothing to evaluate: give at least one retriever, --run or --submission")
    results = aggregate(scored, n_bootstrap, confidence, seed)
    return {"folder": str(folder), "profile": profile.to_dict(), **results}, scored


def _read_submission(profile: EvaluationProfile, path: str | Path, scored: Scored) -> dict[str, Any]:
    from convrag.errors import ConvragError

    if profile.submission != "mtrag":
        raise ConvragError("this benchmark has no official submission format; give TREC runs with --run")
    from convrag.evaluation.mtrag import read_submission

    expected: Sequence[str] = [t.qid for t in scored.data.turns]
    return read_submission(path, expected or None).runs
