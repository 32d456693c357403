"""``convrag evaluate-generation`` on a built folder whose evaluation profile has ``generation: judge`` (RECOR,
MTR-Bench): read and check every input, score (:func:`convrag.benchmarks.recor.generation.score_generation`), write
and print the tables, and print one line saying which scale and settings were used and whether the figures are
comparable with RECOR's tables (also in ``results.json`` under ``comparability``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from convrag.benchmarks.recor.generation import PROMPT, read_benchmark, read_predictions, score_generation
from convrag.benchmarks.recor.generation_profile import DEFAULT_PROFILE, authors_bertscorer, get_profile
from convrag.core.errors import ConvragError


def make_lexical(metrics: Sequence[str], profile: str, args: Any) -> Any:
    """The lexical scorer: ROUGE-L stemmed under ``authors``; BERTScore from ``--bertscore-model`` /
    ``--bertscore-layers`` / ``--rescale`` when given, else the profile's (authors: roberta-large rescaled when
    it loads offline, else all-MiniLM-L6-v2 unrescaled; convrag: all-MiniLM-L6-v2 unrescaled)."""
    from convrag.evaluation.lexical import LexicalScorer
    from convrag.metrics.generation.components import BertScorer

    prof = get_profile(profile)
    bert = None
    if "bertscore" in metrics:
        if args.bertscore_model or args.bertscore_layers or args.rescale:
            bert = BertScorer(model=args.bertscore_model, num_layers=args.bertscore_layers,
                              rescale_with_baseline=args.rescale)  # fmt: skip
        elif prof.name == "authors":
            bert = authors_bertscorer()
    return LexicalScorer(metrics, bertscorer=bert, stem=prof.stem)


def run_command(args: Any, judges: Sequence[str]) -> int:
    """``convrag evaluate-generation`` for a judge-scored built folder: every input is read and checked before the
    first judge call; nothing is written unless scoring succeeds."""
    from convrag.benchmarks.recor.generation_tables import cautions, render_tables, write_outputs
    from convrag.core.progress import wanted
    from convrag.evaluation.lexical import parse_metrics
    from convrag.llm import get_llm
    from convrag.llm.spec import PLACEHOLDER_WARNING, REAL_MODEL_HINT, is_placeholder

    profile = get_profile(getattr(args, "profile", None) or DEFAULT_PROFILE).name
    if not args.predictions:
        raise ConvragError("--predictions FILE is required (one per generator x mode; repeat the flag)")
    if getattr(args, "prompt", None):
        raise ConvragError(f"--prompt replaces MTRAG judge prompts; to change this benchmark's judge prompt, put a "
                           f"{PROMPT}.yaml in a folder on $CONVRAG_PROMPTS_PATH")  # fmt: skip
    for flag, value in (("--concurrency", args.concurrency), ("--max-tokens", args.max_tokens)):
        if value < 1:
            raise ConvragError(f"{flag} must be at least 1, got {value}")
    try:
        metrics = parse_metrics(args.lexical) if args.lexical else ()
    except ValueError as err:
        raise ConvragError(f"--lexical: {err}") from None
    if args.run is not None and not Path(args.run).is_file():
        raise ConvragError(f"--run {args.run}: no such file")
    if len(set(args.predictions)) != len(args.predictions):
        raise ConvragError("the same --predictions file is given twice")
    bench = read_benchmark(args.source, split=args.split)
    files = [read_predictions(p, bench, allow_missing=args.allow_missing) for p in args.predictions]
    pairs = [(f.generator, f.mode) for f in files]
    twice = sorted({p for p in pairs if pairs.count(p) > 1})
    if twice:
        raise ConvragError(f"two predictions files hold generator {twice[0][0]!r} in mode {twice[0][1]!r}")
    lexical = make_lexical(metrics, profile, args) if metrics else None
    llms = [get_llm(j, max_concurrency=args.concurrency, **({"cache": args.cache} if args.cache else {}))
            for j in judges]  # fmt: skip
    result = score_generation(bench, files, llms, lexical=lexical, run=args.run, concurrency=args.concurrency,
                              max_tokens=args.max_tokens, progress=wanted(args.no_progress),
                              profile=profile)  # fmt: skip
    write_outputs(result, args.out, digits=args.digits)
    print(render_tables(result, digits=args.digits, settings_line=False))
    for spec, llm in zip(judges, llms, strict=True):
        print(f"{spec}: {llm.report.summary()}")
    print(f"Wrote {args.out}/per_turn.jsonl, results.json, results.md and llm_report.json")
    if any(is_placeholder(j) for j in judges):
        print(f"\nWarning: {PLACEHOLDER_WARNING}. To measure, {REAL_MODEL_HINT.replace('point it', 'point --judge')}.")
    print(result["summary"]["comparability"]["line"])
    for line in cautions(result["summary"]):
        print(f"convrag evaluate-generation: warning: {line}", file=sys.stderr)
    return 0
