"""Aggregation of judge verdicts, as MTR-Eval and RECOR report them (pure functions, no LLM).

* Scores (1-5 ratings; Comp. 1/0): for each (judge, dimension) the mean over the verdicts that carry a score;
  verdicts without one (unparseable replies, failed calls) are EXCLUDED from the mean and counted. For each
  dimension the **unweighted mean over judges** of those per-judge means (MTR-Eval's "averaged across all
  judges": a judge with more readable verdicts does not weigh more); judges with no readable verdict are left
  out of it and named.
* Labels (RECOR's dependency type and question pattern): counts and shares over the parsed labels, and the
  normalised entropy H / log(K), K = the size of the label set (not the number of labels seen): 0 when every
  turn has one label, 1 when the K labels are equally frequent. Computed per judge.
* Judges are grouped by name (:func:`judge_names`): two ``--judge`` specs that differ only in their options
  after ``;`` are two judges, never merged.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from convrag.judging.recor import normalized_entropy

#: option names whose values are never written into a judge's name (they may hold credentials)
_SECRET_OPTION = re.compile(r"key|token|secret|password|auth", re.I)


def judge_names(specs: Sequence[str]) -> list[str]:
    """The name each judge spec carries in verdicts and aggregates: the spec before ``;`` when no other spec
    shares it; else the spec with its options (values of key / token / secret / password / auth options shown as
    ``***``), and when even that is shared (specs that differ only in such a value), ``#n`` after it (n = the
    spec's 1-based position among those sharing it). Distinct specs therefore always get distinct names."""
    bases = [spec.split(";")[0].strip() for spec in specs]
    named = []
    for spec, base in zip(specs, bases, strict=True):
        if bases.count(base) == 1:
            named.append(base)
            continue
        options = [o.strip() for o in spec.split(";")[1:] if o.strip()]
        shown = [f"{o.partition('=')[0].strip()}=***" if _SECRET_OPTION.search(o.partition("=")[0]) else o
                 for o in options]
        named.append(";".join([base, *shown]))
    seen: Counter[str] = Counter()
    out = []
    for name in named:
        seen[name] += 1
        out.append(f"{name}#{seen[name]}" if named.count(name) > 1 else name)
    return out


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def aggregate_scores(judges: Sequence[str], dimensions: Sequence[str], scores: Sequence[float | None],
                     errors: Sequence[str | None] | None = None) -> dict[str, Any]:
    """Per-judge means and the unweighted mean over judges, per dimension (see the module docstring)."""
    per_judge: dict[str, dict[str, dict[str, Any]]] = {}
    failures: dict[tuple[str, str], Counter[str]] = {}
    values: dict[tuple[str, str], list[float]] = {}
    for i, (judge, dim, score) in enumerate(zip(judges, dimensions, scores, strict=True)):
        if score is None:
            reason = (errors[i] if errors is not None else None) or "no score"
            failures.setdefault((judge, dim), Counter())[reason.split(":")[0]] += 1
            values.setdefault((judge, dim), [])
        else:
            values.setdefault((judge, dim), []).append(float(score))
    for (judge, dim), vals in values.items():
        fails = failures.get((judge, dim), Counter())
        per_judge.setdefault(judge, {})[dim] = {"mean": _mean(vals), "n": len(vals),
                                                "failed": sum(fails.values()), "failures": dict(fails)}
    overall: dict[str, dict[str, Any]] = {}
    for dim in dict.fromkeys(dimensions):
        means = {j: d[dim]["mean"] for j, d in per_judge.items() if dim in d}
        usable = {j: m for j, m in means.items() if m is not None}
        overall[dim] = {"mean": _mean(list(usable.values())), "judges": len(usable),
                        "judges_without_scores": sorted(set(means) - set(usable)),
                        "n": sum(per_judge[j][dim]["n"] for j in means),
                        "failed": sum(per_judge[j][dim]["failed"] for j in means)}
    return {"per_judge": per_judge, "overall": overall}


def aggregate_labels(judges: Sequence[str], dimensions: Sequence[str], labels: Sequence[str | None],
                     label_sets: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """Per (dimension, judge): label counts (every label of the set, 0 included), shares over parsed labels,
    unparsed verdicts, normalised entropy."""
    out: dict[str, dict[str, Any]] = {}
    for judge, dim, label in zip(judges, dimensions, labels, strict=True):
        if dim not in label_sets:
            continue
        slot = out.setdefault(dim, {}).setdefault(judge, {"counts": dict.fromkeys(label_sets[dim], 0),
                                                          "unparsed": 0})
        if label is None:
            slot["unparsed"] += 1
        elif label not in slot["counts"]:
            raise ValueError(f"label {label!r} is not in the {dim} label set {list(label_sets[dim])}")
        else:
            slot["counts"][label] += 1
    for dim, by_judge in out.items():
        for slot in by_judge.values():
            total = sum(slot["counts"].values())
            slot["shares"] = {k: v / total for k, v in slot["counts"].items()} if total else {}
            slot["normalized_entropy"] = normalized_entropy(slot["counts"], len(label_sets[dim]))
    return out
