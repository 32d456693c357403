"""Gradio Space of the generation metric: score one answer to the last turn of a conversation.

Without a judge it computes the judge-free components (BERTScore recall, ROUGE-L, K-Precision and their harmonic
mean, RB_alg before answerability conditioning) with the bundled all-MiniLM-L6-v2; with an OpenAI-compatible judge
endpoint it runs the whole metric (IDK-conditioned RB_alg, RB_llm and RL_F). Run it with ``python app.py``; host
and port come from gradio's ``GRADIO_SERVER_NAME`` / ``GRADIO_SERVER_PORT``. The metric is imported from this
folder (the folder is the Space).
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

PACKAGE = "generation_space"
ANSWERABILITY = ["ANSWERABLE", "PARTIAL", "UNANSWERABLE", "CONVERSATIONAL", "UNDERSPECIFIED"]
EXAMPLE = {
    "question": "And how long is it?",
    "history": "user: Which bridge links Denmark and Sweden?\nagent: The Oresund Bridge, between Copenhagen and Malmo.",
    "passages": "The Oresund Bridge is a combined railway and motorway bridge across the Oresund strait between "
                "Denmark and Sweden. It runs nearly 8 kilometres.\n\nMalmo is the third-largest city of Sweden.",
    "answer": "The Oresund Bridge is nearly 8 kilometres long.",
    "reference": "It is almost 8 km long.",
}
EXAMPLES = [[*EXAMPLE.values(), "ANSWERABLE", "", ""]]
_SCORER: list[Any] = []


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


def bert_scorer() -> Any:
    """The one BERTScore scorer of this process (the bundled all-MiniLM-L6-v2, loaded on first use)."""
    if not _SCORER:
        _SCORER.append(_module("components").BertScorer())
    return _SCORER[0]


def parse_history(text: str) -> list[dict[str, str]]:
    """Earlier turns: JSON ``[{"speaker", "text"}]``, or lines ``user: ...`` / ``agent: ...`` (a line without
    a prefix continues the turn above)."""
    text = text.strip()
    if text.startswith("["):
        try:
            turns = json.loads(text)
        except json.JSONDecodeError as err:
            raise gr.Error(f"history: not valid JSON ({err})") from None
        if not all(isinstance(t, dict) and t.get("speaker") in ("user", "agent") and isinstance(t.get("text"), str)
                   for t in turns):
            raise gr.Error('history: every JSON turn needs "speaker" (user or agent) and "text"')
        return [{"speaker": t["speaker"], "text": t["text"]} for t in turns]
    turns: list[dict[str, str]] = []
    for line in filter(None, (raw.strip() for raw in text.splitlines())):
        speaker, _, rest = line.partition(":")
        if rest and speaker.strip().lower() in ("user", "agent"):
            turns.append({"speaker": speaker.strip().lower(), "text": rest.strip()})
        elif turns:
            turns[-1]["text"] += "\n" + line
        else:
            raise gr.Error(f"history: start each turn with 'user:' or 'agent:', got {line!r}")
    return turns


def parse_passages(text: str) -> list[str]:
    """Passages: a JSON list of strings, or blocks of text separated by blank lines."""
    text = text.strip()
    if text.startswith("["):
        try:
            passages = json.loads(text)
        except json.JSONDecodeError as err:
            raise gr.Error(f"passages: not valid JSON ({err})") from None
        if not all(isinstance(p, str) for p in passages):
            raise gr.Error("passages: the JSON list must hold strings")
        return passages
    blocks, current = [], []
    for line in text.splitlines() + [""]:
        if line.strip():
            current.append(line.strip())
        elif current:
            blocks.append(" ".join(current))
            current = []
    return blocks


def judge_free(answer: str, reference: str, passages: list[str]) -> dict[str, float]:
    """BERTScore recall component (R + 1) / 2, ROUGE-L F, K-Precision and RB_alg (their harmonic mean)."""
    components = _module("components")
    scorer = bert_scorer()
    recall = components.recall_batch([answer], [reference], scorer)[0]
    rouge = components.rouge_l(answer, reference)
    k_precision = components.k_precision_batch([answer], [passages], scorer)[0]
    return {"recall": recall, "rouge_l": rouge, "k_precision": k_precision,
            "rb_alg_raw": components.rb_alg(recall, rouge, k_precision)}


def judged(answer: str, reference: str, passages: list[str], conversation: list[dict[str, str]],
           answerability: str, judge: str) -> dict[str, Any]:
    """The whole metric with the judge ``judge``: conditioned metrics first, then the task's raw components."""
    metric = _module("generation").Generation(keep_in_memory=True)
    result = metric.compute(predictions=[answer], references=[reference], passages=[passages],
                            conversations=[conversation], answerabilities=[answerability], judge=judge,
                            bertscore_model=bert_scorer(), n_bootstrap=0)
    row = result["per_task"][0]
    keys = ("recall", "rouge_l", "k_precision", "rb_alg_raw", "rb_llm_raw", "rl_f_raw", "idk", "clarification")
    return {**{m: result[m] for m in ("rb_alg", "rb_llm", "rl_f")}, **{k: row[k] for k in keys}}


def score(question: str, history: str, passages: str, answer: str, reference: str, answerability: str,
          judge_url: str, judge_model: str) -> Iterator[tuple[pd.DataFrame, str]]:
    """The metric values as a (metric, value) table and a line saying what was computed; the first update clears
    the previous run's table and note, so an error never shows under an earlier run's note."""
    yield pd.DataFrame(columns=["metric", "value"]), ""
    if not question.strip() or not answer.strip() or not reference.strip():
        raise gr.Error("give a question, an answer and a reference answer")
    texts = parse_passages(passages)
    try:
        if judge_url.strip() or judge_model.strip():
            if not (judge_url.strip() and judge_model.strip()):
                raise gr.Error("a judge needs both its base URL and its model name")
            conversation = parse_history(history) + [{"speaker": "user", "text": question.strip()}]
            values = judged(answer, reference, texts, conversation, answerability,
                            f"openai:{judge_model.strip()}@{judge_url.strip()}")
            note = f"Judged by {judge_model.strip()}; rb_alg, rb_llm and rl_f are conditioned on answerability."
        else:
            parse_history(history)
            values = judge_free(answer, reference, texts)
            note = "Judge-free components (no answerability conditioning); give a judge endpoint for RB_llm and RL_F."
    except ValueError as err:
        raise gr.Error(str(err)) from None
    if not texts:
        note += " No passages: K-Precision is 0, and so is RB_alg."
    table = pd.DataFrame([{"metric": k, "value": v} for k, v in values.items()])
    yield table, note


def examples(samples: list[list[Any]], inputs: list[Any]) -> gr.Dataset:
    """The examples table. A click copies its sample into ``inputs`` in the browser, with no server round trip: a
    Score pressed right after the click then sends the example, not the inputs as they were before it arrived."""
    table = gr.Dataset(components=inputs, samples=samples, type="index", label="Examples")
    table.click(None, [table], inputs, js=f"(index) => {json.dumps(samples)}[index]", api_visibility="private")
    return table


def build_demo() -> gr.Blocks:
    """The Space's UI: conversation, passages, answer, reference, optional judge endpoint; the metric table."""
    with gr.Blocks(title="convrag generation metric") as demo:
        gr.Markdown("# Generation metric (MTRAG)\nScores an answer to the last turn of a conversation. Without a "
                    "judge: BERTScore recall, ROUGE-L, K-Precision and RB_alg (bundled all-MiniLM-L6-v2, so "
                    "values differ from the official deberta-xlarge-mnli setting). With an OpenAI-compatible judge: "
                    "IDK-conditioned RB_alg, RB_llm and RL_F (API key from the OPENAI_API_KEY secret).")
        with gr.Row():
            with gr.Column():
                question = gr.Textbox(label="Question (the last user turn)")
                history = gr.Textbox(label="Earlier turns ('user: ...' / 'agent: ...' lines, or JSON)", lines=3)
                passages = gr.Textbox(label="Passages (separated by blank lines, or a JSON list)", lines=5)
            with gr.Column():
                answer = gr.Textbox(label="Answer to score", lines=3)
                reference = gr.Textbox(label="Reference answer", lines=3)
                answerability = gr.Dropdown(ANSWERABILITY, value="ANSWERABLE", label="Answerability (judge only)")
                with gr.Row():
                    judge_url = gr.Textbox(label="Judge base URL (optional)", placeholder="http://host:8000/v1")
                    judge_model = gr.Textbox(label="Judge model (optional)")
        button = gr.Button("Score", variant="primary")
        note = gr.Markdown()
        table = gr.Dataframe(label="Metrics", headers=["metric", "value"])
        inputs = [question, history, passages, answer, reference, answerability, judge_url, judge_model]
        examples(EXAMPLES, inputs)
        button.click(score, inputs, [table, note], api_name="score")
    return demo


if __name__ == "__main__":
    build_demo().launch()
