"""``convrag generate``: one RAG answer per task / turn of a built multi-turn benchmark, through the LLM layer.

    from convrag.generate import collect_items, generate_answers
    items = collect_items(folder, profile, mode="oracle")        # questions, histories, passages
    result = generate_answers(items, llm, max_tokens=300)      # answers, failures (counted, never filled in)

Modes: ``oracle`` (the turn's gold passages), ``retrieved`` (top ``k`` of a retriever run or a run file) and
``none`` (no passages). The output format follows the folder's evaluation profile (``generation``): MTRAG's
official submission lines (``mtrag``) or one line per turn for the judge-scored benchmarks (``judge``).
"""

import importlib
from typing import Any

#: public name -> its module; imported on first use, so ``convrag --help`` and the CLI's other commands do not pay
#: for the LLM layer
_EXPORTS = {"GenerationResult": "answer", "generate_answers": "answer", "render_prompt": "answer",
            "GenItem": "tasks", "Passage": "tasks", "collect_items": "tasks"}  # fmt: skip

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'convrag.generate' has no attribute {name!r}")
    return getattr(importlib.import_module(f"convrag.generate.{_EXPORTS[name]}"), name)
