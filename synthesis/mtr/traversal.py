"""Greedy traversal clustering of a kNN graph (MTR-Suite's topic clusters) and the random-cluster baseline.

Input: ``neighbours``, an ``(N, k)`` integer array whose row ``i`` lists document ids near ``i`` in rank order
(nearest first, ``-1`` for an empty slot), e.g. from :func:`convrag.synthesis.mtr.knn.knn_graph`. The walk
(:func:`greedy_traversal`) steps to the nearest unvisited neighbour until a cluster holds ``cluster_size`` ids or
the walk is at a dead end, then jumps to a seeded random unvisited id; the merge (:func:`merge_short_clusters`)
dissolves the clusters shorter than ``cluster_size`` into their documents' neighbours' clusters.

Differences from the authors' code (``embedding/cluster.py`` of rangehow/mtr-suite): their start node and jump
targets come from ``set.pop()`` (arbitrary, roughly the lowest id) while the paper says random; ours are seeded
random. The near-duplicate skip is ours: their adjacent-doc dedup is commented out and its 0.85 threshold survives
only as an unused attribute, so any threshold a caller builds into ``near_duplicate`` is a choice. In the merge
they drop a doc whose first neighbour outside its cluster belongs to a deleted cluster; we go on to the next one.

Complexity: walk O(N * k) (plus one ``near_duplicate`` call per candidate tried), merge
O(docs in short clusters * (k + cluster length)); memory O(N) on top of the ``N x k`` neighbour array.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from convrag.core.errors import ConvragError
from convrag.core.progress import label

#: Keys present in every :class:`Clustering`'s ``stats``.
STAT_KEYS = ("documents", "clusters", "walk_clusters", "jumps", "dead_ends", "short_clusters_dissolved",
             "moved_by_merge", "dropped_no_target", "dropped_partial_block", "skipped_near_duplicates")


@dataclass
class Clustering:
    """Clusters of document row ids.

    ``clusters``: row ids per cluster, in walk / merge order; every id appears at most once overall.
    ``dropped``: sorted ids in no cluster. ``stats``: the counters of :data:`STAT_KEYS` (``moved_by_merge``
    counts moves: a doc moved into a short cluster that is dissolved later moves again).
    """

    clusters: list[list[int]]
    dropped: list[int] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)


def _check_size(cluster_size: int) -> None:
    if isinstance(cluster_size, bool) or not isinstance(cluster_size, (int, np.integer)) or cluster_size < 1:
        raise ConvragError(f"cluster_size must be an integer >= 1, got {cluster_size!r}")


def _check_neighbours(neighbours: np.ndarray) -> np.ndarray:
    nb = np.asarray(neighbours)
    if nb.ndim != 2 or not np.issubdtype(nb.dtype, np.integer):
        raise ConvragError(f"neighbours must be a 2-D integer array (N, k), got {nb.dtype} array of shape {nb.shape}")
    n = nb.shape[0]
    if nb.size and (int(nb.min()) < -1 or int(nb.max()) >= n):
        raise ConvragError(f"neighbours ids must lie in [-1, N={n}), found [{int(nb.min())}, {int(nb.max())}]")
    return nb


def _padded(nb: np.ndarray) -> np.ndarray:
    """A graph without neighbour columns walks and merges like one column of empty slots."""
    return nb if nb.shape[1] else np.full((nb.shape[0], 1), -1, dtype=np.int32)


def _walk(nb: np.ndarray, cluster_size: int, seed: int, near_duplicate: Callable[[int, int], bool] | None,
          stats: dict[str, int], progress: bool) -> list[list[int]]:
    n = nb.shape[0]
    visited = np.zeros(n + 1, dtype=bool)
    visited[n] = True  # id -1 indexes this slot, so empty slots always read as visited
    order = np.random.default_rng(seed).permutation(n).tolist()
    pointer, remaining = 0, n
    clusters: list[list[int]] = []
    with tqdm(total=n, desc=label("greedy traversal"), unit="doc", disable=not progress) as bar:
        while remaining:
            while visited[order[pointer]]:
                pointer += 1
            cur = order[pointer]
            visited[cur] = True
            remaining -= 1
            cluster = [cur]
            while remaining and len(cluster) < cluster_size:
                row = nb[cur]
                free = ~visited[row]
                nxt = -1
                if near_duplicate is None:
                    first = int(free.argmax())
                    if free[first]:
                        nxt = int(row[first])
                else:
                    for cand in row[free].tolist():
                        if not near_duplicate(cur, cand):
                            nxt = cand
                            break
                        stats["skipped_near_duplicates"] += 1
                if nxt < 0:
                    stats["dead_ends"] += 1
                    break
                cur = nxt
                visited[cur] = True
                remaining -= 1
                cluster.append(cur)
            clusters.append(cluster)
            bar.update(len(cluster))
    stats["jumps"] = max(0, len(clusters) - 1)
    return clusters


def _merge(nb: np.ndarray, clusters: list[list[int]], cluster_size: int, stats: dict[str, int],
           progress: bool) -> tuple[list[list[int]], list[int]]:
    n = nb.shape[0]
    owner = np.full(n + 1, -1, dtype=np.int64)  # doc -> live cluster index; -1 for dropped and for id -1
    for index, members in enumerate(clusters):
        owner[members] = index
    live: list[list[int] | None] = list(clusters)
    dropped: list[int] = []
    for index in tqdm(range(len(live)), desc=label("merging short clusters"), disable=not progress):
        members = live[index]  # never None here: only already-visited indexes are cleared
        if len(members) >= cluster_size:
            continue
        stats["short_clusters_dissolved"] += 1
        for doc in members:
            row = nb[doc]
            holder = owner[row]
            ok = (holder >= 0) & (holder != index)
            first = int(ok.argmax())
            if not ok[first]:
                owner[doc] = -1
                dropped.append(doc)
                continue
            target = int(holder[first])
            target_members = live[target]
            target_members.insert(target_members.index(int(row[first])), doc)
            owner[doc] = target
            stats["moved_by_merge"] += 1
        live[index] = None
    stats["dropped_no_target"] += len(dropped)
    return [members for members in live if members is not None], sorted(dropped)


def greedy_traversal(neighbours: np.ndarray, cluster_size: int = 8, seed: int = 0, *,
                     near_duplicate: Callable[[int, int], bool] | None = None, merge: bool = True,
                     progress: bool = False) -> Clustering:
    """Cluster documents by greedy walks over the kNN graph ``neighbours``, then merge short clusters.

    Walk. ``order`` is a ``seed``-ed permutation of the ids; the *next jump target* is the first id of ``order``,
    from a pointer that only moves forward, that is still unvisited. Start at the next jump target, in a new
    cluster. Then, while unvisited ids remain: if the current cluster holds ``cluster_size`` ids, close it and
    jump (open a new cluster at the next jump target); otherwise move to the first id of ``neighbours[cur]``, in
    rank order, that is not ``-1``, not visited and (when a ``near_duplicate(cur, candidate)`` callback is given)
    not rejected by it; rejected candidates stay unvisited. If there is none the walk is at a dead end: close
    the cluster and jump. Close the last cluster at the end. Each step is one vectorised scan of a neighbour row.

    ``near_duplicate(cur, candidate)`` returning True skips that candidate for this step (counted in
    ``skipped_near_duplicates``). With ``merge=False`` the walk's clusters (at most ``cluster_size`` docs each) are
    returned as they are; ``merge=True`` equals :func:`merge_short_clusters` (the merge rules) applied to that
    result. Deterministic for a given ``seed``. Raises ``ConvragError`` unless ``neighbours`` is a 2-D integer
    array with ids in ``[-1, N)`` and ``cluster_size >= 1``.
    """
    _check_size(cluster_size)
    nb = _padded(_check_neighbours(neighbours))
    stats = dict.fromkeys(STAT_KEYS, 0)
    stats["documents"] = nb.shape[0]
    clusters = _walk(nb, int(cluster_size), seed, near_duplicate, stats, progress)
    stats["walk_clusters"] = len(clusters)
    dropped: list[int] = []
    if merge:
        clusters, dropped = _merge(nb, clusters, int(cluster_size), stats, progress)
    stats["clusters"] = len(clusters)
    return Clustering(clusters=clusters, dropped=dropped, stats=stats)


def merge_short_clusters(neighbours: np.ndarray, walk: Clustering, cluster_size: int = 8, *,
                         progress: bool = False) -> Clustering:
    """The merge pass alone, applied to ``walk``'s clusters in their order.

    Merge. Go through the clusters in creation order. A cluster whose current membership (earlier dissolutions may
    have added docs to it) is shorter than ``cluster_size`` is dissolved: each of its docs, in order, moves to the
    cluster currently holding the doc's highest-ranked neighbour that is not ``-1``, not in the cluster being
    dissolved and still assigned to a live cluster, and is inserted just before that neighbour; a doc with no such
    neighbour is dropped. The surviving clusters keep their creation order and are numbered 0..M-1. Afterwards
    every cluster holds at least ``cluster_size`` docs (some more); every doc is in at most one cluster. A corpus
    whose clusters are all short ends with dropped docs; they are reported.

    ``walk`` is typically ``greedy_traversal(..., merge=False)``; it is not modified. Its dropped ids stay
    dropped and its stats are carried over, with the merge counters added. Raises ``ConvragError`` on a bad
    ``neighbours`` array or ``cluster_size``, or when ``walk`` holds an id twice or outside ``[0, N)``.
    """
    _check_size(cluster_size)
    nb = _padded(_check_neighbours(neighbours))
    n = nb.shape[0]
    ids = np.fromiter((doc for members in walk.clusters for doc in members), dtype=np.int64)
    ids = np.concatenate([ids, np.asarray(walk.dropped, dtype=np.int64)])
    if ids.size and (ids.min() < 0 or ids.max() >= n or np.bincount(ids, minlength=n).max() > 1):
        raise ConvragError(f"merge_short_clusters: clusters must hold distinct ids in [0, N={n})")
    stats = dict.fromkeys(STAT_KEYS, 0) | walk.stats
    clusters, dropped = _merge(nb, [list(members) for members in walk.clusters], int(cluster_size), stats,
                               progress)
    stats["clusters"] = len(clusters)
    return Clustering(clusters=clusters, dropped=sorted(walk.dropped + dropped), stats=stats)


def random_clusters(n: int, cluster_size: int = 8, seed: int = 0) -> Clustering:
    """Baseline: a ``seed``-ed permutation of ``range(n)`` cut into consecutive blocks of ``cluster_size``.

    Every cluster has exactly ``cluster_size`` docs: the final partial block (``n % cluster_size`` ids) is
    dropped and listed in ``dropped`` (counted in ``dropped_partial_block``), mirroring the fixed-size clusters
    the generator expects. Raises ``ConvragError`` on ``n < 0`` or ``cluster_size < 1``.
    """
    _check_size(cluster_size)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ConvragError(f"random_clusters: n must be an integer >= 0, got {n!r}")
    order = np.random.default_rng(seed).permutation(int(n))
    full = len(order) - len(order) % cluster_size
    clusters = order[:full].reshape(-1, cluster_size).tolist()
    dropped = sorted(order[full:].tolist())
    stats = dict.fromkeys(STAT_KEYS, 0)
    stats.update(documents=int(n), clusters=len(clusters), walk_clusters=len(clusters),
                 dropped_partial_block=len(dropped))
    return Clustering(clusters=clusters, dropped=dropped, stats=stats)
