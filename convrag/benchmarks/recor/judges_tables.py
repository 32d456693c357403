"""RECOR's quality judges in aggregate: label distributions, the profile's entropy in an audit summary, and the
per-domain table in the shape of RECOR's Table 31, beside RECOR's reported figures (GPT-4o judge).

Reported figures: Table 27 means (:data:`RECOR_LLM_MEANS`; humans on 200 conversations
:data:`RECOR_HUMAN_MEANS`), Table 29 dependency counts over 2,971 turns and entropy 0.77, Table 30 pattern counts
and entropy 0.91, Table 31 per domain (naturalness, turn coherence, question quality, groundedness, dependency
entropy). Table 31's per-domain entropies divide by the log of the labels observed in the domain (RECOR's code),
which is what the ``authors`` profile reports (:mod:`convrag.judging.recor_profile`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from convrag.judging.recor import DEPENDENCY, DIMENSIONS
from convrag.judging.recor_profile import DEFAULT_PROFILE, ENTROPY_DENOMINATOR, check_profile, profile_entropy
from convrag.judging.verdict import Verdict

RECOR_LLM_MEANS = {"naturalness": 4.34, "turn_coherence": 4.97, "question_quality": 4.42, "groundedness": 4.73}
RECOR_HUMAN_MEANS = {"naturalness": 4.20, "turn_coherence": 4.62, "question_quality": 4.21, "groundedness": 4.45}
RECOR_DEPENDENCY_COUNTS = {"continuation": 1028, "coreference": 859, "self_contained": 707, "topic_shift": 326,
                           "substitution": 41, "ellipsis": 10}
RECOR_DEPENDENCY_ENTROPY = 0.77
RECOR_PATTERN_COUNTS = {"how": 571, "effect": 486, "confirm": 465, "why": 432, "compare": 411, "what_if": 329,
                        "what": 206, "example": 50, "more_detail": 21}
RECOR_PATTERN_ENTROPY = 0.91
#: domain -> (naturalness, turn coherence, question quality, groundedness, dependency entropy)
RECOR_DOMAINS = {
    "biology": (4.38, 4.98, 4.47, 4.74, 0.93), "drones": (4.59, 4.97, 4.51, 4.76, 0.96),
    "earth_science": (4.33, 5.00, 4.54, 4.67, 0.77), "economics": (4.12, 4.97, 4.41, 4.62, 0.86),
    "hardware": (4.57, 4.80, 4.44, 4.74, 0.87), "law": (4.34, 5.00, 4.47, 4.74, 0.74),
    "medicalsciences": (4.42, 4.98, 4.36, 4.82, 0.81), "politics": (4.39, 4.95, 4.30, 4.81, 0.88),
    "psychology": (4.45, 5.00, 4.16, 4.69, 0.76), "robotics": (4.07, 4.97, 4.49, 4.68, 0.80),
    "sustainable_living": (4.32, 5.00, 4.46, 4.83, 0.86),
}


def label_distribution(verdicts: Iterable[Verdict], labels: Sequence[str],
                       profile: str = DEFAULT_PROFILE) -> dict[str, Any]:
    """Label counts over the parsed verdicts (every label listed, zeros included), their ``shares`` of the parsed
    verdicts (empty when none parsed), ``parsed``, ``unparseable`` (verdicts with an error, left out of counts and
    shares) with ``errors`` by kind ("unparseable" / "call failed"), and the normalised ``entropy`` of the parsed
    labels as ``profile`` divides it (``authors``: H / log of the labels observed; ``convrag``: H / log
    ``len(labels)``; :func:`~convrag.judging.recor_profile.profile_entropy`). A parsed label outside
    ``labels`` is an error."""
    counts = dict.fromkeys(labels, 0)
    errors: Counter[str] = Counter()
    for v in verdicts:
        if v.error is not None or v.label is None:
            errors[(v.error or "unparseable: no label").split(":", 1)[0]] += 1
        elif v.label in counts:
            counts[v.label] += 1
        else:
            raise ValueError(f"verdict {v.item_id}: label {v.label!r} is not in the label set {list(labels)}")
    parsed = sum(counts.values())
    return {"counts": counts, "shares": {lb: n / parsed for lb, n in counts.items()} if parsed else {},
            "parsed": parsed, "unparseable": sum(errors.values()), "errors": dict(errors),
            "entropy": profile_entropy(counts, len(labels), profile)}


def apply_profile(summary: dict[str, Any], profile: str) -> None:
    """Record ``profile`` in an audit summary and give every label slot (whole benchmark and per domain, per judge)
    the ``normalized_entropy`` that profile reports (its ``counts`` list the whole label set, so k is their number),
    with ``entropy_denominator`` naming the divisor."""
    check_profile(profile)
    summary["profile"] = profile
    summary["entropy_denominator"] = ENTROPY_DENOMINATOR[profile]
    for bench in summary["benchmarks"].values():
        for agg in (bench["all"], *bench["domains"].values()):
            for by_judge in agg.get("labels", {}).values():
                for slot in by_judge.values():
                    slot["normalized_entropy"] = profile_entropy(slot["counts"], len(slot["counts"]), profile)
                    slot["entropy_denominator"] = ENTROPY_DENOMINATOR[profile]


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def domain_table(summary: Mapping[str, Any]) -> str:
    """Markdown in the shape of RECOR's Table 31: per (benchmark, domain) the four conversation scores (mean over
    judges) and the dependency-type entropy (mean over judges of each judge's normalised entropy, as the summary's
    profile divides it), with RECOR's reported row where the domain is one of RECOR's; empty when no domain has a
    RECOR judge verdict."""
    rows = []
    for name, bench in summary["benchmarks"].items():
        for domain, agg in bench["domains"].items():
            scores = [agg["overall"].get(d, {}).get("mean") for d in DIMENSIONS]
            by_judge = agg.get("labels", {}).get(DEPENDENCY, {})
            entropy = _mean(s["normalized_entropy"] for s in by_judge.values())
            if all(v is None for v in scores) and not by_judge:
                continue
            paper = RECOR_DOMAINS.get(domain)
            rows.append(f"| {name} / {domain} | " + " | ".join(map(_cell, [*scores, entropy])) + " | "
                        + (" / ".join(f"{v:.2f}" for v in paper) if paper else "-") + " |")
    if not rows:
        return ""
    divisor = summary.get("entropy_denominator", ENTROPY_DENOMINATOR[DEFAULT_PROFILE])
    return "\n".join(["", "## RECOR Table 31 shape: per domain (scores 1-5 and dependency-type entropy, mean over "
                      f"judges; entropy H / {divisor})", "",
                      "| Domain | Natural. | Coherence | Q. quality | Grounded. | Dep. entropy | "
                      "RECOR reported (Nat. / Coh. / QQ / Grd. / entropy) |", "|---" * 7 + "|", *rows]) + "\n"
