"""Dense retriever options with the shipped all-MiniLM-L6-v2: pooling, length, truncation sides, query fitting."""

from __future__ import annotations

import numpy as np
import pytest

from convrag.retrievers import (
    BM25Retriever,
    DenseRetriever,
    HybridRetriever,
    Retriever,
    get_retriever,
    minmax_normalize,
)
from convrag.retrievers.dense import _EMBEDDINGS
from convrag.retrievers.encoders import default_model_path, load_model, pooling_mode
from convrag.retrievers.query_text import FITS, TAIL_CUT, TRIMMED, QueryText

PARIS = [
    "User: When was the Eiffel Tower in Paris built and who designed its wrought-iron lattice?",
    "Agent: The Eiffel Tower was built from 1887 to 1889 by Gustave Eiffel's engineering company for the "
    "World's Fair in Paris.",
    "User: How tall is the Eiffel Tower and how many visitors climb its iron stairs every year?",
    "Agent: The Eiffel Tower is about 330 metres tall; millions of visitors go up the tower on the Champ de Mars "
    "each year.",
]
#: ~1,700 tokens of conversation about the Eiffel Tower, then a topic switch and some small talk.
HISTORY = (
    [PARIS[i % 4] for i in range(68)]
    + [
        "User: Thanks, that is all about Paris. Switching topics: I am preparing a science demonstration for my class.",
        "Agent: Happy to help with the demonstration. What would you like to know?",
    ]
    + ["User: Thanks, that was helpful.", "Agent: You're welcome! Anything else I can help you with today?"] * 8
)
QUERY = "User: At what temperature does liquid nitrogen boil?"
TAIL = [QUERY, "Reasoning: the user now asks about the boiling point of liquid nitrogen, a cryogenic liquid."]
CORPUS = {
    "nitrogen": "Liquid nitrogen boils at 77 kelvin (minus 196 degrees Celsius) at atmospheric pressure and is used "
    "as a cryogen.",
    "eiffel": "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, designed by Gustave "
    "Eiffel's company and built for the 1889 World's Fair.",
    "louvre": "The Louvre in Paris is the world's most visited art museum, home of the Mona Lisa.",
    "helium": "Helium is a noble gas; liquid helium is used to cool superconducting magnets.",
    "bread": "A recipe for banana bread with walnuts and cinnamon.",
}
LONG_DOC = " ".join(f"Sentence {i} says something different about topic number {i}." for i in range(40))


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def shared():
    """The cached MiniLM every default retriever shares, and its settings before any test."""
    model = load_model(default_model_path(), None)
    return model, model.max_seq_length, model.tokenizer.truncation_side


@pytest.fixture(scope="module")
def fitted() -> DenseRetriever:
    return DenseRetriever(show_progress=False).index(CORPUS)


@pytest.fixture(scope="module")
def right_cut() -> DenseRetriever:
    """The old behaviour: no fitting, the tokenizer cuts long queries at their end."""
    return DenseRetriever(fit_queries=False, query_truncation="right", show_progress=False).index(CORPUS)


def assert_shared_untouched(shared) -> None:
    model, length, side = shared
    assert model.max_seq_length == length == 256 and model.tokenizer.truncation_side == side
    assert pooling_mode(model) == "mean"


# ---------------------------------------------------------------- query fitting
def test_long_history_query_is_fitted_to_the_encoder(fitted, right_cut, shared) -> None:
    q = QueryText(HISTORY, TAIL)
    assert fitted.count_tokens(q) > 1800
    (text,) = fitted.fit_texts([q])
    tokenizer = shared[0].tokenizer
    assert len(tokenizer(text)["input_ids"]) == fitted.count_tokens(text) <= 256
    assert fitted.count_tokens(text) >= 240  # the budget is used by recent history
    assert text.endswith("\n".join(TAIL)) and QUERY in text
    assert fitted.fit_stats == {FITS: 0, TRIMMED: 1, TAIL_CUT: 0}
    # the old right-cut text never reaches the query: its embedding is that of the history alone
    old = right_cut.encode([q], "query")[0]
    assert cos(old, right_cut.encode(["\n".join(HISTORY)], "query")[0]) > 0.9999
    assert cos(fitted.encode([text], "query")[0], old) < 0.95
    assert_shared_untouched(shared)


def test_fitting_finds_the_document_of_the_current_query(fitted, right_cut) -> None:
    q = {"q": QueryText(HISTORY, TAIL)}
    with_fit, without = fitted.search(q)["q"], right_cut.search(q)["q"]
    assert list(with_fit).index("nitrogen") + 1 == 1
    assert next(iter(without)) == "eiffel" and list(without).index("nitrogen") + 1 == 4
    assert fitted.describe()["query_fitting"]["last_search"] == {FITS: 0, TRIMMED: 1, TAIL_CUT: 0}
    # history about the Eiffel Tower up to the query: the fitted text still holds ~200 tokens of it, so the
    # tower stays first, but only the fitted query sees the question at all
    paris = {"q": QueryText([PARIS[i % 4] for i in range(68)], TAIL)}
    with_fit, without = fitted.search(paris)["q"], right_cut.search(paris)["q"]
    assert next(iter(with_fit)) == next(iter(without)) == "eiffel"
    assert with_fit["nitrogen"] > without["nitrogen"] + 0.1


def test_fit_statuses_and_plain_queries(fitted) -> None:
    queries = {"short": "liquid nitrogen", "long": "nitrogen " * 400, "qt": QueryText(HISTORY, TAIL)}
    fitted.search(queries, top_k=2)
    assert fitted.fit_stats == {FITS: 1, TRIMMED: 1, TAIL_CUT: 1}
    long_fit = fitted.fit_texts([queries["long"]])[0]
    assert fitted.count_tokens(long_fit) <= 256 and queries["long"].startswith(long_fit)
    off = DenseRetriever(fit_queries=False, show_progress=False)
    assert off.fit_texts(list(queries.values())) == [str(t) for t in queries.values()] and off.fit_stats == {}
    described = off.describe()["query_fitting"]
    assert described["enabled"] is False and "left" in described["policy"]


def test_prompt_is_counted_in_fitting() -> None:
    r = DenseRetriever(query_prompt="Represent this conversation for retrieving relevant passages: ")
    q = QueryText(HISTORY, TAIL)
    (text,) = r.fit_texts([q])
    assert r.count_tokens(text) == len(r.model.tokenizer(r.query_prompt + text)["input_ids"]) <= 256
    assert r.count_tokens(text) > len(r.model.tokenizer(text)["input_ids"])
    assert text.endswith("\n".join(TAIL))


# ---------------------------------------------------------------- pooling, length, truncation
def test_pooling_override(fitted, shared, monkeypatch) -> None:
    assert fitted.describe()["pooling"] == "mean" and fitted.describe()["max_seq_length"] == 256
    calls = []
    original = DenseRetriever.encode
    monkeypatch.setattr(DenseRetriever, "encode", lambda self, texts, *a, **k: calls.append(len(texts)) or original(
        self, texts, *a, **k))  # fmt: skip
    cls = DenseRetriever(pooling="cls", show_progress=False).index(CORPUS)
    assert calls == [len(CORPUS)]  # not served from the mean-pooled cache entry
    assert cls.describe()["pooling"] == "cls" and cls.model is not shared[0] and cls.model[0] is shared[0][0]
    assert cos(cls.embeddings[0], fitted.embeddings[0]) < 0.99
    assert not np.allclose(cls.embeddings, fitted.embeddings)
    again = DenseRetriever(show_progress=False).index(CORPUS)  # default pooling: the first retriever's entry
    assert again.embeddings is fitted.embeddings and calls == [len(CORPUS)]
    assert DenseRetriever(pooling="mean").model is shared[0]  # the model's own pooling: no copy
    assert_shared_untouched(shared)
    for mode in ("max", "lasttoken"):
        assert DenseRetriever(pooling=mode).describe()["pooling"] == mode
    with pytest.raises(ValueError, match="pooling"):
        DenseRetriever(pooling="median")


def test_max_seq_length(shared) -> None:
    default, short = DenseRetriever(show_progress=False), DenseRetriever(max_seq_length=64, show_progress=False)
    assert short.count_tokens(LONG_DOC, "document") > 64
    a, b = default.encode([LONG_DOC])[0], short.encode([LONG_DOC])[0]
    assert cos(a, b) < 0.999
    assert np.allclose(short.encode(["short text"])[0], default.encode(["short text"])[0], atol=1e-5)
    assert short.describe()["max_seq_length"] == 64 and short.describe()["query_fitting"]["max_tokens"] == 64
    assert len(short.model.tokenizer(short.fit_texts([QueryText(HISTORY, TAIL)])[0])["input_ids"]) <= 64
    assert_shared_untouched(shared)
    with pytest.raises(ValueError):
        DenseRetriever(max_seq_length=0)


def test_cache_key_has_every_document_setting() -> None:
    corpus = {"long": LONG_DOC, "short": "short text"}
    variants = [{}, {"max_seq_length": 64}, {"document_truncation": "left"}, {"document_prompt": "passage: "}]
    embeddings = []
    for options in variants:
        r = DenseRetriever(show_progress=False, **options).index(corpus)
        embeddings.append(r.embeddings)
        if len(_EMBEDDINGS) >= 2:  # each variant added its own entry
            assert list(_EMBEDDINGS)[-1][1:5] == (r.pooling_used(), r.limit("document"), r.document_truncation,
                                                  r.prompt("document"))  # fmt: skip
    for i in range(1, len(embeddings)):
        assert cos(embeddings[0][0], embeddings[i][0]) < 0.9999


def test_truncation_sides_applied_and_restored(shared, monkeypatch) -> None:
    model = shared[0]
    left = DenseRetriever(document_truncation="left", query_truncation="right", max_seq_length=32)
    seen = []
    original_doc, original_query = model.encode_document, model.encode_query

    def spy(original):
        def call(*args, **kwargs):
            seen.append((model.tokenizer.truncation_side, model.max_seq_length))
            return original(*args, **kwargs)

        return call

    monkeypatch.setattr(model, "encode_document", spy(original_doc))
    monkeypatch.setattr(model, "encode_query", spy(original_query))
    left.encode([LONG_DOC], "document")
    left.encode([LONG_DOC], "query")
    assert seen == [("left", 32), ("right", 32)]
    assert_shared_untouched(shared)

    def boom(*args, **kwargs):
        raise RuntimeError("encode failed")

    monkeypatch.setattr(model, "encode_document", boom)
    with pytest.raises(RuntimeError):
        left.encode([LONG_DOC], "document")
    assert_shared_untouched(shared)  # restored on errors too


def test_left_truncated_document_keeps_its_end() -> None:
    end = "Liquid nitrogen boils at 77 kelvin."
    doc = LONG_DOC + " " + end
    right = DenseRetriever(max_seq_length=32).encode([doc])[0]
    left = DenseRetriever(max_seq_length=32, document_truncation="left").encode([doc])[0]
    target = DenseRetriever().encode(["liquid nitrogen boiling point"], "query")[0]
    assert cos(left, target) > cos(right, target) + 0.1


# ---------------------------------------------------------------- factory and fusion
def test_spec_strings_pass_dense_options() -> None:
    r = get_retriever("dense", pooling="cls", max_seq_length=128)
    assert (r.pooling, r.max_seq_length) == ("cls", 128)
    h = get_retriever("hybrid", pooling="cls", max_seq_length=128, fit_queries=False)
    assert (h.dense.pooling, h.dense.max_seq_length, h.dense.fit_queries) == ("cls", 128, False)
    h = get_retriever("hybrid:/m", dense_options={"query_truncation": "right"})
    assert (h.dense.model_name, h.dense.query_truncation) == ("/m", "right")
    with pytest.raises(ValueError, match="both"):
        get_retriever("hybrid", pooling="cls", dense_options={"pooling": "max"})
    rrf = get_retriever("rrf:bm25+dense+hybrid", dense_options={"pooling": "cls"})
    assert [c.name for c in rrf.components] == ["bm25", "dense", "hybrid"]
    assert rrf.components[1].pooling == rrf.components[2].dense.pooling == "cls"
    with pytest.raises(ValueError, match="query_truncation"):
        DenseRetriever(query_truncation="middle")


class Spy(Retriever):
    """Records the query texts it is given; scores 0."""

    name = "spy"

    def __init__(self) -> None:
        super().__init__(show_progress=False)
        self.seen: list[str] = []

    def _fit(self, show_progress: bool) -> None:
        pass

    def _score_pools(self, qids, texts, pools, show_progress):
        self.seen.extend(texts)
        return [np.zeros(len(p)) for p in pools]


def test_query_text_reaches_retrievers_unchanged() -> None:
    spy = Spy().index(CORPUS)
    q = QueryText(HISTORY, TAIL)
    spy.search({"q": q, "plain": "text", "number": 7}, pools={"q": ["bread"], "plain": ["bread"], "number": ["bread"]})
    assert spy.seen[0] is q and spy.seen[0].tail == tuple(TAIL) and spy.seen[1:] == ["text", "7"]


def test_hybrid_bm25_sees_the_full_text_dense_the_fitted_one(monkeypatch) -> None:
    q = QueryText(HISTORY, TAIL)
    queries, pools = {"q": q}, {"q": list(CORPUS)}
    hybrid = HybridRetriever(alpha=1.0, show_progress=False).index(CORPUS)
    seen = []
    original = BM25Retriever._score_pools
    monkeypatch.setattr(BM25Retriever, "_score_pools", lambda self, qids, texts, *a: seen.extend(texts) or original(
        self, qids, texts, *a))  # fmt: skip
    run = hybrid.search(queries, pools=pools)["q"]
    assert seen == [q] and seen[0].tail == tuple(TAIL)  # the whole QueryText, history and all
    bm25 = BM25Retriever().index(CORPUS).search({"q": str(q)}, pools=pools)["q"]
    expected = minmax_normalize([bm25[d] for d in CORPUS])
    assert [run[d] for d in CORPUS] == pytest.approx(expected.tolist(), abs=1e-12)
    assert hybrid.dense.fit_stats == {FITS: 0, TRIMMED: 1, TAIL_CUT: 0}  # while the dense side was fitted
    whole = HybridRetriever(alpha=0.0, depth=2, show_progress=False).index(CORPUS).search(queries, top_k=1)["q"]
    assert list(whole) == ["nitrogen"]
