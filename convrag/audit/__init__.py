"""Benchmark audits: MTR-Eval dimensions, RECOR quality judges and missed-relevant estimates (``convrag audit``)."""
