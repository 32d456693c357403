"""Gradio Space of the audit metric: judgments (or raw turns and a judge endpoint) as JSON in, the means out.

Run it with ``python app.py``; host and port come from gradio's ``GRADIO_SERVER_NAME`` / ``GRADIO_SERVER_PORT``.
The metric is imported from this folder (the folder is the Space).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import gradio as gr
import pandas as pd

PACKAGE = "audit_space"
EXAMPLE_JUDGMENTS = json.dumps({
    "judges": ["judge-a", "judge-a", "judge-b", "judge-b", "judge-a"],
    "dimensions": ["query_evidence", "query_evidence", "query_evidence", "query_evidence", "dependency_type"],
    "scores": [5.0, 3.0, 2.0, None, None],
    "labels": [None, None, None, None, "coreference"],
    "errors": [None, None, None, "unparseable: no rating", None],
}, indent=1)
EXAMPLES = [[EXAMPLE_JUDGMENTS, "", ""]]


def load_folder(name: str) -> ModuleType:
    """This folder imported as the package ``name`` (its modules import each other relatively)."""
    if name not in sys.modules:
        folder = Path(__file__).resolve().parent
        spec = importlib.util.spec_from_file_location(name, folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])
        package = importlib.util.module_from_spec(spec)
        sys.modules[name] = package
        spec.loader.exec_module(package)
    return sys.modules[name]


def mean_rows(result: dict[str, Any]) -> pd.DataFrame:
    """One row per judge (and "overall") and scored dimension: mean, readable verdicts, failed verdicts."""
    rows = [{"judge": "overall", "dimension": d, "mean": v.get("mean"), "n": v.get("n"), "failed": v.get("failed")}
            for d, v in result["overall"].items()]
    rows += [{"judge": judge, "dimension": d, "mean": v.get("mean"), "n": v.get("n"), "failed": v.get("failed")}
             for judge, dims in result["per_judge"].items() for d, v in dims.items()]
    return pd.DataFrame(rows, columns=["judge", "dimension", "mean", "n", "failed"])


def score(arguments: str, judge_url: str, judge_model: str) -> Iterator[tuple[pd.DataFrame, dict[str, Any] | None]]:
    """``compute(**arguments)`` (with ``judge`` from the endpoint fields when given): the means and the result; the
    first update clears the previous run's outputs, so an error never shows under an earlier run's means."""
    yield pd.DataFrame(columns=["judge", "dimension", "mean", "n", "failed"]), None
    try:
        kwargs = json.loads(arguments)
    except json.JSONDecodeError as err:
        raise gr.Error(f"arguments: not valid JSON ({err})") from None
    if not isinstance(kwargs, dict):
        raise gr.Error("arguments: a JSON object of compute's keyword arguments")
    if judge_url.strip() or judge_model.strip():
        if not (judge_url.strip() and judge_model.strip()):
            raise gr.Error("a judge needs both its base URL and its model name")
        kwargs["judge"] = f"openai:{judge_model.strip()}@{judge_url.strip()}"
    load_folder(PACKAGE)
    metric = importlib.import_module(f"{PACKAGE}.audit").Audit(keep_in_memory=True)
    try:
        result = metric.compute(**kwargs)
    except (TypeError, ValueError) as err:
        raise gr.Error(str(err)) from None
    yield mean_rows(result), result


def examples(samples: list[list[Any]], inputs: list[Any]) -> gr.Dataset:
    """The examples table. A click copies its sample into ``inputs`` in the browser, with no server round trip: a
    Score pressed right after the click then sends the example, not the inputs as they were before it arrived."""
    table = gr.Dataset(components=inputs, samples=samples, type="index", label="Examples")
    table.click(None, [table], inputs, js=f"(index) => {json.dumps(samples)}[index]", api_visibility="private")
    return table


def build_demo() -> gr.Blocks:
    """The Space's UI: compute's arguments as JSON, an optional judge endpoint; the means and the full result."""
    with gr.Blocks(title="convrag audit metric") as demo:
        gr.Markdown("# Audit\nAggregates LLM-judge verdicts on a benchmark's labels (MTR-Eval dimensions, RECOR "
                    "labels). Give judgments (`judges`, `dimensions`, `scores`, ...) as JSON, or raw turns "
                    "(`queries`, `documents`, `answers`) with an OpenAI-compatible judge endpoint "
                    "(API key from the OPENAI_API_KEY secret).")
        arguments = gr.Code(label="compute(...) arguments (JSON)", language="json")
        with gr.Row():
            judge_url = gr.Textbox(label="Judge base URL (raw turns only)", placeholder="http://host:8000/v1")
            judge_model = gr.Textbox(label="Judge model (raw turns only)")
        button = gr.Button("Score", variant="primary")
        table = gr.Dataframe(label="Means", headers=["judge", "dimension", "mean", "n", "failed"])
        full = gr.JSON(label="Full result")
        examples(EXAMPLES, [arguments, judge_url, judge_model])
        button.click(score, [arguments, judge_url, judge_model], [table, full], api_name="score")
    return demo


if __name__ == "__main__":
    build_demo().launch()
