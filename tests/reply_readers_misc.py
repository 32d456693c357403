"""Readers of the generation, MTR-Pipeline, strategy and LLM-layer prompts for the reply-shape corpus
(:mod:`tests.reply_shapes`)."""

from __future__ import annotations

from .reply_shapes import Reader

READERS: dict[str, Reader] = {}
