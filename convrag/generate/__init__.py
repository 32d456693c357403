"""``convrag generate``: one RAG answer per task / turn of a built multi-turn benchmark, through the LLM layer.

    from convrag.generate import collect_items, generate_answers
    items = collect_items(folder, profile, mode="oracle")        # questions, histories, passages
    result = generate_answers(items, llm, max_tokens=300)      # answers, failures (counted, never filled in)

Modes: ``oracle`` (the turn's gold passages), ``retrieved`` (top ``k`` of a retriever run or a run file) and
``none`` (no passages). The output format follows the folder's evaluation profile (``generation``): MTRAG's
official submission lines (``mtrag``) or one line per turn for the judge-scored benchmarks (``judge``).
"""

from convrag.generate.answer import GenerationResult, generate_answers, render_prompt
from convrag.generate.tasks import GenItem, Passage, collect_items

__all__ = ["GenItem", "GenerationResult", "Passage", "collect_items", "generate_answers", "render_prompt"]
