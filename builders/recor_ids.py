"""Compact document-id tables of the RECOR builder: memory per document is bytes, not Python objects.

A corpus of half a million documents kept as ``{id: hash of text}`` dicts costs a few hundred bytes per
document in every structure that holds it; a ``DocTable`` keeps, per document, a 16-byte BLAKE2b digest of its
id and an 8-byte hash of its text in two numpy arrays sorted by digest (24 bytes a document). Two ids are
taken as equal when their digests are (a 128-bit collision is not a practical concern).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator

import numpy as np

DIGEST = np.dtype("S16")


def digest(doc_id: str) -> bytes:
    """The 16-byte BLAKE2b digest of a document id (its key in a ``DocTable``)."""
    return hashlib.blake2b(doc_id.encode("utf-8"), digest_size=16).digest()


class DocTable:
    """The ids of one corpus (digests, sorted) with a hash of each document's text; ids must be unique.

    ``rows``: (document id, hash of its text) pairs."""

    def __init__(self, rows: Iterable[tuple[str, int]] = ()) -> None:
        keys, texts = bytearray(), []
        for doc_id, text_hash in rows:
            keys += digest(doc_id)
            texts.append(text_hash)
        ids = np.frombuffer(bytes(keys), dtype=DIGEST)
        order = np.argsort(ids, kind="stable")
        self.ids = ids[order]
        self.texts = np.asarray(texts, dtype=np.int64)[order] if texts else np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.ids)

    def _position(self, doc_id: str) -> int | None:
        key = digest(doc_id)
        at = int(np.searchsorted(self.ids, key))
        return at if self.ids[at : at + 1].tobytes() == key else None  # tobytes keeps trailing NULs

    def __contains__(self, doc_id: object) -> bool:
        return isinstance(doc_id, str) and self._position(doc_id) is not None


def shared_digests(tables: dict[str, DocTable]) -> dict[bytes, tuple[list[str], bool]]:
    """Digests held by several tables -> (names of those tables in ``tables`` order, texts differ).

    Compares the tables pairwise (binary search of one sorted id array in another), so no array larger than
    one table is made."""
    names = list(tables)
    owners: dict[bytes, dict[str, int]] = {}
    for i, first in enumerate(names):
        a = tables[first]
        for second in names[i + 1 :]:
            b = tables[second]
            if not len(a) or not len(b):
                continue
            at = np.minimum(np.searchsorted(b.ids, a.ids), len(b) - 1)
            for k in np.flatnonzero(b.ids[at] == a.ids):
                held = owners.setdefault(a.ids[k : k + 1].tobytes(), {})
                held[first], held[second] = int(a.texts[k]), int(b.texts[at[k]])
    order = {name: n for n, name in enumerate(names)}
    return {key: (sorted(held, key=order.__getitem__), len(set(held.values())) > 1) for key, held in owners.items()}


def name_shared(
    shared: dict[bytes, tuple[list[str], bool]], streams: Iterable[Iterator[tuple[str, str]]]
) -> dict[str, tuple[list[str], bool]]:
    """``shared`` keyed by document id instead of digest, in first-seen order over ``streams`` ((id, text))."""
    named: dict[str, tuple[list[str], bool]] = {}
    if not shared:
        return named
    for rows in streams:
        for doc_id, _ in rows:
            if doc_id not in named:
                key = digest(doc_id)
                if key in shared:
                    named[doc_id] = shared[key]
    return named
