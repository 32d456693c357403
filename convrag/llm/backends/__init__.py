"""Backends: each turns chat messages into a :class:`~convrag.llm.types.Completion`."""

from convrag.llm.backends.base import Backend

__all__ = ["Backend"]
