"""Query texts that know their parts, and fitting them to an encoder's length limit.

A query strategy (``convrag.retrievers.strategies``) returns a :class:`QueryText`: a ``str`` (what BM25 and every other
retriever see, unchanged) that also records which lines are conversation history, oldest first, and which are the
protected tail (the current query, and what a strategy appends after it, e.g. reasoning).

:func:`fit_query` fits such a text to ``limit`` tokens of an encoder (dense retrievers call it for every query):

1. a text that fits is used as is;
2. otherwise the oldest history lines are dropped, one at a time, until the rest fits; the last line dropped
   is then put back cut from its start (its most recent words kept) as far as it fits, so the budget is used;
3. if the tail alone is too long, no history is kept and the tail is cut at its end. The current query comes first
   in every tail, so it and the appended parts are never cut while they fit, whatever the history's length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

SEP = "\n"
FITS, TRIMMED, TAIL_CUT = "fits", "history trimmed", "tail cut"


class QueryText(str):
    """A query string made of ``history`` lines (oldest first) and ``tail`` parts, joined by ``sep`` (a newline
    unless a strategy renders its parts otherwise: ``conversation`` joins them with ``"; "``, as mteb does)."""

    history: tuple[str, ...]
    tail: tuple[str, ...]
    sep: str

    def __new__(cls, history: Sequence[str], tail: Sequence[str], sep: str = SEP) -> QueryText:
        hist = tuple(h.strip() for h in history if h and h.strip())
        rest = tuple(t.strip() for t in tail if t and t.strip())
        obj = super().__new__(cls, sep.join(hist + rest))
        obj.history, obj.tail, obj.sep = hist, rest, sep
        return obj

    def __reduce__(self):  # pickling (multiprocessing, caches) keeps the parts
        return (QueryText, (self.history, self.tail, self.sep))


def _words_fitting(
    words: list[str], build: Callable[[str], str], count: Callable[[str], int], limit: int, keep_end: bool
) -> str | None:
    """Longest run of ``words`` (their end if ``keep_end``, else their start) for which ``build`` fits.

    When not even one word fits, the longest run of that word's characters (same end), so a long text
    without spaces (a URL, Chinese or Japanese text) is cut rather than lost; ``None`` if nothing fits.
    """
    best = _longest(len(words), lambda n: " ".join(words[-n:] if keep_end else words[:n]), build, count, limit)
    if best is None and words:
        word = words[-1] if keep_end else words[0]
        best = _longest(len(word), lambda n: word[-n:] if keep_end else word[:n], build, count, limit)
    return best


def _longest(
    n: int, piece: Callable[[int], str], build: Callable[[str], str], count: Callable[[str], int], limit: int
) -> str | None:
    """``piece(m)`` for the largest m in 1..n whose ``build`` fits (lengths grow with m), else ``None``."""
    lo, hi, best = 1, n, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if count(build(piece(mid))) <= limit:
            best, lo = piece(mid), mid + 1
        else:
            hi = mid - 1
    return best


def fit_query(text: str, count: Callable[[str], int], limit: int) -> tuple[str, str]:
    """``(fitted text, status)`` with status ``fits``, ``history trimmed`` or ``tail cut`` (see module doc).

    ``count`` gives a text's length in the encoder's tokens (special tokens included); ``limit`` is its
    maximum sequence length. A plain ``str`` (no parts) that is too long is cut at its end.
    """
    if count(text) <= limit:
        return text, FITS
    history = list(getattr(text, "history", ()))
    tail = list(getattr(text, "tail", (text,)))
    sep = getattr(text, "sep", SEP)
    tail_text = sep.join(tail)
    if count(tail_text) > limit:
        words = tail_text.split(" ")
        cut = _words_fitting(words, lambda p: p, count, limit, keep_end=False)
        return (cut or ""), TAIL_CUT
    # smallest i such that history[i:] + tail fits (lengths shrink as i grows: binary search)
    lo, hi = 1, len(history)
    while lo < hi:
        mid = (lo + hi) // 2
        if count(sep.join(history[mid:] + tail)) <= limit:
            hi = mid
        else:
            lo = mid + 1
    kept = history[lo:]
    partial = _words_fitting(history[lo - 1].split(" "), lambda p: sep.join([p, *kept, *tail]), count, limit,
                             keep_end=True)  # fmt: skip
    return sep.join(([partial] if partial else []) + kept + tail), TRIMMED


def fit_queries(texts: Sequence[Any], count: Callable[[str], int], limit: int) -> tuple[list[str], dict[str, int]]:
    """Every text fitted by :func:`fit_query` (token counts memoised per text), and how many got each status."""
    stats = {FITS: 0, TRIMMED: 0, TAIL_CUT: 0}
    out = []
    for text in texts:
        memo: dict[str, int] = {}

        def counted(s: str, memo: dict[str, int] = memo) -> int:
            if s not in memo:
                memo[s] = count(s)
            return memo[s]

        fitted, status = fit_query(text, counted, limit)
        stats[status] += 1
        out.append(str(fitted))
    return out, stats
