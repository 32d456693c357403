"""Prompt templates of the LLM layer (data files; see README.md)."""
