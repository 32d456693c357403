"""The ``select`` command: choose a retriever configuration for a corpus and its queries (SEARA)."""

from __future__ import annotations

import argparse
from pathlib import Path

from convrag.cli.arguments import NO_PROGRESS_HELP, OVERWRITE_HELP
from convrag.hub.naming import RESULTS, default_out
from convrag.retrievers.strategies import check_strategies


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``select`` on the subparsers ``sub``."""
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
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
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
