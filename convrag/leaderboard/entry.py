"""A ``convrag evaluate`` results folder read as a leaderboard entry, and its re-scoring check.

Definitions:

* **system**: one ranked list per query that the folder scored, named as ``convrag evaluate`` names it
  (``retriever|strategy``, or ``retriever`` for a benchmark with one strategy); its **run file** is
  ``runs/<name with | as __>.trec`` and ``runs/qrels.trec`` holds the qrels every run was scored against.
* **per-query scores**: ``system -> query id -> measure -> value`` for every scored query (queries with no
  relevant document are left out by the evaluation, as by trec_eval).
* **benchmark identity**: what makes two results comparable: the benchmark's name, its Hub repo id and revision
  (commit sha; none for a local folder), split, corpus kind, search space (whole corpus or each turn's pool) and
  the sha256 of the qrels file. Entries of a collection share one identity.
* **re-scores**: every per-query score in ``results.json`` equals what the retrieval metric
  (:func:`convrag.metrics.retrieval.compute.score_run`) computes from the system's run file and the qrels file
  and every system's summary means equal the means of those per-query scores (:mod:`convrag.leaderboard.rescore`).
  MTRAG / MTRAG-UN results (``mtrag-official``) are re-scored by Subtask A's scoring, official rows included
  (:mod:`convrag.leaderboard.mtrag`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from convrag.benchmarks.recor.tables import domain_means, macro_mean
from convrag.core.errors import ConvragError
from convrag.leaderboard.mtrag import PRIMARY as MTRAG_PRIMARY
from convrag.leaderboard.mtrag import check_mtrag, mtrag_systems
from convrag.leaderboard.rescore import check_per_query, same_summary
from convrag.metrics.retrieval.compute import score_run
from convrag.metrics.retrieval.trec import read_qrels, read_run, safe_token

#: aggregation rules of evaluation profiles whose results folders can be entries
SUPPORTED = ("mean", "domain-macro", "mtrag-official")
#: the fields of a benchmark identity, in the order they are compared
IDENTITY_FIELDS = ("benchmark", "repo_id", "revision", "split", "corpus", "search", "qrels_sha256")
QRELS = "runs/qrels.trec"


@dataclass(frozen=True)
class Entry:
    """A results folder read for a collection.

    ``systems``: system -> {retriever, strategy, run (path inside the folder), model (the retriever's record)};
    ``scores``: the per-query scores; ``turns``: query id -> {domain, turn} where the results record them.
    """

    folder: Path
    results: dict[str, Any]
    identity: dict[str, Any]
    aggregation: str
    measures: list[str]
    primary: str
    systems: dict[str, dict[str, Any]]
    scores: dict[str, dict[str, dict[str, float]]]
    turns: dict[str, dict[str, Any]]


def read_entry(folder: str | Path) -> Entry:
    """Read the results folder ``folder`` (``results.json``, ``runs/``); one-line ``ConvragError`` when it is not a
    ``convrag evaluate`` results folder, or one whose aggregation a board cannot show yet."""
    path = Path(folder)
    try:
        results = json.loads((path / "results.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConvragError(f"{path}: no results.json (give a folder that `convrag evaluate` wrote)") from None
    except ValueError as err:
        raise ConvragError(f"{path / 'results.json'}: not JSON ({err})") from None
    if not isinstance(results, dict) or "benchmark" not in results or "profile" not in results:
        raise ConvragError(f"{path / 'results.json'}: not the results of `convrag evaluate`")
    aggregation = str(results["profile"].get("aggregation"))
    if aggregation not in SUPPORTED:
        raise ConvragError(f"{path}: results aggregated as {aggregation!r} cannot enter a leaderboard yet "
                           f"(supported: {', '.join(SUPPORTED)})")  # fmt: skip
    if not (path / QRELS).is_file():
        raise ConvragError(f"{path}: no {QRELS} (the qrels its runs were scored against)")
    if aggregation == "mtrag-official":
        scores, systems, turns = mtrag_systems(results, path)
    else:
        scores, systems = _systems(results, aggregation)
        turns = {q: {k: t.get(k) for k in ("domain", "turn")} for q, t in (results.get("turns") or {}).items()}
    files = set(results.get("files") or [])
    for name, record in systems.items():
        record["run"] = f"runs/{safe_token(name.replace('|', '__'))}.trec"
        if record["run"] not in files or not (path / record["run"]).is_file():
            raise ConvragError(f"{path}: system {name!r} has no run file {record['run']}")
    measures = list(results.get("measures") or results["profile"].get("measures") or [])
    primary = str(results.get("primary") or (MTRAG_PRIMARY if MTRAG_PRIMARY in measures else measures[0]))
    return Entry(folder=path, results=results, identity=identity(results, path), aggregation=aggregation,
                 measures=measures, primary=primary, systems=systems, scores=scores, turns=turns)  # fmt: skip


def _systems(results: dict[str, Any], aggregation: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Per-query scores and system records of ``results`` (see :class:`Entry`), keyed by system name."""
    models = results.get("retriever_configs") or {}
    scores: dict[str, dict[str, dict[str, float]]] = {}
    systems: dict[str, dict[str, Any]] = {}
    if aggregation == "domain-macro":
        for retriever, by_strategy in (results.get("per_turn") or {}).items():
            for strategy, per_query in by_strategy.items():
                name = f"{retriever}|{strategy}"
                scores[name] = per_query
                systems[name] = {"retriever": retriever, "strategy": strategy, "model": models.get(retriever)}
    else:
        for name, per_query in (results.get("per_query") or {}).items():
            record = (results.get("systems") or {}).get(name, {})
            retriever = record.get("retriever", name)
            scores[name] = per_query
            systems[name] = {"retriever": retriever, "strategy": record.get("strategy"), "model": models.get(retriever)}
    if not scores:
        raise ConvragError("results.json holds no per-query scores")
    return scores, systems


def identity(results: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The benchmark identity of a results folder (see the module docstring)."""
    source = results.get("source") or {}
    digest = hashlib.sha256((folder / QRELS).read_bytes()).hexdigest()
    return {"benchmark": results["benchmark"], "repo_id": source.get("repo_id"), "revision": source.get("revision"),
            "split": results.get("split"), "corpus": results.get("corpus_kind"), "search": results.get("search"),
            "qrels_sha256": digest}  # fmt: skip


def check_identity(entry: Entry, expected: dict[str, Any]) -> None:
    """Refuse ``entry`` (one line) when its benchmark identity differs from ``expected``, the collection's."""
    for name in IDENTITY_FIELDS:
        if entry.identity.get(name) != expected.get(name):
            what = "qrels (another revision, split or corpus)" if name == "qrels_sha256" else name
            raise ConvragError(
                f"{entry.folder}: its benchmark {what} is {entry.identity.get(name)!r}, the "
                f"collection's is {expected.get(name)!r}: results of another revision, split or corpus "
                "of the benchmark are not mixed into this collection (start a collection of its own)"
            )


def check_rescores(entry: Entry) -> None:
    """Refuse ``entry`` (one line) unless its numbers re-score from its run files (see the module docstring)."""
    if entry.aggregation == "mtrag-official":
        check_mtrag(entry.folder, entry.results, entry.measures, entry.systems, entry.turns)
        return
    qrels = read_qrels(entry.folder / QRELS)
    for name, per_query in entry.scores.items():
        run_file = entry.systems[name]["run"]
        rescored = score_run(read_run(entry.folder / run_file), {q: qrels.get(q, {}) for q in per_query},
                             measures=entry.measures).per_query  # fmt: skip
        check_per_query(entry.folder, name, run_file, per_query, rescored, entry.measures)
        for m, (stated, mean) in _summaries(entry, name).items():
            if not same_summary(stated, mean):
                raise ConvragError(f"{entry.folder}: {name} {m} is {stated} in results.json but its per-query scores "
                                   f"average to {mean}: a results folder edited by hand is not added")  # fmt: skip


def _summaries(entry: Entry, name: str) -> dict[str, tuple[float, float]]:
    """Measure -> (the summary mean results.json states for system ``name``, the mean of its per-query scores):
    the domain macro for ``domain-macro``, the mean over queries for ``mean``."""
    per_query = entry.scores[name]
    out = {}
    for m in entry.measures:
        if entry.aggregation == "domain-macro":
            system = entry.systems[name]
            stated = entry.results["systems"][system["retriever"]][system["strategy"]]["macro"][m]
            means = domain_means(per_query, entry.turns, [m])
            out[m] = (float(stated), macro_mean(means, [m])[m])
        else:
            stated = entry.results["systems"][name]["overall"][m]["mean"]
            out[m] = (float(stated), float(np.mean([row[m] for row in per_query.values()])))
    return out
