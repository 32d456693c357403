"""RECOR (reasoning-intensive multi-turn retrieval): domain-macro aggregation, the paper-style tables, and generation
scoring with the authors' judges."""
