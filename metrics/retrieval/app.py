"""Gradio Space of the retrieval metric: paste a run and qrels (JSON or TREC text), get the score table.

Run it with ``python app.py``; host and port come from gradio's ``GRADIO_SERVER_NAME`` / ``GRADIO_SERVER_PORT``.
The metric is imported from this folder (the folder is the Space), so convrag need not be installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import gradio as gr
import pandas as pd

EXAMPLE_RUN = """\
q1 Q0 d3 1 9.1 bm25
q1 Q0 d1 2 7.4 bm25
q1 Q0 d2 3 3.0 bm25
q2 Q0 d4 1 5.5 bm25
q2 Q0 d5 2 5.2 bm25
q2 Q0 d6 3 1.0 bm25
q4 Q0 d8 1 2.0 bm25
"""
EXAMPLE_QRELS = """\
q1 0 d1 2
q1 0 d2 1
q2 0 d6 1
q2 0 d7 1
q3 0 d9 1
q5 0 d10 0
"""
EXAMPLE_RUN_JSON = json.dumps({"q1": ["d3", "d1", "d2"], "q2": ["d4", "d5", "d6"]})
EXAMPLE_QRELS_JSON = json.dumps({"q1": {"d1": 2, "d2": 1}, "q2": {"d6": 1, "d7": 1}})
EXAMPLE_K = "1, 3, 5, 10"
EXAMPLES = [[EXAMPLE_RUN, EXAMPLE_QRELS, EXAMPLE_K], [EXAMPLE_RUN_JSON, EXAMPLE_QRELS_JSON, "1, 3"]]
PACKAGE = "retrieval_space"


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


def _module(name: str) -> ModuleType:
    load_folder(PACKAGE)
    return importlib.import_module(f"{PACKAGE}.{name}")


def _read_trec(text: str, what: str) -> dict[str, dict[str, Any]]:
    """TREC run (``what`` is "predictions") or qrels text read by the folder's own reader; a malformed line is a
    ``gr.Error`` naming ``what`` and the line."""
    trec = _module("trec")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "pasted.txt"
        path.write_text(text, encoding="utf-8")
        try:
            return (trec.read_run if what == "predictions" else trec.read_qrels)(path)
        except trec.TrecFormatError as err:
            where = err.path if err.line is None else f"{err.path}:{err.line}"
            line = "" if err.line is None else f", line {err.line}"
            raise gr.Error(f"{what}{line}: {str(err).removeprefix(where + ': ')}") from None


def parse_table(text: str, what: str) -> dict[str, Any] | list[Any]:
    """A run or qrels given as JSON (``{query: [doc, ...]}``, ``{query: {doc: score | grade}}`` or a list with one
    entry per query) or as TREC text (run: ``qid Q0 doc rank score tag``; qrels: ``qid 0 doc grade``)."""
    text = text.strip()
    if not text:
        raise gr.Error(f"{what}: nothing pasted")
    if text[0] in "[{":
        try:
            value = json.loads(text)
        except json.JSONDecodeError as err:
            raise gr.Error(f"{what}: not valid JSON ({err})") from None
        if not isinstance(value, (dict, list)):
            raise gr.Error(f"{what}: JSON must be an object keyed by query id or a list with one entry per query")
        return value
    return _read_trec(text, what)


def _items(value: Any, key: str) -> list[Any]:
    """One query's ranking or judgments in the metric's input form: ids stay ids, {doc: number} become objects."""
    if isinstance(value, dict):
        return [{"id": doc, key: number} for doc, number in value.items()]
    return value


def metric_inputs(predictions: Any, references: Any) -> dict[str, Any]:
    """``predictions``, ``references`` and ``query_ids`` for ``compute``: every query of the qrels, then the run's
    other queries (an unjudged query is excluded by the metric, a judged query missing from the run scores 0)."""
    if isinstance(predictions, list) and isinstance(references, list):
        return {"predictions": [_items(p, "score") for p in predictions],
                "references": [_items(r, "grade") for r in references]}  # fmt: skip
    if not isinstance(predictions, dict) or not isinstance(references, dict):
        raise gr.Error("give both predictions and references keyed by query id, or both as lists (one per query)")
    query_ids = list(references) + [q for q in predictions if q not in references]
    return {"query_ids": query_ids,
            "predictions": [_items(predictions.get(q, []), "score") for q in query_ids],
            "references": [_items(references.get(q, []), "grade") for q in query_ids]}  # fmt: skip


def parse_k_values(text: str) -> list[int]:
    """Cut-offs from a comma- or space-separated list of positive integers."""
    try:
        values = [int(part) for part in text.replace(",", " ").split()]
    except ValueError:
        raise gr.Error(f"k values must be integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise gr.Error(f"k values must be positive integers, got {text!r}")
    return values


def excluded_note(excluded: list[str], references: dict[str, Any] | list[Any]) -> str:
    """Why each query left out of the means was left out: its judgments are absent or empty ("no judgments"), or
    every judged document has a grade <= 0 ("judged, no relevant document")."""
    judged = references if isinstance(references, dict) else {str(i): r for i, r in enumerate(references)}
    unjudged = [q for q in excluded if not judged.get(q)]
    irrelevant = [q for q in excluded if judged.get(q)]
    parts = [f"no judgments for {', '.join(unjudged)}" if unjudged else "",
             f"judged, but no relevant document (grade >= 1) for {', '.join(irrelevant)}" if irrelevant else ""]
    return "; ".join(p for p in parts if p) or "none"


def score(predictions: str, references: str, k_values: str) -> Iterator[tuple[pd.DataFrame, pd.DataFrame, str]]:
    """The mean of every measure, the per-query table and a one-line summary of what was scored; the first update
    clears the previous run's tables and note, so an error never shows under an earlier run's results."""
    yield pd.DataFrame(columns=["measure", "value"]), pd.DataFrame(columns=["query_id"]), ""
    qrels = parse_table(references, "references")
    inputs = metric_inputs(parse_table(predictions, "predictions"), qrels)
    try:
        metric = _module("retrieval").Retrieval(keep_in_memory=True)
        result = metric.compute(**inputs, k_values=parse_k_values(k_values), per_query=True)
    except ValueError as err:
        raise gr.Error(str(err)) from None
    means = pd.DataFrame([{"measure": m, "value": v} for m, v in result.items() if isinstance(v, float)])
    per_query = pd.DataFrame([{"query_id": q, **values} for q, values in result["per_query"].items()])
    note = (f"{result['num_queries']} queries scored; left out of the means: "
            f"{excluded_note(result['excluded_queries'], qrels)}")
    yield means, per_query, note


def examples(samples: list[list[Any]], inputs: list[Any]) -> gr.Dataset:
    """The examples table. A click copies its sample into ``inputs`` in the browser, with no server round trip: a
    Score pressed right after the click then sends the example, not the inputs as they were before it arrived."""
    table = gr.Dataset(components=inputs, samples=samples, type="index", label="Examples")
    table.click(None, [table], inputs, js=f"(index) => {json.dumps(samples)}[index]", api_visibility="private")
    return table


def build_demo() -> gr.Blocks:
    """The Space's UI: run and qrels text, k values, the averaged and per-query tables."""
    with gr.Blocks(title="convrag retrieval metric") as demo:
        gr.Markdown("# Retrieval metric\nnDCG@k, Recall@k, R_cap@k, Success@k, MRR@k, MAP@k and P@k with "
                    "trec_eval's conventions. Paste a run and its qrels as TREC text or JSON.")
        with gr.Row():
            predictions = gr.Textbox(label="Predictions (run): TREC run lines or JSON", lines=8)
            references = gr.Textbox(label="References (qrels): TREC qrels lines or JSON", lines=8)
        k_values = gr.Textbox(label="k values", value=EXAMPLE_K)
        button = gr.Button("Score", variant="primary")
        note = gr.Markdown()
        means = gr.Dataframe(label="Mean over scored queries", headers=["measure", "value"])
        per_query = gr.Dataframe(label="Per query")
        examples(EXAMPLES, [predictions, references, k_values])
        button.click(score, [predictions, references, k_values], [means, per_query, note], api_name="score")
    return demo


if __name__ == "__main__":
    build_demo().launch()
