"""Baseline retrievers on real HotpotQA paragraphs (the shared data file, read in place)."""

from __future__ import annotations

import json
import math

import datasets
import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from convrag.core.errors import DataError
from convrag.retrievers import (
    BM25Retriever,
    BM25SRetriever,
    DenseRetriever,
    HybridRetriever,
    RandomRetriever,
    Retriever,
    RetrieverSpecError,
    RRFRetriever,
    available_retrievers,
    get_retriever,
    minmax_normalize,
    ranked_order,
    whitespace_tokenize,
)
from tests.conftest import DATA

HOTPOT = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"


@pytest.fixture(scope="module")
def hotpot() -> dict:
    """Corpus (StratRAG style: text = title + paragraph, empty title), queries, per-question pools, gold ids."""
    records = json.loads(HOTPOT.read_text(encoding="utf-8"))[:8]
    corpus, queries, pools, gold = [], {}, {}, {}
    for r in records:
        sf = {t for t, _ in r["supporting_facts"]}
        pools[r["_id"]], gold[r["_id"]] = [], set()
        for j, (title, sentences) in enumerate(r["context"]):
            doc_id = f"{r['_id']}_{j:02d}"
            corpus.append({"_id": doc_id, "title": "", "text": f"{title} {''.join(sentences)}"})
            pools[r["_id"]].append(doc_id)
            if title in sf:
                gold[r["_id"]].add(doc_id)
        queries[r["_id"]] = r["question"]
    return {"corpus": corpus, "queries": queries, "pools": pools, "gold": gold}


class Fixed(Retriever):
    """Test stub: scores from a table ``{query_id: {doc_id: score}}`` (0 where absent)."""

    name = "fixed"

    def __init__(self, table: dict[str, dict[str, float]], **options) -> None:
        super().__init__(**options)
        self.table = table

    def _fit(self, show_progress: bool) -> None:
        pass

    def _score_pools(self, qids, texts, pools, show_progress):
        rows = zip(qids, pools, strict=True)
        return [np.array([self.table[q].get(self.doc_ids[i], 0.0) for i in pos]) for q, pos in rows]


TINY = [
    {"_id": "a", "title": "Cats", "text": "the cat sat on the mat"},
    {"_id": "b", "title": "", "text": "the dog chased the cat"},
    {"_id": "c", "title": "", "text": "stock markets fell sharply"},
]


# ---------------------------------------------------------------- interface
def test_corpus_forms_and_doc_text() -> None:
    r = BM25Retriever(show_progress=False).index(TINY)
    assert r.doc_texts == ["Cats the cat sat on the mat", "the dog chased the cat", "stock markets fell sharply"]
    assert BM25Retriever(use_title=False).index(TINY).doc_texts[0] == "the cat sat on the mat"
    as_map = BM25Retriever().index({"x": {"title": "T", "text": "body"}, "y": "plain text"})
    assert as_map.doc_ids == ["x", "y"] and as_map.doc_texts == ["T body", "plain text"]
    rows = datasets.Dataset.from_list([{**row, "is_pad": False} for row in TINY])  # extra columns are ignored
    assert BM25Retriever().index(rows).doc_texts == r.doc_texts

    class TextOnly(BM25Retriever):
        def doc_text(self, row):
            return row["text"].upper()

    assert TextOnly().index(TINY).doc_texts[1] == "THE DOG CHASED THE CAT"
    assert BM25Retriever().describe()["doc_text"] == "title + ' ' + text"


def test_corpus_and_pool_errors() -> None:
    with pytest.raises(DataError, match="empty"):
        BM25Retriever().index([])
    with pytest.raises(DataError, match="duplicate doc id 'a'"):
        BM25Retriever().index([*TINY, {"_id": "a", "title": "", "text": "again"}])
    with pytest.raises(DataError, match="'_id'"):
        BM25Retriever().index([{"text": "no id"}])
    with pytest.raises(RuntimeError, match="index"):
        BM25Retriever().search({"q": "cat"})
    r = RandomRetriever().index(TINY)
    with pytest.raises(DataError, match=r"query 'q1'.*\['zzz'\]"):
        r.search({"q0": "cat", "q1": "cat"}, pools={"q0": ["a"], "q1": ["a", "zzz"]})
    with pytest.raises(DataError, match="query 'q2' has no pool"):
        r.search({"q2": "cat"}, pools={"q0": ["a"]})
    with pytest.raises(DataError, match="query 'q0' repeats"):
        r.search({"q0": "cat"}, pools={"q0": ["a", "a"]})
    with pytest.raises(ValueError, match="top_k"):
        r.search({"q0": "cat"}, top_k=0)


def test_ranked_order_ties_break_by_doc_id_descending() -> None:
    scores = np.array([1.0, 3.0, 3.0, 2.0, 3.0])
    id_rank = np.array([0, 1, 2, 3, 4])
    assert ranked_order(scores, id_rank).tolist() == [4, 2, 1, 3, 0]
    assert ranked_order(scores, id_rank, 2).tolist() == [4, 2]
    # identical documents tie; the later doc id ranks first and survives the cut
    r = BM25Retriever().index([{"_id": i, "title": "", "text": "same words"} for i in ("d1", "d3", "d2")])
    assert list(r.search({"q": "same"}, top_k=2)["q"]) == ["d3", "d2"]


# ---------------------------------------------------------------- BM25
def _okapi_by_hand(query: list[str], docs: list[list[str]], k1=1.5, b=0.75, eps=0.25) -> list[float]:
    """Okapi BM25 as rank-bm25 defines it; ``eps=None`` clips negative idf at 0 instead (bm25s "robertson")."""
    n, avgdl = len(docs), sum(map(len, docs)) / len(docs)
    vocab = {t for d in docs for t in d}
    idf = {t: math.log((n - sum(t in d for d in docs) + 0.5) / (sum(t in d for d in docs) + 0.5)) for t in vocab}
    floor = 0.0 if eps is None else eps * sum(idf.values()) / len(idf)
    idf = {t: (floor if v < 0 else v) for t, v in idf.items()}
    return [
        sum(idf.get(t, 0.0) * d.count(t) * (k1 + 1) / (d.count(t) + k1 * (1 - b + b * len(d) / avgdl)) for t in query)
        for d in docs
    ]


def test_bm25_equals_hand_computation() -> None:
    query = "The cat on a MAT"
    run = BM25Retriever().index(TINY).search({"q": query})["q"]
    docs = [whitespace_tokenize(t) for t in ("Cats the cat sat on the mat", "the dog chased the cat", TINY[2]["text"])]
    expected = dict(zip("abc", _okapi_by_hand(whitespace_tokenize(query), docs), strict=True))
    assert run == pytest.approx(expected, rel=1e-12)
    assert list(run) == ["a", "b", "c"]


def test_bm25_pool_mode_fits_on_the_pool(hotpot) -> None:
    r = BM25Retriever().index(hotpot["corpus"])
    run = r.search(hotpot["queries"], pools=hotpot["pools"])
    text = {d["_id"]: d["text"] for d in hotpot["corpus"]}
    for qid, pool in hotpot["pools"].items():
        assert set(run[qid]) == set(pool)  # exactly the pool, every doc scored
        model = BM25Okapi([text[d].lower().split() for d in pool])
        want = model.get_scores(hotpot["queries"][qid].lower().split())
        assert [run[qid][d] for d in pool] == pytest.approx(want.tolist(), rel=1e-12)
    top1 = sum(next(iter(run[q])) in hotpot["gold"][q] for q in run) / len(run)
    assert top1 >= 0.5


def test_bm25_corpus_statistics(hotpot) -> None:
    corpus, queries, pools = hotpot["corpus"], hotpot["queries"], hotpot["pools"]
    whole = BM25Okapi([d["text"].lower().split() for d in corpus])
    qid = next(iter(queries))
    want = dict(zip([d["_id"] for d in corpus], whole.get_scores(queries[qid].lower().split()), strict=True))
    run = BM25Retriever().index(corpus).search({qid: queries[qid]}, top_k=5)[qid]
    best = sorted(want, key=lambda d: (want[d], d), reverse=True)[:5]  # score, then doc id, descending
    assert list(run) == best and [run[d] for d in best] == pytest.approx([want[d] for d in best])
    pooled = BM25Retriever(pool_stats="corpus").index(corpus).search({qid: queries[qid]}, pools=pools)[qid]
    assert pooled == pytest.approx({d: want[d] for d in pools[qid]})


def test_bm25_degenerate_inputs() -> None:
    r = BM25Retriever().index(TINY + [{"_id": "e1", "title": "", "text": ""}, {"_id": "e2", "title": "", "text": " "}])
    assert r.search({"q": "cat"}, pools={"q": ["e1", "e2"]}) == {"q": {"e2": 0.0, "e1": 0.0}}
    assert set(r.search({"q": "unseen words"})["q"].values()) == {0.0}
    assert r.search({"q": ""}, pools={"q": ["a"]}) == {"q": {"a": 0.0}}


def test_bm25s_lucene_by_hand_and_agreement(hotpot) -> None:
    query = "cat mat"
    docs = [whitespace_tokenize(t) for t in ("Cats the cat sat on the mat", "the dog chased the cat")]
    n, avgdl, k1, b = 2, (7 + 5) / 2, 1.5, 0.75

    def lucene(doc):
        out = 0.0
        for t in query.split():
            df, tf = sum(t in d for d in docs), doc.count(t)
            out += math.log(1 + (n - df + 0.5) / (df + 0.5)) * tf / (tf + k1 * (1 - b + b * len(doc) / avgdl))
        return out

    run = BM25SRetriever().index(TINY[:2]).search({"q": query})["q"]
    assert run == pytest.approx({"a": lucene(docs[0]), "b": lucene(docs[1])}, rel=1e-5)
    # "robertson" = Okapi with idf clipped at 0, without the (k1 + 1) factor; fit on each pool
    r = BM25SRetriever(method="robertson", show_progress=False).index(hotpot["corpus"])
    run = r.search(hotpot["queries"], pools=hotpot["pools"])
    text = {d["_id"]: d["text"].lower().split() for d in hotpot["corpus"]}
    for qid, pool in hotpot["pools"].items():
        want = _okapi_by_hand(hotpot["queries"][qid].lower().split(), [text[d] for d in pool], eps=None)
        assert [run[qid][d] * (k1 + 1) for d in pool] == pytest.approx(want, rel=1e-5, abs=1e-6)
    own = BM25SRetriever(tokenizer="bm25s", pool_stats="corpus").index(TINY)
    assert next(iter(own.search({"q": "The markets"})["q"])) == "c"
    assert own.describe()["stopwords"] == "english"


# ---------------------------------------------------------------- random
def test_random_is_seeded_uniform_and_per_query(hotpot) -> None:
    corpus, queries, pools = hotpot["corpus"], hotpot["queries"], hotpot["pools"]
    run = RandomRetriever(seed=3).index(corpus).search(queries, pools=pools)
    again = RandomRetriever(seed=3).index(list(reversed(corpus))).search(queries, pools=pools)
    assert run == again and all(list(run[q]) == list(again[q]) for q in run)
    one = next(iter(queries))
    alone = RandomRetriever(seed=3).index(corpus).search({one: queries[one]}, pools=pools)
    assert alone[one] == run[one]  # other queries change nothing
    assert RandomRetriever(seed=4).index(corpus).search(queries, pools=pools) != run
    whole = get_retriever("random:3").index(corpus).search({one: queries[one]})[one]
    assert {d: whole[d] for d in pools[one]} == run[one]  # pool ranking = restriction of corpus ranking
    values = np.array(list(whole.values()))
    assert values.min() >= 0.0 and values.max() < 1.0 and abs(values.mean() - 0.5) < 0.08
    assert len(whole) == len(corpus)


# ---------------------------------------------------------------- dense
@pytest.fixture(scope="module")
def dense(hotpot) -> DenseRetriever:
    return DenseRetriever(show_progress=False).index(hotpot["corpus"])


def test_dense_cosine_and_relevant_first(dense, hotpot) -> None:
    corpus = [*hotpot["corpus"][:10], {"_id": "zz", "title": "", "text": "A recipe for banana bread with walnuts."}]
    r = DenseRetriever(show_progress=False).index(corpus)
    run = r.search({"q": "How do I bake banana bread?"}, top_k=3)["q"]
    assert next(iter(run)) == "zz"
    q = r.encode(["How do I bake banana bread?"], "query")[0]
    d = r.encode([corpus[-1]["text"]])[0]
    assert run["zz"] == pytest.approx(float(q @ d), abs=1e-6)
    assert np.linalg.norm(q) == pytest.approx(1.0, abs=1e-5)
    pooled = dense.search(hotpot["queries"], pools=hotpot["pools"])
    top1 = sum(next(iter(pooled[q])) in hotpot["gold"][q] for q in pooled) / len(pooled)
    assert top1 >= 0.6


def test_dense_faiss_flat_equals_brute_force(dense, hotpot) -> None:
    brute = dense.search(hotpot["queries"], top_k=7)
    flat = DenseRetriever(faiss_threshold=0, show_progress=False).index(hotpot["corpus"])
    assert flat.uses_faiss(7) and not dense.uses_faiss(7)
    via_faiss = flat.search(hotpot["queries"], top_k=7)
    for qid in brute:
        assert list(via_faiss[qid]) == list(brute[qid])
        assert list(via_faiss[qid].values()) == pytest.approx(list(brute[qid].values()), abs=1e-5)
    hnsw = DenseRetriever(faiss_threshold=0, faiss_index="hnsw", show_progress=False).index(hotpot["corpus"])
    approx = hnsw.search(hotpot["queries"], top_k=3)
    assert sum(next(iter(approx[q])) == next(iter(brute[q])) for q in brute) >= len(brute) - 1


def test_dense_reuses_corpus_embeddings(dense, hotpot, monkeypatch) -> None:
    calls = []
    original = DenseRetriever.encode
    monkeypatch.setattr(DenseRetriever, "encode", lambda self, texts, *a, **k: calls.append(len(texts)) or original(
        self, texts, *a, **k))  # fmt: skip
    other = DenseRetriever(show_progress=False).index(hotpot["corpus"])  # cache hit: no document encoding
    assert calls == [] and other.embeddings is dense.embeddings
    other.search(hotpot["queries"], pools=hotpot["pools"])
    assert calls == [len(hotpot["queries"])]  # only the queries were encoded


# ---------------------------------------------------------------- fusion
def test_minmax_edge_cases() -> None:
    assert minmax_normalize([2.0, 4.0, 3.0]).tolist() == [0.0, 1.0, 0.5]
    assert minmax_normalize([-1.0, -3.0]).tolist() == [1.0, 0.0]
    assert minmax_normalize([5.0, 5.0, 5.0]).tolist() == [0.0, 0.0, 0.0]
    assert minmax_normalize([7.0]).tolist() == [0.0]
    assert minmax_normalize([]).tolist() == []


def test_hybrid_is_weighted_sum_of_minmax(dense, hotpot) -> None:
    queries, pools = hotpot["queries"], hotpot["pools"]
    bm25 = BM25Retriever().index(hotpot["corpus"]).search(queries, pools=pools)
    cos = dense.search(queries, pools=pools)
    hybrid = get_retriever("hybrid", alpha=0.3, show_progress=False).index(hotpot["corpus"])
    run = hybrid.search(queries, pools=pools)
    for qid, pool in pools.items():
        s = minmax_normalize([bm25[qid][d] for d in pool])
        c = minmax_normalize([cos[qid][d] for d in pool])
        assert [run[qid][d] for d in pool] == pytest.approx((0.3 * s + 0.7 * c).tolist(), abs=1e-9)
    whole = hybrid.search(queries, top_k=5)
    assert all(len(r) == 5 and max(r.values()) <= 1.0 for r in whole.values())
    assert hybrid.describe()["alpha"] == 0.3 and hybrid.describe()["dense"]["name"] == "dense"


def test_hybrid_constant_component_counts_zero() -> None:
    flat = Fixed({"q": {}})
    steep = Fixed({"q": {"a": 1.0, "b": 3.0, "c": 2.0}})
    run = HybridRetriever(sparse=flat, dense=steep).index(TINY).search({"q": "x"}, pools={"q": ["a", "b", "c"]})
    assert run == {"q": {"b": 0.5, "c": 0.25, "a": 0.0}}


def test_rrf_hand_case() -> None:
    one = Fixed({"q": {"a": 3.0, "b": 2.0, "c": 1.0}})  # a, b, c
    two = Fixed({"q": {"a": 1.0, "b": 2.0, "c": 3.0}})  # c, b, a
    three = Fixed({"q": {"a": 0.0, "b": 1.0, "c": 1.0}})  # tie: c before b (doc id descending), then a
    rrf = RRFRetriever([one, two, three], k=60).index(TINY)
    run = rrf.search({"q": "x"}, pools={"q": ["a", "b", "c"]})["q"]
    expected = {"a": 1 / 61 + 1 / 63 + 1 / 63, "b": 1 / 62 + 1 / 62 + 1 / 62, "c": 1 / 63 + 1 / 61 + 1 / 61}
    assert run == pytest.approx(expected, rel=1e-12) and list(run) == ["c", "b", "a"]
    # whole corpus, each component's list cut at depth max(top_k, depth) = 2: a and c get one term each
    top = RRFRetriever([one, two], k=10, depth=1).index(TINY).search({"q": "x"}, top_k=2)["q"]
    assert top == pytest.approx({"b": 2 / 12, "c": 1 / 11}) and list(top) == ["b", "c"]
    assert RRFRetriever([one, two], weights=[2, 1]).index(TINY).search({"q": "x"}, top_k=1)["q"].keys() == {"a"}


# ---------------------------------------------------------------- factory
def test_factory_specs_and_describe() -> None:
    assert available_retrievers() == ["random", "bm25", "bm25s", "dense", "hybrid", "rrf", "dual"]
    assert isinstance(get_retriever("BM25"), BM25Retriever)
    assert get_retriever("random:11").seed == 11 and get_retriever("random", seed=5).describe()["seed"] == 5
    assert get_retriever("dense:/some/local/model").model_name == "/some/local/model"  # loaded lazily
    assert get_retriever("hybrid:/m", alpha=0.25).dense.model_name == "/m"
    rrf = get_retriever("rrf:bm25+random:2", k=10)
    assert [c.name for c in rrf.components] == ["bm25", "random"] and rrf.k == 10
    for bad in ("nope", "bm25:x", "random:abc", "rrf:bm25+", "dense:"):
        with pytest.raises(RetrieverSpecError):
            get_retriever(bad)
    with pytest.raises(RetrieverSpecError, match="both"):
        get_retriever("random:1", seed=2)
    for spec in ("random", "bm25", "bm25s", "rrf:bm25+random"):
        described = get_retriever(spec).describe()
        assert described["name"] == spec.split(":")[0] and json.loads(json.dumps(described)) == described
