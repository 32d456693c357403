"""Argument habits of the command line: what ``convrag evaluate`` leaves out without an LLM, and help texts.

* :func:`llm_defaults_skipped`: ``convrag evaluate``'s default strategies that call an LLM, left out unless an
  LLM was chosen (:func:`skipped_line` says so).
* :data:`EXAMPLES` / :func:`add_examples`: the command lines every subcommand's ``--help`` shows; :data:`OVERVIEW`
  and :class:`HelpParser` for the top-level help.

Shared checks live with what they check: default output folders in :mod:`convrag.hub.naming`, retriever and
strategy names in :mod:`convrag.retrievers.registry` / :mod:`convrag.retrievers.strategies`, ``NAME=VALUE``
options in :mod:`convrag.core.options`.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any


def llm_defaults_skipped(profile: Any, strategies: str | None, llm: str | None) -> list[str]:
    """The default strategies that call an LLM, left out when no strategies were named and no LLM was chosen
    (``--llm`` or ``$CONVRAG_LLM``); else ``[]``."""
    import os

    from convrag.llm.spec import SPEC_ENV
    from convrag.retrievers.strategies import llm_defaults

    return [] if strategies is not None or llm or os.environ.get(SPEC_ENV) else llm_defaults(profile)


def skipped_line(profile: Any, skipped: list[str]) -> str:
    """What was skipped (:func:`llm_defaults_skipped`) and the command-line that includes it."""
    every = ",".join([*(n for n in profile.strategies if n not in skipped), *skipped])
    return (f"convrag evaluate: skipped the LLM strategy {', '.join(skipped)} (no --llm or $CONVRAG_LLM given); "
            f"include it with --strategies {every} --llm SPEC")


NO_PROGRESS_HELP = "hide progress (default: bars on a terminal, else a plain line every 30 s)"
OVERWRITE_HELP = ("replace the results in --out even when they are of other inputs (without it, a results folder of "
                  "another benchmark or other inputs is refused; a rerun of the same inputs replaces its own)")


class HelpParser(argparse.ArgumentParser):
    """An argument parser whose epilog may be a function, called only when the help is printed (``build``'s list
    of builder options imports every builder)."""

    def format_help(self) -> str:
        if callable(self.epilog):
            self.epilog = self.epilog()
        return super().format_help()


OVERVIEW = """\
Progress bars (named 'benchmark · subset · retriever · strategy: stage') are shown when stderr is a terminal;
elsewhere (a log, a batch job) a plain progress line is printed every 30 s instead. CONVRAG_PROGRESS=1 shows bars
anywhere, CONVRAG_PROGRESS=0 or --no-progress hides both. Commands that write results default to
--out results/BENCHMARK/NAME-COMMAND (beside, never inside, a folder that holds another run's results).
Each command's --help has examples.

examples:
  # the README's main job: build StratRAG from 30 HotpotQA dev records, then its baseline table
  convrag build stratrag --source ../shared/data/hotpotqa/hotpot_dev_distractor_v1.first30.json --out out/stratrag
  convrag evaluate out/stratrag --out results/stratrag"""


_LLM = "openai:MODEL@http://HOST:8000/v1"
_DEV = "../shared/data/hotpotqa/hotpot_dev_distractor_v1.first30.json"
_CONVERSATIONS = "../shared/data/mtrag/mtrag-human/conversations/conversations.json"
_RESPONSES = "../shared/data/mtrag/scripts/evaluation/sample_data/responses-10.jsonl"

#: Subcommand -> (what it does, command line) pairs shown under "examples:" in its ``--help``. The paths are a
#: checkout's, as the README's: ``../shared/data`` holds real upstream records, ``out/`` what the build examples
#: write; ``MODEL@http://HOST:8000/v1`` stands for any OpenAI-compatible server (vLLM, SGLang, llama.cpp).
EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "build": (
        ("StratRAG from 30 real HotpotQA dev records (the README's main job)",
         f"convrag build stratrag --source {_DEV} --out out/stratrag"),
        ("RECOR from its 4-conversation sample", "convrag build recor --source ../shared/data/recor/sample --out "
                                                 "out/recor"),
        ("one MTRAG domain: last-turn queries, qrels and the passages its conversations cite",
         "convrag build mtrag --source ../shared/data/mtrag --config clapnq-lastturn --config clapnq-qrels "
         "--config clapnq-cited-corpus --out out/mtrag"),
        ("a builder option (listed above)",
         f"convrag build stratrag --source {_DEV} --option fill=borrow --out out/stratrag-borrow"),
    ),
    "push": (("publish a build (token from HF_TOKEN)", "convrag push out/stratrag --repo my-org/stratrag --private"),),
    "export": (("BEIR files", "convrag export out/stratrag --format beir --out out/stratrag-beir"),
               ("TREC topics, qrels and a JsonCollection corpus", "convrag export out/recor --format trec --out "
                                                                  "out/recor-trec")),
    "space": (("a Space folder for the retrieval metric", "convrag space retrieval --out spaces/retrieval"),),
    "embed": (("fill the embeddings cache for every corpus of a build", "convrag embed out/recor --device cpu"),
              ("the first of 4 shards, on one of 4 machines sharing a cache",
               "convrag embed out/recor --shard 1/4 --cache shared-embeddings")),
    "evaluate": (
        ("the README's main job: random, BM25, dense and hybrid with CIs", "convrag evaluate out/stratrag --out "
                                                                            "results/stratrag"),
        ("RECOR's default strategies that need no LLM", "convrag evaluate out/recor --retrievers bm25,dense"),
        ("with the LLM rewrite strategy on a real model",
         f"convrag evaluate out/recor --retrievers bm25 --strategies baseline,rewrite --llm {_LLM}"),
        ("MTRAG over the cited passages, with the official submission files", "convrag evaluate out/mtrag "
                                                                              "--retrievers bm25 --bootstrap 200"),
    ),
    "evaluate-generation": (
        ("MTRAG's official responses file (RB_alg and RL_F need no judge calls)",
         f"convrag evaluate-generation {_RESPONSES} --judge {_LLM} --metrics rb_alg,rl_f"),
        ("answers that `convrag generate` wrote for a RECOR build",
         f"convrag evaluate-generation out/recor --predictions answers/oracle.jsonl --judge {_LLM}"),
    ),
    "synthesize": (
        ("RECOR's D&V over 5 answerable MTRAG turns (options: convrag synthesize recor --help)",
         f"convrag synthesize recor --input {_CONVERSATIONS} --option input_format=mtrag --option domain=politics "
         "--option limit=5 --out out/dv --dry-run"),
        ("MTR-Pipeline over a built corpus (options: convrag synthesize mtr --help)",
         "convrag synthesize mtr --corpus out/mtrag --option conversations=5 --out out/mtr --dry-run"),
    ),
    "synthesize recor": (
        ("RECOR's D&V over 5 answerable MTRAG turns: the estimate, then the run",
         f"convrag synthesize recor --input {_CONVERSATIONS} --option input_format=mtrag --option domain=politics "
         "--option limit=5 --out out/dv --dry-run"),
        ("", f"convrag synthesize recor --input {_CONVERSATIONS} --option input_format=mtrag --option domain=politics "
             f"--option limit=5 --out out/dv --llm {_LLM}"),
    ),
    "synthesize mtr": (
        ("MTR-Pipeline's estimate for 5 conversations over a built corpus (agents: $CONVRAG_LLM or --questioner, "
         "--responder, --polisher SPEC)", "convrag synthesize mtr --corpus out/mtrag --option conversations=5 --out "
                                          "out/mtr --dry-run"),
        ("the run, every agent on one real model",
         f"convrag synthesize mtr --corpus out/mtrag --option conversations=5 --out out/mtr --questioner {_LLM} "
         f"--responder {_LLM} --polisher {_LLM}"),
    ),
    "audit": (("what judging a build would cost", f"convrag audit out/recor --judge {_LLM} --dry-run"),
              ("RECOR's quality judges on 10 sampled turns",
               f"convrag audit out/recor --dimensions recor --sample 10 --judge {_LLM}")),
    "select": (("space.yaml: see docs/pipelines/seara.md (a complete example)",
                "convrag select --space space.yaml --corpus out/stratrag --queries out/stratrag --max-queries 10 "
                "--dry-run"),),
    "generate": (("answers from each turn's gold passages", f"convrag generate out/recor --mode oracle --llm {_LLM} "
                                                            "--out answers/oracle.jsonl"),
                 ("answers from BM25's top 5 (its run goes beside them)",
                  f"convrag generate out/recor --mode retrieved --retriever bm25 --llm {_LLM} --out "
                  "answers/bm25.jsonl")),
    "leaderboard": (
        ("add a results folder to a collection on the Hub (it must re-score from its run files)",
         "convrag leaderboard add results/recor/recor-evaluate --collection my-org/recor-board"),
        ("the board's tables as board.json, board.md and index.html",
         "convrag leaderboard build --collection my-org/recor-board --out boards/recor"),
    ),
    "list": (("registered benchmarks and retrievers", "convrag list"),),
}


def examples_text(pairs: tuple[tuple[str, str], ...]) -> str:
    """An "examples:" block: each command line under its comment, shown as written (not re-wrapped)."""
    lines = ["examples:"]
    for what, command in pairs:
        lines += ([f"  # {what}"] if what else []) + [f"  {command}"]
    return "\n".join(lines)


def add_examples(parsers: Mapping[str, Any]) -> None:
    """Append each subcommand's :data:`EXAMPLES` to the epilog of its parser in ``parsers`` (name -> parser), with a
    formatter that keeps the description and epilog as written (a description is wrapped here instead)."""
    import textwrap

    for name, parser in parsers.items():
        if name not in EXAMPLES:
            continue
        if parser.description:
            parser.description = textwrap.fill(parser.description, 100)
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        previous = parser.epilog
        parser.epilog = examples_text(EXAMPLES[name]) if previous is None else _after(previous, EXAMPLES[name])


def _after(epilog: Any, pairs: tuple[tuple[str, str], ...]) -> Any:
    """``epilog`` (a text, or a function making one when the help is printed), then the examples."""
    if callable(epilog):
        return lambda: f"{epilog()}\n\n{examples_text(pairs)}"
    return f"{epilog}\n\n{examples_text(pairs)}"


def split_list(value: str) -> list[str]:
    """The non-empty items of a comma-separated list, stripped."""
    return [v.strip() for v in value.split(",") if v.strip()]
