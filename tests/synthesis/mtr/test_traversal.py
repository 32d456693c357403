"""Greedy traversal clustering, its merge pass, the random baseline and the kNN graph builder."""

from __future__ import annotations

import numpy as np
import pytest

from convrag.core.errors import ConvragError
from convrag.synthesis.mtr.knn import knn_graph
from convrag.synthesis.mtr.traversal import STAT_KEYS, greedy_traversal, merge_short_clusters, random_clusters

# Hand-built graph, self at rank 0. np.random.default_rng(0).permutation(10) == [4 6 2 7 3 5 9 0 8 1].
HAND = np.array([
    [0, 1, 2],
    [1, 0, 3],
    [2, 0, 1],
    [3, 1, -1],
    [4, 5, 6],
    [5, 4, 9],
    [6, 4, 5],
    [7, 8, 0],
    [8, 7, 9],
    [9, 5, 8],
], dtype=np.int32)


def test_seed_permutation_is_the_one_the_hand_cases_assume():
    assert np.random.default_rng(0).permutation(10).tolist() == [4, 6, 2, 7, 3, 5, 9, 0, 8, 1]
    assert np.random.default_rng(1).permutation(3).tolist() == [0, 1, 2]
    assert np.random.default_rng(1).permutation(4).tolist() == [0, 1, 2, 3]


def test_walk_order_with_full_cluster_jumps_and_dead_ends():
    # 4 -> 5 -> 9 (full, jump to 6); 6: all neighbours visited (dead end, jump to 2); 2 -> 0 -> 1 (full,
    # jump to 7); 7 -> 8, 8: dead end, jump to 3; nothing left.
    result = greedy_traversal(HAND, cluster_size=3, seed=0, merge=False)
    assert result.clusters == [[4, 5, 9], [6], [2, 0, 1], [7, 8], [3]]
    assert result.dropped == []
    assert result.stats["jumps"] == 4
    assert result.stats["dead_ends"] == 2
    assert result.stats["walk_clusters"] == result.stats["clusters"] == 5
    assert set(result.stats) == set(STAT_KEYS)


def test_merge_inserts_before_the_neighbour_and_follows_moved_docs():
    # [6] -> before 4 in cluster 0; [7, 8]: 7 -> before 0, then 8's first neighbour outside its cluster is 7,
    # which already moved, so 8 goes before 7; [3] -> before 1.
    result = greedy_traversal(HAND, cluster_size=3, seed=0)
    assert result.clusters == [[6, 4, 5, 9], [2, 8, 7, 0, 3, 1]]
    assert result.dropped == []
    assert result.stats["short_clusters_dissolved"] == 3
    assert result.stats["moved_by_merge"] == 4
    assert result.stats["clusters"] == 2


def test_merge_short_clusters_alone_equals_the_merged_traversal():
    walk = greedy_traversal(HAND, cluster_size=3, seed=0, merge=False)
    snapshot = [list(c) for c in walk.clusters]
    merged = merge_short_clusters(HAND, walk, 3)
    assert merged == greedy_traversal(HAND, cluster_size=3, seed=0)
    assert walk.clusters == snapshot  # input left as it was
    again = merge_short_clusters(HAND, merged, 4)  # re-merging at a larger size keeps earlier counters
    assert again.clusters == [[6, 4, 5, 9], [2, 8, 7, 0, 3, 1]]
    assert again.stats["short_clusters_dissolved"] == 3
    with pytest.raises(ConvragError, match="distinct ids"):
        merge_short_clusters(HAND, type(walk)(clusters=[[0, 1], [1]]), 3)


def test_short_cluster_that_receives_docs_survives():
    graph = np.array([[0, 1, 2], [1, 0, -1], [2, -1, -1]])
    walk = greedy_traversal(graph, cluster_size=3, seed=1, merge=False)
    assert walk.clusters == [[0, 1], [2]]
    # 0 goes before 2, then 1 goes before 0: the later cluster reaches 3 docs before its turn comes
    merged = greedy_traversal(graph, cluster_size=3, seed=1)
    assert merged.clusters == [[1, 0, 2]]
    assert merged.stats["short_clusters_dissolved"] == 1
    assert merged.dropped == []


def test_tiny_corpus_with_only_short_clusters_drops_everything():
    graph = np.array([[0, 1, 2], [1, 0, -1], [2, -1, -1]])
    result = greedy_traversal(graph, cluster_size=4, seed=1)
    assert result.clusters == []
    assert result.dropped == [0, 1, 2]
    assert result.stats["dropped_no_target"] == 3


def test_doc_without_target_is_dropped_and_scan_skips_dropped_neighbours():
    graph = np.array([[0, -1, -1], [1, 2, -1], [2, 1, -1], [3, 0, 1]])
    walk = greedy_traversal(graph, cluster_size=2, seed=1, merge=False)
    assert walk.clusters == [[0], [1, 2], [3]]
    assert walk.stats["dead_ends"] == 1
    result = greedy_traversal(graph, cluster_size=2, seed=1)
    # 0 has no neighbour: dropped. 3's first neighbour (0) is dropped, so it goes before 1.
    assert result.clusters == [[3, 1, 2]]
    assert result.dropped == [0]
    assert result.stats["dropped_no_target"] == 1
    assert result.stats["moved_by_merge"] == 1


def test_near_duplicate_candidates_are_skipped():
    calls = []

    def near(cur: int, cand: int) -> bool:
        calls.append((cur, cand))
        return {cur, cand} == {4, 5}

    result = greedy_traversal(HAND, cluster_size=3, seed=0, near_duplicate=near, merge=False)
    # 4 skips 5 and goes to 6; 6 -> 5 is allowed; 8 now reaches 9 because 9 was never walked to
    assert result.clusters == [[4, 6, 5], [2, 0, 1], [7, 8, 9], [3]]
    assert result.stats["skipped_near_duplicates"] == 1
    assert calls[:2] == [(4, 5), (4, 6)]


def _random_graph(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    graph = rng.integers(-1, n, size=(n, k))
    graph[:, 0] = np.arange(n)
    return graph


def _check_partition(result, n: int) -> None:
    ids = [doc for cluster in result.clusters for doc in cluster] + result.dropped
    assert sorted(ids) == list(range(n))
    assert result.dropped == sorted(result.dropped)


@pytest.mark.parametrize("n", [1, 2, 7, 50, 500])
@pytest.mark.parametrize("cluster_size", [1, 3, 8])
def test_partition_and_size_properties(n, cluster_size):
    rng = np.random.default_rng(n * 10 + cluster_size)
    for seed in range(3):
        graph = _random_graph(n, min(n, 6), rng)
        walk = greedy_traversal(graph, cluster_size, seed, merge=False)
        _check_partition(walk, n)
        assert walk.dropped == []
        assert all(1 <= len(c) <= cluster_size for c in walk.clusters)
        assert walk.stats["jumps"] == len(walk.clusters) - 1
        merged = greedy_traversal(graph, cluster_size, seed)
        _check_partition(merged, n)
        assert all(len(c) >= cluster_size for c in merged.clusters)
        short = sum(len(c) < cluster_size for c in walk.clusters)
        assert merged.stats["short_clusters_dissolved"] <= short
        kept = sum(len(c) for c in walk.clusters if len(c) >= cluster_size)  # never dissolved: all stay
        assert sum(len(c) for c in merged.clusters) >= kept
        assert merged.stats["dropped_no_target"] == len(merged.dropped)
        again = greedy_traversal(graph, cluster_size, seed)
        assert again.clusters == merged.clusters and again.dropped == merged.dropped
        assert merge_short_clusters(graph, walk, cluster_size) == merged


def test_seed_changes_the_clusters_on_a_large_graph():
    graph = _random_graph(500, 10, np.random.default_rng(7))
    assert greedy_traversal(graph, 8, 0).clusters != greedy_traversal(graph, 8, 1).clusters


def test_random_callback_skips_are_counted_and_every_doc_is_accounted_for():
    graph = _random_graph(300, 12, np.random.default_rng(3))
    rejected = []

    def near(cur: int, cand: int) -> bool:
        if (cur * 7 + cand) % 3 == 0:
            rejected.append(cand)
            return True
        return False

    result = greedy_traversal(graph, 4, 5, near_duplicate=near)
    assert result.stats["skipped_near_duplicates"] == len(rejected) > 0
    _check_partition(result, 300)
    assert set(rejected) <= {doc for c in result.clusters for doc in c} | set(result.dropped)
    walk = greedy_traversal(graph, 4, 5, near_duplicate=near, merge=False)
    assert not any((a * 7 + b) % 3 == 0 for c in walk.clusters for a, b in zip(c, c[1:], strict=False))


def test_empty_neighbour_columns_and_empty_corpus():
    result = greedy_traversal(np.zeros((4, 0), dtype=np.int64), cluster_size=2, seed=1, merge=False)
    assert result.clusters == [[0], [1], [2], [3]]
    assert result.stats["dead_ends"] == 3
    empty = greedy_traversal(np.zeros((0, 5), dtype=np.int32))
    assert empty.clusters == [] and empty.dropped == [] and empty.stats["documents"] == 0


@pytest.mark.parametrize("graph, size, match", [
    (np.zeros(5, dtype=np.int32), 8, "2-D integer"),
    (np.zeros((3, 2), dtype=np.float32), 8, "2-D integer"),
    (np.array([[0, 3], [1, 0], [2, 0]]), 8, r"\[-1, N=3\)"),
    (np.array([[0, -2], [1, 0]]), 8, r"\[-1, N=2\)"),
    (np.array([[0], [1]]), 0, "cluster_size"),
])
def test_traversal_rejects_bad_input(graph, size, match):
    with pytest.raises(ConvragError, match=match):
        greedy_traversal(graph, size)


def test_random_clusters_blocks_partition_and_determinism():
    result = random_clusters(21, 4, seed=3)
    assert [len(c) for c in result.clusters] == [4] * 5
    _check_partition(result, 21)
    assert len(result.dropped) == 1 and result.stats["dropped_partial_block"] == 1
    order = np.random.default_rng(3).permutation(21).tolist()
    assert result.clusters[0] == order[:4] and result.dropped == [order[20]]
    assert random_clusters(21, 4, seed=3) == result
    assert random_clusters(21, 4, seed=4).clusters != result.clusters
    assert random_clusters(0, 4).clusters == []
    assert random_clusters(3, 8).dropped == [0, 1, 2]
    with pytest.raises(ConvragError, match="cluster_size"):
        random_clusters(10, 0)
    with pytest.raises(ConvragError, match="n must be"):
        random_clusters(-1, 2)


# ----------------------------------------------------------------------------------------------- kNN graph


def _brute_force(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    x64 = x.astype(np.float64)
    dist = ((x64[:, None, :] - x64[None, :, :]) ** 2).sum(-1)
    order = np.argsort(dist, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(dist, order, axis=1)


def _clustered(n: int, d: int, centres: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(centres, d))[rng.integers(0, centres, n)] + 0.3 * rng.normal(size=(n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_flat_matches_brute_force_order():
    x = np.random.default_rng(11).normal(size=(200, 8)).astype(np.float32)
    expected, dist = _brute_force(x, 10)
    assert np.diff(dist, axis=1).min() > 1e-5  # no near ties, so the order is well defined
    graph = knn_graph(x, k=10)
    assert graph.dtype == np.int32 and graph.shape == (200, 10)
    assert (graph[:, 0] == np.arange(200)).all()
    np.testing.assert_array_equal(graph, expected)


def test_k_is_capped_at_n():
    x = np.random.default_rng(0).normal(size=(5, 3))
    graph = knn_graph(x, k=100)
    assert graph.shape == (5, 5)
    assert all(sorted(row) == list(range(5)) for row in graph.tolist())


def test_flat_result_does_not_depend_on_batch_size():
    x = _clustered(4096 + 37, 64, 30, seed=2)
    reference = knn_graph(x, k=20, batch_size=100_000)
    for batch in (1, 500, 4096):
        np.testing.assert_array_equal(knn_graph(x, k=20, batch_size=batch), reference)


@pytest.mark.parametrize("index, options", [("hnsw", {}), ("ivf", {"nprobe": 8})])
def test_approximate_indexes_have_high_recall(index, options):
    x = _clustered(2000, 32, 40, seed=5)
    exact = knn_graph(x, k=10)
    graph = knn_graph(x, k=10, index=index, **options)
    assert graph.shape == (2000, 10) and graph.dtype == np.int32
    assert graph.min() >= -1 and graph.max() < 2000
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(graph.tolist(), exact.tolist(), strict=True)])
    assert recall >= 0.9


def test_ivf_is_seeded_and_pads_missing_neighbours_with_minus_one():
    x = _clustered(300, 16, 10, seed=1)
    assert (knn_graph(x, 10, "ivf", seed=3) == knn_graph(x, 10, "ivf", seed=3)).all()
    small = knn_graph(x, 10, "ivf", nlist=8, train_size=40)
    assert small.shape == (300, 10) and (small[:, 0] == np.arange(300)).mean() > 0.95
    sparse = knn_graph(x, 10, "ivf", nlist=300, nprobe=1)
    assert (sparse == -1).any()
    for row in sparse.tolist():  # valid ids first, then only -1
        valid = [v for v in row if v != -1]
        assert row == valid + [-1] * (10 - len(valid))


def test_threads_option_restores_faiss_setting():
    import faiss

    before = faiss.omp_get_max_threads()
    knn_graph(np.eye(4, dtype=np.float32), k=2, threads=1)
    assert faiss.omp_get_max_threads() == before


@pytest.mark.parametrize("vectors, options, match", [
    (np.zeros(5), {}, "2-D"),
    (np.zeros((0, 4)), {}, "non-empty"),
    (np.array([[0.0, np.nan]]), {}, "NaN"),
    (np.array([[0.0, np.inf]]), {}, "NaN or infinite"),
    (np.zeros((3, 2)), {"index": "lsh"}, "flat, hnsw, ivf"),
    (np.zeros((3, 2)), {"index": "ivf", "nlist": 5}, "nlist"),
    (np.zeros((30, 2)), {"index": "ivf", "nlist": 5, "train_size": 4}, "train_size"),
    (np.zeros((3, 2)), {"k": 0}, "k must be"),
    ([["a", "b"]], {}, "numeric"),
])
def test_knn_rejects_bad_input(vectors, options, match):
    with pytest.raises(ConvragError, match=match):
        knn_graph(vectors, **options)
