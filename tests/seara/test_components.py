"""SEARA strategy-space components: chunking strategies and the length filter, the LLM multi-query rewriter (RRF
fusion), the listwise sliding-window reranker (scripted LLM replies) and the local cross-encoder reranker."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from convrag.core.errors import ConvragError
from convrag.llm import LLM, DiskCache, RetryPolicy
from convrag.llm.backends.fake import FakeBackend
from convrag.llm.types import BackendError, Message
from convrag.retrievers.llm_rerank import (
    CrossEncoderReranker,
    ListwiseReranker,
    RerankError,
    apply_order,
    windows,
)
from convrag.retrievers.llm_rewrite import SEPARATOR, QueryRewriter, clean_variants
from convrag.seara.chunking import (
    ChunkingError,
    ChunkingReport,
    chunk_documents,
    chunking_id,
    filter_chunks,
    iter_chunks,
    sentence_spans,
)
from convrag.seara.facts import Chunk

TEXT = "The Eiffel Tower is tall. It was built in 1889!  Is it iron? \"Yes.\" Dr. Who\n\nNew para here"


def make_llm(backend: FakeBackend, tmp_path: Path, **kw) -> LLM:
    return LLM(backend, cache=DiskCache(tmp_path / "cache"), sleep=lambda s: None,
               retry=RetryPolicy(max_retries=0), **kw)


def user_text(messages: list[Message]) -> str:
    """The request (a re-ask appends the parse error as a later user message)."""
    return [m["content"] for m in messages if m["role"] == "user"][0]


# ---------------------------------------------------------------- chunking


def spans(chunks: list[Chunk]) -> list[tuple[int, int]]:
    return [(c.start, c.end) for c in chunks]


def test_sentence_and_fixed_chunks_have_hand_computed_offsets() -> None:
    assert sentence_spans(TEXT) == [(0, 25), (26, 47), (49, 60), (61, 67), (68, 71), (72, 75), (77, 90)]
    two = chunk_documents([("d", "Eiffel", TEXT)], "sentences", n=2)
    assert [c.text for c in two] == ["The Eiffel Tower is tall. It was built in 1889!", "Is it iron? \"Yes.\"",
                                     "Dr. Who", "New para here"]
    fixed = chunk_documents([("d", "Eiffel", TEXT)], "fixed", size=4, stride=3)
    # 19 tokens; windows start at tokens 0, 3, 6, 9, 12 and 15 (the first reaching token 18)
    assert spans(fixed) == [(0, 19), (17, 32), (29, 47), (42, 60), (55, 75), (72, 90)]
    assert fixed[-1].text == "Who\n\nNew para here"
    for chunk in two + fixed:
        assert TEXT[chunk.start:chunk.end] == chunk.text and chunk.doc_id == "d"


def test_fixed_windows_stop_at_the_first_reaching_the_end() -> None:
    text = " ".join(f"w{i}" for i in range(10))  # 10 tokens
    got = [c.text.split() for c in chunk_documents([("d", "", text)], "fixed", size=4, stride=3)]
    assert got == [["w0", "w1", "w2", "w3"], ["w3", "w4", "w5", "w6"], ["w6", "w7", "w8", "w9"]]
    default = chunk_documents([("d", "", text)], "fixed")
    assert len(default) == 1 and default[0].text == text


def test_original_and_empty_documents_are_counted() -> None:
    report = ChunkingReport()
    docs = [("a", "A", "  Whole text.\n"), ("b", "B", " \n\t"), ("c", "C", "")]
    got = chunk_documents(docs, "original", report=report)
    assert [(c.doc_id, c.start, c.text) for c in got] == [("a", 0, "  Whole text.\n")]
    assert report == ChunkingReport(documents=3, empty_documents=2, chunks=1)


def test_recursive_pieces_are_exact_slices_even_with_repeats() -> None:
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    from convrag.synthesis.curation.chunking import SEPARATORS

    text = ("Alpha beta gamma. " * 6 + "\n\n" + "Delta epsilon, zeta eta theta.\nIota kappa. " * 4).strip()
    got = chunk_documents([("d", "", text)], "recursive", chunk_size=40, chunk_overlap=12)
    expected = RecursiveCharacterTextSplitter(separators=list(SEPARATORS["paper"]), chunk_size=40,
                                              chunk_overlap=12).split_text(text)
    assert [c.text for c in got] == expected and len(got) > 5
    starts = [c.start for c in got]
    assert starts == sorted(set(starts))  # pieces advance
    for chunk in got:
        assert text[chunk.start:chunk.end] == chunk.text and len(chunk.text) <= 40
    assert any(b.start < a.end for a, b in zip(got, got[1:], strict=False))  # the overlap shows in the offsets
    whole = chunk_documents([("d", "", text)], "recursive")  # default 1024 characters: one piece
    assert [c.text for c in whole] == [text]


def test_chunking_ids_are_canonical_and_chunk_ids_stable() -> None:
    assert chunking_id("fixed", {"size": 64}) == chunking_id("fixed", {"stride": 64, "size": 64}) \
        == "fixed(size=64,stride=64)"
    assert chunking_id("recursive", {"chunk_overlap": 0}) == chunking_id("recursive", {}) \
        == "recursive(chunk_overlap=0,chunk_size=1024,separators=paper)"
    assert chunking_id("original") == "original"
    assert chunking_id("sentences", {"n": 2}) != chunking_id("sentences")
    a = chunk_documents([("d", "", TEXT)], "fixed", size=64)
    b = chunk_documents([("d", "", TEXT)], "fixed", stride=64, size=64)
    assert [c.chunk_id for c in a] == [c.chunk_id for c in b]
    assert re.fullmatch(r"d#[0-9a-f]{8}:0-90", a[0].chunk_id)
    other = chunk_documents([("d", "", TEXT)], "original")
    assert spans(other) == spans(a) and other[0].chunk_id != a[0].chunk_id  # same span, other chunking


def test_bad_strategies_and_parameters_name_what_is_allowed() -> None:
    with pytest.raises(ChunkingError, match="unknown chunking strategy 'semantic'; allowed: original, recursive, "
                                            "sentences, fixed"):
        chunk_documents([], "semantic")
    with pytest.raises(ChunkingError, match=r"'fixed': unknown parameter\(s\) \['chunk_size'\]; allowed: size, "):
        chunk_documents([], "fixed", chunk_size=10)
    with pytest.raises(ChunkingError, match="allowed: none"):
        chunk_documents([], "original", n=2)
    for strategy, params, message in [("sentences", {"n": 0}, "n must be an integer >= 1"),
                                      ("fixed", {"size": True}, "size must be an integer"),
                                      ("fixed", {"size": 4, "stride": 5}, r"stride \(5\) must be at most size"),
                                      ("recursive", {"chunk_size": 10, "chunk_overlap": 10}, "below chunk_size"),
                                      ("recursive", {"separators": "mine"}, "separators must be")]:
        with pytest.raises(ConvragError, match=message):
            chunk_documents([("d", "", TEXT)], strategy, **params)


def test_iter_chunks_streams_and_filter_counts() -> None:
    def docs():
        yield "a", "", "One. Two. Three."
        raise AssertionError("read too far")

    first = next(iter_chunks(docs(), "sentences", n=1))
    assert first.text == "One."
    with pytest.raises(ChunkingError):  # checked at the call, not at the first chunk
        iter_chunks(docs(), "sentences", n=-1)
    chunks = [Chunk("c1", "d", 0, "x" * 10), Chunk("c2", "d", 10, "x" * 40), Chunk("c3", "d", 50, "x" * 100)]
    assert filter_chunks(chunks) == (chunks[1:], 1)  # default: at least 32 characters
    assert filter_chunks(chunks, min_chars=10, max_chars=40) == (chunks[:2], 1)
    assert filter_chunks(chunks, min_chars=0, max_chars=9) == ([], 3)


# ---------------------------------------------------------------- rewriter


REWRITES = {
    "Who designed the Eiffel Tower?": (
        "Sure! Here are some alternative searches:\n```json\n{\"queries\": [\"  who designed the eiffel  tower? \", "
        "\"Eiffel Tower architect\", \"\", \"Gustave Eiffel company tower design\", \"Eiffel Tower architect\", "
        "\"Maurice Koechlin Émile Nouguier\", \"1889 World's Fair tower engineer\"]}\n```\nHope this helps."),
    # cut off after the last entry: the LLM layer repairs the missing brackets
    "How tall is it?": "{\"queries\": [\"Eiffel Tower height in metres\", \"Eiffel Tower height in feet\"",
    "What is it made of?": "The Eiffel Tower is made of puddled iron, about 7,300 tonnes of it.",  # no JSON
}


def rewrite_responder(messages: list[Message]) -> str:
    request = user_text(messages).split("Request:\n", 1)[1].split("\n\nWrite up to", 1)[0]
    if request == "When did it open?":
        raise BackendError("HTTP 400: context length exceeded", retryable=False)
    return REWRITES[request]


QUERIES = {"q1": "Who designed the Eiffel Tower?", "q2": "How tall is it?", "q3": "When did it open?",
           "q4": "What is it made of?"}


def test_variants_cleaned_capped_and_failures_counted(tmp_path: Path) -> None:
    backend = FakeBackend(responder=rewrite_responder)
    rewriter = QueryRewriter(make_llm(backend, tmp_path), n_queries=3)
    got = rewriter.variants(QUERIES)
    assert got == {"q1": ["Who designed the Eiffel Tower?", "Eiffel Tower architect",
                          "Gustave Eiffel company tower design", "Maurice Koechlin Émile Nouguier"],
                   "q2": ["How tall is it?", "Eiffel Tower height in metres", "Eiffel Tower height in feet"],
                   "q3": ["When did it open?"], "q4": ["What is it made of?"]}
    assert rewriter.failures == {"unparseable": 1, "call_failed": 1}
    report = rewriter.report()
    # q1 and q2 one call each, q3 one failed call, q4 three (two re-asks)
    assert (report["requests"], report["failed"], report["calls"], report["structured_retries"]) == (4, 2, 6, 2)
    assert report["prompt_tokens"] == rewriter.llm.report.prompt_tokens > 0
    assert "up to 3 search queries" in user_text(backend.calls[0]["messages"])
    again = QueryRewriter(make_llm(FakeBackend(responder=rewrite_responder), tmp_path), n_queries=3)
    assert again.variants({"q1": QUERIES["q1"]}) == {"q1": got["q1"]}
    assert (again.report()["calls"], again.report()["cache_hits"]) == (0, 1)  # answered from the cache


def test_clean_variants_rules() -> None:
    assert clean_variants("A b", ["a  B", " c ", 3, None, "C", "d", "e"], 2) == ["A b", "c", "d"]
    assert clean_variants("A b", [], 4) == ["A b"]


def test_retrieve_fuses_variant_lists_with_rrf(tmp_path: Path) -> None:
    lists = {"Who designed the Eiffel Tower?": ["a", "b", "z"], "Eiffel Tower architect": ["c", "a", "z"],
             "Gustave Eiffel company tower design": ["b", "f"], "Maurice Koechlin Émile Nouguier": [],
             "What is it made of?": ["h1", "h2", "h3"]}
    calls = []

    def search(queries, depth):
        calls.append((dict(queries), depth))
        return {qid: lists[text][:depth] for qid, text in queries.items() if lists[text]}

    rewriter = QueryRewriter(make_llm(FakeBackend(responder=rewrite_responder), tmp_path), n_queries=3,
                             depth_each=2)
    got = rewriter.retrieve(search, {"q1": QUERIES["q1"], "q4": QUERIES["q4"]}, k=3)
    # a: 1/61 + 1/62, b: 1/62 + 1/61 (tie: greater id first), c: 1/61, f: 1/62
    assert got == {"q1": ["b", "a", "c"], "q4": ["h1", "h2"]}  # q4's rewrite failed: its own list
    assert len(calls) == 1 and calls[0][1] == 2
    assert calls[0][0] == {f"q1{SEPARATOR}0": QUERIES["q1"], f"q1{SEPARATOR}1": "Eiffel Tower architect",
                           f"q1{SEPARATOR}2": "Gustave Eiffel company tower design",
                           f"q1{SEPARATOR}3": "Maurice Koechlin Émile Nouguier", f"q4{SEPARATOR}0": QUERIES["q4"]}
    assert rewriter.describe()["rrf_k"] == 60 and rewriter.failures == {"unparseable": 1}


# ---------------------------------------------------------------- listwise reranker


def test_windows_move_bottom_to_top() -> None:
    assert windows(30, 20, 10) == [(10, 30), (0, 20)]
    assert windows(25, 20, 10) == [(5, 25), (0, 15)]  # the top is always covered
    assert windows(5, 20, 10) == [(0, 5)]
    assert windows(5, 3, 2) == [(2, 5), (0, 3)]
    assert windows(1, 20, 10) == [] and windows(0, 20, 10) == []


def test_apply_order_is_lenient() -> None:
    ids = ["a", "b", "c", "d"]
    assert apply_order(ids, [3, "[1]", 3, 9, 0, True]) == (["c", "a", "b", "d"], "incomplete_order")
    assert apply_order(ids, [4, 3, 2, 1]) == (["d", "c", "b", "a"], "complete")
    assert apply_order(ids, ["x", 7]) == (ids, "unusable_order")


SCORES = {"d1": 1, "d2": 5, "d3": 2, "d4": 4, "d5": 3, "d6": 9}


def passages_of(messages: list[Message]) -> list[str]:
    return re.findall(r"^\[\d+\] (.*)$", user_text(messages), flags=re.M)


def rerank_responder(messages: list[Message]) -> str:
    text = user_text(messages)
    shown = passages_of(messages)
    if "Request:\nbest docs" in text:  # rank by the score written in each passage
        scores = [int(re.search(r"score (\d+)", p).group(1)) for p in shown]
        order = sorted(range(1, len(shown) + 1), key=lambda i: -scores[i - 1])
        return "Ranking by usefulness:\n" + "{\"order\": " + str(order) + "}"
    if "Request:\nrivers" in text:
        return "Passage [2] is clearly the most relevant, then [1], then [3]."
    if "Request:\nlakes" in text:
        return "{\"order\": [3, \"2\", 3, 7]}"
    return "{\"order\": [0, 9]}"


def test_listwise_sliding_windows_with_scripted_replies(tmp_path: Path) -> None:
    texts = {d: f"Document {d}   with\nscore {s}. " + "filler " * 20 for d, s in SCORES.items()}
    texts.update({f"{p}{i}": f"{p} passage {i}" for p in "exy" for i in (1, 2, 3)})
    queries = {"q1": "best docs", "q2": "rivers", "q3": "lakes", "q4": "mountains"}
    rankings = {"q1": ["d1", "d2", "d3", "d4", "d5", "d6"], "q2": ["e1", "e2", "e3"],
                "q3": ["x1", "x2", "x3", "x1"], "q4": ["y1", "y2", "y3"]}
    backend = FakeBackend(responder=rerank_responder)
    reranker = ListwiseReranker(make_llm(backend, tmp_path), window=3, stride=2, doc_chars=30)
    got = reranker.rerank(queries, rankings, texts, depth=5)
    # q1 head d1..d5: window [2, 5) d3 d4 d5 -> d4 d5 d3; window [0, 3) d1 d2 d4 -> d2 d4 d1; d6 stays below
    assert got == {"q1": ["d2", "d4", "d1", "d5", "d3", "d6"], "q2": ["e1", "e2", "e3"],
                   "q3": ["x3", "x2", "x1"], "q4": ["y1", "y2", "y3"]}
    assert reranker.failures == {"unparseable": 1, "unusable_order": 1}
    report = reranker.report()
    assert (report["windows"], report["incomplete_order"], report["requests"], report["failed"]) == (5, 1, 5, 2)
    assert report["calls"] == 7  # q2's reply is read three times (two re-asks)
    first_q1 = [c for c in backend.calls if "best docs" in user_text(c["messages"])]
    assert [p.split()[1] for p in passages_of(first_q1[1]["messages"])] == ["d1", "d2", "d4"]  # after window 1
    assert passages_of(first_q1[0]["messages"])[0] == "Document d3 with score 2. fill"  # collapsed, 30 chars
    assert reranker.cost_rank == 2 and reranker.describe()["window"] == 3


def test_listwise_input_errors(tmp_path: Path) -> None:
    reranker = ListwiseReranker(make_llm(FakeBackend(), tmp_path))
    with pytest.raises(RerankError, match="query 'q1': 1 ranked id"):
        reranker.rerank({"q1": "x"}, {"q1": ["a", "b"]}, {"a": "A"})
    with pytest.raises(RerankError, match="no query text"):
        reranker.rerank({}, {"q1": ["a"]}, {"a": "A"})
    assert reranker.rerank({"q1": "x"}, {"q1": ["a", "b"]}, {"a": "A"}, depth=1) == {"q1": ["a", "b"]}
    with pytest.raises(RerankError, match="stride <= window"):
        ListwiseReranker(reranker.llm, window=4, stride=5)


# ---------------------------------------------------------------- cross-encoder


WORDS = ["the", "river", "flows", "into", "black", "sea", "lake", "is", "deep", "and", "cold", "mountain", "high"]


def tiny_cross_encoder(path: Path, bias: float | None = None) -> str:
    import torch
    from tokenizers import Tokenizer, pre_tokenizers, processors, trainers
    from tokenizers import models as tok_models
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    tok = Tokenizer(tok_models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([" ".join(WORDS)], trainers.WordLevelTrainer(
        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", model_max_length=64)
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=fast.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, num_labels=1))
    if bias is not None:
        with torch.no_grad():
            model.classifier.weight.zero_()
            model.classifier.bias.fill_(bias)
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return str(path)


def reference_scores(path: str, query: str, texts: list[str]) -> list[float]:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    with torch.no_grad():
        enc = tok([query] * len(texts), texts, padding=True, truncation=True, return_tensors="pt")
        return model(**enc).logits[:, 0].tolist()


def test_cross_encoder_follows_its_scores(tmp_path: Path) -> None:
    path = tiny_cross_encoder(tmp_path / "ce")
    texts = {"a": "the river flows into the black sea", "b": "the lake is deep and cold", "c": "mountain high",
             "d": "black sea", "e": "cold river", "f": "the the the"}
    ranking = ["a", "b", "c", "d", "e", "f"]
    scores = reference_scores(path, "river sea", [texts[c] for c in ranking[:5]])
    assert len(set(scores)) == 5  # a random head separates them
    reranker = CrossEncoderReranker(path, batch_size=2, device="cpu")
    got = reranker.rerank({"q": "river sea"}, {"q": ranking}, texts, depth=5)
    expected = [c for _, c in sorted(zip(scores, ranking[:5], strict=True), key=lambda p: -p[0])]
    assert got == {"q": expected + ["f"]} and expected != ranking[:5]
    assert reranker.cost_rank == 1 and reranker.describe()["batch_size"] == 2


def test_cross_encoder_ties_keep_previous_rank_and_bad_paths(tmp_path: Path) -> None:
    flat = CrossEncoderReranker(tiny_cross_encoder(tmp_path / "flat", bias=0.5), device="cpu")
    texts = {c: f"the river {c}" for c in "abcd"}
    got = flat.rerank({"q1": "river", "q2": "sea"}, {"q1": ["c", "a", "b"], "q2": ["d", "b"]}, texts)
    assert got == {"q1": ["c", "a", "b"], "q2": ["d", "b"]}
    with pytest.raises(RerankError, match="no model folder"):
        CrossEncoderReranker(str(tmp_path / "nope"))
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text('{"hidden": 3}')
    with pytest.raises(RerankError, match="cannot load the model") as info:
        CrossEncoderReranker(str(tmp_path / "odd"))
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------- real local model


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_rewriter_and_listwise_through_the_default_local_model(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("llama_cpp", reason="the default backend needs llama-cpp-python")
    from convrag.llm import get_llm

    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    llm = get_llm("default", cache=tmp_path)
    rewriter = QueryRewriter(llm, n_queries=2)
    got = rewriter.variants({"q": "Where does the Danube end?"})["q"]
    assert got[0] == "Where does the Danube end?" and 1 <= len(got) <= 3
    assert all(isinstance(v, str) and v.strip() == v and v for v in got)
    failed = sum(rewriter.failures.values())
    assert rewriter.report()["requests"] == 1 and failed in (0, 1)
    if failed:
        assert got == ["Where does the Danube end?"]
    texts = {"a": "The Danube rises in the Black Forest.", "b": "Basalt is a volcanic rock.",
             "c": "The Danube empties into the Black Sea in Romania."}
    reranker = ListwiseReranker(llm, window=3, stride=2)
    order = reranker.rerank({"q": "Where does the Danube end?"}, {"q": ["a", "b", "c"]}, texts)["q"]
    assert sorted(order) == ["a", "b", "c"]
    assert reranker.report()["windows"] == 1 and reranker.report()["failed"] <= 1
