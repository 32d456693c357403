"""The ``convrag`` command: build, push, evaluate and list benchmarks.

Each subcommand has its own ``--help``. Errors in user input end with a one-line message and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from convrag.errors import ConvragError

_NAME_EQ = re.compile(r"^([A-Za-z_][\w-]*)=(.+)$")


def _parse_sources(values: list[str] | None) -> str | dict[str, str] | None:
    """``--source PATH`` once, or ``--source name=PATH`` any number of times."""
    if not values:
        return None
    named = [_NAME_EQ.match(v) for v in values]
    if all(named):
        return {m.group(1): m.group(2) for m in named if m}
    if len(values) == 1:
        return values[0]
    raise ConvragError("give one --source PATH, or several --source name=PATH")


def _parse_options(values: list[str] | None) -> dict[str, Any]:
    """``--option key=value`` pairs; values are read as YAML scalars (ints, null, true...)."""
    options: dict[str, Any] = {}
    for value in values or []:
        match = _NAME_EQ.match(value)
        if not match:
            raise ConvragError(f"--option expects key=value, got {value!r}")
        options[match.group(1)] = yaml.safe_load(match.group(2))
    return options


def cmd_build(args: argparse.Namespace) -> int:
    from convrag.export import export_benchmark

    options = _parse_options(args.option)
    source = _parse_sources(args.source)
    if source is not None:
        options["source"] = source
    summary = export_benchmark(args.benchmark, args.out, configs=args.config, options=options,
                               overwrite=args.overwrite)  # fmt: skip
    print(f"Wrote {summary.out_dir} ({args.benchmark})\n\n{summary.table()}")
    if summary.report.get("counts"):
        print("\nBuild report:")
        for event, count in summary.report["counts"].items():
            print(f"  {event}: {count}")
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    from convrag.export import push_folder

    url = push_folder(args.folder, args.repo, private=args.private)
    print(f"Pushed {args.folder} to {args.repo}: {url}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from convrag.evaluation.runner import DEFAULT_PROFILE, PROFILES, evaluate_systems, load_views
    from convrag.evaluation.tables import render_report
    from convrag.export import read_manifest
    from convrag.metrics.retrieval.trec import read_run, write_run

    manifest = read_manifest(args.folder)
    benchmark = manifest["benchmark"]
    if benchmark in ("mtrag", "mtrag-un"):
        return _evaluate_mtrag(args, manifest)
    profile = PROFILES.get(benchmark, DEFAULT_PROFILE)
    data = load_views(args.folder, args.split)
    external = {name: read_run(path) for name, path in _named_files(args.run, "--run").items()}
    retrievers = [r for r in args.retrievers.split(",") if r] if args.retrievers else []
    options: dict[str, dict[str, Any]] = {}
    if args.dense_model:
        options = {spec: {"model": args.dense_model} for spec in retrievers if spec in ("dense", "hybrid")}
    results, runs = evaluate_systems(
        data, profile, retrievers, external_runs=external, retriever_options=options,
        n_bootstrap=args.bootstrap, seed=args.seed, progress=not args.no_progress,
    )  # fmt: skip
    results = {"benchmark": benchmark, "folder": str(args.folder), "build_options": manifest.get("options", {}),
               **results}  # fmt: skip
    report = render_report(results, f"{benchmark} retrieval baselines", digits=args.digits)
    out = Path(args.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (out / "results.md").write_text(report, encoding="utf-8")
    for spec in retrievers:
        write_run(runs[spec], out / "runs" / f"{re.sub(r'[^A-Za-z0-9_.+-]', '_', spec)}.trec", tag=spec)
    print(report)
    print(f"Wrote {out / 'results.json'}, {out / 'results.md'} and runs/ (TREC run files)")
    return 0


def _named_files(values: list[str] | None, flag: str) -> dict[str, str]:
    named = {}
    for value in values or []:
        match = _NAME_EQ.match(value)
        if not match:
            raise ConvragError(f"{flag} expects NAME=FILE, got {value!r}")
        named[match.group(1)] = match.group(2)
    return named


def _evaluate_mtrag(args: argparse.Namespace, manifest: dict[str, Any]) -> int:
    """MTRAGEval Subtask A: every retriever over every query view, per domain, official + our aggregates."""
    from convrag.evaluation.mtrag import evaluate_folder, render_tables
    from convrag.metrics.retrieval.trec import read_run

    retrievers = [r for r in args.retrievers.split(",") if r and r != "random"] if args.retrievers else []
    options = {spec: {"model": args.dense_model} for spec in retrievers if spec in ("dense", "hybrid")
               and args.dense_model}  # fmt: skip
    results = evaluate_folder(
        args.folder, retrievers=retrievers, views=args.views.split(",") if args.views else None,
        corpus=args.corpus, n_bootstrap=args.bootstrap, seed=args.seed, retriever_options=options,
        submissions=_named_files(args.submission, "--submission"),
        external_runs={n: read_run(p) for n, p in _named_files(args.run, "--run").items()},
        progress=not args.no_progress,
    )  # fmt: skip
    results = {"benchmark": manifest["benchmark"], "build_options": manifest.get("options", {}), **results}
    report = render_tables(results, digits=args.digits)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (out / "results.md").write_text(report, encoding="utf-8")
    print(report)
    print(f"Wrote {out / 'results.json'} and {out / 'results.md'}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from convrag.builders import available
    from convrag.retrievers import available_retrievers

    print("benchmarks: " + ", ".join(available()))
    print("retrievers: " + ", ".join(available_retrievers()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="convrag", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("build", help="build a benchmark into a Hub-layout folder (Parquet + README configs)")
    p.add_argument("benchmark", help="registered benchmark name (see `convrag list`)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--source", action="append", metavar="PATH|NAME=PATH",
                   help="local file/folder or URL instead of the public download (repeatable as NAME=PATH)")
    p.add_argument("--config", action="append", help="build only these configs (repeatable; default: all)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="builder option (repeatable)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("push", help="upload a built folder to the Hugging Face Hub (token from HF_TOKEN)")
    p.add_argument("folder")
    p.add_argument("--repo", required=True, metavar="ORG/NAME")
    p.add_argument("--private", action="store_true")
    p.set_defaults(func=cmd_push)

    p = sub.add_parser("evaluate", help="run baseline retrievers on a built benchmark and write the results table")
    p.add_argument("folder", help="folder written by `convrag build`")
    p.add_argument("--retrievers", default="random,bm25,dense,hybrid",
                   help="comma-separated retriever specs (default: random,bm25,dense,hybrid)")
    p.add_argument("--run", action="append", metavar="NAME=FILE", help="also score a TREC run file (repeatable)")
    p.add_argument("--split", help="split to evaluate (default: test, validation, dev or train, first found)")
    p.add_argument("--out", default="results", help="output folder (default: results)")
    p.add_argument("--dense-model", help="sentence-transformers model path or name for dense/hybrid")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for CIs (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="seed of bootstrap and randomisation tests")
    p.add_argument("--digits", type=int, default=4, help="decimals shown in tables (JSON is unrounded)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.add_argument("--views", help="MTRAG: query views to run (default: all in the folder)")
    p.add_argument("--corpus", default="auto", choices=("auto", "full", "cited"),
                   help="MTRAG: full passage corpora or the cited-passage corpus (auto: full if built)")
    p.add_argument("--submission", action="append", metavar="NAME=FILE",
                   help="MTRAG: also score an official-format submission .jsonl (repeatable)")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("list", help="list registered benchmarks and retrievers")
    p.set_defaults(func=cmd_list)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from convrag.metrics.retrieval.compute import RetrievalInputError

    try:
        return int(args.func(args) or 0)
    except (ConvragError, RetrievalInputError) as err:
        print(f"convrag {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
