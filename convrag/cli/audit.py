"""The ``audit`` command: judge the labels of built folders (MTR-Eval, RECOR's judges, missed relevant)."""

from __future__ import annotations

import argparse

from convrag.cli.arguments import NO_PROGRESS_HELP, OVERWRITE_HELP, split_list
from convrag.hub.naming import default_out
from convrag.retrievers.registry import check_retrievers


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``audit`` on the subparsers ``sub``."""
    p = sub.add_parser("audit", help="judge a built benchmark's labels (MTR-Eval, RECOR judges, missed relevant)")
    p.add_argument("folders", nargs="+", metavar="FOLDER",
                   help="folders written by `convrag build`, or Hub dataset repo ids org/name[@revision]")
    p.add_argument("--out", help="output folder: verdicts.jsonl, summary.json / .md, heatmap.png (default: "
                                 "results/BENCHMARK/NAME-audit; several folders: names joined by +)")
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
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


def cmd_audit(args: argparse.Namespace) -> int:
    """Judge the labels of built folders (MTR-Eval, RECOR's judges, missed-relevant estimate)."""
    from convrag.audit.command import run_command

    check_retrievers(split_list(args.pool_retrievers), "--pool-retrievers")
    if args.out is None:
        args.out = str(default_out(args.folders, "audit"))
    return run_command(args)
