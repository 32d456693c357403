"""Progress bars that say what they are doing.

Every bar's description is ``"<scope> · <scope> ...: <stage>"``: the scopes are what the enclosing code is
working on (benchmark/subset, retriever, query strategy), pushed with :func:`scope`; the stage is what the bar
counts (``search``, ``encoding corpus``...). Example: ``stratrag/validation · bm25 · baseline: search``.

Commands show bars only where a person watches: never with ``--no-progress``; otherwise ``CONVRAG_PROGRESS=1``
forces them on (and ``0`` off), and without it they are shown when stderr is a terminal (:func:`wanted`). When
stderr is not a terminal (a log file, a batch job) and ``CONVRAG_PROGRESS`` is not set, the CLI runs each command
under :func:`plain_lines`: the same bars print plain lines instead, at most one every :data:`LINE_INTERVAL`
seconds, so a long run says what it is doing without filling the log.
"""

from __future__ import annotations

import os
import sys
import threading
import time
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
    return sys.stderr.isatty() or _LINES.active


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


#: Least seconds between two plain progress lines (:func:`plain_lines`).
LINE_INTERVAL = 30.0


class _Sink:
    """Where a bar shown as plain lines writes its own output: nowhere."""

    encoding = "utf-8"

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


class _Lines:
    """The state of :func:`plain_lines`: whether it is on, when the last line was printed, and the bar display it
    replaces (restored when the block ends)."""

    def __init__(self) -> None:
        self.active = False
        self.interval = LINE_INTERVAL
        self.last = 0.0
        self.lock = threading.Lock()
        self.original: Any = None

    def display(self, bar: Any, msg: str | None = None, pos: int | None = None) -> bool:
        """Stands in for ``tqdm.display``: the bar's own output goes to a sink; a line is printed when
        ``interval`` seconds have passed since the last one (whichever bar refreshes then), and a closing line for
        a bar that printed one before."""
        bar.fp, bar.sp = _Sink(), lambda _text: None
        closing = bool(getattr(bar, "disable", False))  # tqdm.close sets it before its last display
        with self.lock:
            now = time.monotonic()
            if closing:
                if not getattr(bar, "_convrag_reported", False):
                    return True
            elif now - self.last < self.interval:
                return True
            self.last = now
            bar._convrag_reported = True
        print(progress_line(bar.format_dict, done=closing), file=sys.stderr, flush=True)
        return True


_LINES = _Lines()


def progress_line(state: dict[str, Any], done: bool = False) -> str:
    """One plain progress line from a bar's ``format_dict``: time of day, what is done (the bar's description),
    count of total with the percentage, time elapsed and, from the bar's rate, about how long is left."""
    from tqdm import tqdm

    n, total, unit = state.get("n", 0), state.get("total"), state.get("unit") or "it"
    what, unit = state.get("prefix") or "working", "" if unit == "it" else f" {unit}"  # tqdm's "it": no unit
    count = f"{n:,.0f} of {total:,.0f}{unit} ({100 * n / total:.0f}%)" if total else f"{n:,.0f}{unit}"
    elapsed = tqdm.format_interval(state.get("elapsed") or 0)
    rate = state.get("rate") or (n / state["elapsed"] if state.get("elapsed") else None)
    left = f", about {tqdm.format_interval((total - n) / rate)} left" if total and rate and not done else ""
    status = f"done, {count} in {elapsed}" if done else f"{count}, {elapsed} elapsed{left}"
    return f"[{time.strftime('%H:%M:%S')}] {what}: {status}"


@contextmanager
def plain_lines(interval: float | None = None) -> Iterator[bool]:
    """Show progress bars as plain lines on stderr while the block runs, when stderr is not a terminal and
    ``CONVRAG_PROGRESS`` does not decide (yields whether that is so): :func:`wanted` is then true, and every tqdm
    bar prints at most one line every ``interval`` seconds (default :data:`LINE_INTERVAL`; the first one
    ``interval`` seconds after the block starts) naming what it counts and how far it is, plus a closing line for a
    bar that printed one. A ``--no-progress`` run prints none (its bars are disabled)."""
    if _LINES.active or sys.stderr.isatty() or os.environ.get(ENV, "").strip():
        yield False
        return
    from tqdm import std

    _LINES.interval = LINE_INTERVAL if interval is None else interval
    _LINES.active, _LINES.last = True, time.monotonic()
    _LINES.original = std.tqdm.display
    std.tqdm.display = lambda bar, msg=None, pos=None: _LINES.display(bar, msg, pos)
    try:
        yield True
    finally:
        std.tqdm.display = _LINES.original
        _LINES.active = False
