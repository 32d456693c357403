"""convrag.evaluation."""
