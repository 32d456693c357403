"""Tables and plot of the MTR-Bench-shaped report (``report: mtr-bench``), from ``aggregate_mean`` results.

* Main table (paper Tables 3 and 11; Table 5 when R@100 / R@1000 are asked for): every system (retriever x
  strategy) x measure, mean over turns with a 95% bootstrap CI, multiplied by the profile's ``scale`` (100).
  With one gold document per turn, Recall@k is the share of turns whose gold document is in the top k (a hit
  rate), MRR@k the mean reciprocal rank of the gold document (0 beyond k), nDCG@k = 1 / log2(rank + 1).
* Per-turn table: the primary measure (nDCG@20 when computed, else the last measure) by turn position.
* Topic-switch table: every measure by ``switch_phase`` (no switch / before / first turn after / after).

Every group row says how many turns it rests on (``Turns``; ``†`` below ``tables.SMALL_N``), and so does the plot's
x axis; the plot carries a footnote when the embedded placeholder LLM wrote the queries or ran a strategy, and one
naming the results' other caveats.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from convrag.evaluation.tables import SMALL_N, small_mark, small_n_note

#: column order of the topic-switch table (values the builders write in ``switch_phase``)
PHASES = ("no switch", "before switch", "first turn after switch", "after switch")


def _f(value: Any, digits: int, scale: float) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value * scale:.{digits}f}"


def _table(head: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |"
                                                                                    for r in rows])  # fmt: skip


def primary(results: Mapping[str, Any]) -> str:
    """nDCG@20 when computed, else the last measure."""
    return "nDCG@20" if "nDCG@20" in results["measures"] else results["measures"][-1]


def main_table(results: Mapping[str, Any], digits: int = 2) -> str:
    scale, ms, labels = results["scale"], results["measures"], results["labels"]
    rows = []
    for system in results["systems"].values():
        cells = [f"{_f(system['overall'][m]['mean'], digits, scale)} [{_f(system['overall'][m]['low'], digits, scale)}"
                 f", {_f(system['overall'][m]['high'], digits, scale)}]" for m in ms]  # fmt: skip
        rows.append([system["retriever"], system["strategy"], *cells])
    return _table(["Retriever", "Strategy", *(labels.get(m, m) for m in ms)], rows)


def group_table(results: Mapping[str, Any], group: str, measures: list[str], digits: int = 2) -> str | None:
    """Systems x values of ``group`` for each of ``measures``; None when the group was not computed."""
    scale, labels = results["scale"], results["labels"]
    systems = results["systems"]
    if not systems or group not in next(iter(systems.values()))["groups_by"]:
        return None
    values = list(next(iter(systems.values()))["groups_by"][group])
    values.sort(key=lambda v: PHASES.index(v) if v in PHASES else len(PHASES))
    rows = []
    for name, system in systems.items():
        for m in measures:
            cells = [_f(system["groups_by"][group].get(v, {}).get(m, {}).get("mean"), digits, scale) for v in values]
            rows.append([name, labels.get(m, m), *cells])
    counts = next(iter(systems.values()))["groups_by"][group]
    rows.append(["Turns", "", *(f"{counts[v]['n']}{small_mark(counts[v]['n'])}" for v in values)])
    note = small_n_note((counts[v]["n"] for v in values), "turns")
    return _table(["System", "Measure", *values], rows) + (f"\n\n{note}" if note else "")


def plot_footnote(results: Mapping[str, Any]) -> str | None:
    """The footnote of a plot: that its figures rest on the embedded placeholder LLM (it wrote the benchmark's
    queries, or an LLM strategy used it), and the kinds of the other ``caveats`` of the results (saturated measures,
    a reduced corpus, small groups; :mod:`convrag.evaluate.caveats`); None when there is neither."""
    synthesis, llm = results.get("synthesis") or {}, results.get("llm") or {}
    who = (["the embedded SmolLM2-135M placeholder wrote the queries"] if synthesis.get("placeholder") else []) + (
        [f"{llm['placeholder']} ran the LLM strategies"] if llm.get("placeholder") else [])
    parts = [f"Placeholder: {' and '.join(who)}; these figures measure nothing."] if who else []
    others = [c for c in results.get("caveats") or [] if c.get("kind") != "placeholder"]
    if others:
        kinds = [f"{', '.join(c['saturated'])} saturated" if c.get("saturated") else c["kind"].replace("-", " ")
                 for c in others]
        parts.append(f"Read with care: {', '.join(dict.fromkeys(kinds))} (see results.md).")
    return "\n".join(parts) or None


def render_tables(results: Mapping[str, Any], digits: int = 2) -> str:
    """The markdown report: main table, per-turn table, topic-switch table, significance."""
    from convrag.evaluation.tables import significance_table

    scale = results["scale"]
    pool = "each turn's candidate pool" if results["pool_restricted"] else "the whole corpus"
    parts = [
        "# Conversational retrieval evaluation",
        f"Split `{results['split']}`: {results['n_scored']} scored turns over {pool}"
        + (f" ({len(results['excluded_queries'])} without a relevant document excluded)"
           if results["excluded_queries"] else "")  # fmt: skip
        + f". Values x{scale:g}; cells: mean [{int(results['confidence'] * 100)}% percentile bootstrap CI, "
        f"{results['n_bootstrap']} resamples]. One gold document per turn: Recall@k is a hit rate."
        + (f" {results['qrels_missing_documents']} gold documents are not in the corpus: those turns cannot be "
           "answered." if results.get("qrels_missing_documents") else ""),
        "## Tables 3 / 11 (paper shape): retriever x strategy", main_table(results, digits),
    ]
    per_turn = group_table(results, "turn", [primary(results)], digits)
    if per_turn:
        parts += [f"## {results['labels'].get(primary(results), primary(results))} by turn position", per_turn]
    switch = group_table(results, "switch_phase", list(results["measures"]), digits)
    if switch:
        parts += ["## Hard topic switches: turns by position relative to the switch", switch]
    if results["significance"]:
        parts += ["## Paired significance (two-sided; * = p < 0.05, randomisation test; unscaled differences)",
                  significance_table(results, 4)]  # fmt: skip
    return "\n\n".join(parts) + "\n"


def position_labels(by_turn: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The x labels of a per-turn plot: each position, the turns it rests on, and a mark when they are too few."""
    return [f"{x}\nn={g['n']}{small_mark(g['n'])}" for x, g in by_turn.items()]


def plot_per_turn(results: Mapping[str, Any], path: str) -> None:
    """PNG line plot of the primary measure by turn position, one line per system; each position names the turns it
    rests on, marked when they are too few to compare (:func:`convrag.evaluation.tables.small_mark`)."""
    from matplotlib.figure import Figure  # no pyplot: its import and global figure state are not needed

    m = primary(results)
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for name, system in results["systems"].items():
        by_turn = system["groups_by"].get("turn", {})
        xs = list(by_turn)
        ax.plot(range(len(xs)), [by_turn[x][m]["mean"] * results["scale"] for x in xs], marker="o", label=name)
        ax.set_xticks(range(len(xs)), position_labels(by_turn))
    ax.set_xlabel(f"turn (n = turns scored there; \u2020 fewer than {SMALL_N}: too few to compare)")
    footnote = plot_footnote(results)
    if footnote:
        fig.text(0.01, 0.01, footnote, fontsize=7, color="darkred")
    ax.set_ylabel(f"{results['labels'].get(m, m)} (x{results['scale']:g})")
    ax.set_title(f"{results['labels'].get(m, m)} by turn position", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout(rect=(0, 0.04 * (footnote.count("\n") + 1) if footnote else 0, 1, 1))
    fig.savefig(path, format="png", dpi=120, metadata={"Description": footnote} if footnote else None)
