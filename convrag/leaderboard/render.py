"""The board's static files: ``board.json`` (unrounded, strict JSON), ``board.md`` and ``index.html`` (the same
sections: benchmark identity, main table with CIs and run-file links, each entry's caveats, paired tests on the
primary measure, turn positions, domains; values rounded to ``digits``).

A run file's link is ``base`` + its path inside the collection: a relative path from the board's folder to a local
collection, or the Hub's file URL of a repo's revision.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

from convrag.core.jsonl import json_safe

#: a table cell: plain text, or (text, link)
Cell = str | tuple[str, str]
Section = tuple[str, str, list[str], list[list[Cell]]]
#: what the main table's values are, per aggregation rule (else the mean over queries)
RULES = {
    "domain-macro": "mean of the domain means, bootstrap stratified by domain",
    "mtrag-official": 'the official weighted "all" row (per-domain means rounded to 5 decimals, weighted by tasks '
    "submitted per domain), bootstrap stratified by domain",
}


def _number(value: float | None, digits: int) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _interval(cell: dict[str, float], digits: int) -> str:
    return f"{_number(cell['mean'], digits)} [{_number(cell['low'], digits)}, {_number(cell['high'], digits)}]"


def sections(board: dict[str, Any], base: str, digits: int = 4) -> list[Section]:
    """The board as (title, note, columns, rows) sections, in page order."""
    measures, primary = board["measures"], board["primary"]
    rule = RULES.get(board["aggregation"], "mean over queries")
    main = [
        [
            str(i),
            r["system"],
            r["entry"],
            *(_interval(r["scores"][m], digits) for m in measures),
            str(r["n"]),
            (Path(r["run"]).name, base + r["run"]),
        ]
        for i, r in enumerate(board["rows"], start=1)
    ]
    out: list[Section] = [("Main table", f"{rule}; {board['confidence']:.0%} percentile bootstrap CI over "
                           f"{board['n_bootstrap']} resamples (seed {board['seed']})",
                           ["#", "system", "entry", *measures, "n", "run"], main)]  # fmt: skip
    caveats: list[list[Cell]] = [[name, text] for name, texts in board["caveats"].items() for text in texts]
    out.append(("Caveats", "what each entry's results folder says to keep in mind", ["entry", "caveat"], caveats))
    paired = [
        [
            p["a"],
            p["b"],
            _number(p["diff"], digits),
            _number(p["p_randomization"], 4),
            _number(p["p_ttest"], 4),
            str(p["n"]),
        ]
        for p in board["paired"]
        if p["measure"] == primary
    ]
    out.append((f"Paired tests ({primary})", "A - B over the queries both scored; two-sided paired randomisation "
                "and t-test p-values (board.json holds every measure)",
                ["A", "B", "mean A - B", "p (randomisation)", "p (t-test)", "n"], paired))  # fmt: skip
    if board.get("domain_table"):
        per_domain = [[r["row"], r["domain"], str(r["count"]), str(r["n"]), *(_interval(r["scores"][m], digits)
                       for m in measures)] for r in board["domain_table"]]  # fmt: skip
        out.append(("Per domain", "mean over the domain's scored tasks (the official per-domain row, unrounded) with "
                    "its bootstrap CI; count: tasks submitted (the official weight), n: tasks scored",
                    ["system", "domain", "count", "n", *measures], per_domain))  # fmt: skip
    for key, title in (("turn_positions", "Turn positions"), ("domains", "Domains")):
        view = board[key]
        if view:
            columns = list(view["n"])
            rows = [[row, *(_number(values.get(c), digits) for c in columns)] for row, values in view["rows"].items()]
            out.append((f"{title} ({view['measure']})", "queries: " + ", ".join(f"{c} {view['n'][c]}" for c in columns),
                        ["system", *columns], rows))  # fmt: skip
    return out


def _identity_line(board: dict[str, Any]) -> str:
    ident = board["identity"]
    where = f"{ident['repo_id']}@{ident['revision']}" if ident.get("repo_id") else "a local build"
    return (f"Benchmark {ident['benchmark']} ({where}), split {ident.get('split')}, search {ident.get('search')}, "
            f"qrels sha256 {ident['qrels_sha256'][:12]}; {_count(len(board['entries']), 'entry', 'entries')}, "
            f"{_count(len(board['rows']), 'system', 'systems')}.")  # fmt: skip


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _md_cell(cell: Cell) -> str:
    text = f"[{cell[0]}]({cell[1]})" if isinstance(cell, tuple) else cell
    return text.replace("|", "\\|")


def markdown(board: dict[str, Any], base: str, digits: int = 4) -> str:
    """``board.md``."""
    lines = [f"# {board['identity']['benchmark']} leaderboard", "", _identity_line(board)]
    for title, note, columns, rows in sections(board, base, digits):
        lines += ["", f"## {title}", "", note + ".", ""]
        if not rows:
            lines.append("(none)")
            continue
        lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _html_cell(cell: Cell) -> str:
    if isinstance(cell, tuple):
        return f'<td><a href="{html.escape(cell[1])}">{html.escape(cell[0])}</a></td>'
    return f"<td>{html.escape(cell)}</td>"


def page(board: dict[str, Any], base: str, digits: int = 4) -> str:
    """``index.html``: a page with no script and no external resource."""
    title = f"{board['identity']['benchmark']} leaderboard"
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             "<style>table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}</style></head><body>",
             f"<h1>{html.escape(title)}</h1><p>{html.escape(_identity_line(board))}</p>"]  # fmt: skip
    for number, (heading, note, columns, rows) in enumerate(sections(board, base, digits)):
        parts.append(f"<h2>{html.escape(heading)}</h2><p>{html.escape(note)}.</p>")
        head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
        body = "".join("<tr>" + "".join(_html_cell(c) for c in row) + "</tr>" for row in rows)
        parts.append(f"<table id='table-{number}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    return "".join(parts) + "</body></html>\n"


def write_board(board: dict[str, Any], out: Path, base: str, digits: int = 4, space: bool = False) -> list[Path]:
    """Write ``board.json``, ``board.md`` and ``index.html`` into ``out``; with ``space``, also the files that make
    ``out`` a Gradio Space (:data:`SPACE_CARD`, ``app.py`` from :mod:`convrag.leaderboard.space_app`,
    ``sections.json``: :func:`sections`, and an empty ``requirements.txt``: the Space needs gradio only). The
    paths written."""
    out.mkdir(parents=True, exist_ok=True)
    files = {"board.json": json.dumps(json_safe(board), indent=1, allow_nan=False) + "\n",
             "board.md": markdown(board, base, digits), "index.html": page(board, base, digits)}  # fmt: skip
    if space:
        files["app.py"] = Path(__file__).with_name("space_app.py").read_text(encoding="utf-8")
        files["sections.json"] = json.dumps(sections(board, base, digits), indent=1) + "\n"
        files["requirements.txt"] = ""
        files["README.md"] = SPACE_CARD.format(benchmark=board["identity"]["benchmark"])
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
    return [out / name for name in files]


#: the Space card (README.md) of a board folder written with ``space``
SPACE_CARD = """---
title: {benchmark} leaderboard
emoji: 🏆
colorFrom: indigo
colorTo: green
sdk: gradio
sdk_version: 6.31.0
app_file: app.py
pinned: false
tags:
- leaderboard
- convrag
---

# {benchmark} leaderboard

Built by `convrag leaderboard build --space`: the main table with confidence intervals, each entry's caveats, paired
tests and turn positions of board.json, and a paired comparison of any two systems.
"""
