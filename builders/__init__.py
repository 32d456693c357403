"""Benchmark builders (``datasets.GeneratorBasedBuilder`` classes), one module per benchmark.

``get_builder_class(name)`` resolves a registry name (as used by ``convrag build <name>``) lazily, so
importing this package stays cheap.
"""

from __future__ import annotations

import importlib

from convrag.core.errors import ConvragError

#: registry name -> "module:Class" (modules relative to this package)
REGISTRY: dict[str, str] = {
    "stratrag": "stratrag:StratRAG",
    "mtrag": "mtrag:MTRAG",
    "mtrag-un": "mtrag_un:MTRAGUN",
    "recor": "recor:RECOR",
    "mtr-bench": "mtr_bench:MTRBench",
}


def available() -> list[str]:
    """Names of the registered benchmarks."""
    return sorted(REGISTRY)


def get_builder_class(name: str) -> type:
    """The builder class registered as ``name``."""
    try:
        target = REGISTRY[name]
    except KeyError:
        raise ConvragError(f"unknown benchmark {name!r}; available: {', '.join(available())}") from None
    module_name, class_name = target.split(":")
    module = importlib.import_module(f"{__name__}.{module_name}")
    return getattr(module, class_name)
