"""Checks every evaluate module folder under metrics/ must pass: doctested inputs description and a metric card
with Space front matter, a Gradio app and a requirements file."""

from __future__ import annotations

import contextlib
import doctest
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import yaml

REPO = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def _in_repo() -> Iterator[None]:
    """Run from the repository root (the examples load ``metrics/<name>`` by relative path)."""
    before = os.getcwd()
    os.chdir(REPO)
    try:
        yield
    finally:
        os.chdir(before)


def check_kwargs_doctests(module: ModuleType) -> None:
    """Every example in ``module._KWARGS_DESCRIPTION`` runs (from the repository root) and there is at least one."""
    test = doctest.DocTestParser().get_doctest(module._KWARGS_DESCRIPTION, {}, "_KWARGS_DESCRIPTION",
                                               module.__file__, 0)
    runner = doctest.DocTestRunner()
    with _in_repo():
        runner.run(test)
    assert test.examples and runner.summarize(verbose=False) == (0, len(test.examples))


def check_metric_card(name: str, requirement: str) -> None:
    """``metrics/<name>/README.md``: its doctests pass, its front matter declares a Gradio Space with the evaluate
    tags; ``app.py`` exists and ``requirements.txt`` names ``requirement``."""
    folder = REPO / "metrics" / name
    card = folder / "README.md"
    with _in_repo():
        result = doctest.testfile(str(card), module_relative=False)
    assert result.attempted > 0 and result.failed == 0
    meta = yaml.safe_load(card.read_text(encoding="utf-8").split("---")[1])
    assert meta["sdk"] == "gradio" and meta["app_file"] == "app.py"
    assert {"evaluate", "metric"} <= set(meta["tags"]) and meta["title"] and meta["emoji"] and meta["description"]
    assert (folder / "app.py").exists()
    assert requirement in (folder / "requirements.txt").read_text(encoding="utf-8")
