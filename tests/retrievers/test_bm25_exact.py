"""``bm25`` gives rank-bm25's ``BM25Okapi`` scores bitwise, and so its rankings, on real staged data.

Reference scores come from ``rank_bm25.BM25Okapi`` itself, fit on the same token lists (StratRAG's
``text.lower().split()``): ``get_scores`` for whole-corpus search, ``get_batch_scores`` for pools under corpus
statistics, a model fit on the pool's documents for per-pool statistics. Rankings are compared with a run
ordered independently here (score descending, then doc id descending, convrag's tie rule).
"""

from __future__ import annotations

from pathlib import Path

import datasets
import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from convrag.builders.stratrag import StratRAG
from convrag.hub.export import export_benchmark
from convrag.retrievers import BM25Retriever
from tests.conftest import DATA

TOLERANCE = 1e-9


def _tokens(text: str) -> list[str]:
    return text.lower().split()


def _ranked(ids: list[str], scores: np.ndarray) -> list[str]:
    """Doc ids by score descending, then doc id descending."""
    return [d for _, d in sorted(zip(scores.tolist(), ids, strict=True), reverse=True)]


def _check(got: dict[str, float], ids: list[str], want: np.ndarray, where: str) -> bool:
    """Assert ``got`` (a run's inner dict) has rank-bm25's scores ``want`` for ``ids`` and its ranking.

    Returns whether every score is bitwise equal (asserted by the callers: the scorer's design claim).
    """
    mine = np.array([got[d] for d in ids])
    diff = float(np.max(np.abs(mine - want))) if len(ids) else 0.0
    assert diff <= TOLERANCE, f"{where}: max |bm25 - rank-bm25| = {diff}"
    assert list(got) == _ranked(ids, want), f"{where}: ranking differs from rank-bm25's"
    return bool(np.array_equal(mine, want))


def _search_all(
    corpus: list[dict[str, str]], queries: dict[str, str], pools: dict[str, list[str]] | None = None, **options
) -> int:
    """Compare ``bm25`` with rank-bm25 over whole-corpus search (and pools if given); count the checks."""
    ids = [d["_id"] for d in corpus]
    tokens = {d["_id"]: _tokens(d["text"]) for d in corpus}
    position = {d: i for i, d in enumerate(ids)}
    whole = BM25Okapi([tokens[d] for d in ids], **options)
    retriever = BM25Retriever(show_progress=False, **options).index(corpus)
    run = retriever.search(queries)
    checks = 0
    for qid, text in queries.items():
        assert _check(run[qid], ids, whole.get_scores(_tokens(text)), f"corpus search, {qid}")
        checks += 1
    if pools is None:
        return checks
    per_pool = retriever.search(queries, pools=pools)
    by_corpus = BM25Retriever(pool_stats="corpus", show_progress=False, **options).index(corpus)
    corpus_stats = by_corpus.search(queries, pools=pools)
    for qid, text in queries.items():
        pool, query = pools[qid], _tokens(text)
        fitted = BM25Okapi([tokens[d] for d in pool], **options).get_scores(query)
        assert _check(per_pool[qid], pool, fitted, f"pool statistics, {qid}")
        batch = np.array(whole.get_batch_scores(query, [position[d] for d in pool]))
        assert _check(corpus_stats[qid], pool, batch, f"corpus statistics, {qid}")
        checks += 2
    return checks


@pytest.fixture(scope="module")
def stratrag(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, str]], dict, dict]:
    """StratRAG's dev examples built from the shared HotpotQA file: corpus, queries, per-example pools."""
    builder = StratRAG(config_name="all", cache_dir=str(tmp_path_factory.mktemp("stratrag")),
                       source=str(DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"))  # fmt: skip
    builder.download_and_prepare()
    corpus: dict[str, str] = {}
    queries, pools = {}, {}
    for record in builder.as_dataset()["validation"]:
        queries[record["id"]] = record["query"]
        pools[record["id"]] = [doc["doc_id"] for doc in record["doc_pool"]]
        for doc in record["doc_pool"]:
            assert corpus.setdefault(doc["doc_id"], doc["text"]) == doc["text"]
    return [{"_id": d, "title": "", "text": t} for d, t in corpus.items()], queries, pools


@pytest.mark.parametrize("epsilon", [0.25, 0.0])
def test_stratrag_pools_and_corpus(stratrag, epsilon: float) -> None:
    corpus, queries, pools = stratrag
    assert len(queries) == 30 and all(len(p) == 15 for p in pools.values())
    assert _search_all(corpus, queries, pools, epsilon=epsilon) == 3 * len(queries)


def test_recor_sample_every_domain(tmp_path: Path) -> None:
    export_benchmark("recor", tmp_path, options={"source": str(DATA / "recor" / "sample")})
    domains = ("law", "drones", "biology", "earth_science")
    turns = 0
    for domain in domains:
        corpus = datasets.load_dataset(str(tmp_path), f"{domain}-corpus", split="test").to_list()
        rows = datasets.load_dataset(str(tmp_path), f"{domain}-queries", split="test").to_list()
        # the turn alone, and with its history and reasoning (the longer texts strategies send)
        queries = {r["_id"]: r["text"] for r in rows} | {f"{r['_id']}+": f"{r['history']} {r['text']} {r['reasoning']}"
                                                         for r in rows}  # fmt: skip
        pools = {q: [d["_id"] for d in corpus] for q in queries}
        turns += _search_all(corpus, queries, pools) // 3
    assert turns == 2 * 13


def test_mtrag_cited_corpus(mtrag_cited: Path, tmp_path: Path) -> None:
    from convrag.cli import main

    assert main(["build", "mtrag", "--source", str(DATA / "mtrag"), "--config", "all-tasks", "--out",
                 str(tmp_path)]) == 0  # fmt: skip
    tasks = datasets.load_dataset(str(tmp_path), "all-tasks", split="test")
    queries = {t["task_id"]: t["question"] for t in tasks.select(range(200))}
    corpus = datasets.load_dataset(str(mtrag_cited), "all-cited-corpus", split="test")
    rows = [{"_id": d["_id"], "title": "", "text": f"{d['title']} {d['text']}"} for d in corpus]
    assert len(rows) == 2021
    assert _search_all(rows, queries) == 200


# ---------------------------------------------------------------- edge cases
DOCS = [
    {"_id": "a", "title": "", "text": "the cat sat on the mat the end"},
    {"_id": "b", "title": "", "text": "the dog chased the cat"},
    {"_id": "c", "title": "", "text": ""},
    {"_id": "d", "title": "", "text": "stock markets fell sharply"},
    {"_id": "e", "title": "", "text": "the dog chased the cat"},  # ties b exactly
]


@pytest.mark.parametrize("query", ["", "unseen words only", "cat cat the cat", "the", "mat dog unseen markets"])
@pytest.mark.parametrize("epsilon", [0.25, 0.0])
def test_edge_cases(query: str, epsilon: float) -> None:
    pools = {"q": ["a", "b", "c", "e"]}
    assert _search_all(DOCS, {"q": query}, pools, epsilon=epsilon) == 3


def test_pool_of_one_document_and_of_empty_documents() -> None:
    r = BM25Retriever(show_progress=False).index(DOCS)
    alone = r.search({"q": "the cat"}, pools={"q": ["a"]})["q"]
    want = BM25Okapi([_tokens(DOCS[0]["text"])]).get_scores(_tokens("the cat"))  # one document: negative idf
    assert want[0] < 0 and alone == {"a": want[0]}
    # rank-bm25 cannot fit documents without tokens (division by zero); bm25 scores them 0
    with pytest.raises(ZeroDivisionError):
        BM25Okapi([[]])
    assert r.search({"q": "the cat"}, pools={"q": ["c"]}) == {"q": {"c": 0.0}}


def test_settings_name_the_implementation() -> None:
    settings = BM25Retriever().settings()
    assert settings["implementation"] == "sparse BM25Okapi (rank-bm25's formula)"
    assert (settings["k1"], settings["b"], settings["epsilon"], settings["pool_stats"]) == (1.5, 0.75, 0.25, "pool")
