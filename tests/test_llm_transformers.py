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
