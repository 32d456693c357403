"""Judge ensembles: one prompt over several judges, combined by mean, median or majority vote.

Every judge's own result (value, parsed reply, error, candidate order) is kept. For comparisons,
each judge can see the candidates in its own random order to control position bias; picks are mapped
back to the original candidate indices before combining.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from convrag.llm.client import LLM
from convrag.llm.structured import Schema
from convrag.llm.types import EndpointUnreachable, LLMError, LLMFailure, Message, SamplingParams

COMBINERS = ("mean", "median", "majority")
Judge = LLM | tuple[LLM, SamplingParams]


@dataclass
class JudgeResult:
    """One judge's outcome: ``value`` (what is combined) and ``parsed`` (the whole reply), or ``error``."""

    judge: str
    value: Any = None
    parsed: Any = None
    error: str | None = None
    order: list[int] | None = None
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class EnsembleResult:
    """The combined value, how it was combined, and every judge's result."""

    value: Any
    combine: str
    judges: list[JudgeResult] = field(default_factory=list)
    tie: bool = False
    agreement: float = 1.0

    @property
    def n_ok(self) -> int:
        return sum(j.ok for j in self.judges)

    @property
    def n_failed(self) -> int:
        return len(self.judges) - self.n_ok


def combine(values: Sequence[Any], how: str) -> tuple[Any, bool, float]:
    """Combine judge values; returns (value, tie, agreement). Majority ties go to the value seen first."""
    if not values:
        raise ValueError("nothing to combine")
    if how == "mean":
        nums = [float(v) for v in values]
        return statistics.fmean(nums), False, 1.0
    if how == "median":
        return statistics.median(float(v) for v in values), False, 1.0
    if how == "majority":
        counts = Counter(values)
        top = max(counts.values())
        winner = next(v for v in values if counts[v] == top)
        tie = sum(1 for c in counts.values() if c == top) > 1
        return winner, tie, top / len(values)
    raise ValueError(f"unknown combiner {how!r}; use one of {COMBINERS}")


@dataclass
class Permutation:
    """Candidates in a shown order; ``order[k]`` is the original index of the k-th shown candidate."""

    items: list[Any]
    order: list[int]

    def to_original(self, shown_index: int) -> int:
        return self.order[shown_index]


def permute(candidates: Sequence[Any], rng: random.Random | None) -> Permutation:
    """A random order of the candidates (identity when ``rng`` is None)."""
    order = list(range(len(candidates)))
    if rng is not None:
        rng.shuffle(order)
    return Permutation([candidates[k] for k in order], order)


def _unpack(j: Judge) -> tuple[LLM, SamplingParams | None]:
    return j if isinstance(j, tuple) else (j, None)


class JudgeEnsemble:
    """Several judges (LLMs, or (LLM, params) pairs such as one model with different seeds).

    ``min_ok``: how many judges must succeed (default: all); fewer raises :class:`LLMFailure`. A judge whose
    endpoint is unreachable (:class:`EndpointUnreachable`) ends the call at once.
    """

    def __init__(self, judges: Sequence[Judge], *, combine: str = "mean", min_ok: int | None = None,
                 concurrency: int = 4) -> None:
        if not judges:
            raise ValueError("an ensemble needs at least one judge")
        if combine not in COMBINERS:
            raise ValueError(f"unknown combiner {combine!r}; use one of {COMBINERS}")
        self.judges = list(judges)
        self.how = combine
        self.min_ok = len(self.judges) if min_ok is None else min_ok
        self.concurrency = concurrency

    def _run(self, task: Callable[[int, LLM, SamplingParams | None], JudgeResult]) -> list[JudgeResult]:
        def one(i: int) -> JudgeResult:
            llm, params = _unpack(self.judges[i])
            try:
                return task(i, llm, params)
            except EndpointUnreachable:
                raise  # a dead endpoint ends the run; it is not one judge's disagreement
            except LLMError as exc:
                return JudgeResult(judge=f"{i}:{llm.spec}", error=f"{type(exc).__name__}: {exc}")

        with ThreadPoolExecutor(max_workers=max(1, self.concurrency)) as pool:
            return list(pool.map(one, range(len(self.judges))))

    def _finish(self, results: list[JudgeResult], how: str) -> EnsembleResult:
        ok = [r for r in results if r.ok]
        if len(ok) < self.min_ok or not ok:
            errs = "; ".join(f"{r.judge}: {r.error}" for r in results if not r.ok)
            raise LLMFailure(f"ensemble: {len(ok)} of {len(results)} judges succeeded (need {max(1, self.min_ok)}): "
                             f"{errs}", errors=[r.error or "" for r in results if not r.ok])
        value, tie, agreement = combine([r.value for r in ok], how)
        return EnsembleResult(value=value, combine=how, judges=results, tie=tie, agreement=agreement)

    def judge(self, messages: list[Message], schema: Schema, value: str | Callable[[Any], Any]) -> EnsembleResult:
        """Ask every judge the same structured question; combine ``value`` (a field name or a function)."""
        get = value if callable(value) else (lambda p: getattr(p, value) if not isinstance(p, dict) else p[value])

        def task(i: int, llm: LLM, params: SamplingParams | None) -> JudgeResult:
            parsed = llm.structured(messages, schema, params)
            return JudgeResult(judge=f"{i}:{llm.spec}", value=get(parsed.value), parsed=parsed.value,
                               cached=parsed.cached)

        return self._finish(self._run(task), self.how)

    def compare(self, render: Callable[[list[Any]], list[Message]], candidates: Sequence[Any], schema: Schema,
                pick: str | Callable[[Any], int], *, shuffle: bool = True, seed: int = 0) -> EnsembleResult:
        """Each judge sees ``render(candidates in its own order)`` and picks a shown index; the picks are
        mapped back to original indices and combined by majority vote. Out-of-range picks are re-asked.
        """
        get = pick if callable(pick) else (lambda p: getattr(p, pick) if not isinstance(p, dict) else p[pick])
        n = len(candidates)

        def task(i: int, llm: LLM, params: SamplingParams | None) -> JudgeResult:
            perm = permute(candidates, random.Random(f"{seed}:{i}") if shuffle else None)

            def in_range(parsed: Any) -> str | None:
                k = get(parsed)
                ok = isinstance(k, int) and not isinstance(k, bool) and 0 <= k < n
                return None if ok else f"the chosen candidate must be an integer from 0 to {n - 1}, got {k!r}"

            parsed = llm.structured(render(perm.items), schema, params, check=in_range)
            return JudgeResult(judge=f"{i}:{llm.spec}", value=perm.to_original(get(parsed.value)),
                               parsed=parsed.value, order=perm.order, cached=parsed.cached)

        return self._finish(self._run(task), "majority")


def is_number(x: Any) -> bool:
    """True for real numbers that can be averaged (not bool, not NaN)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isnan(x)
