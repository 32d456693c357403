"""Encoding speed of the dense retriever's backends (``torch``, ``onnx``) and their agreement, on StratRAG.

Data: StratRAG built from the shared HotpotQA dev-distractor sample (``--folder`` for another built StratRAG
folder): every corpus document (450: 292 paragraphs and 158 pads) and every question (30). For each backend, in
interleaved rounds (``--repeats``, the minimum kept), a fresh :class:`~convrag.retrievers.DenseRetriever` with the
shipped all-MiniLM-L6-v2 and no embeddings cache encodes the corpus; printed: documents per second and wall
seconds, CPU seconds of this process (all threads) for the corpus and for the queries, the CPU seconds 10,000 such
documents would take, and the speed-up over the first backend in CPU and in wall seconds; then the load average
of the machine (other jobs make wall times noisy; CPU seconds less so). The ONNX export is made before timing (once
per model; kept in ``$CONVRAG_ONNX_CACHE``).

Agreement with torch, per question, whole-corpus search: "same top-10" (the same 10 documents), "same order" (and
in the same order), and the largest difference of a document vector from torch's. Not a test; run it by hand:

    python benchmarks/bench_dense_backends.py [--backends torch,onnx] [--repeats 2] [--folder DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from convrag.cli import main as cli
from convrag.evaluation.data import Folder
from convrag.retrievers import DenseRetriever
from convrag.retrievers.backends import onnx_export
from convrag.retrievers.encoders import default_model_path

HOTPOT = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"


def stratrag(folder: str | None) -> tuple[list[dict], dict[str, str]]:
    """``(corpus rows, {question id: text})`` of a built StratRAG folder (built from the HotpotQA sample if None)."""
    if folder is None:
        folder = str(Path(tempfile.mkdtemp()) / "stratrag")
        assert cli(["build", "stratrag", "--source", str(HOTPOT), "--out", folder]) == 0
    built = Folder(folder)
    corpus = built.checked_rows("corpus", "validation", {"_id": str, "text": str})
    queries = {r["_id"]: r["text"] for r in built.checked_rows("queries", "validation", {"_id": str, "text": str})}
    return corpus, queries


def encode(backend: str, corpus: list[dict], queries: dict[str, str]) -> dict:
    """One round: a fresh retriever (no cache) indexes ``corpus`` and searches ``queries``; times and results."""
    retriever = DenseRetriever(backend=backend, cache=False, show_progress=False)
    retriever.encode(["warm-up"], "document")  # the model is loaded (and the export made) outside the timing
    cpu, wall = time.process_time(), time.perf_counter()
    retriever.index(corpus)
    doc_cpu, doc_wall = time.process_time() - cpu, time.perf_counter() - wall
    cpu = time.process_time()
    run = retriever.search(queries, top_k=10)
    return {"doc_cpu": doc_cpu, "doc_wall": doc_wall, "query_cpu": time.process_time() - cpu,
            "vectors": np.array(retriever.embeddings), "run": run}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="torch,onnx", help="comma-separated; the first is the reference")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved rounds per backend (minimum kept)")
    parser.add_argument("--folder", help="a built StratRAG folder (default: built from the shared HotpotQA sample)")
    args = parser.parse_args()
    backends = [b.strip() for b in args.backends.split(",")]
    corpus, queries = stratrag(args.folder)
    if "onnx" in backends:
        onnx_export(default_model_path())
    load = os.getloadavg()
    rounds: dict[str, list[dict]] = {b: [] for b in backends}
    for _ in range(args.repeats):
        for backend in backends:
            rounds[backend].append(encode(backend, corpus, queries))
    print(f"{platform.processor() or platform.machine()}, {len(corpus)} documents, {len(queries)} questions, "
          f"min of {args.repeats} interleaved rounds")  # fmt: skip
    print(f"{'backend':<8} {'docs/s':>8} {'doc wall s':>11} {'doc CPU s':>10} {'CPU s/10k docs':>15} "
          f"{'query CPU s':>12} {'x torch (CPU)':>14} {'x torch (wall)':>15} {'same top-10':>12} {'same order':>11} "
          f"{'max |dv|':>9}")  # fmt: skip
    ref = rounds[backends[0]][0]
    ref_cpu = min(r["doc_cpu"] for r in rounds[backends[0]])
    ref_wall = min(r["doc_wall"] for r in rounds[backends[0]])
    for backend in backends:
        best = min(rounds[backend], key=lambda r: r["doc_cpu"])
        wall = min(r["doc_wall"] for r in rounds[backend])
        same = [set(best["run"][q]) == set(ref["run"][q]) for q in queries]
        order = [list(best["run"][q]) == list(ref["run"][q]) for q in queries]
        diff = float(np.abs(best["vectors"] - ref["vectors"]).max())
        per_10k = best["doc_cpu"] / len(corpus) * 10_000
        print(f"{backend:<8} {len(corpus) / wall:>8.1f} {wall:>11.2f} {best['doc_cpu']:>10.2f} {per_10k:>15.0f} "
              f"{best['query_cpu']:>12.2f} {ref_cpu / best['doc_cpu']:>14.2f} {ref_wall / wall:>15.2f} "
              f"{np.mean(same):>12.1%} {np.mean(order):>11.1%} {diff:>9.2g}")  # fmt: skip
    after = os.getloadavg()
    print(f"load average (1, 5, 15 min): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} before, "
          f"{after[0]:.2f} {after[1]:.2f} {after[2]:.2f} after; {os.cpu_count()} CPUs")  # fmt: skip


if __name__ == "__main__":
    main()
