"""The ``synthesize`` command: run or resume a synthesis pipeline (``mtr``: MTR-Pipeline; ``recor``: RECOR's
Decomposition-and-Verification), or estimate it with ``--dry-run``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from convrag.cli.arguments import NO_PROGRESS_HELP
from convrag.core.errors import ConvragError
from convrag.core.options import parse_options


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``synthesize`` on the subparsers ``sub``, with one parser (and one ``--help``) per pipeline."""
    from convrag.cli.arguments import EXAMPLES, HelpParser, examples_text

    p = sub.add_parser("synthesize", help="make a benchmark from your own data (mtr: MTR-Pipeline over a corpus; "
                                          "recor: RECOR's Decomposition-and-Verification over question-answer items)",
                       description="Run or resume a synthesis pipeline; `convrag synthesize PIPELINE --help` lists "
                                   "its options.")
    pipelines = p.add_subparsers(dest="pipeline", required=True, metavar="PIPELINE", parser_class=HelpParser)
    mtr = pipelines.add_parser("mtr", help="MTR-Suite's MTR-Pipeline over a corpus (curate, cluster, converse, polish, "
                                           "assemble) -> an MTR-Bench-shaped benchmark",
                               formatter_class=argparse.RawDescriptionHelpFormatter,
                               epilog=examples_text(EXAMPLES["synthesize mtr"]))
    mtr.add_argument("--corpus", metavar="SOURCE",
                     help="the corpus (needed by the curate stage): a JSONL / Parquet file (_id or id, title, "
                          "text), a folder of them, or a folder written by `convrag build` (its corpus config)")
    mtr.add_argument("--corpus-config", help="config of a built folder holding the corpus (default: its only *corpus)")
    _common(mtr, "curate,cluster,converse,polish,assemble",
            "chunk_size=1024, min_length=N, quality=heuristic, cluster_size=8, k=100, index=flat|hnsw|ivf, "
            "method=greedy|random, turns=12, conversations=1000, answer_words=N, max_history_tokens=700, "
            "switch_ratio=0.5, layout=splice|paper, test_size=1000, test_fraction=0.2")
    for role, does in (("questioner", "asks the questions"), ("responder", "answers them"),
                       ("polisher", "rewrites follow-up questions casually")):
        mtr.add_argument(f"--{role}", metavar="SPEC", help=f"LLM spec of the model that {does} (default: $CONVRAG_LLM "
                                                            "or the embedded placeholder), e.g. openai:MODEL@URL")
    mtr.add_argument("--tasks", type=int, help="datatrove tasks for curation (default 1; split big corpora in files)")
    mtr.add_argument("--workers", type=int, help="datatrove worker processes run at once (default 1)")

    recor = pipelines.add_parser("recor", help="RECOR's Decomposition-and-Verification over question-answer items "
                                               "(load, align, aspects, facts, turns, release) -> a RECOR-shaped "
                                               "benchmark", formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=examples_text(EXAMPLES["synthesize recor"]))
    recor.add_argument("--input", metavar="FILE",
                       help="the question-answer items (needed by the load stage): JSONL {id, query, answer, "
                            "documents [{doc_id, text}], reasoning?, domain?, negatives?}, a BRIGHT examples file "
                            "(--option input_format=bright --option documents=BRIGHT_DOCS.jsonl) or MTRAG "
                            "conversations.json (--option input_format=mtrag --option domain=NAME)")
    _common(recor, "load,align,aspects,facts,turns,release",
            "input_format=jsonl|bright|mtrag, documents=PATH, negatives=PATH, domain=NAME, limit=N, "
            "profile=authors|convrag, threshold=N (gold-document score; default 4.0 under authors, 5.0 under "
            "convrag), max_turns=12, num_aspects=N, max_facts=5")
    recor.add_argument("--llm", metavar="SPEC", help="LLM spec of every D&V step (default: $CONVRAG_LLM or the "
                                                     "embedded placeholder), e.g. openai:MODEL@URL")
    p.set_defaults(func=cmd_synthesize)


def _common(p: argparse.ArgumentParser, stages: str, options: str) -> None:
    """The arguments both pipelines take; ``stages`` and ``options`` are the pipeline's for the help."""
    p.add_argument("--out", required=True, help="output folder; rerunning the same command resumes an interrupted run")
    p.add_argument("--stages", help=f"stages to run (default: all: {stages})")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help=f"stage option (repeatable), e.g. {options}; an unknown key lists the valid ones")
    p.add_argument("--concurrency", type=int, help="LLM requests in flight at once: conversations (or items) worked "
                   "on together, across shards (default 8)")
    p.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    p.add_argument("--redo", metavar="STAGE[,STAGE]", help="clear these stages (and the later ones) and run them again")
    p.add_argument("--dry-run", action="store_true", help="print records, LLM calls, tokens and cost; write nothing")
    p.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)


def cmd_synthesize(args: argparse.Namespace) -> int:
    """Run (or resume) a synthesis pipeline; ``--dry-run`` prints the estimates and writes nothing."""
    from convrag.core.progress import wanted
    from convrag.llm.backends.llamacpp import default_gguf_path
    from convrag.llm.spec import PLACEHOLDER_MODEL, REAL_MODEL_HINT, SPEC_ENV, is_placeholder, parse_spec
    from convrag.synthesis.engine.pipeline import format_estimates, format_reports
    from convrag.synthesis.engine.run_folder import check_run_folder, claim_run_folder, option_paths

    options = parse_options(args.option, "--option")
    if args.pipeline == "recor":
        from convrag.synthesis.recor.pipeline import DEFAULT_STAGES, recor_pipeline

        for name in ("llm", "concurrency"):
            if getattr(args, name) is not None:
                options[name] = getattr(args, name)
        stages = [s.strip() for s in (args.stages or ",".join(DEFAULT_STAGES)).split(",") if s.strip()]
        pipeline = recor_pipeline(args.input, stages, seed=args.seed, options=options, count_items=args.dry_run)
        roles = ["llm"] if is_placeholder(options.get("llm")) and set(stages) - {"load", "release"} else []
        build_hint = f"Build it: convrag build recor --source {args.out}/release --out BUILT"
    else:
        from convrag.synthesis.mtr.pipeline import DEFAULT_STAGES, mtr_pipeline

        for name in ("tasks", "workers", "questioner", "responder", "polisher", "concurrency"):
            if getattr(args, name) is not None:
                options[name] = getattr(args, name)
        stages = [s.strip() for s in (args.stages or ",".join(DEFAULT_STAGES)).split(",") if s.strip()]
        pipeline = mtr_pipeline(args.corpus, stages, seed=args.seed, corpus_config=args.corpus_config,
                                options=options)
        roles = [r for r, stage in (("questioner", "converse"), ("responder", "converse"), ("polisher", "polish"))
                 if stage in stages and is_placeholder(options.get(r))]
        build_hint = f"Build it: convrag build mtr-bench --source {args.out}/assemble --out BUILT"
    for path in pipeline.input_files():
        _check_not_blank(Path(path))
    progress = wanted(args.no_progress)
    # the run's inputs (an error naming a missing one) never become its output; --dry-run only checks
    corpus, items = getattr(args, "corpus", None), getattr(args, "input", None)
    inputs = [corpus, items, *option_paths(options), *pipeline.input_files()]
    folder = (f"synthesize {args.pipeline}", pipeline.name, [corpus])
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


def _check_not_blank(path: Path) -> None:
    """Refuse an input text file (JSONL, JSON, text; gzipped ones are read by the stages) that holds nothing but
    white space: bad input, one line naming it, before any stage runs."""
    if not path.is_file() or path.suffix not in (".jsonl", ".json", ".txt"):
        return
    with path.open("rb") as f:
        while chunk := f.read(1 << 16):
            if chunk.strip():
                return
    raise ConvragError(f"{path}: the file is empty (no record in it): nothing to synthesize from")
