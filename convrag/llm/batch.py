"""Run a function over many items with bounded concurrency, keeping per-item results and failures."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from convrag.llm.types import EndpointUnreachable, LLMError, LLMFailure

I = TypeVar("I")  # noqa: E741
R = TypeVar("R")


@dataclass
class BatchResult(Generic[R]):
    """``results[i]`` is the output for item ``i`` or None if it failed; ``failures[i]`` says why."""

    results: list[R | None]
    failures: dict[int, str] = field(default_factory=dict)
    errors: dict[int, BaseException] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures

    def succeeded(self) -> list[tuple[int, R]]:
        """(index, result) of every item that succeeded."""
        return [(i, r) for i, r in enumerate(self.results) if i not in self.failures]  # type: ignore[misc]

    def record(self, i: int, value: R | None, error: BaseException | None) -> None:
        """Item ``i``'s outcome: its value, or (``error`` given) its failure."""
        if error is not None:
            self.failures[i] = f"{type(error).__name__}: {error}"
            self.errors[i] = error
        else:
            self.results[i] = value

    def raise_on_failure(self) -> None:
        """Raise :class:`LLMFailure` naming the failed items, if any."""
        if self.failures:
            first = min(self.failures)
            raise LLMFailure(f"{len(self.failures)} of {len(self.results)} items failed; "
                             f"first: item {first}: {self.failures[first]}")


def run_batch(items: Iterable[I], fn: Callable[[I], R], concurrency: int = 4, *,
              catch: tuple[type[BaseException], ...] = (LLMError,),
              on_result: Callable[[int, R | None, BaseException | None], None] | None = None) -> BatchResult[R]:
    """Apply ``fn`` to every item in up to ``concurrency`` threads.

    Exceptions of the ``catch`` types are recorded per item (never turned into a value); any other
    exception propagates, and so does :class:`~convrag.llm.types.EndpointUnreachable` (a dead endpoint):
    the items not yet started are cancelled and the batch stops at once. With the LLM cache on, a rerun
    after a crash only calls the backend for the items that had not finished.
    """
    seq = list(items)
    out: BatchResult[R] = BatchResult(results=[None] * len(seq))
    if not seq:
        return out

    def one(i: int) -> tuple[int, Any, BaseException | None]:
        try:
            return i, fn(seq[i]), None
        except EndpointUnreachable:
            raise
        except catch as exc:
            return i, None, exc

    if concurrency <= 1:
        done = (one(i) for i in range(len(seq)))
        for i, res, err in done:
            _collect(out, i, res, err, on_result)
        return out
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = [pool.submit(one, i) for i in range(len(seq))]
        try:
            for fut in as_completed(futures):
                i, res, err = fut.result()
                _collect(out, i, res, err, on_result)
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    return out


def _collect(out: BatchResult[Any], i: int, res: Any, err: BaseException | None,
             on_result: Callable[[int, Any, BaseException | None], None] | None) -> None:
    out.record(i, res, err)
    if on_result is not None:
        on_result(i, res, err)
