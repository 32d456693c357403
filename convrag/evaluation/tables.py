"""Markdown tables of evaluation results (paper-style), rendered from the results of the ``mean`` aggregation.

Values are formatted to ``digits`` decimals here only; the JSON keeps them unrounded.
"""

from __future__ import annotations

from typing import Any


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
    for group, stats in results["systems"][system]["groups"].items():
        cells = [_cell(stats[m], digits, with_ci) for m in measures]
        lines.append(f"| {group} | {stats['n']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


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
