"""The Spaces' examples and Score button as a browser drives them. A click on an example runs in the browser (its js,
run here by node, gives the values the inputs then hold) and never reaches the server, so a Score pressed at once
sends the example; every Score run first clears the previous run's outputs, so an error never shows under an
earlier note; the retrieval note says why each query was left out of the means."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from tests.hub.test_spaces import FOLDERS, _client, _free_port, _load_app, _rows

NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node runs the examples' browser-side js; not installed")
FAST = ["retrieval", "pr_auc", "audit"]  # the generation Space loads a BERTScore model on its first Score
BAD_INPUT = {  # Score arguments that fail with a gr.Error (the message part checked too)
    "retrieval": (["q1 Q0 d1 x", "q1 0 d1 1", "1"], "predictions, line 1: expected 6 fields"),
    "pr_auc": (["chunks", "{"], "arguments: not valid JSON"),
    "audit": (["[1]", "", ""], "arguments: a JSON object"),
    "generation": (["", "", "", "an answer", "a reference", "ANSWERABLE", "", ""], "give a question"),
}
CLEARED = {  # the first update of every run: empty tables (headers kept), empty note / result
    "retrieval": ([["measure", "value"], ["query_id"]], ""),
    "pr_auc": ([["name", "value"]], None),
    "audit": ([["judge", "dimension", "mean", "n", "failed"]], None),
    "generation": ([["metric", "value"]], ""),
}


def _example_click(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The examples table (a Dataset component) of a demo's config and the one event its click triggers."""
    [table] = [c for c in config["components"] if c["type"] == "dataset"]
    events = [d for d in config["dependencies"] if [table["id"], "click"] in [list(t) for t in d["targets"]]]
    assert len(events) == 1, f"the examples table's click triggers {len(events)} events"
    return table, events[0]


def _run_js(js: str, *arguments: Any) -> Any:
    """What the browser gets from an event's js called with ``arguments``."""
    script = f"process.stdout.write(JSON.stringify(({js})(...{json.dumps(list(arguments))})))"
    done = subprocess.run([NODE, "-e", script], capture_output=True, text=True, timeout=30, check=True)
    return json.loads(done.stdout)


@needs_node
@pytest.mark.parametrize("name", FOLDERS)
def test_example_click_fills_the_inputs_in_the_browser(name: str) -> None:
    app = _load_app(name)
    table, event = _example_click(app.build_demo().get_config_file())
    assert not event["backend_fn"] and event["js"]  # no server round trip for a quick Score to overtake
    assert event["outputs"] == table["props"]["component_ids"] and event["inputs"] == [table["id"]]
    assert len(table["props"]["samples"]) == len(app.EXAMPLES) > 0
    for index, sample in enumerate(app.EXAMPLES):
        assert _run_js(event["js"], index) == sample


class _Served(dict):
    """Each Space's demo launched in this process on 127.0.0.1 on first use: name -> (app module, demo, URL)."""

    def __missing__(self, name: str) -> tuple[ModuleType, Any, str]:
        app = _load_app(name)
        demo = app.build_demo()
        port = _free_port()
        demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
        self[name] = (app, demo, f"http://127.0.0.1:{port}/")
        return self[name]


@pytest.fixture(scope="module")
def served() -> Iterator[_Served]:
    """The launched demos (offline, no analytics), closed when the module's tests are done."""
    demos = _Served()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRADIO_ANALYTICS_ENABLED", "False")
        patch.setenv("HF_HUB_OFFLINE", "1")
        try:
            yield demos
        finally:
            for _, demo, _ in demos.values():
                demo.close()


def _cleared(name: str, update: tuple[Any, ...] | list[Any]) -> bool:
    """Whether a Score update is the cleared state: every table empty with its headers, the note/result empty."""
    headers, last = CLEARED[name]
    tables = list(update[:-1])
    return [t["headers"] for t in tables] == headers and not any(t["data"] for t in tables) and update[-1] == last


def _scored(name: str, update: tuple[Any, ...] | list[Any]) -> bool:
    """Whether a Score update holds a score: a non-empty first table of numbers (and a note where there is one)."""
    column = {"retrieval": "value", "pr_auc": "value", "audit": "mean", "generation": "value"}[name]
    rows = _rows(update[0])
    values = [row[column] for row in rows if row[column] is not None]
    return bool(values) and all(isinstance(v, (int, float)) for v in values) and update[-1] not in ("", None, {})


def _example_then_score(name: str, served: _Served) -> list[Any]:
    """Click the first example (its js, as the browser runs it) and press Score at once; the run's updates."""
    app, demo, url = served[name]
    client = _client(url)
    clicked = time.monotonic()
    values = _run_js(_example_click(demo.get_config_file())[1]["js"], 0)
    job = client.submit(*values, api_name="/score")
    assert time.monotonic() - clicked < 1.0
    job.result(timeout=120)
    return job.outputs()


@needs_node
@pytest.mark.parametrize("name", FAST)
def test_example_then_score_at_once_scores(name: str, served: _Served) -> None:
    first, *_, last = _example_then_score(name, served)
    assert _cleared(name, first) and _scored(name, last)


@pytest.mark.slow
@needs_node
def test_generation_example_then_score_at_once_scores(served: _Served) -> None:
    first, *_, last = _example_then_score("generation", served)
    assert _cleared("generation", first) and _scored("generation", last) and "Judge-free" in last[-1]


@pytest.mark.parametrize("name", FOLDERS)
def test_score_clears_the_previous_outputs_before_an_error(name: str,
                                                          served: _Served) -> None:
    from gradio_client.exceptions import AppError

    arguments, message = BAD_INPUT[name]
    job = _client(served[name][2]).submit(*arguments, api_name="/score")
    with pytest.raises(AppError, match=message):
        job.result(timeout=60)
    assert [_cleared(name, update) for update in job.outputs()] == [True]  # the old note is gone, not left above


def test_retrieval_note_tells_unjudged_from_judged_without_relevant(
        served: _Served) -> None:
    app, _, url = served["retrieval"]
    *_, note = _client(url).predict(app.EXAMPLE_RUN, app.EXAMPLE_QRELS, app.EXAMPLE_K, api_name="/score")
    # q4 is ranked but has no qrels line; q5 is judged (grade 0) but nothing relevant; q3 is judged, not ranked
    assert note == ("3 queries scored; left out of the means: no judgments for q4; "
                    "judged, but no relevant document (grade >= 1) for q5")
    # the list form: query ids are positions; an empty list is no judgments, grades <= 0 are no relevant document
    assert app.excluded_note(["1", "2"], [[{"id": "d1", "grade": 1}], [], [{"id": "d2", "grade": 0}]]) == (
        "no judgments for 1; judged, but no relevant document (grade >= 1) for 2")
    assert app.excluded_note([], {"q1": {"d1": 1}}) == "none"

