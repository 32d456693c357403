"""Ctrl-C (SIGINT) during a real run: one line on stderr saying what was kept and the command that resumes, exit 130,
no traceback; running that command again finishes the run without repeating an answered call."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.llm.test_faults import FakeServer
from tests.synthesis.test_trust_llm import SMALL, _corpus, agents


def test_ctrl_c_in_synthesize_prints_one_line_and_the_rerun_resumes(tmp_path: Path) -> None:
    server = FakeServer()
    server.responder = agents
    server.delay = 0.4
    try:
        spec = f"openai:test-model@{server.url};max_retries=0;timeout=5"
        out = tmp_path / "mtr"
        command = [sys.executable, "-m", "convrag.cli", "synthesize", "mtr", "--corpus", str(_corpus(tmp_path)),
                   "--out", str(out), *SMALL, "--questioner", spec, "--responder", spec, "--polisher", spec]
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while len(server.requests) < 3:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        answered = len(server.requests)
        assert proc.returncode == 130, err
        assert "Traceback" not in err
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1, err
        assert lines[0].startswith("convrag synthesize: interrupted; finished stages, finished shards and every "
                                   "answered LLM call are kept in --out. Run the same command again to resume: "
                                   "convrag synthesize mtr --corpus ")

        rerun = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert rerun.returncode == 0, rerun.stderr
        first = [json.dumps(r["messages"]) for r in server.requests[:answered]]
        repeated = [r for r in server.requests[answered:] if json.dumps(r["messages"]) in first]
        # only the calls still in flight at Ctrl-C (at most --concurrency 2) are made again; answered ones come
        # from the cache
        assert len(server.requests) > answered and len(repeated) <= 2
    finally:
        server.close()
