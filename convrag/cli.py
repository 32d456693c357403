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
DEFAULT_RETRIEVERS = "random,bm25,dense,hybrid"


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
    from convrag.metrics.retrieval.trec import read_run, safe_token, write_run

    manifest = read_manifest(args.folder)
    benchmark = manifest["benchmark"]
    if benchmark in ("mtrag", "mtrag-un"):
        return _evaluate_mtrag(args, manifest)
    if benchmark == "recor":
        return _evaluate_recor(args, manifest)
    profile = PROFILES.get(benchmark, DEFAULT_PROFILE)
    data = load_views(args.folder, args.split)
    external = {name: read_run(path) for name, path in _named_files(args.run, "--run").items()}
    retrievers = _retrievers(args, DEFAULT_RETRIEVERS)
    options = _dense_options(retrievers, args.dense_model)
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
        write_run(runs[spec], out / "runs" / f"{safe_token(spec)}.trec", tag=spec)
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
    from convrag.evaluation.mtrag import evaluate_folder, render_tables, write_runs
    from convrag.metrics.retrieval.trec import read_run

    retrievers = [r for r in _retrievers(args, DEFAULT_RETRIEVERS) if r != "random"]
    options = _dense_options(retrievers, args.dense_model)
    results = evaluate_folder(
        args.folder, retrievers=retrievers, views=args.views.split(",") if args.views else None,
        corpus=args.corpus, n_bootstrap=args.bootstrap, seed=args.seed, retriever_options=options,
        submissions=_named_files(args.submission, "--submission"),
        external_runs={n: read_run(p) for n, p in _named_files(args.run, "--run").items()},
        progress=not args.no_progress,
    )  # fmt: skip
    runs = results.pop("_runs")
    results = {"benchmark": manifest["benchmark"], "build_options": manifest.get("options", {}), **results}
    report = render_tables(results, digits=args.digits)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (out / "results.md").write_text(report, encoding="utf-8")
    write_runs(runs, out / "runs")
    print(report)
    print(f"Wrote {out / 'results.json'}, {out / 'results.md'} and runs/ (TREC runs and official submission files)")
    return 0


def _retrievers(args: argparse.Namespace, default: str) -> list[str]:
    """``--retrievers`` as a list; the benchmark's default when the flag is not given."""
    return [r for r in (args.retrievers if args.retrievers is not None else default).split(",") if r]


def _dense_options(retrievers: list[str], model: str | None) -> dict[str, dict[str, Any]]:
    return {spec: {"model": model} for spec in retrievers if model and spec in ("dense", "hybrid")}


def _evaluate_recor(args: argparse.Namespace, manifest: dict[str, Any]) -> int:
    """RECOR: retrievers x query strategies, per turn, per domain, macro over domains (paper Tables 3/5/6/17/19)."""
    from convrag.evaluation.recor import evaluate_recor, render_tables, write_outputs

    retrievers = _retrievers(args, "bm25,dense")
    kwargs: dict[str, Any] = {}
    if args.strategies:
        kwargs["strategies"] = [s for s in args.strategies.split(",") if s]
    results = evaluate_recor(
        args.folder, retrievers=retrievers, llm=args.llm, n_bootstrap=args.bootstrap, seed=args.seed,
        retriever_options=_dense_options(retrievers, args.dense_model), progress=not args.no_progress,
        on_rewrite_failure="baseline" if args.rewrite_fallback else "error", **kwargs,
    )  # fmt: skip
    results = {"benchmark": "recor", "build_options": manifest.get("options", {}), **results}
    report = render_tables(results, digits=args.digits)
    write_outputs(results, args.out)
    print(report)
    print(f"Wrote {args.out}/results.json, results.md, the turn-position plot and runs/")
    return 0


def cmd_evaluate_generation(args: argparse.Namespace) -> int:
    """Score generated answers (MTRAGEval Subtasks B/C): IDK-conditioned RB_alg, RB_llm, RL_F."""
    from convrag.evaluation.generation import evaluate_generation, render_tables, write_outputs
    from convrag.metrics.generation.components import BertScorer
    from convrag.metrics.generation.io import read_responses, tasks_from_rows

    source = Path(args.source)
    if source.is_file():
        if args.predictions:
            raise ConvragError("a responses .jsonl already holds the predictions; --predictions is for a built folder")
        tasks = read_responses(source)
    elif source.is_dir():
        if not args.predictions:
            raise ConvragError("--predictions FILE is required with a built MTRAG / MTRAG-UN folder")
        import datasets

        rows = datasets.load_dataset(str(source), args.config, split=args.split).to_list()
        tasks = tasks_from_rows(rows, args.predictions, allow_missing=args.allow_missing)
    else:
        raise ConvragError(f"{source}: no such file or folder")
    judges = [j for j in args.judge.split(",") if j]
    scorer = BertScorer(model=args.bertscore_model, num_layers=args.bertscore_layers,
                        rescale_with_baseline=args.rescale)  # fmt: skip
    result = evaluate_generation(
        tasks, judge=judges[0] if len(judges) == 1 else judges, bertscore_model=scorer, mode=args.mode,
        conditioning=args.conditioning, prompts=_named_files(args.prompt, "--prompt") or None,
        metrics=tuple(m for m in args.metrics.split(",") if m), n_bootstrap=args.bootstrap, seed=args.seed,
        progress=not args.no_progress,
    )  # fmt: skip
    write_outputs(result, args.out)
    print(render_tables(result, digits=args.digits))
    print(f"Wrote {args.out}/per_task.jsonl, results.json and results.md")
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
    p.add_argument("--retrievers",
                   help=f"comma-separated retriever specs (default: {DEFAULT_RETRIEVERS}; RECOR: bm25,dense)")
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
    p.add_argument("--strategies", help="RECOR: query strategies (default: baseline,rewrite,reasoning,history,"
                                        "history+reasoning)")
    p.add_argument("--llm", default="default", help="RECOR: LLM spec for query rewriting (default: local SmolLM2)")
    p.add_argument("--rewrite-fallback", action="store_true",
                   help="RECOR: a failed rewrite uses the plain turn query (listed in the results) instead of an error")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("evaluate-generation",
                       help="score generated answers: IDK-conditioned RB_alg, RB_llm, RL_F (MTRAGEval B/C)")
    p.add_argument("source", help="built MTRAG / MTRAG-UN folder (with --predictions), or an official responses "
                                  ".jsonl that holds tasks and predictions")
    p.add_argument("--predictions", help="official submission .jsonl: task_id + predictions[0].text (+ contexts)")
    p.add_argument("--config", default="all-tasks", help="tasks config of the built folder (default: all-tasks)")
    p.add_argument("--split", default="test", help="split of the tasks config (default: test)")
    p.add_argument("--allow-missing", action="store_true",
                   help="score only the tasks that have a prediction (the others are counted); default: error")
    p.add_argument("--judge", default="default",
                   help="LLM spec of the judge; several comma-separated = median / ensemble (default: local SmolLM2)")
    p.add_argument("--bertscore-model", help="BERTScore model path or name (default: all-MiniLM-L6-v2 from its "
                                             "wheel; official: microsoft/deberta-xlarge-mnli)")
    p.add_argument("--bertscore-layers", type=int, help="BERTScore layer (needed for models bert_score does not know)")
    p.add_argument("--rescale", action="store_true", help="BERTScore baseline rescaling (official setting)")
    p.add_argument("--mode", default="official", choices=("official", "strict"),
                   help="official: judge parse failures become 0.5 (counted); strict: such tasks are excluded")
    p.add_argument("--conditioning", default="mtrag-un", choices=("mtrag-un", "semeval"),
                   help="answerability conditioning: mtrag-un (with UNDERSPECIFIED) or the earlier semeval one")
    p.add_argument("--metrics", default="rb_alg,rb_llm,rl_f", help="metrics to compute (default: all three)")
    p.add_argument("--prompt", action="append", metavar="NAME=PATH",
                   help="replace a judge prompt by a YAML file (repeatable), e.g. idk=my_idk.yaml")
    p.add_argument("--out", default="results/generation", help="output folder (default: results/generation)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for CIs (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--digits", type=int, default=4, help="decimals shown in tables (JSON is unrounded)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(func=cmd_evaluate_generation)

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
