"""Keep an LLM server at a record stage's concurrency across items and shards.

A record stage's LLM work is a chain of calls per item (a conversation's turns, a D&V item's steps): an item's
next call may start as soon as its own previous call returned, never before, and items do not wait for each other.
:func:`overlap_shards` runs each item as one task on ``concurrency`` threads, taking items in input order and across
shard boundaries (the next shard is pulled as soon as a thread is free and the current one is fully started), so
``concurrency`` items, each with one request in flight, are worked on while any remain. A shard comes out, its
results in item order, once its last item finished and every earlier shard came out; its records are then written
while later items go on. Nothing an item does depends on when other items run, so the output is the same for any
completion order.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

from convrag.llm import LLMError
from convrag.llm.batch import BatchResult
from convrag.llm.types import EndpointUnreachable

I = TypeVar("I")  # noqa: E741
R = TypeVar("R")


class _Shard:
    """One shard's items and the futures of those started so far."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items
        self.futures: list[Future[tuple[Any, BaseException | None]]] = []

    def started(self) -> bool:
        return len(self.futures) == len(self.items)

    def finished(self) -> bool:
        return self.started() and all(f.done() for f in self.futures)

    def result(self) -> BatchResult[Any]:
        out: BatchResult[Any] = BatchResult(results=[None] * len(self.items))
        for i, future in enumerate(self.futures):
            out.record(i, *future.result())
        return out


def overlap_shards(shards: Iterable[list[I]], work: Callable[[I], R], concurrency: int, *,
                   catch: tuple[type[BaseException], ...] = (LLMError,), stop: threading.Event | None = None
                   ) -> Iterator[tuple[list[I], BatchResult[R]]]:
    """``(shard, results)`` for each shard of ``shards`` in order, ``work`` applied to every item in up to
    ``concurrency`` threads across shard boundaries (module docstring). Exceptions of the ``catch`` types are kept
    per item in the results; any other exception, and :class:`EndpointUnreachable` (a dead endpoint), stops the
    run at once: items not started are never started, ``stop`` is set (the stage's LLM clients then send no new
    request, so a running item ends at its next call, raising :class:`~convrag.llm.types.RunStopped`), and the error
    propagates once the running items returned. Ctrl-C (KeyboardInterrupt) or closing the generator early stops
    the same way."""

    def one(item: I) -> tuple[R | None, BaseException | None]:
        try:
            return work(item), None
        except EndpointUnreachable:
            raise
        except catch as exc:
            return None, exc

    source = iter(shards)
    opened: deque[_Shard] = deque()
    running: set[Future[tuple[R | None, BaseException | None]]] = set()
    exhausted = False
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        try:
            while True:
                while len(running) < max(1, concurrency) and not exhausted:
                    if not opened or opened[-1].started():
                        batch = next(source, None)
                        if batch is None:
                            exhausted = True
                        else:
                            opened.append(_Shard(list(batch)))
                        continue
                    shard = opened[-1]
                    future = pool.submit(one, shard.items[len(shard.futures)])
                    shard.futures.append(future)
                    running.add(future)
                while opened and opened[0].finished():
                    shard = opened.popleft()
                    yield shard.items, shard.result()
                if not running:
                    return
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                running -= done
                for future in done:
                    future.result()  # a fatal error stops the run here
        except BaseException:
            if stop is not None:
                stop.set()
            for future in running:
                future.cancel()
            raise
