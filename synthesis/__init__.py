"""Synthesis pipelines that produce benchmark data in the builders' schemas."""
