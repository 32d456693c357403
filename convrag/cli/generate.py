"""The ``generate`` command's arguments; :func:`convrag.generate.command.run_command` checks and runs them."""

from __future__ import annotations

import argparse
from typing import Any

from convrag.cli.arguments import OVERWRITE_HELP
from convrag.generate.command import run_command


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``generate`` on the CLI's subparsers (``sub``); the parsed arguments run :func:`run_command`."""
    from convrag.generate.answer import DEFAULT_HISTORY_CHARS, DEFAULT_MAX_TOKENS, DEFAULT_PASSAGE_CHARS

    p = sub.add_parser("generate", help="generate RAG answers for every task / turn of a built multi-turn benchmark "
                                        "(oracle, retrieved or no passages), ready for evaluate-generation")
    p.add_argument("folder", metavar="BUILT", help="folder written by `convrag build` (MTRAG, MTRAG-UN, RECOR, "
                                                   "MTR-Bench: its README says which output format), or Hub "
                                                   "dataset repo id org/name[@revision]")
    p.add_argument("--mode", required=True, choices=("oracle", "retrieved", "none"),
                   help="oracle: the turn's gold passages; retrieved: top --k of --retriever or --run; none: no "
                        "passages (the model's own knowledge)")
    p.add_argument("--out", metavar="FILE.jsonl", help="answers file (MTRAG: official submission format; RECOR / "
                                                       "MTR-Bench: one line per turn); default: results/BENCHMARK/"
                                                       "NAME-generate/MODE[-RETRIEVER].jsonl, NAME the folder's name")
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    p.add_argument("--retriever", metavar="SPEC", help="retriever spec searched through the evaluation engine "
                                                       "(bm25, dense, ...); its full run goes to FILE.run.trec")
    p.add_argument("--run", metavar="FILE", help="a TREC run file (or an MTRAG submission .jsonl) instead of "
                                                 "--retriever, e.g. a run `convrag evaluate` wrote")
    p.add_argument("--strategy", help="query strategy for --retriever (default: the benchmark's last default one, "
                                      "e.g. RECOR history+reasoning)")
    p.add_argument("--k", type=int, default=5, help="retrieved passages per turn (default 5; MTRAG at most 10)")
    p.add_argument("--llm", metavar="SPEC", help="generator LLM spec, e.g. openai:MODEL@http://HOST:8000/v1 (default: "
                                                 "$CONVRAG_LLM, else the embedded SmolLM2-135M placeholder)")
    p.add_argument("--config", default="all-tasks", help="MTRAG tasks config (default: all-tasks)")
    p.add_argument("--split", help="split (default: MTRAG test; others the benchmark's evaluation split)")
    p.add_argument("--corpus", default="auto", help="corpus kind for passage texts (default auto: the first built)")
    p.add_argument("--max-turns", type=int, metavar="N", help="answer only the first N tasks / turns")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                   help=f"answer length limit in tokens (default {DEFAULT_MAX_TOKENS})")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0: greedy)")
    p.add_argument("--passage-chars", type=int, default=DEFAULT_PASSAGE_CHARS,
                   help=f"characters of each passage shown to the model (default {DEFAULT_PASSAGE_CHARS})")
    p.add_argument("--history-chars", type=int, default=DEFAULT_HISTORY_CHARS,
                   help=f"characters of earlier conversation shown, most recent first (default "
                        f"{DEFAULT_HISTORY_CHARS}); the question is never cut")
    p.add_argument("--profile", choices=("authors", "convrag"), default="authors",
                   help="RECOR's generator prompt: authors (default; answer directly in 2-4 sentences, as RECOR's "
                        "code asks) or convrag (MTRAG's rag_answer, which may say it cannot answer); other "
                        "benchmarks always use rag_answer")
    p.add_argument("--concurrency", type=int, default=8, help="LLM calls in flight at once (default 8)")
    p.add_argument("--cache", help="LLM cache folder (default: FILE.llm-cache beside the output)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars (default: shown on a terminal)")
    p.set_defaults(func=run_command)
    return p
