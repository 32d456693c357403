"""convrag.llm."""
