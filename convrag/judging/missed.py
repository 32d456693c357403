"""Missed-relevant estimate: an annotation-sparsity audit by depth-k pooling and graded relevance judging.

Per audited turn, the documents of its pool (:func:`convrag.judging.pooling.pool`: the union of several retrievers'
top k, k = the pool depth, 10 by default) that the qrels do not label at all are judged 0-3 (dimension
``pooled_relevance``); one graded >= ``cutoff`` (2: partly answers or answers) is a *suspected missed* document.

* ``N_new``: suspected documents; ``s = N_new / (N_official_rel + N_new)``, ``N_official_rel`` = documents the qrels
  grade > 0. Reported: macro means of both over turns, and the share of turns with ``N_new > 0``. ``s`` is a LOWER
  bound (a relevant document outside every top k is never seen), INFLATED by the judge's false positives.
* Calibration (``calibrate=True``, dimension ``calibration_relevance``, :class:`Calibration`): the judge on every
  labelled document; specificity and Cohen's kappa only where the qrels hold explicit negatives (grade <= 0), else
  "sensitivity only". Pooled documents labelled negative are calibration material, not missed candidates.
* Failures: a verdict not obtained (the judge raised, no readable grade) is counted by reason and excluded; a turn
  whose candidates all failed is left out of the means (``turns_without_verdict``).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from convrag.core.errors import ConvragError
from convrag.judging.items import AuditDoc, AuditItem, AuditSet
from convrag.judging.pooling import POOLED, RELEVANT_CUTOFF, Pool, PooledDoc, RelevanceJudge, item_qrels, retrieve
from convrag.judging.verdict import Verdict, failure_kind
from convrag.llm import run_batch
from convrag.metrics.retrieval.compute import RetrievalResult, parse_measure, score_run
from convrag.metrics.retrieval.trec import write_qrels

CALIBRATION = "calibration_relevance"


@dataclass
class TurnEstimate:
    """One turn: ``official_relevant`` (qrels grade > 0), ``pooled`` documents, ``candidates`` (pooled, no qrels
    row), ``judged`` / ``failed`` candidates, ``new``: suspected missed ``{doc_id: grade}`` (grade >= cutoff)."""

    item_id: str
    domain: str
    official_relevant: int
    pooled: int
    candidates: int
    judged: int = 0
    failed: int = 0
    new: dict[str, int] = field(default_factory=dict)

    @property
    def n_new(self) -> int:
        return len(self.new)

    @property
    def counted(self) -> bool:
        """False when the turn had candidates and none got a verdict: it is left out of the means."""
        return self.judged > 0 or self.candidates == 0

    @property
    def sparsity(self) -> float | None:
        """``N_new / (N_official_rel + N_new)``; None when the turn is not counted or has no relevant document."""
        total = self.official_relevant + self.n_new
        return self.n_new / total if self.counted and total else None


@dataclass
class Calibration:
    """The judge on the labelled documents: ``positives`` (qrels grade > 0) and ``negatives`` (grade <= 0) that
    got a verdict, how many it got right at the cut-off, and ``failed`` verdicts (excluded)."""

    positives: int = 0
    true_positives: int = 0
    negatives: int = 0
    true_negatives: int = 0
    failed: int = 0

    @property
    def sensitivity(self) -> float | None:
        """Labelled positives graded >= cutoff / labelled positives judged."""
        return self.true_positives / self.positives if self.positives else None

    @property
    def specificity(self) -> float | None:
        """Labelled negatives graded < cutoff / labelled negatives judged (None without explicit negatives)."""
        return self.true_negatives / self.negatives if self.negatives else None

    @property
    def kappa(self) -> float | None:
        """Cohen's kappa of judge vs qrels (binary at the cut-off); None without both positives and negatives."""
        n = self.positives + self.negatives
        if not self.positives or not self.negatives:
            return None
        said_yes = self.true_positives + self.negatives - self.true_negatives
        observed = (self.true_positives + self.true_negatives) / n
        chance = (self.positives * said_yes + self.negatives * (n - said_yes)) / n**2
        return None if chance == 1 else (observed - chance) / (1 - chance)

    @property
    def measured(self) -> str:
        if self.negatives:
            return "sensitivity and specificity (the qrels hold explicit negatives)"
        return "sensitivity only (the qrels hold no explicit negatives)"


@dataclass
class MissedReport:
    """The estimate for one judge: per-turn figures, calibration, every verdict and the failures by reason."""

    judge: str
    cutoff: int
    turns: list[TurnEstimate]
    calibration: Calibration | None
    verdicts: list[Verdict]
    failures: dict[str, int]
    pool: dict[str, Any] = field(default_factory=dict)
    #: (item_id, doc_id) -> the id written in qrels files (``<subset>:<id>`` where subsets share an id)
    written_ids: dict[tuple[str, str], str] = field(default_factory=dict)

    @property
    def counted(self) -> list[TurnEstimate]:
        return [t for t in self.turns if t.counted]

    @property
    def turns_without_verdict(self) -> int:
        return len(self.turns) - len(self.counted)

    @property
    def mean_new(self) -> float | None:
        """Macro mean of ``N_new`` over counted turns."""
        return float(np.mean([t.n_new for t in self.counted])) if self.counted else None

    @property
    def share_with_new(self) -> float | None:
        """Share of counted turns with ``N_new > 0``."""
        return float(np.mean([t.n_new > 0 for t in self.counted])) if self.counted else None

    @property
    def mean_sparsity(self) -> float | None:
        """Macro mean of ``s`` over counted turns that have a relevant document (a lower bound; see the module)."""
        values = [t.sparsity for t in self.counted if t.sparsity is not None]
        return float(np.mean(values)) if values else None

    @property
    def suspected(self) -> dict[str, dict[str, int]]:
        """``item_id -> {doc_id: grade}`` of the suspected missed documents (turns without any left out)."""
        return {t.item_id: dict(t.new) for t in self.turns if t.new}

    def summary(self) -> dict[str, Any]:
        """JSON-ready headline figures."""
        cal = self.calibration
        return {
            "judge": self.judge, "cutoff": self.cutoff, "pool": dict(self.pool), "turns": len(self.turns),
            "turns_counted": len(self.counted), "turns_without_verdict": self.turns_without_verdict,
            "candidates": sum(t.candidates for t in self.turns), "judged": sum(t.judged for t in self.turns),
            "failed": sum(t.failed for t in self.turns), "failures": dict(self.failures),
            "suspected": sum(t.n_new for t in self.turns), "mean_new": self.mean_new,
            "share_with_new": self.share_with_new, "mean_sparsity": self.mean_sparsity,
            "calibration": None if cal is None else {
                "measured": cal.measured, "positives": cal.positives, "negatives": cal.negatives,
                "failed": cal.failed, "sensitivity": cal.sensitivity, "specificity": cal.specificity,
                "kappa": cal.kappa},
        }  # fmt: skip


def estimate_missed(audit_set: AuditSet, pooled: Mapping[str, Sequence[PooledDoc]], judge: RelevanceJudge, *,
                    cutoff: int = RELEVANT_CUTOFF, calibrate: bool = True, concurrency: int = 4) -> MissedReport:
    """Judge each audited turn's pooled unlabelled documents (and, ``calibrate``, its labelled ones) and report
    the estimate of the module docstring. ``pooled``: :func:`~convrag.judging.pooling.pool`'s result (every
    audited item must be in it). Judge calls run ``concurrency`` at a time; an exception from the judge is a
    failed verdict (``call failed: ...``), except a dead endpoint, which ends the run."""
    if not 1 <= cutoff <= 3:
        raise ValueError(f"cutoff must be 1, 2 or 3 on the 0-3 scale, got {cutoff}")
    missing = [it.item_id for it in audit_set.items if it.item_id not in pooled]
    if missing:
        raise ConvragError(f"{len(missing)} audited turns are not in the pool (e.g. {missing[:3]}): pool the same set")
    qrels = item_qrels(audit_set)
    tasks: list[tuple[AuditItem, AuditDoc, str, dict[str, Any]]] = []
    turns: dict[str, TurnEstimate] = {}
    for it in audit_set.items:
        labels = qrels[it.item_id]
        ranks = {d: r for d, r in pooled[it.item_id]}
        candidates = [d for d in ranks if d not in labels]
        turns[it.item_id] = TurnEstimate(it.item_id, it.domain, sum(g > 0 for g in labels.values()), len(ranks),
                                         len(candidates))
        tasks += [(it, audit_set.document(it, d), POOLED, {"official_grade": None, "ranks": ranks[d]})
                  for d in candidates]
        if calibrate:
            docs = audit_set.documents[it.domain]
            tasks += [(it, docs[d], CALIBRATION, {"official_grade": g, "ranks": ranks.get(d, {})})
                      for d, g in labels.items() if d in docs]
    batch = run_batch(tasks, lambda t: judge.verdict(t[0], t[1], t[2]), concurrency, catch=(Exception,))
    verdicts: list[Verdict] = []
    calibration = Calibration() if calibrate else None
    failures: dict[str, int] = {}
    for i, (it, doc, dimension, extra) in enumerate(tasks):
        v = batch.results[i]
        if v is None:  # the judge raised
            v = Verdict(it.item_id, judge.name, dimension, None, None, "", "", f"call failed: {batch.failures[i]}",
                        {"doc_id": doc.doc_id})
        v.extra.update(extra)
        verdicts.append(v)
        turn = turns[it.item_id]
        if v.score is None:
            reason = failure_kind(v.error or "")
            failures[reason] = failures.get(reason, 0) + 1
            if dimension == POOLED:
                turn.failed += 1
            elif calibration is not None:
                calibration.failed += 1
            continue
        relevant = v.score >= cutoff
        if dimension == POOLED:
            turn.judged += 1
            if relevant:
                turn.new[doc.doc_id] = int(v.score)
        elif calibration is not None and extra["official_grade"] > 0:
            calibration.positives += 1
            calibration.true_positives += relevant
        elif calibration is not None:
            calibration.negatives += 1
            calibration.true_negatives += not relevant
    keys = audit_set.data.doc_keys
    written = {(t.item_id, d): keys.get((t.domain, d), d) for t in turns.values() for d in t.new}
    info = {"k": pooled.k, "retrievers": list(pooled.retrievers), "strategy": pooled.strategy} \
        if isinstance(pooled, Pool) else {}
    return MissedReport(judge.name, cutoff, list(turns.values()), calibration, verdicts, failures, info, written)


def write_suspected_qrels(report: MissedReport, path: str | os.PathLike) -> int:
    """Write the suspected missed documents as TREC qrels lines ``qid 0 docid grade`` (grade: the judge's 0-3
    grade), turns in audit order; returns the number of lines. For human review: these are not labels."""
    rows = {t.item_id: {report.written_ids.get((t.item_id, d), d): g for d, g in t.new.items()}
            for t in report.turns if t.new}
    write_qrels(rows, path)
    return sum(len(v) for v in rows.values())


@dataclass
class EstimateCheck:
    """The estimate against known truth: ``found`` suspected documents, ``correct`` of them truly missing;
    ``missing`` truly missing documents, ``missing_pooled`` of them in the pool."""

    found: int
    correct: int
    missing: int
    missing_pooled: int

    @property
    def precision(self) -> float | None:
        """Suspected documents that are truly missing / suspected documents."""
        return self.correct / self.found if self.found else None

    @property
    def recall_pooled(self) -> float | None:
        """Truly missing documents found / truly missing documents in the pool (what pooling could find)."""
        return self.correct / self.missing_pooled if self.missing_pooled else None

    @property
    def recall(self) -> float | None:
        """Truly missing documents found / all truly missing documents."""
        return self.correct / self.missing if self.missing else None


def check_estimate(report: MissedReport, pooled: Mapping[str, Sequence[PooledDoc]],
                   truly_missing: Mapping[str, Collection[str]]) -> EstimateCheck:
    """Score the estimate where the truth is known: ``truly_missing`` maps item ids to the relevant documents
    the qrels lack (e.g. gold documents removed on purpose)."""
    suspected = report.suspected
    pooled_ids = {q: {d for d, _ in docs} for q, docs in pooled.items()}
    return EstimateCheck(
        found=sum(len(v) for v in suspected.values()),
        correct=sum(len(set(v) & set(truly_missing.get(q, ()))) for q, v in suspected.items()),
        missing=sum(len(v) for v in truly_missing.values()),
        missing_pooled=sum(len(set(v) & pooled_ids.get(q, set())) for q, v in truly_missing.items()),
    )  # fmt: skip


@dataclass
class RescoreTable:
    """Each system's scores under the ``official`` and the ``augmented`` (official + suspected) qrels, as
    :class:`~convrag.metrics.retrieval.compute.RetrievalResult` per system; ``tau[measure]``: Kendall's tau-b
    between the systems' scores under the two (None with fewer than 2 systems or when undefined)."""

    measures: list[str]
    official: dict[str, RetrievalResult]
    augmented: dict[str, RetrievalResult]
    tau: dict[str, float | None]
    suspected: int

    @property
    def systems(self) -> list[str]:
        return list(self.official)

    def ranking(self, which: str, measure: str) -> dict[str, int]:
        """System -> rank under ``which`` (``official`` / ``augmented``) qrels, 1 = best; ties share a rank."""
        from scipy.stats import rankdata

        results = getattr(self, which)
        scores = np.array([results[s].scores[measure] for s in self.systems])
        return dict(zip(self.systems, rankdata(-scores, method="min").astype(int).tolist(), strict=True))

    def rows(self) -> list[dict[str, Any]]:
        """One row per system: ``<measure>``, ``<measure> augmented``, ``<measure> rank`` and its augmented rank."""
        out = []
        ranks = {(w, m): self.ranking(w, m) for w in ("official", "augmented") for m in self.measures}
        for s in self.systems:
            row: dict[str, Any] = {"system": s}
            for m in self.measures:
                row[m] = self.official[s].scores[m]
                row[f"{m} augmented"] = self.augmented[s].scores[m]
                row[f"{m} rank"] = ranks[("official", m)][s]
                row[f"{m} rank augmented"] = ranks[("augmented", m)][s]
            out.append(row)
        return out

    def markdown(self) -> str:
        """The table as Markdown: official -> augmented score and rank per measure, then Kendall's tau."""
        head = "| system | " + " | ".join(f"{m} official -> augmented (rank)" for m in self.measures) + " |"
        lines = [head, "|" + "---|" * (len(self.measures) + 1)]
        for row in self.rows():
            cells = [f"{row[m]:.4f} -> {row[f'{m} augmented']:.4f} ({row[f'{m} rank']} -> "
                     f"{row[f'{m} rank augmented']})" for m in self.measures]  # fmt: skip
            lines.append(f"| {row['system']} | " + " | ".join(cells) + " |")
        taus = ", ".join(f"{m}: {'n/a' if t is None else f'{t:.3f}'}" for m, t in self.tau.items())
        return "\n".join(lines) + f"\n\nKendall's tau, official vs augmented ranking: {taus}"


Runs = Mapping[str, Mapping[str, Mapping[str, float] | Sequence[str]]]


def rescore(audit_set: AuditSet, runs_or_retrievers: Pool | Runs | Sequence[str], report: MissedReport,
            measures: Sequence[str] = ("nDCG@10", "Recall@10"), *, augment_grade: int = 1,
            **options: Any) -> RescoreTable:
    """Score systems over the audited turns under the official qrels and under official + suspected qrels.

    ``runs_or_retrievers``: a :class:`~convrag.judging.pooling.Pool` (its retrievers' runs), runs ``{system:
    {item_id: ranking}}``, or retriever specs (run here to the deepest cut-off of ``measures`` with the pool's
    query strategy, ``options`` as for :func:`~convrag.judging.pooling.retrieve`). In the augmented qrels each
    suspected document gets ``augment_grade`` (1: relevant at trec_eval's lowest relevant grade, binary gain);
    official rows are unchanged."""
    if isinstance(runs_or_retrievers, Pool):
        runs: Runs = runs_or_retrievers.runs
    elif isinstance(runs_or_retrievers, Mapping):
        runs = runs_or_retrievers
    else:
        depth = max((k for _, k in map(parse_measure, measures) if k is not None), default=1000)
        options.setdefault("strategy", report.pool.get("strategy"))
        runs = retrieve(audit_set, list(runs_or_retrievers), depth, **options)
    if not runs:
        raise ValueError("nothing to rescore: no run or retriever given")
    official = item_qrels(audit_set)
    augmented = {q: dict(labels) for q, labels in official.items()}
    for q, new in report.suspected.items():
        if q in augmented:
            augmented[q].update({d: augment_grade for d in new if d not in augmented[q]})
    from scipy.stats import kendalltau  # imported here: loading scipy.stats takes about a second (audit --missed)

    scored = {which: {s: score_run(run, qrels, measures=list(measures)) for s, run in runs.items()}
              for which, qrels in (("official", official), ("augmented", augmented))}
    tau: dict[str, float | None] = {}
    for m in measures:
        a = [scored["official"][s].scores[m] for s in runs]
        b = [scored["augmented"][s].scores[m] for s in runs]
        value = float(kendalltau(a, b).statistic) if len(runs) > 1 else float("nan")
        tau[m] = None if np.isnan(value) else value
    count = sum(len(v) for q, v in report.suspected.items() if q in augmented)
    return RescoreTable(list(measures), scored["official"], scored["augmented"], tau, count)
