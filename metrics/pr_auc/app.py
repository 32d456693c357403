"""Gradio Space of the PR-AUC metric: the keyword arguments of ``compute`` as JSON in, the values out.

Run it with ``python app.py``; host and port come from gradio's ``GRADIO_SERVER_NAME`` / ``GRADIO_SERVER_PORT``.
The metric is imported from this folder (the folder is the Space), so convrag need not be installed.
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

PACKAGE = "pr_auc_space"
CONFIGS = ["chunks", "facts"]
EXAMPLE_CHUNKS = json.dumps({
    "predictions": [["c1", "c2", "c3", "c4", "c5"], ["c7", "c6"]],
    "references": [[{"id": "c1", "grade": 3}, {"id": "c2", "grade": 0}, {"id": "c3", "grade": 2},
                    {"id": "c4", "grade": 1}, {"id": "c5", "grade": 0}, {"id": "c8", "grade": 2}],
                   [{"id": "c6", "grade": 3}, {"id": "c7", "grade": 0}]],
    "query_ids": ["q1", "q2"],
    "pool_signature": "pool-v1",
}, indent=1)
EXAMPLE_FACTS = json.dumps({
    "predictions": [["A|gt", "noise"]],
    "references": [["f1", "f2"]],
    "chunk_facts": {"A|gt": ["f1"], "noise": []},
}, indent=1)
EXAMPLES = [["chunks", EXAMPLE_CHUNKS], ["facts", EXAMPLE_FACTS]]


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


def numbers(value: Any, path: str = "") -> list[dict[str, Any]]:
    """Every number of a nested result as a (name, value) row; names join keys and list positions with dots."""
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [{"name": path, "value": value}]
    if isinstance(value, dict):
        return [row for k, v in value.items() for row in numbers(v, f"{path}.{k}" if path else str(k))]
    if isinstance(value, list):
        return [row for i, v in enumerate(value) for row in numbers(v, f"{path}.{i}")]
    return []


def score(config: str, arguments: str) -> Iterator[tuple[pd.DataFrame, dict[str, Any] | None]]:
    """``compute(**arguments)`` of the chosen config: the top-level numbers as a table, and the whole result; the
    first update clears the previous run's outputs, so an error never shows under an earlier run's values."""
    yield pd.DataFrame(columns=["name", "value"]), None
    try:
        kwargs = json.loads(arguments)
    except json.JSONDecodeError as err:
        raise gr.Error(f"arguments: not valid JSON ({err})") from None
    if not isinstance(kwargs, dict):
        raise gr.Error("arguments: a JSON object of compute's keyword arguments")
    load_folder(PACKAGE)
    metric = importlib.import_module(f"{PACKAGE}.pr_auc").PrAuc(config_name=config, keep_in_memory=True)
    try:
        result = metric.compute(**kwargs)
    except (TypeError, ValueError) as err:
        raise gr.Error(str(err)) from None
    headline = {k: v for k, v in result.items() if k not in ("curve", "per_query")}
    yield pd.DataFrame(numbers(headline)), result


def examples(samples: list[list[Any]], inputs: list[Any]) -> gr.Dataset:
    """The examples table. A click copies its sample into ``inputs`` in the browser, with no server round trip: a
    Score pressed right after the click then sends the example, not the inputs as they were before it arrived."""
    table = gr.Dataset(components=inputs, samples=samples, type="index", label="Examples")
    table.click(None, [table], inputs, js=f"(index) => {json.dumps(samples)}[index]", api_visibility="private")
    return table


def build_demo() -> gr.Blocks:
    """The Space's UI: config, compute's arguments as JSON; the values table and the full result."""
    with gr.Blocks(title="convrag PR-AUC metric") as demo:
        gr.Markdown("# PR-AUC (SEARA)\nMicro-averaged precision-recall curve over rank cut-offs against pooled "
                    "judgments. Give `compute`'s keyword arguments as a JSON object (see the metric card).")
        config = gr.Dropdown(CONFIGS, value="chunks", label="Config")
        arguments = gr.Code(label="compute(...) arguments (JSON)", language="json")
        button = gr.Button("Score", variant="primary")
        table = gr.Dataframe(label="Values", headers=["name", "value"])
        full = gr.JSON(label="Full result")
        examples(EXAMPLES, [config, arguments])
        button.click(score, [config, arguments], [table, full], api_name="score")
    return demo


if __name__ == "__main__":
    build_demo().launch()
