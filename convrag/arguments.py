"""Argument habits shared by the commands: where results go by default, and names checked before any work.

* :func:`default_out`: ``results/<benchmark>/<name>-<command>``, the benchmark read from the built folder's
  README and the name from the folder or Hub repo id (:func:`run_name`), so that two benchmarks' results never
  share a folder, and never inside a folder that holds another run's results.
* :func:`check_retrievers` / :func:`check_strategies`: an unknown retriever or query strategy name is one error
  listing the known names, raised before any index is built, model loaded or LLM called.
* :func:`name_value_pairs` / :func:`parse_options`: repeated ``--flag NAME=VALUE`` arguments as a mapping.
* :func:`llm_defaults_skipped`: ``convrag evaluate``'s default strategies that call an LLM, left out unless an
  LLM was chosen (:func:`skipped_line` says so).
* :data:`EXAMPLES` / :func:`add_examples`: the command lines every subcommand's ``--help`` shows; :data:`OVERVIEW`
  and :class:`HelpParser` for the top-level help.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from convrag.errors import ConvragError

#: ``NAME=VALUE``: a name (letters, digits, ``_``, ``-``; not starting with a digit), then anything
NAME_EQ = re.compile(r"^([A-Za-z_][\w-]*)=(.+)$")

#: Root of the default output folders: ``results/<benchmark>/<run>``.
RESULTS = Path("results")


def run_name(ref: str | Path) -> str:
    """The name a folder or Hub dataset repo id gives its runs: the repo's name part (``org/name@rev`` ->
    ``name``), the name of a Hugging Face cache snapshot's repo, else the folder's base name."""
    from convrag.hub import REPO_ID, names_hub_repo

    text = str(ref)
    if names_hub_repo(text):
        return REPO_ID.match(text).group("repo").rsplit("/", 1)[-1]  # type: ignore[union-attr]
    path = Path(text).resolve()
    if path.parent.name == "snapshots" and path.parent.parent.name.startswith("datasets--"):
        return path.parent.parent.name.rsplit("--", 1)[-1]
    return path.name


def default_out(refs: list[str], command: str) -> Path:
    """Default ``--out`` of a command reading built folders (or Hub repo ids) ``refs``:
    ``results/<benchmark>/<name>-<command>``, the benchmark from the folder's README and the name from
    :func:`run_name` (several folders: their benchmarks and names joined by ``+``), so that two benchmarks'
    results never share a folder; never inside another run's results folder (:func:`convrag.out_folder.unnested`:
    beside it instead)."""
    from convrag.hub import resolve_folder
    from convrag.manifest import read_manifest
    from convrag.out_folder import unnested

    benchmarks = list(dict.fromkeys(str(read_manifest(resolve_folder(r))["benchmark"]) for r in refs))
    names = list(dict.fromkeys(run_name(r) for r in refs))
    return unnested(RESULTS / "+".join(benchmarks) / f"{'+'.join(names)}-{command}")


def check_retrievers(specs: list[str], flag: str) -> None:
    """Refuse, before any work, a retriever spec whose name (or a component of ``rrf:A+B``) is not registered."""
    from convrag.retrievers.registry import RETRIEVERS

    for spec in specs:
        name, _, argument = spec.strip().partition(":")
        parts = [name, *(argument.split("+") if name.strip().lower() == "rrf" else [])]
        for part in parts:
            if part.strip() and part.partition(":")[0].strip().lower() not in RETRIEVERS:
                raise ConvragError(f"{flag}: unknown retriever {part.strip()!r}; known: {', '.join(RETRIEVERS)}")


def check_strategies(names: list[str], flag: str, profile: Any = None) -> None:
    """Refuse, before any work, a query strategy that neither ``profile`` (its views and strategies) nor the
    strategy registry knows."""
    from convrag.strategies import available_strategies, get_strategy

    own = [*profile.strategies, *profile.extra_strategies] if profile is not None else []
    for name in names:
        if name in own:
            continue
        try:
            get_strategy(name)
        except ConvragError:
            known = list(dict.fromkeys([*own, *available_strategies(), "field:NAME"]))
            raise ConvragError(f"{flag}: unknown query strategy {name!r}; known: {', '.join(known)}") from None


def llm_defaults_skipped(profile: Any, strategies: str | None, llm: str | None) -> list[str]:
    """The default strategies that call an LLM, left out when no strategies were named and no LLM was chosen
    (``--llm`` or ``$CONVRAG_LLM``); else ``[]``."""
    import os

    from convrag.llm.spec import SPEC_ENV

    return [] if strategies is not None or llm or os.environ.get(SPEC_ENV) else profile.llm_defaults()


def skipped_line(profile: Any, skipped: list[str]) -> str:
    """What was skipped (:func:`llm_defaults_skipped`) and the command-line that includes it."""
    every = ",".join([*(n for n in profile.strategies if n not in skipped), *skipped])
    return (f"convrag evaluate: skipped the LLM strategy {', '.join(skipped)} (no --llm or $CONVRAG_LLM given); "
            f"include it with --strategies {every} --llm SPEC")


def name_value_pairs(values: list[str] | None, flag: str, form: str = "NAME=FILE") -> dict[str, str]:
    """``flag NAME=VALUE`` arguments as a mapping of strings (``form`` names the expected shape in errors)."""
    pairs = {}
    for value in values or []:
        match = NAME_EQ.match(value)
        if not match:
            raise ConvragError(f"{flag} expects {form}, got {value!r}")
        pairs[match.group(1)] = match.group(2)
    return pairs


def parse_options(values: list[str] | None, flag: str) -> dict[str, Any]:
    """``flag key=value`` pairs; values are read as YAML scalars (ints, null, true...)."""
    import yaml

    return {k: yaml.safe_load(v) for k, v in name_value_pairs(values, flag, "key=value").items()}


NO_PROGRESS_HELP = "hide progress (default: bars on a terminal, else a plain line every 30 s)"


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
        ("RECOR's D&V over 5 answerable MTRAG turns: the estimate, then the run",
         f"convrag synthesize recor --input {_CONVERSATIONS} --option input_format=mtrag --option domain=politics "
         "--option limit=5 --out out/dv --dry-run"),
        ("", f"convrag synthesize recor --input {_CONVERSATIONS} --option input_format=mtrag --option domain=politics "
             f"--option limit=5 --out out/dv --llm {_LLM}"),
        ("MTR-Pipeline's estimate for 5 conversations over a built corpus (agents: $CONVRAG_LLM or --questioner, "
         "--responder, --polisher SPEC)", "convrag synthesize mtr --corpus out/mtrag --option conversations=5 --out "
                                          "out/mtr --dry-run"),
    ),
    "audit": (("what judging a build would cost", f"convrag audit out/recor --judge {_LLM} --dry-run"),
              ("RECOR's quality judges on 10 sampled turns",
               f"convrag audit out/recor --dimensions recor --sample 10 --judge {_LLM}")),
    "select": (("space.yaml: see the README's 'Choosing a retriever without labels'",
                "convrag select --space space.yaml --corpus out/stratrag --queries out/stratrag --max-queries 10 "
                "--dry-run"),),
    "generate": (("answers from each turn's gold passages", f"convrag generate out/recor --mode oracle --llm {_LLM} "
                                                            "--out answers/oracle.jsonl"),
                 ("answers from BM25's top 5 (its run goes beside them)",
                  f"convrag generate out/recor --mode retrieved --retriever bm25 --llm {_LLM} --out "
                  "answers/bm25.jsonl")),
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
