"""The documentation site: one page per CLI subcommand, benchmark builder, metric and synthesis pipeline, every
page in the nav, and a strict MkDocs build with no warnings. Fast: no model is loaded, nothing is built but the
site (into a temporary folder)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
MKDOCS_YML = REPO / "mkdocs.yml"


class _Loader(yaml.SafeLoader):
    """A safe loader that reads MkDocs' Python tags (``!!python/name:...``, ``!ENV``) as plain values."""


_Loader.add_multi_constructor("", lambda loader, suffix, node: None)


def _nav_pages() -> set[str]:
    """Every page path (relative to docs/) named anywhere in mkdocs.yml's ``nav``."""
    config = yaml.load(MKDOCS_YML.read_text(encoding="utf-8"), Loader=_Loader)
    pages: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, str):
            if node.endswith(".md"):
                pages.add(node)
        elif isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                walk(value)

    walk(config.get("nav"))
    return pages


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Subcommand name -> its parser, from the parser's ``_SubParsersAction``."""
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert actions, "the convrag parser has no subcommands"
    return dict(actions[0].choices)


@pytest.fixture(scope="module")
def subcommands() -> dict[str, argparse.ArgumentParser]:
    from convrag.cli import build_parser

    return _subparsers(build_parser())


@pytest.fixture(scope="module")
def nav() -> set[str]:
    return _nav_pages()


def _assert_pages(kind: str, names: list[str], nav: set[str]) -> None:
    assert names, f"no {kind} names found"
    missing = [f"docs/{kind}/{n}.md" for n in names if not (DOCS / kind / f"{n}.md").is_file()]
    assert not missing, f"pages missing: {missing}"
    outside = [f"{kind}/{n}.md" for n in names if f"{kind}/{n}.md" not in nav]
    assert not outside, f"pages not in mkdocs.yml's nav: {outside}"
    assert f"{kind}/index.md" in nav, f"{kind}/index.md is not in the nav"


def test_every_subcommand_has_a_page(subcommands: dict[str, argparse.ArgumentParser], nav: set[str]) -> None:
    assert {"build", "evaluate", "synthesize", "list"} <= set(subcommands)
    _assert_pages("commands", sorted(subcommands), nav)


def test_every_builder_has_a_page(nav: set[str]) -> None:
    from convrag.builders import available

    _assert_pages("benchmarks", list(available()), nav)


def test_every_metric_has_a_page(nav: set[str]) -> None:
    names = sorted(p.name for p in (REPO / "metrics").iterdir() if (p / f"{p.name}.py").is_file())
    assert "retrieval" in names
    _assert_pages("metrics", names, nav)


def test_every_pipeline_has_a_page(subcommands: dict[str, argparse.ArgumentParser], nav: set[str]) -> None:
    synthesize = subcommands["synthesize"]
    (pipeline,) = [a for a in synthesize._actions if a.dest == "pipeline"]
    assert pipeline.choices, "synthesize's pipeline argument declares no choices"
    _assert_pages("pipelines", sorted(pipeline.choices), nav)


def test_every_page_is_in_the_nav(nav: set[str]) -> None:
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert not pages - nav, f"pages left out of mkdocs.yml's nav: {sorted(pages - nav)}"
    assert not nav - pages, f"nav entries without a page: {sorted(nav - pages)}"


def test_mkdocs_build_is_strict_clean(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    assert (tmp_path / "site" / "index.html").is_file()
