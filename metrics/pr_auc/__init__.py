"""SEARA's PR-AUC retriever metric: the evaluate module (``evaluate.load("metrics/pr_auc", "chunks")``) and its
pure computation (``compute.score_chunks``, ``facts.score_facts``), which never calls an LLM."""
