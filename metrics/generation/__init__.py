"""MTRAG generation scoring (IDK-conditioned RB_alg, RB_llm, RL_F): plain components, LLM judges, the scorer,
readers of MTRAG files, and the evaluate module (``evaluate.load("metrics/generation")``)."""
