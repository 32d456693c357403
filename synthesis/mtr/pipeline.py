"""MTR-Pipeline (MTR-Suite, section 4): corpus -> curated passages (curate) -> clusters (cluster) -> conversations
written by the Questioner and Responder (converse) -> casual follow-up questions (polish) -> MTR-Bench files with
hard topic switches and a train/test split (assemble).

``mtr_pipeline`` assembles the stages a run asks for. Options are the keyword parameters of the stages'
constructors (``Curate``, ``Cluster``), given once by name; an option no chosen stage takes is an error
that lists the valid ones. ``source`` is the user's corpus (JSONL / Parquet / a built convrag folder).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from convrag.core.errors import ConvragError
from convrag.synthesis.curation.curate import Curate
from convrag.synthesis.engine.options import order_stages, split_options
from convrag.synthesis.engine.options import stage_options as options_of
from convrag.synthesis.engine.pipeline import Pipeline, Stage
from convrag.synthesis.mtr.assemble import Assemble
from convrag.synthesis.mtr.cluster import Cluster
from convrag.synthesis.mtr.converse import Converse
from convrag.synthesis.mtr.polish import Polish

STAGES: dict[str, type[Stage]] = {"curate": Curate, "cluster": Cluster, "converse": Converse, "polish": Polish,
                                  "assemble": Assemble}
DEFAULT_STAGES = tuple(STAGES)
#: Options every stage gets from the command line itself rather than from --option.
_SHARED = {"source", "corpus_config"}


def stage_options(name: str) -> list[str]:
    """The options (constructor keywords) of one stage."""
    return options_of(STAGES[name], _SHARED)


def mtr_pipeline(source: str | None, stages: Sequence[str] = DEFAULT_STAGES, *, seed: int = 0,
                 corpus_config: str | None = None, options: dict[str, Any] | None = None) -> Pipeline:
    """The MTR pipeline with ``stages`` (in pipeline order), each built from the ``options`` it takes."""
    ordered = order_stages(STAGES, stages, "MTR-Pipeline")
    options = dict(options or {})
    per_stage = split_options(STAGES, ordered, options, _SHARED)
    if "curate" in ordered and source is None:
        raise ConvragError("the curate stage needs --corpus SOURCE")
    built: list[Stage] = []
    for name in ordered:
        kwargs = per_stage[name]
        try:
            stage = STAGES[name](source, corpus_config=corpus_config, **kwargs)
        except TypeError as err:
            raise ConvragError(f"--option for stage {name}: {err}") from None
        if isinstance(stage, Cluster):
            stage.after_curate = "curate" in ordered
        if isinstance(stage, Converse):
            stage.expected_cluster_size = options.get("cluster_size", 8)
        if isinstance(stage, Polish):
            stage.upstream = next((s for s in built if isinstance(s, Converse)), None)
        built.append(stage)
    return Pipeline("mtr", built, seed=seed, order=tuple(STAGES))
