"""Evaluation regression cases: the CLI commands whose ``results.json`` numbers must not change.

``expected.json`` beside this file was recorded by ``python -m tests.regression.record`` on the code before
the one-evaluation-path redesign (issue 11; commit named in the file). ``flatten`` turns a results.json into
``{path: number}`` (per-query / per-turn tables as one digest each), leaving out what legitimately varies
between runs and machines (timings, folder paths, retriever settings).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "expected.json"

#: name -> (build arguments, evaluate arguments); ``{data}`` is the shared data folder
CASES: dict[str, tuple[list[str], list[str]]] = {
    "stratrag": (
        ["build", "stratrag", "--source", "{data}/hotpotqa/hotpot_dev_distractor_v1.first30.json"],
        ["--retrievers", "random,bm25,dense,hybrid", "--bootstrap", "200"],
    ),
    "mtrag": (
        ["build", "mtrag", "--source", "{data}/mtrag"]
        + [a for d in ("clapnq", "cloud", "fiqa", "govt")
           for v in ("lastturn", "questions", "rewrite", "qrels", "cited-corpus") for a in ("--config", f"{d}-{v}")],
        ["--retrievers", "bm25,dense", "--bootstrap", "100"],
    ),
    "recor": (
        ["build", "recor", "--source", "{data}/recor/sample"],
        ["--retrievers", "bm25,dense", "--bootstrap", "200",
         "--strategies", "baseline,reasoning,history,history+reasoning,reasoning-metadata"],
    ),
}

#: the encoder settings before issue 11: no query fitting, text cut at its end
UNFITTED = ("--dense-option", "fit_queries=false", "--dense-option", "query_truncation=right")

VOLATILE = {"seconds", "folder", "retriever_configs", "config", "build_options", "strategy_layouts", "rewrite"}
DIGESTED = {"per_query", "per_turn"}


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, allow_nan=True).encode()).hexdigest()[:20]


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """``{dotted path: leaf}`` of numbers and strings; digests for per-query tables; volatile keys left out."""
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in VOLATILE:
                continue
            path = f"{prefix}.{key}" if prefix else str(key)
            if key in DIGESTED:
                out[path] = _digest(value)
            else:
                out.update(flatten(value, path))
    elif isinstance(obj, list):
        # lists of records keyed by their identity fields, so that added entries do not shift paths
        for i, value in enumerate(obj):
            key = str(i)
            if isinstance(value, dict):
                ident = [str(value[k]) for k in ("system", "view", "a", "b", "retriever", "measure", "band")
                         if k in value and isinstance(value[k], str)]
                key = "|".join(ident) or key
            out.update(flatten(value, f"{prefix}[{key}]"))
    elif isinstance(obj, float) and not math.isfinite(obj):
        out[prefix] = None
    else:
        out[prefix] = obj
    return out
