"""Client logic with a scripted fake backend: retries, structured re-asks, cache, batch, accounting."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from convrag.llm import (
    LLM,
    BackendError,
    DiskCache,
    LLMFailure,
    RetryPolicy,
    RunReport,
    SamplingParams,
    get_llm,
    run_batch,
)
from convrag.llm.backends.fake import FakeBackend, transient


class Answer(BaseModel):
    answer: str
    confidence: float = Field(ge=0, le=1)


def make(backend: FakeBackend, tmp_path: Path, **kw) -> tuple[LLM, list[float]]:
    sleeps: list[float] = []
    llm = LLM(backend, cache=DiskCache(tmp_path / "cache"), sleep=sleeps.append,
              retry=kw.pop("retry", RetryPolicy(max_retries=3, base_delay=1.0, max_delay=4.0, jitter=0.5)),
              seed=0, **kw)
    return llm, sleeps


MSGS = [{"role": "user", "content": "What is the capital of France?"}]


def test_chat_cache_rerun_makes_zero_calls(tmp_path: Path) -> None:
    fb = FakeBackend(responder=lambda m: "Paris")
    llm, _ = make(fb, tmp_path)
    assert llm.chat(MSGS).text == "Paris"
    again = llm.chat(MSGS)
    assert again.text == "Paris" and again.cached
    assert len(fb.calls) == 1
    # a fresh client on the same cache directory (a rerun) still makes no call
    fb2 = FakeBackend(responder=lambda m: "other")
    llm2, _ = make(fb2, tmp_path)
    assert llm2.chat(MSGS).text == "Paris" and fb2.calls == []
    # different params or model are different keys
    llm2.chat(MSGS, max_tokens=7)
    assert len(fb2.calls) == 1
    fb3 = FakeBackend(responder=lambda m: "x", model="other-model")
    make(fb3, tmp_path)[0].chat(MSGS)
    assert len(fb3.calls) == 1
    d = llm.report.to_dict()
    assert d["cache_hits"] == 1 and d["cache_misses"] == 1 and d["calls"] == 1


def test_is_cached_and_request_messages_answer_without_calling(tmp_path: Path) -> None:
    fb = FakeBackend(["Paris, of course.", '{"answer": "Paris", "confidence": 0.9}'])
    llm, _ = make(fb, tmp_path)
    assert not llm.is_cached(MSGS) and not llm.is_cached(MSGS, Answer) and fb.calls == []
    assert llm.request_messages(MSGS) == MSGS
    sent = llm.request_messages(MSGS, Answer)  # the schema instruction is added to what is sent
    assert sent != MSGS and "confidence" in "".join(m["content"] for m in sent)
    llm.chat(MSGS)
    assert llm.is_cached(MSGS) and not llm.is_cached(MSGS, Answer)
    assert not llm.is_cached(MSGS, params=SamplingParams(max_tokens=7))  # other params, another key
    llm.structured(MSGS, Answer)
    assert llm.is_cached(MSGS, Answer) and len(fb.calls) == 2
    assert fb.calls[-1]["messages"] == sent  # what was sent is what request_messages said


def test_transient_errors_retried_with_backoff(tmp_path: Path) -> None:
    fb = FakeBackend([transient("rate_limit"), transient("server_error"), transient("timeout"), "ok"])
    llm, sleeps = make(fb, tmp_path)
    assert llm.chat(MSGS).text == "ok"
    assert len(fb.calls) == 4
    assert len(sleeps) == 3
    for i, s in enumerate(sleeps):  # 1, 2, 4 seconds +-50%
        base = min(4.0, 2.0 ** i)
        assert 0.5 * base <= s <= 1.5 * base
    d = llm.report.to_dict()
    assert d["retries"] == 3 and d["calls"] == 4 and d["successes"] == 1 and d["failures"] == 0
    assert d["errors"] == {"rate_limit": 1, "server_error": 1, "timeout": 1}


def test_jitter_spreads_delays() -> None:
    pol = RetryPolicy(base_delay=1.0, jitter=0.5)
    rng = random.Random(1)
    delays = {round(pol.delay(2, rng), 6) for _ in range(20)}
    assert len(delays) > 10 and all(2.0 <= d <= 6.0 for d in delays)
    assert RetryPolicy(base_delay=1, max_delay=5, jitter=0).delay(10, rng) == 5


def test_gives_up_and_reports(tmp_path: Path) -> None:
    fb = FakeBackend([transient()] * 10)
    llm, sleeps = make(fb, tmp_path)
    with pytest.raises(LLMFailure, match="gave up after 4 attempts") as ei:
        llm.chat(MSGS)
    assert len(ei.value.errors) == 4
    assert len(fb.calls) == 4 and len(sleeps) == 3
    d = llm.report.to_dict()
    assert d["failures"] == 1 and d["errors"] == {"rate_limit": 4}
    assert "1 failures" in llm.report.summary()
    assert len(DiskCache(tmp_path / "cache")) == 0  # failures are never cached


def test_fatal_error_not_retried(tmp_path: Path) -> None:
    fb = FakeBackend([BackendError("bad key", kind="client_error"), "never"])
    llm, sleeps = make(fb, tmp_path)
    with pytest.raises(LLMFailure, match="bad key"):
        llm.chat(MSGS)
    assert len(fb.calls) == 1 and sleeps == []


def test_structured_valid_first_time(tmp_path: Path) -> None:
    fb = FakeBackend(['{"answer": "Paris", "confidence": 0.9}'], supports_schema=True)
    llm, _ = make(fb, tmp_path)
    p = llm.structured(MSGS, Answer)
    assert p.value == Answer(answer="Paris", confidence=0.9) and p.attempts == 1
    assert fb.calls[0]["json_schema"]["required"] == ["answer", "confidence"]  # constrained decoding requested
    assert "JSON schema" in fb.calls[0]["messages"][-1]["content"]  # and the schema is stated in the prompt
    p2 = llm.structured(MSGS, Answer)
    assert p2.cached and p2.value == p.value and len(fb.calls) == 1


def test_structured_repair_counts(tmp_path: Path) -> None:
    fb = FakeBackend(['```json\n{"answer": "Paris", "confidence": 0.9,}\n```'])
    llm, _ = make(fb, tmp_path)
    p = llm.structured(MSGS, Answer)
    assert p.value.answer == "Paris" and "trailing_comma" in p.repairs and "code_fence" in p.repairs
    assert fb.calls[0]["json_schema"] is None  # backend has no constrained decoding
    assert llm.report.repairs == 1 and llm.report.structured_retries == 0


def test_structured_retry_feeds_error_back(tmp_path: Path) -> None:
    fb = FakeBackend(["I think it is Paris.", '{"answer": "Paris", "confidence": 7}',
                      '{"answer": "Paris", "confidence": 0.7}'])
    llm, _ = make(fb, tmp_path)
    p = llm.structured(MSGS, Answer)
    assert p.attempts == 3 and p.value.confidence == 0.7
    second, third = fb.calls[1]["messages"], fb.calls[2]["messages"]
    assert second[-2] == {"role": "assistant", "content": "I think it is Paris."}
    assert "no JSON object" in second[-1]["content"]
    assert "confidence" in third[-1]["content"] and "less than or equal to 1" in third[-1]["content"]
    assert llm.report.structured_retries == 2
    # the validated result is cached under the original request: a rerun calls nothing
    fb2 = FakeBackend()
    assert make(fb2, tmp_path)[0].structured(MSGS, Answer).value == p.value and fb2.calls == []


def test_structured_failure_is_never_a_default(tmp_path: Path) -> None:
    fb = FakeBackend(["nope", "still no", '{"answer": 3}'])
    llm, _ = make(fb, tmp_path)
    with pytest.raises(LLMFailure, match="no valid structured reply after 3 attempts") as ei:
        llm.structured(MSGS, Answer)
    assert ei.value.last_text == '{"answer": 3}' and len(ei.value.errors) == 3
    assert llm.report.failures == 1 and len(DiskCache(tmp_path / "cache")) == 0


def test_structured_check_hook(tmp_path: Path) -> None:
    fb = FakeBackend(['{"answer": "Lyon", "confidence": 0.5}', '{"answer": "Paris", "confidence": 0.5}'])
    llm, _ = make(fb, tmp_path)
    p = llm.structured(MSGS, Answer, check=lambda v: None if v.answer == "Paris" else "wrong city")
    assert p.value.answer == "Paris" and "wrong city" in fb.calls[1]["messages"][-1]["content"]


def test_transient_inside_structured(tmp_path: Path) -> None:
    fb = FakeBackend([transient("connection"), '{"answer": "Paris", "confidence": 1}'])
    llm, sleeps = make(fb, tmp_path)
    assert llm.structured(MSGS, Answer).value.confidence == 1
    assert llm.report.retries == 1 and len(sleeps) == 1


def test_accounting_and_cost(tmp_path: Path) -> None:
    report = RunReport(prices={"fake-priced": {"input": 1.0, "output": 2.0}})
    fb = FakeBackend(responder=lambda m: "a b c", model="fake-priced")
    fb.name = "openai-like"
    llm = LLM(fb, cache=False, report=report)
    llm.chat([{"role": "user", "content": "one two"}])
    d = report.to_dict()
    assert d["prompt_tokens"] == 2 and d["completion_tokens"] == 3
    assert d["cost_usd"] == pytest.approx((2 * 1.0 + 3 * 2.0) / 1e6)
    fb.model = "unknown-model"
    llm.chat([{"role": "user", "content": "x"}])
    assert report.to_dict()["unpriced_tokens"] == 1 + 3
    out = tmp_path / "report.json"
    report.write(out)
    assert '"calls": 2' in out.read_text()


def test_batch_bounded_concurrency_and_failures(tmp_path: Path) -> None:
    active, peak = [0], [0]
    lock = threading.Lock()

    def responder(msgs):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        q = msgs[-1]["content"]
        if q == "q3":
            raise transient()
        return q.upper()

    fb = FakeBackend(responder=responder)
    llm, _ = make(fb, tmp_path, max_concurrency=3, retry=RetryPolicy(max_retries=1, base_delay=0))
    res = run_batch([f"q{i}" for i in range(12)], lambda q: llm.chat([{"role": "user", "content": q}]).text,
                    concurrency=8)
    assert peak[0] <= 3
    assert res.results[0] == "Q0" and res.results[3] is None and list(res.failures) == [3]
    assert "gave up" in res.failures[3] and not res.ok
    assert len(res.succeeded()) == 11
    with pytest.raises(LLMFailure, match="1 of 12 items failed"):
        res.raise_on_failure()
    assert llm.report.failures == 1


def test_batch_propagates_programming_errors() -> None:
    with pytest.raises(ZeroDivisionError):
        run_batch([1, 0], lambda x: 1 / x, concurrency=2)


def test_get_llm_fake_and_env(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CONVRAG_LLM", "fake")
    llm = get_llm(cache=tmp_path, max_concurrency=2)
    assert llm.backend.name == "fake" and llm.chat(MSGS).text == MSGS[0]["content"]
    assert llm.cache is not None and llm.cache.dir == tmp_path


BATCH_SCRIPT = textwrap.dedent("""
    import sys, time
    from convrag.llm import LLM, DiskCache, run_batch
    from convrag.llm.backends.fake import FakeBackend
    log = open(sys.argv[2], "a")
    def responder(msgs):
        q = msgs[-1]["content"]
        log.write(q + "\\n"); log.flush()
        time.sleep(0.15)
        return "answer to " + q
    llm = LLM(FakeBackend(responder=responder), cache=DiskCache(sys.argv[1]))
    run_batch([f"item{i}" for i in range(int(sys.argv[3]))],
              lambda q: llm.chat([{"role": "user", "content": q}]).text, concurrency=2)
    print("finished")
""")


def test_killed_batch_resumes_with_only_missing_calls(tmp_path: Path) -> None:
    n = 30
    cache_dir, log = tmp_path / "cache", tmp_path / "calls.log"
    script = tmp_path / "batch.py"
    script.write_text(BATCH_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), str(cache_dir), str(log), str(n)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline and (not log.exists() or len(log.read_text().split()) < 8):
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    cache = DiskCache(cache_dir)
    done = {f"item{i}" for i in range(n) if cache.get(_key_for(cache_dir, f"item{i}")) is not None}
    assert 4 <= len(done) < n  # killed part-way, with complete entries only
    assert not any(p.suffix == ".json" and p.stat().st_size == 0 for p in cache_dir.rglob("*"))

    fb = FakeBackend(responder=lambda m: "answer to " + m[-1]["content"])
    llm = LLM(fb, cache=cache)
    res = run_batch([f"item{i}" for i in range(n)], lambda q: llm.chat([{"role": "user", "content": q}]).text,
                    concurrency=4)
    assert res.ok and res.results == [f"answer to item{i}" for i in range(n)]
    called = {c["messages"][-1]["content"] for c in fb.calls}
    assert called == {f"item{i}" for i in range(n)} - done  # calls only for the missing items
    assert llm.report.cache_hits == len(done) and llm.report.calls == n - len(done)


def _key_for(cache_dir: Path, q: str) -> str:
    llm = LLM(FakeBackend(), cache=DiskCache(cache_dir))
    return llm._key("chat", [{"role": "user", "content": q}], SamplingParams(), None)
