"""Judges shared by the audit, SEARA and the audit metric: audit items from built folders, verdicts, pooled relevance
judging, MTR-Eval and RECOR quality judges, missed-relevant estimates."""
