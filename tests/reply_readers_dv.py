"""Readers of the RECOR Decomposition-and-Verification prompts for the reply-shape corpus (:mod:`tests.reply_shapes`)."""

from __future__ import annotations

from .reply_shapes import Reader

READERS: dict[str, Reader] = {}
