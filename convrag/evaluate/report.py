"""Rendering and writing evaluation results: the profile's paper-shaped tables, plots, runs and JSON.

``evaluate_folder`` is what ``convrag evaluate`` calls: profile -> engine -> aggregation -> this module.
Written files (``out``): ``results.json`` (strict JSON, NaN as null, unrounded; ``files`` lists what was
written, so that a later evaluation into the same folder removes what it does not rewrite; ``source`` says where
the folder came from, and no local path in it is absolute: see :mod:`convrag.core.provenance`; ``synthesis``, for a
benchmark synthesized by convrag, names the models that wrote its queries: :func:`synthesis_info`; ``caveats``, the
cautions of :mod:`convrag.evaluate.caveats`), ``results.md`` (the caveats, the tables, then every system's coverage),
``runs/<system>.trec`` (one strategy) or ``runs/<system>__<strategy>.trec`` (for retrievers and official submissions,
not for ``--run`` files), ``runs/qrels.trec`` (the qrels they
were scored against, with the runs' ids: trec_eval, ir_measures and ranx re-score the runs with it), official
submission files when the profile names a submission format, and the report's plots (``turn_position.png`` for
RECOR-shaped reports, ``per_turn.png`` for MTR-Bench-shaped ones).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from convrag.benchmarks.runs import read_external
from convrag.builders.profile import EvaluationProfile
from convrag.core.errors import ConvragError
from convrag.core.jsonl import json_safe
from convrag.core.provenance import local_path, relative_paths
from convrag.evaluate.aggregate import aggregate, system_name
from convrag.evaluate.caveats import caveat_block, caveats
from convrag.evaluation.data import BenchmarkData, load_benchmark
from convrag.evaluation.engine import (
    Scored,
    add_external,
    check_external,
    merged_run,
    run_benchmark,
)
from convrag.metrics.retrieval.trec import safe_token, write_qrels, write_run

#: the qrels every run was scored against, with the runs' query and document ids (``trec_eval QRELS RUN``)
QRELS_FILE = "runs/qrels.trec"


def _generic(results: Mapping[str, Any], digits: int) -> str:
    from convrag.evaluation.tables import render_report

    return render_report(results, f"{results.get('benchmark', 'benchmark')} retrieval baselines", digits=digits)


def _mtrag(results: Mapping[str, Any], digits: int) -> str:
    from convrag.benchmarks.mtrag.tables import render_tables

    return render_tables(results, digits=digits)


def _recor(results: Mapping[str, Any], digits: int) -> str:
    from convrag.benchmarks.recor.tables import render_tables

    return render_tables(results, digits=digits)


def _mtr_bench(results: Mapping[str, Any], digits: int) -> str:
    from convrag.evaluation.turn_tables import render_tables

    return render_tables(results, digits=digits)


RENDERERS: dict[str, Callable[[Mapping[str, Any], int], str]] = {
    "generic": _generic, "stratrag": _generic, "mtrag": _mtrag, "recor": _recor, "mtr-bench": _mtr_bench,
}  # fmt: skip


def render(results: Mapping[str, Any], profile: EvaluationProfile, digits: int = 4) -> str:
    """Markdown report in the shape the profile names, then the coverage of every system. Before every table: for a
    benchmark synthesized by convrag, a line naming the models that wrote its queries (a warning for the
    placeholder); with an LLM-based strategy, a line naming its LLM (a warning for a placeholder model)."""
    if profile.report not in RENDERERS:
        raise ConvragError(f"unknown report shape {profile.report!r}; known: {', '.join(RENDERERS)}")
    text = RENDERERS[profile.report](results, digits).rstrip("\n") + "\n\n" + coverage_section(results) + "\n"
    notes = [part["note"] for part in (results.get("synthesis"), results.get("llm")) if part]
    return caveat_block(results.get("caveats") or []) + (_before_tables(text, "\n\n".join(notes)) if notes else text)


def synthesis_info(folder: str | Path) -> dict[str, Any] | None:
    """Who wrote the queries of a benchmark synthesized by convrag (the ``synthesis`` record of its README's
    ``convrag`` block): pipeline, corpus, each role's model, whether one was the placeholder, and the note every
    table carries (a warning for a placeholder). None for any other folder."""
    from convrag.core.manifest import read_manifest

    try:
        record = read_manifest(folder).get("synthesis")
    except (ConvragError, OSError):
        return None
    if not isinstance(record, dict):
        return None
    from convrag.synthesis.engine.provenance import model_lines

    models = {role: {k: ident.get(k) for k in ("spec", "model", "placeholder", "label")}
              for role, ident in (record.get("models") or {}).items() if isinstance(ident, dict)}
    placeholder = bool(record.get("placeholder"))
    written = "; ".join(model_lines(record)) or "models not recorded"
    where = f"convrag synthesis `{record.get('pipeline')}` over `{record.get('corpus')}`"
    if placeholder:
        note = (f"WARNING: the queries, answers and gold labels of this benchmark were written by the embedded "
                f"placeholder LLM ({where}; {written}): these figures measure nothing. Synthesize it again with a "
                "real model.")
    else:
        note = f"The queries, answers and gold labels of this benchmark were written by LLMs ({where}; {written})."
    return {"pipeline": record.get("pipeline"), "corpus": record.get("corpus"), "models": models,
            "placeholder": placeholder, "note": note}


def _before_tables(text: str, note: str) -> str:
    """``text`` with ``note`` (and a blank line) inserted before every markdown table."""
    out: list[str] = []
    previous = ""
    for line in text.split("\n"):
        if line.startswith("|") and not previous.startswith("|"):
            out += ([""] if previous.strip() else []) + [note, ""]
        out.append(line)
        previous = line
    return "\n".join(out)


def coverage_section(results: Mapping[str, Any]) -> str:
    """Queries ranked by every system of the split's queries, missing ones (with examples) and the warnings of
    external runs and submissions. Missing queries score 0 (trec_eval -c), except in MTRAG's official rows."""
    official = "official" in str(results.get("profile", {}).get("aggregation", ""))
    rule = ("Missing tasks score 0 in our rows (macro, micro, per domain); the official rows average over the tasks "
            "each system ranked, as the official script does." if official else
            "Missing queries score 0 in every mean (trec_eval -c).")  # fmt: skip
    lines = ["## Coverage", "", f"Queries ranked / queries in the split. {rule}", ""]
    for name, c in (results.get("coverage") or {}).items():
        where = f" ({c['kind']} {c['source']})" if c.get("source") else ""
        line = f"- {name}{where}: {c['ranked']} / {c['queries']}"
        if c["missing"]:
            line += (f"; {c['missing']} missing ({c['missing_judged']} of them with a relevant document), e.g. "
                     + ", ".join(c["missing_examples"]))  # fmt: skip
        lines.append(line)
        lines += [f"  - warning: {w}" for w in c.get("warnings", [])]
    return "\n".join(lines)


def _plots(results: Mapping[str, Any], profile: EvaluationProfile, out: Path, stem: str = "") -> dict[str, Path]:
    """Plot name -> the path it was drawn to (``out / (stem + name)``). A plot is drawn only when it compares:
    two or more lines (RECOR: strategies; MTR-Bench: systems); with one line it would repeat a table of
    results.md, and drawing it costs most of a second of matplotlib start-up."""
    if profile.report == "recor":
        if len(results["turn_position"]["strategies"]) < 2:
            return {}
        from convrag.benchmarks.recor.tables import plot_turn_positions

        plot_turn_positions(results, str(out / f"{stem}turn_position.png"))
        return {"turn_position.png": out / f"{stem}turn_position.png"}
    if profile.report == "mtr-bench":
        if len(results["systems"]) < 2:
            return {}
        from convrag.evaluation.turn_tables import plot_per_turn

        plot_per_turn(results, str(out / f"{stem}per_turn.png"))
        return {"per_turn.png": out / f"{stem}per_turn.png"}
    return {}


def write_outputs(results: Mapping[str, Any], scored: Scored, out_dir: str | Path, digits: int = 4) -> list[Path]:
    """Write results.json, results.md, the plots and every retriever's run (see module docstring).

    Everything is rendered first and each file is written under a temporary name, then renamed; files that an
    earlier evaluation wrote into ``out_dir`` (listed in its results.json) and this one does not are removed, so
    the folder never mixes two evaluations."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConvragError(f"{out}: --out names a file, not a folder")
    text = render(results, scored.profile, digits)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    staged: dict[str, Path] = {}
    try:
        _stage(results, scored, out, text, staged)
    except BaseException:
        for path in staged.values():
            path.unlink(missing_ok=True)
        raise
    stale = [name for name in _previous_files(out) if name not in staged]
    for name, path in staged.items():
        os.replace(path, out / name)
    for name in stale:
        (out / name).unlink(missing_ok=True)
    return [out / name for name in staged]


def _stage(results: Mapping[str, Any], scored: Scored, out: Path, text: str, staged: dict[str, Path]) -> None:
    """Write every output under a temporary name in ``out``; ``staged``: final name -> temporary path."""
    tmp = ".convrag-tmp-"
    staged["results.md"] = out / f"{tmp}results.md"
    staged["results.md"].write_text(text, encoding="utf-8")
    staged.update(_plots(results, scored.profile, out, tmp))
    for (system, strategy) in scored.runs:
        if scored.configs.get(system, {}).get("type") == "external run":
            continue  # the user's own run file; a submission is kept as a run, so that the results re-score
        stem = safe_token(system_name(scored, system, strategy).replace("|", "__"))
        staged[f"runs/{stem}.trec"] = out / "runs" / f"{tmp}{stem}.trec"
        write_run(merged_run(scored, system, strategy), staged[f"runs/{stem}.trec"],
                  tag=safe_token(system_name(scored, system, strategy)))  # fmt: skip
        if scored.profile.submission == "mtrag":
            from convrag.benchmarks.mtrag.scoring import write_submission

            staged[f"runs/{stem}.jsonl"] = out / "runs" / f"{tmp}{stem}.jsonl"
            write_submission(scored.runs[(system, strategy)], staged[f"runs/{stem}.jsonl"])
    if QRELS_FILE in staged:
        raise ConvragError(f"a system's run would be written to {QRELS_FILE}, the name of the qrels file; rename it")
    staged[QRELS_FILE] = out / "runs" / f"{tmp}qrels.trec"
    write_qrels(merged_qrels(scored.data), staged[QRELS_FILE])
    files = ["results.json", *staged]
    staged["results.json"] = out / f"{tmp}results.json"
    payload = json.dumps(json_safe({**results, "files": files}), indent=1, allow_nan=False) + "\n"
    staged["results.json"].write_text(payload, encoding="utf-8")


def merged_qrels(data: BenchmarkData) -> dict[str, dict[str, int]]:
    """Every subset's qrels in one table, document ids written as in the runs (``BenchmarkData.doc_keys``; a judged
    document missing from the corpus keeps its own id)."""
    keys = data.doc_keys
    return {q: {keys.get((s, d), d): grade for d, grade in judged.items()}
            for s, qrels in data.qrels.items() for q, judged in qrels.items()}  # fmt: skip


def _previous_files(out: Path) -> list[str]:
    """Files an earlier evaluation wrote into ``out`` (its results.json's ``files``; relative, inside ``out``)."""
    try:
        names = json.loads((out / "results.json").read_text(encoding="utf-8")).get("files") or []
    except (OSError, ValueError, AttributeError):
        return []
    return [n for n in names if isinstance(n, str) and not Path(n).is_absolute() and ".." not in Path(n).parts]


def evaluate_folder(
    folder: str | Path,
    profile: EvaluationProfile,
    external_runs: Mapping[str, str | Path | Mapping[str, Mapping[str, float]]] | None = None,
    submissions: Mapping[str, str | Path] | None = None,
    n_bootstrap: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    **options: Any,
) -> tuple[dict[str, Any], Scored]:
    """Run and score ``folder`` as ``profile`` says (``options``: see :func:`run_benchmark`), add external runs
    (TREC run files, or ``{query: {doc: score}}``) and official-format submissions, aggregate. Runs and
    submissions are read and checked against the benchmark before any retriever runs. Returns the JSON-ready
    results and the scored state."""
    external_runs, submissions = dict(external_runs or {}), dict(submissions or {})
    if profile.aggregation == "domain-macro" and (external_runs or submissions):
        raise ConvragError("this benchmark's tables compare retrievers x strategies per domain; external runs are "
                           "not part of them (score a run file with the retrieval metric instead)")  # fmt: skip
    names = [*external_runs, *submissions]
    retrievers = list(profile.retrievers if options.get("retrievers") is None else options["retrievers"])
    from convrag.retrievers.model_record import system_names

    retrievers += system_names(retrievers)[0].values()  # a run may not take a retriever's spec or system name
    clash = next((n for i, n in enumerate(names) if n in retrievers or n in names[:i]), None)
    if clash is not None:
        raise ConvragError(f"external run name {clash!r} is already used by a retriever or another run")
    data = load_benchmark(str(folder), profile, split=options.get("split"), corpus=options.get("corpus", "auto"),
                          search=options.get("search"))  # fmt: skip
    first = next(iter(profile.corpus))
    complete = {s: kind == first for s, kind in data.corpus_kind.items()}
    normalize = None
    if profile.submission == "mtrag":
        from convrag.builders.mtrag_source import normalize_task_id as normalize
    checked = []
    for kind, given in (("run", external_runs), ("submission", submissions)):
        for name, value in given.items():
            ext = read_external(name, kind, value, profile, data)
            checked.append((ext, check_external(ext, data, complete, normalize)))
    scored = run_benchmark(str(folder), profile, data=data, **options)
    for ext, runs in checked:
        add_external(scored, ext, runs)
    if not scored.per_turn:
        raise ConvragError("nothing to evaluate: give at least one retriever, --run or --submission")
    results = aggregate(scored, n_bootstrap, confidence, seed)
    header: dict[str, Any] = {"source": {"folder": local_path(folder)}, "profile": profile.to_dict()}
    synthesis = synthesis_info(folder)
    if synthesis is not None:
        header["synthesis"] = synthesis
    full = {**header, **results}
    full["caveats"] = caveats(full, scored)
    return relative_paths(full), scored
