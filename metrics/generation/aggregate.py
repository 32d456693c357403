"""Summaries of per-task generation scores: means with bootstrap CIs, breakdowns, ranking figures, counts."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from convrag.core.stats import bootstrap_ci

from .components import harmonic_mean

CONDITIONED = ("rb_alg", "rb_llm", "rl_f")
RAW = ("rb_alg_raw", "recall", "rouge_l", "k_precision", "rb_llm_raw", "rl_f_raw", "idk", "clarification")
BREAKDOWNS = ("answerability", "domain", "turn")
NO_LABEL = "(none)"


def _is_value(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isnan(x)


def metric_means(rows: Sequence[Mapping[str, Any]], names: Sequence[str], n_bootstrap: int,
                 seed: int) -> dict[str, dict[str, float]]:
    """{metric: {mean, low, high, n}} over the rows holding a value for it (metrics with no value left out)."""
    out = {}
    for name in names:
        values = [r[name] for r in rows if _is_value(r.get(name))]
        if values:
            out[name] = bootstrap_ci(values, n_resamples=n_bootstrap, seed=seed).to_dict()
    return out


def ranking(means: Mapping[str, Mapping[str, float]], rows: Sequence[Mapping[str, Any]], metrics: Sequence[str],
            n_bootstrap: int, seed: int) -> dict[str, Any]:
    """The two ranking figures over the conditioned ``metrics``, labelled."""
    conditioned = [m for m in CONDITIONED if m in metrics]
    have = all(m in means for m in conditioned) and conditioned
    per_task = [r["harmonic"] for r in rows if _is_value(r.get("harmonic"))]
    return {
        "metrics": conditioned,
        "harmonic_of_means": harmonic_mean([means[m]["mean"] for m in conditioned]) if have else None,
        "mean_of_per_task_harmonic": (bootstrap_ci(per_task, n_resamples=n_bootstrap, seed=seed).to_dict()
                                      if per_task else None),
    }


def _group_key(row: Mapping[str, Any], by: str) -> str:
    value = row.get(by)
    return NO_LABEL if value is None or value == "" else str(value)


def breakdown(rows: Sequence[Mapping[str, Any]], by: str, names: Sequence[str], metrics: Sequence[str],
              n_bootstrap: int, seed: int) -> dict[str, dict[str, Any]]:
    """Per-group means (with CIs), group size and the harmonic of the group's means, groups in sorted order."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(_group_key(row, by), []).append(row)

    def order(key: str) -> tuple[int, Any]:
        return (0, int(key)) if key.isdigit() else (1, key)

    out = {}
    for key in sorted(groups, key=order):
        members = groups[key]
        means = metric_means(members, names, n_bootstrap, seed)
        out[key] = {"n": len(members), "means": means,
                    "ranking": ranking(means, members, metrics, n_bootstrap, seed)}
    return out


def summarize(rows: Sequence[Mapping[str, Any]], *, metrics: Sequence[str], mode: str, n_bootstrap: int,
              seed: int) -> dict[str, Any]:
    """The summary of scored rows: overall and per answerability / domain / turn, plus counts."""
    included = [r for r in rows if not r["excluded"]]
    names = [m for m in CONDITIONED if m in metrics] + ["harmonic"] + [
        m for m in RAW if any(_is_value(r.get(m)) for r in included)]
    overall = metric_means(included, names, n_bootstrap, seed)
    judges = ("idk", "clarification", "rb_llm", "rl_f")
    excluded = [r for r in rows if r["excluded"]]
    counts = {
        "tasks": len(rows),
        "scored": len(included),
        "excluded": len(excluded),
        "excluded_task_ids": [r["task_id"] for r in excluded],
        "excluded_by_reason": {reason: sum(1 for r in excluded if r["excluded_reason"] == reason)
                               for reason in sorted({r["excluded_reason"] for r in excluded})},
        "call_failures": {j: sum(1 for r in rows if r["call_failures"].get(j)) for j in judges},
        "fallbacks": {j: sum(1 for r in rows if r["fallbacks"].get(j)) for j in judges},
        "tasks_with_fallback": sum(1 for r in rows if any(r["fallbacks"].values())),
        "undefined": {m: sum(1 for r in included if r.get(m) is None) for m in CONDITIONED if m in metrics},
        "clarification_asked": sum(1 for r in rows if r["fallbacks"].get("clarification") is not None),
    }
    return {
        "mode": mode,
        "metrics": list(metrics),
        "overall": overall,
        "ranking": ranking(overall, included, metrics, n_bootstrap, seed),
        "by": {by: breakdown(included, by, names, metrics, n_bootstrap, seed) for by in BREAKDOWNS},
        "counts": counts,
    }
