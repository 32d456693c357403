"""Per-run accounting: calls, retries, failures, cache hits, tokens, estimated cost and requests in flight."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from convrag.llm.types import Usage

FREE_BACKENDS = frozenset({"llamacpp", "hf", "fake"})


def load_prices(extra: dict[str, dict[str, float]] | None = None) -> dict[str, dict[str, float]]:
    """The shipped price table, updated by ``$CONVRAG_LLM_PRICES`` (a JSON file) and ``extra``."""
    table = json.loads((Path(__file__).parent / "prices.json").read_text(encoding="utf-8"))
    env = os.environ.get("CONVRAG_LLM_PRICES")
    if env:
        table.update(json.loads(Path(env).read_text(encoding="utf-8")))
    table.update(extra or {})
    return {k: v for k, v in table.items() if not k.startswith("_")}


def price_for(model: str, table: dict[str, dict[str, float]]) -> dict[str, float] | None:
    """Per-million-token prices of ``model``: exact name, else longest matching prefix."""
    for name in (model, model.rsplit("/", 1)[-1]):
        if name in table:
            return table[name]
        best = max((k for k in table if name.startswith(k)), key=len, default=None)
        if best is not None:
            return table[best]
    return None


class RunReport:
    """Thread-safe counters for one run; share one report between several LLMs to total them.

    Requests in flight (:meth:`in_flight`) are backend requests between being handed to the backend and its answer
    (cache hits and backoff waits are not requests in flight), counted over every LLM that shares the report:
    ``limit`` is the sum of those LLMs' bounds (``max_concurrency``), ``peak`` the most requests out at once,
    ``busy_seconds`` the time during which at least one request was out, and ``mean`` the time-weighted mean number
    of requests out over that busy time (request-seconds / busy seconds; idle gaps between batches do not count).
    ``clock``: the seconds those times are read from. :meth:`bound` replaces the summed ``limit`` by a bound that a
    caller enforces over all of them (a scheduler running N tasks over two LLMs of N each has N, not 2N).
    """

    def __init__(self, prices: dict[str, dict[str, float]] | None = None, *,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.prices = load_prices(prices)
        self._clock = clock
        self._lock = threading.Lock()
        self.calls = 0
        self.successes = 0
        self.retries = 0
        self.structured_retries = 0
        self.repairs = 0
        #: requests re-sent because the server rejected their response_format (each style is given up once)
        self.response_format_fallbacks = 0
        self.failures = 0
        self.cache_hits = 0
        self.cache_misses = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cost_usd = 0.0
        self.unpriced_tokens = 0
        self.backend_seconds = 0.0
        self.errors: Counter[str] = Counter()
        self.per_model: dict[str, dict[str, Any]] = {}
        self.failure_messages: list[str] = []
        self._limits: list[int] = []
        self._bound: int | None = None
        self._open = 0  # requests out now
        self._peak = 0
        self._area = 0.0  # request-seconds while at least one request was out
        self._busy = 0.0  # seconds with at least one request out
        self._since = 0.0  # when ``_open`` last changed

    def add_limit(self, limit: int) -> None:
        """Register one LLM sharing this report and its bound on requests in flight."""
        with self._lock:
            self._limits.append(int(limit))

    def bound(self, limit: int) -> None:
        """The bound on requests in flight that the caller enforces over every LLM sharing this report."""
        with self._lock:
            self._bound = int(limit)

    def _step(self, change: int) -> None:
        with self._lock:
            now = self._clock()
            if self._open:
                self._area += self._open * (now - self._since)
                self._busy += now - self._since
            self._since = now
            self._open += change
            self._peak = max(self._peak, self._open)

    @contextmanager
    def flight(self) -> Iterator[None]:
        """Count one backend request in flight for the duration of the block."""
        self._step(1)
        try:
            yield
        finally:
            self._step(-1)

    def in_flight(self) -> dict[str, Any]:
        """``{"limit", "peak", "mean", "busy_seconds"}`` as the class docstring defines them (``limit`` None when
        no LLM registered; ``mean`` 0.0 before any request); requests still out count up to now."""
        with self._lock:
            area, busy = self._area, self._busy
            if self._open:
                now = self._clock()
                area += self._open * (now - self._since)
                busy += now - self._since
            limit = self._bound if self._bound is not None else sum(self._limits) if self._limits else None
            return {"limit": limit, "peak": self._peak,
                    "mean": round(area / busy, 3) if busy > 0 else 0.0, "busy_seconds": round(busy, 3)}

    def record_call(self, backend: str, model: str, usage: Usage | None, seconds: float, error: str | None) -> None:
        """One backend request (successful or not)."""
        with self._lock:
            self.calls += 1
            self.backend_seconds += seconds
            m = self.per_model.setdefault(f"{backend}:{model}", {
                "calls": 0, "errors": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0})
            m["calls"] += 1
            if error is not None:
                self.errors[error] += 1
                m["errors"] += 1
                return
            self.successes += 1
            if usage is None:
                return
            self.prompt_tokens += usage.prompt_tokens
            self.completion_tokens += usage.completion_tokens
            m["prompt_tokens"] += usage.prompt_tokens
            m["completion_tokens"] += usage.completion_tokens
            price = {"input": 0.0, "output": 0.0} if backend in FREE_BACKENDS else price_for(model, self.prices)
            if price is None:
                self.unpriced_tokens += usage.total_tokens
                return
            cost = (usage.prompt_tokens * price["input"] + usage.completion_tokens * price["output"]) / 1e6
            self.cost_usd += cost
            m["cost_usd"] += cost

    def count(self, what: str, n: int = 1) -> None:
        """Increment a counter: retries, structured_retries, repairs, response_format_fallbacks, cache_hits, ..."""
        with self._lock:
            setattr(self, what, getattr(self, what) + n)

    def record_failure(self, message: str) -> None:
        with self._lock:
            self.failures += 1
            if len(self.failure_messages) < 50:
                self.failure_messages.append(message[:500])

    def to_dict(self) -> dict[str, Any]:
        """Every counter as JSON-ready values; ``in_flight`` as :meth:`in_flight` gives it."""
        flight = self.in_flight()
        with self._lock:
            return {
                "calls": self.calls, "successes": self.successes, "retries": self.retries,
                "structured_retries": self.structured_retries, "repairs": self.repairs,
                "response_format_fallbacks": self.response_format_fallbacks, "failures": self.failures,
                "cache_hits": self.cache_hits, "cache_misses": self.cache_misses,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "cost_usd": round(self.cost_usd, 6), "unpriced_tokens": self.unpriced_tokens,
                "backend_seconds": round(self.backend_seconds, 3), "errors": dict(self.errors),
                "per_model": {k: dict(v) for k, v in self.per_model.items()},
                "failure_messages": list(self.failure_messages), "in_flight": flight,
            }

    def summary(self) -> str:
        """One line for logs and CLI output."""
        d = self.to_dict()
        errs = ", ".join(f"{k}={v}" for k, v in sorted(d["errors"].items())) or "none"
        cost = f"${d['cost_usd']:.4f}" + (f" (+{d['unpriced_tokens']} unpriced tokens)" if d["unpriced_tokens"] else "")
        return (f"LLM: {d['calls']} calls ({d['retries']} retries, errors: {errs}), {d['failures']} failures, "
                f"{d['cache_hits']} cache hits / {d['cache_misses']} misses, {d['structured_retries']} re-asks, "
                f"{d['repairs']} repairs, "
                + (f"{d['response_format_fallbacks']} response_format fallbacks, "
                   if d["response_format_fallbacks"] else "")
                + f"tokens {d['prompt_tokens']} in / {d['completion_tokens']} out, "
                f"est. cost {cost}, {d['backend_seconds']:.1f}s in backend, " + flight_text(d["in_flight"]))

    def write(self, path: str | os.PathLike[str]) -> None:
        """Save :meth:`to_dict` as JSON."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2), encoding="utf-8")


def flight_text(flight: dict[str, Any]) -> str:
    """``in flight: mean 12.4, peak 16 of limit 16 over 3.1 s`` for :meth:`RunReport.in_flight`'s figures."""
    limit = "no limit set" if flight["limit"] is None else f"limit {flight['limit']}"
    return (f"in flight: mean {flight['mean']:.1f}, peak {flight['peak']} of {limit} over "
            f"{flight['busy_seconds']:.1f} s")
