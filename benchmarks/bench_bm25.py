"""Speed of BM25 with rank-bm25 (``bm25``) vs bm25s (``bm25s``) through convrag's retrievers, in one process.

Corpus: ``--docs`` short documents (default 100,000) built deterministically from a seeded RNG: each has
20-60 words drawn from a Zipf-like distribution over a vocabulary (the words of the shared HotpotQA sample
when it is present, else synthetic words). Queries: ``--queries`` (default 1,000) of 3-8 words, each taken
from a random document (so every query has a lexically matching document). Both retrievers use StratRAG's
tokenisation (lowercase + whitespace split) and whole-corpus top-10 search.

Printed: indexing time, query time, queries per second, bm25s speed-up ratios, and top-10 agreement:
mean |top10(bm25) & top10(bm25s)| / 10 and how often the top-1 documents match, for bm25s' "lucene" (default)
and "robertson" (rank-bm25's idf clipped at 0 instead of floored) variants, plus a control run (rank-bm25 with
epsilon=0 against bm25s "robertson" on ``--control`` queries) showing where the differences come from.
Not a test; run it by hand (about 5 minutes on 2 cores, nearly all of it rank-bm25 querying):

    python benchmarks/bench_bm25.py [--docs 100000] [--queries 1000] [--seed 0]
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

from convrag.retrievers import BM25Retriever, BM25SRetriever, Retriever

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
    t0 = time.perf_counter()
    retriever.index(corpus, show_progress=False)
    t1 = time.perf_counter()
    run = retriever.search(queries, top_k=k, show_progress=False)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, run


def agreement(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]], k: int) -> tuple[float, float]:
    """Mean top-k overlap fraction and top-1 match rate of two runs."""
    overlap = np.mean([len(set(list(a[q])[:k]) & set(list(b[q])[:k])) / k for q in a])
    top1 = np.mean([next(iter(a[q])) == next(iter(b[q])) for q in a])
    return float(overlap), float(top1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--control", type=int, default=100, help="queries in the epsilon=0 control run")
    args = parser.parse_args()

    t = time.perf_counter()
    corpus, queries = build(args.docs, args.queries, args.seed)
    n_tokens = sum(len(d["text"].split()) for d in corpus)
    print(f"corpus: {len(corpus):,} docs, {n_tokens:,} tokens; {len(queries):,} queries; top-{args.k}; "
          f"built in {time.perf_counter() - t:.1f} s")  # fmt: skip
    print(f"python {platform.python_version()}, {platform.machine()}")

    for warm in (BM25Retriever(), BM25SRetriever()):  # imports and first-call costs stay out of the timings
        timed(warm, corpus[:100], dict(list(queries.items())[:5]), args.k)

    results = {}
    for label, retriever in (
        ("rank-bm25 (bm25)", BM25Retriever()),
        ("bm25s lucene (bm25s)", BM25SRetriever()),
        ("bm25s robertson", BM25SRetriever(method="robertson")),
    ):
        index_s, query_s, run = timed(retriever, corpus, queries, args.k)
        results[label] = (index_s, query_s, run)
        print(f"{label:22s} index {index_s:8.2f} s   query {query_s:8.2f} s   {len(queries) / query_s:10.1f} q/s")

    base_index, base_query, base_run = results["rank-bm25 (bm25)"]
    for label in ("bm25s lucene (bm25s)", "bm25s robertson"):
        index_s, query_s, run = results[label]
        overlap, top1 = agreement(base_run, run, args.k)
        ratios = f"indexing x{base_index / index_s:.2f}, querying x{base_query / query_s:.1f}"
        speed = f"speed-up (rank-bm25 time / bm25s time) {ratios}"
        print(f"{label} vs rank-bm25: {speed}; top-{args.k} overlap {overlap:.3f}, top-1 match {top1:.3f}")

    # Control: most disagreement comes from idf of words in over half the documents (rank-bm25 floors it at
    # epsilon * mean idf, bm25s "robertson" clips it at 0). With epsilon=0 the two should agree up to ties.
    sub = dict(list(queries.items())[: args.control])
    _, _, clipped = timed(BM25Retriever(epsilon=0.0), corpus, sub, args.k)
    overlap, top1 = agreement(clipped, {q: results["bm25s robertson"][2][q] for q in sub}, args.k)
    print(f"control, {len(sub)} queries: rank-bm25 epsilon=0 vs bm25s robertson: top-{args.k} overlap {overlap:.3f}, "
          f"top-1 match {top1:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
