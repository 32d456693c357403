"""MinHash-LSH near-duplicate removal with datasketch, in two datatrove steps.

Shingles are the character 5-grams of the lowercased, whitespace-collapsed chunk (``synthesis.curation.text.shingles``),
hashed into a MinHash of 128 permutations (datasketch, seed 1). Chunks are walked in corpus order (file, line, then
chunk order), greedy keep-first: a chunk is dropped when it matches a chunk kept before it, else kept and indexed.

* ``verified`` mode (our default): an LSH tuned for recall (bands of 3 rows, 42 bands for 128 permutations;
  :func:`recall_bands`) proposes candidates; those whose MinHash estimate is within 0.15 of the threshold get an
  exact check, and a candidate matches only if the exact Jaccard of the two shingle sets is >= the threshold (0.5),
  which then means what it says, up to the small LSH miss rate.
* ``authors`` mode (the MTR-Suite code): datasketch's LSH for threshold 0.5 (25 bands x 5 rows) and no check, so
  every candidate matches: it misses many pairs at the threshold and drops pairs below it, more as the corpus grows.

Not datatrove's MinHash stages, which hash word n-grams of punctuation-free text and keep one document per connected
component of duplicate pairs, where the authors use character 5-grams and a keep-first walk (A~B, B~C, A!~C keeps A
and C). Every task computes signatures (``MinhashSignature``); the sequential walk is one task (``GreedyMinhashDedup``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from datasketch import LeanMinHash, MinHash, MinHashLSH
from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from tqdm.auto import tqdm

from convrag.core.errors import ConvragError, DataError
from convrag.core.progress import label
from convrag.synthesis.curation.text import jaccard, shingles
from convrag.synthesis.engine.pipeline import write_table_atomic
from convrag.synthesis.engine.shards import iter_shard, shard_name

DROPS_FILE = "near_duplicates.parquet"
MODES = ("verified", "authors")
#: Candidates whose MinHash estimate is this far below the threshold skip the exact check (see confirmed).
PREFILTER_MARGIN = 0.15
#: datasketch 2's default MinHash scheme: 32-bit affine permutations, stored as uint32.
SCHEME = "affine32"


def recall_bands(num_perm: int, threshold: float) -> tuple[int, int]:
    """(bands, rows) of the verified mode: 3 rows per band (2 below a 0.5 threshold), as many bands as fit."""
    rows = 3 if threshold >= 0.5 else 2
    return num_perm // rows, rows


def confirmed(hits: Iterable[str], values: np.ndarray, text: str, sigs: Mapping[str, np.ndarray],
              texts: Mapping[str, str], threshold: float = 0.5, ngram: int = 5) -> list[str]:
    """The LSH candidates ``hits`` whose exact shingle Jaccard with ``text`` is >= ``threshold`` (verified mode).

    Candidates are first screened by their MinHash Jaccard estimate (the share of equal signature values against
    ``values``, their signatures in ``sigs``): an estimate below ``threshold - PREFILTER_MARGIN`` cannot come from a
    pair at the threshold except with probability ~1e-4 (the estimate's standard deviation is 0.044 at J = 0.5
    with 128 permutations), so the exact check (on ``texts``) runs only on likely near-duplicates."""
    cands = sorted(hits)
    if not cands:
        return []
    estimates = (np.stack([sigs[h] for h in cands]) == values).mean(axis=1)
    likely = [h for h, e in zip(cands, estimates, strict=True) if e >= threshold - PREFILTER_MARGIN]
    if not likely:
        return []
    own = shingles(text, ngram)
    return [h for h in likely if jaccard(own, shingles(texts[h], ngram)) >= threshold]


def signature(text: str, num_perm: int = 128, seed: int = 1, ngram: int = 5) -> MinHash:
    """MinHash of the character ``ngram`` shingles of ``text``."""
    m = MinHash(num_perm=num_perm, seed=seed, scheme=SCHEME)
    m.update_batch([s.encode("utf-8") for s in shingles(text, ngram)])
    return m


class MinhashSignature(PipelineStep):
    """datatrove step: store each chunk's MinHash values as bytes in ``metadata["minhash"]``."""

    name = "MinHash signature (character 5-grams)"
    type = "🫂 - DEDUP"

    def __init__(self, num_perm: int = 128, seed: int = 1, ngram: int = 5) -> None:
        super().__init__()
        self.num_perm, self.seed, self.ngram = num_perm, seed, ngram

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        for doc in data:
            with self.track_time():
                m = signature(doc.text, self.num_perm, self.seed, self.ngram)
                doc.metadata["minhash"] = np.asarray(m.hashvalues, dtype=np.uint32).tobytes()
            yield doc


class GreedyMinhashDedup(PipelineStep):
    """datatrove step for a single task: the keep-first walk over every chunk shard, in file order.

    Writes ``out_folder/near_duplicates.parquet`` (``_id``, ``duplicate_of``: the kept chunk it collided with,
    the smallest id among several). A chunk id seen twice is an error naming both places. Memory: the LSH bands of
    the kept chunks and the id set (``verified`` mode: also their signatures and texts).
    """

    name = "MinHash-LSH greedy keep-first"
    type = "🫂 - DEDUP"

    def __init__(self, chunks_folder: str | os.PathLike, n_files: int, out_folder: str | os.PathLike, *,
                 threshold: float = 0.5, num_perm: int = 128, seed: int = 1, ngram: int = 5,
                 mode: str = "verified", total: int | None = None, progress: bool = False) -> None:
        super().__init__()
        self.chunks_folder, self.out_folder = str(chunks_folder), str(out_folder)
        self.n_files, self.threshold, self.num_perm, self.seed = n_files, threshold, num_perm, seed
        if mode not in MODES:
            raise ConvragError(f"minhash_mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.ngram, self.verify, self.total, self.progress = ngram, mode == "verified", total, progress

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        lsh = MinHashLSH(threshold=self.threshold, num_perm=self.num_perm, params=recall_bands(self.num_perm,
                                                                                                self.threshold)
                         if self.verify else None)
        seen: dict[str, tuple[str, int]] = {}
        texts: dict[str, str] = {}
        sigs: dict[str, np.ndarray] = {}
        drops: list[dict[str, str]] = []
        columns = ["_id", "minhash", "source_file", "source_line"] + (["text"] if self.verify else [])
        bar = tqdm(total=self.total, desc=label("MinHash-LSH near-duplicate walk"), unit="chunk",
                   disable=not self.progress)
        for index in range(self.n_files):
            for row in iter_shard(Path(self.chunks_folder) / shard_name(index), columns):
                chunk_id = row["_id"]
                if chunk_id in seen:
                    first = seen[chunk_id]
                    raise DataError(f"duplicate document id {chunk_id.rsplit('#', 1)[0]!r} (also at "
                                    f"{first[0]}:{first[1]})", row["source_file"], row["source_line"])
                seen[chunk_id] = (row["source_file"], row["source_line"])
                m = LeanMinHash(seed=self.seed, hashvalues=np.frombuffer(row["minhash"], dtype=np.uint32),
                                scheme=SCHEME)
                hits = lsh.query(m)
                if hits and self.verify:
                    hits = confirmed(hits, m.hashvalues, row["text"], sigs, texts, self.threshold, self.ngram)
                if hits:
                    drops.append({"_id": chunk_id, "duplicate_of": min(hits)})
                    self.stat_update("dropped:near_duplicate")
                else:
                    lsh.insert(chunk_id, m)
                    if self.verify:
                        texts[chunk_id] = row["text"]
                        sigs[chunk_id] = m.hashvalues
                bar.update()
        bar.close()
        out = Path(self.out_folder)
        out.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pylist(drops, schema=pa.schema([("_id", pa.string()), ("duplicate_of", pa.string())]))
        write_table_atomic(out / DROPS_FILE, table)
        return
        yield

class DropListed(PipelineStep):
    """datatrove filter: drop the chunks listed in ``near_duplicates.parquet`` (counted as near_duplicate)."""

    name = "drop near-duplicates"
    type = "🔻 - FILTER"

    def __init__(self, drops_folder: str | os.PathLike) -> None:
        super().__init__()
        self.drops_folder = str(drops_folder)

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        path = Path(self.drops_folder) / DROPS_FILE
        dropped = set(pq.read_table(path, columns=["_id"]).column("_id").to_pylist())
        for doc in data:
            if doc.id in dropped:
                continue
            yield doc
