"""Benchmark builders (datasets GeneratorBasedBuilder classes), one module per benchmark."""
