"""SEARA's strategy space: the YAML file that declares what ``convrag select`` compares, and its expansion.

A configuration (:class:`Configuration`) picks one named option in each of the five :data:`DIMENSIONS`, applied in
the order chunking -> filter -> retrieval -> rewriter -> reranker; an absent dimension has the single option ``none``
(for chunking ``original``: one chunk per document). The file's schema: :func:`parse_space`.

Cost (the cheaper-wins tie-break): an option's ``cost`` key, else its position in its dimension's listing (the
first listed costs 0); a configuration's cost is the sum over its dimensions. Every error is one line
(:class:`SpaceError`) naming the file and the key path.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from convrag.core.errors import ConvragError

DIMENSIONS = ("chunking", "filter", "retrieval", "rewriter", "reranker")
DEFAULT_OPTION = {"chunking": ("original", {"strategy": "original"}), "filter": ("none", {}),
                  "retrieval": ("bm25", {"retriever": "bm25"}), "rewriter": ("none", {}), "reranker": ("none", {})}
STRATEGIES = ("grid", "staged", "racing")
TOP_KEYS = {"depth", "seed", "queries", "judge", "dimensions", "baseline", "exclude", "search", "name"}
SEARCH_KEYS = {"strategy", "stages", "keep_per_stage", "baselines", "bootstrap", "alpha", "racing"}
JUDGE_KEYS = {"model", "level", "max_judgments", "max_cost_usd", "concurrency", "facts"}
FACT_MODES = ("auto", "always", "never")
OPTION_KEYS = {
    "chunking": {"strategy", "chunk_size", "chunk_overlap", "separators", "n", "size", "stride", "cost"},
    "filter": {"min_chars", "max_chars", "cost"},
    "retrieval": {"retriever", "options", "cost"},
    "rewriter": {"kind", "n_queries", "depth_each", "rrf_k", "model", "cost"},
    "reranker": {"kind", "window", "stride", "depth", "doc_chars", "path", "batch_size", "model", "cost"},
}
KINDS = {"rewriter": ("none", "llm"), "reranker": ("none", "llm", "cross-encoder")}
#: integer option keys and their least value
INTEGERS = {"chunk_size": 1, "chunk_overlap": 0, "n": 1, "size": 1, "stride": 1, "min_chars": 0, "max_chars": 1,
            "n_queries": 1, "depth_each": 1, "rrf_k": 0, "window": 2, "depth": 1, "doc_chars": 1, "batch_size": 1}
BEST = "best@"


class SpaceError(ConvragError):
    """The strategy-space file is malformed (the message names the file and the key)."""


@dataclass(frozen=True)
class Option:
    """One named choice of one dimension: ``params`` as written (``cost`` removed), ``cost`` as resolved."""

    dimension: str
    name: str
    params: Mapping[str, Any]
    cost: float

    @property
    def kind(self) -> str:
        """``none`` / ``llm`` / ``cross-encoder`` for the rewriter and reranker (``none`` when not given)."""
        return str(self.params.get("kind", "none"))


@dataclass(frozen=True)
class Configuration:
    """One option name per dimension, in :data:`DIMENSIONS` order."""

    choices: tuple[str, ...]

    @property
    def name(self) -> str:
        """``chunking/filter/retrieval/rewriter/reranker`` option names joined by ``/``."""
        return "/".join(self.choices)

    def get(self, dimension: str) -> str:
        return self.choices[DIMENSIONS.index(dimension)]

    def as_dict(self) -> dict[str, str]:
        return dict(zip(DIMENSIONS, self.choices, strict=True))


@dataclass(frozen=True)
class Stage:
    """A staged-search step: ``vary`` maps dimensions to option names (or ``best@STAGE``); the others stay at
    the running best."""

    name: str
    vary: Mapping[str, tuple[str, ...]]


@dataclass
class Space:
    """A parsed strategy space (schema: :func:`parse_space`)."""

    source: str
    depth: int
    seed: int
    options: dict[str, dict[str, Option]]
    baseline: dict[str, str]
    exclude: list[dict[str, str]]
    judge: dict[str, Any]
    queries: dict[str, Any]
    strategy: str
    stages: list[Stage]
    keep_per_stage: int
    baselines: list[dict[str, str]]
    bootstrap: int
    alpha: float
    racing: dict[str, float]
    raw: dict[str, Any] = field(default_factory=dict)

    def option(self, dimension: str, name: str) -> Option:
        return self.options[dimension][name]

    def configuration(self, choices: Mapping[str, str] | None = None) -> Configuration:
        """The baseline with ``choices`` applied (unknown dimensions or options are a :class:`SpaceError`)."""
        picked = {**self.baseline, **(choices or {})}
        for dim, name in picked.items():
            self._check(dim, name, "configuration")
        return Configuration(tuple(picked[d] for d in DIMENSIONS))

    def cost(self, config: Configuration) -> float:
        """Sum of the chosen options' costs."""
        return sum(self.options[d][config.get(d)].cost for d in DIMENSIONS)

    def excluded(self, config: Configuration) -> bool:
        return any(all(config.get(d) == v for d, v in rule.items()) for rule in self.exclude)

    def grid(self, vary: Mapping[str, Sequence[str]], base: Mapping[str, str] | None = None) -> list[Configuration]:
        """Every combination of ``vary`` over ``base`` (default the baseline), excluded ones left out, in
        listing order without repeats."""
        dims = list(vary)
        out: list[Configuration] = []
        for combo in itertools.product(*(vary[d] for d in dims)):
            config = self.configuration({**(base or {}), **dict(zip(dims, combo, strict=True))})
            if not self.excluded(config) and config not in out:
                out.append(config)
        return out

    def full_grid(self) -> list[Configuration]:
        """The whole space (minus exclusions)."""
        return self.grid({d: list(self.options[d]) for d in DIMENSIONS})

    def _check(self, dim: str, name: str, where: str) -> None:
        if dim not in self.options:
            raise SpaceError(f"{self.source}: {where}: unknown dimension {dim!r} (known: {', '.join(DIMENSIONS)})")
        if name not in self.options[dim]:
            raise SpaceError(f"{self.source}: {where}: dimension {dim!r} has no option {name!r} "
                             f"(has: {', '.join(self.options[dim])})")


def _mapping(value: Any, where: str, source: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpaceError(f"{source}: {where} must be a mapping, got {type(value).__name__}")
    return dict(value)


def _unknown(given: Mapping[str, Any], allowed: set[str], where: str, source: str) -> None:
    extra = sorted(set(given) - allowed)
    if extra:
        raise SpaceError(f"{source}: {where}: unknown key {extra[0]!r} (allowed: {', '.join(sorted(allowed))})")


def _number(value: Any, where: str, source: str, *, least: float, integer: bool = True) -> Any:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value < least:
        what = "an integer" if integer else "a number"
        raise SpaceError(f"{source}: {where} must be {what} >= {least}, got {value!r}")
    return value


def _retrieval(params: Mapping[str, Any], where: str, source: str) -> None:
    from convrag.retrievers.registry import RETRIEVERS

    spec = params.get("retriever")
    if not isinstance(spec, str) or spec.partition(":")[0].strip().lower() not in RETRIEVERS:
        raise SpaceError(f"{source}: {where}.retriever must name a retriever spec ({', '.join(RETRIEVERS)}), "
                         f"got {spec!r}")
    options = params.get("options", {})
    if not isinstance(options, Mapping):
        raise SpaceError(f"{source}: {where}.options must be a mapping of retriever options")
    from convrag.retrievers import get_retriever

    try:  # constructing builds no index and loads no model: it checks the option names and values
        get_retriever(spec, **dict(options))
    except (ConvragError, TypeError, ValueError) as err:
        raise SpaceError(f"{source}: {where}: {err}") from None


def _options(dim: str, raw: Any, source: str) -> dict[str, Option]:
    if raw is None:
        name, params = DEFAULT_OPTION[dim]
        return {name: Option(dim, name, dict(params), 0.0)}
    given = _mapping(raw, f"dimensions.{dim}", source)
    if not given:
        raise SpaceError(f"{source}: dimensions.{dim} lists no option")
    out: dict[str, Option] = {}
    for position, (name, params) in enumerate(given.items()):
        where = f"dimensions.{dim}.{name}"
        if not isinstance(name, str) or not name.strip() or "/" in name or name.startswith(BEST):
            raise SpaceError(f"{source}: {where}: option names are non-empty strings without '/' or 'best@'")
        params = _mapping(params, where, source)
        _unknown(params, OPTION_KEYS[dim], where, source)
        cost = float(_number(params.pop("cost", position), f"{where}.cost", source, least=0, integer=False))
        for key in set(params) & set(INTEGERS):
            _number(params[key], f"{where}.{key}", source, least=INTEGERS[key])
        if dim in KINDS:
            implied = "none" if not params else "cross-encoder" if "path" in params else "llm"
            kind = params.setdefault("kind", implied)
            if kind not in KINDS[dim]:
                raise SpaceError(f"{source}: {where}.kind must be one of {', '.join(KINDS[dim])}, got {kind!r}")
            if kind == "cross-encoder" and not params.get("path"):
                raise SpaceError(f"{source}: {where}: a cross-encoder reranker needs 'path' (a local model folder)")
            if kind != "cross-encoder" and "path" in params:
                raise SpaceError(f"{source}: {where}: 'path' is for kind cross-encoder, not {kind!r}")
            if kind == "llm" and int(params.get("stride", 10)) > int(params.get("window", 20)):
                raise SpaceError(f"{source}: {where}: stride must be at most window")
        if dim == "retrieval":
            _retrieval(params, where, source)
        if dim == "chunking":
            from convrag.seara.chunking import resolve_params

            params.setdefault("strategy", "original")
            try:
                resolve_params(str(params["strategy"]), {k: v for k, v in params.items() if k != "strategy"})
            except ConvragError as err:
                raise SpaceError(f"{source}: {where}: {err}") from None
        out[name] = Option(dim, name, params, cost)
    return out


def _assignment(value: Any, where: str, source: str, space_options: dict[str, dict[str, Option]]) -> dict[str, str]:
    given = _mapping(value, where, source)
    for dim, name in given.items():
        if dim not in space_options:
            raise SpaceError(f"{source}: {where}: unknown dimension {dim!r} (known: {', '.join(DIMENSIONS)})")
        if name not in space_options[dim]:
            raise SpaceError(f"{source}: {where}: dimension {dim!r} has no option {name!r} "
                             f"(has: {', '.join(space_options[dim])})")
    return {str(k): str(v) for k, v in given.items()}


def _stages(raw: Any, source: str, options: dict[str, dict[str, Option]]) -> list[Stage]:
    if not isinstance(raw, list) or not raw:
        raise SpaceError(f"{source}: search.stages must be a non-empty list for the staged strategy")
    stages: list[Stage] = []
    for i, item in enumerate(raw):
        where = f"search.stages[{i}]"
        item = _mapping(item, where, source)
        _unknown(item, {"name", "vary"}, where, source)
        name = item.get("name") or f"stage{i + 1}"
        if any(s.name == name for s in stages):
            raise SpaceError(f"{source}: {where}: stage name {name!r} is used twice")
        vary = item.get("vary")
        if isinstance(vary, str):
            vary = [vary]
        if isinstance(vary, list):
            vary = {d: list(options.get(d, {})) for d in vary}
        vary = _mapping(vary, f"{where}.vary", source)
        if not vary:
            raise SpaceError(f"{source}: {where}.vary names no dimension")
        checked: dict[str, tuple[str, ...]] = {}
        for dim, names in vary.items():
            if dim not in options:
                raise SpaceError(f"{source}: {where}.vary: unknown dimension {dim!r} (known: {', '.join(DIMENSIONS)})")
            names = [names] if isinstance(names, str) else names
            if not isinstance(names, list) or not names:
                raise SpaceError(f"{source}: {where}.vary.{dim} must list option names")
            for n in names:
                ref = str(n)[len(BEST):] if str(n).startswith(BEST) else None
                if ref is not None and not any(s.name == ref for s in stages):
                    raise SpaceError(f"{source}: {where}.vary.{dim}: {n!r} names no earlier stage")
                if ref is None and n not in options[dim]:
                    raise SpaceError(f"{source}: {where}.vary.{dim}: dimension {dim!r} has no option {n!r} "
                                     f"(has: {', '.join(options[dim])})")
            checked[dim] = tuple(str(n) for n in names)
        stages.append(Stage(str(name), checked))
    return stages


def parse_space(data: Any, source: str = "space") -> Space:
    """Check and expand a strategy-space mapping; ``source`` names it in errors. Schema (every key but
    ``dimensions`` optional)::

        depth: 10                 # K: each configuration's list depth, and the pool depth
        seed: 0
        queries: {strategy: baseline}          # how a multi-turn query becomes text (convrag.retrievers.strategies)
        judge: {model: default, level: 2, max_judgments: 20000, max_cost_usd: null, concurrency: 4, facts: auto}
                                  # model: an LLM spec or oracle:EVIDENCE.jsonl; facts: auto (minimal facts in pools
                                  # whose configurations differ in chunking, where they choose), always, never
        dimensions:
          chunking:  {original: {strategy: original}, r512: {strategy: recursive, chunk_size: 512}}
          filter:    {none: {}, long: {min_chars: 200}}
          retrieval: {bm25: {retriever: bm25}, dense: {retriever: dense}, hybrid: {retriever: rrf}}
          rewriter:  {none: {}, llm: {kind: llm, n_queries: 4, depth_each: 10}}
          reranker:  {none: {}, llm: {kind: llm, window: 20, stride: 10}, ce: {kind: cross-encoder, path: DIR}}
        baseline: {retrieval: bm25}            # the starting point of staged search (default: first options)
        exclude: [{retrieval: bm25, reranker: ce}]   # configurations matching every pair are never built
        search:
          strategy: staged                     # grid | staged | racing
          stages:                              # staged only; values may be "best@STAGE"
            - {name: chunking, vary: [chunking]}
            - {name: retrieval, vary: [retrieval]}
            - {name: combine, vary: {rewriter: [none, llm], reranker: [none, best@rerank]}}
          keep_per_stage: 2                    # winner and runner-up of each stage go to the final pool
          baselines: [{retrieval: bm25}]        # always in the final pool
          bootstrap: 1000
          alpha: 0.05
          racing: {start: 0.25, factor: 2, min_scored: 10}   # no drop while fewer queries are scored
    """
    data = _mapping(data, "the top level", source)
    _unknown(data, TOP_KEYS, "the top level", source)
    dims = _mapping(data.get("dimensions"), "dimensions", source)
    _unknown(dims, set(DIMENSIONS), "dimensions", source)
    if not dims:
        raise SpaceError(f"{source}: 'dimensions' lists nothing to compare")
    options = {d: _options(d, dims.get(d), source) for d in DIMENSIONS}
    baseline = {d: next(iter(options[d])) for d in DIMENSIONS}
    baseline.update(_assignment(data.get("baseline"), "baseline", source, options))
    exclude = data.get("exclude") or []
    if not isinstance(exclude, list):
        raise SpaceError(f"{source}: exclude must be a list of {{dimension: option}} mappings")
    rules = [_assignment(r, f"exclude[{i}]", source, options) for i, r in enumerate(exclude)]
    judge = _mapping(data.get("judge"), "judge", source)
    _unknown(judge, JUDGE_KEYS, "judge", source)
    judge = {"model": "default", "level": 2, "max_judgments": None, "max_cost_usd": None, "concurrency": 4,
             "facts": "auto", **judge}
    if judge["facts"] not in FACT_MODES:
        raise SpaceError(f"{source}: judge.facts must be one of {', '.join(FACT_MODES)}, got {judge['facts']!r}")
    for key, least, integer in (("max_judgments", 1, True), ("max_cost_usd", 0, False), ("concurrency", 1, True)):
        if judge[key] is not None or key == "concurrency":
            _number(judge[key], f"judge.{key}", source, least=least, integer=integer)
    if not isinstance(judge["model"], str) or not judge["model"].strip():
        raise SpaceError(f"{source}: judge.model must be an LLM spec string, got {judge['model']!r}")
    if judge["level"] not in (1, 2, 3):
        raise SpaceError(f"{source}: judge.level must be 1, 2 or 3 (the 0-3 grade counted relevant), got "
                         f"{judge['level']!r}")
    search = _mapping(data.get("search"), "search", source)
    _unknown(search, SEARCH_KEYS, "search", source)
    strategy = search.get("strategy", "grid")
    if strategy not in STRATEGIES:
        raise SpaceError(f"{source}: search.strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    stages = _stages(search.get("stages"), source, options) if strategy == "staged" else []
    racing = {"start": 0.25, "factor": 2.0, "min_scored": 10, **_mapping(search.get("racing"), "search.racing", source)}
    _unknown(racing, {"start", "factor", "min_scored"}, "search.racing", source)
    for key in ("start", "factor"):
        _number(racing[key], f"search.racing.{key}", source, least=0, integer=False)
    _number(racing["min_scored"], "search.racing.min_scored", source, least=1)
    if not 0 < racing["start"] <= 1 or racing["factor"] <= 1:
        raise SpaceError(f"{source}: search.racing needs 0 < start <= 1 and factor > 1, got {racing}")
    baselines = search.get("baselines") or []
    if not isinstance(baselines, list):
        raise SpaceError(f"{source}: search.baselines must be a list of {{dimension: option}} mappings")
    alpha = float(_number(search.get("alpha", 0.05), "search.alpha", source, least=0, integer=False))
    if not 0 < alpha < 1:
        raise SpaceError(f"{source}: search.alpha must be between 0 and 1, got {alpha}")
    queries = _mapping(data.get("queries"), "queries", source)
    _unknown(queries, {"strategy"}, "queries", source)
    return Space(
        source=source,
        depth=_number(data.get("depth", 10), "depth", source, least=1),
        seed=_number(data.get("seed", 0), "seed", source, least=0),
        options=options, baseline=baseline, exclude=rules, judge=judge,
        queries={"strategy": "baseline", **queries}, strategy=strategy, stages=stages,
        keep_per_stage=_number(search.get("keep_per_stage", 2), "search.keep_per_stage", source, least=1),
        baselines=[_assignment(b, f"search.baselines[{i}]", source, options) for i, b in enumerate(baselines)],
        bootstrap=_number(search.get("bootstrap", 1000), "search.bootstrap", source, least=1),
        alpha=alpha, racing={k: float(v) for k, v in racing.items()}, raw=data)  # fmt: skip


def load_space(path: str | os.PathLike) -> Space:
    """Read and check a strategy-space YAML file."""
    path = Path(path)
    if not path.is_file():
        raise SpaceError(f"{path}: no such strategy-space file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise SpaceError(f"{path}: not UTF-8 text (byte {err.start})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise SpaceError(f"{path}{line}: not valid YAML ({getattr(err, 'problem', None) or err})") from None
    return parse_space(data, str(path))
