"""convrag.retrievers."""
