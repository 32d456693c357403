"""The ``convrag generate`` command: answers for every task / turn of a built folder, a report, and the run.

Files written (``FILE`` = ``--out`` without its ``.jsonl`` suffix), each through a temporary file and a rename:
``--out`` (the answers), ``FILE.report.json`` (mode, k, retriever or run file, counts, tasks without an answer and
the LLM's run report), ``FILE.run.trec`` (the retriever's full run, with ``--retriever``). LLM replies are cached in
``--cache`` (default ``FILE.llm-cache/``), so a rerun repeats no call.

A task whose call failed or whose reply was empty or reasoning only gets no line (listed in the report with the
reason, counted by kind; :mod:`convrag.generate.answer`): an empty prediction is never written. When no task got an
answer, only the report is written (``"complete": false`` and the reason; an earlier run's answers and run file at
the same ``--out`` are removed, so that none stays beside another run's report) and the command fails (exit 1) with
one line naming the counts and what was removed. Outputs never replace inputs: ``--out``, the report, the run file
and the cache folder may not be, or contain, the built folder or the ``--run`` file. An existing output is replaced
only when it is an earlier output of this command (:func:`_earlier_report`) for the same built folder (another folder's
answers only with ``--overwrite``); anything else is refused before any work. The report's ``degenerate`` says
whether the answers are all empty or refusals, or mostly one text (:func:`convrag.llm.replies.answer_checks`); a
degenerate set is also one warning line on stderr.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

from convrag.core.errors import ConvragError, EmptyResult

_SECRET_IN_URL = re.compile(r"//[^/@\s]+@")


def stem(out: str | os.PathLike) -> Path:
    """``FILE`` of the output ``FILE.jsonl`` (the whole name when it has another suffix)."""
    path = Path(out)
    return path.with_suffix("") if path.suffix == ".jsonl" else path


def generator_label(spec: str) -> str:
    """The LLM spec as written in outputs: no ``;`` options, no user:password in URLs."""
    return _SECRET_IN_URL.sub("//", spec.split(";")[0].strip())


def make_llm(spec: str, cache: str | os.PathLike, concurrency: int) -> Any:
    """The generator LLM (replaced by scripted ones in tests)."""
    from convrag.llm import DiskCache, get_llm

    return get_llm(spec, cache=DiskCache(cache), max_concurrency=concurrency)


def answer_prompt(profile: Any, choice: str) -> str:
    """The generator prompt: ``gen_recor_answer`` for a RECOR folder (evaluation report kind ``recor``) under the
    ``authors`` profile, else MTRAG's ``rag_answer``."""
    from convrag.benchmarks.recor.generation_profile import ANSWER_PROMPTS, get_profile

    return ANSWER_PROMPTS[get_profile(choice).name] if profile.report == "recor" else "rag_answer"


def _check_args(args: argparse.Namespace) -> Path:
    for flag, value in (("--concurrency", args.concurrency), ("--max-tokens", args.max_tokens),
                        ("--passage-chars", args.passage_chars), ("--history-chars", args.history_chars)):  # fmt: skip
        if value < (0 if flag == "--history-chars" else 1):
            raise ConvragError(f"{flag} must be at least {0 if flag == '--history-chars' else 1}, got {value}")
    if args.temperature < 0:
        raise ConvragError(f"--temperature must be at least 0, got {args.temperature}")
    from convrag.hub.repo import resolve_folder

    args.folder = str(resolve_folder(args.folder))  # a Hub repo id -> its cached snapshot
    if not Path(args.folder).is_dir():
        raise ConvragError(f"{args.folder}: no such folder (give a folder written by `convrag build`)")
    if args.out is None:
        from convrag.hub.naming import default_out
        from convrag.metrics.retrieval.trec import safe_token

        source = (args.retriever or (Path(args.run).stem if args.run else None)) if args.mode == "retrieved" else None
        name = f"{args.mode}-{safe_token(source)}" if source else args.mode
        args.out = str(default_out([args.folder], "generate") / f"{name}.jsonl")
    out = Path(args.out)
    if out.is_dir():
        raise ConvragError(f"--out {out}: is a folder; give a file name such as answers.jsonl")
    return out


def _resolved(folder: Any) -> str:
    return str(Path(str(folder)).resolve())


def _earlier_report(path: Path, out: Path) -> dict[str, Any] | None:
    """The report at ``path`` when it is one this command wrote for the answers file ``out``, else None: a JSON
    object with this command's ``generator``, ``mode`` and ``counts`` keys whose ``output`` names ``out``. An existing
    ``--out`` (or report, or run file) counts as an earlier output of this command only when such a
    ``FILE.report.json`` is beside it; the run file ``FILE.run.trec`` counts as ours when that report is there."""
    import json

    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(report, dict) or not {"generator", "mode", "counts"} <= set(report):
        return None
    return report if Path(str(report.get("output"))).name == out.name else None


def _check_outputs(args: argparse.Namespace, out: Path) -> dict[str, Any] | None:
    """Refuse outputs that are inputs, and existing files that are not earlier outputs of this command; returns the
    earlier report (:func:`_earlier_report`), or None."""
    from convrag.core.out_folder import check_not_input

    base = stem(out)
    inputs = [args.folder, args.run]
    report_path, run_path = Path(f"{base}.report.json"), Path(f"{base}.run.trec")
    written = [(out, "--out"), (report_path, "the report FILE.report.json"),
               (Path(args.cache or f"{base}.llm-cache"), "--cache" if args.cache else "the cache FILE.llm-cache")]
    if args.retriever is not None:
        written.append((run_path, "the run file FILE.run.trec"))
    for path, what in written:
        check_not_input(path, inputs, what=what)
    earlier = _earlier_report(report_path, out)
    if report_path.exists() and earlier is None:
        raise ConvragError(f"{report_path}: exists and is not a report of `convrag generate` for {out.name}: not "
                           "replacing it; choose another --out")  # fmt: skip
    if out.exists() and earlier is None:
        raise ConvragError(f"{out}: --out exists and is not an earlier `convrag generate` output (no "
                           f"{report_path.name} beside it naming it): not replacing it; choose another --out")
    if earlier is not None and not args.overwrite and _resolved(earlier.get("folder")) != _resolved(args.folder):
        raise ConvragError(f"{out}: holds the `convrag generate` answers of {earlier.get('benchmark')} at "
                           f"{earlier.get('folder')}, not of {_resolved(args.folder)}: not replacing them; choose "
                           "another --out, or pass --overwrite to replace them")
    if args.retriever is not None and run_path.exists() and earlier is None:
        raise ConvragError(f"{run_path}: exists and is not a run file written by an earlier `convrag generate` "
                           "into this --out: not replacing it; choose another --out")  # fmt: skip
    return earlier


def run_command(args: argparse.Namespace) -> int:
    """``convrag generate``: collect the items, answer them, write the answers, the report and the run."""
    from convrag.builders.profile import profile_of
    from convrag.core.jsonl import write_jsonl_atomic
    from convrag.core.manifest import read_manifest
    from convrag.core.progress import label as bar_label
    from convrag.core.progress import scope, wanted
    from convrag.generate.answer import generate_answers, judge_line, mtrag_line
    from convrag.generate.tasks import collect_items
    from convrag.llm.replies import answer_checks
    from convrag.llm.spec import SPEC_ENV, is_placeholder
    from convrag.metrics.retrieval.trec import safe_token, write_run
    from convrag.retrievers.registry import check_retrievers
    from convrag.retrievers.strategies import check_strategies
    from convrag.synthesis.engine.pipeline import write_json_atomic

    out = _check_args(args)
    earlier = _check_outputs(args, out)
    base = stem(out)
    spec = args.llm or os.environ.get(SPEC_ENV) or "default"
    manifest = read_manifest(args.folder)
    profile = profile_of(manifest, source=str(Path(args.folder) / "README.md"))
    if args.retriever is not None:
        check_retrievers([args.retriever], "--retriever")
    if args.strategy is not None:
        check_strategies([args.strategy], "--strategy", profile)
    if profile.generation is None:
        raise ConvragError(f"{args.folder}: benchmark {manifest.get('benchmark')!r} declares no generation scheme: "
                           "it has no reference answers to generate against")  # fmt: skip
    progress = wanted(args.no_progress)
    benchmark = str(manifest["benchmark"])
    out.parent.mkdir(parents=True, exist_ok=True)
    llm = make_llm(spec, args.cache or f"{base}.llm-cache", args.concurrency)
    with scope(benchmark):
        collected = collect_items(args.folder, profile, args.mode, k=args.k, retriever=args.retriever,
                                  strategy=args.strategy, run_file=args.run, config=args.config, split=args.split,
                                  max_turns=args.max_turns, corpus=args.corpus, llm=llm, progress=progress)  # fmt: skip
    items = collected.items
    unit = "tasks" if collected.scheme == "mtrag" else "turns"
    with scope(benchmark, args.retriever or (Path(args.run).name if args.run else None)):
        desc = bar_label(f"generating answers ({args.mode} passages, {len(items)} {unit})", generator_label(spec))
    args.prompt = answer_prompt(profile, getattr(args, "profile", "authors"))
    result = generate_answers(items, llm, max_tokens=args.max_tokens, temperature=args.temperature,
                              passage_chars=args.passage_chars, history_chars=args.history_chars,
                              concurrency=args.concurrency, progress=progress, desc=desc,
                              prompt=args.prompt)  # fmt: skip
    label = generator_label(getattr(llm, "spec", spec))
    lines = [mtrag_line(i, result.answers[i.task_id], args.mode) if collected.scheme == "mtrag"
             else judge_line(i, result.answers[i.task_id], args.mode, label)
             for i in items if i.task_id in result.answers]  # fmt: skip
    placeholder = is_placeholder(llm) if hasattr(llm, "backend") else is_placeholder(spec)
    report_path = Path(f"{base}.report.json")
    if not lines:  # nothing usable: the report alone says why; no answers or run file
        removed = _remove_earlier(earlier, out)
        failure = (f"no answer for any of {len(items)} {unit} ({result.describe_counts() or 'nothing to answer'})"
                   f"; wrote only {report_path} (marked incomplete), no answers file"
                   + (f"; removed the earlier run's {' and '.join(removed)}" if removed else ""))
        report = _report(args, manifest, collected, result, label, placeholder, out, None, failure)
        write_json_atomic(report_path, report)
        _print_report(report, result, [str(report_path)])
        raise EmptyResult(failure)
    write_jsonl_atomic(out, lines)
    written = [str(out)]
    run_path = None
    if collected.run is not None:
        run_path = Path(f"{base}.run.trec")
        tmp = run_path.with_name(f".{run_path.name}.tmp")
        write_run(collected.run, tmp, tag=safe_token(args.retriever or "run"))
        os.replace(tmp, run_path)
        written.append(str(run_path))
    report = _report(args, manifest, collected, result, label, placeholder, out, run_path)
    report["degenerate"] = answer_checks(list(result.answers.values()))
    write_json_atomic(report_path, report)
    written.append(str(report_path))
    _print_report(report, result, written)
    return 0


def _remove_earlier(earlier: dict[str, Any] | None, out: Path) -> list[str]:
    """Delete the answers file ``out`` and the run file of the earlier run whose report is ``earlier`` (files of this
    command: the report names them), so that no answers stay beside a report of another run; returns their paths."""
    if earlier is None:
        return []
    paths = [out]
    if earlier.get("run_file_written"):
        run_path = Path(f"{stem(out)}.run.trec")
        if Path(str(earlier["run_file_written"])).name == run_path.name:
            paths.append(run_path)
    removed = [str(p) for p in paths if p.is_file()]
    for path in removed:
        Path(path).unlink()
    return removed


def _report(args: argparse.Namespace, manifest: dict[str, Any], collected: Any, result: Any, label: str,
            placeholder: bool, out: Path, run_path: Path | None, failure: str | None = None) -> dict[str, Any]:
    """What ``FILE.report.json`` holds; ``failure``: why the run is incomplete (no answers file written)."""
    failed = [i.task_id for i in collected.items if i.task_id in result.failures]
    info = collected.info
    return {
        "complete": failure is None, "incomplete_reason": failure, "answers_written": failure is None,
        "folder": str(args.folder), "benchmark": manifest.get("benchmark"), "scheme": collected.scheme,
        "output": str(out), "mode": args.mode, "k": info.get("k"), "retriever": info.get("retriever"),
        "strategy": info.get("strategy"), "strategy_spec": info.get("strategy_spec"), "run": info.get("run"),
        "run_file_written": str(run_path) if run_path else None, "config": info.get("config"),
        "split": info.get("split"), "corpus": info.get("corpus"), "generator": label, "placeholder": placeholder,
        "prompt": getattr(args, "prompt", "rag_answer"), "profile": getattr(args, "profile", "authors"),
        "sampling": {"temperature": args.temperature, "max_tokens": args.max_tokens, "seed": 0},
        "passage_chars": args.passage_chars, "history_chars": args.history_chars, "max_turns": args.max_turns,
        "counts": {"items": len(collected.items), "answered": len(result.answers), "without_answer": len(failed),
                   "without_answer_by_kind": result.counts(),
                   "without_passages": {note: len(ids) for note, ids in collected.notes().items()}},
        "without_answer_ids": failed, "failures": {t: result.failures[t] for t in failed},
        "without_passages_ids": collected.notes(),
        "llm": result.report.to_dict() if result.report is not None else None,
        "llm_summary": result.report.summary() if result.report is not None else None,
    }  # fmt: skip


def _print_report(report: dict[str, Any], result: Any, written: list[str]) -> None:
    from convrag.llm.spec import PLACEHOLDER_MODEL, REAL_MODEL_HINT

    counts = report["counts"]
    unit = "tasks" if report["scheme"] == "mtrag" else "turns"
    if report["retriever"]:
        passages = f", top {report['k']} of retriever {report['retriever']} ({report['strategy']})"
    elif report["run"]:
        passages = f", top {report['k']} of {report['run']}"
    else:
        passages = ""
    print(f"generate ({report['mode']}{passages}): {counts['answered']} of {counts['items']} {unit} answered by "
          f"{report['generator']}")
    print(report["llm_summary"])
    ids = report["without_answer_ids"]
    print(f"{len(ids)} {unit} without an answer" + (f": {', '.join(ids[:20])}{' ...' if len(ids) > 20 else ''} "
                                                    f"({result.describe_counts()})" if ids else ""))  # fmt: skip
    if ids and counts["answered"]:
        print("  (convrag evaluate-generation scores the others with --allow-missing)")
    for note, n in counts["without_passages"].items():
        print(f"{n} {unit} without passages: {note}")
    print("Wrote " + ", ".join(written))
    flags = (report.get("degenerate") or {}).get("flags") or []
    if flags:
        print(f"convrag generate: warning: degenerate answers: {'; '.join(flags)} (report: degenerate)",
              file=sys.stderr)
    if report["placeholder"]:
        hint = REAL_MODEL_HINT.replace("point it", "Point --llm")
        print(f"\nWarning: the answers come from the embedded {PLACEHOLDER_MODEL} placeholder: they only show that "
              f"the plumbing works, they are not a system to evaluate. {hint}.")
