"""Evaluate modules, one folder per metric; each folder also loads with ``evaluate.load(path)``."""
