"""Headless Chromium for tests of Gradio apps (the metric Spaces, the leaderboard's Space): Debian's ``chromium`` and
``chromium-driver`` driven by selenium against an app on 127.0.0.1. A ``Browser`` opens the app, waits for it to
render, clicks buttons and examples, picks dropdown options, reads tables, notes and error messages from the DOM and
saves screenshots into the test-artifacts folder (``$CONVRAG_TEST_ARTIFACTS``, default ``<basetemp>/artifacts``).

The ``browser`` fixture (this module is a pytest plugin of tests/conftest.py) gives each test module one session.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

INSTALL = "apt-get update -q && apt-get install -y -q chromium chromium-driver"
T = TypeVar("T")

# Scroll a Gradio 6 Dataframe's viewport to arguments[1] px; two frames later, the rows rendered then (the table is
# virtual: only the rows in view are in the DOM) as [aria-rowindex, [cell texts]], and whether the end is in view.
_SCROLL_AND_READ = """
const [grid, top, done] = arguments;
const view = grid.querySelector('.virtual-table-viewport');
view.scrollTop = top;
requestAnimationFrame(() => requestAnimationFrame(() => done({
  rows: [...grid.querySelectorAll('[role=row].virtual-row')].map(row => [
    Number(row.getAttribute('aria-rowindex')),
    [...row.querySelectorAll('[role=gridcell]')].map(cell => cell.innerText.trim())]),
  end: view.scrollTop + view.clientHeight >= view.scrollHeight - 1,
  step: Math.max(1, Math.floor(view.clientHeight / 2))})));
"""

# A component that runs an event shows Gradio's status tracker as pending, then generating.
_BUSY = "[data-testid=status-tracker].pending, [data-testid=status-tracker].generating"
_WATCH_BUSY = f"""
const busy = node => node.nodeType === 1 && (node.matches('{_BUSY}') || !!node.querySelector('{_BUSY}'));
window.convragBusySeen = false;
if (window.convragBusyWatch) window.convragBusyWatch.disconnect();
window.convragBusyWatch = new MutationObserver(records => {{
  if (records.some(r => busy(r.target) || [...r.addedNodes].some(busy))) window.convragBusySeen = true;
}});
window.convragBusyWatch.observe(document.querySelector('gradio-app'),
                                {{subtree: true, childList: true, attributes: true, attributeFilter: ['class']}});
"""


def browser_binaries() -> tuple[str, str]:
    """Chromium and chromedriver on the PATH; a missing one fails the test with one line saying how to install it."""
    chromium_path, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium_path and driver_path):
        missing = " and ".join(n for n, p in (("chromium", chromium_path), ("chromedriver", driver_path)) if not p)
        pytest.fail(f"headless Chromium for the browser tests: {missing} not found; install Debian's packages "
                    f"(as root): {INSTALL}", pytrace=False)
    return chromium_path, driver_path


def artifacts_folder(config: pytest.Config, factory: pytest.TempPathFactory) -> Path:
    """The test-artifacts folder ($CONVRAG_TEST_ARTIFACTS, default ``<basetemp>/artifacts``), created, and named once
    in the test output."""
    folder = Path(os.environ.get("CONVRAG_TEST_ARTIFACTS") or factory.getbasetemp() / "artifacts").resolve()
    folder.mkdir(parents=True, exist_ok=True)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:  # written past pytest's output capture, as pytest writes its own lines
        with config.pluginmanager.get_plugin("capturemanager").global_and_fixture_disabled():
            reporter.write_line(f"browser screenshots go to {folder} (set CONVRAG_TEST_ARTIFACTS to move them)")
    return folder


@pytest.fixture(scope="module")
def browser(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """One headless Chromium for the test module's tests."""
    with chromium(artifacts_folder(pytestconfig, tmp_path_factory)) as session:
        yield session


@contextmanager
def chromium(artifacts: Path, width: int = 1280, height: int = 2000) -> Iterator[Browser]:
    """One headless Chromium session (no sandbox: tests run as root in CI), closed on exit."""
    chromium_path, driver_path = browser_binaries()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium_path  # with the driver's path below, selenium-manager never goes online
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     f"--window-size={width},{height}"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    try:
        yield Browser(driver, artifacts)
    finally:
        driver.quit()


class Browser:
    """A Chromium session on one Gradio app at a time; failures name a screenshot of the page as it was."""

    def __init__(self, driver: webdriver.Chrome, artifacts: Path) -> None:
        self.driver = driver
        self.artifacts = artifacts
        self.page = "page"

    def open(self, url: str, name: str, timeout: float = 60.0) -> None:
        """Load ``url`` and wait until the Gradio app has rendered its components; ``name`` prefixes screenshots."""
        self.page = name
        self.driver.get(url)
        self.wait(lambda: self.driver.execute_script("return !!document.querySelector('gradio-app main .block')"),
                  f"the Gradio app at {url} to render", timeout)

    def screenshot(self, step: str) -> Path:
        """The page's screenshot saved as ``<artifacts>/<page>-<step>.png``; its path."""
        path = self.artifacts / f"{self.page}-{step}.png"
        self.driver.save_screenshot(str(path))
        return path

    def wait(self, condition: Callable[[], T], what: str, timeout: float = 60.0) -> T:
        """``condition()``'s first truthy value, polled; past ``timeout`` s the test fails naming a screenshot."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = condition()
            except WebDriverException:
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                pytest.fail(f"waited {timeout:.0f} s for {what}; screenshot: {self.screenshot('timeout')}",
                            pytrace=False)
            time.sleep(0.1)

    def _labelled_block(self, label: str) -> WebElement:
        """The component block whose label reads ``label`` (a Textbox's, Dropdown's, Code's or Dataframe's)."""
        xpath = ("//div[contains(concat(' ', @class, ' '), ' block ')][.//*[(self::span or self::p or self::label "
                 f"or self::div) and normalize-space()={_literal(label)}]][not(.//div[contains(concat(' ', @class, "
                 f"' '), ' block ')][.//*[normalize-space()={_literal(label)}]])]")
        return self.wait(lambda: self.driver.find_element(By.XPATH, xpath), f"a component labelled {label!r}")

    def click_button(self, text: str) -> None:
        """Click the button that reads ``text``."""
        xpath = f"//button[normalize-space()={_literal(text)}]"
        self.wait(lambda: self.driver.find_element(By.XPATH, xpath), f"a button {text!r}").click()

    def press(self, text: str, timeout: float = 120.0) -> None:
        """Click the button that reads ``text`` and wait until the events it started have run: some component went
        busy (seen by a MutationObserver armed before the click, however short the run) and none is busy now."""
        self.driver.execute_script(_WATCH_BUSY)
        self.click_button(text)
        self.wait(lambda: self.driver.execute_script("return window.convragBusySeen"), f"{text!r} to start an event",
                  timeout)
        self.wait(lambda: not self.driver.execute_script(f"return !!document.querySelector('{_BUSY}')"),
                  f"the events of {text!r} to finish", timeout)

    def click_example(self, row: int) -> None:
        """Click row ``row`` (from 0) of the app's examples table."""
        selector = f"[data-testid='dataset-cell-{row}-0']"
        self.wait(lambda: self.driver.find_element(By.CSS_SELECTOR, selector), f"example row {row}").click()

    def input_value(self, label: str) -> str:
        """What the input (textbox, textarea, dropdown, code editor) labelled ``label`` holds now."""
        block = self._labelled_block(label)
        fields = block.find_elements(By.CSS_SELECTOR, "textarea, input:not([type=file])")
        if fields:
            return fields[0].get_attribute("value") or ""
        return block.find_element(By.CSS_SELECTOR, ".cm-content").text

    def select(self, label: str, option: str) -> None:
        """Pick ``option`` in the dropdown labelled ``label``."""
        box_xpath = f"//input[@role='combobox'][@aria-label={_literal(label)}]"
        box = self.wait(lambda: self.driver.find_element(By.XPATH, box_xpath), f"a dropdown labelled {label!r}")
        box.click()
        xpath = f"//ul[@id='{box.get_attribute('aria-controls')}']/li[@role='option'][@aria-label={_literal(option)}]"
        self.wait(lambda: self.driver.find_element(By.XPATH, xpath), f"option {option!r} of {label!r}").click()
        self.wait(lambda: self.input_value(label) == option, f"{label!r} to read {option!r}", 10)

    def markdown(self) -> list[str]:
        """The text of every Markdown component, top to bottom."""
        return [e.text for e in self.driver.find_elements(By.CSS_SELECTOR, "[data-testid=markdown]")]

    def errors(self) -> list[str]:
        """The messages of the error toasts shown now (a ``gr.Error`` raised by an event)."""
        toasts = self.driver.find_elements(By.CSS_SELECTOR, "[data-testid=toast-body] [data-testid=toast-text]")
        return [text for e in toasts if (text := (e.get_attribute("textContent") or "").strip())]  # fading in

    def table(self, label: str) -> list[dict[str, str]]:
        """The rows of the Dataframe labelled ``label`` as {column: cell text}: every row, read while its viewport is
        scrolled from top to bottom (only the rows in view are rendered)."""
        xpath = f"//*[@role='grid'][@aria-label={_literal(label)}]"
        grid = self.wait(lambda: self.driver.find_element(By.XPATH, xpath), f"a table labelled {label!r}")
        headers = [h.get_attribute("title") for h in grid.find_elements(By.CSS_SELECTOR, "th[role=columnheader]")]
        expected = int(grid.get_attribute("aria-rowcount")) - 1  # the header row counts
        rows: dict[int, list[str]] = {}
        top = 0
        while len(rows) < expected:
            view = self.driver.execute_async_script(_SCROLL_AND_READ, grid, top)
            rows.update((index, cells) for index, cells in view["rows"])
            if view["end"]:
                break
            top += view["step"]
        assert len(rows) == expected, f"{label!r}: read {len(rows)} of {expected} rows"
        return [dict(zip(headers, rows[index], strict=True)) for index in sorted(rows)]


def _literal(text: str) -> str:
    """``text`` as an XPath string literal."""
    if "'" not in text:
        return f"'{text}'"
    if '"' not in text:
        return f'"{text}"'
    return "concat(" + ", \"'\", ".join(f"'{part}'" for part in text.split("'")) + ")"
