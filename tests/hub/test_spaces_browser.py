"""Every metric Space, assembled by ``convrag space`` and served on 127.0.0.1 with the development convrag out of
reach, used in headless Chromium as a visitor would: an example clicked, Score pressed, the tables and notes read
from the page and checked against the metric's own ``compute`` on the same input; a screenshot of each page is kept
in the test-artifacts folder (see tests/browser.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import evaluate
import pytest

from convrag.metrics.retrieval.trec import read_qrels, read_run
from tests.browser import Browser
from tests.hub.test_spaces import (
    REPO,
    _check_isolated,
    _expected_generation,
    _expected_retrieval,
    _load_app,
    _serve,
    _serve_space,
)

FAST = ("retrieval", "pr_auc", "audit")  # the generation Space loads a BERTScore model: its test is slow


def _assemble(name: str, root: Path) -> Path:
    """The Space folder of metric ``name``, written by the CLI under ``root``."""
    from convrag.cli import main

    assert main(["space", name, "--out", str(root / name)]) == 0
    return root / name


def _log(space: Path) -> Path:
    """The server log beside a Space folder."""
    return space.with_name(f"{space.name}.log")


def _server(space: Path) -> Iterator[str]:
    """Serve an assembled Space as the Hub runs it (``python app.py``), one with convrag vendored with the
    development convrag out of reach; its URL."""
    if json.loads((space / ".convrag-space.json").read_text(encoding="utf-8"))["vendored"]:
        return _serve_space(space, _log(space))
    return _serve(space.name, _log(space), argv=[str(space / "app.py")])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[str, Path]]]:
    """The fast metrics' Spaces, assembled and started at once (starting is most of their tests' time): name ->
    (URL, Space folder)."""
    root = tmp_path_factory.mktemp("spaces")
    spaces = {name: _assemble(name, root) for name in FAST}
    servers = {name: _server(space) for name, space in spaces.items()}
    try:
        with ThreadPoolExecutor(len(servers)) as pool:
            urls = dict(zip(servers, pool.map(next, servers.values()), strict=True))
        yield {name: (urls[name], spaces[name]) for name in FAST}
    finally:
        for server in servers.values():
            server.close()


def _score(browser: Browser, example: int) -> None:
    """Click example row ``example``, press Score and wait for the run to finish."""
    browser.click_example(example)
    browser.press("Score")


def _numbers(rows: list[dict[str, str]], key: str, value: str) -> dict[str, float]:
    """A two-column table's rows as {key cell: number}."""
    return {row[key]: float(row[value]) for row in rows}


def test_retrieval_space_in_chromium(browser: Browser, served: dict[str, tuple[str, Path]], tmp_path: Path) -> None:
    app = _load_app("retrieval")
    (tmp_path / "run.trec").write_text(app.EXAMPLE_RUN, encoding="utf-8")
    (tmp_path / "qrels.trec").write_text(app.EXAMPLE_QRELS, encoding="utf-8")
    expected = _expected_retrieval(read_run(tmp_path / "run.trec"), read_qrels(tmp_path / "qrels.trec"), [1, 3, 5, 10])
    browser.open(served["retrieval"][0], "retrieval")
    _score(browser, 0)
    assert browser.input_value("k values") == app.EXAMPLE_K
    means = _numbers(browser.table("Mean over scored queries"), "measure", "value")
    per_query = {row.pop("query_id"): {m: float(v) for m, v in row.items()} for row in browser.table("Per query")}
    note = browser.markdown()
    browser.screenshot("trec-example")
    _score(browser, 1)  # the JSON example: two queries at k = 1, 3
    json_means = _numbers(browser.table("Mean over scored queries"), "measure", "value")
    browser.screenshot("json-example")
    assert means == {m: v for m, v in expected.items() if isinstance(v, float)} and len(means) == 7 * 4 + 1
    assert per_query == expected["per_query"]
    assert any(f"{expected['num_queries']} queries scored" in text and "no judgments for q4" in text
               and "no relevant document (grade >= 1) for q5" in text for text in note), note
    ranked = json.loads(app.EXAMPLE_RUN_JSON)  # lists, best first: as scores, decreasing with the rank
    run = {q: {d: float(-i) for i, d in enumerate(docs)} for q, docs in ranked.items()}
    expected_json = _expected_retrieval(run, json.loads(app.EXAMPLE_QRELS_JSON), [1, 3])
    assert json_means == {m: v for m, v in expected_json.items() if isinstance(v, float)}


def _pr_auc(config: str, arguments: str) -> dict[str, Any]:
    """The PR-AUC module's result on a Space example, computed here."""
    return evaluate.load(str(REPO / "metrics" / "pr_auc"), config).compute(**json.loads(arguments))


def test_pr_auc_space_in_chromium(browser: Browser, served: dict[str, tuple[str, Path]]) -> None:
    app = _load_app("pr_auc")
    browser.open(served["pr_auc"][0], "pr_auc")
    _score(browser, 0)
    chunks = _numbers(browser.table("Values"), "name", "value")
    browser.select("Config", "facts")  # the chunks example's arguments under the facts config: refused
    browser.press("Score")
    error, cleared = browser.wait(browser.errors, "the error message", 10), browser.table("Values")
    browser.screenshot("wrong-config")
    _score(browser, 1)
    assert browser.input_value("Config") == "facts"
    facts = _numbers(browser.table("Values"), "name", "value")
    browser.screenshot("facts-example")
    for got, (config, arguments) in ((chunks, app.EXAMPLES[0]), (facts, app.EXAMPLES[1])):
        result = _pr_auc(config, arguments)
        headline = {k: v for k, v in result.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        assert headline and {k: got[k] for k in headline} == headline, config
    assert any("expected an id string" in text for text in error), error
    assert cleared == []


def test_audit_space_in_chromium(browser: Browser, served: dict[str, tuple[str, Path]]) -> None:
    app = _load_app("audit")
    result = evaluate.load(str(REPO / "metrics" / "audit")).compute(**json.loads(app.EXAMPLE_JUDGMENTS))
    url, space = served["audit"]
    browser.open(url, "audit")
    _score(browser, 0)
    assert json.loads(browser.input_value("compute(...) arguments (JSON)")) == json.loads(app.EXAMPLE_JUDGMENTS)
    rows = browser.table("Means")
    browser.screenshot("example")
    _check_isolated(space, _log(space))  # vendored convrag: nothing read from the checkout while it scored
    expected = [("overall", d, v) for d, v in result["overall"].items()] + [
        (judge, d, v) for judge, dims in result["per_judge"].items() for d, v in dims.items()]
    assert [(r["judge"], r["dimension"], float(r["mean"]), int(r["n"]), int(r["failed"])) for r in rows] == [
        (judge, d, v["mean"], v["n"], v["failed"]) for judge, d, v in expected]


@pytest.mark.slow
def test_generation_space_in_chromium(browser: Browser, tmp_path: Path) -> None:
    example = _load_app("generation").EXAMPLE
    space = _assemble("generation", tmp_path)
    for url in _server(space):
        browser.open(url, "generation")
        _score(browser, 0)
        assert browser.input_value("Answer to score") == example["answer"]
        got = _numbers(browser.table("Metrics"), "metric", "value")
        note = browser.markdown()
        browser.screenshot("example")
        _check_isolated(space, _log(space))
    assert got == pytest.approx(_expected_generation(example), abs=1e-6)
    assert any("Judge-free" in text for text in note), note
