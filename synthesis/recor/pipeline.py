"""RECOR's Decomposition-and-Verification pipeline (RECOR, section 3.2; appendix C traces one example; appendix
F gives every step's instructions, inputs and outputs): question-answer items with supporting documents ->
grounded multi-turn conversations with per-turn gold documents and retrieval reasoning, written as a RECOR
release.

Stages (one module each): ``load`` (synthesis.recor.inputs: JSONL / BRIGHT / MTRAG inputs) -> ``align``
(document-answer alignment) -> ``aspects`` (iterated granular aspects, overlap and suitability checks,
ordering) -> ``facts`` (atomic facts verified against the documents; aspects without a verified fact
dropped) -> ``turns`` (sub-questions, document scoring and selection, user queries, grounded answers, turn
diversity, retrieval reasoning; conversation-level checks) -> ``release`` (synthesis.recor.release). Options are
the stages' constructor keywords, given once by name (``llm``, ``concurrency`` go to every LLM stage; ``profile``,
``authors`` by default or ``convrag``, to ``aspects`` and ``turns``: the authors' readings of what the paper leaves
open, or convrag's earlier ones; each stage records it in its params.json).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from convrag.core.errors import ConvragError
from convrag.synthesis.engine.options import order_stages, split_options
from convrag.synthesis.engine.pipeline import Pipeline, Stage


def stage_classes() -> dict[str, type[Stage]]:
    """Stage name -> class, in pipeline order."""
    from convrag.synthesis.recor.align import Align
    from convrag.synthesis.recor.aspects import Aspects
    from convrag.synthesis.recor.facts import Facts
    from convrag.synthesis.recor.inputs import Load
    from convrag.synthesis.recor.release import Release
    from convrag.synthesis.recor.turns import Turns

    return {"load": Load, "align": Align, "aspects": Aspects, "facts": Facts, "turns": Turns, "release": Release}


DEFAULT_STAGES = ("load", "align", "aspects", "facts", "turns", "release")
_SHARED = ("source",)


def recor_pipeline(source: str | None, stages: Sequence[str] = DEFAULT_STAGES, *, seed: int = 0,
                   options: dict[str, Any] | None = None, count_items: bool = False) -> Pipeline:
    """The D&V pipeline over the input file ``source`` with ``stages`` (in order), each built from the
    ``options`` it takes; ``count_items`` reads the input once so that a dry run can estimate every stage."""
    registry = stage_classes()
    ordered = order_stages(registry, stages, "RECOR D&V")
    per_stage = split_options(registry, ordered, dict(options or {}), _SHARED)
    built: list[Stage] = []
    for name in ordered:
        cls = registry[name]
        try:
            stage = cls(source, **per_stage[name]) if name in ("load", "release") else cls(**per_stage[name])
        except TypeError as err:
            raise ConvragError(f"--option for stage {name}: {err}") from None
        built.append(stage)
    load = next((s for s in built if s.name == "load"), None)
    if load is not None and count_items:
        expected = load.estimate(None).records  # type: ignore[arg-type]
        for stage in built:
            if hasattr(stage, "expected_items"):
                stage.expected_items = expected
    return Pipeline("recor-dv", built, seed=seed, order=tuple(registry))
