"""Evaluation profiles: what ``convrag evaluate`` needs to know about a benchmark, declared as data.

Every benchmark is evaluated by one path (:mod:`convrag.evaluation.engine`): turns -> query strategies ->
retrievers over the corpus (or each turn's pool) -> per-turn scores -> groups -> aggregation -> tables, plots
and runs. A builder declares its ``EVALUATION`` profile next to its code; the exporter records it in the
README's ``convrag.evaluation`` block, and ``convrag evaluate`` reads it from there.

Config names may contain ``{subset}``: a benchmark split into subsets (RECOR and MTRAG domains) is searched
per subset, each turn over its own subset's corpus. Subsets are found from the built configs whose name
matches the ``qrels`` pattern (``all`` is never a subset: it merges the others).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from convrag.core.errors import ConvragError, DataError

#: Aggregation rules (see :mod:`convrag.evaluate.aggregate`).
AGGREGATIONS = ("mean", "domain-macro", "mtrag-official")
#: How generated answers are scored (see ``EvaluationProfile.generation``).
GENERATION_SCHEMES = (None, "mtrag", "judge")


@dataclass(frozen=True)
class EvaluationProfile:
    """How a built benchmark is scored.

    * ``turns``: config with one row per query / turn (``_id``, ``text``; see ``reader``).
    * ``reader``: how rows become turns: ``queries`` (generic: ``history`` as a string or a list of
      ``{role, content}`` messages, other columns kept as fields), ``recor`` (joins the ``conversations``
      config's reasoning metadata) or ``views`` (MTRAG: texts of every config in ``views``, by query id).
    * ``corpus``: corpus kind -> config, in order of preference (``--corpus auto`` takes the first built).
    * ``qrels``: config with ``query-id``, ``corpus-id``, ``score``.
    * ``pool``: where each turn's candidate ids are: ``field:<column>`` of the turns config, or
      ``config:<name>`` (rows ``query-id`` + ``corpus-ids``); ``search``: ``corpus`` or ``pool`` by default.
    * ``strategies``: default query strategies, display name -> strategy spec (``convrag.retrievers.strategies``);
      ``extra_strategies``: more names this benchmark gives a meaning to (asked for with ``--strategies``).
    * ``retrievers``: default retriever specs; ``measures``: metric names (``convrag.metrics.retrieval``);
      ``labels``: display names of measures; ``scale``: table values are multiplied by it (x100 papers).
    * ``groups``: turn fields whose values group the per-turn scores in the report.
    * ``aggregation``: ``mean`` (over turns), ``domain-macro`` (mean within each subset, then over subsets) or
      ``mtrag-official`` (MTRAG's weighted "all" row, with our macro / micro beside it).
    * ``report``: the paper-shaped tables to render (``stratrag``, ``mtrag``, ``recor``, ``mtr-bench``).
    * ``generation``: how generated answers are scored (``convrag generate`` / ``evaluate-generation``):
      ``mtrag`` (official submission lines per task of the ``submission`` tasks config, IDK-conditioned
      RB_alg / RB_llm / RL_F), ``judge`` (one line per turn, RECOR's five judge dimensions and lexical
      metrics against the turn's reference answer), or null (the benchmark has no reference answers).
    """

    turns: str
    qrels: str
    corpus: Mapping[str, str]
    reader: str = "queries"
    conversations: str | None = None
    views: Mapping[str, str] = field(default_factory=dict)
    pool: str | None = None
    search: str = "corpus"
    split: str | None = None
    strategies: Mapping[str, str] = field(default_factory=lambda: {"baseline": "baseline"})
    extra_strategies: Mapping[str, str] = field(default_factory=dict)
    retrievers: tuple[str, ...] = ("bm25", "dense")
    measures: tuple[str, ...] = ("nDCG@10", "Recall@10", "MRR@10", "MAP@10")
    labels: Mapping[str, str] = field(default_factory=dict)
    scale: float = 1.0
    groups: tuple[str, ...] = ()
    aggregation: str = "mean"
    report: str = "generic"
    top_k: int = 100
    submission: str | None = None
    generation: str | None = None

    def __post_init__(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            raise ConvragError(f"unknown aggregation {self.aggregation!r}; known: {', '.join(AGGREGATIONS)}")
        if self.search not in ("corpus", "pool"):
            raise ConvragError(f"search must be 'corpus' or 'pool', got {self.search!r}")
        if self.generation not in GENERATION_SCHEMES:
            raise ConvragError(f"unknown generation scheme {self.generation!r}; known: mtrag, judge or null")
        if self.search == "pool" and not self.pool:
            raise ConvragError("search='pool' needs a pool")

    @property
    def has_subsets(self) -> bool:
        return "{subset}" in self.qrels

    def check_measures(self, measures: list[str] | tuple[str, ...]) -> None:
        """Raise before any work when ``measures`` cannot be reported: no measure, a repeated one, a name the
        retrieval metric does not compute (``MeasureError``, one line naming the known families), or RECOR's tables
        without nDCG@10. MTRAG (``mtrag-official``) takes every measure the retrieval metric computes: nDCG@k and
        Recall@k make its official rows, the others are extra columns of our rows
        (:func:`convrag.benchmarks.mtrag.scoring.split_measures`)."""
        from convrag.metrics.retrieval.compute import parse_measure

        if not measures:
            raise ConvragError("no measure to compute: give at least one, e.g. --measures nDCG@10")
        for name in measures:
            parse_measure(name)
        repeated = sorted({m for m in measures if list(measures).count(m) > 1})
        if repeated:
            raise ConvragError(f"measures are repeated: {', '.join(repeated)}")
        if self.aggregation == "domain-macro" and "nDCG@10" not in measures:
            raise ConvragError("this benchmark's tables are built on nDCG@10: include it in --measures")

    def label(self, measure: str) -> str:
        return self.labels.get(measure, measure)

    def to_dict(self) -> dict[str, Any]:
        """Plain YAML-safe dict (tuples as lists) for the README's ``convrag.evaluation`` block."""
        return _plain(asdict(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvaluationProfile:
        """Inverse of :meth:`to_dict`; unknown keys, missing required keys and values of the wrong type are an
        error naming them."""
        if not isinstance(data, Mapping):
            raise ConvragError(f"evaluation profile must be a mapping, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConvragError(f"evaluation profile has unknown keys {unknown}")
        missing = sorted(f.name for f in fields(cls) if f.name not in data and f.default is MISSING
                         and f.default_factory is MISSING)  # fmt: skip
        if missing:
            raise ConvragError(f"evaluation profile lacks the keys {missing}")
        values = dict(data)
        for name, value in values.items():
            _check_field(name, value)
        for name in ("retrievers", "measures", "groups"):
            if name in values and values[name] is not None:
                values[name] = tuple(values[name])
        return cls(**values)


_STRING_LISTS = ("retrievers", "measures", "groups")
_STRING_MAPS = ("corpus", "views", "strategies", "extra_strategies", "labels")
_OPTIONAL = ("conversations", "pool", "split", "submission", "generation")


def _check_field(name: str, value: Any) -> None:
    """``ConvragError`` when a profile value read from a README has the wrong type."""
    if name in _STRING_LISTS:
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        kind = "a list of strings"
    elif name in _STRING_MAPS:
        ok = isinstance(value, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
        kind = "a mapping of strings to strings"
    elif name == "scale":
        ok, kind = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
    elif name == "top_k":
        ok, kind = value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0), \
            "a positive integer or null"
    else:
        ok = isinstance(value, str) or (name in _OPTIONAL and value is None)
        kind = "a string" + (" or null" if name in _OPTIONAL else "")
    if not ok:
        raise ConvragError(f"evaluation profile key {name!r} must be {kind}, got {value!r}")


def _plain(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def profile_of(manifest: Mapping[str, Any], source: str | None = None) -> EvaluationProfile:
    """The profile a built folder is evaluated with (``source``, the README, is named in errors):

    * a complete ``convrag.evaluation`` block (every key of :class:`EvaluationProfile`, as ``convrag build``
      writes it) is used as it is, whatever the benchmark is called: the README declares how it is scored, and a
      benchmark convrag has no builder for is evaluated by its own profile;
    * a partial block of a registered benchmark completes its builder's ``EVALUATION`` (the keys it gives win);
      without a block (folders built before profiles existed) the builder's ``EVALUATION`` is used;
    * an unregistered benchmark without a complete block is refused, naming the known benchmarks and the keys
      its block lacks: no key is filled with a default that no one declared.
    """
    declared = manifest.get("evaluation")
    benchmark = str(manifest.get("benchmark"))
    if declared and isinstance(declared, Mapping) and not _missing_keys(declared):
        return _read(declared, source)
    from convrag.builders import available, get_builder_class

    if benchmark not in available():
        lacks = f"its convrag.evaluation block lacks {_missing_keys(declared)}" if declared \
            else "the README has no convrag.evaluation block"  # fmt: skip
        raise DataError(f"unknown benchmark {benchmark!r} (known: {', '.join(available())}) and {lacks}: it cannot "
                        "be evaluated by a profile of its own", source)  # fmt: skip
    profile = getattr(get_builder_class(benchmark), "EVALUATION", None)
    if profile is None:
        raise DataError(f"benchmark {benchmark!r} declares no evaluation profile", source)
    if not declared:
        return profile
    return _read({**profile.to_dict(), **declared} if isinstance(declared, Mapping) else declared, source)


def _read(declared: Any, source: str | None) -> EvaluationProfile:
    """:meth:`EvaluationProfile.from_dict`, its errors naming ``source`` (the README) where given."""
    try:
        return EvaluationProfile.from_dict(declared)
    except ConvragError as err:
        if source is None:
            raise
        raise DataError(f"{err} (in convrag.evaluation)", source) from None


def _missing_keys(declared: Any) -> list[str]:
    """Keys of :class:`EvaluationProfile` that a declared profile (a mapping) does not give."""
    given = declared if isinstance(declared, Mapping) else {}
    return [f.name for f in fields(EvaluationProfile) if f.name not in given]


def config_name(pattern: str, subset: str) -> str:
    """The config ``pattern`` names for ``subset`` (``{subset}`` replaced). A benchmark without subsets has
    patterns without the placeholder and the one subset ``""``."""
    return pattern.replace("{subset}", subset)


def built_subsets(profile: EvaluationProfile, configs: Iterable[str]) -> list[str]:
    """Subsets of a build, found from its qrels configs (``profile.qrels`` with ``{subset}``) among ``configs``,
    in their order; the ``all`` aggregate is one of them where it was built. ``[""]`` for a benchmark without
    subsets."""
    if not profile.has_subsets:
        return [""]
    prefix, suffix = profile.qrels.split("{subset}")
    return [c[len(prefix) : len(c) - len(suffix)] for c in configs
            if c.startswith(prefix) and c.endswith(suffix) and len(c) > len(prefix) + len(suffix)]  # fmt: skip
