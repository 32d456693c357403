"""The audit's outputs: ``summary.json``, ``summary.md`` (MTR-Suite Table 4 shape, RECOR's quality table, label
distributions, per-judge table) and ``heatmap.png`` (judge x dimension), from the verdicts of one or more folders.

Every mean is ``metrics/audit``'s: per judge over readable verdicts, then the unweighted mean over judges.
Comp. is an accuracy in [0, 1] (chance 1/n with n candidates: the table shows the mean of 1/n); the table also
shows it x 5, the likely convention behind the paper's 5-point "Comp." column.

:func:`coverage` says, per benchmark and requested dimension, how many judge requests came back usable; a
dimension asked about whose every request failed or was unreadable is an empty result (:func:`empty_dimensions`),
and ``summary["complete"]`` is False with the reason in ``summary["incomplete"]`` (the first line of summary.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from convrag.audit.runner import CONVERSATION_DIMENSIONS, AuditRun, item_domain
from convrag.core.provenance import local_path
from convrag.judging import mtr_eval
from convrag.judging import recor as recor_judges
from convrag.judging.verdict import failure_kind
from convrag.llm.replies import constant_verdicts
from convrag.metrics.audit.aggregate import aggregate_labels, aggregate_scores
from convrag.metrics.audit.judging import LABEL_SETS

SCORE_LABELS = {**mtr_eval.LABELS, "naturalness": "Natural.", "turn_coherence": "Coherence",
                "question_quality": "Q. quality", "groundedness": "Grounded."}


def _aggregate(verdicts: Sequence[Any]) -> dict[str, Any]:
    scored = [v for v in verdicts if v.dimension not in LABEL_SETS]
    labelled = [v for v in verdicts if v.dimension in LABEL_SETS]
    out = aggregate_scores([v.judge for v in scored], [v.dimension for v in scored], [v.score for v in scored],
                           [v.error for v in scored])
    out["labels"] = aggregate_labels([v.judge for v in labelled], [v.dimension for v in labelled],
                                     [v.label for v in labelled], LABEL_SETS)
    return out


def summarize(runs: Sequence[AuditRun]) -> dict[str, Any]:
    """Aggregates per benchmark, per (benchmark, domain), plus counts of what was not judged."""
    out: dict[str, Any] = {"benchmarks": {}}
    for run in runs:
        name = run.audit_set.benchmark
        domains = item_domain(run.audit_set.items)
        by_domain: dict[str, list[Any]] = {}
        for v in run.verdicts:
            by_domain.setdefault(domains.get(v.item_id, ""), []).append(v)
        shown = [len(v.extra.get("candidates") or []) for v in run.verdicts if v.dimension == "completeness"]
        out["benchmarks"][name] = {
            "folder": local_path(run.audit_set.folder), "items": len(run.audit_set.items),
            "skipped": run.audit_set.skipped, "not_applicable": dict(run.not_applicable),
            "verdicts": len(run.verdicts), "all": _aggregate(run.verdicts),
            "completeness_chance": sum(1 / n for n in shown if n) / len(shown) if shown else None,
            "domains": {d: _aggregate(vs) for d, vs in sorted(by_domain.items()) if d},
            "constant_verdicts": constant(run.verdicts),
        }
    return out


def constant(verdicts: Sequence[Any]) -> list[dict[str, str]]:
    """Every (judge, dimension) whose readable verdicts (scores, or labels for the label dimensions) do not vary
    over enough items (:func:`convrag.llm.replies.constant_verdicts`), with the sentence that says so."""
    groups: dict[tuple[str, str], list[Any]] = {}
    for v in verdicts:
        value = v.label if v.dimension in LABEL_SETS else v.score
        groups.setdefault((v.judge, v.dimension), []).append(None if v.error else value)
    return [{"judge": judge, "dimension": dim, "text": line} for (judge, dim), values in groups.items()
            if (line := constant_verdicts(values)) is not None]


def cautions(summary: Mapping[str, Any]) -> list[str]:
    """One sentence per judge and dimension whose verdicts do not vary (``constant_verdicts`` of each benchmark)."""
    return [f"{name}, {c['judge']}, {c['dimension']}: {c['text']}." for name, bench in summary["benchmarks"].items()
            for c in bench.get("constant_verdicts") or []]


def caution_lines(summary: Mapping[str, Any]) -> list[str]:
    """The "Read with care" block of summary.md: the :func:`cautions` (nothing when there is none)."""
    found = cautions(summary)
    return ["## Read with care", "", *(f"- {line}" for line in found), ""] if found else []


def coverage(runs: Sequence[AuditRun], dimensions: Sequence[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per benchmark and requested dimension: ``requests`` (verdicts that needed a judge call, every judge counted;
    a label set by rule, such as a first turn's dependency type, is none but is counted in ``by_rule``),
    ``items`` (distinct items or conversations asked about), ``usable`` (requests that gave a score, or a label for
    label dimensions), ``failed`` (the others by kind: ``call failed``, ``unparseable``) and ``not_applicable``
    (units not asked)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    conversation_dims = [d for d in dimensions if d in CONVERSATION_DIMENSIONS]
    for run in runs:
        slots = {d: {"requests": 0, "items": set(), "usable": 0, "failed": Counter(), "not_applicable": 0,
                     "by_rule": 0} for d in dimensions}
        for v in run.verdicts:
            if v.extra.get("rule"):
                if v.dimension in slots:
                    slots[v.dimension]["by_rule"] += 1
                continue
            for d in conversation_dims if v.dimension == "conversation" else [v.dimension]:
                if d not in slots:
                    continue
                slot = slots[d]
                slot["requests"] += 1
                slot["items"].add(v.item_id)
                if (v.label if d in LABEL_SETS else v.score) is not None:
                    slot["usable"] += 1
                else:
                    slot["failed"][failure_kind(v.error or "no value")] += 1
        for reason, n in run.not_applicable.items():
            unit = reason.split(":", 1)[0]
            for d in conversation_dims if unit == "conversation" else [unit]:
                if d in slots:
                    slots[d]["not_applicable"] += n
        out[run.audit_set.benchmark] = {d: {**s, "items": len(s["items"]), "failed": dict(s["failed"])}
                                        for d, s in slots.items()}
    return out


def empty_dimensions(cover: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
    """One phrase per (benchmark, dimension) of :func:`coverage` that was asked about and has no usable verdict,
    with its counts (the benchmark named when there are several); a benchmark where nothing at all was asked
    or labelled by rule (every unit not applicable) is one phrase too."""
    several = len(cover) > 1
    out = []
    for bench, dims in cover.items():
        where = f" of {bench}" if several else ""
        for dim, s in dims.items():
            if s["requests"] and not s["usable"]:
                kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(s["failed"].items()))
                out.append(f"{dim}{where} ({s['items']} items, {s['requests']} requests: {kinds})")
        if dims and not any(s["requests"] or s["by_rule"] for s in dims.values()):
            skipped = sum(s["not_applicable"] for s in dims.values())
            out.append(f"any dimension{where} (nothing was asked" + (f": {skipped} units not applicable)"
                                                                    if skipped else ")"))
    return out


def _cell(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _rows(summary: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    rows = []
    for name, bench in summary["benchmarks"].items():
        rows.append((name, bench["all"]))
        rows += [(f"{name} / {d}", agg) for d, agg in bench["domains"].items()]
    return rows


def _counted(slot: Mapping[str, Any] | None, digits: int = 2) -> str:
    """A mean with the verdicts behind it: ``4.20 (n=12)``, or ``5.00 (n=1, 3 excluded)`` when unreadable or
    failed verdicts were left out of it; ``n/a (0 of 3)`` when none was usable."""
    if not slot:
        return "n/a"
    n, failed = slot.get("n") or 0, slot.get("failed") or 0
    if slot.get("mean") is None:
        return f"n/a (0 of {failed})" if failed else "n/a"
    return f"{slot['mean']:.{digits}f} (n={n}" + (f", {failed} excluded)" if failed else ")")


def judge_lines(summary: Mapping[str, Any]) -> list[str]:
    """Who judged: each judge's resolved model (``summary["judge_models"]``; judges of one model that differ in their
    options are told apart by their names), and a warning line when any of them is the embedded placeholder."""
    models = summary.get("judge_models") or []
    if not models:
        return []
    labels = [m["label"] for m in models]
    names = list(summary.get("llm") or {})  # each judge as the verdicts name it (options kept, key values masked)
    if len(set(labels)) < len(labels) and len(names) == len(labels):
        labels = [f"{label} (judge {name})" for label, name in zip(labels, names, strict=True)]
    lines = ["Judges: " + "; ".join(labels) + "."]
    if any(m.get("placeholder") for m in models):
        lines.append("Warning: verdicts of the embedded placeholder model, too weak to judge: these figures only show "
                     "that the plumbing works, they are not measurements.")
    return [*lines, ""]


def render(summary: Mapping[str, Any]) -> str:
    """The Markdown tables, under an ``INCOMPLETE: ...`` line when ``summary["complete"]`` is False, the judges'
    line (:func:`judge_lines`) and the judges whose verdicts do not vary (:func:`caution_lines`). Each mean shows the
    readable verdicts behind it and those excluded."""
    lines = [f"INCOMPLETE: {summary.get('incomplete')}", ""] if summary.get("complete") is False else []
    lines += judge_lines(summary) + caution_lines(summary)
    lines += ["## MTR-Eval (mean over judges; Comp. = accuracy of picking the gold among the shown candidates, "
             "chance = mean of 1 / candidates)", "",
             "| Benchmark | Comp. | Comp. x5 | chance | Q-E | A-E | Qual. |", "|---|---|---|---|---|---|---|"]
    for name, agg in _rows(summary):
        o = agg["overall"]
        comp = o.get("completeness", {}).get("mean")
        chance = summary["benchmarks"].get(name, {}).get("completeness_chance")
        lines.append(f"| {name} | {_counted(o.get('completeness'), 3)} | {_cell(None if comp is None else comp * 5)} | "
                     f"{_cell(chance, 3)} | "
                     + " | ".join(_counted(o.get(d)) for d in mtr_eval.DIMENSIONS[1:]) + " |")
    lines += ["", "## RECOR quality judges (1-5, mean over judges)", "",
              "| Benchmark | " + " | ".join(SCORE_LABELS[d] for d in recor_judges.DIMENSIONS) + " |",
              "|---" * (len(recor_judges.DIMENSIONS) + 1) + "|"]
    for name, agg in _rows(summary):
        lines.append(f"| {name} | " + " | ".join(_counted(agg["overall"].get(d)) for d in recor_judges.DIMENSIONS)
                     + " |")
    divisor = summary.get("entropy_denominator") or "log of the label-set size"
    lines += ["", f"## Turn labels (RECOR Tables 29-30): share of turns, normalised entropy H / ({divisor})", ""]
    for name, bench in summary["benchmarks"].items():
        for dim, by_judge in bench["all"]["labels"].items():
            for judge, slot in by_judge.items():
                top = sorted(slot["shares"].items(), key=lambda kv: -kv[1])  # every label of the set
                shares = ", ".join(f"{k} {v:.0%}" for k, v in top) or "none parsed"
                lines.append(f"- {name}, {dim}, {judge}: {shares}; entropy "
                             f"{_cell(slot['normalized_entropy'], 3)}; unparsed {slot['unparsed']}")
    lines += ["", "## Per judge (mean / readable verdicts / excluded)", "",
              "| Benchmark | Judge | Dimension | Mean | n | Excluded |", "|---|---|---|---|---|---|"]
    for name, bench in summary["benchmarks"].items():
        for judge, dims in bench["all"]["per_judge"].items():
            for dim, s in dims.items():
                lines.append(f"| {name} | {judge} | {dim} | {_cell(s['mean'], 3)} | {s['n']} | {s['failed']} |")
    return "\n".join(lines) + "\n"


def _column(dim: str) -> str:
    """A heatmap column: the table's label, Comp. as the table's "Comp. x5" column (the accuracy x 5)."""
    return "Comp. x5" if dim == "completeness" else SCORE_LABELS.get(dim, dim)


def heatmap(summary: Mapping[str, Any], path: Path) -> Path | None:
    """judge x dimension means (Comp. shown x 5, labelled as the table's "Comp. x5" column, so that every cell is on
    the 1-5 axis); None without scores."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells: dict[tuple[str, str], float] = {}
    judges = {j for bench in summary["benchmarks"].values() for j in bench["all"]["per_judge"]}
    short = {j: j.split("@")[0] for j in judges}  # rows without the endpoint (it is in the footnote) when unambiguous
    if len(set(short.values())) < len(short):
        short = {}
    for name, bench in summary["benchmarks"].items():
        for judge, dims in bench["all"]["per_judge"].items():
            for dim, s in dims.items():
                if s["mean"] is not None:
                    scale = 5.0 if dim == "completeness" else 1.0
                    cells[(f"{short.get(judge, judge)} ({name})", _column(dim))] = s["mean"] * scale
    if not cells:
        return None
    rows = sorted({r for r, _ in cells})
    cols = [_column(d) for d in SCORE_LABELS if any(c == _column(d) for _, c in cells)]
    grid = [[cells.get((r, c), float("nan")) for c in cols] for r in rows]
    fig, ax = plt.subplots(figsize=(1.2 * len(cols) + 3, 0.5 * len(rows) + 1.5))
    im = ax.imshow(grid, vmin=1, vmax=5, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=30, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            if v == v:
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="white" if v < 3.5 else "black")
    fig.colorbar(im, ax=ax, label="mean (Comp. x5)")
    models = summary.get("judge_models") or []
    foot = "; ".join(f"{m['spec']} = {m['label']}" for m in models)
    fig.tight_layout()
    if foot:
        fig.subplots_adjust(bottom=min(0.5, fig.subplotpars.bottom + 0.4 / fig.get_figheight()))
        fig.text(0.01, 0.01, f"judges: {foot}", fontsize="x-small",
                 color="red" if any(m.get("placeholder") for m in models) else "gray")
    fig.savefig(path, dpi=120, metadata={"Description": f"judges: {foot}"} if foot else None)
    plt.close(fig)
    return path
