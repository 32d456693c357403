"""The model identity written into output files: the spec resolved, the real model named, the placeholder flagged."""

from __future__ import annotations

import pytest

from convrag.llm import describe, describe_all, get_llm


def test_default_and_an_unset_environment_resolve_to_the_embedded_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    for spec in (None, "", "default"):
        ident = describe(spec)
        assert ident.spec == "default" and ident.placeholder
        assert ident.model == "SmolLM2-135M-Instruct.Q4_1.gguf"
        assert "placeholder" in ident.label and "SmolLM2-135M" in ident.label


def test_the_environment_variable_is_resolved_and_options_with_keys_are_left_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVRAG_LLM", "openai:qwen2.5-72b@http://10.0.0.5:8000/v1;api_key=sk-secret;timeout=60")
    ident = describe(None)
    assert ident.spec == "openai:qwen2.5-72b@http://10.0.0.5:8000/v1"
    assert ident.model == "qwen2.5-72b" and ident.endpoint == "http://10.0.0.5:8000/v1"
    assert not ident.placeholder and "sk-secret" not in str(ident.to_dict())
    assert ident.label == ident.spec


def test_a_local_smollm2_file_is_the_placeholder_too_and_an_llm_object_is_described() -> None:
    assert describe("llamacpp:/models/SmolLM2-135M-Instruct.Q8_0.gguf").placeholder
    assert describe("hf:/models/SmolLM2-135M-Instruct").model == "SmolLM2-135M-Instruct"
    assert not describe("hf:/models/Qwen2.5-7B-Instruct").placeholder
    assert describe(get_llm("fake")).model == "fake"
    assert [i.spec for i in describe_all(["fake", "fake;seed=3", "default"])] == ["fake", "default"]


def test_credentials_written_into_the_url_are_left_out() -> None:
    ident = describe("openai:m@https://user:tok123@gpu.example:8443/v1;timeout=9")
    assert ident.endpoint == "https://gpu.example:8443/v1" and ident.spec == "openai:m@https://gpu.example:8443/v1"
    assert "tok123" not in str(ident.to_dict())


def test_a_local_model_is_named_by_its_file_or_folder_never_its_path(tmp_path) -> None:
    gguf = tmp_path / "models" / "qwen2.5-7b-instruct-q4_k_m.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    ident = describe(f"llamacpp:{gguf};n_ctx=4096")
    assert ident.to_dict()["spec"] == "llamacpp:qwen2.5-7b-instruct-q4_k_m.gguf" and ident.model == gguf.name
    assert str(tmp_path) not in str(ident.to_dict())
    assert describe("hf:../models/Qwen2.5-7B-Instruct").spec == "hf:Qwen2.5-7B-Instruct"
    # a Hub id is a name already: kept whole
    assert describe("hf:Qwen/Qwen2.5-7B-Instruct").spec == "hf:Qwen/Qwen2.5-7B-Instruct"
