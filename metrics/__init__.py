"""Evaluate modules, one folder per metric; each folder loads with ``evaluate.load(path(name))``.

``path(name)`` is the folder of the installed metric (inside the installed ``convrag`` package, or the checkout's
``metrics/<name>`` in an editable install), so the same line works from any working directory::

    import evaluate
    import convrag.metrics

    retrieval = evaluate.load(convrag.metrics.path("retrieval"))
"""

from __future__ import annotations

from pathlib import Path

from convrag.core.errors import ConvragError

#: the metrics shipped as evaluate modules (each a sub-folder holding ``<name>.py``)
NAMES = ("retrieval", "generation", "audit", "pr_auc")


def path(name: str) -> str:
    """The folder of the installed metric ``name`` (one of :data:`NAMES`), for ``evaluate.load``.

    Raises :class:`~convrag.core.errors.ConvragError` for an unknown name, or when the folder lacks ``<name>.py``."""
    if name not in NAMES:
        raise ConvragError(f"unknown metric {name!r}; known: {', '.join(NAMES)}")
    folder = Path(__file__).resolve().parent / name
    if not (folder / f"{name}.py").is_file():
        raise ConvragError(f"{folder}: the metric module {name}.py is missing; reinstall convrag")
    return str(folder)
