"""convrag: build, package and score retrieval benchmarks for conversational and multi-hop RAG."""

__version__ = "0.1.0"
