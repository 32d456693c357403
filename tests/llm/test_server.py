"""Integration: a real OpenAI-compatible server (``python -m llama_cpp.server`` with the SmolLM2 GGUF)
driven through the OpenAI backend, behind a proxy that injects a 429 so a transport retry is forced."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from convrag.llm import RetryPolicy, SamplingParams, get_llm, load_prompt

pytest.importorskip("llama_cpp.server", reason="needs llama-cpp-python[server] (pip install 'convrag[llamacpp]')")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from convrag.llm.backends.llamacpp import default_gguf_path, default_threads

    port = _free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(default_gguf_path()), "--model_alias", "smollm2",
           "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", str(default_threads())]
    log_path = tmp_path_factory.mktemp("llama_server") / "server.log"
    log = log_path.open("w")  # a file, not a pipe: the server logs hundreds of KB while loading
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.time() + 120
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited: {log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.time() > deadline:
                pytest.fail("llama_cpp.server did not start within 120 s")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


class Proxy:
    """Forwards to ``upstream``; answers the first ``fail_first`` chat requests with 429 instead."""

    def __init__(self, upstream: str, fail_first: int) -> None:
        self.remaining = fail_first
        self.forwarded: list[dict] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if proxy.remaining > 0:
                    proxy.remaining -= 1
                    return self._send(429, b'{"error": {"message": "injected rate limit"}}')
                proxy.forwarded.append(json.loads(body))
                req = urllib.request.Request(upstream + self.path.removeprefix("/v1"), data=body,
                                             headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=120) as r:
                        return self._send(r.status, r.read())
                except urllib.error.HTTPError as e:
                    return self._send(e.code, e.read())

            def _send(self, code: int, data: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


SHORT = SamplingParams(max_tokens=32)


class Capital(BaseModel):
    city: str = Field(description="name of the city")
    country: str


def test_openai_backend_against_llama_cpp_server(llama_server: str, tmp_path: Path) -> None:
    proxy = Proxy(llama_server, fail_first=1)
    try:
        llm = get_llm(f"openai:smollm2@{proxy.url}", cache=tmp_path, timeout=120,
                      retry=RetryPolicy(max_retries=3, base_delay=0.05))
        # free text, with the first request refused by the proxy (429): retried and counted
        comp = llm.chat([{"role": "user", "content": "Name one colour of the rainbow."}], max_tokens=24)
        assert comp.text.strip() and comp.usage.prompt_tokens > 0 and comp.usage.completion_tokens > 0
        d = llm.report.to_dict()
        assert d["errors"] == {"rate_limit": 1} and d["retries"] == 1 and d["successes"] == 1

        # structured output through response_format (the server's grammar-constrained JSON mode),
        # with a semantic check that rejects the first answer so the re-ask path runs for real
        seen: list[Capital] = []

        def reject_first(value: Capital) -> str | None:
            seen.append(value)
            return "answer again, naming the country in capital letters" if len(seen) == 1 else None

        msgs = [{"role": "user", "content": "What is the capital city of France?"}]
        p = llm.structured(msgs, Capital, check=reject_first, max_tokens=64)
        assert isinstance(p.value, Capital) and p.attempts == 2 and p.value.city
        assert llm.report.structured_retries == 1 and llm.report.failures == 0
        rf = [r.get("response_format") for r in proxy.forwarded if r.get("response_format")]
        assert rf and rf[-1]["type"] == "json_object" and rf[-1]["schema"]["required"] == ["city", "country"]
        assert "capital letters" in proxy.forwarded[-1]["messages"][-1]["content"]

        # a prompt file end to end
        grade = llm.ask("query_rewrite", history=[{"role": "user", "text": "Who wrote Dune?"}],
                        question="When was he born?", params=SHORT)
        assert isinstance(grade, str) and grade.strip()

        # a rerun on the same cache: zero backend calls
        n = len(proxy.forwarded)
        again = get_llm(f"openai:smollm2@{proxy.url}", cache=tmp_path, timeout=120)
        assert again.chat([{"role": "user", "content": "Name one colour of the rainbow."}], max_tokens=24).cached
        assert again.structured(msgs, Capital, max_tokens=64).value == p.value
        again.ask("query_rewrite", history=[{"role": "user", "text": "Who wrote Dune?"}],
                  question="When was he born?", params=SHORT)
        assert again.report.calls == 0 and again.report.cache_hits == 3 and len(proxy.forwarded) == n
        assert load_prompt("query_rewrite").fields == ["history", "question"]
    finally:
        proxy.close()
