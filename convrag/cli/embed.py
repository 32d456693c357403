"""``convrag embed``: encode every corpus of a built folder into the embeddings cache (all subsets and corpus
kinds), as a dense retriever with the same model and options would, so that later ``convrag evaluate`` runs, here
or wherever the cache is copied, read the vectors instead of encoding."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convrag.core.errors import ConvragError
from convrag.retrievers.embed import CACHE_ENV, resolve_device


@dataclass
class Embedded:
    """One corpus config / split of a folder and what ``convrag embed`` did with it."""

    config: str
    split: str
    documents: int
    status: str  # "encoded", "reused (disk)", "reused (memory)", "assembled (shards)", "encoded (shard K/N)", ...
    entry: str | None
    seconds: float
    encoded: int  # documents encoded (the rest were read from the cache or from shards)


def embed_folder(folder: str | os.PathLike[str], model: str | None = None, options: Mapping[str, Any] | None = None,
                 progress: bool = False, shard: tuple[int, int] | None = None) -> list[Embedded]:
    """Encode every split of every corpus config (all subsets and corpus kinds) of a built folder into the cache,
    as a dense retriever with ``model`` and ``options`` (device, batch_size, cache_dir, pooling, ...) would;
    ``shard=(K, N)``: only the K-th of N slices of each (``convrag.retrievers.embed_shards``)."""
    from convrag.builders.profile import config_name, profile_of
    from convrag.core.manifest import read_manifest
    from convrag.evaluation.data import Folder, subsets
    from convrag.retrievers.dense import DenseRetriever

    manifest = read_manifest(folder)
    profile = profile_of(manifest, source=str(Path(folder) / "README.md"))
    built = Folder(folder)
    configs = [config_name(pattern, s) for s in subsets(built, profile) for pattern in profile.corpus.values()]
    configs = [c for c in dict.fromkeys(configs) if built.has(c)]
    if not configs:
        raise ConvragError(f"{folder}: no corpus config was built (the benchmark's are "
                           f"{', '.join(profile.corpus.values())})")  # fmt: skip
    retriever = DenseRetriever(model=model, show_progress=progress, **dict(options or {}))
    if retriever.cache_dir is None:
        raise ConvragError("the embeddings cache is turned off: nothing would be kept")
    done = []
    for config in configs:
        for split in built.splits(config):
            start = time.perf_counter()
            rows = built.checked_rows(config, split, {"_id": str, "text": str})
            retriever.encode_shard(rows, shard) if shard else retriever.index(rows)
            done.append(Embedded(config, split, len(retriever.doc_texts), retriever.cache_status,
                                 retriever.cache_entry, time.perf_counter() - start,
                                 retriever.encoded_documents))  # fmt: skip
    return done


def cmd_embed(args: argparse.Namespace) -> int:
    """``convrag embed``: fill the embeddings cache for a built folder and say what was encoded or reused."""
    from convrag.core.options import parse_options
    from convrag.core.progress import wanted
    from convrag.hub.repo import resolve_folder
    from convrag.retrievers.dense import check_dense_options
    from convrag.retrievers.embed_shards import parse_shard

    if args.batch_size is not None and args.batch_size < 1:
        raise ConvragError(f"--batch-size must be at least 1, got {args.batch_size}")
    options = parse_options(args.dense_option, "--dense-option")
    check_dense_options(options)
    if args.cache is not None and Path(args.cache).exists() and not Path(args.cache).is_dir():
        raise ConvragError(f"--cache {args.cache}: is a file, not a folder (the embeddings cache is a folder)")
    flags = {"device": resolve_device(args.device), "batch_size": args.batch_size, "cache_dir": args.cache}
    options.update({k: v for k, v in flags.items() if v is not None})
    folder = resolve_folder(args.folder)
    start = time.perf_counter()
    shard = parse_shard(args.shard) if args.shard else None
    done = embed_folder(folder, args.model, options, progress=wanted(args.no_progress), shard=shard)
    for e in done:
        print(f"{e.status:<16} {e.config}/{e.split}: {e.documents} documents ({e.encoded} encoded) in {e.seconds:.1f}"
              f" s -> {e.entry}")  # fmt: skip
    encoded = sum(e.encoded for e in done)
    print(f"{len(done)} corpora, {sum(e.documents for e in done)} documents ({encoded} encoded, the rest reused) "
          f"in {time.perf_counter() - start:.1f} s; cache: {Path(done[0].entry).parent if done else '-'}")
    if shard:
        print(f"shard {shard[0]}/{shard[1]} stored; once every shard is there, `convrag embed` or `convrag evaluate` "
              "with the same cache assembles them without encoding")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``embed`` subcommand."""
    p = sub.add_parser("embed", help="encode every corpus of a built folder with a dense model into the embeddings "
                                     "cache, for later `convrag evaluate` runs (here or wherever the cache is copied)")
    p.add_argument("folder", help="folder written by `convrag build`, or Hub dataset repo id org/name[@revision]")
    p.add_argument("--model", help="sentence-transformers model path or name (default: the shipped all-MiniLM-L6-v2; "
                                   "give the same as `convrag evaluate --dense-model`)")
    p.add_argument("--device", help="cpu, cuda, cuda:N, mps or auto (default auto: cuda, then mps, then cpu)")
    p.add_argument("--batch-size", type=int, help="documents per encoding batch (default 64)")
    p.add_argument("--cache", metavar="DIR", help=f"embeddings cache folder (default: ${CACHE_ENV}, else "
                                                  "$CONVRAG_CACHE_DIR/embeddings, else ~/.cache/convrag/embeddings)")
    p.add_argument("--dense-option", action="append", metavar="KEY=VALUE",
                   help="encoder option as in `convrag evaluate` (pooling=..., max_seq_length=N, document_prompt=..., "
                        "backend=torch|onnx)")
    p.add_argument("--shard", metavar="K/N",
                   help="encode only the K-th of N contiguous slices of each corpus (1 <= K <= N; run the N shards on "
                        "N machines with one shared or later merged --cache; a run without --shard assembles them)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars (default: shown on a terminal)")
    p.set_defaults(func=cmd_embed)
