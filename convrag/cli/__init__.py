"""The ``convrag`` command line: one module per subcommand (parse, check, call the command), assembled here.

Each subcommand has its own ``--help``. Errors in user input end with a one-line message and exit code 2; a run that
worked through its input but produced nothing usable exits 1.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from convrag.cli import audit, build, embed, evaluate, generate, leaderboard, select, space, synthesize
from convrag.core.errors import ConvragError, EmptyResult

#: what an interrupted run leaves, per command (outputs are written whole or under temporary names and renamed)
INTERRUPTED = {
    "synthesize": "finished stages, finished shards and every answered LLM call are kept in --out",
    "audit": "no output was replaced; every verdict already given is kept in the judge cache",
    "select": "no output was replaced; every judgment already made is kept in the LLM cache",
    "generate": "no answers file was replaced; every answer already generated is kept in its LLM cache",
    "evaluate": "no result was replaced; computed embeddings, reranker scores and LLM replies are kept in their caches",
    "evaluate-generation": "no result was replaced; every judge reply already given is kept in the LLM cache",
    "embed": "no cache entry was replaced; shards already encoded are kept",
}


def build_parser() -> argparse.ArgumentParser:
    """The ``convrag`` parser with every subcommand, in the order ``convrag --help`` lists them."""
    from convrag.cli.arguments import OVERVIEW, HelpParser, add_examples

    parser = HelpParser(
        prog="convrag", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Build, package, evaluate and synthesize conversational and multi-hop RAG retrieval benchmarks.",
        epilog=OVERVIEW)  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    build.add_parser(sub)  # build, push, export
    space.add_parser(sub)
    embed.add_parser(sub)
    evaluate.add_parser(sub)  # evaluate, evaluate-generation
    synthesize.add_parser(sub)
    audit.add_parser(sub)
    select.add_parser(sub)
    generate.add_parser(sub)
    leaderboard.add_parser(sub)
    build.add_list_parser(sub)
    add_examples(sub.choices)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from convrag.core.progress import plain_lines
    from convrag.metrics.retrieval.compute import RetrievalInputError

    try:
        with plain_lines():  # stderr not a terminal: bars print a plain line every 30 s instead
            return int(args.func(args) or 0)
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback
        kept = INTERRUPTED.get(args.command, "nothing was replaced (outputs are written whole, then renamed)")
        again = shlex.join(["convrag", *(sys.argv[1:] if argv is None else argv)])
        print(f"\nconvrag {args.command}: interrupted; {kept}. Run the same command again to "
              f"{'resume' if args.command in INTERRUPTED else 'start over'}: {again}", file=sys.stderr)
        return 130
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

