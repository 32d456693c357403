"""MTRAGEval Subtask A (retrieval) scoring, the official submission format and its checks.

Scoring follows the official script ``scripts/evaluation/run_retrieval_eval.py`` of the IBM mt-rag-benchmark
repository: per collection (domain), per-query nDCG@k (``ndcg_cut``) and Recall@k (``recall``) as trec_eval /
pytrec_eval compute them (``convrag.metrics.retrieval.compute.score_run``: linear gain, ranking by score descending
then document id descending, recall over all relevant passages), averaged over the run's tasks that have qrels
(ANSWERABLE and PARTIAL; run tasks without qrels add nothing). The collection's score is that mean **rounded to 5
decimals**, its ``count`` the collection's run lines (tasks submitted, *including* those without qrels); the "all"
row is ``sum(score_c * count_c) / sum(count_c)``, a mean weighted by submitted tasks.

Our own rows, labelled as such: per domain the unrounded mean over every judged task (a judged task missing from the
run scores 0), the ``macro`` mean of the domain means, the ``micro`` mean over all judged tasks (with bootstrap CIs);
breakdowns by answerability, multi-turn type and standalone label (``(unlabelled)`` where a task has none).

Extra measures: any other measure the retrieval metric computes (``RR@10``, ``AP@10``, ``P@5``, ``Success@k``,
``R_cap@k``, ...) is scored per task by the same ``score_run`` and appears in our rows only, never in the official
ones (:func:`split_measures`); the official values are the same, bit for bit, whatever extras are asked beside them.

Submission format, one JSON object per line: ``task_id`` (string), ``Collection`` (string), ``contexts`` (a list of
at most 10 objects with a string ``document_id`` and a numeric ``score``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from convrag.benchmarks.mtrag.official import OFFICIAL_DIGITS, official_weighted
from convrag.benchmarks.mtrag.tables import render_tables as render_tables  # re-exported: the report
from convrag.builders.mtrag_source import COLLECTIONS, DOMAINS, normalize_domain, normalize_task_id
from convrag.core.errors import DataError
from convrag.core.jsonl import read_jsonl
from convrag.metrics.retrieval.compute import parse_measure, score_run
from convrag.metrics.retrieval.trec import TrecFormatError, text_lines

K_VALUES = (1, 3, 5, 10)
MAX_CONTEXTS = 10
MAX_BYTES = 20 * 2**20  # IBM's format checker reports larger files
GROUP_FIELDS = ("answerability", "multi_turn", "standalone")
UNLABELLED = "(unlabelled)"
#: the families of the official Subtask A measures (``nDCG@k``, ``Recall@k``; ir_measures' ``R@k`` is ``Recall@k``)
OFFICIAL_FAMILIES = ("nDCG", "Recall")
Run = dict[str, dict[str, float]]
Qrels = dict[str, dict[str, int]]


def measures(k_values: Iterable[int] = K_VALUES) -> list[str]:
    """Measure names in table order: ``nDCG@k`` then ``Recall@k``."""
    ks = list(k_values)
    return [f"nDCG@{k}" for k in ks] + [f"Recall@{k}" for k in ks]


def split_measures(names: Iterable[str]) -> tuple[tuple[int, ...], list[str]]:
    """The cut-offs of the official measures among ``names`` (``nDCG@k`` or ``Recall@k``, by any name the retrieval
    metric gives them; either one brings both into the official rows) and the extra measures, in the order given.
    A name the retrieval metric does not know raises its ``MeasureError``.

    >>> split_measures(["nDCG@5", "RR@10", "R@3", "P@5"])
    ((3, 5), ['RR@10', 'P@5'])
    """
    ks: set[int] = set()
    extra: list[str] = []
    for name in names:
        family, k = parse_measure(name)
        if family in OFFICIAL_FAMILIES and k is not None:
            ks.add(k)
        else:
            extra.append(name)
    return tuple(sorted(ks)), extra


def ranked(scores: Mapping[str, float]) -> list[str]:
    """Document ids by score descending, ties by document id descending (trec_eval's order)."""
    by_id = sorted(scores, reverse=True)
    return sorted(by_id, key=lambda d: -float(scores[d]))  # stable: ties keep the id-descending order


def judged(qrels: Qrels) -> list[str]:
    """Queries with at least one relevant (score > 0) passage: the scored set, sorted (so that bootstrap
    resamples, which depend on the order of the values, are the same in every process)."""
    return sorted(q for q, rels in qrels.items() if any(s > 0 for s in rels.values()))


@dataclass
class SubtaskAResult:
    """Scores of one run: per-query values, per-domain rows, the official "all" row and our aggregates.

    ``extra_measures``: measures beside the official ones; they are in ``per_query``, each domain's ``ours``,
    ``macro``, ``micro`` and ``groups``, never in the official rows (each domain's ``official``, ``official_all``)."""

    k_values: tuple[int, ...]
    per_query: dict[str, dict[str, float]]
    domains: dict[str, dict[str, Any]]
    official_all: dict[str, float]
    macro: dict[str, float]
    micro: dict[str, float]
    groups: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    unscored_tasks: int = 0
    notes: list[str] = field(default_factory=list)
    extra_measures: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        official = measures(self.k_values)
        return {
            "k_values": list(self.k_values), "measures": official + self.extra_measures,
            "official_measures": official, "extra_measures": list(self.extra_measures), "domains": self.domains,
            "official_all": self.official_all, "macro": self.macro, "micro": self.micro, "groups": self.groups,
            "unscored_tasks": self.unscored_tasks, "notes": self.notes, "per_query": self.per_query,
        }  # fmt: skip


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def score_subtask_a(
    runs: Mapping[str, Run],
    qrels: Mapping[str, Qrels],
    labels: Mapping[str, Mapping[str, str]] | None = None,
    k_values: Iterable[int] = K_VALUES,
    extra_measures: Iterable[str] = (),
) -> SubtaskAResult:
    """Score ``runs`` ({domain: run}) against ``qrels`` ({domain: qrels}) as the official script does.

    ``labels``: task id -> {"answerability": ..., "multi_turn": ..., "standalone": ...} for breakdowns.
    ``extra_measures``: other names the retrieval metric computes, scored into our rows only (``k_values`` may then
    be empty: no official row).
    """
    ks = tuple(k_values)
    official, extra = measures(ks), list(extra_measures)
    names = official + extra
    per_query: dict[str, dict[str, float]] = {}
    domains: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    unscored = 0
    for d in sorted(set(runs) | set(qrels), key=lambda x: (x not in DOMAINS, x)):
        run, rels = runs.get(d, {}), qrels.get(d, {})
        order = judged(rels)
        scored = set(order)
        if scored:
            per_query.update(score_run(run, {q: rels[q] for q in order}, measures=names).per_query)
        evaluated = [q for q in run if q in scored]  # what pytrec_eval returns: run tasks with qrels
        unscored += sum(1 for q in run if q not in scored)
        row: dict[str, Any] = {"count": len(run), "n_evaluated": len(evaluated), "n_judged": len(scored),
                               "n_missing": len(scored) - len(evaluated)}  # fmt: skip
        row["official"] = {m: round(_mean([per_query[q][m] for q in evaluated]), OFFICIAL_DIGITS) for m in official}
        row["ours"] = {m: _mean([per_query[q][m] for q in order]) for m in names}
        if not evaluated and run:
            notes.append(f"{d}: no run task has qrels; the official script would fail on this collection")
        domains[d] = row
    weighted = {d: r for d, r in domains.items() if r["count"] and r["n_evaluated"]}
    counts = {d: r["count"] for d, r in weighted.items()}
    official_all = {m: official_weighted({d: r["official"][m] for d, r in weighted.items()}, counts)
                    for m in official}  # fmt: skip
    with_judged = [r for r in domains.values() if r["n_judged"]]
    macro = {m: _mean([r["ours"][m] for r in with_judged]) for m in names}
    micro = {m: _mean([s[m] for s in per_query.values()]) for m in names}
    groups: dict[str, dict[str, dict[str, Any]]] = {}
    if labels is not None:
        for name in GROUP_FIELDS:
            by_value: dict[str, list[str]] = {}
            for qid in per_query:
                value = str((labels.get(qid) or {}).get(name) or "") or UNLABELLED
                by_value.setdefault(value, []).append(qid)
            groups[name] = {v: {"n": len(q), **{m: _mean([per_query[x][m] for x in q]) for m in names}}
                            for v, q in sorted(by_value.items())}  # fmt: skip
    return SubtaskAResult(ks, per_query, domains, official_all, macro, micro, groups, unscored, notes, extra)


# ---------------------------------------------------------------- submission files


@dataclass
class FormatReport:
    """Result of the format checks: errors (the file cannot be scored as is) and warnings."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass
class Submission:
    """A parsed Subtask A submission: runs per domain, with canonical task ids and the line of each task."""

    runs: dict[str, Run]
    task_ids: list[str]
    report: FormatReport
    lines: dict[str, int] = field(default_factory=dict)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _read_lines(path: str, report: FormatReport) -> list[tuple[int, str]]:
    """The file's lines; a missing file or folder is a DataError, bytes that are not UTF-8 a format error."""
    try:
        return list(text_lines(path))
    except TrecFormatError as err:
        if err.line is None:
            raise DataError(str(err)) from None  # the message names the file
        report.errors.append(str(err))
        return []


def check_submission(
    path: str | Path, expected_task_ids: Iterable[str] | None = None, max_contexts: int = MAX_CONTEXTS,
    task_domains: Mapping[str, str] | None = None,
) -> tuple[FormatReport, Submission]:
    """Apply the official format checks to a submission file; returns the report and what could be read.

    Official checks (IBM's ``format_checker.py``): valid JSON per line; ``task_id`` and ``Collection``
    strings; ``contexts`` a list of at most ``max_contexts`` objects, each with a string ``document_id`` and a
    numeric ``score``; the task set (and count) equal to the input's. Ours, on top: UTF-8 text, known
    collection names, a task filed under its own collection (``task_domains``: canonical task id -> domain), no
    task submitted twice, no document twice in one task (the scorer would silently keep one), finite scores
    (booleans and NaN are not scores). Empty ``contexts`` is a warning, as in the official checker; so is what
    we read and IBM's scripts would not: ``::`` task ids, short collection names, a name not ending in
    ``.jsonl``, a file over 20 MB (see ``metrics/retrieval/README.md``).
    """
    path = str(path)
    report = FormatReport()
    runs: dict[str, Run] = {}
    ids: list[str] = []
    first_line: dict[str, int] = {}
    empty: list[int] = []
    colons: list[int] = []
    short: list[int] = []
    expected = [normalize_task_id(t) for t in expected_task_ids] if expected_task_ids is not None else None
    known = set(expected) if expected is not None else None
    lines = _read_lines(path, report)
    if report.errors:  # not UTF-8 text: nothing more to check
        return report, Submission(runs={}, task_ids=[], report=report)
    for number, line in lines:
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as err:
            report.errors.append(f"{where}: invalid JSON: {err.msg}")
            continue
        if not isinstance(item, dict):
            report.errors.append(f"{where}: expected a JSON object")
            continue
        bad = [f for f in ("task_id", "Collection", "contexts") if f not in item]
        report.errors += [f"{where}: missing required field '{f}'" for f in bad]
        for name, kind in (("task_id", str), ("Collection", str), ("contexts", list)):
            if name in item and not isinstance(item[name], kind):
                report.errors.append(f"{where}: '{name}' must be a {'string' if kind is str else 'list'}")
        if bad or not isinstance(item["task_id"], str) or not isinstance(item["Collection"], str):
            continue
        try:
            tid = normalize_task_id(item["task_id"])
            domain = normalize_domain(item["Collection"])
        except DataError as err:
            report.errors.append(f"{where}: {err}")
            continue
        if tid != item["task_id"].strip():
            colons.append(number)
        if item["Collection"] not in COLLECTIONS.values():
            short.append(number)
        if tid in first_line:
            report.errors.append(f"{where}: task {tid!r} already submitted on line {first_line[tid]}")
            continue
        if known is not None and tid not in known:
            report.errors.append(f"{where}: task_id {item['task_id']!r} is not in the input")
        if task_domains is not None and tid in task_domains and task_domains[tid] != domain:
            report.errors.append(f"{where}: task {tid!r} is filed under collection {item['Collection']!r}, but it "
                                 f"is a {task_domains[tid]!r} task ({COLLECTIONS.get(task_domains[tid])})")  # fmt: skip
        first_line[tid] = number
        ids.append(tid)
        contexts = item["contexts"] if isinstance(item["contexts"], list) else []
        if not contexts:
            empty.append(number)
        if len(contexts) > max_contexts:
            report.errors.append(f"{where}: too many contexts ({len(contexts)}); at most {max_contexts}")
        ranking: dict[str, float] = {}
        for i, ctx in enumerate(contexts):
            if not isinstance(ctx, dict):
                report.errors.append(f"{where}: contexts[{i}] must be an object")
                continue
            doc, score = ctx.get("document_id"), ctx.get("score")
            if not isinstance(doc, str):
                report.errors.append(f"{where}: contexts[{i}] " + ("missing 'document_id'" if doc is None
                                     else "document_id must be a string"))  # fmt: skip
            if not _is_number(score):
                report.errors.append(f"{where}: contexts[{i}] " + ("missing 'score'" if score is None
                                     else f"score must be a finite number, got {score!r}"))  # fmt: skip
            if isinstance(doc, str) and _is_number(score):
                if doc in ranking:
                    report.errors.append(f"{where}: contexts[{i}] repeats document {doc!r}")
                ranking[doc] = float(score)
        runs.setdefault(domain, {})[tid] = ranking
    if empty:
        report.warnings.append(f"'contexts' is empty on {len(empty)} line(s): {empty[:20]}")
    if colons:
        report.warnings.append(f"{len(colons)} task id(s) written with '::' (lines {colons[:5]}): read here as '<::>' "
                               "(the form of IBM's qrels); IBM's scorer would not find them in its qrels")  # fmt: skip
    if short:
        report.warnings.append(f"{len(short)} line(s) name the collection by a short name (lines {short[:5]}): IBM's "
                               "scorer knows only the long names (mt-rag-...-elser-...)")  # fmt: skip
    if not path.endswith(".jsonl"):
        report.warnings.append("the file name does not end in .jsonl: IBM's format checker refuses such files")
    if os.path.isfile(path) and os.path.getsize(path) > MAX_BYTES:
        report.warnings.append(f"the file is over {MAX_BYTES // 2**20} MB: IBM's format checker reports it")
    if expected is not None:
        if len(expected) != len(ids):
            report.errors.append(f"{path}: {len(ids)} tasks submitted, the input has {len(expected)}")
        report.errors += [f"{path}: missing task_id {t!r}" for t in sorted(set(expected) - set(ids))]
    return report, Submission(runs=runs, task_ids=ids, report=report, lines=first_line)


def read_submission(
    path: str | Path, expected_task_ids: Iterable[str] | None = None, max_contexts: int = MAX_CONTEXTS,
    task_domains: Mapping[str, str] | None = None,
) -> Submission:
    """Read a submission; if any format check fails, raise one DataError: the first problem (it names the file
    and line) and how many more there are (``check_submission`` lists them all)."""
    report, submission = check_submission(path, expected_task_ids, max_contexts, task_domains)
    if report.errors:
        more = len(report.errors) - 1
        raise DataError(report.errors[0] + (f" (and {more} more format error{'s' * (more > 1)})" if more else ""))
    return submission


def read_input_task_ids(path: str | Path) -> list[str]:
    """Task ids of an official task input file (JSONL with ``task_id``), canonical form, in file order."""
    ids = []
    for number, item in read_jsonl(str(path)):
        if not isinstance(item.get("task_id"), str):
            raise DataError("line has no string 'task_id'", str(path), number)
        ids.append(normalize_task_id(item["task_id"], str(path), number))
    return ids


def write_submission(runs: Mapping[str, Run], path: str | Path, top_k: int = MAX_CONTEXTS) -> None:
    """Write runs ({domain: run}) in the submission format (best ``top_k`` contexts per task)."""
    with open(path, "w", encoding="utf-8") as handle:
        for d, run in runs.items():
            for tid, ranking in run.items():
                top = ranked(ranking)[:top_k]
                item = {"task_id": tid, "Collection": COLLECTIONS[d],
                        "contexts": [{"document_id": doc, "score": float(ranking[doc])} for doc in top]}  # fmt: skip
                handle.write(json.dumps(item) + "\n")
