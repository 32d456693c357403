"""The ``convrag evaluate`` and ``convrag evaluate-generation`` commands: aggregation, report tables, plots and results
files."""
