"""Speed of convrag's ``bm25`` (rank-bm25's formula, sparse) against rank-bm25 itself and ``bm25s``, in one process.

Corpus: ``--docs`` short documents (default 50,000) built deterministically from a seeded RNG: each has
20-60 words drawn from a Zipf-like distribution over a vocabulary (the words of the shared HotpotQA sample
when it is present, else synthetic words). Queries: ``--queries`` (default 1,000) of 3-8 words, each taken
from a random document (so every query has a lexically matching document). Every retriever uses StratRAG's
tokenisation (lowercase + whitespace split) and whole-corpus top-10 search.

Printed, for ``bm25``, ``bm25s`` (Lucene variant) and ``rank_bm25.BM25Okapi`` used directly: indexing time
(tokenising included), query time and queries per second. rank-bm25 scores every document in Python for each
query token, so it runs only ``--rank-queries`` queries (default 20) and its time for all queries is
extrapolated from them (labelled so). Then the ratios ``bm25 / bm25s`` (time; below 1 means bm25 is faster)
and ``rank-bm25 / bm25``, and the check that matters: on the rank-bm25 queries, bm25's top-10 (ids, order
and scores) equals rank-bm25's top-10 under convrag's tie rule (score descending, then doc id descending).
Not a test; run it by hand:

    python benchmarks/bench_bm25.py [--docs 50000] [--queries 1000] [--rank-queries 20] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import time
from collections import Counter
from pathlib import Path

import numpy as np
from rank_bm25 import BM25Okapi

from convrag.retrievers import BM25Retriever, BM25SRetriever, Retriever, whitespace_tokenize

HOTPOT = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"


def vocabulary(size: int = 20_000) -> list[str]:
    """Words ordered by frequency: from the HotpotQA sample if available, padded with synthetic words."""
    words: list[str] = []
    if HOTPOT.exists():
        counts: Counter[str] = Counter()
        for record in json.loads(HOTPOT.read_text(encoding="utf-8")):
            for title, sentences in record["context"]:
                counts.update(re.findall(r"[a-z0-9]+", f"{title} {' '.join(sentences)}".lower()))
        words = [w for w, _ in counts.most_common()]
    words += [f"w{i}" for i in range(max(0, size - len(words)))]
    return words[:size]


def build(n_docs: int, n_queries: int, seed: int) -> tuple[list[dict[str, str]], dict[str, str]]:
    """Deterministic corpus rows ``{_id, title, text}`` and queries ``{qid: text}``."""
    rng = np.random.default_rng(seed)
    vocab = np.array(vocabulary())
    weights = 1.0 / np.arange(1, len(vocab) + 1) ** 1.05
    weights /= weights.sum()
    lengths = rng.integers(20, 61, size=n_docs)
    tokens = rng.choice(len(vocab), size=int(lengths.sum()), p=weights)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    corpus = [
        {"_id": f"d{i:06d}", "title": "", "text": " ".join(vocab[tokens[bounds[i] : bounds[i + 1]]])}
        for i in range(n_docs)
    ]
    queries = {}
    for j, doc in enumerate(rng.integers(0, n_docs, size=n_queries)):
        words = corpus[doc]["text"].split()
        size = int(rng.integers(3, 9))
        start = int(rng.integers(0, len(words) - size + 1))
        queries[f"q{j:04d}"] = " ".join(words[start : start + size])
    return corpus, queries


def timed(retriever: Retriever, corpus: list[dict[str, str]], queries: dict[str, str], k: int):
    """Indexing seconds, search seconds and the run of ``retriever``."""
    t0 = time.perf_counter()
    retriever.index(corpus, show_progress=False)
    t1 = time.perf_counter()
    run = retriever.search(queries, top_k=k, show_progress=False)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, run


def rank_bm25_timed(corpus: list[dict[str, str]], queries: dict[str, str], k: int):
    """Indexing seconds, search seconds and top-``k`` run of ``rank_bm25.BM25Okapi`` (convrag's tie rule)."""
    ids = np.array([d["_id"] for d in corpus])
    t0 = time.perf_counter()
    model = BM25Okapi([whitespace_tokenize(d["text"]) for d in corpus])
    t1 = time.perf_counter()
    run = {}
    for qid, text in queries.items():
        scores = model.get_scores(whitespace_tokenize(text))
        order = np.lexsort((ids, scores))[::-1][:k]  # score descending, then doc id descending
        run[qid] = {str(ids[i]): float(scores[i]) for i in order}
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, run


def overlap(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]], k: int) -> float:
    """Mean top-k overlap fraction of two runs."""
    return float(np.mean([len(set(list(a[q])[:k]) & set(list(b[q])[:k])) / k for q in a]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--rank-queries", type=int, default=20, help="queries rank-bm25 runs (0: skip it)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args()

    t = time.perf_counter()
    corpus, queries = build(args.docs, args.queries, args.seed)
    n_tokens = sum(len(d["text"].split()) for d in corpus)
    print(f"corpus: {len(corpus):,} docs, {n_tokens:,} tokens; {len(queries):,} queries; top-{args.k}; "
          f"built in {time.perf_counter() - t:.1f} s")  # fmt: skip
    print(f"python {platform.python_version()}, {platform.machine()}")

    for warm in (BM25Retriever(), BM25SRetriever()):  # imports and first-call costs stay out of the timings
        timed(warm, corpus[:100], dict(list(queries.items())[:5]), args.k)

    n = len(queries)
    bm25 = timed(BM25Retriever(), corpus, queries, args.k)
    bm25s = timed(BM25SRetriever(), corpus, queries, args.k)
    for name, (index_s, query_s, _) in (("bm25 (convrag, sparse)", bm25), ("bm25s (lucene)", bm25s)):
        print(f"{name:24s} index {index_s:8.2f} s   query {query_s:8.2f} s   {n / query_s:10.1f} q/s")
    print(f"bm25 / bm25s time: indexing x{bm25[0] / bm25s[0]:.2f}, querying x{bm25[1] / bm25s[1]:.2f}; "
          f"top-{args.k} overlap {overlap(bm25[2], bm25s[2], args.k):.3f}")  # fmt: skip
    if args.rank_queries <= 0:
        return

    sub = dict(list(queries.items())[: args.rank_queries])
    index_s, query_s, reference = rank_bm25_timed(corpus, sub, args.k)
    total = query_s / len(sub) * n
    print(f"{'rank-bm25 BM25Okapi':24s} index {index_s:8.2f} s   query {total:8.2f} s   {n / total:10.1f} q/s   "
          f"(query time extrapolated from {len(sub)} queries)")  # fmt: skip
    print(f"rank-bm25 / bm25 time: indexing x{index_s / bm25[0]:.2f}, querying x{total / bm25[1]:.0f}")
    same = sum(list(bm25[2][q].items()) == list(reference[q].items()) for q in sub)
    print(f"bm25 top-{args.k} (ids, order, scores bitwise) equals rank-bm25's on {same}/{len(sub)} queries")


if __name__ == "__main__":
    main()
