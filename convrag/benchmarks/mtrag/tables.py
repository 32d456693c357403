"""The markdown report of MTRAGEval Subtask A results (``aggregate_mtrag``'s JSON; ``report: mtrag``).

A Table-1-shaped summary (system x view: the official weighted "all" row and our micro mean with its CI), then per
system and view the per-domain, official "all", macro and breakdown rows. Measures beyond the official nDCG@k and
Recall@k (``extra_measures``) are columns headed ``<name> (extra)``, with a legend line: they have a value in our
rows only (per domain, macro, micro, breakdowns) and ``-`` in the official ones; with extra measures the per-domain
means of our own (``<domain> (ours)``, every judged task, missing ones scoring 0) are shown too. When only extra
measures were asked, there is no official row at all, and the report says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

#: how the header of an extra (not official) measure's column is marked
EXTRA_MARK = " (extra)"


def _fmt(value: float | None, digits: int) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _cells(values: Mapping[str, Any], names: Sequence[str], digits: int) -> str:
    """One table row's measure cells; a measure without a value (an extra one in an official row) is ``-``."""
    return " | ".join(_fmt(values.get(m), digits) for m in names)


def legend(official: Sequence[str], extra: Sequence[str]) -> list[str]:
    """The lines that explain the extra columns (and a missing official row); none without extra measures."""
    if not extra:
        return []
    lines = [f"Columns marked \"{EXTRA_MARK.strip()}\" ({', '.join(extra)}) are not Subtask A measures: each task is "
             "scored with the same trec_eval conventions, and they have a value in our rows only (per domain, macro, "
             "micro, breakdowns)" + (", `-` in the official rows." if official else ".")]  # fmt: skip
    if not official:
        lines.append("No official Subtask A measure was asked (only extra ones), so there is no official row: the "
                     "official rows are nDCG@k and Recall@k (asking either one gives both).")  # fmt: skip
    return lines


def render_tables(results: Mapping[str, Any], digits: int = 3) -> str:
    """Markdown report: a Table-1-shaped summary (system x view; official weighted "all" row, and our
    micro mean with its CI), then per system and view the per-domain, macro and breakdown rows."""
    names = list(results["measures"])
    extra = list(results.get("extra_measures") or [])
    official = list(results.get("official_measures", [m for m in names if m not in extra]))
    heads = [m + EXTRA_MARK if m in extra else m for m in names]
    head = "| system | view | row | " + " | ".join(heads) + " |\n|---|---|---|" + "---|" * len(names)
    kinds = ", ".join(f"{domain} {kind}" for domain, kind in results["corpus_kind"].items())
    lines = ["## Subtask A retrieval (only tasks with qrels are scored)", "",
             f"Corpus per domain: {kinds}. Official \"all\" = per-domain means rounded to 5 "
             "decimals, weighted by tasks submitted per domain (run lines); macro = mean of domain means (ours); "
             f"micro = mean over all judged tasks with {int(results['confidence'] * 100)}% bootstrap CI (ours).",
             *(line for text in legend(official, extra) for line in ("", text)), "", head]  # fmt: skip
    for e in results["results"]:
        micro = [f"{_fmt(e['micro_ci'][m]['mean'], digits)} [{_fmt(e['micro_ci'][m]['low'], digits)}, "
                 f"{_fmt(e['micro_ci'][m]['high'], digits)}]" for m in names]  # fmt: skip
        if official:
            lines.append(f"| {e['system']} | {e['view']} | all (official, weighted) | "
                         + _cells(e["official_all"], names, digits) + " |")  # fmt: skip
        lines.append(f"| {e['system']} | {e['view']} | micro [CI] (ours) | " + " | ".join(micro) + " |")
    for e in results["results"]:
        lines += ["", f"### {e['system']} / {e['view']}", "",
                  "| row | n | " + " | ".join(heads) + " |", "|---|---|" + "---|" * len(names)]  # fmt: skip
        if official:
            for d, row in e["domains"].items():
                lines.append(f"| {d} (official) | {row['count']} | " + _cells(row["official"], names, digits) + " |")
            lines.append("| all (official, weighted) | " + str(sum(r["count"] for r in e["domains"].values()))
                         + " | " + _cells(e["official_all"], names, digits) + " |")  # fmt: skip
        if extra:
            for d, row in e["domains"].items():
                lines.append(f"| {d} (ours) | {row['n_judged']} | " + _cells(row["ours"], names, digits) + " |")
        lines.append("| macro (ours) | " + str(len(e["domains"])) + " | " + _cells(e["macro"], names, digits) + " |")
        for group, values in e["groups"].items():
            for value, stats in values.items():
                lines.append(f"| {group}={value} | {stats['n']} | " + _cells(stats, names, digits) + " |")
        lines += [f"\nNote: {n}" for n in e["notes"]]
    return "\n".join(lines) + "\n"
