"""Time of the clustering stage: faiss kNN graph vs greedy traversal (walk + merge) vs random clusters.

Data: ``--n`` seeded random float32 vectors of dimension ``--dim``, drawn around ``n // 50`` random centres
(Gaussian centres of norm about 1, Gaussian noise of norm about ``--noise``, default 0.5) and normalised to
unit length, so that the kNN graph has local structure (about 50 points per centre) instead of being
uniform noise. No embedding model is involved.

Measured, one process, wall clock: ``knn_graph`` (index build + search of every vector, k = ``--k``), the
walk (``greedy_traversal(merge=False)``), the merge (``merge_short_clusters``), both in one
``greedy_traversal`` call, and ``random_clusters``. Printed: N, d, k, index and its options, the seconds of
each phase, the ratio traversal (walk + merge, one call) / kNN (target < 0.5), the cluster statistics, peak
RSS (``ru_maxrss``) and current RSS (psutil) after each phase, and for an approximate index recall@10 and
recall@k against exact search on ``--recall-sample`` random queries. With about 50 points per centre, ranks
beyond ~50 are nearly equidistant points of other centres, so recall@100 is low for any approximate index
while recall@10 is near 1; the timings are what this script is for.

``--index ivf`` (default) uses nlist 4096, nprobe 8 and a training sample of ``--train-per-list`` (64) *
nlist vectors, 10 k-means iterations. The 1M-vector run took 21 minutes on a 2-core box while another job
held one core (training about 3.5 minutes, the rest nearly all IVF search); training on the full 256 * nlist
sample costs about 4 times as much training time. Exact ``--index flat`` costs O(N^2 d): about a minute for
100k vectors, but 1M vectors would take hours on 2 cores. Not a test; run it by hand:

    python benchmarks/bench_clustering.py [--n 1000000] [--dim 384] [--k 100] [--index ivf]
        [--nlist 4096] [--nprobe 8] [--train-per-list 64] [--cluster-size 8] [--seed 0] [--progress]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import time

import numpy as np

from convrag.synthesis.mtr.knn import knn_graph
from convrag.synthesis.mtr.traversal import Clustering, greedy_traversal, merge_short_clusters, random_clusters


def vectors(n: int, dim: int, noise: float, seed: int) -> np.ndarray:
    """Unit-length float32 vectors around ``max(1, n // 50)`` centres, generated in chunks to bound memory."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(1, n // 50), dim), dtype=np.float32) / np.sqrt(dim)
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, 65536):
        end = min(start + 65536, n)
        block = centres[rng.integers(0, len(centres), end - start)]
        block += rng.standard_normal((end - start, dim), dtype=np.float32) * np.float32(noise / np.sqrt(dim))
        out[start:end] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def memory() -> str:
    """Peak RSS of this process (and current RSS when psutil is installed), in GiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    try:
        import psutil

        return f"peak RSS {peak:.2f} GiB, current {psutil.Process().memory_info().rss / 2**30:.2f} GiB"
    except ImportError:
        return f"peak RSS {peak:.2f} GiB"


def describe(result: Clustering, cluster_size: int) -> str:
    sizes = np.array([len(c) for c in result.clusters]) if result.clusters else np.zeros(1, dtype=int)
    stats = ", ".join(f"{key}={value:,}" for key, value in result.stats.items() if value)
    return (f"{stats}; sizes min {sizes.min()}, mean {sizes.mean():.2f}, max {sizes.max()}, "
            f"oversized {(sizes > cluster_size).sum():,}")  # fmt: skip


def recall(x: np.ndarray, graph: np.ndarray, sample: int, seed: int) -> dict[int, float]:
    """Mean |approximate top-r & exact top-r| / r for r = 10 and k, over ``sample`` random queries."""
    import faiss

    rows = np.random.default_rng(seed + 1).choice(len(x), size=min(sample, len(x)), replace=False)
    _, exact = faiss.knn(x[rows], x, graph.shape[1])
    return {r: float(np.mean([len(set(a[:r]) & set(b[:r])) / r for a, b in
                              zip(graph[rows].tolist(), exact.tolist(), strict=True)]))
            for r in sorted({min(10, graph.shape[1]), graph.shape[1]})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--index", choices=("flat", "hnsw", "ivf"), default="ivf")
    parser.add_argument("--nlist", type=int, default=4096, help="ivf lists (0: knn_graph's default 4*sqrt(N))")
    parser.add_argument("--nprobe", type=int, default=8)
    parser.add_argument("--train-per-list", type=int, default=64,
                        help="ivf training sample = this * nlist vectors (knn_graph caps it at 256 * nlist)")
    parser.add_argument("--cluster-size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--noise", type=float, default=0.5, help="norm of the noise around each centre")
    parser.add_argument("--recall-sample", type=int, default=1000, help="queries for recall (0: skip)")
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args()

    import faiss

    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, faiss "
          f"{faiss.__version__} with {faiss.omp_get_max_threads()} OpenMP threads")  # fmt: skip
    t = time.perf_counter()
    x = vectors(args.n, args.dim, args.noise, args.seed)
    print(f"data: N={args.n:,}, d={args.dim}, {max(1, args.n // 50):,} centres, noise {args.noise}; "
          f"generated in {time.perf_counter() - t:.1f} s; {memory()}")  # fmt: skip

    options: dict[str, int] = {}
    if args.index == "ivf":
        lists = args.nlist or int(np.clip(round(4 * np.sqrt(args.n)), 1, args.n))
        options = {"nlist": lists, "nprobe": args.nprobe, "train_size": min(args.n, args.train_per_list * lists)}
    t = time.perf_counter()
    graph = knn_graph(x, k=args.k, index=args.index, seed=args.seed, progress=args.progress, **options)
    knn_s = time.perf_counter() - t
    described = ", ".join(f"{key}={value}" for key, value in options.items())
    print(f"kNN: index={args.index}{f' ({described})' if described else ''}, k={graph.shape[1]}: "
          f"{knn_s:.1f} s; self at rank 0 for {np.mean(graph[:, 0] == np.arange(len(x))):.4f} of rows; "
          f"{memory()}")  # fmt: skip
    if args.index != "flat" and args.recall_sample:
        t = time.perf_counter()
        values = ", ".join(f"recall@{r} {v:.4f}" for r, v in recall(x, graph, args.recall_sample, args.seed).items())
        print(f"vs exact search on {min(args.recall_sample, len(x)):,} random queries: {values} "
              f"({time.perf_counter() - t:.1f} s, not counted)")  # fmt: skip
    del x

    greedy_traversal(np.zeros((64, 1), dtype=np.int32), args.cluster_size)  # warm-up outside the timings
    t = time.perf_counter()
    walk = greedy_traversal(graph, args.cluster_size, args.seed, merge=False, progress=args.progress)
    walk_s = time.perf_counter() - t
    print(f"walk: {walk_s:.2f} s; {describe(walk, args.cluster_size)}; {memory()}")
    t = time.perf_counter()
    merged = merge_short_clusters(graph, walk, args.cluster_size, progress=args.progress)
    merge_s = time.perf_counter() - t
    print(f"merge: {merge_s:.2f} s; {describe(merged, args.cluster_size)}; {memory()}")
    t = time.perf_counter()
    result = greedy_traversal(graph, args.cluster_size, args.seed, progress=args.progress)
    traversal_s = time.perf_counter() - t
    print(f"greedy_traversal (walk + merge in one call): {traversal_s:.2f} s; same clusters as walk + merge: "
          f"{result == merged}; {memory()}")  # fmt: skip
    t = time.perf_counter()
    baseline = random_clusters(len(graph), args.cluster_size, args.seed)
    print(f"random clusters: {time.perf_counter() - t:.2f} s; {describe(baseline, args.cluster_size)}")
    verdict = "OK" if traversal_s / knn_s < 0.5 else "ABOVE TARGET"
    print(f"summary: N={len(graph):,} d={args.dim} k={graph.shape[1]} index={args.index} kNN {knn_s:.1f} s, "
          f"traversal {traversal_s:.2f} s, ratio traversal/kNN {traversal_s / knn_s:.4f} "
          f"(target < 0.5: {verdict})")  # fmt: skip


if __name__ == "__main__":
    main()
