"""MTR-Pipeline stage 2: embed the curated corpus, build its kNN graph, cut it into clusters (paper 4.2, A.5.3).

Input: the ``curate`` stage's corpus when the run has one, else the corpus source itself (an already curated
corpus). Files under ``OUT/cluster/``, each computed once and kept (a rerun after a kill reuses them):

* ``embeddings/NNNNN.npy``: float32 sentence-transformers embeddings (L2-normalised), ``block`` documents each;
* ``knn.npy``: int32 (N, k) neighbour ids in rank order (``synthesis.mtr.knn``: faiss flat / HNSW / IVF);
* ``clusters.parquet``: one row per cluster, ``cluster_idx`` and ``doc_ids`` (ordered ``_id`` values);
* ``dropped.parquet``: documents left out of every cluster, with the reason.

``params.json`` names the embedding model as ``embedding_model``: the ``model`` option as given, or
:data:`DEFAULT_EMBEDDING_MODEL` for the shipped one (older folders' key ``model`` still matches:
:meth:`Cluster.legacy_params`). ``method="greedy"`` is the greedy traversal (``synthesis.mtr.traversal``);
``"random"`` the shuffle-and-cut baseline of the authors' ablation.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from convrag.core.corpus import corpus_files, count_documents, iter_file
from convrag.core.errors import ConvragError
from convrag.core.progress import label
from convrag.synthesis.curation.text import ngram_jaccard
from convrag.synthesis.engine.fingerprint import ReadsCorpus
from convrag.synthesis.engine.pipeline import (
    REPORT_FILE,
    Estimate,
    Stage,
    StageContext,
    StageReport,
    write_table_atomic,
)
from convrag.synthesis.engine.shards import count_rows, iter_shard, shard_files
from convrag.synthesis.mtr.knn import check_index, knn_graph
from convrag.synthesis.mtr.traversal import greedy_traversal, random_clusters

METHODS = ("greedy", "random")
#: how params.json names the sentence-transformers model shipped with convrag (the default)
DEFAULT_EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def save_npy_atomic(path: Path, array: np.ndarray) -> None:
    """``np.save`` through a temporary file and a rename."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        np.save(handle, array)
    os.replace(tmp, path)


class Cluster(ReadsCorpus, Stage):
    """Embedding + kNN + clustering of the curated corpus (see the module docstring)."""

    name = "cluster"
    unit = "documents"

    def __init__(self, source: str | None = None, *, corpus_config: str | None = None, model: str | None = None,
                 batch_size: int = 64, max_seq_length: int | None = None, block: int = 4096, k: int = 100,
                 index: str = "flat",
                 index_options: dict[str, Any] | None = None, cluster_size: int = 8, method: str = "greedy",
                 near_duplicate_jaccard: float | None = None, merge: bool = True) -> None:
        if method not in METHODS:
            raise ConvragError(f"cluster method must be one of {', '.join(METHODS)}, got {method!r}")
        if cluster_size < 1 or k < 1 or block < 1 or batch_size < 1:
            raise ConvragError("cluster_size, k, block and batch_size must be at least 1")
        if max_seq_length is not None and max_seq_length < 1:
            raise ConvragError(f"max_seq_length must be a whole number >= 1, got {max_seq_length}")
        check_index(index, index_options or {})
        if near_duplicate_jaccard is not None and not 0 < near_duplicate_jaccard <= 1:
            raise ConvragError(f"near_duplicate_jaccard must be in (0, 1], got {near_duplicate_jaccard}")
        self.source, self.corpus_config = source, corpus_config
        self.model, self.batch_size, self.block = model, batch_size, block
        self.max_seq_length = max_seq_length
        self.k, self.index, self.index_options = k, index, dict(index_options or {})
        self.cluster_size, self.method, self.merge = cluster_size, method, merge
        self.near_duplicate_jaccard = near_duplicate_jaccard
        #: set by the pipeline when a curate stage runs before this one: cluster its output, never the source
        self.after_curate = False

    def params(self) -> dict[str, Any]:
        return {"source": self.source, "corpus_config": self.corpus_config,
                "embedding_model": self.model or DEFAULT_EMBEDDING_MODEL,
                "max_seq_length": self.max_seq_length, "k": self.k,
                "index": self.index, "index_options": self.index_options, "cluster_size": self.cluster_size,
                "method": self.method, "near_duplicate_jaccard": self.near_duplicate_jaccard, "merge": self.merge,
                "block": self.block}

    def legacy_params(self) -> dict[str, Any]:
        """params() as versions before ``embedding_model`` wrote them: key ``model``, the shipped model as ``model``."""
        from convrag.retrievers.encoders import default_model_path

        params = self.params()
        del params["embedding_model"]
        return {**params, "model": self.model or Path(default_model_path()).name}

    # -- input ---------------------------------------------------------------------------------------------
    def _curated(self, ctx: StageContext) -> Path | None:
        if self.after_curate:
            return ctx.stage_folder("curate") / "corpus"
        folder = ctx.out / "curate"
        return folder / "corpus" if (folder / REPORT_FILE).is_file() else None

    def _documents(self, ctx: StageContext) -> Iterator[tuple[str, str]]:
        curated = self._curated(ctx)
        if curated is not None:
            for path in shard_files(curated):
                for row in iter_shard(path, ["_id", "text"]):
                    yield row["_id"], row["text"]
            return
        if self.source is None:
            raise ConvragError("cluster: no curated corpus in --out and no --corpus to cluster")
        for path in corpus_files(self.source, self.corpus_config).files:
            for _, doc_id, _, text in iter_file(path):
                yield doc_id, text

    def estimate(self, ctx: StageContext) -> Estimate:
        if (ctx.out / "curate" / REPORT_FILE).is_file():
            return Estimate(records=count_rows(ctx.out / "curate" / "corpus"), note="no LLM calls")
        if self.source is not None and not self.after_curate:
            return Estimate(records=count_documents(corpus_files(self.source, self.corpus_config)),
                            note="no LLM calls")
        return Estimate(records=None, note="no LLM calls; documents known after curation")

    # -- steps ---------------------------------------------------------------------------------------------
    def _blocks(self, ctx: StageContext, ids: list[str]) -> Iterator[list[str]]:
        """The corpus texts in blocks of ``block``, streamed; every id is appended to ``ids`` on the way."""
        texts: list[str] = []
        for doc_id, text in self._documents(ctx):
            ids.append(doc_id)
            texts.append(text)
            if len(texts) == self.block:
                yield texts
                texts = []
        if texts:
            yield texts

    def _embed(self, ctx: StageContext, ids: list[str]) -> np.ndarray:
        """Embeddings of every document, block by block; a block already on disk is read, not recomputed."""
        from convrag.retrievers.encoders import default_model_path, load_model

        folder = ctx.folder / "embeddings"
        folder.mkdir(exist_ok=True)
        model = None
        parts = []
        bar = tqdm(desc=label("embedding documents"), unit="doc", disable=not ctx.progress)
        for n, texts in enumerate(self._blocks(ctx, ids)):
            path = folder / f"{n:05d}.npy"
            if not path.is_file():
                if model is None:
                    model = load_model(self.model or default_model_path())
                    if self.max_seq_length is not None:
                        model.max_seq_length = self.max_seq_length
                vectors = model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                       convert_to_numpy=True, show_progress_bar=False)
                save_npy_atomic(path, np.asarray(vectors, dtype=np.float32))
            parts.append(np.load(path))
            bar.update(len(texts))
        bar.close()
        return np.concatenate(parts) if parts else np.zeros((0, 1), dtype=np.float32)

    def _near_duplicate(self, ctx: StageContext) -> Callable[[int, int], bool] | None:
        """The adjacent near-duplicate test (texts held in memory only when the option is on)."""
        if self.near_duplicate_jaccard is None:
            return None
        threshold = self.near_duplicate_jaccard
        texts = [text for _, text in self._documents(ctx)]

        @lru_cache(maxsize=65536)
        def similar(a: int, b: int) -> bool:
            return ngram_jaccard(texts[a], texts[b]) >= threshold

        return similar

    def run(self, ctx: StageContext) -> StageReport:
        ids: list[str] = []
        knn_path = ctx.folder / "knn.npy"
        if self.method == "random" or knn_path.is_file():
            ids = [doc_id for doc_id, _ in self._documents(ctx)]
        else:
            vectors = self._embed(ctx, ids)
            if ids:
                save_npy_atomic(knn_path, knn_graph(vectors, self.k, self.index, seed=ctx.seed,
                                                    progress=ctx.progress, **self.index_options))
        if not ids:
            raise ConvragError("cluster: the corpus to cluster is empty (every document was dropped by curation?)")
        if self.method == "random":
            result = random_clusters(len(ids), self.cluster_size, ctx.seed)
        else:
            result = greedy_traversal(np.load(knn_path), self.cluster_size, ctx.seed,
                                      near_duplicate=self._near_duplicate(ctx), merge=self.merge,
                                      progress=ctx.progress)
        rows = [{"cluster_idx": i, "doc_ids": [ids[j] for j in members]} for i, members in enumerate(result.clusters)]
        schema = pa.schema([("cluster_idx", pa.int64()), ("doc_ids", pa.list_(pa.string()))])
        write_table_atomic(ctx.folder / "clusters.parquet", pa.Table.from_pylist(rows, schema=schema))
        reason = "no_neighbour_cluster" if self.method == "greedy" else "partial_last_block"
        dropped = [{"_id": ids[j], "reason": reason} for j in result.dropped]
        write_table_atomic(ctx.folder / "dropped.parquet",
                     pa.Table.from_pylist(dropped, schema=pa.schema([("_id", pa.string()), ("reason", pa.string())])))
        sizes = [len(c) for c in result.clusters]
        figures = {**{k: int(v) for k, v in result.stats.items()}, "clusters": len(sizes),
                   "min_size": min(sizes, default=0), "max_size": max(sizes, default=0),
                   "mean_size": round(float(np.mean(sizes)), 3) if sizes else 0.0}
        return StageReport(self.name, records_in=len(ids), records_out=sum(sizes),
                           dropped={reason: len(result.dropped)} if result.dropped else {}, figures=figures)


def read_clusters(out: str | os.PathLike) -> list[tuple[int, list[str]]]:
    """(cluster_idx, ordered document ids) of a finished cluster stage under ``out``; one error naming the stages to
    run when there is none (a later stage run alone on a fresh folder)."""
    path = Path(out) / "cluster" / "clusters.parquet"
    if not path.is_file() or not (path.parent / "report.json").is_file():
        raise ConvragError(f"{Path(out)}: stage 'cluster' has not finished in this run folder (no {path.name}): run "
                           "the earlier stages first (leave out --stages, or --stages curate,cluster,...)")
    table = pq.read_table(path)
    return list(zip(table.column("cluster_idx").to_pylist(), table.column("doc_ids").to_pylist(), strict=True))
