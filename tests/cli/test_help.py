"""`convrag --help` and every subcommand's: examples that the real parser accepts, builder options under `build`,
no reST markup, and a `--lexical` default that lists only metrics that are computed."""

from __future__ import annotations

import argparse
import re
import shlex

import pytest

from convrag.builders.options import builder_options
from convrag.cli import build_parser
from convrag.cli.arguments import EXAMPLES

REST = re.compile(r"``|:(func|class|mod|data|meth|attr):`")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


COMMANDS = sorted(_subparsers(build_parser()))
#: commands with a parser per choice, each with its own --help and examples
PIPELINES = [f"synthesize {name}" for name in sorted(_subparsers(_subparsers(build_parser())["synthesize"]))]


def _parser(command: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for word in command.split():
        parser = _subparsers(parser)[word]
    return parser


def _examples(text: str) -> list[str]:
    """The command lines of the "examples:" block of a help text."""
    block = text.split("\nexamples:\n", 1)[1]
    return [line.strip() for line in block.splitlines() if line.strip().startswith("convrag ")]


@pytest.mark.parametrize("command", ["", *COMMANDS, *PIPELINES])
def test_every_help_has_examples_that_the_real_parser_accepts(command):
    text = _parser(command).format_help()
    assert "\nexamples:\n" in text, f"`convrag {command} --help` has no examples"
    lines = _examples(text)
    assert lines
    for line in lines:
        argv = shlex.split(line)[1:]
        args = build_parser().parse_args(argv)  # exits (SystemExit) on a line the parser refuses
        assert callable(args.func)
        if command:
            assert " ".join([args.command, *([args.pipeline] if " " in command else [])]) == command, line
    assert not REST.search(text), REST.search(text)


def test_examples_cover_every_subcommand_and_the_top_description_is_plain():
    assert set(EXAMPLES) == set(COMMANDS) | set(PIPELINES)
    top = build_parser().format_help()
    assert "Build, package, evaluate and synthesize" in top and "``" not in top


def test_each_synthesis_pipeline_has_a_help_of_its_own():
    mtr, recor = (" ".join(_parser(c).format_help().split()) for c in ("synthesize mtr", "synthesize recor"))
    assert "--questioner" in mtr and "--corpus" in mtr and "--input" not in mtr and "input_format" not in mtr
    assert "--input" in recor and "--llm" in recor and "--questioner" not in recor and "chunk_size" not in recor
    assert "threshold=N (gold-document score; default 4.0 under authors, 5.0 under convrag)" in recor
    assert "curate,cluster,converse,polish,assemble" in mtr and "load,align,aspects,facts,turns,release" in recor


def test_build_help_lists_every_builders_options():
    from convrag.builders import available, get_builder_class

    text = _subparsers(build_parser())["build"].format_help()
    flat = " ".join(text.split())  # the list is wrapped
    assert "builder options (--option KEY=VALUE" in text
    assert "stratrag: seed (a whole number, default 42); pool_size (a whole number, default 15); fill (a text, " \
           "default 'pad')" in flat
    for name in available():
        assert f"  {name}: " in text
        for key in builder_options(get_builder_class(name)):
            assert key == "source" or f"{key} (" in flat, (name, key)


def test_lexical_default_lists_only_what_is_computed():
    """METEOR is computed only with nltk's WordNet data (not installable from the package index), so it is not a
    default: every metric the default names is computed, and the help says how to ask for METEOR."""
    from convrag.evaluation.lexical import LexicalScorer, parse_metrics

    parser = build_parser()
    args = parser.parse_args(["evaluate-generation", "out/recor", "--judge", "fake"])
    metrics = parse_metrics(args.lexical)
    assert metrics == ("rouge-l", "bertscore")
    assert LexicalScorer(metrics, bertscorer=object()).unavailable == {}
    text = " ".join(_subparsers(parser)["evaluate-generation"].format_help().split())
    assert "default rouge-l,bertscore" in text and "meteor is computed only where nltk's WordNet data" in text
