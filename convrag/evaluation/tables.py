"""Markdown tables of evaluation results (paper-style), rendered from the results of the ``mean`` aggregation.

Values are formatted to ``digits`` decimals here only; the JSON keeps them unrounded. A group of fewer than
:data:`SMALL_N` queries (turns) is marked ``†`` with a caution under its table (:func:`small_n_note`): one query
moves its mean by 1/n. Where a paper's table was computed on a set of a known size (:data:`PAPER_ROWS`), the
header says how many rows this run scored against it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: groups with fewer queries than this are marked as too small to compare
SMALL_N = 10
#: report shape -> (split, rows, what) the paper's tables were computed on
PAPER_ROWS = {"stratrag": ("validation", 200, "the StratRAG paper's Tables 2 and 3")}


def small_mark(n: int) -> str:
    """`` †`` for a group of 1 to :data:`SMALL_N` - 1 queries, else empty."""
    return " †" if 0 < n < SMALL_N else ""


def small_n_note(counts: Iterable[int], unit: str = "queries") -> str | None:
    """The caution under a table with groups of fewer than :data:`SMALL_N` ``unit`` (None when none is): one
    of them moves the mean by 1/n, so such a group's mean is no basis for comparing systems or groups."""
    small = sorted({n for n in counts if 0 < n < SMALL_N})
    if not small:
        return None
    return (f"† fewer than {SMALL_N} {unit} (n = {', '.join(map(str, small))}): one of them moves such a mean by "
            f"up to 1/n of the measure's range (1/{max(small[0], 1)} here), so it is no basis for a comparison.")


def scored_against_paper(results: Mapping[str, Any]) -> str:
    """`` The paper's ... were computed on N <split> rows; this run scored M.`` for a report shape in
    :data:`PAPER_ROWS`, else empty."""
    shape = str((results.get("profile") or {}).get("report") or results.get("benchmark") or "")
    if shape not in PAPER_ROWS:
        return ""
    split, rows, what = PAPER_ROWS[shape]
    n = results["n_scored"]
    relation = "the same number" if n == rows else ("a smaller set: wider CIs" if n < rows else "a larger set")
    return (f" {what[0].upper() + what[1:]} were computed on {rows} {split} rows; this run scored {n} records "
            f"({relation}; the means are not the paper's figures).")


def _cell(stat: dict[str, float], digits: int, with_ci: bool) -> str:
    text = f"{stat['mean']:.{digits}f}"
    if with_ci:
        text += f" [{stat['low']:.{digits}f}, {stat['high']:.{digits}f}]"
    return text


def overall_table(results: dict[str, Any], digits: int = 4, with_ci: bool = True) -> str:
    """Systems x measures (StratRAG Table 2 shape), each cell ``mean [CI]``."""
    measures = results["measures"]
    labels = results["labels"]
    head = "| Retriever | " + " | ".join(labels[m] for m in measures) + " |"
    lines = [head, "|---|" + "---|" * len(measures)]
    for name, system in results["systems"].items():
        cells = [_cell(system["overall"][m], digits, with_ci) for m in measures]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def group_table(results: dict[str, Any], system: str, digits: int = 4, with_ci: bool = False) -> str:
    """Groups x measures for one system (StratRAG Table 3 shape: type, n, measures)."""
    measures = results["measures"]
    labels = results["labels"]
    field = results["group_field"] or "group"
    lines = [f"| {field} | n | " + " | ".join(labels[m] for m in measures) + " |",
             "|---|---|" + "---|" * len(measures)]  # fmt: skip
    groups = results["systems"][system]["groups"]
    for group, stats in groups.items():
        cells = [_cell(stats[m], digits, with_ci) for m in measures]
        lines.append(f"| {group} | {stats['n']}{small_mark(stats['n'])} | " + " | ".join(cells) + " |")
    note = small_n_note(stats["n"] for stats in groups.values())
    return "\n".join(lines) + (f"\n\n{note}" if note else "")


def significance_table(results: dict[str, Any], digits: int = 4, alpha: float = 0.05) -> str:
    """Pairwise differences with the paired randomisation and t-test p-values; ``*`` marks p < alpha."""
    labels = results["labels"]
    lines = ["| A | B | measure | mean A - mean B | p (randomisation) | p (t-test) |", "|---|---|---|---|---|---|"]
    for row in results["significance"]:
        mark = " *" if row["p_randomization"] < alpha else ""
        lines.append(
            f"| {row['a']} | {row['b']} | {labels[row['measure']]} | {row['diff']:+.{digits}f} | "
            f"{row['p_randomization']:.4f}{mark} | {row['p_ttest']:.4g} |"
        )
    return "\n".join(lines)


def render_report(results: dict[str, Any], title: str, digits: int = 4) -> str:
    """The whole markdown report: overall table, per-group tables, significance."""
    conf = int(round(results["confidence"] * 100))
    parts = [
        f"# {title}",
        f"Split `{results['split']}`: {results['n_scored']} scored queries"
        + (f" ({len(results['excluded_queries'])} without relevant documents excluded)"
           if results["excluded_queries"] else "")  # fmt: skip
        + ("; each query ranks only its own pool" if results["pool_restricted"] else "")
        + f". Cells: mean [{conf}% percentile bootstrap CI, {results['n_bootstrap']} resamples]."
        + scored_against_paper(results)
        + (f" {results['qrels_missing_documents']} relevant documents named by the qrels are not in the corpus: "
           "they count as relevant but cannot be retrieved." if results.get("qrels_missing_documents") else ""),
        "## Overall",
        overall_table(results, digits),
    ]
    if results["group_field"]:
        for system in results["systems"]:
            parts += [f"## {system} by {results['group_field']}", group_table(results, system, digits)]
    if results["significance"]:
        parts += ["## Paired significance (two-sided; * = p < 0.05, randomisation test)",
                  significance_table(results, digits)]  # fmt: skip
    return "\n\n".join(parts) + "\n"
