"""The board's Space (``convrag leaderboard build --space`` of the shared RECOR collection, see conftest.py) served
on 127.0.0.1 and used in headless Chromium: the main table with its CIs, each entry's caveats and a paired comparison
of two systems picked in the drop-downs, read from the page and checked against board.json; a screenshot is kept in
the test-artifacts folder (see tests/browser.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.browser import Browser
from tests.hub.test_spaces import _serve

NUMBER = r"(-?\d+\.\d+)"


def _interval(text: str) -> tuple[float, float, float]:
    """A main-table cell ``mean [low, high]`` as its three numbers."""
    match = re.fullmatch(rf"{NUMBER} \[{NUMBER}, {NUMBER}\]", text)
    assert match, text
    return tuple(float(x) for x in match.groups())


def test_the_board_space_in_chromium(browser: Browser, board: tuple[Path, dict], board_space: Path) -> None:
    _, data = board
    rows = [r["id"] for r in data["rows"]]
    a, b = rows[1], rows[-2]  # neither is a default pick (first and last row)
    measure = next(m for m in data["measures"] if m != data["primary"])
    heading = f"{a} - {b} on {measure}: "  # the comparison's Markdown, as the page shows it
    for url in _serve("board", board_space.with_name("board.log"), argv=[str(board_space / "app.py")]):
        browser.open(url, "board")
        main_table, caveats = browser.table("Main table"), browser.table("Caveats")
        for label, option in (("System A", a), ("System B", b), ("Measure", measure)):
            browser.select(label, option)
        shown = browser.wait(lambda: [t for t in browser.markdown() if t.startswith(heading)], "the comparison", 30)
        browser.driver.execute_script("window.scrollTo(0, document.body.scrollHeight)")  # the comparison in view
        shot = browser.screenshot("compare")
    assert shot.is_file()
    assert [(r["system"], r["entry"], int(r["n"])) for r in main_table] == [
        (r["system"], r["entry"], r["n"]) for r in data["rows"]]
    for got, row in zip(main_table, data["rows"], strict=True):
        for m in data["measures"]:
            cell = row["scores"][m]
            assert _interval(got[m]) == pytest.approx((cell["mean"], cell["low"], cell["high"]), abs=5e-5), m
    expected = [(entry, text) for entry, texts in data["caveats"].items() for text in texts]
    assert [(r["entry"], r["caveat"]) for r in caveats] == expected and {e for e, _ in expected} == {"lexical", "bm25s"}
    (pair,) = [p for p in data["paired"] if {p["a"], p["b"]} == {a, b} and p["measure"] == measure]
    sign = 1 if pair["a"] == a else -1
    match = re.search(rf"mean difference {NUMBER} over (\d+) queries; p = {NUMBER} \(paired randomisation\), "
                      rf"p = {NUMBER} \(paired t-test\)", shown[0])  # fmt: skip
    assert match, shown
    diff, n, p_randomization, p_ttest = match.groups()
    assert int(n) == pair["n"] == 13
    assert (float(diff), float(p_randomization), float(p_ttest)) == pytest.approx(
        (sign * pair["diff"], pair["p_randomization"], pair["p_ttest"]), abs=5e-5)
