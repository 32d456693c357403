"""``convrag audit --missed`` keeps its judges busy: the pool of the missed-relevant estimate is built before the
first judge call, so the relevance requests follow the other dimensions' at once (issue 42: it kept 11.4-11.6 of 16
requests in flight, the judges idle for about 1.3 s while the bm25 pool was built and scipy loaded).

Against the fake OpenAI-compatible server of ``tests.llm.test_concurrency_in_flight`` (it counts requests in flight
itself), at concurrency 16, with a retriever made 1 s slower to pool with: before the change, the server sat idle
for that second between the two groups of requests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import convrag.judging.pooling
from convrag.cli import main
from tests.llm.test_concurrency_in_flight import LIMIT, reply, spec
from tests.llm.test_faults import FakeServer

#: seconds the fake server holds every request
DELAY = 0.5
#: seconds added to building the pool (a slower retriever or a bigger corpus)
SLOW_POOL = 1.0


@pytest.fixture
def server() -> Iterator[FakeServer]:
    s = FakeServer()
    s.delay, s.responder = DELAY, reply
    yield s
    s.close()


def idle_seconds(timeline: list[tuple[float, int]]) -> float:
    """The longest stretch between the first request's arrival and the last one's with no request in flight."""
    arrivals = [t for (t, n), (_, before) in zip(timeline[1:], timeline, strict=False) if n > before]
    last = arrivals[-1] if arrivals else timeline[0][0]
    gaps = [t1 - t0 for (t0, n), (t1, _) in zip(timeline, timeline[1:], strict=False) if n == 0 and t1 <= last]
    return max(gaps, default=0.0)


def test_missed_estimate_keeps_concurrency_in_flight(
    server: FakeServer, stratrag_first30: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """12 StratRAG turns: question pattern (12 calls) and query-evidence (24) and, beside them, the missed-relevant
    estimate over a bm25 pool of depth 2 (a call per unlabelled pooled document and per labelled one)."""
    retrieve = convrag.judging.pooling.retrieve

    def slow_retrieve(*args: Any, **kwargs: Any) -> Any:
        time.sleep(SLOW_POOL)
        return retrieve(*args, **kwargs)

    monkeypatch.setattr(convrag.judging.pooling, "retrieve", slow_retrieve)
    out = tmp_path / "out"
    argv = ["audit", str(stratrag_first30), "--judge", spec(server), "--dimensions", "question_pattern,query_evidence",
            "--sample", "12", "--missed", "--pool-retrievers", "bm25", "--pool-depth", "2", "--concurrency",
            str(LIMIT), "--cache", str(tmp_path / "cache"), "--out", str(out), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    (missed,) = summary["missed"].values()
    (llm,) = summary["llm"].values()
    peak, mean = server.in_flight()
    idle = idle_seconds(server.timeline)
    print(
        f"\n{len(server.requests)} requests ({missed['candidates']} pooled candidates): server peak {peak}, "
        f"mean {mean:.2f} in flight, longest idle {idle:.3f} s; report {llm['in_flight']}"
    )
    assert missed["candidates"] > 0 and missed["judged"] == missed["candidates"]
    assert len(server.requests) >= 4 * LIMIT
    assert idle < SLOW_POOL / 2  # nothing waits on the pool
    assert peak == LIMIT and mean >= 13
