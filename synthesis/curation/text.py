"""Text normalisation and character n-gram shingles shared by the synthesis stages.

Shingles follow the MTR-Suite curation code: lowercase the text, collapse every run of whitespace to one
space, then take every character n-gram (n = 5 by default). A text shorter than n has no shingles.
"""

from __future__ import annotations

import re

_SPACES = re.compile(r"\s+")


def normalize(text: str) -> str:
    """Lowercased ``text`` with every whitespace run collapsed to a single space (ends stripped)."""
    return _SPACES.sub(" ", text.lower()).strip()


def shingles(text: str, n: int = 5) -> set[str]:
    """The set of character ``n``-grams of ``normalize(text)``; empty when the text is shorter than ``n``."""
    norm = normalize(text)
    return {norm[i:i + n] for i in range(len(norm) - n + 1)}


def jaccard(a: set[str], b: set[str]) -> float:
    """|a & b| / |a | b|; 0.0 when both sets are empty."""
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


def ngram_jaccard(text_a: str, text_b: str, n: int = 5) -> float:
    """Exact Jaccard similarity of the character ``n``-gram shingle sets of two texts."""
    return jaccard(shingles(text_a, n), shingles(text_b, n))
