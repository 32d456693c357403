"""The ``convrag audit`` command: judges over built folders, outputs, and the optional missed-relevant estimate."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from convrag.core.errors import ConvragError, EmptyResult

if TYPE_CHECKING:
    from convrag.judging.items import AuditSet
    from convrag.judging.missed import MissedReport
    from convrag.judging.pooling import Pool
    from convrag.llm import LLM


def run_command(args: argparse.Namespace) -> int:
    """``convrag audit``: load every folder, judge (or estimate with ``--dry-run``), write and print the results.

    ``--out`` is claimed (:func:`convrag.core.out_folder.claim_out`) before any judge call: never an audited folder or
    one holding it, never a folder of the user's own. When a requested dimension (or a ``--missed`` estimate) got
    no usable verdict, the outputs are written marked incomplete and :class:`EmptyResult` names what failed.
    Every output is written under a temporary name and renamed into place once all are written; summary.json's
    ``files`` lists them, and the outputs an earlier audit into the same folder listed and this one did not write
    are removed (nothing else in the folder is touched). With ``--missed`` the pools are built before the first
    judge call and each judge grades them beside the other dimensions (``run_audit``'s ``alongside``, within the one
    ``--concurrency`` bound), so the judges never wait on the pooling nor on one batch's last calls; a pool that
    cannot be built (a dense model that does not load) fails before any call."""
    from convrag.audit.report import cautions, coverage, empty_dimensions, heatmap, render, summarize
    from convrag.audit.runner import estimate, make_judges, parse_dimensions, run_audit, write_verdicts
    from convrag.benchmarks.recor.judges_tables import apply_profile, domain_table
    from convrag.core.out_folder import check_not_input, claim_out, locked
    from convrag.core.progress import wanted
    from convrag.hub.repo import resolve_folder
    from convrag.judging.items import load_items
    from convrag.llm.identity import describe
    from convrag.llm.spec import PLACEHOLDER_WARNING, REAL_MODEL_HINT, SPEC_ENV, is_placeholder
    from convrag.synthesis.engine.pipeline import write_json_atomic

    dimensions = parse_dimensions(args.dimensions)
    # completeness shows each item's whole candidate pool (the authors' reading) unless --profile convrag asks for
    # our earlier one (the gold and the first --negatives pool documents)
    whole_pool = getattr(args, "profile", "authors") != "convrag"
    profile = getattr(args, "profile", "authors")  # RECOR judges' readings (convrag.judging.recor_profile)
    specs = args.judge or [os.environ.get(SPEC_ENV) or "default"]
    for flag, value in (("--concurrency", args.concurrency), ("--negatives", args.negatives),
                        ("--pool-depth", args.pool_depth)):
        if value < 1:
            raise ConvragError(f"{flag} must be at least 1, got {value}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConvragError(f"{out}: --out names a file, not a folder")
    args.folders = [str(resolve_folder(f)) for f in args.folders]  # Hub repo ids -> their cached snapshots
    sets = [load_items(f, split=args.split, sample=args.sample, seed=args.seed) for f in args.folders]
    names = [s.benchmark for s in sets]
    for audit_set in sets:  # two folders of one benchmark: tell them apart by folder name everywhere
        if names.count(audit_set.benchmark) > 1:
            audit_set.benchmark = f"{audit_set.benchmark}:{audit_set.folder.name}"
    if len({s.benchmark for s in sets}) != len(sets):
        raise ConvragError("two folders have the same benchmark and folder name; give folders distinct names")
    if args.dry_run:
        check_not_input(out, args.folders)
        print(f"Dry run: {', '.join(dimensions)}; nothing is called or written.")
        print(f"{'folder':<28} {'judge':<36} {'calls':>8} {'prompt tok':>12} {'output tok':>11} {'cost':>10}")
        for audit_set in sets:
            for row in estimate(audit_set, specs, dimensions, seed=args.seed, negatives=args.negatives,
                                whole_pool=whole_pool, profile=profile):
                cost = "unpriced" if row["cost_usd"] is None else f"${row['cost_usd']:.4f}"
                print(f"{audit_set.benchmark:<28} {row['judge']:<36} {row['calls']:>8,} {row['prompt_tokens']:>12,} "
                      f"{row['completion_tokens']:>11,} {cost:>10}")
        for spec in dict.fromkeys(specs):
            print(f"Judge {spec.split(';')[0]}: {describe(spec).label}")
        print("Tokens are the real prompts' characters / 4 and 150 output tokens per call."
              + (" The --missed relevance calls (one per pooled unlabelled document and per labelled document of "
                 "each turn) are not included." if args.missed else ""))
        return 0
    check_not_input(out, args.folders)
    judges = make_judges(specs, args.cache, args.concurrency)  # a judge that cannot be made leaves no --out behind
    pools = _missed_pools(args, sets) if args.missed else [None] * len(sets)  # before any judge call (docstring)
    # one audit at a time writes --out: a second one is refused instead of colliding on the temporary files
    with locked(Path(out).expanduser().absolute(), "convrag audit"):
        identity = " + ".join(f"{s.benchmark} at {s.folder.resolve()}" for s in sets)
        claim_out(out, args.folders, "audit", identity=identity, overwrite=args.overwrite)
        progress = wanted(args.no_progress)
        runs = [run_audit(s, judges, dimensions, seed=args.seed, negatives=args.negatives, whole_pool=whole_pool,
                          concurrency=args.concurrency, progress=progress, profile=profile,
                          alongside=_missed_estimator(s, pooled, args.concurrency))
                for s, pooled in zip(sets, pools, strict=True)]
        missed = [(run.audit_set, pooled, report) for run, pooled in zip(runs, pools, strict=True)
                  if pooled is not None for report in run.alongside]
        staged: dict[str, Path] = {}  # every output is written under a temporary name, then renamed into place
        try:
            n = write_verdicts(_staged(out, "verdicts.jsonl", staged), runs)
            summary = summarize(runs)
            apply_profile(summary, profile)  # records the profile; label entropy as the profile divides it
            cover = coverage(runs, dimensions)
            summary.update(dimensions=dimensions, judges=specs, sample=args.sample, seed=args.seed,
                           negatives=args.negatives, completeness_pool="whole" if whole_pool else "first-k",
                           judge_models=[describe(j).to_dict() for j in judges],
                           llm={j.spec: j.report.to_dict() for j in judges}, coverage=cover)
            empty = empty_dimensions(cover)
            if args.missed:
                summary["missed"] = _write_missed(missed, out, staged)
                summary["llm"] = {j.spec: j.report.to_dict() for j in judges}  # the estimate's calls included
                empty += [f"the missed-relevant estimate {stem} ({m['candidates']} candidates: {m['failed']} failed; "
                          "calibration included, "
                          + ", ".join(f"{k} {kind}" for kind, k in sorted(m["failures"].items())) + ")"
                          for stem, m in summary["missed"].items() if m["candidates"] and not m["judged"]]
            failed = f"no usable verdict for {'; '.join(empty)}" if empty else None
            summary = {"complete": not empty, **({"incomplete": failed} if failed else {}), **summary}
            text = render(summary) + domain_table(summary)
            _staged(out, "summary.md", staged).write_text(text, encoding="utf-8")
            plot = heatmap(summary, _staged(out, "heatmap.png", staged))
            if plot is None:  # no score to draw
                del staged["heatmap.png"]
            summary["files"] = ["summary.json", *staged]  # what a later audit into this folder may remove
            write_json_atomic(_staged(out, "summary.json", staged), summary)
        except BaseException:
            for path in staged.values():
                path.unlink(missing_ok=True)
            raise
        removed = _commit(out, staged)
    print(text)
    print(f"Wrote {out}/verdicts.jsonl ({n:,} verdicts), summary.json, summary.md" + (", heatmap.png" if plot else ""))
    for judge in judges:  # calls, tokens, cost and the requests in flight against --concurrency
        print(f"Judge {judge.spec}: {judge.report.summary()}")
    if removed:
        print(f"Removed the earlier audit's {', '.join(removed)} (not written by this run)")
    for line in cautions(summary):
        print(f"convrag audit: warning: {line}", file=sys.stderr)
    if any(is_placeholder(j) for j in judges):
        print(f"\nWarning: {PLACEHOLDER_WARNING}. To measure, {REAL_MODEL_HINT.replace('point it', 'point --judge')}.")
    if failed:
        raise EmptyResult(f"{failed}; the outputs in {out} are marked incomplete")
    return 0


#: names of the files an audit writes into --out (the only ones a later audit may remove there)
_OUTPUT = re.compile(r"verdicts\.jsonl|summary\.(json|md)|heatmap\.png|suspected-qrels-.+\.trec"
                     r"|missed-verdicts-.+\.jsonl|rescored-.+\.md")
_TMP = ".convrag-tmp-"


def _staged(out: Path, name: str, staged: dict[str, Path]) -> Path:
    """The temporary path the output ``name`` is written to (recorded in ``staged``: final name -> path)."""
    staged[name] = out / f"{_TMP}{name}"
    return staged[name]


def _commit(out: Path, staged: dict[str, Path]) -> list[str]:
    """Rename every staged output into place, then remove the outputs the earlier audit in ``out`` wrote (its
    summary.json's ``files``) that this one did not; returns the names removed. Other files are left alone."""
    try:
        earlier = json.loads((out / "summary.json").read_text(encoding="utf-8")).get("files") or []
    except (OSError, ValueError, AttributeError):
        earlier = []
    stale = sorted({n for n in earlier if isinstance(n, str) and _OUTPUT.fullmatch(n) and "/" not in n
                    and n not in staged})
    for name, path in staged.items():
        os.replace(path, out / name)
    for name in stale:
        (out / name).unlink(missing_ok=True)
    return stale


def _missed_pools(args: argparse.Namespace, sets: list[AuditSet]) -> list[Pool | None]:
    """The ``--missed`` pool of every folder (``--pool-retrievers`` to depth ``--pool-depth``), in folder order."""
    from convrag.judging.pooling import pool

    retrievers = [r.strip() for r in args.pool_retrievers.split(",") if r.strip()]
    return [pool(audit_set, retrievers, k=args.pool_depth) for audit_set in sets]


def _missed_estimator(audit_set: AuditSet, pooled: Pool | None,
                      concurrency: int) -> Callable[[LLM], MissedReport] | None:
    """``llm -> its missed-relevant estimate of audit_set over pooled``, ``concurrency`` calls at a time, for
    :func:`~convrag.audit.runner.run_audit` to run beside the other dimensions' calls (None without a pool)."""
    if pooled is None:
        return None
    from convrag.judging.missed import estimate_missed
    from convrag.judging.pooling import LLMRelevanceJudge

    return lambda llm: estimate_missed(audit_set, pooled, LLMRelevanceJudge(llm), concurrency=concurrency)


def _write_missed(missed: list[tuple[AuditSet, Pool, MissedReport]], out: Path,
                  staged: dict[str, Path]) -> dict[str, Any]:
    """Suspected qrels, verdicts and the rescoring of every missed-relevant estimate (files staged as in
    :func:`_staged`); returns summary.json's ``missed``, keyed ``<benchmark>-<judge>``."""
    from convrag.core.jsonl import json_safe, write_jsonl_atomic
    from convrag.judging.missed import rescore, write_suspected_qrels

    result: dict[str, Any] = {}
    for audit_set, pooled, report in missed:
        stem = f"{audit_set.benchmark}-{re.sub(r'[^A-Za-z0-9._-]+', '_', report.judge)}"
        lines = write_suspected_qrels(report, _staged(out, f"suspected-qrels-{stem}.trec", staged))
        write_jsonl_atomic(_staged(out, f"missed-verdicts-{stem}.jsonl", staged),
                           [json_safe({"benchmark": audit_set.benchmark, **v.to_dict()}) for v in report.verdicts])
        table = rescore(audit_set, pooled, report)
        _staged(out, f"rescored-{stem}.md", staged).write_text(table.markdown(), encoding="utf-8")
        result[stem] = {**report.summary(), "suspected_qrels_lines": lines, "rescored": table.rows(),
                        "kendall_tau": table.tau}
        print(f"missed-relevant, {audit_set.benchmark}, {report.judge}: {report.summary()['suspected']:,} suspected "
              f"documents; share of turns with one: {report.share_with_new}; rankings tau {table.tau}")
    return result
