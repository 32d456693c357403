"""The ``convrag`` command: build, push, evaluate, synthesize, audit and list benchmarks.

Each subcommand has its own ``--help``. Errors in user input end with a one-line message and exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from convrag.cli.arguments import llm_defaults_skipped, skipped_line
from convrag.retrievers.strategies import check_strategies
from convrag.retrievers.registry import check_retrievers
from convrag.hub.naming import RESULTS, default_out
from convrag.core.options import NAME_EQ, name_value_pairs, parse_options
from convrag.cli.embed import add_parser as add_embed_parser
from convrag.retrievers.embed import resolve_device
from convrag.core.errors import ConvragError, EmptyResult
from convrag.generate.command import add_parser as add_generate_parser
from convrag.hub.spaces import add_parser as add_space_parser


def _parse_sources(values: list[str] | None) -> str | dict[str, str] | None:
    """``--source PATH`` once, or ``--source name=PATH`` any number of times."""
    if not values:
        return None
    named = [NAME_EQ.match(v) for v in values]
    if all(named):
        return {m.group(1): m.group(2) for m in named if m}
    if len(values) == 1:
        return values[0]
    raise ConvragError("give one --source PATH, or several --source name=PATH")


def cmd_build(args: argparse.Namespace) -> int:
    """Build a benchmark; ``--option`` values go as text to the exporter, which types them per option.
    SIGTERM ends the build like Ctrl-C (its temporary folder is removed, ``--out`` left as it was); progress
    bars are shown only on a terminal (or with CONVRAG_PROGRESS=1)."""
    import signal
    import threading

    import datasets

    from convrag.hub.export import export_benchmark
    from convrag.core.progress import wanted

    options: dict[str, Any] = dict(name_value_pairs(args.option, "--option", "key=value"))
    source = _parse_sources(args.source)
    if source is not None:
        options["source"] = source
    trap = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum)) if trap else None
    quiet = not wanted() and datasets.is_progress_bar_enabled()  # no progress bars in logs
    if quiet:
        datasets.disable_progress_bars()
    try:
        summary = export_benchmark(args.benchmark, args.out, configs=args.config, options=options,
                                   overwrite=args.overwrite)  # fmt: skip
    finally:
        if trap:
            signal.signal(signal.SIGTERM, previous or signal.SIG_DFL)
        if quiet:
            datasets.enable_progress_bars()
    print(f"Wrote {summary.out_dir} ({args.benchmark})\n\n{summary.table()}")
    if summary.report.get("counts"):
        print("\nBuild report:")
        for event, count in summary.report["counts"].items():
            examples = [str(e)[:60] for e in summary.report.get("examples", {}).get(event, [])[:3]]
            more = ", ..." if count > len(examples) else ""
            print(f"  {event}: {count}" + (f" (e.g. {', '.join(examples)}{more})" if examples else ""))
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    """Upload a built folder to a Hub dataset repo (every failure is one line, exit 2)."""
    from convrag.hub.repo import push_folder

    url = push_folder(args.folder, args.repo, private=args.private)
    print(f"Pushed {args.folder} to {args.repo}: {url}\nRead it back with load_dataset({args.repo!r}, CONFIG), or "
          f"evaluate it with `convrag evaluate {args.repo}`")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Write a built folder (or Hub repo) as BEIR or TREC files; prints the files and their row counts."""
    from convrag.hub.formats import export_folder

    print("\n".join(export_folder(args.folder, args.format, args.out, overwrite=args.overwrite).lines()))
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Evaluate a built folder as the evaluation profile in its README says (one path for every benchmark).

    Every argument, run and submission is checked before any retriever runs, and nothing is written on an error.
    """
    from convrag.builders.profile import profile_of
    from convrag.evaluate.report import evaluate_folder, render, write_outputs
    from convrag.evaluation.rerank import parse_reranks
    from convrag.hub.repo import resolve_source
    from convrag.core.manifest import read_manifest
    from convrag.core.out_folder import claimed_out
    from convrag.core.progress import datasets_bars, wanted
    from convrag.core.progress import scope as progress_scope

    folder, source = resolve_source(args.folder)  # source: the repo id and revision, or the folder's relative path
    args.folder = str(folder)
    for flag, value, least in (("--top-k", args.top_k, 1), ("--bootstrap", args.bootstrap, 0),
                               ("--digits", args.digits, 0), ("--batch-size", args.batch_size, 1),
                               ("--concurrency", args.concurrency, 1)):  # fmt: skip
        if value is not None and value < least:
            raise ConvragError(f"{flag} must be at least {least}, got {value}")
    if args.strategies is not None and args.views is not None:
        raise ConvragError("--views is an alias of --strategies: give one of them")
    if args.out is None:
        args.out = str(default_out([args.folder], "evaluate"))
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise ConvragError(f"{args.out}: --out names a file, not a folder")
    named = [v.split("=", 1)[0] for v in (args.run or []) + (args.submission or [])]
    twice = sorted({n for n in named if named.count(n) > 1})
    if twice:
        raise ConvragError(f"--run / --submission NAME {twice[0]!r} is given twice: give each file its own NAME")
    manifest = read_manifest(args.folder)
    profile = profile_of(manifest, source=str(Path(args.folder) / "README.md"))
    from convrag.retrievers.registry import split_specs

    retrievers = split_specs(args.retrievers) if args.retrievers is not None else list(profile.retrievers)
    strategies = args.strategies if args.strategies is not None else args.views
    check_retrievers(retrievers, "--retrievers")
    reranks = parse_reranks(args.rerank)
    reranked = next((n for n in named if any(r.system(s) == n for r in reranks for s in retrievers)), None)
    if reranked is not None:
        raise ConvragError(f"--run / --submission NAME {reranked!r} is also a reranked system's name: rename it")
    if strategies is not None:
        check_strategies(_split_list(strategies), "--strategies" if args.strategies is not None else "--views", profile)
    declared, skipped = profile, llm_defaults_skipped(profile, strategies, args.llm)
    if skipped:
        from convrag.retrievers.strategies import without_llm_defaults

        profile = without_llm_defaults(profile)
    dense_options = parse_options(args.dense_option, "--dense-option")
    encoder = {"device": resolve_device(args.device), "batch_size": args.batch_size, "cache_dir": args.embeddings_cache}
    dense_options.update({k: v for k, v in encoder.items() if v is not None})
    progress = wanted(args.no_progress)
    external_runs = name_value_pairs(args.run, "--run")
    submissions = name_value_pairs(args.submission, "--submission")
    inputs = [args.folder, *external_runs.values(), *submissions.values(), args.dense_model,
              *(r.target for r in reranks if r.kind == "cross-encoder")]
    with claimed_out(args.out, inputs, "evaluate") as out:  # never a user's own folder, never over an input
        with progress_scope(manifest["benchmark"]), datasets_bars(progress):
            results, scored = evaluate_folder(
                args.folder, profile, external_runs=external_runs, submissions=submissions,
                n_bootstrap=args.bootstrap, seed=args.seed,
                retrievers=retrievers, strategies=_split_list(strategies) if strategies is not None else None,
                measures=_split_list(args.measures) if args.measures else None, split=args.split,
                corpus=args.corpus, search=args.search, llm=_bounded_llm(args.llm, args.concurrency),
                on_rewrite_failure="baseline" if args.rewrite_fallback else "error",
                retriever_options=_dense_options(retrievers, args.dense_model, dense_options),
                top_k=args.top_k, progress=progress, rerank=reranks, rerank_device=encoder["device"],
            )  # fmt: skip
        results = {"benchmark": manifest["benchmark"], "build_options": manifest.get("options", {}), **results,
                   "source": source}  # fmt: skip
        if skipped:  # the README's profile as declared; which of its default strategies did not run, and why
            results["profile"] = declared.to_dict()
            results["strategies_skipped"] = {"names": skipped, "reason": "LLM strategies run only with --llm or "
                                             "$CONVRAG_LLM (else they would call the embedded placeholder)"}
        write_outputs(results, scored, out, digits=args.digits)
    print(render(results, profile, digits=args.digits))
    print(f"Wrote {Path(args.out) / 'results.json'}, results.md and runs/ (TREC run files)")
    warnings = [results["llm"]["note"]] if results.get("llm") and results["llm"]["placeholder"] else []
    for name, c in results["coverage"].items():
        if c["missing"]:
            warnings.append(f"{name} ranks {c['ranked']} of {c['queries']} queries (see Coverage)")
        warnings += [f"{name}: {w}" for w in c.get("warnings", [])]
    for line in warnings:
        print(f"convrag evaluate: warning: {line.removeprefix('WARNING: ')}", file=sys.stderr)
    if skipped:
        print(skipped_line(declared, skipped), file=sys.stderr)
    return 0


def _bounded_llm(spec: str | None, concurrency: int | None) -> str | None:
    """The LLM spec of evaluate's LLM strategies and ``llm@K`` reranking with ``--concurrency`` as its bound on
    requests in flight (``max_concurrency``; a spec that sets its own keeps it); ``spec`` unchanged without one."""
    if concurrency is None:
        return spec
    import os

    from convrag.llm.spec import SPEC_ENV

    spec = spec or os.environ.get(SPEC_ENV) or "default"
    return spec if "max_concurrency=" in spec else f"{spec};max_concurrency={concurrency}"


def _split_list(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


#: --device / --batch-size / --embeddings-cache and the --dense-option keys that a ``dual:`` retriever takes too.
_DUAL_SHARED = ("device", "batch_size", "cache_dir", "pooling", "max_seq_length", "fit_queries")


def _dense_options(retrievers: list[str], model: str | None, options: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Options of the dense encoder for every retriever that has one (``dense``, ``hybrid``, ``rrf``, ``dual``)."""
    out: dict[str, dict[str, Any]] = {}
    for spec in retrievers:
        name = spec.split(":", 1)[0]
        if name == "dense":
            out[spec] = {**({"model": model} if model and ":" not in spec else {}), **options}
        elif name == "hybrid":
            out[spec] = {**({"model": model} if model and ":" not in spec else {}),
                         **({"dense_options": options} if options else {})}  # fmt: skip
        elif name == "rrf" and options:  # its dense and hybrid components
            out[spec] = {"dense_options": options}
        elif name == "dual":  # the options both encoders take (similarity, query_format: Python API)
            out[spec] = {k: v for k, v in options.items() if k in _DUAL_SHARED}
    return {k: v for k, v in out.items() if v}


def cmd_evaluate_generation(args: argparse.Namespace) -> int:
    """Score generated answers (MTRAGEval Subtasks B/C): IDK-conditioned RB_alg, RB_llm, RL_F. The judge is chosen
    explicitly (``--judge`` or ``$CONVRAG_LLM``); nothing is written unless scoring succeeds, and only into a
    results folder of this command that holds no input (:func:`convrag.core.out_folder.claimed_out`)."""
    import os

    from convrag.evaluate.generation import evaluate_generation, read_built_tasks, render_tables, write_outputs
    from convrag.hub.repo import names_hub_repo, resolve_folder
    from convrag.llm.spec import PLACEHOLDER_WARNING, REAL_MODEL_HINT, SPEC_ENV, is_placeholder
    from convrag.metrics.generation.components import BertScorer
    from convrag.metrics.generation.io import read_responses
    from convrag.metrics.generation.scorer import METRICS
    from convrag.core.out_folder import claimed_out, unnested
    from convrag.core.progress import wanted

    metrics = list(dict.fromkeys(m.lower() for m in _split_list(args.metrics)))
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ConvragError(f"--metrics: unknown metric {unknown[0]!r}; known: {', '.join(METRICS)}")
    if names_hub_repo(args.source):
        args.source = str(resolve_folder(args.source))
    spec = args.judge or os.environ.get(SPEC_ENV) or ""
    judges = [j.strip() for j in spec.split(",") if j.strip()]
    if not judges:
        raise ConvragError(f"no judge chosen: pass --judge SPEC (or set ${SPEC_ENV}); {REAL_MODEL_HINT}. "
                           "--judge default runs the embedded SmolLM2-135M placeholder, which only shows that the "
                           "plumbing works")  # fmt: skip
    source = Path(args.source)
    if args.out is None:  # a responses .jsonl is MTRAG's official format
        args.out = str(default_out([args.source], "evaluate-generation") if source.is_dir()
                       else unnested(RESULTS / "mtrag" / f"{source.stem}-evaluate-generation"))  # fmt: skip
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConvragError(f"--out {out}: exists and is not a folder")
    inputs = [args.source, *(args.predictions or []), args.run, args.bertscore_model,
              *(v.split("=", 1)[-1] for v in args.prompt or [])]
    with claimed_out(out, inputs, "evaluate-generation"):
        if source.is_dir() and _generation_scheme(source) == "judge":  # RECOR / MTR-Bench: five-dimension judge
            from convrag.benchmarks.recor.generation_command import run_command

            return run_command(args, judges)
        if args.predictions and len(args.predictions) > 1:
            raise ConvragError("a built MTRAG / MTRAG-UN folder takes exactly one --predictions file")
        if source.is_file():
            if args.predictions:
                raise ConvragError("a responses .jsonl already holds the predictions; --predictions is for a built "
                                   "folder")  # fmt: skip
            tasks = read_responses(str(source))
        elif source.is_dir():
            if not args.predictions:
                raise ConvragError("--predictions FILE is required with a built MTRAG / MTRAG-UN folder")
            tasks = read_built_tasks(source, args.predictions[0], args.config, args.split, args.allow_missing)
        else:
            raise ConvragError(f"{source}: no such file or folder")
        scorer = BertScorer(model=args.bertscore_model, num_layers=args.bertscore_layers,
                            rescale_with_baseline=args.rescale)  # fmt: skip
        result = evaluate_generation(
            tasks, judge=judges[0] if len(judges) == 1 else judges, bertscore_model=scorer, mode=args.mode,
            conditioning=args.conditioning, prompts=name_value_pairs(args.prompt, "--prompt") or None,
            metrics=tuple(metrics), n_bootstrap=args.bootstrap, seed=args.seed,
            progress=wanted(args.no_progress), concurrency=args.concurrency,
        )  # fmt: skip
        write_outputs(result, out)
    print(render_tables(result, digits=args.digits))
    print(f"Wrote {out}/per_task.jsonl, results.json and results.md")
    if any(is_placeholder(j) for j in judges):
        print(f"\nWarning: {PLACEHOLDER_WARNING}. To measure, {REAL_MODEL_HINT.replace('point it', 'point --judge')}.")
    return 0


def _generation_scheme(folder: Path) -> str | None:
    """The ``generation`` field of a built folder's evaluation profile; None when the folder has none readable
    (the MTRAG path then reports what is wrong)."""
    from convrag.builders.profile import profile_of
    from convrag.core.manifest import read_manifest

    try:
        return profile_of(read_manifest(folder), source=str(folder / "README.md")).generation
    except ConvragError:
        return None


def cmd_synthesize(args: argparse.Namespace) -> int:
    """Run (or resume) a synthesis pipeline; ``--dry-run`` prints the estimates and writes nothing."""
    from convrag.llm.backends.llamacpp import default_gguf_path
    from convrag.llm.spec import PLACEHOLDER_MODEL, REAL_MODEL_HINT, SPEC_ENV, is_placeholder, parse_spec
    from convrag.core.progress import wanted
    from convrag.synthesis.engine.pipeline import format_estimates, format_reports
    from convrag.synthesis.engine.run_folder import check_run_folder, claim_run_folder, option_paths

    options = parse_options(args.option, "--option")
    if args.pipeline == "recor":
        from convrag.synthesis.recor.pipeline import DEFAULT_STAGES, recor_pipeline

        if args.corpus or args.corpus_config:
            raise ConvragError("synthesize recor reads question-answer items: give --input FILE, not --corpus")
        for name in ("llm", "concurrency"):
            if getattr(args, name) is not None:
                options[name] = getattr(args, name)
        stages = [s.strip() for s in (args.stages or ",".join(DEFAULT_STAGES)).split(",") if s.strip()]
        pipeline = recor_pipeline(args.input, stages, seed=args.seed, options=options, count_items=args.dry_run)
        roles = ["llm"] if is_placeholder(options.get("llm")) and set(stages) - {"load", "release"} else []
        build_hint = f"Build it: convrag build recor --source {args.out}/release --out BUILT"
    else:
        from convrag.synthesis.mtr.pipeline import DEFAULT_STAGES, mtr_pipeline

        if args.input or args.llm:
            raise ConvragError("--input and --llm are options of synthesize recor; the MTR pipeline takes --corpus "
                               "and --questioner / --responder / --polisher")
        for name in ("tasks", "workers", "questioner", "responder", "polisher", "concurrency"):
            if getattr(args, name) is not None:
                options[name] = getattr(args, name)
        stages = [s.strip() for s in (args.stages or ",".join(DEFAULT_STAGES)).split(",") if s.strip()]
        pipeline = mtr_pipeline(args.corpus, stages, seed=args.seed, corpus_config=args.corpus_config,
                                options=options)
        roles = [r for r, stage in (("questioner", "converse"), ("responder", "converse"), ("polisher", "polish"))
                 if stage in stages and is_placeholder(options.get(r))]
        build_hint = f"Build it: convrag build mtr-bench --source {args.out}/assemble --out BUILT"
    progress = wanted(args.no_progress)
    # the run's inputs (an error naming a missing one) never become its output; --dry-run only checks
    inputs = [args.corpus, args.input, *option_paths(options), *pipeline.input_files()]
    folder = (f"synthesize {args.pipeline}", pipeline.name, [args.corpus])
    if args.dry_run:
        check_run_folder(args.out, inputs, *folder)
        print(f"Dry run of {pipeline.name} ({', '.join(s.name for s in pipeline.stages)}): nothing is written.")
        print(format_estimates(pipeline.estimate(args.out)))
        return 0
    if any(parse_spec(options.get(r) or os.environ.get(SPEC_ENV) or "default").kind == "default" for r in roles):
        default_gguf_path()  # the placeholder is needed: say what to install before any stage runs
    claim_run_folder(args.out, inputs, *folder)
    redo = [s.strip() for s in (args.redo or "").split(",") if s.strip()]
    reports = pipeline.run(args.out, redo=redo, progress=progress, on_note=lambda line: print(line, flush=True),
                           on_stage=lambda r: print(format_reports([r]), flush=True))
    print(f"Wrote {args.out} ({', '.join(r.stage for r in reports)}); parameters in {args.out}/<stage>/params.json")
    if stages[-1] in ("assemble", "release"):
        print(build_hint)
    if roles:
        print(f"\nWarning: the {', '.join(roles)} ran on the embedded {PLACEHOLDER_MODEL} placeholder: these "
              f"conversations only show that the plumbing works, they are not a benchmark. "
              f"{REAL_MODEL_HINT.replace('point it', 'Point --' + roles[0])}.")
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    """Judge the labels of built folders (MTR-Eval, RECOR's judges, missed-relevant estimate)."""
    from convrag.audit.command import run_command

    check_retrievers(_split_list(args.pool_retrievers), "--pool-retrievers")
    if args.out is None:
        args.out = str(default_out(args.folders, "audit"))
    return run_command(args)


def cmd_select(args: argparse.Namespace) -> int:
    """Choose a retriever configuration for a corpus and its queries (SEARA: pool, judge, PR-AUC, search)."""
    from convrag.core.out_folder import unnested
    from convrag.seara.command import run_command

    if args.query_strategy is not None:
        check_strategies([args.query_strategy], "--query-strategy")
    if args.out is None:
        queries = Path(args.queries)
        args.out = str(default_out([args.queries], "select") if queries.is_dir()
                       else unnested(RESULTS / "custom" / f"{queries.stem}-select"))  # fmt: skip
    return run_command(args)


def cmd_list(args: argparse.Namespace) -> int:
    from convrag.builders import available
    from convrag.retrievers import available_retrievers

    print("benchmarks: " + ", ".join(available()))
    print("retrievers: " + ", ".join(available_retrievers()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from convrag.cli.arguments import NO_PROGRESS_HELP, OVERVIEW, HelpParser, add_examples
    from convrag.builders.options import options_help

    parser = HelpParser(
        prog="convrag", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Build, package, evaluate and synthesize conversational and multi-hop RAG retrieval benchmarks.",
        epilog=OVERVIEW)  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("build", help="build a benchmark into a Hub-layout folder (Parquet + README configs)",
                       epilog=options_help)
    p.add_argument("benchmark", help="registered benchmark name (see `convrag list`)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--source", action="append", metavar="PATH|NAME=PATH",
                   help="local file/folder or URL instead of the public download (repeatable as NAME=PATH)")
    p.add_argument("--config", action="append", help="build only these configs (repeatable; default: all)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="builder option (repeatable)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("push", help="upload a built folder to the Hugging Face Hub (token from HF_TOKEN)")
    p.add_argument("folder", help="folder written by `convrag build`")
    p.add_argument("--repo", required=True, metavar="ORG/NAME",
                   help="dataset repo id, created when missing (Hub: $HF_ENDPOINT, default https://huggingface.co)")
    p.add_argument("--private", action="store_true")
    p.set_defaults(func=cmd_push)

    from convrag.hub.formats import HELP as EXPORT_HELP

    p = sub.add_parser("export", help="write a built folder as BEIR or TREC files", description=EXPORT_HELP)
    p.add_argument("folder", help="folder written by `convrag build`, or Hub dataset repo id org/name[@revision]")
    p.add_argument("--format", required=True, metavar="beir|trec", help="beir or trec (see above)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (written whole, then renamed into place)")
    p.add_argument("--overwrite", action="store_true", help="replace DIR if it holds an earlier `convrag export`")
    p.set_defaults(func=cmd_export)
    add_space_parser(sub)
    add_embed_parser(sub)

    p = sub.add_parser("evaluate", help="run retrievers and query strategies on a built benchmark; write the tables")
    p.add_argument("folder", help="folder written by `convrag build` (its README declares how it is evaluated), or Hub "
                                  "dataset repo id org/name[@revision] of a pushed one")
    p.add_argument("--retrievers", help="comma-separated retriever specs (default: the benchmark's, e.g. "
                                        "StratRAG random,bm25,dense,hybrid; RECOR bm25,dense); "
                                        "dual:QUERY_MODEL,CONTEXT_MODEL keeps its comma")
    p.add_argument("--strategies", help="query strategies (default: the benchmark's, less those that call an LLM "
                                        "unless --llm or $CONVRAG_LLM is set: RECOR baseline,reasoning,history,"
                                        "history+reasoning (+rewrite); MTRAG lastturn,questions,rewrite (the human "
                                        "rewrite view, no LLM); MTR-Bench history,lastturn): names the benchmark "
                                        "defines or any of baseline, rewrite, reasoning, history, history+reasoning, "
                                        "reasoning-metadata, dialogue, dialogue+rewrite, field:NAME; a named LLM "
                                        "strategy always runs")
    p.add_argument("--views", help="alias of --strategies (MTRAG's query views)")
    p.add_argument("--measures", help="metric names instead of the benchmark's, e.g. Recall@100,Recall@1000")
    p.add_argument("--run", action="append", metavar="NAME=FILE", help="also score a TREC run file (repeatable)")
    p.add_argument("--submission", action="append", metavar="NAME=FILE",
                   help="also score an official-format submission (benchmarks that have one, e.g. MTRAG .jsonl)")
    p.add_argument("--split", help="split to evaluate (default: the benchmark's, else test, validation, dev, train)")
    p.add_argument("--corpus", default="auto",
                   help="corpus kind the benchmark declares, e.g. MTRAG full|cited, MTR-Bench full|cluster "
                        "(default auto: the first one built)")
    p.add_argument("--search", choices=("corpus", "pool"),
                   help="rank the whole corpus or only each turn's own pool (default: the benchmark's)")
    p.add_argument("--top-k", type=int, help="documents kept per query in runs (default: the benchmark's)")
    from convrag.evaluation.rerank import HELP as RERANK_HELP

    p.add_argument("--rerank", action="append", metavar="[NAME=]SPEC@K", help=RERANK_HELP)
    p.add_argument("--out", help="output folder (default: results/BENCHMARK/NAME-evaluate, BENCHMARK from the folder's "
                                 "README, NAME the folder's or repo's name)")
    p.add_argument("--dense-model", help="sentence-transformers model path or name for dense/hybrid")
    p.add_argument("--dense-option", action="append", metavar="KEY=VALUE",
                   help="dense encoder option (repeatable): pooling=cls|mean|max|lasttoken, max_seq_length=N, "
                        "query_prompt=..., document_prompt=..., query_truncation=left|right, fit_queries=false")
    p.add_argument("--device", help="dense encoding device: cpu, cuda, cuda:N, mps or auto (default auto: cuda, then "
                                    "mps, then cpu)")
    p.add_argument("--batch-size", type=int, help="dense encoding batch size (default 64)")
    p.add_argument("--embeddings-cache", metavar="DIR",
                   help="where document embeddings are kept between runs (`convrag embed` fills it; default: "
                        "$CONVRAG_EMBEDDINGS_CACHE, else ~/.cache/convrag/embeddings; none: off)")
    p.add_argument("--llm", help="LLM spec for LLM strategies (rewrite), e.g. openai:MODEL@http://HOST:8000/v1; "
                                 "with it (or $CONVRAG_LLM) the benchmark's default LLM strategies run too. An LLM "
                                 "strategy named in --strategies without either runs on the embedded SmolLM2-135M, "
                                 "which only shows the plumbing: its tables carry a warning")
    p.add_argument("--rewrite-fallback", action="store_true",
                   help="a failed rewrite uses the plain turn query (listed in the results) instead of an error")
    p.add_argument("--concurrency", type=int,
                   help="LLM requests in flight at once for the rewrite strategy and llm@K reranking (default 4)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for CIs (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="seed of bootstrap and randomisation tests")
    p.add_argument("--digits", type=int, default=4, help="decimals shown in tables (JSON is unrounded)")
    p.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("evaluate-generation",
                       help="score generated answers: IDK-conditioned RB_alg, RB_llm, RL_F (MTRAGEval B/C), or "
                            "RECOR's five-dimension LLM judge and lexical metrics (RECOR, MTR-Bench)")
    p.add_argument("source", help="built folder or Hub dataset repo id org/name[@revision] (with --predictions), or "
                                  "an official MTRAG responses .jsonl that holds tasks and predictions; the folder's "
                                  "evaluation profile picks the scheme")
    p.add_argument("--predictions", action="append",
                   help="MTRAG: the official submission .jsonl (task_id + predictions[0].text (+ contexts)), once. "
                        "RECOR / MTR-Bench: a `convrag generate` output (one generator x mode), repeatable")
    p.add_argument("--run", help="RECOR / MTR-Bench: TREC run behind the retrieved-mode answers, for nDCG@10 vs judge "
                                 "correlation (default: the FILE.run.trec `convrag generate` wrote beside a "
                                 "retrieved-mode FILE.jsonl)")
    p.add_argument("--lexical", default="rouge-l,bertscore",
                   help="RECOR / MTR-Bench: lexical metrics vs the reference answer, of rouge-l, meteor, bertscore "
                        "(default rouge-l,bertscore; '' for none). meteor is computed only where nltk's WordNet data "
                        "is installed (nltk.download('wordnet'), which needs the network), else reported as not "
                        "available")
    p.add_argument("--profile", choices=("authors", "convrag"), default="authors",
                   help="RECOR / MTR-Bench scoring: authors (default; RECOR's code: judge 1-10 / 10 with level "
                        "anchors and no history, stemmed ROUGE-L, BERTScore roberta-large rescaled where it loads "
                        "offline) or convrag (earlier readings: 1-5 as (s-1)/4 with history, unstemmed ROUGE-L)")
    p.add_argument("--cache", help="RECOR / MTR-Bench: judge cache folder (default: the LLM layer's)")
    p.add_argument("--concurrency", type=int, default=4, help="RECOR / MTR-Bench: judge calls in flight (default 4)")
    p.add_argument("--max-tokens", type=int, default=300,
                   help="RECOR / MTR-Bench: most tokens of one judge reply (default 300)")
    p.add_argument("--config", default="all-tasks", help="tasks config of the built folder (default: all-tasks)")
    p.add_argument("--split", default="test", help="split of the tasks config (default: test)")
    p.add_argument("--allow-missing", action="store_true",
                   help="score only the tasks that have a prediction (the others are counted); default: error")
    p.add_argument("--judge", help="LLM spec of the judge (required, or $CONVRAG_LLM), e.g. openai:MODEL@http://HOST:"
                                    "PORT/v1; several comma-separated = RB_llm median. 'default' = the embedded "
                                    "SmolLM2-135M placeholder: it only shows the plumbing works, its figures are "
                                    "not measurements")
    p.add_argument("--bertscore-model", help="BERTScore model path or name (default: all-MiniLM-L6-v2 from its "
                                             "wheel; official MTRAG: microsoft/deberta-xlarge-mnli; RECOR under "
                                             "--profile authors: roberta-large rescaled when it loads offline)")
    p.add_argument("--bertscore-layers", type=int, help="BERTScore layer (needed for models bert_score does not know)")
    p.add_argument("--rescale", action="store_true", help="BERTScore baseline rescaling (official setting)")
    p.add_argument("--mode", default="official", choices=("official", "strict"),
                   help="official: judge replies read exactly as IBM's scripts read them (their defaults, counted); "
                        "strict: our stricter reading, tasks with an unreadable reply excluded (counted). A failed "
                        "judge call is never scored")
    p.add_argument("--conditioning", default="mtrag-un", choices=("mtrag-un", "semeval"),
                   help="answerability conditioning: mtrag-un (with UNDERSPECIFIED) or the earlier semeval one")
    p.add_argument("--metrics", default="rb_alg,rb_llm,rl_f", help="metrics to compute (default: all three)")
    p.add_argument("--prompt", action="append", metavar="NAME=PATH",
                   help="replace a judge prompt by a YAML file (repeatable), e.g. idk=my_idk.yaml")
    p.add_argument("--out", help="output folder (default: results/BENCHMARK/NAME-evaluate-generation, NAME the "
                                 "folder's or repo's name; a responses .jsonl: results/mtrag/STEM-evaluate-generation)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for CIs (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--digits", type=int, default=4, help="decimals shown in tables (JSON is unrounded)")
    p.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)
    p.set_defaults(func=cmd_evaluate_generation)

    p = sub.add_parser("synthesize", help="make a benchmark from your own data (mtr: MTR-Pipeline over a corpus; "
                                          "recor: RECOR's Decomposition-and-Verification over question-answer items)")
    p.add_argument("pipeline", choices=("mtr", "recor"),
                   help="mtr: MTR-Suite's MTR-Pipeline (curate, cluster, converse, polish, assemble); recor: RECOR's "
                        "Decomposition-and-Verification (load, align, aspects, facts, turns, release)")
    p.add_argument("--input", metavar="FILE",
                   help="recor: the question-answer items: JSONL {id, query, answer, documents [{doc_id, text}], "
                        "reasoning?, domain?, negatives?}, a BRIGHT examples file (--option input_format=bright "
                        "--option documents=BRIGHT_DOCS.jsonl) or MTRAG conversations.json (--option "
                        "input_format=mtrag --option domain=NAME)")
    p.add_argument("--llm", metavar="SPEC", help="recor: LLM spec of every D&V step (default: $CONVRAG_LLM or the "
                                                 "embedded placeholder), e.g. openai:MODEL@URL")
    p.add_argument("--corpus", metavar="SOURCE",
                   help="the corpus: a JSONL / Parquet file (_id or id, title, text), a folder of them, or a folder "
                        "written by `convrag build` (its corpus config)")
    p.add_argument("--corpus-config", help="config of a built folder holding the corpus (default: its only *corpus)")
    p.add_argument("--out", required=True, help="output folder; rerunning the same command resumes an interrupted run")
    p.add_argument("--stages", help="stages to run (default: all of the pipeline's: mtr curate,cluster,converse,"
                                    "polish,assemble; recor load,align,aspects,facts,turns,release)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="stage option (repeatable), e.g. chunk_size=1024, quality=heuristic, cluster_size=8, k=100, "
                        "index=flat|hnsw|ivf, method=greedy|random, turns=12, conversations=1000, answer_words=N, "
                        "switch_ratio=0.5, layout=splice|paper, test_size=1000, profile=authors|convrag; recor: "
                        "input_format=jsonl|bright|mtrag, documents=PATH, negatives=PATH, domain=NAME, limit=N, "
                        "threshold=5.0, max_turns=12; an unknown key lists the valid ones")
    for role, does in (("questioner", "asks the questions"), ("responder", "answers them"),
                       ("polisher", "rewrites follow-up questions casually")):
        p.add_argument(f"--{role}", metavar="SPEC", help=f"LLM spec of the model that {does} (default: $CONVRAG_LLM "
                                                          "or the embedded placeholder), e.g. openai:MODEL@URL")
    p.add_argument("--concurrency", type=int, help="LLM requests in flight at once: conversations (or items) worked "
                   "on together, across shards (default 8)")
    p.add_argument("--tasks", type=int, help="datatrove tasks for curation (default 1; split big corpora in files)")
    p.add_argument("--workers", type=int, help="datatrove worker processes run at once (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    p.add_argument("--redo", metavar="STAGE[,STAGE]", help="clear these stages (and the later ones) and run them again")
    p.add_argument("--dry-run", action="store_true", help="print records, LLM calls, tokens and cost; write nothing")
    p.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)
    p.set_defaults(func=cmd_synthesize)

    p = sub.add_parser("audit", help="judge a built benchmark's labels (MTR-Eval, RECOR judges, missed relevant)")
    p.add_argument("folders", nargs="+", metavar="FOLDER",
                   help="folders written by `convrag build`, or Hub dataset repo ids org/name[@revision]")
    p.add_argument("--out", help="output folder: verdicts.jsonl, summary.json / .md, heatmap.png (default: "
                                 "results/BENCHMARK/NAME-audit; several folders: names joined by +)")
    p.add_argument("--judge", action="append", metavar="SPEC",
                   help="judge LLM spec (repeatable: an ensemble; default $CONVRAG_LLM or the embedded placeholder)")
    p.add_argument("--dimensions", default="all",
                   help="mtr-eval, recor, all (default) or names: completeness, query_evidence, answer_faithfulness, "
                        "answer_quality, naturalness, turn_coherence, question_quality, groundedness, "
                        "dependency_type, question_pattern")
    p.add_argument("--sample", type=int, help="judge a seeded random sample of N turns per folder")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample and of the candidate shuffles")
    p.add_argument("--split", help="split to audit (default: the benchmark's evaluation split)")
    p.add_argument("--negatives", type=int, default=7,
                   help="completeness: retrieved hard negatives beside the gold for a turn without a candidate pool, "
                        "and the least a pool is topped up to (7); a pool is shown whole, up to 16 documents")
    p.add_argument("--missed", action="store_true",
                   help="also estimate relevant documents the labels miss (pool, judge 0-3, rescore)")
    p.add_argument("--pool-retrievers", default="bm25,dense", help="retrievers pooled for --missed (bm25,dense)")
    p.add_argument("--pool-depth", type=int, default=10, help="top-k of each retriever pooled for --missed (10)")
    p.add_argument("--concurrency", type=int, default=4, help="judge calls in flight at once (4)")
    p.add_argument("--cache", help="judge cache folder (default: the LLM layer's; one sub-folder per judge)")
    p.add_argument("--dry-run", action="store_true", help="print calls, tokens and cost per judge; call nothing")
    p.add_argument("--profile", choices=("authors", "convrag"), default="authors",
                   help="the papers' authors' readings (default; RECOR judges: naturalness over the whole "
                        "conversation, quoted evidence kept, two turns of dependency context, entropy over the labels "
                        "observed; MTR-Eval Comp.: the turn's whole candidate pool, up to 16 documents) or convrag's "
                        "earlier ones (8 documents for Comp.), to reproduce older runs")
    p.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser("select", help="choose the best retriever configuration for your corpus and queries, without "
                                      "labels (SEARA: pooled LLM judgments, PR-AUC, staged / racing search)")
    p.add_argument("--space", required=True, metavar="YAML", help="strategy space: dimensions, judge, search")
    p.add_argument("--corpus", metavar="SOURCE",
                   help="JSONL / Parquet file or folder (_id or id, title, text) or a built folder (its corpus config; "
                        "default: the --queries folder)")
    p.add_argument("--corpus-config", help="config of a built folder holding the corpus (default: its only *corpus)")
    p.add_argument("--queries", required=True, metavar="SOURCE",
                   help="a .txt file (one query per line), a .jsonl file (_id, text, optional history) or a built "
                        "benchmark folder (its qrels are not read)")
    p.add_argument("--split", help="split of a built --queries folder (default: its evaluation split)")
    p.add_argument("--query-strategy", help="how a multi-turn query becomes text (default: the space's, baseline)")
    p.add_argument("--max-queries", type=int, help="use the first N queries only")
    p.add_argument("--out", help="new or empty output folder, or one `convrag select` wrote before: leaderboard, "
                                 "chosen.yaml, plots (default: "
                                 "results/BENCHMARK/NAME-select for a built --queries folder, else "
                                 "results/custom/STEM-select)")
    p.add_argument("--judge", metavar="SPEC", help="judge LLM spec (default: the space's judge.model, else "
                                                   "$CONVRAG_LLM or the embedded placeholder), or "
                                                   "oracle:EVIDENCE.jsonl to judge with labelled evidence spans "
                                                   "({query_id, evidence: [span, ...]} per line; no LLM call)")
    p.add_argument("--llm", metavar="SPEC", help="LLM spec of rewriters / rerankers that name no model "
                                                 "(default: the judge's; with an oracle judge, $CONVRAG_LLM or the "
                                                 "embedded placeholder)")
    p.add_argument("--cache", help="LLM cache folder (default: the LLM layer's)")
    p.add_argument("--max-judgments", type=int, help="refuse to judge more unique pairs than this in one pool")
    p.add_argument("--dry-run", action="store_true", help="print the configurations and the cost bounds; call nothing")
    p.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)
    p.set_defaults(func=cmd_select)

    add_generate_parser(sub)

    p = sub.add_parser("list", help="list registered benchmarks and retrievers")
    p.set_defaults(func=cmd_list)
    add_examples(sub.choices)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from convrag.metrics.retrieval.compute import RetrievalInputError
    from convrag.core.progress import plain_lines

    try:
        with plain_lines():  # stderr not a terminal: bars print a plain line every 30 s instead
            return int(args.func(args) or 0)
    except EmptyResult as err:  # the run worked through its input but produced nothing usable
        print(f"convrag {args.command}: failed: {err}", file=sys.stderr)
        return 1
    except (ConvragError, RetrievalInputError) as err:
        print(f"convrag {args.command}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a file the user named cannot be read or written: name it, no traceback
        where = f"{err.filename}: " if err.filename else ""
        print(f"convrag {args.command}: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
