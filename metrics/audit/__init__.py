"""Benchmark-audit aggregation (MTR-Eval dimensions, RECOR labels) and the evaluate module
(``evaluate.load("metrics/audit")``); the judges themselves are in ``convrag.audit``."""
