"""Progress bars that say what they are doing.

Every bar's description is ``"<scope> · <scope> ...: <stage>"``: the scopes are what the enclosing code is
working on (benchmark/subset, retriever, query strategy), pushed with :func:`scope`; the stage is what the bar
counts (``search``, ``encoding corpus``...). Example: ``stratrag/validation · bm25 · baseline: search``.

Commands show bars only where a person watches: never with ``--no-progress``; otherwise ``CONVRAG_PROGRESS=1``
forces them on (and ``0`` off), and without it they are shown when stderr is a terminal (:func:`wanted`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import ModuleType
from typing import Any

#: Environment variable that forces bars on (``1``) or off (``0``) whatever stderr is.
ENV = "CONVRAG_PROGRESS"
SEPARATOR = " · "

_SCOPE: ContextVar[tuple[str, ...]] = ContextVar("convrag_progress_scope", default=())


def wanted(no_progress: bool = False) -> bool:
    """Whether a command shows progress bars (module docstring: ``--no-progress``, ``$CONVRAG_PROGRESS``, TTY)."""
    if no_progress:
        return False
    forced = os.environ.get(ENV, "").strip().lower()
    if forced in ("1", "true", "yes", "on"):
        return True
    if forced in ("0", "false", "no", "off"):
        return False
    return sys.stderr.isatty()


@contextmanager
def scope(*parts: str | None) -> Iterator[None]:
    """Bars made inside this block name ``parts`` (empty ones skipped) after the enclosing blocks' parts."""
    token = _SCOPE.set(_SCOPE.get() + tuple(p for p in parts if p))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def label(stage: str, owner: str | None = None) -> str:
    """A bar description: the current scopes, then ``owner`` (the retriever or component making the bar) when no
    scope names it already, then ``": " + stage``."""
    parts = list(_SCOPE.get())
    if owner and owner not in parts:
        parts.append(owner)
    return f"{SEPARATOR.join(parts)}: {stage}" if parts else stage


@contextmanager
def relabelled(module: ModuleType | None, factory: str, desc: str) -> Iterator[None]:
    """Give the bars that library ``module`` makes through its ``factory`` global (``tqdm``, ``trange``) the
    description ``desc`` while the block runs; a module without that global is left as it is."""
    original: Callable[..., Any] | None = getattr(module, factory, None) if module is not None else None
    if original is None:
        yield
        return

    def named(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **{**kwargs, "desc": desc})

    setattr(module, factory, named)
    try:
        yield
    finally:
        setattr(module, factory, original)


@contextmanager
def _environ(name: str, value: str | None) -> Iterator[None]:
    """Environment variable ``name`` set to ``value`` in the block (``None``: left as it is), then restored."""
    old = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if value is not None:
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


@contextmanager
def datasets_bars(shown: bool) -> Iterator[None]:
    """Hide the ``datasets`` library's bars (loading, generating splits) in the block unless ``shown``. Where
    ``datasets`` is not imported yet (``convrag evaluate`` reads Parquet without it), its bars are hidden through
    its ``HF_DATASETS_DISABLE_PROGRESS_BARS`` variable instead of importing it (half a second, 50 MB)."""
    if "datasets" not in sys.modules:
        with _environ("HF_DATASETS_DISABLE_PROGRESS_BARS", None if shown else "1"):
            yield
        return
    import datasets

    hide = not shown and datasets.is_progress_bar_enabled()
    if hide:
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        if hide:
            datasets.enable_progress_bars()
