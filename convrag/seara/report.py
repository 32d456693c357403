"""SEARA reports: the leaderboard of one pool, the chosen configuration as YAML, PR-curve and interaction plots.

Definitions (the SEARA memo (``shared/reference/seara.md``) sections 6.5 and 6.6):

* one leaderboard per pool: rows are ``metrics/pr_auc`` results (``score_chunks``) that must share one pool
  signature (:func:`convrag.seara.pool.same_pool`); with fact-level results (config ``facts``,
  :mod:`convrag.seara.fact_level`) beside them, a fact PR-AUC column (and its CI) and fact recall at K; rows are
  ordered by the headline (``headline``: ``"chunks"`` or ``"facts"``) PR-AUC micro (higher first, then name);
  ``cost rank`` is 1 for the cheapest (equal costs share a rank); recall is pool-relative;
* PR curves are step curves: the points are drawn in decreasing recall with ``drawstyle="steps-post"`` (as
  sklearn's ``PrecisionRecallDisplay``), so P(k) spans (R(k-1), R(k)], the area the step PR-AUC adds up;
  the first step reaches back to recall 0. Cut-offs where nothing was retrieved (precision None) are skipped.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from convrag.core.errors import ConvragError
from convrag.seara.pool import same_pool
from convrag.seara.stats import BootstrapResult

COLUMNS = ("configuration", "pr_auc", "ci_low", "ci_high", "pr_auc_macro", "precision_at_k", "recall_at_k",
           "n_scored", "n_excluded", "fact_pr_auc", "fact_ci_low", "fact_ci_high", "fact_recall_at_k",
           "fact_n_scored", "judge_calls", "cost", "cost_rank")  # fmt: skip
HEADLINES = ("chunks", "facts")
CHOICE_FILE_HEADER = "# SEARA choice: the configuration to use, chosen by `convrag select`."


class ReportError(ConvragError):
    """A report cannot be built from these inputs (a bootstrap from another pool, an empty curve set)."""


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _intervals(results: Mapping[str, Mapping[str, Any]], bootstrap: BootstrapResult | None,
               what: str) -> dict[str, tuple[float | None, float | None]]:
    """Each configuration's CI from ``bootstrap``, whose point estimates must equal the results' ``pr_auc``."""
    out: dict[str, tuple[float | None, float | None]] = {}
    for name, result in results.items():
        if bootstrap is None:
            out[name] = (None, None)
            continue
        if name not in bootstrap.point:
            raise ReportError(f"{name!r} has no {what} bootstrap interval: bootstrap every configuration of the table")
        if result.get("pr_auc") is None or not math.isclose(bootstrap.point[name], result["pr_auc"], abs_tol=1e-12):
            raise ReportError(f"{name!r}: {what} bootstrap PR-AUC {bootstrap.point[name]} differs from the table's "
                              f"{result.get('pr_auc')}: compute both at one k, level and precision denominator")
        out[name] = bootstrap.ci(name)
    return out


def leaderboard_rows(results: Mapping[str, Mapping[str, Any]], *, bootstrap: BootstrapResult | None = None,
                     judge_calls: Mapping[str, int] | None = None, costs: Mapping[str, float] | None = None,
                     facts: Mapping[str, Mapping[str, Any]] | None = None,
                     fact_bootstrap: BootstrapResult | None = None,
                     headline: str = "chunks") -> tuple[str, list[dict[str, Any]]]:
    """``(pool signature, rows)`` with :data:`COLUMNS`, best headline PR-AUC micro first (ties by name).

    ``results``: {configuration: ``score_chunks`` result}; ``facts``: {configuration: ``score_facts`` result}
    of the same pool (optional); :func:`same_pool` refuses mixed or missing pool signatures, and a bootstrap must
    carry the same signature. Its point estimates must equal the results' ``pr_auc`` (same k, level and
    settings), else :class:`ReportError`. ``headline="facts"`` needs ``facts``."""
    if headline not in HEADLINES or (headline == "facts" and facts is None):
        raise ReportError(f"headline must be 'chunks' or 'facts' (with fact results), got {headline!r}")
    checked: dict[str, Any] = dict(results)
    for tag, boot in (("<bootstrap>", bootstrap), ("<fact bootstrap>", fact_bootstrap)):
        if boot is not None:
            checked[tag] = boot.pool_signature
    if facts is not None:
        checked.update({f"<facts> {n}": r for n, r in facts.items()})
    signature = same_pool(checked)
    chunk_ci = _intervals(results, bootstrap, "chunk-level")
    fact_ci = _intervals(facts, fact_bootstrap, "fact-level") if facts is not None else {}
    rows = []
    for name, result in results.items():
        fact = (facts or {}).get(name, {})
        rows.append({"configuration": name, "pr_auc": _number(result.get("pr_auc")), "ci_low": chunk_ci[name][0],
                     "ci_high": chunk_ci[name][1], "pr_auc_macro": _number(result.get("pr_auc_macro")),
                     "precision_at_k": _number(result.get("precision_at_k")),
                     "recall_at_k": _number(result.get("recall_at_k")), "n_scored": result.get("n_scored"),
                     "n_excluded": result.get("n_excluded"), "fact_pr_auc": _number(fact.get("pr_auc")),
                     "fact_ci_low": fact_ci.get(name, (None, None))[0],
                     "fact_ci_high": fact_ci.get(name, (None, None))[1],
                     "fact_recall_at_k": _number(fact.get("recall_at_k")), "fact_n_scored": fact.get("n_scored"),
                     "judge_calls": (judge_calls or {}).get(name), "cost": (costs or {}).get(name),
                     "cost_rank": None})  # fmt: skip
    priced = sorted({r["cost"] for r in rows if r["cost"] is not None})
    for row in rows:
        row["cost_rank"] = None if row["cost"] is None else priced.index(row["cost"]) + 1
    key = "fact_pr_auc" if headline == "facts" else "pr_auc"
    rows.sort(key=lambda r: (r[key] is None, -(r[key] or 0.0), r["configuration"]))
    return signature, rows


def judge_identity(spec: str, oracle_source: str | None = None) -> dict[str, Any]:
    """What made a pool's pseudo-qrels, for the files select writes: :func:`convrag.llm.identity.describe`'s fields
    (the spec resolved, the model, whether it is the embedded placeholder, a ``label``), or for an evidence oracle
    its file's name (no LLM, no machine path)."""
    if oracle_source is not None:
        name = Path(oracle_source).name
        return {"spec": f"oracle:{name}", "model": "labelled evidence", "endpoint": None, "placeholder": False,
                "label": f"evidence oracle ({name}; labelled evidence spans, no LLM)"}
    from convrag.llm.identity import describe

    return describe(spec).to_dict()


def judge_lines(judge: Mapping[str, Any] | None) -> list[str]:
    """The judge line of a leaderboard or choice file, the models of the LLM rewriters, rerankers and query strategy
    (``judge["components"]``), and a warning line when the judge is the placeholder."""
    if not judge:
        return []
    lines = [f"Judge: {judge['label']}."]
    parts = judge.get("components") or {}
    if parts:
        lines.append("LLMs of the configurations: " + "; ".join(f"{part}: {label}" for part, label in parts.items())
                     + ".")
        same = [part for part, label in parts.items() if label == judge["label"]]
        if same:
            lines.append(f"Caution: the judge is also the model of {', '.join(same)}, so it grades lists that it "
                         "rewrote or reordered itself; a separate --llm (or a model in the space) avoids that.")
    if judge.get("placeholder"):
        lines.append("Warning: the pseudo-qrels come from the embedded placeholder model, too weak to judge: this "
                     "leaderboard only shows that the plumbing works, it is not a measurement.")
    return lines


def _fmt(value: Any, digits: int) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _calibration_text(calibration: Any) -> str:
    if isinstance(calibration, str):
        return calibration
    if isinstance(calibration, Mapping):
        return ", ".join(f"{k} {_fmt(v, 3)}" for k, v in calibration.items())
    parts = [(n, getattr(calibration, n, None)) for n in ("sensitivity", "specificity", "kappa")]
    return ", ".join(f"{n} {_fmt(v, 3)}" for n, v in parts if v is not None) or "no labelled pairs judged"


def leaderboard(results: Mapping[str, Mapping[str, Any]], *, bootstrap: BootstrapResult | None = None,
                judge_calls: Mapping[str, int] | None = None, costs: Mapping[str, float] | None = None,
                calibration: Any = None, digits: int = 4, facts: Mapping[str, Mapping[str, Any]] | None = None,
                fact_bootstrap: BootstrapResult | None = None, headline: str = "chunks",
                notes: Sequence[str] = (), judge: Mapping[str, Any] | None = None) -> str:
    """The markdown leaderboard of one pool (:func:`leaderboard_rows`) with the notes under it: the judge that made
    the pseudo-qrels (``judge``: :func:`judge_identity`; a placeholder warning when it is the embedded model),
    queries, those excluded (R' = 0), pool signature, the pool-relative recall caveat, the judge ``calibration`` if
    given (a :class:`convrag.judging.missed.Calibration`, a mapping of figures, or text) and any extra ``notes``."""
    signature, rows = leaderboard_rows(results, bootstrap=bootstrap, judge_calls=judge_calls, costs=costs,
                                       facts=facts, fact_bootstrap=fact_bootstrap, headline=headline)
    level = f"{1 - bootstrap.alpha:.0%} CI" if bootstrap is not None else "no CI"
    chooses = {headline: " (chooses)"} if facts is not None else {}
    head = ["configuration", f"PR-AUC micro [{level}]{chooses.get('chunks', '')}", "PR-AUC macro", "P@K", "R'@K",
            "scored / excluded"]
    if facts is not None:
        fact_level = f"{1 - fact_bootstrap.alpha:.0%} CI" if fact_bootstrap is not None else "no CI"
        head += [f"fact PR-AUC [{fact_level}]{chooses.get('facts', '')}", "fact R@K", "fact scored"]
    head += ["judge calls", "cost rank"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def ci(low: Any, high: Any) -> str:
        return f" [{_fmt(low, digits)}, {_fmt(high, digits)}]" if low is not None else ""

    for r in rows:
        cells = [r["configuration"], _fmt(r["pr_auc"], digits) + ci(r["ci_low"], r["ci_high"]),
                 _fmt(r["pr_auc_macro"], digits), _fmt(r["precision_at_k"], digits), _fmt(r["recall_at_k"], digits),
                 f"{_fmt(r['n_scored'], digits)} / {_fmt(r['n_excluded'], digits)}"]
        if facts is not None:
            cells += [_fmt(r["fact_pr_auc"], digits) + ci(r["fact_ci_low"], r["fact_ci_high"]),
                      _fmt(r["fact_recall_at_k"], digits), _fmt(r["fact_n_scored"], digits)]
        cells += [_fmt(r["judge_calls"], digits), _fmt(r["cost_rank"], digits)]
        lines.append("| " + " | ".join(cells) + " |")
    first = next(iter(results.values()))
    scored, excluded = first.get("n_scored") or 0, first.get("n_excluded") or 0
    text = judge_lines(judge)
    text += [f"{scored + excluded} queries, {excluded} excluded (R' = 0: no pooled relevant chunk; candidate "
             f"unanswerable). Pool signature: `{signature}`.",
             "Recall is pool-relative (over the pooled relevant chunks only): compare configurations within this "
             "pool only, never across pools."]  # fmt: skip
    if facts is not None:
        text.append("Fact PR-AUC: recall over the pool's minimal facts (one chunk states a fact when it holds it "
                    "whole), precision = top-k chunks stating a fact / min(k, n); it does not reward cutting the same "
                    "evidence into more chunks.")
    if calibration is not None:
        text.append(f"Judge calibration: {_calibration_text(calibration)}.")
    text += list(notes)
    return "\n".join(lines) + "\n\n" + "\n".join(text) + "\n"


def write_leaderboard(folder: str | os.PathLike, results: Mapping[str, Mapping[str, Any]], *,
                      bootstrap: BootstrapResult | None = None, judge_calls: Mapping[str, int] | None = None,
                      costs: Mapping[str, float] | None = None, calibration: Any = None,
                      facts: Mapping[str, Mapping[str, Any]] | None = None,
                      fact_bootstrap: BootstrapResult | None = None, headline: str = "chunks",
                      notes: Sequence[str] = (), judge: Mapping[str, Any] | None = None) -> dict[str, Path]:
    """Write ``leaderboard.md`` (:func:`leaderboard`), ``leaderboard.csv`` (:data:`COLUMNS`) and
    ``leaderboard.json`` ({pool_signature, headline, judge, rows, bootstrap and fact bootstrap summaries or None})
    into ``folder``; returns the paths."""
    kwargs = {"bootstrap": bootstrap, "judge_calls": judge_calls, "costs": costs, "facts": facts,
              "fact_bootstrap": fact_bootstrap, "headline": headline}
    signature, rows = leaderboard_rows(results, **kwargs)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = {ext: out / f"leaderboard.{ext}" for ext in ("md", "csv", "json")}
    paths["md"].write_text(leaderboard(results, calibration=calibration, notes=notes, judge=judge, **kwargs),
                           encoding="utf-8")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({c: "" if r[c] is None else r[c] for c in COLUMNS} for r in rows)
    paths["csv"].write_text(buffer.getvalue(), encoding="utf-8")
    payload = {"pool_signature": signature, "headline": headline, "judge": dict(judge) if judge else None,
               "rows": rows,
               "bootstrap": bootstrap.summary() if bootstrap is not None else None,
               "fact_bootstrap": fact_bootstrap.summary() if fact_bootstrap is not None else None}
    paths["json"].write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return paths


def _plain(value: Any) -> Any:
    """Numbers and containers as plain Python (numpy scalars become floats / ints) so YAML stays safe."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        return value.item()
    return value


def write_choice(path: str | os.PathLike, name: str, dimensions: dict, metrics: dict, pool_signature: str, *,
                 reason: str | None = None, measure: str = "chunks", measure_reason: str | None = None,
                 judge: Mapping[str, Any] | None = None) -> Path:
    """Write the chosen configuration as YAML ({configuration, pool_signature, measure, measure_reason, judge,
    dimensions, metrics}) under a commented header saying how it was chosen (``reason``: e.g.
    :attr:`convrag.seara.stats.Pick.reason`; ``measure``: ``"chunks"`` or ``"facts"``, the PR-AUC that chose,
    ``measure_reason``: why that one; ``judge``: :func:`judge_identity`, named in the header)."""
    what = "fact-level PR-AUC micro (over the pool's minimal facts)" if measure == "facts" else \
        "PR-AUC micro (step, over rank cut-offs) against the pool's pseudo-qrels"
    header = [CHOICE_FILE_HEADER,
              f"# Rule: highest {what}; among",
              "# configurations whose paired-bootstrap difference CI to the best contains 0, the cheapest wins.",
              f"# Scores are pool-relative: valid for pool {pool_signature} only."]  # fmt: skip
    header += [f"# {line}" for line in judge_lines(judge)]
    if measure_reason:
        header.append(f"# Measure: {' '.join(measure_reason.split())}")
    if reason:
        header.append(f"# This choice: {' '.join(reason.split())}")
    body = {"configuration": name, "pool_signature": pool_signature, "measure": measure,
            "measure_reason": measure_reason, "judge": dict(judge) if judge else None,
            "dimensions": _plain(dimensions), "metrics": _plain(metrics)}
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(header) + "\n" + yaml.safe_dump(body, sort_keys=False, allow_unicode=True),
                      encoding="utf-8")
    return target


def _save(fig: Figure, path: Path, note: str | None = None) -> None:
    """Save as PNG; ``note`` (the footnote) also goes into the file's ``Description`` text field."""
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path, format="png", dpi=120, metadata={"Description": note} if note else None)


def plot_pr_curves(path_png: str | os.PathLike, curves: Mapping[str, Mapping[str, Any]], title: str,
                   pool_signature: str, marks: Sequence[int] | None = None,
                   judge: Mapping[str, Any] | None = None, note: str | None = None) -> tuple[Path, Path]:
    """One step PR curve per configuration (module docstring), markers at the cut-offs ``marks`` (default 1, 5,
    10, 20 and the largest k), PR-AUC in the legend, the pool signature, the judge and ``note`` (e.g. that the pool
    chooses by another measure than these curves show) as a footnote.
    ``curves[config]`` holds parallel lists ``recall``, ``precision``, ``k`` and the number ``pr_auc``. Also writes
    the plotted points to a CSV beside the PNG (configuration, k, recall, precision, pr_auc). Returns (png path,
    csv path)."""
    if not curves:
        raise ReportError("no curves to plot")
    png = Path(path_png)
    fig = Figure(figsize=(7, 5))
    ax = fig.add_subplot()
    rows: list[tuple[str, int, float, float, float]] = []
    for name, curve in curves.items():
        if not len(curve["recall"]) == len(curve["precision"]) == len(curve["k"]):
            raise ReportError(f"curve {name!r}: recall, precision and k must be parallel lists")
        pts = [(int(k), float(r), float(p)) for k, r, p in zip(curve["k"], curve["recall"], curve["precision"],
                                                                strict=True) if p is not None]  # fmt: skip
        rows += [(name, k, r, p, float(curve["pr_auc"])) for k, r, p in pts]
        if not pts:
            continue
        xs = [r for _, r, _ in reversed(pts)] + [0.0]
        ys = [p for _, _, p in reversed(pts)] + [pts[0][2]]
        (line,) = ax.plot(xs, ys, drawstyle="steps-post", label=f"{name} (PR-AUC {float(curve['pr_auc']):.3f})")
        cut = set(marks) if marks is not None else {1, 5, 10, 20, max(k for k, _, _ in pts)}
        marked = [(r, p) for k, r, p in pts if k in cut]
        ax.plot([r for r, _ in marked], [p for _, p in marked], "o", color=line.get_color())
    ax.set(xlabel="recall (pool-relative)", ylabel="precision", title=title, xlim=(0, 1.02), ylim=(0, 1.02))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize="small")
    foot = f"pool {pool_signature}; markers at k in {sorted(marks) if marks else '1, 5, 10, 20, K'}"
    if note:
        foot = f"{note}; {foot}"
    if judge:
        foot += f"; judge {judge['label']}"
        parts = judge.get("components") or {}
        if parts:
            foot += "; " + "; ".join(f"{part}: {label}" for part, label in parts.items())
    fig.text(0.01, 0.01, foot, fontsize="x-small", color="red" if judge and judge.get("placeholder") else "gray")
    _save(fig, png, foot)
    path_csv = png.with_suffix(".csv")
    with path_csv.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["configuration", "k", "recall", "precision", "pr_auc"])
        writer.writerows([n, k, repr(r), repr(p), repr(a)] for n, k, r, p, a in rows)
    return png, path_csv


#: the least span of an interaction plot's PR-AUC axis: differences smaller than this look flat, as they are
MIN_SPAN = 0.05


def y_limits(values: Sequence[float]) -> tuple[float, float]:
    """The PR-AUC axis of an interaction plot: the values' range with a margin, widened to at least
    :data:`MIN_SPAN` around its middle (within [0, 1]), so that a factor with no effect is drawn flat instead of
    filling the axis."""
    low, high = min(values), max(values)
    margin = (high - low) * 0.1
    low, high = low - margin, high + margin
    if high - low < MIN_SPAN:
        middle = (low + high) / 2
        low, high = middle - MIN_SPAN / 2, middle + MIN_SPAN / 2
    shift = max(0.0, -low) - max(0.0, high - 1.0)
    return max(0.0, low + shift), min(1.0, high + shift)


def plot_interaction(path_png: str | os.PathLike, effects: Mapping[str, Any], factor_x: str, factor_line: str, *,
                     title: str | None = None, pool_signature: str | None = None) -> Path:
    """Interaction plot: mean PR-AUC at each level of ``factor_x``, one line per level of ``factor_line``, from
    :func:`convrag.seara.stats.factorial_effects`'s output (its ``interactions`` tables)."""
    tables = effects.get("interactions", {})
    if f"{factor_x} x {factor_line}" in tables:
        means = {(lx, ll): v for lx, row in tables[f"{factor_x} x {factor_line}"].items() for ll, v in row.items()}
    elif f"{factor_line} x {factor_x}" in tables:
        means = {(lx, ll): v for ll, row in tables[f"{factor_line} x {factor_x}"].items() for lx, v in row.items()}
    else:
        raise ReportError(f"no interaction table for {factor_x!r} and {factor_line!r} (factors: "
                          f"{list(effects.get('levels', {}))})")
    order = effects["levels"]
    fig = Figure(figsize=(6, 4.5))
    ax = fig.add_subplot()
    xs = list(range(len(order[factor_x])))
    for ll in order[factor_line]:
        ax.plot(xs, [means[lx, ll] for lx in order[factor_x]], marker="o", label=f"{factor_line} = {ll}")
    ax.set_xticks(xs, order[factor_x])
    ax.set_ylim(*y_limits(list(means.values())))
    ax.set(xlabel=factor_x, ylabel="mean PR-AUC micro", title=title or f"{factor_x} by {factor_line}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout(rect=(0, 0.04, 1, 1))  # room for every label and the footnote
    if pool_signature:
        fig.text(0.01, 0.01, f"pool {pool_signature}", fontsize="x-small", color="gray")
    png = Path(path_png)
    _save(fig, png)
    return png
