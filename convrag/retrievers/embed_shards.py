"""Sharded encoding: N machines each encode one contiguous slice of a corpus into a shared embeddings cache.

Shard ``K/N`` (1 <= K <= N) of a corpus of ``n`` documents is the rows ``[(K-1)*n//N, K*n//N)`` in corpus order.
``convrag embed FOLDER --shard K/N`` encodes only that slice and stores it as a shard entry
``<root>/<key>.shards/K-of-N/`` (same files as a full entry, see ``convrag.retrievers.embed``), where ``<key>`` is the
full entry's key (model identity, encoding settings and fingerprint of the WHOLE corpus), so a shard can only ever be
assembled into the entry it was made for. A dense retriever (``convrag evaluate``, or ``convrag embed`` without
``--shard``) that finds no full entry but shards of it copies their rows, a chunk at a time, into a memory-mapped
``embeddings.npy`` (nothing encoded, the vectors never all in memory), then deletes the shard folder. Every shard is
checked first as a full entry is (ids = that slice's ids, shape, dtype, checksum) and must say it belongs to that key
and slice; one that fails is treated as missing. Missing shards (of the N with most shards present) are encoded here
with a ``CacheWarning`` naming them: a forgotten or failed shard costs only its own slice, never a wrong entry.
"""

from __future__ import annotations

import json
import re
import shutil
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from convrag.core.errors import ConvragError
from convrag.retrievers.embed import CacheWarning, EmbeddingStore

#: Rows copied at a time when shards are assembled.
COPY_ROWS = 1 << 16
_NAME = re.compile(r"^(\d+)-of-(\d+)$")
Encoder = Callable[[int, int], np.ndarray]


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` -> ``(K, N)`` with ``1 <= K <= N``; ``ConvragError`` otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise ConvragError(f"--shard must be K/N with 1 <= K <= N (e.g. 2/8), got {text!r}")
    return int(match[1]), int(match[2])


def bounds(rows: int, k: int, n: int) -> tuple[int, int]:
    """Row range ``[start, stop)`` of shard ``k`` of ``n`` over ``rows`` documents."""
    return (k - 1) * rows // n, k * rows // n


def shard_store(store: EmbeddingStore, key: str) -> EmbeddingStore:
    """The store holding the shard entries of the full entry ``key`` (each named ``K-of-N``)."""
    return EmbeddingStore(store.root / f"{key}.shards")


def _load(shards: EmbeddingStore, key: str, ids: Sequence[str], k: int, n: int) -> np.ndarray | None:
    """Shard ``k`` of ``n`` when it passes every check (``None`` otherwise, with a warning when present)."""
    start, stop = bounds(len(ids), k, n)
    array = shards.load(f"{k}-of-{n}", ids[start:stop])
    if array is None:
        return None
    meta = json.loads((shards.path(f"{k}-of-{n}") / "meta.json").read_text())
    if meta.get("entry") == key and meta.get("slice") == [start, stop]:
        return array
    warnings.warn(f"shard {shards.path(f'{k}-of-{n}')} is not used: it was made for another entry or slice",
                  CacheWarning, stacklevel=3)  # fmt: skip
    return None


def fill_shard(store: EmbeddingStore, key: str, ids: Sequence[str], shard: tuple[int, int], encode: Encoder,
               meta: Mapping[str, Any]) -> int:  # fmt: skip
    """Make sure shard ``(k, n)`` of entry ``key`` exists: nothing to do when the full entry or a valid shard is
    there, else ``encode(start, stop)`` and store it. Returns the number of documents encoded."""
    k, n = shard
    if store.load(key, ids) is not None:
        return 0
    shards = shard_store(store, key)
    if _load(shards, key, ids, k, n) is not None:
        return 0
    start, stop = bounds(len(ids), k, n)
    if start == stop:  # more shards than documents: this one is empty
        return 0
    shards.save(f"{k}-of-{n}", ids[start:stop], encode(start, stop),
                {**meta, "entry": key, "shard": [k, n], "slice": [start, stop]})  # fmt: skip
    return stop - start


def present(store: EmbeddingStore, key: str) -> dict[int, list[int]]:
    """Shard numbers found on disk for entry ``key``, by N."""
    folder = shard_store(store, key).root
    found: dict[int, list[int]] = {}
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        match = _NAME.match(path.name)
        if match and 1 <= int(match[1]) <= int(match[2]):
            found.setdefault(int(match[2]), []).append(int(match[1]))
    return found


def assemble(store: EmbeddingStore, key: str, ids: Sequence[str], encode: Encoder,
             meta: Mapping[str, Any]) -> tuple[np.ndarray, int] | None:  # fmt: skip
    """The full entry ``key`` assembled from its shards (see the module docstring) and the number of documents
    encoded for missing shards; ``None`` when entry ``key`` has no shard on disk."""
    found = present(store, key)
    if not found:
        return None
    n = max(found, key=lambda count: (len(found[count]), -count))  # the N with most shards, else the smallest N
    shards = shard_store(store, key)
    slices = {k: b for k in range(1, n + 1) if (b := bounds(len(ids), k, n))[1] > b[0]}  # empty when N > rows
    parts = {k: _load(shards, key, ids, k, n) for k in slices}
    missing = [k for k, part in parts.items() if part is None]
    if missing:
        rows = sum(slices[k][1] - slices[k][0] for k in missing)
        warnings.warn(f"shards {', '.join(f'{k}/{n}' for k in missing)} of {shards.root} are missing or unusable: "
                      f"encoding their {rows} documents here", CacheWarning, stacklevel=3)  # fmt: skip
    encoded = 0
    dim = next((p.shape[1] for p in parts.values() if p is not None), None)

    def fill(out: np.ndarray) -> None:
        nonlocal encoded
        for k, (start, stop) in slices.items():
            part = parts[k]
            if part is None:
                part = encode(start, stop)
                encoded += stop - start
            if part.shape != (stop - start, out.shape[1]):
                raise ConvragError(f"shard {k}/{n} of {shards.root} holds {part.shape}, not {stop - start} rows "
                                   f"of {out.shape[1]}")  # fmt: skip
            for at in range(0, stop - start, COPY_ROWS):
                out[start + at : start + min(stop - start, at + COPY_ROWS)] = part[at : at + COPY_ROWS]

    if dim is None:  # every shard unusable: encode the first slice to learn the width
        first = next(iter(slices))
        parts[first], encoded = encode(*slices[first]), slices[first][1] - slices[first][0]
        dim = parts[first].shape[1]
    path = store.write(key, ids, (len(ids), dim), fill, {**meta, "assembled_from": f"{n} shards"})
    shutil.rmtree(shards.root, ignore_errors=True)
    return np.load(Path(path) / "embeddings.npy", mmap_mode="r"), encoded
