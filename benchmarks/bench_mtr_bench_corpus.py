"""Peak memory and wall time of building MTR-Bench's ``corpus`` config from an MTR-DOCUMENT-sized corpus.

Writes a synthetic corpus in the MTR-DOCUMENT schema (``id, url, title, text, naive_quality, edu_quality``;
``--n`` passages, default 1,041,047 as in the real corpus, each about ``--chars`` = 1,600 characters of
pseudo-random words cut from a seeded word stream) in row groups of 10,000 rows, so generation itself stays
memory-flat, plus a one-conversation 12-turn ``test`` split whose gold ids and cluster are corpus rows. It then
runs ``export_benchmark("mtr-bench", ..., configs=["corpus"])`` in a fresh subprocess, once at N/10 and once at
N, and prints each build's wall time and peak RSS (``ru_maxrss`` of that child, from ``os.wait4``; plus the
running ``getrusage(RUSAGE_CHILDREN)`` maximum). A second child per size runs only the builder
(``download_and_prepare``, no Parquet export), to tell the builder's memory from the exporter's: a flat RSS
across the two sizes shows the build streams. On Linux each child also prints its final resident memory split
into anonymous and file-backed (memory-mapped) pages.
Not a test; run it by hand (several minutes and ~6 GB of disk at full size):

    python benchmarks/bench_mtr_bench_corpus.py [--n 1041047] [--chars 1600] [--workdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

CORPUS = pa.schema([("id", pa.string()), ("url", pa.string()), ("title", pa.string()), ("text", pa.string()),
                    ("naive_quality", pa.int64()), ("edu_quality", pa.float64())])  # fmt: skip
DOC = pa.struct([("document_idx", pa.int64()), ("edu_quality", pa.float64()), ("id", pa.string()),
                 ("naive_quality", pa.int64()), ("text", pa.string()), ("title", pa.string()),
                 ("url", pa.string())])  # fmt: skip
TEST = pa.schema([("messages", pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))),
                  ("ctxs", pa.list_(DOC)), ("ground_truth_document_idx", pa.int64()), ("ground_truth_ctx", DOC),
                  ("cluster_idx", pa.int64()), ("turn", pa.int64()), ("switch_turn", pa.int64())])  # fmt: skip
ROW_GROUP = 10_000
RSS_UNIT = 1 if platform.system() == "Darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
BUILD = """
import os, sys, tempfile
from convrag.builders import get_builder_class
from convrag.hub.export import export_benchmark
out, mode, options = sys.argv[1], sys.argv[2], {"source": {"test": sys.argv[3], "corpus": sys.argv[4]}}
if mode == "export":
    export_benchmark("mtr-bench", out, configs=["corpus"], overwrite=True, options=options)
else:
    builder = get_builder_class("mtr-bench")(config_name="corpus", cache_dir=tempfile.mkdtemp(dir=out), **options)
    builder.download_and_prepare()
if os.path.exists("/proc/self/status"):
    mem = dict(line.split(":", 1) for line in open("/proc/self/status"))
    print("    child final memory:", ", ".join(f"{k} {int(mem[k].split()[0]) // 1024} MB"
                                               for k in ("VmHWM", "RssAnon", "RssFile")), flush=True)
"""


def word_stream(seed: int, chars: int = 8_000_000) -> str:
    """A long string of pseudo-random lowercase words (2-10 letters) separated by spaces."""
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
    out = rng.choice(letters, size=chars)
    gaps = np.cumsum(rng.integers(3, 12, size=chars // 3))
    out[gaps[gaps < chars]] = ord(" ")
    return out.tobytes().decode("ascii")


def passage(stream: str, start: int, chars: int) -> str:
    """About ``chars`` characters of ``stream`` from the first word boundary after ``start``."""
    begin = stream.index(" ", start) + 1
    return stream[begin : begin + chars].rsplit(" ", 1)[0] + "."


def write_corpus(path: Path, n: int, chars: int, seed: int = 0) -> None:
    """MTR-DOCUMENT-schema Parquet of ``n`` rows, written one 10,000-row group at a time."""
    stream = word_stream(seed)
    rng = np.random.default_rng(seed + 1)
    with pq.ParquetWriter(path, CORPUS) as writer:
        for start in range(0, n, ROW_GROUP):
            ids = range(start, min(n, start + ROW_GROUP))
            offsets = rng.integers(0, len(stream) - 2 * chars, size=len(ids))
            writer.write_table(pa.table({
                "id": [f"{i}-0" for i in ids], "url": [f"https://en.wikipedia.org/wiki/Passage_{i}" for i in ids],
                "title": [f"Passage {i}" for i in ids], "text": [passage(stream, int(o), chars) for o in offsets],
                "naive_quality": [0] * len(ids), "edu_quality": [2.5] * len(ids)}, schema=CORPUS))  # fmt: skip


def write_test(path: Path, corpus: Path, n: int) -> None:
    """One 12-turn conversation over an 8-document cluster spread over the corpus (gold ids up to n-1)."""
    cluster = sorted({0, 1, n // 7, n // 3, n // 2, 2 * n // 3, n - 2, n - 1})
    pf = pq.ParquetFile(corpus)  # read the 8 rows' row groups only, never the corpus
    cols = ["id", "url", "title", "text"]
    docs = [{"document_idx": idx, "edu_quality": 2.5, "naive_quality": 0,
             **pf.read_row_group(idx // ROW_GROUP, columns=cols).slice(idx % ROW_GROUP, 1).to_pylist()[0]}
            for idx in cluster]  # fmt: skip
    rows, messages = [], []
    for t in range(1, 13):
        gold = docs[t % len(docs)]
        messages = [*messages, {"content": f"question {t} about {gold['title']}?", "role": "user"},
                    {"content": f"An answer for turn {t}.", "role": "assistant"}]  # fmt: skip
        rows.append({"messages": messages, "ctxs": docs, "ground_truth_document_idx": gold["document_idx"],
                     "ground_truth_ctx": gold, "cluster_idx": 1, "turn": t, "switch_turn": -1})  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows, schema=TEST), path)


def run_child(mode: str, src: Path, work: Path) -> tuple[float, float]:
    """Run one build child (``export`` or ``prepare``); its wall seconds and peak RSS in MB."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TMPDIR": str(work)}
    out = src / f"out-{mode}"
    out.mkdir()
    args = [sys.executable, "-c", BUILD, str(out), mode, str(src / "test.parquet"), str(src / "corpus.parquet")]
    started = time.perf_counter()
    child = subprocess.Popen(args, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{mode} child for {src} failed (status {status})")
    shutil.rmtree(out)
    return wall, usage.ru_maxrss * RSS_UNIT / 2**20


def build(work: Path, n: int, chars: int) -> dict[str, float]:
    """Generate the sources for ``n`` passages, build the corpus config in children; times and peak RSS."""
    src = work / f"n{n}"
    src.mkdir(parents=True, exist_ok=True)
    corpus, test = src / "corpus.parquet", src / "test.parquet"
    started = time.perf_counter()
    write_corpus(corpus, n, chars)
    write_test(test, corpus, n)
    result = {"n": n, "generate_s": time.perf_counter() - started, "corpus_parquet_mb": corpus.stat().st_size / 2**20}
    result["export_s"], result["export_rss_mb"] = run_child("export", src, work)
    result["children_max_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * RSS_UNIT / 2**20
    result["prepare_s"], result["prepare_rss_mb"] = run_child("prepare", src, work)
    shutil.rmtree(src)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_041_047, help="passages in the full-size corpus")
    parser.add_argument("--chars", type=int, default=1_600, help="characters per passage")
    parser.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: a temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mtr-corpus-bench-", dir=args.workdir))
    try:
        for n in (args.n // 10, args.n):
            r = build(work, n, args.chars)
            print(f"n={r['n']:>9,}  corpus {r['corpus_parquet_mb']:5.0f} MB parquet, made in {r['generate_s']:.1f} s"
                  f"\n    export_benchmark(configs=['corpus']): wall {r['export_s']:6.1f} s  peak RSS "
                  f"{r['export_rss_mb']:6.0f} MB  (RUSAGE_CHILDREN max so far {r['children_max_rss_mb']:.0f} MB)"
                  f"\n    builder download_and_prepare only:     wall {r['prepare_s']:6.1f} s  peak RSS "
                  f"{r['prepare_rss_mb']:6.0f} MB", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
