"""MTRAG / MTRAG-UN results folders (aggregation ``mtrag-official``) read and re-scored as leaderboard entries.

Definitions:

* **system**: one item of ``results.json``'s ``results``: a retriever and a view, named ``retriever|view``, or an
  official submission (``convrag evaluate --submission NAME=FILE``), named ``NAME``. Its **run file** is
  ``runs/<name with | as __>.trec`` and its **submission file** ``runs/<same>.jsonl``, which ``convrag evaluate``
  writes for both; the submission file gives each task's collection (domain). A ``--run`` file is not kept by
  ``convrag evaluate``, so results with one are refused.
* **counts**: per system, domain -> tasks submitted in that collection (lines of its submission file, including
  tasks without qrels): the official weights (:mod:`convrag.benchmarks.mtrag.official`).
* **turns**: task id -> {domain, turn}; the turn is the number after the task id's ``<::>``.
* **re-scores**: Subtask A's scoring (:func:`convrag.benchmarks.mtrag.scoring.score_subtask_a`) of the run file,
  split by domain as the submission file files its tasks, against ``runs/qrels.trec`` split the same way, gives
  every per-query score of ``results.json`` and its official per-domain and "all" rows
  (:mod:`convrag.leaderboard.rescore`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from convrag.benchmarks.mtrag.scoring import read_submission, score_subtask_a, split_measures
from convrag.core.errors import ConvragError
from convrag.leaderboard.rescore import check_per_query, same_summary
from convrag.metrics.retrieval.trec import read_qrels, read_run, safe_token

#: the measure a board of MTRAG results is ranked by, when the results have it
PRIMARY = "nDCG@5"
Scores = dict[str, dict[str, dict[str, float]]]


def _turn(task_id: str) -> int | None:
    tail = task_id.rsplit("<::>", 1)[-1]
    return int(tail) if "<::>" in task_id and tail.isdigit() else None


def system_name(result: dict[str, Any]) -> str:
    """The name ``convrag evaluate`` gives the system of ``result`` (an item of ``results.json``'s ``results``)."""
    return result["system"] if result["view"] in ("run", "submission") else f"{result['system']}|{result['view']}"


def mtrag_systems(results: dict[str, Any], folder: Path) -> tuple[Scores, dict[str, dict[str, Any]], dict[str, Any]]:
    """Per-query scores, system records (retriever, strategy: the view, model, run, submission, counts) and turns
    of the MTRAG results ``results`` of ``folder`` (see the module docstring)."""
    models = results.get("retriever_configs") or {}
    scores: Scores = {}
    systems: dict[str, dict[str, Any]] = {}
    turns: dict[str, dict[str, Any]] = {}
    for result in results.get("results") or []:
        name = system_name(result)
        stem = f"runs/{safe_token(name.replace('|', '__'))}"
        if result["view"] == "run":
            raise ConvragError(f"{folder}: system {name!r} is a --run file, which the results folder does not keep: "
                               "give it to `convrag evaluate` as an official --submission instead")  # fmt: skip
        if not (folder / f"{stem}.jsonl").is_file():
            raise ConvragError(f"{folder}: system {name!r} has no submission file {stem}.jsonl")
        runs = read_submission(folder / f"{stem}.jsonl").runs
        for domain, run in runs.items():
            turns.update({q: {"domain": domain, "turn": _turn(q)} for q in run})
        scores[name] = result["per_query"]
        systems[name] = {"retriever": result["system"], "strategy": result["view"],
                         "model": models.get(result["system"]), "submission": f"{stem}.jsonl",
                         "counts": {d: len(run) for d, run in runs.items()}}  # fmt: skip
    return scores, systems, turns


def check_mtrag(folder: Path, results: dict[str, Any], measures: list[str], systems: dict[str, dict[str, Any]],
                turns: dict[str, Any]) -> None:  # fmt: skip
    """Refuse (one line) MTRAG results of ``folder`` that do not re-score (see the module docstring)."""
    qrels: dict[str, dict[str, dict[str, int]]] = {}
    for qid, rels in read_qrels(folder / "runs" / "qrels.trec").items():
        if qid in turns:
            qrels.setdefault(turns[qid]["domain"], {})[qid] = rels
    ks, extra = split_measures(measures)
    for result in results["results"]:
        name = system_name(result)
        record = systems[name]
        run = read_run(folder / record["run"])
        filed = read_submission(folder / record["submission"]).runs
        runs = {d: {q: run.get(q, {}) for q in tasks} for d, tasks in filed.items()}
        again = score_subtask_a(runs, qrels, None, ks, extra)
        check_per_query(folder, name, record["run"], result["per_query"], again.per_query, measures)
        stated = {"all": result["official_all"], **{d: r["official"] for d, r in result["domains"].items()}}
        computed = {"all": again.official_all, **{d: r["official"] for d, r in again.domains.items()}}
        for row, values in stated.items():
            for m, value in values.items():
                if not same_summary(value, computed.get(row, {}).get(m, math.nan)):
                    raise ConvragError(f"{folder}: {name} official {m} ({row}) is {value} in results.json but "
                                       f"{computed.get(row, {}).get(m)} re-scored from {record['run']}: a results "
                                       "folder edited by hand is not added")  # fmt: skip
