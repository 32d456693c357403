"""The board of a collection: every system of every entry as a row, computed from the per-query scores.

Definitions (``primary``: the collection's primary measure; every value unrounded):

* **row**: one system of one entry, named ``ENTRY/SYSTEM``; rows are ordered by their primary score, best first.
* **caveats**: per entry, the cautions its results folder states (``convrag.evaluate.caveats``: saturated
  measures, small groups, placeholder models, ...).
* **main table**: per row and measure, the benchmark's own aggregate with a percentile bootstrap CI: for the
  ``domain-macro`` rule (RECOR) the mean of the domain means with a bootstrap stratified by domain
  (:func:`convrag.benchmarks.recor.tables.macro_bootstrap`); for ``mtrag-official`` (MTRAG, MTRAG-UN) the
  official weighted "all" row, per-domain means rounded to 5 decimals weighted by the row's submitted tasks per
  domain, with a bootstrap stratified by domain (:func:`convrag.benchmarks.mtrag.official.official_bootstrap`);
  for ``mean`` the mean over scored queries (:func:`convrag.core.stats.bootstrap_ci`).
* **domain table** (``mtrag-official`` only): per row, domain and measure, the mean over the domain's scored
  tasks with a percentile bootstrap CI (the official per-domain row, unrounded, where the run has every judged
  task), and the domain's submitted tasks (``count``).
* **paired tests**: for every two rows and every measure, the paired randomisation and t-tests of the per-query
  differences (:func:`convrag.core.stats.paired_test`: ``diff`` is mean(A) - mean(B) over the queries both
  scored, a plain mean over queries even where the main table is a domain macro).
* **turn positions**: per row, the primary measure per turn position T1 .. T4, T5+ (macro over the domains with
  turns there for ``domain-macro``, else the mean over the position's queries), and how many queries each holds.
* **domains**: per row, the mean of the primary measure over each domain's queries (where entries record domains).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from convrag.benchmarks.mtrag.official import official_bootstrap
from convrag.benchmarks.recor.tables import POSITIONS, domain_means, macro_bootstrap, macro_mean, position_label
from convrag.core.errors import ConvragError
from convrag.core.stats import bootstrap_ci, paired_test


def build_board(
    header: dict[str, Any],
    entries: list[dict[str, Any]],
    n_bootstrap: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """The board of a collection (its ``collection.json`` ``header`` and :func:`read_entries`), JSON-ready."""
    if not entries:
        raise ConvragError("the collection has no entry yet: add one with `convrag leaderboard add`")
    measures, primary, rule = header["measures"], header["primary"], header["aggregation"]
    macro = rule == "domain-macro"
    turns: dict[str, dict[str, Any]] = {}
    for entry in entries:
        turns.update(entry.get("turns") or {})
    scores, rows, domain_rows = {}, [], []
    for entry in entries:
        for system, record in entry["systems"].items():
            row_id = f"{entry['name']}/{system}"
            per_query = entry["scores"][system]
            scores[row_id] = per_query
            by_domain = {m: _by_domain(per_query, turns, m) for m in measures} if rule != "mean" else {}
            counts = record.get("counts")
            table = {m: _interval(per_query, by_domain.get(m, {}), counts, m, rule, n_bootstrap, seed, confidence)
                     for m in measures}  # fmt: skip
            if counts is not None:
                domain_rows += _domain_rows(row_id, by_domain, counts, n_bootstrap, seed, confidence)
            rows.append({"id": row_id, "entry": entry["name"], "system": system, "retriever": record["retriever"],
                         "strategy": record.get("strategy"), "model": record.get("model"),
                         "run": f"entries/{entry['name']}/{record['run']}", "n": len(per_query),
                         "scores": table})  # fmt: skip
    rows.sort(key=lambda r: (-_key(r["scores"][primary]["mean"]), r["id"]))
    order = [r["id"] for r in rows]
    return {"identity": header["identity"], "aggregation": header["aggregation"], "measures": measures,
            "primary": primary, "confidence": confidence, "n_bootstrap": n_bootstrap, "seed": seed,
            "entries": [e["name"] for e in entries], "rows": rows,
            "caveats": {e["name"]: [c.get("text", str(c)) for c in e.get("caveats") or []] for e in entries},
            "paired": paired_tests(scores, order, measures, seed),
            "turn_positions": turn_positions(scores, order, turns, primary, macro),
            "domains": domain_view(scores, order, turns, primary),
            "domain_table": sorted(domain_rows, key=lambda r: (order.index(r["row"]), r["domain"]))}  # fmt: skip


def _key(value: float | None) -> float:
    return -np.inf if value is None or np.isnan(value) else value


def _by_domain(
    per_query: dict[str, dict[str, float]], turns: dict[str, dict[str, Any]], measure: str
) -> dict[str, list[float]]:
    """Domain -> the ``measure`` of its queries, in query id order."""
    by_domain: dict[str, list[float]] = {}
    for qid in sorted(per_query):
        by_domain.setdefault(str(turns[qid]["domain"]), []).append(per_query[qid][measure])
    return by_domain


def _interval(
    per_query: dict[str, dict[str, float]],
    by_domain: dict[str, list[float]],
    counts: dict[str, int] | None,
    measure: str,
    rule: str,
    n_bootstrap: int,
    seed: int,
    confidence: float,
) -> dict[str, float]:
    """The main table's cell of one row and measure (see the module docstring); ``by_domain``: :func:`_by_domain`,
    ``counts``: the row's submitted tasks per domain (``mtrag-official``)."""
    if rule == "domain-macro":
        return macro_bootstrap(by_domain, n_bootstrap, seed, confidence).to_dict()
    if rule == "mtrag-official":
        return official_bootstrap(by_domain, counts or {}, n_bootstrap, seed, confidence).to_dict()
    return bootstrap_ci([row[measure] for row in per_query.values()], confidence, n_bootstrap, seed).to_dict()


def _domain_rows(
    row: str,
    by_domain: dict[str, dict[str, list[float]]],
    counts: dict[str, int],
    n_bootstrap: int,
    seed: int,
    confidence: float,
) -> list[dict[str, Any]]:
    """The domain table's rows of board row ``row`` (``by_domain``: measure -> :func:`_by_domain`)."""
    domains = sorted({d for values in by_domain.values() for d in values})
    return [{"row": row, "domain": d, "count": counts.get(d, 0), "n": len(next(iter(by_domain.values()))[d]),
             "scores": {m: bootstrap_ci(v[d], confidence, n_bootstrap, seed).to_dict() for m, v in by_domain.items()}}
            for d in domains]  # fmt: skip


def paired_tests(
    scores: dict[str, dict[str, dict[str, float]]], order: list[str], measures: list[str], seed: int = 0
) -> list[dict[str, Any]]:
    """Paired tests of every two rows (A above B in ``order``) on every measure, over the queries both scored."""
    out = []
    for a, b in itertools.combinations(order, 2):
        qids = sorted(set(scores[a]) & set(scores[b]))
        if not qids:
            continue
        for m in measures:
            result = paired_test([scores[a][q][m] for q in qids], [scores[b][q][m] for q in qids], seed=seed)
            out.append({"a": a, "b": b, "measure": m, **result.to_dict()})
    return out


def turn_positions(
    scores: dict[str, dict[str, dict[str, float]]],
    order: list[str],
    turns: dict[str, dict[str, Any]],
    measure: str,
    macro: bool,
) -> dict[str, Any]:
    """Row -> position -> the ``measure`` there, and position -> queries (see the module docstring); empty when
    the entries record no turn positions."""
    if not turns or any(turns.get(q, {}).get("turn") is None for q in scores[order[0]]):
        return {}
    position = {q: position_label(int(t["turn"])) for q, t in turns.items() if t.get("turn") is not None}
    table: dict[str, dict[str, float]] = {}
    for row in order:
        table[row] = {}
        for pos in POSITIONS:
            sub = {q: s for q, s in scores[row].items() if position[q] == pos}
            if sub:
                table[row][pos] = (macro_mean(domain_means(sub, turns, [measure]), [measure])[measure] if macro
                                   else float(np.mean([s[measure] for s in sub.values()])))  # fmt: skip
    n = {pos: sum(1 for q in scores[order[0]] if position[q] == pos) for pos in POSITIONS}
    return {"measure": measure, "n": {p: c for p, c in n.items() if c}, "rows": table}


def domain_view(
    scores: dict[str, dict[str, dict[str, float]]], order: list[str], turns: dict[str, dict[str, Any]], measure: str
) -> dict[str, Any]:
    """Row -> domain -> mean of ``measure`` over the domain's queries; empty without domains."""
    if not turns or any(turns.get(q, {}).get("domain") is None for q in scores[order[0]]):
        return {}
    rows = {row: {d: v[measure] for d, v in domain_means(scores[row], turns, [measure]).items()} for row in order}
    n: dict[str, int] = {}
    for q in scores[order[0]]:
        n[str(turns[q]["domain"])] = n.get(str(turns[q]["domain"]), 0) + 1
    return {"measure": measure, "n": dict(sorted(n.items())), "rows": rows}
