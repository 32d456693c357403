"""End-to-end MTRAG generation scoring: RB_alg, RB_llm and RL_F, conditioned on answerability.

Per task: the algorithmic components against the FIRST reference answer (as the official scorer uses ``targets[0]``;
further references are counted, not used), the IDK judge (always: conditioning needs it), the clarification judge
(UNDERSPECIFIED tasks under ``mtrag-un`` conditioning), RB_llm and RL_F; then each metric conditioned on the task's
answerability, and the per-task harmonic mean of the conditioned metrics. Modes (see ``parsers``): ``official`` reads
replies as the official scripts do, with their defaults for unreadable ones (0.5, or an IDK "unknown" that lets the
raw metric through), counted per judge in ``summary["counts"]["fallbacks"]``; ``strict`` reads them our stricter way,
re-asks structured judges, and leaves every task with an unreadable reply out of all aggregates (counted, listed).

A judge CALL that fails after the client's retries is never scored: the task is left out of every mean and counted in
``summary["counts"]["call_failures"]``; if every task failed, or the breaker finds the endpoint unreachable, scoring
stops with an :class:`~convrag.llm.LLMError`. A metric undefined for a task (RL_F without claims, or an unreadable
RL_F reply) is left out of that metric's mean and of the harmonic mean, counted in ``summary["counts"]["undefined"]``
(the official NaN handling). An empty (white-space) prediction is scored as given, as officially: BERTScore raw 0,
ROUGE-L 0, so RB_alg 0; the judges see it; counted in ``summary["counts"]["empty_predictions"]``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from convrag.core.errors import DataError
from convrag.llm import LLM, LLMError, PromptTemplate, get_llm

from .aggregate import CONDITIONED, summarize
from .components import (
    CONDITIONING_VARIANTS,
    BertScorer,
    ComponentError,
    condition,
    harmonic_mean,
    k_precision_batch,
    needs_clarification,
    normalize_answerability,
    rb_alg,
    recall_batch,
    rouge_l,
)
from .judges import MODES, GenerationJudges, JudgeSpec, resolve_judge

METRICS = CONDITIONED


@dataclass
class GenerationTask:
    """One generation task: the prediction for the last turn of ``conversation`` and what it is judged against.

    ``conversation``: ``[{"speaker": "user"|"agent", "text": ...}]`` ending with the current user question;
    ``references``: reference answers (the first is used); ``passages``: the texts the answer is checked against;
    ``passage_source``: where the passages came from (``prediction`` contexts, ``reference`` passages, ...).
    """

    task_id: str
    prediction: str
    references: list[str]
    passages: list[str]
    conversation: list[dict[str, str]]
    answerability: str | None = None
    domain: str | None = None
    turn: int | None = None
    passage_source: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class GenerationResult:
    """Per-task rows (every component) and the summary (means, CIs, breakdowns, ranking, counts, settings)."""

    per_task: list[dict[str, Any]]
    summary: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary, "per_task": self.per_task}


def _check_tasks(tasks: Sequence[GenerationTask], metrics: Sequence[str]) -> list[GenerationTask]:
    """The tasks with normalised answerability labels; bad tasks raise DataError naming their position."""
    seen: set[str] = set()
    out = []
    for i, t in enumerate(tasks, start=1):
        where = f"task {t.task_id!r}"
        if not isinstance(t.task_id, str) or not t.task_id:
            raise DataError("task_id must be a non-empty string", "tasks", i)
        if t.task_id in seen:
            raise DataError(f"{where} appears twice", "tasks", i)
        seen.add(t.task_id)
        if not isinstance(t.prediction, str):
            raise DataError(f"{where}: prediction must be a string, got {type(t.prediction).__name__}", "tasks", i)
        if not t.conversation or not all(isinstance(m, Mapping) and "speaker" in m and "text" in m
                                         for m in t.conversation):
            raise DataError(f"{where}: conversation must be a non-empty list of {{speaker, text}}", "tasks", i)
        if not all(isinstance(p, str) for p in t.passages):
            raise DataError(f"{where}: passages must be strings", "tasks", i)
        if not t.references and ("rb_alg" in metrics or "rb_llm" in metrics):
            raise DataError(f"{where}: no reference answer (rb_alg and rb_llm need one)", "tasks", i)
        try:
            out.append(replace(t, answerability=normalize_answerability(t.answerability)))
        except ComponentError as exc:
            raise DataError(f"{where}: {exc}", "tasks", i) from exc
    return out


def _algorithmic(tasks: Sequence[GenerationTask], scorer: BertScorer) -> list[dict[str, float]]:
    preds = [t.prediction for t in tasks]
    refs = [t.references[0] for t in tasks]
    recalls = recall_batch(preds, refs, scorer)
    kprec = k_precision_batch(preds, [t.passages for t in tasks], scorer)
    out = []
    for t, r, k in zip(tasks, recalls, kprec, strict=True):
        rouge = rouge_l(t.prediction, t.references[0])
        out.append({"recall": r, "rouge_l": rouge, "k_precision": k, "rb_alg_raw": rb_alg(r, rouge, k)})
    return out


def _judge_task(judges: GenerationJudges, t: GenerationTask, metrics: Sequence[str],
                conditioning: str) -> dict[str, Any]:
    row: dict[str, Any] = {}
    idk = judges.idk(t.conversation, t.prediction)
    row.update(idk=idk.value, idk_label=idk.label, idk_output=idk.raw)
    outcomes: dict[str, Any] = {"idk": idk, "clarification": None, "rb_llm": None, "rl_f": None}
    row.update(clarification=None, clarification_decision=None, clarification_explanation=None,
               clarification_output=None)
    if needs_clarification(t.answerability, conditioning):
        c = outcomes["clarification"] = judges.clarification(t.conversation, t.prediction)
        row.update(clarification=c.value, clarification_decision=c.decision,
                   clarification_explanation=c.explanation, clarification_output=c.raw)
    row.update(rb_llm_raw=None, rb_llm_ratings=None, rb_llm_judges=None, rb_llm_outputs=None)
    if "rb_llm" in metrics:
        r = outcomes["rb_llm"] = judges.rb_llm(t.conversation, t.references[0], t.prediction, t.passages)
        row.update(rb_llm_raw=r.value, rb_llm_ratings=r.ratings, rb_llm_judges=r.judges, rb_llm_outputs=r.raw)
    row.update(rl_f_raw=None, rl_f_claims=None, rl_f_verdicts=None, rl_f_supported=None, rl_f_total=None,
               rl_f_note=None, rl_f_outputs=None)
    if "rl_f" in metrics:
        f = outcomes["rl_f"] = judges.rl_f(t.conversation, t.prediction, t.passages)
        row.update(rl_f_raw=f.value, rl_f_claims=f.claims, rl_f_verdicts=f.verdicts, rl_f_supported=f.supported,
                   rl_f_total=len(f.claims), rl_f_note=f.note, rl_f_outputs=f.raw)
    row["judge"] = judges.primary.spec
    row["fallbacks"] = {j: None if o is None else o.fallback for j, o in outcomes.items()}
    row["call_failures"] = {j: None if o is None else o.call_failed for j, o in outcomes.items()}
    errors = {j: (([e for e in o.errors if e] or None) if j == "rb_llm" else o.error)
              for j, o in outcomes.items() if o is not None}
    row["errors"] = {k: v for k, v in errors.items() if v}
    return row


def _exclusion(row: Mapping[str, Any], mode: str) -> str | None:
    """Why a task is left out of every mean: a failed judge call (any mode), an unreadable reply (strict)."""
    if any(row["call_failures"].values()):
        return "judge call failed"
    if mode == "strict" and any(row["fallbacks"].values()):
        return "unreadable judge reply (strict mode)"
    return None


def _judge_all(judges: GenerationJudges, tasks: Sequence[GenerationTask], metrics: Sequence[str],
               conditioning: str, concurrency: int, progress: bool) -> list[dict[str, Any]]:
    """Judge every task in up to ``concurrency`` threads; the first error (a dead endpoint) cancels the rest."""
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(tasks), desc="judging", unit="task")

    def judge_one(t: GenerationTask) -> dict[str, Any]:
        out = _judge_task(judges, t, metrics, conditioning)
        if bar is not None:
            bar.update(1)
        return out

    workers = 1 if all(not getattr(llm.backend, "parallel", True) for llm in judges.llms) else concurrency
    pool = ThreadPoolExecutor(max_workers=max(1, workers))
    try:
        futures = [pool.submit(judge_one, t) for t in tasks]
        return [f.result() for f in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if bar is not None:
            bar.close()


def make_scorer(bertscore_model: str | BertScorer | None) -> BertScorer:
    """A BertScorer for a model name or path (None: the bundled MiniLM); a ready scorer (anything with ``score``
    and ``describe``, such as a BertScorer imported from this package while ``evaluate.load`` uses its own copy of
    the module) is used as it is."""
    if bertscore_model is None or isinstance(bertscore_model, str):
        return BertScorer(bertscore_model)
    if callable(getattr(bertscore_model, "score", None)) and callable(getattr(bertscore_model, "describe", None)):
        return bertscore_model
    raise ComponentError(f"bertscore_model must be a model name or path or a BertScorer, got "
                         f"{type(bertscore_model).__name__}")


def score_generation(tasks: Sequence[GenerationTask], judge: JudgeSpec | Sequence[JudgeSpec] | None = None,
                     bertscore_model: str | BertScorer | None = None, mode: str = "official",
                     conditioning: str = "mtrag-un", prompts: Mapping[str, str | PromptTemplate] | None = None,
                     metrics: Sequence[str] = METRICS, n_bootstrap: int = 1000, seed: int = 0,
                     progress: bool = True, max_tokens: Mapping[str, int] | None = None,
                     concurrency: int = 4) -> GenerationResult:
    """Score generated answers; see the module docstring for the definitions, modes and undefined values.

    ``judge``: an LLM spec (``"openai:MODEL@URL"``, ``"hf:PATH"``, ``"default"`` for the embedded placeholder,
    ...), an :class:`~convrag.llm.LLM`, or a list of them (RB_llm takes the median over all; the other judges use
    the first); None takes ``$CONVRAG_LLM`` and is an error when that is unset: the judge is always chosen
    explicitly. ``bertscore_model``: a model path or name, or a ready :class:`BertScorer` (default: the bundled
    MiniLM). ``prompts``: replacement prompts by role (``idk``, ``clarification``, ``rb_llm``,
    ``faithfulness_claims``, ``faithfulness_verdicts``), each a prompt name or a YAML file path. ``metrics``: a
    subset of ``("rb_alg", "rb_llm", "rl_f")`` (the IDK judge always runs). ``max_tokens``: reply limits per judge
    role (see ``judges.DEFAULT_MAX_TOKENS``). ``concurrency``: tasks judged at once (1 for in-process backends
    that serialise calls), and the bound on requests in flight of each judge given as a spec (an LLM given
    ready keeps its own ``max_concurrency``).
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; use one of {MODES}")
    if conditioning not in CONDITIONING_VARIANTS:
        raise ValueError(f"unknown conditioning {conditioning!r}; use one of {CONDITIONING_VARIANTS}")
    metrics = tuple(metrics)
    if not metrics or set(metrics) - set(METRICS) or len(set(metrics)) != len(metrics):
        raise ValueError(f"metrics must be distinct names from {METRICS}, got {list(metrics)}")
    tasks = _check_tasks(list(tasks), metrics)
    judges = GenerationJudges(_clients(resolve_judge(judge), concurrency), prompts=prompts, max_tokens=max_tokens,
                              mode=mode)
    t0 = time.perf_counter()
    judged = _judge_all(judges, tasks, metrics, conditioning, concurrency, progress)  # first: a dead judge stops early
    if judged and all(any(j["call_failures"].values()) for j in judged):
        first = next(iter(judged[0]["errors"].values()))
        raise LLMError(f"judge {judges.primary.spec}: a judge call failed on every one of the {len(judged)} tasks; "
                       f"first: {first if isinstance(first, str) else first[0]}")
    t1 = time.perf_counter()
    scorer = make_scorer(bertscore_model) if "rb_alg" in metrics else None
    algo = _algorithmic(tasks, scorer) if scorer is not None and tasks else [{} for _ in tasks]
    t_algo = time.perf_counter() - t1

    rows = []
    for t, a, j in zip(tasks, algo, judged, strict=True):
        row: dict[str, Any] = {
            "task_id": t.task_id, "answerability": t.answerability, "domain": t.domain, "turn": t.turn,
            "passage_source": t.passage_source, "n_passages": len(t.passages), "n_references": len(t.references),
            "recall": a.get("recall"), "rouge_l": a.get("rouge_l"), "k_precision": a.get("k_precision"),
            "rb_alg_raw": a.get("rb_alg_raw"), **j,
        }
        reason = _exclusion(row, mode)
        for m in METRICS:
            row[m] = None if reason or m not in metrics else condition(
                row[f"{m}_raw"], t.answerability, row["idk"], row["clarification"], conditioning)
        values = [row[m] for m in metrics]
        row["harmonic"] = None if any(v is None for v in values) else harmonic_mean(values)
        row["excluded"] = reason is not None
        row["excluded_reason"] = reason
        row["extra"] = dict(t.extra)
        rows.append(row)

    summary = summarize(rows, metrics=metrics, mode=mode, n_bootstrap=n_bootstrap, seed=seed)
    summary["counts"]["empty_predictions"] = sum(1 for t in tasks if not t.prediction.strip())
    summary.update(
        conditioning=conditioning,
        bertscore=scorer.describe() if scorer is not None else None,
        judge=judges.describe(),
        llm_report=_report(judges.llms),
        seconds={"algorithmic": round(t_algo, 3), "total": round(time.perf_counter() - t0, 3)},
        n_bootstrap=n_bootstrap, seed=seed,
    )
    return GenerationResult(per_task=rows, summary=summary)


def _clients(judge: JudgeSpec | Sequence[JudgeSpec], concurrency: int) -> list[LLM]:
    """The judges as LLM clients: a spec becomes one with ``concurrency`` requests in flight at most (unless the spec
    sets ``max_concurrency``); an LLM is kept as it is."""
    items = [judge] if isinstance(judge, (str, LLM)) else list(judge)
    return [j if isinstance(j, LLM) else get_llm(j, max_concurrency=max(1, concurrency)) for j in items]


def _report(llms: Sequence[LLM]) -> dict[str, Any]:
    """Each judge's LLM report (calls, failures, cache hits, tokens, requests in flight), keyed by spec."""
    out: dict[str, Any] = {}
    for i, llm in enumerate(llms):
        d = llm.report.to_dict()
        out[llm.spec if llm.spec not in out else f"{i}:{llm.spec}"] = {
            k: d[k] for k in ("calls", "successes", "retries", "structured_retries", "repairs", "failures",
                              "cache_hits", "cache_misses", "prompt_tokens", "completion_tokens", "cost_usd",
                              "backend_seconds", "errors", "failure_messages", "in_flight")}
    return out


def task_from_dict(d: Mapping[str, Any]) -> GenerationTask:
    """A :class:`GenerationTask` from a mapping with its field names (e.g. a row of ``per_task``-like input)."""
    known = {f for f in GenerationTask.__dataclass_fields__}
    return GenerationTask(**{k: v for k, v in d.items() if k in known})


__all__ = ["GenerationResult", "GenerationTask", "MODES", "METRICS", "make_scorer", "score_generation",
           "task_from_dict"]
