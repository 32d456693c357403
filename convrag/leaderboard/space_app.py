"""The board's Gradio Space: ``app.py`` of a board folder written with ``convrag leaderboard build --space``.

It shows the tables of ``sections.json`` (main table with CIs, caveats, paired tests on the primary measure, turn
positions, domains, as ``board.md`` has them) and a paired comparison of any two systems on any measure, looked up
in ``board.json``. It imports gradio and the standard library only: a Space does not install convrag.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import gradio as gr

HERE = Path(__file__).resolve().parent


def _number(value: float | None) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:.4f}"


def compare(board: dict[str, Any], a: str, b: str, measure: str) -> str:
    """The paired test of rows ``a`` and ``b`` on ``measure`` from ``board["paired"]``, as Markdown (A - B)."""
    if not a or not b or a == b:
        return "Pick two different systems."
    for row in board["paired"]:
        if row["measure"] == measure and {row["a"], row["b"]} == {a, b}:
            sign = 1 if row["a"] == a else -1
            return (f"**{a}** - **{b}** on {measure}: mean difference {_number(sign * row['diff'])} over "
                    f"{row['n']} queries; p = {_number(row['p_randomization'])} (paired randomisation), "
                    f"p = {_number(row['p_ttest'])} (paired t-test)")  # fmt: skip
    return f"No paired test of {a} and {b} on {measure} (no query scored by both)."


def build_demo(board: dict[str, Any], sections: list[list[Any]]) -> gr.Blocks:
    """The Space's UI: every table of ``sections`` ([title, note, columns, rows]), then the paired comparison."""
    rows = [r["id"] for r in board["rows"]]
    with gr.Blocks(title=f"{board['identity']['benchmark']} leaderboard") as demo:
        gr.Markdown(f"# {board['identity']['benchmark']} leaderboard")
        for title, note, columns, cells in sections:
            gr.Markdown(f"## {title}\n{note}.")
            values = [[c[0] if isinstance(c, list) else c for c in row] for row in cells]
            gr.Dataframe(value=values or None, headers=columns, label=title, interactive=False,
                         wrap=True)  # fmt: skip  # long caveats wrap, not cut off
        gr.Markdown("## Compare two systems")
        with gr.Row():
            a = gr.Dropdown(rows, value=rows[0], label="System A")
            b = gr.Dropdown(rows, value=rows[-1], label="System B")
            measure = gr.Dropdown(board["measures"], value=board["primary"], label="Measure")
        result = gr.Markdown(compare(board, rows[0], rows[-1], board["primary"]))
        # one event for the three pickers: picks made while it runs are answered by one more run, with the last
        gr.on([a.change, b.change, measure.change], lambda x, y, m: compare(board, x, y, m), [a, b, measure], result,
              trigger_mode="always_last")  # fmt: skip
    return demo


if __name__ == "__main__":
    board_file, sections_file = HERE / "board.json", HERE / "sections.json"
    build_demo(json.loads(board_file.read_text(encoding="utf-8")),
               json.loads(sections_file.read_text(encoding="utf-8"))).launch()  # fmt: skip
