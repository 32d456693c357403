"""Local Hugging Face transformers backend (any causal LM directory or Hub id, CPU by default)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from convrag.llm.backends.base import Backend
from convrag.llm.types import BackendError, Completion, Message, SamplingParams, Usage


class TransformersBackend(Backend):
    """Greedy or sampled generation with ``AutoModelForCausalLM``. No constrained decoding: structured
    outputs rely on the prompt plus parse / repair / retry. A path ending in ``.gguf`` is loaded through
    transformers' GGUF support (needs the ``gguf`` and ``accelerate`` packages; slower than llama.cpp).
    """

    name = "hf"
    parallel = False

    def __init__(self, path: str | os.PathLike[str], *, device: str = "cpu", dtype: str | None = None,
                 model_name: str | None = None) -> None:
        self.path = str(path)
        self.model = model_name or self.path
        self.device = device
        self.dtype = dtype
        self._tok: Any = None
        self._lm: Any = None
        self._lock = threading.Lock()
        self._digest: str | None = None

    def identity(self) -> dict[str, Any]:
        """Backend and model, plus the file's digest for a ``.gguf`` path (as the llama.cpp backend keys it)."""
        if self._digest is None and self.path.endswith(".gguf") and Path(self.path).is_file():
            from convrag.llm.backends.base import file_digest

            self._digest = file_digest(Path(self.path))
        return {**super().identity(), "digest": self._digest} if self._digest else super().identity()

    def _load(self) -> None:
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:  # pragma: no cover
            raise BackendError("hf backend needs torch and transformers") from exc
        src, kw = self.path, {}
        if src.endswith(".gguf"):
            p = Path(src)
            src, kw = str(p.parent), {"gguf_file": p.name}
        try:
            self._tok = AutoTokenizer.from_pretrained(src, **kw)
            dtype = getattr(torch, self.dtype) if self.dtype else None
            self._lm = AutoModelForCausalLM.from_pretrained(src, dtype=dtype, **kw).to(self.device).eval()
        except (OSError, ValueError, ImportError) as exc:
            raise BackendError(f"cannot load transformers model {self.path}: {exc}", kind="client_error") from exc

    def complete(self, messages: list[Message], params: SamplingParams, *,
                 json_schema: dict[str, Any] | None = None, timeout: float | None = None) -> Completion:
        import torch

        with self._lock:
            if self._lm is None:
                self._load()
            tok, lm = self._tok, self._lm
            enc = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                          return_dict=True).to(self.device)
            gen: dict[str, Any] = {"max_new_tokens": params.max_tokens, "pad_token_id": tok.pad_token_id
                                   if tok.pad_token_id is not None else tok.eos_token_id}
            if params.temperature > 0:
                gen.update(do_sample=True, temperature=params.temperature, top_p=params.top_p)
                if params.seed is not None:
                    torch.manual_seed(params.seed)
            else:
                gen.update(do_sample=False, temperature=None, top_p=None, top_k=None)
            if params.stop:
                gen.update(stop_strings=list(params.stop), tokenizer=tok)
            with torch.no_grad():
                out = lm.generate(**enc, **gen)
            n_in = enc["input_ids"].shape[1]
            new = out[0][n_in:]
            text = tok.decode(new, skip_special_tokens=True)
        finish = "stop" if len(new) < params.max_tokens else "length"
        return Completion(text=text, usage=Usage(int(n_in), int(len(new))), model=self.model, finish_reason=finish)
