"""The ``evaluate`` and ``evaluate-generation`` commands: parse and check the arguments, then call
:mod:`convrag.evaluate` (retrieval tables) or the generation scorers (MTRAG's, or RECOR's judges)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from convrag.cli.arguments import NO_PROGRESS_HELP, OVERWRITE_HELP, llm_defaults_skipped, skipped_line, split_list
from convrag.core.errors import ConvragError
from convrag.core.options import name_value_pairs, parse_options
from convrag.hub.naming import RESULTS, default_out
from convrag.retrievers.dense import check_dense_options
from convrag.retrievers.embed import resolve_device
from convrag.retrievers.registry import check_retrievers
from convrag.retrievers.strategies import check_strategies, without_llm_defaults


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``evaluate``, ``evaluate-generation`` on the subparsers ``sub``."""
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
                                        "reasoning-metadata, dialogue, dialogue+rewrite, conversation, field:NAME; "
                                        "a named LLM strategy always runs")
    p.add_argument("--views", help="alias of --strategies (MTRAG's query views)")
    p.add_argument("--measures", help="metric names instead of the benchmark's, e.g. Recall@100,Recall@1000 (any "
                                      "measure of the retrieval metric; MTRAG shows those beyond nDCG@k and Recall@k "
                                      "as extra columns, not official)")
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
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
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
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for CIs (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--digits", type=int, default=4, help="decimals shown in tables (JSON is unrounded)")
    p.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)
    p.set_defaults(func=cmd_evaluate_generation)


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Evaluate a built folder as the evaluation profile in its README says (one path for every benchmark).

    Every argument, run and submission is checked before any retriever runs, and nothing is written on an error.
    """
    from convrag.builders.profile import profile_of
    from convrag.core.manifest import read_manifest
    from convrag.core.out_folder import claimed_out
    from convrag.core.progress import datasets_bars, wanted
    from convrag.core.progress import scope as progress_scope
    from convrag.evaluate.report import evaluate_folder, render, write_outputs
    from convrag.evaluation.rerank import parse_reranks
    from convrag.hub.repo import resolve_source, source_label

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
    from convrag.retrievers.model_record import system_names

    systems = list(system_names(retrievers)[0].values())
    reranked = next((n for n in named if any(r.system(s) == n for r in reranks for s in systems)), None)
    if reranked is not None:
        raise ConvragError(f"--run / --submission NAME {reranked!r} is also a reranked system's name: rename it")
    if strategies is not None:
        check_strategies(split_list(strategies), "--strategies" if args.strategies is not None else "--views", profile)
    declared, skipped = profile, llm_defaults_skipped(profile, strategies, args.llm)
    if skipped:
        profile = without_llm_defaults(profile)
    dense_options = parse_options(args.dense_option, "--dense-option")
    check_dense_options(dense_options)
    encoder = {"device": resolve_device(args.device), "batch_size": args.batch_size, "cache_dir": args.embeddings_cache}
    dense_options.update({k: v for k, v in encoder.items() if v is not None})
    progress = wanted(args.no_progress)
    external_runs = name_value_pairs(args.run, "--run")
    submissions = name_value_pairs(args.submission, "--submission")
    inputs = [args.folder, *external_runs.values(), *submissions.values(), args.dense_model,
              *(r.target for r in reranks if r.kind == "cross-encoder")]
    identity = f"benchmark {manifest['benchmark']} at {source_label(folder, source)}"
    # never a user's own folder, never over an input, never over another benchmark's results without --overwrite
    with claimed_out(args.out, inputs, "evaluate", identity=identity, overwrite=args.overwrite) as out:
        with progress_scope(manifest["benchmark"]), datasets_bars(progress):
            results, scored = evaluate_folder(
                args.folder, profile, external_runs=external_runs, submissions=submissions,
                n_bootstrap=args.bootstrap, seed=args.seed,
                retrievers=retrievers, strategies=split_list(strategies) if strategies is not None else None,
                measures=split_list(args.measures) if args.measures else None, split=args.split,
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
    if results.get("extra_measures") and not results.get("official_measures"):  # MTRAG asked for extras only
        warnings.append(f"no official Subtask A measure was asked ({', '.join(results['extra_measures'])} are extra "
                        "measures): there is no official row; add nDCG@k or Recall@k for one")  # fmt: skip
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

    from convrag.llm.spec import SPEC_ENV

    spec = spec or os.environ.get(SPEC_ENV) or "default"
    return spec if "max_concurrency=" in spec else f"{spec};max_concurrency={concurrency}"


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

    from convrag.core.out_folder import claimed_out, unnested
    from convrag.core.progress import wanted
    from convrag.evaluate.generation import evaluate_generation, read_built_tasks, render_tables, write_outputs
    from convrag.hub.repo import names_hub_repo, resolve_folder
    from convrag.llm.spec import PLACEHOLDER_WARNING, REAL_MODEL_HINT, SPEC_ENV, is_placeholder
    from convrag.metrics.generation.components import BertScorer
    from convrag.metrics.generation.io import read_responses
    from convrag.metrics.generation.scorer import METRICS
    from convrag.retrievers.model_record import bertscore_record

    metrics = list(dict.fromkeys(m.lower() for m in split_list(args.metrics)))
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
    answers = ", ".join(str(Path(p).resolve()) for p in args.predictions or []) or "the answers in it"
    identity = f"{answers} on {source.resolve()}"
    with claimed_out(out, inputs, "evaluate-generation", identity=identity, overwrite=args.overwrite):
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
                            rescale_with_baseline=args.rescale, record=bertscore_record(args.bertscore_model))
        result = evaluate_generation(
            tasks, judge=judges[0] if len(judges) == 1 else judges, bertscore_model=scorer, mode=args.mode,
            conditioning=args.conditioning, prompts=name_value_pairs(args.prompt, "--prompt") or None,
            metrics=tuple(metrics), n_bootstrap=args.bootstrap, seed=args.seed,
            progress=wanted(args.no_progress), concurrency=args.concurrency,
        )  # fmt: skip
        write_outputs(result, out)
    print(render_tables(result, digits=args.digits))
    print(f"Wrote {out}/per_task.jsonl, results.json and results.md")
    flags = result["summary"]["degenerate"]["flags"]
    if flags:
        print(f"convrag evaluate-generation: warning: degenerate answers: {'; '.join(flags)}", file=sys.stderr)
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
