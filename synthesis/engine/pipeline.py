"""The synthesis stage engine: a pipeline is a list of named stages run in order under one output folder.

The folder's layout: :class:`Pipeline`. Every file is written to a temporary name and renamed, so a killed run
never leaves a half-written file under its final name.

Resuming: a stage whose ``report.json`` exists is skipped; an unfinished stage is run again and skips the work it
already finished (record shards already on disk, datatrove tasks marked complete, arrays already saved). LLM calls
go through the LLM layer's on-disk cache, so redone work repeats no paid call. A stage folder made with other
parameters or other models (:meth:`Pipeline.check`) is an error (rerun with the same parameters, or ``redo`` that
stage). A stage whose inputs changed (a corpus file edited, added or removed; the output of the stage it builds on
changed) is redone with every stage after it, and the run says so.

No empty success: a stage that ends with no usable record (``Stage.empty``: everything dropped) stops the run with
:class:`~convrag.core.errors.EmptyResult` naming the stage and the drops per reason; its shards stay on disk beside
``incomplete.json`` and the next run redoes it from the start. An LLM endpoint that stops answering
(``EndpointUnreachable``) stops the run the same way, and the next run resumes the stage.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from convrag.core.errors import ConvragError, EmptyResult
from convrag.core.progress import scope
from convrag.llm.report import RunReport, load_prices, price_for
from convrag.llm.types import EndpointUnreachable
from convrag.synthesis.engine.fingerprint import OUTPUT_KEY, REPORT_FILE, RunInputs, output_digest, write_inputs
from convrag.synthesis.engine.provenance import changed_models, estimate_models

PARAMS_FILE = "params.json"
#: the key of params.json naming the LLM of each role (``Stage.models``); kept out of the input fingerprint
MODELS_KEY = "models"
PIPELINE_FILE = "pipeline.json"
INCOMPLETE_FILE = "incomplete.json"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON to ``path`` through a temporary file and a rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def write_table_atomic(path: Path, table: Any) -> None:
    """Write a pyarrow ``table`` to the Parquet file ``path`` through a temporary file and a rename."""
    import pyarrow.parquet as pq

    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def remove_temporaries(folder: Path) -> int:
    """Delete ``*.tmp`` files and folders left under ``folder`` by a killed run; returns how many."""
    stale = [p for p in folder.rglob("*.tmp")] if folder.is_dir() else []
    for p in stale:
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return len(stale)


@dataclass
class Estimate:
    """What a stage expects to cost before it runs. ``records`` is None when unknown before earlier stages run."""

    records: int | None = None
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model: str | None = None
    note: str = ""
    #: a local backend (llama.cpp, transformers): no per-token price
    free: bool = False
    #: per-model parts of a stage that calls several models; the stage's cost is theirs summed
    parts: list[Estimate] = field(default_factory=list)

    def cost_usd(self, prices: dict[str, dict[str, float]] | None = None) -> float | None:
        """Estimated cost from the LLM layer's price table (per million tokens); None for an unpriced model."""
        if self.parts:
            costs = [p.cost_usd(prices) for p in self.parts]
            return None if None in costs else sum(c for c in costs if c is not None)
        if not self.llm_calls or self.free:
            return 0.0
        price = price_for(self.model or "", load_prices(prices))
        if price is None:
            return None
        return (self.prompt_tokens * price["input"] + self.completion_tokens * price["output"]) / 1e6


@dataclass
class StageReport:
    """What one stage did: records in / out, drops per reason, LLM accounting and extra figures."""

    stage: str
    records_in: int = 0
    records_out: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    llm: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    resumed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "records_in": self.records_in, "records_out": self.records_out,
                "dropped": dict(sorted(self.dropped.items())), "llm": self.llm, "figures": self.figures,
                "seconds": round(self.seconds, 3)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StageReport:
        return cls(stage=data["stage"], records_in=data["records_in"], records_out=data["records_out"],
                   dropped=dict(data.get("dropped", {})), llm=dict(data.get("llm", {})),
                   figures=dict(data.get("figures", {})), seconds=float(data.get("seconds", 0.0)))


@dataclass
class StageContext:
    """What a running stage gets: its folder, the run's folder, the seed, progress flag and LLM accounting."""

    out: Path
    folder: Path
    seed: int
    progress: bool = True
    llm_report: RunReport = field(default_factory=RunReport)
    #: set when the stage is stopping; its LLM clients then send no new request (``synthesis.engine.schedule``)
    stop: threading.Event = field(default_factory=threading.Event)

    def stage_folder(self, name: str) -> Path:
        """Folder of an earlier stage of the same run; an error if that stage has not finished."""
        folder = self.out / name
        if not (folder / REPORT_FILE).is_file():
            raise ConvragError(f"{folder}: stage {name!r} has not finished; run it first (--stages ...,{name},...)")
        return folder


class Stage(ABC):
    """One named step of a pipeline. Subclasses set ``name`` and implement ``params``, ``estimate`` and ``run``.

    ``run`` must be safe to call again after a kill at any point: it finds what it already wrote and redoes
    only the rest, writing every file atomically.
    """

    name: str = ""
    #: what the stage's records are, for messages ("conversations", "items", ...)
    unit: str = "records"

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """The parameters that determine the stage's output (JSON-serialisable); written to params.json."""

    @abstractmethod
    def estimate(self, ctx: StageContext) -> Estimate:
        """Records, LLM calls, tokens the stage will use; must not write anything or call an LLM."""

    @abstractmethod
    def run(self, ctx: StageContext) -> StageReport:
        """Do the work (resuming), returning the report."""

    def input_files(self) -> list[str]:
        """The files outside OUT the stage reads (corpus, items, option files); their hashes enter its fingerprint."""
        return []

    def legacy_params(self) -> dict[str, Any] | None:
        """``params()`` as the previous version wrote them, for a stage that changed only how it records them (a
        key renamed, a value spelled otherwise): a folder made by that version, its params.json and its input
        fingerprint, still counts as made with these parameters. None (here) when nothing changed."""
        return None

    def models(self) -> dict[str, dict[str, Any]]:
        """Role -> the identity of the LLM it calls (``convrag.llm.identity.describe(spec).to_dict()``: the spec
        resolved through ``$CONVRAG_LLM``, the model's name, whether it is the embedded placeholder); written to
        params.json beside the parameters. Empty (here) for a stage without an LLM."""
        return {}

    def input_listing(self) -> dict[str, Any] | None:
        """How ``input_files`` were listed (recorded, so that a later run lists them again and sees a file added or
        removed); None when they are named one by one."""
        return None

    def empty(self, report: StageReport) -> str | None:
        """Why the stage's output holds nothing usable (one line with the counts), or None when it does."""
        if report.records_out:
            return None
        if not report.records_in:
            return f"{self.name} got no {self.unit} to work on"
        return f"{self.name} dropped all {report.records_in:,} {self.unit} ({drop_counts(report.dropped)})"


def drop_counts(dropped: dict[str, int]) -> str:
    """``reason: n, reason: n`` by decreasing count, or a note that no reason was recorded."""
    ordered = sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{reason}: {n:,}" for reason, n in ordered) or "no drop reason recorded"


def _diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    keys = sorted(set(old) | set(new))
    parts = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]
    return "; ".join(parts[:4]) + (f" (and {len(parts) - 4} more)" if len(parts) > 4 else "")


class _Lock:
    """An exclusive lock on ``OUT/.lock`` so that two runs never write the same folder at once."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / ".lock"

    def __enter__(self) -> _Lock:
        self.handle = open(self.path, "w")  # noqa: SIM115 - held for the whole run
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.handle.close()
            raise ConvragError(f"{self.path.parent}: another synthesis run is writing this folder") from None
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


@dataclass
class Pipeline:
    """Named stages run in order under one output folder, laid out as::

        OUT/pipeline.json          pipeline name, seed, stage names
        OUT/inputs.json            each stage's input fingerprint (``synthesis.engine.fingerprint``; written as it
                                   starts)
        OUT/<stage>/params.json    the stage's parameters, the seed and the LLM of each role, resolved through
                                   $CONVRAG_LLM to the real model (``models``; written before the stage runs)
        OUT/<stage>/...            the stage's outputs (record shards, arrays)
        OUT/<stage>/report.json    written last: the stage is finished (with the digest of its output)
        OUT/<stage>/incomplete.json  instead of report.json: the stage stopped the run (why, with the counts)

    Each stage reports records in / out, drops per reason, LLM calls, tokens and cost (``RunReport``) and its wall
    time (:class:`StageReport`); :meth:`estimate` (a dry run) asks every stage for records, calls, tokens and cost.
    """

    name: str
    stages: Sequence[Stage]
    seed: int = 0
    #: every stage name of the pipeline in order (the run may use some), to find each stage's upstream folder
    order: Sequence[str] = ()

    def _stage_params(self, stage: Stage, legacy: bool = False) -> dict[str, Any]:
        """params.json of ``stage``; ``legacy``: as the previous version wrote it (``Stage.legacy_params``)."""
        return {"stage": stage.name, "seed": self.seed, "params": stage.legacy_params() if legacy else stage.params()}

    def estimate(self, out: str | os.PathLike, progress: bool = False) -> list[tuple[str, Estimate]]:
        """Every stage's estimate (a dry run): nothing is written, no LLM is called."""
        out = Path(out)
        return [(s.name, s.estimate(StageContext(out=out, folder=out / s.name, seed=self.seed, progress=progress)))
                for s in self.stages]

    def check(self, out: Path, redo: Sequence[str] = ()) -> None:
        """Refuse a folder whose finished or started stages were made with other parameters, another seed or other
        models (see :func:`changed_models`: a role's model name or placeholder flag; not its endpoint, and not
        checked against a params.json written before models were recorded). Models do not enter the input
        fingerprint, so older folders resume."""
        for stage in self.stages:
            params_file = out / stage.name / PARAMS_FILE
            if stage.name in redo or not params_file.is_file():
                continue
            try:
                old = json.loads(params_file.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as err:
                raise ConvragError(f"{params_file}: unreadable ({err}); give --redo {stage.name}") from None
            models = changed_models(old.pop(MODELS_KEY, None), stage.models())
            if models:
                raise ConvragError(f"{out / stage.name}: made with other models ({models}); rerun with the same "
                                   f"ones, use another --out, or give --redo {stage.name}")
            new = json.loads(json.dumps(self._stage_params(stage)))
            legacy = json.loads(json.dumps(self._stage_params(stage, legacy=True)))
            if old != new and (legacy["params"] is None or old != legacy):
                flat_old = {"seed": old.get("seed"), **(old.get("params") or {})}
                if legacy["params"] is not None and set(old.get("params") or {}) == set(legacy["params"]):
                    new = legacy  # a folder of the previous version: name the differences in its own keys
                flat_new = {"seed": new["seed"], **new["params"]}
                older = {k: v for k, v in getattr(stage, "legacy_options", {}).items()
                         if k not in (old.get("params") or {})}
                hint = (f"; it was written before {', '.join(older)} existed: add "
                        + " ".join(f"--option {k}={v}" for k, v in older.items()) + " to resume it") if older else ""
                raise ConvragError(f"{out / stage.name}: made with other parameters ({_diff(flat_old, flat_new)})"
                                   f"{hint}; rerun with the same ones, use another --out, or give --redo {stage.name}")

    def input_files(self) -> list[str]:
        """Every file outside OUT that the stages read (an error naming it when it is missing)."""
        return list(dict.fromkeys(f for stage in self.stages for f in stage.input_files()))

    def run(self, out: str | os.PathLike, *, redo: Sequence[str] = (), progress: bool = True,
            on_stage: Any = None, on_note: Callable[[str], None] | None = None) -> list[StageReport]:
        """Run (or resume) every stage; ``redo`` names stages whose folders are cleared first, together with
        every later stage's (they depend on it). A stage whose inputs changed since its folder was written
        (another fingerprint: an input file, or the output of the stage it builds on, changed) is redone in the
        same way, said in one line through ``on_note``. A kept stage (not run now) that a stage run now builds on
        and whose inputs changed is an error naming it. ``on_stage(report)`` is called after each stage.

        A stage whose output holds nothing usable (``Stage.empty``) or whose LLM endpoint stopped answering
        stops the run there: :class:`EmptyResult`, its partial output kept beside ``incomplete.json``."""
        out = Path(out)
        names = [s.name for s in self.stages]
        unknown = [r for r in redo if r not in names]
        if unknown:
            raise ConvragError(f"--redo {','.join(unknown)}: not a stage of this run (stages: {', '.join(names)})")
        if out.exists() and not out.is_dir():
            raise ConvragError(f"{out}: --out exists and is not a folder")
        out.mkdir(parents=True, exist_ok=True)
        with _Lock(out):
            first_redo = min((names.index(r) for r in redo), default=len(names))
            self.check(out, names[first_redo:])
            inputs = RunInputs(out, self.order or names, names)
            for last in names[-1:]:  # before any work; checked again before each stage, as outputs change
                inputs.refuse_stale(last)
            self._clear(out, names[first_redo:])
            write_json_atomic(out / PIPELINE_FILE, {"pipeline": self.name, "seed": self.seed, "stages": names})
            reports = []
            for i, stage in enumerate(self.stages):
                inputs.refuse_stale(stage.name)
                record = inputs.record(stage.name, json.loads(json.dumps(self._stage_params(stage))),
                                       stage.input_files(), stage.input_listing())
                why = inputs.changed(stage.name, record)
                if why is not None and stage.legacy_params() is not None and inputs.changed(stage.name, inputs.record(
                        stage.name, json.loads(json.dumps(self._stage_params(stage, legacy=True))),
                        stage.input_files(), stage.input_listing())) is None:
                    why = None  # fingerprinted by the previous version, which recorded the same parameters otherwise
                if why is not None:
                    after = len(names) - i - 1
                    rest = {0: "", 1: " and the stage after it"}.get(after, f" and the {after} stages after it")
                    if on_note is not None:
                        on_note(f"{stage.name}: input changed ({why}), redoing {stage.name}{rest}")
                    self._clear(out, names[i:])
                report = self._run_stage(stage, out, progress, record)
                reports.append(report)
                if on_stage is not None:
                    on_stage(report)
            return reports

    @staticmethod
    def _clear(out: Path, names: Sequence[str]) -> None:
        for name in names:
            if (out / name).exists():
                shutil.rmtree(out / name)

    def _run_stage(self, stage: Stage, out: Path, progress: bool, record: dict[str, Any]) -> StageReport:
        folder = out / stage.name
        done = folder / REPORT_FILE
        if done.is_file():
            report = StageReport.from_dict(json.loads(done.read_text(encoding="utf-8")))
            report.resumed = True
            return report
        failed = folder / INCOMPLETE_FILE
        if failed.is_file():
            if json.loads(failed.read_text(encoding="utf-8")).get("rerun") == "redo":
                shutil.rmtree(folder)  # it kept nothing: start afresh (its successful LLM calls are cached)
            else:
                failed.unlink()
        folder.mkdir(parents=True, exist_ok=True)
        remove_temporaries(folder)
        models = stage.models()  # a stage without an LLM keeps the params.json it always had
        extra = {MODELS_KEY: models} if models else {}
        write_json_atomic(folder / PARAMS_FILE, {**self._stage_params(stage), **extra})
        write_inputs(out, stage.name, record)
        ctx = StageContext(out=out, folder=folder, seed=self.seed, progress=progress)
        start = time.perf_counter()
        try:
            with scope(self.name, stage.name):  # bars read "<pipeline> · <stage>: <what>"
                report = stage.run(ctx)
        except EndpointUnreachable as err:
            reason = f"{stage.name} stopped: {' '.join(str(err).split())} (finished work is kept: run the same " \
                     "command again to resume)"
            write_json_atomic(failed, {"stage": stage.name, "complete": False, "reason": reason, "rerun": "resume",
                                       "llm": llm_summary(ctx.llm_report)})
            raise EmptyResult(reason) from None
        report.seconds = time.perf_counter() - start
        report.llm = report.llm or llm_summary(ctx.llm_report)
        reason = stage.empty(report)
        if reason is not None:
            write_json_atomic(failed, {**report.to_dict(), "complete": False, "reason": reason, "rerun": "redo"})
            raise EmptyResult(reason)
        write_json_atomic(done, {**report.to_dict(), OUTPUT_KEY: output_digest(folder)})
        return report


def llm_summary(report: RunReport) -> dict[str, Any]:
    """The LLM figures a stage report carries: calls, cache hits, failures, tokens, cost, requests in flight
    (:meth:`convrag.llm.report.RunReport.in_flight`)."""
    return {"calls": report.calls, "cache_hits": report.cache_hits, "failures": report.failures,
            "prompt_tokens": report.prompt_tokens, "completion_tokens": report.completion_tokens,
            "cost_usd": round(report.cost_usd, 6), "in_flight": report.in_flight()}


def _flight(flight: dict[str, Any] | None) -> str:
    """``, in flight: mean 14.2, peak 16 of 16`` when requests were sent, else nothing."""
    if not flight or not flight.get("peak"):
        return ""
    return f", in flight: mean {flight['mean']:.1f}, peak {flight['peak']} of {flight['limit']}"


def format_reports(reports: Sequence[StageReport]) -> str:
    """One block per stage: records in -> out, each drop reason with its count, LLM use, time."""
    lines = []
    for r in reports:
        state = " (finished earlier, not rerun)" if r.resumed else ""
        lines.append(f"{r.stage}: {r.records_in:,} in -> {r.records_out:,} out in {r.seconds:.1f} s{state}")
        for reason, n in sorted(r.dropped.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  dropped {n:,}: {reason}")
        if r.llm.get("calls") or r.llm.get("cache_hits"):
            lines.append(f"  LLM: {r.llm['calls']:,} calls, {r.llm['cache_hits']:,} cached, {r.llm['failures']:,} "
                         f"failed, {r.llm['prompt_tokens']:,} + {r.llm['completion_tokens']:,} tokens, "
                         f"${r.llm['cost_usd']:.4f}" + _flight(r.llm.get("in_flight")))
        for key, value in r.figures.items():
            if isinstance(value, (int, float, str)):
                lines.append(f"  {key}: {value:,}" if isinstance(value, int) else f"  {key}: {value}")
    return "\n".join(lines)


def format_estimates(estimates: Sequence[tuple[str, Estimate]]) -> str:
    """The dry-run table: per stage records, LLM calls, tokens, cost and the model(s) called (``(placeholder)``
    after the embedded SmolLM2-135M); a closing line when the placeholder would run, whose $0 prices nothing."""
    lines = [f"{'stage':<12} {'records':>10} {'LLM calls':>10} {'prompt tok':>12} {'output tok':>12} {'cost':>10}"]
    placeholder = False
    for name, e in estimates:
        cost = e.cost_usd()
        records = "?" if e.records is None else f"{e.records:,}"
        shown = "unpriced" if cost is None else f"${cost:.4f}"
        models = estimate_models(e)
        placeholder = placeholder or any(flag for _, flag in models)
        called = ", ".join(f"{m} (placeholder)" if flag else m for m, flag in models)
        lines.append(f"{name:<12} {records:>10} {e.llm_calls:>10,} {e.prompt_tokens:>12,} "
                     f"{e.completion_tokens:>12,} {shown:>10}" + (f"  model: {called};" if called else "")
                     + (f"  {e.note}" if e.note else ""))
    if sum(e.llm_calls for _, e in estimates):
        costs = [e.cost_usd() for _, e in estimates]
        total = "unpriced" if None in costs else f"${sum(c for c in costs if c is not None):.4f}"
        lines.append(f"{'total':<12} {'':>10} {sum(e.llm_calls for _, e in estimates):>10,} "
                     f"{sum(e.prompt_tokens for _, e in estimates):>12,} "
                     f"{sum(e.completion_tokens for _, e in estimates):>12,} {total:>10}")
    if placeholder:
        lines.append("placeholder: the embedded SmolLM2-135M runs locally at no cost, and what it writes only shows "
                     "that the plumbing works; name a real model (--questioner / --responder / --polisher / --llm, or "
                     "CONVRAG_LLM) to estimate a real run.")
    return "\n".join(lines)
