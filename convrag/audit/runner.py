"""``convrag audit``: every judge of an ensemble over the turns of built benchmark folders.

Dimensions (``--dimensions``; groups ``mtr-eval``, ``recor``, ``all``): MTR-Eval's ``completeness``,
``query_evidence``, ``answer_faithfulness``, ``answer_quality`` (``convrag.judging.mtr_eval``, one call per item,
Q-E one per gold document) and RECOR's ``naturalness``, ``turn_coherence``, ``question_quality``,
``groundedness`` (one call per conversation for the four), ``dependency_type`` and ``question_pattern``
(one call per turn; ``convrag.judging.recor``).

Each judge (an LLM spec) has its own cache folder, the judges run at the same time with up to ``concurrency``
calls each in flight, and every verdict, rationale included, is one line of ``verdicts.jsonl``. A verdict that
could not be read or whose call failed has no score: it is excluded from the means and counted (``metrics/audit``
aggregates). A dimension that does not apply to an item (A-E / Qual. without a reference answer) is counted as not
applicable.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from convrag.core.errors import ConvragError
from convrag.core.progress import label, scope
from convrag.judging import mtr_eval
from convrag.judging import recor as recor_judges
from convrag.judging.items import AuditItem, AuditSet, conversations
from convrag.judging.verdict import Verdict
from convrag.llm import LLM, BatchResult, DiskCache, LLMError, RunStopped, default_cache_dir, get_llm, run_batch
from convrag.llm.backends.fake import FakeBackend
from convrag.llm.report import FREE_BACKENDS, load_prices, price_for
from convrag.llm.spec import parse_spec

CONVERSATION_DIMENSIONS = recor_judges.DIMENSIONS
TURN_DIMENSIONS = {recor_judges.DEPENDENCY: "dependency", recor_judges.PATTERN: "pattern"}
GROUPS: dict[str, tuple[str, ...]] = {
    "mtr-eval": mtr_eval.DIMENSIONS,
    "recor": (*CONVERSATION_DIMENSIONS, *TURN_DIMENSIONS),
}
GROUPS["all"] = GROUPS["mtr-eval"] + GROUPS["recor"]
#: completion tokens assumed per call in a dry run (a rationale and the verdict line)
ESTIMATED_COMPLETION_TOKENS = 150


def parse_dimensions(text: str | None) -> list[str]:
    """Dimension names and group names (comma-separated) -> dimension names in a fixed order."""
    wanted: set[str] = set()
    for name in (text or "all").split(","):
        name = name.strip()
        if name in GROUPS:
            wanted |= set(GROUPS[name])
        elif name in GROUPS["all"]:
            wanted.add(name)
        elif name:
            raise ConvragError(f"--dimensions: unknown {name!r}; known: {', '.join(GROUPS)} or "
                               f"{', '.join(GROUPS['all'])}")
    return [d for d in GROUPS["all"] if d in wanted]


@dataclass
class Unit:
    """One judge task: ``call(llm)`` returns its verdicts (None: not applicable)."""

    key: str
    dimension: str
    call: Callable[[LLM], list[Verdict] | None]
    #: why the unit may not apply (counted when ``call`` returns None)
    reason: str = "not applicable"


def plan(audit_set: AuditSet, dimensions: Sequence[str], *, seed: int = 0, negatives: int = 7,
         negative_retriever: str = "bm25", whole_pool: bool = True,
         profile: str = recor_judges.DEFAULT_PROFILE) -> list[Unit]:
    """Every judge task of one folder for the chosen dimensions, in a stable order (``whole_pool``: completeness
    shows an item's whole candidate pool, see :mod:`convrag.judging.mtr_eval`; ``profile``: the readings of RECOR's
    judges, see :mod:`convrag.judging.recor_profile`)."""
    units: list[Unit] = []
    mtr_dims = [d for d in dimensions if d in mtr_eval.DIMENSIONS]
    if mtr_dims:
        sampler = mtr_eval.NegativeSampler(audit_set, retriever=negative_retriever, whole_pool=whole_pool)
        objects = {d: mtr_eval.make_dimension(d, sampler=sampler, k=negatives, seed=seed) for d in mtr_dims}
        for d in mtr_dims:
            reason = "no usable hard negative" if d == "completeness" else "no reference answer"
            for item in audit_set.items:
                units.append(Unit(f"{item.item_id}|{d}", d, lambda llm, d=d, item=item: mtr_eval.judge_item(
                    llm, objects[d], item, audit_set), reason))
    conv_dims = [d for d in dimensions if d in CONVERSATION_DIMENSIONS]
    if conv_dims:
        for key, items in conversations(audit_set.items).items():
            units.append(Unit(f"{key}|conversation", "conversation", lambda llm, items=items: [
                v for v in recor_judges.judge_conversation(llm, items, audit_set, profile) if v.dimension in conv_dims]
                or None, "no answers to judge groundedness on"))
    for d, kind in TURN_DIMENSIONS.items():
        if d in dimensions:
            for item in audit_set.items:
                units.append(Unit(f"{item.item_id}|{d}", d, lambda llm, kind=kind, item=item: [
                    recor_judges.judge_turn(llm, kind, item, profile)]))
    return units


def _slug(spec: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", spec)[:80] or "judge"


def make_judges(specs: Sequence[str], cache: str | os.PathLike | None = None, concurrency: int = 4) -> list[LLM]:
    """One LLM per spec, each with its own cache folder under ``cache`` (default: the LLM layer's), named as
    :func:`~convrag.metrics.audit.aggregate.judge_names` says (specs differing only after ``;`` stay apart)."""
    from convrag.metrics.audit.aggregate import judge_names

    if len(set(specs)) != len(specs):
        raise ConvragError(f"--judge: a spec is given twice ({', '.join(specs)})")
    root = Path(cache) if cache is not None else default_cache_dir() / "audit"
    judges = [get_llm(spec, cache=DiskCache(root / _slug(spec)), max_concurrency=concurrency) for spec in specs]
    for llm, name in zip(judges, judge_names(specs), strict=True):
        llm.spec = name
    return judges


@dataclass
class AuditRun:
    """The verdicts of one folder and what was not judged."""

    audit_set: AuditSet
    verdicts: list[Verdict] = field(default_factory=list)
    not_applicable: Counter[str] = field(default_factory=Counter)
    #: what ``run_audit``'s ``alongside`` returned for each judge, in judge order (empty without it)
    alongside: list[Any] = field(default_factory=list)


def run_audit(audit_set: AuditSet, judges: Sequence[LLM], dimensions: Sequence[str], *, seed: int = 0,
              negatives: int = 7, concurrency: int = 4, progress: bool = True, whole_pool: bool = True,
              profile: str = recor_judges.DEFAULT_PROFILE,
              alongside: Callable[[LLM], Any] | None = None) -> AuditRun:
    """Run every judge over every unit, the judges at the same time (each with ``concurrency`` calls in flight, so
    none waits for another's last calls); an endpoint that stays down stops the run (EndpointUnreachable): the other
    judges send no new request (their clients' ``stop`` is set) and the run ends once their calls in flight return.
    Verdicts are kept in judge order, then unit order, whatever order the calls ended in.

    ``alongside(llm)``: more work of each judge, run at the same time as its units (``convrag audit --missed``: the
    missed-relevant estimate), so that neither waits for the other's last calls; the judge's own bound
    (``max_concurrency``) caps the calls in flight of both together. Its results are :attr:`AuditRun.alongside`; an
    error in it stops the run as a unit's does."""
    units = plan(audit_set, dimensions, seed=seed, negatives=negatives, whole_pool=whole_pool, profile=profile)
    result = AuditRun(audit_set)
    bars = []
    for llm in judges:
        with scope(audit_set.benchmark, llm.spec):  # e.g. "recor · openai:MODEL: judging labels"
            bars.append(tqdm(total=len(units), unit="call", disable=not progress, desc=label("judging labels")))

    stop = threading.Event()

    def judge_all(n: int) -> BatchResult[list[Verdict] | None]:
        try:
            return run_batch(units, lambda u: u.call(judges[n]), concurrency, catch=(LLMError,),
                             on_result=lambda *_: bars[n].update())
        except BaseException:
            stop.set()  # the other judges send no new request
            raise
        finally:
            bars[n].close()

    def beside(work: Callable[[LLM], Any], n: int) -> Any:
        try:
            return work(judges[n])
        except BaseException:
            stop.set()
            raise

    for llm in judges:
        llm.stop = stop
    try:
        with ThreadPoolExecutor(max_workers=max(1, len(judges)) * (1 if alongside is None else 2)) as pool:
            futures = [pool.submit(judge_all, n) for n in range(len(judges))]
            extra = [] if alongside is None else [pool.submit(beside, alongside, n) for n in range(len(judges))]
            wait(futures + extra)
    finally:
        for llm in judges:
            llm.stop = None
    errors = [f.exception() for f in futures + extra if f.exception() is not None]
    if errors:  # the error that stopped the run, not the others' RunStopped
        raise next((e for e in errors if not isinstance(e, RunStopped)), errors[0])
    batches = [f.result() for f in futures]
    result.alongside = [f.result() for f in extra]
    for n, (llm, done) in enumerate(zip(judges, batches, strict=True)):
        for i, unit in enumerate(units):
            if i in done.failures:  # a failure outside judge_call's own handling: counted, never scored
                result.verdicts.append(Verdict(unit.key.split("|")[0], llm.spec, unit.dimension, None, None, "",
                                               "", f"call failed: {done.failures[i]}", {}))
            elif done.results[i] is None:
                if n == 0:  # counted once, not once per judge
                    result.not_applicable[f"{unit.dimension}: {unit.reason}"] += 1
            else:
                result.verdicts.extend(done.results[i] or [])
    return result


def estimate(audit_set: AuditSet, specs: Sequence[str], dimensions: Sequence[str], *, seed: int = 0,
             negatives: int = 7, whole_pool: bool = True,
             profile: str = recor_judges.DEFAULT_PROFILE) -> list[dict[str, Any]]:
    """Calls, prompt tokens (the real prompts, characters / 4) and cost per judge, without calling any model:
    every unit runs against a stand-in that records the prompts."""
    chars = Counter()
    calls = Counter()

    def record(messages: list[dict[str, str]]) -> str:
        calls["n"] += 1
        chars["n"] += sum(len(m["content"]) for m in messages)
        return "**Rating:** 3 [1]"

    stand_in = LLM(FakeBackend(responder=record), cache=False, spec="dry-run")
    for unit in plan(audit_set, dimensions, seed=seed, negatives=negatives, whole_pool=whole_pool, profile=profile):
        unit.call(stand_in)
    prices = load_prices()
    rows = []
    for spec in specs:
        parsed = parse_spec(spec)
        prompt, completion = chars["n"] // 4, calls["n"] * ESTIMATED_COMPLETION_TOKENS
        free = parsed.kind in FREE_BACKENDS or parsed.kind in ("default", "gguf", "transformers")
        price = None if free else price_for(parsed.target, prices)
        cost = 0.0 if free else (None if price is None else
                                 (prompt * price["input"] + completion * price["output"]) / 1e6)
        rows.append({"judge": spec, "calls": calls["n"], "prompt_tokens": prompt, "completion_tokens": completion,
                     "cost_usd": cost})
    return rows


def write_verdicts(path: Path, runs: Sequence[AuditRun]) -> int:
    """``verdicts.jsonl``: one line per verdict with its folder's benchmark and the item's domain."""
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with tmp.open("w", encoding="utf-8") as handle:
        for run in runs:
            domains = item_domain(run.audit_set.items)
            for v in run.verdicts:
                row = {"benchmark": run.audit_set.benchmark, "domain": domains.get(v.item_id, ""), **v.to_dict()}
                handle.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
                n += 1
    os.replace(tmp, path)
    return n


def item_domain(items: Sequence[AuditItem]) -> dict[str, str]:
    """Item id or conversation key -> domain."""
    out = {it.item_id: it.domain for it in items}
    out.update({k: v[0].domain for k, v in conversations(items).items()})
    return out
