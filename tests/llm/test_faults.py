"""Fault injection: a tiny fake OpenAI-compatible server driven through the real ``openai`` client backend.

Each fault (429, 5xx, timeout, unreadable body, broken JSON content, refused connection) must be retried,
counted in the run report, and end either in a valid value or in an LLMFailure, never a silent default.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from pydantic import BaseModel

from convrag.llm import LLM, LLMFailure, RetryPolicy, get_llm


class Answer(BaseModel):
    answer: str
    confidence: float


GOOD = '{"answer": "Paris", "confidence": 0.9}'


class _Server(ThreadingHTTPServer):
    #: room for a burst of connections (the default backlog of 5 would hold a client of 16 threads back)
    request_queue_size = 128


class FakeServer:
    """Replies follow ``script`` (one action per request), then ``ok``. Actions: ``ok``, ``429``, ``500``,
    ``503``, ``401``, ``sleep``, ``badbody``, ``html``, ``content:<text>``, ``reject_json_schema``,
    ``reject_response_format`` (400 to any request with a ``response_format``), ``empty_choices``.
    ``responder(body)``, when set, writes the content of every ``ok`` reply from the request body."""

    def __init__(self) -> None:
        self.script: list[str] = []
        self.requests: list[dict] = []
        self.responder: Callable[[dict], str] | None = None
        #: the finish_reason of every ``ok`` reply ("length": cut off at max_tokens)
        self.finish_reason = "stop"
        #: seconds every request is held before its reply (a server that answers after a fixed delay)
        self.delay = 0.0
        #: ``usage(body, content) -> (prompt_tokens, completion_tokens)`` of every ``ok`` reply (default 11 / 7)
        self.usage: Callable[[dict, str], tuple[int, int]] | None = None
        #: (time, requests in flight after it) at every arrival and departure: see :meth:`in_flight`
        self.timeline: list[tuple[float, int]] = []
        self._open = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append(body)
                    action = server.script.pop(0) if server.script else "ok"
                    server._open += 1
                    server.timeline.append((time.perf_counter(), server._open))
                try:
                    if server.delay:
                        time.sleep(server.delay)
                    self._reply(body, action)
                finally:
                    with server.lock:
                        server._open -= 1
                        server.timeline.append((time.perf_counter(), server._open))

            def _reply(self, body: dict, action: str) -> None:
                rf = body.get("response_format") or {}
                if (action == "reject_json_schema" and rf.get("type") == "json_schema") or (
                        action == "reject_response_format" and rf):
                    return self._send(400, json.dumps({"error": {
                        "message": f"response_format type {rf.get('type')!r} is not supported by this server"}}))
                if action in ("reject_json_schema", "reject_response_format"):
                    action = "ok"
                if action == "empty_choices":
                    return self._send(200, json.dumps({"id": "c1", "object": "chat.completion", "created": 0,
                                                       "model": body["model"], "choices": []}))
                if action in ("429", "500", "503", "401", "400"):
                    return self._send(int(action), json.dumps({"error": {"message": f"injected {action}"}}))
                if action == "sleep":
                    time.sleep(1.5)
                    action = "ok"
                if action == "badbody":
                    return self._send(200, '{"id": "x", "choices": [{"message": ')
                if action == "html":
                    return self._send(200, "<html>gateway hiccup</html>", "text/html")
                if action.startswith("content:"):
                    content = action[len("content:"):]
                elif server.responder is not None:
                    content = server.responder(body)
                else:
                    content = GOOD
                prompt, completion = server.usage(body, content) if server.usage else (11, 7)
                return self._send(200, json.dumps({
                    "id": "c1", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": server.finish_reason,
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                              "total_tokens": prompt + completion}}))

            def _send(self, code: int, text: str, ctype: str = "application/json") -> None:
                data = text.encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def in_flight(self) -> tuple[int, float]:
        """(peak, mean) requests in flight, counted by the server. The mean is time-weighted from the first request's
        arrival to the last one's: the span while work remained to be handed out (the tail after the last arrival,
        when fewer requests than the bound are left, does not count)."""
        with self.lock:
            line = list(self.timeline)
        arrivals = [i for i in range(1, len(line)) if line[i][1] > line[i - 1][1]] if line else []
        if not line:
            return 0, 0.0
        end = line[arrivals[-1]][0] if arrivals else line[0][0]
        area = sum(n * (min(t1, end) - t0) for (t0, n), (t1, _) in zip(line, line[1:], strict=False)
                   if t0 < end)
        span = end - line[0][0]
        return max(n for _, n in line), (area / span if span > 0 else float(line[0][1]))

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @classmethod
    def running(cls, **settings: object) -> Iterator[FakeServer]:
        """A server with ``settings`` set on it (``delay``, ``responder``, ``usage``...), closed after use."""
        server = cls()
        for name, value in settings.items():
            setattr(server, name, value)
        try:
            yield server
        finally:
            server.close()


@pytest.fixture
def server() -> Iterator[FakeServer]:
    s = FakeServer()
    yield s
    s.close()


FAST = RetryPolicy(max_retries=3, base_delay=0.01, max_delay=0.05)
MSGS = [{"role": "user", "content": "Capital of France?"}]


def client(server: FakeServer, tmp_path: Path, **kw) -> LLM:
    return get_llm(f"openai:test-model@{server.url}", api_key="sk-test", cache=tmp_path / "cache",
                   retry=kw.pop("retry", FAST), timeout=kw.pop("timeout", 5.0), **kw)


@pytest.mark.parametrize(("faults", "kind"), [
    (["429", "429"], "rate_limit"),
    (["500", "503"], "server_error"),
    (["sleep"], "timeout"),
    (["badbody"], "bad_response"),
    (["html"], "bad_response"),
])
def test_fault_is_retried_and_counted(server: FakeServer, tmp_path: Path, faults: list[str], kind: str) -> None:
    server.script = list(faults)
    llm = client(server, tmp_path, timeout=0.5)
    comp = llm.chat(MSGS)
    assert comp.text == GOOD and comp.usage.prompt_tokens == 11 and comp.usage.completion_tokens == 7
    d = llm.report.to_dict()
    assert d["errors"] == {kind: len(faults)}
    assert d["retries"] == len(faults) and d["calls"] == len(faults) + 1 and d["failures"] == 0
    assert len(server.requests) == len(faults) + 1
    assert d["prompt_tokens"] == 11 and f"{len(faults)} retries" in llm.report.summary()


def test_persistent_429_is_a_reported_failure(server: FakeServer, tmp_path: Path) -> None:
    server.script = ["429"] * 10
    llm = client(server, tmp_path)
    with pytest.raises(LLMFailure, match="rate limited"):
        llm.chat(MSGS)
    d = llm.report.to_dict()
    assert d["calls"] == 4 and d["retries"] == 3 and d["failures"] == 1 and d["errors"] == {"rate_limit": 4}
    assert d["failure_messages"] and "429" in d["failure_messages"][0]


def test_client_error_is_not_retried(server: FakeServer, tmp_path: Path) -> None:
    server.script = ["401"]
    llm = client(server, tmp_path)
    with pytest.raises(LLMFailure, match="401"):
        llm.chat(MSGS)
    assert len(server.requests) == 1 and llm.report.errors == {"client_error": 1}


def test_connection_refused(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    llm = get_llm(f"openai:m@http://127.0.0.1:{port}/v1", api_key="k", cache=False, retry=FAST, timeout=2)
    with pytest.raises(LLMFailure):
        llm.chat(MSGS)
    assert llm.report.errors == {"connection": 4} and llm.report.retries == 3


def test_broken_json_content_is_repaired(server: FakeServer, tmp_path: Path) -> None:
    server.script = ["content:Here you go: {'answer': 'Paris', 'confidence': 0.9,"]
    llm = client(server, tmp_path)
    p = llm.structured(MSGS, Answer)
    assert p.value == Answer(answer="Paris", confidence=0.9) and p.attempts == 1
    assert {"truncated", "single_quotes"} <= set(p.repairs)
    assert llm.report.repairs == 1 and len(server.requests) == 1


def test_broken_json_content_is_reasked(server: FakeServer, tmp_path: Path) -> None:
    server.script = ["content:Paris, I am fairly sure.", "content:" + GOOD]
    llm = client(server, tmp_path)
    p = llm.structured(MSGS, Answer)
    assert p.attempts == 2 and p.value.answer == "Paris"
    retry_msgs = server.requests[1]["messages"]
    assert retry_msgs[-2]["content"] == "Paris, I am fairly sure." and "no JSON" in retry_msgs[-1]["content"]
    assert llm.report.structured_retries == 1 and llm.report.failures == 0


def test_broken_json_content_everywhere_fails_loudly(server: FakeServer, tmp_path: Path) -> None:
    server.script = ["content:no idea"] * 3
    llm = client(server, tmp_path)
    with pytest.raises(LLMFailure, match="no valid structured reply after 3 attempts"):
        llm.structured(MSGS, Answer)
    d = llm.report.to_dict()
    assert d["failures"] == 1 and d["structured_retries"] == 2 and d["calls"] == 3 and d["cache_hits"] == 0
    # and a rerun does not find a cached value for the failed request
    server.script = ["content:" + GOOD]
    assert client(server, tmp_path).structured(MSGS, Answer).value.answer == "Paris"


def test_structured_uses_response_format_and_falls_back(server: FakeServer, tmp_path: Path) -> None:
    server.script = ["reject_json_schema", "reject_json_schema"]
    llm = client(server, tmp_path)
    assert llm.structured(MSGS, Answer).value.answer == "Paris"
    kinds = [r.get("response_format", {}).get("type") for r in server.requests]
    assert kinds == ["json_schema", "json_object"]
    assert server.requests[1]["response_format"]["schema"]["required"] == ["answer", "confidence"]
    # the accepted style is remembered
    llm.structured([{"role": "user", "content": "again"}], Answer)
    assert server.requests[-1]["response_format"]["type"] == "json_object"
    assert llm.report.errors == {"rejected": 1} and llm.report.failures == 0


def test_explicit_response_format_option(server: FakeServer, tmp_path: Path) -> None:
    llm = get_llm(f"openai:m@{server.url};response_format=json_object;timeout=3", api_key="k", cache=False)
    llm.structured(MSGS, Answer)
    assert server.requests[0]["response_format"] == {"type": "json_object"}
    assert server.requests[0]["temperature"] == 0 and llm.timeout == 3


def test_cached_rerun_makes_no_http_calls(server: FakeServer, tmp_path: Path) -> None:
    client(server, tmp_path).structured(MSGS, Answer)
    n = len(server.requests)
    llm = client(server, tmp_path)
    assert llm.structured(MSGS, Answer).cached and len(server.requests) == n
    assert llm.report.calls == 0 and llm.report.cache_hits == 1
