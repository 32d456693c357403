"""``convrag evaluate --rerank``: a rerank stage reported as its own system (``bm25>ce``, ``bm25>llm``).

The cross-encoder is a tiny randomly initialised BERT built here (no download); the listwise reranker talks to a
local fake OpenAI-compatible server. Scores are checked against ``evaluate.load("metrics/retrieval")`` on the run
files the command writes, and the reranked order against the cross-encoder applied by hand.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from convrag.cli import main
from convrag.metrics.retrieval.trec import read_qrels, read_run
from tests.llm.test_faults import FakeServer

REPO = Path(__file__).resolve().parents[2]


def build_cross_encoder(path: Path, words: list[str]) -> str:
    """A 2-layer BERT cross-encoder (random weights, one output) with a word-level vocabulary of ``words``."""
    import torch
    from tokenizers import Tokenizer, pre_tokenizers, processors, trainers
    from tokenizers import models as tok_models
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    tok = Tokenizer(tok_models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    tok.train_from_iterator([" ".join(words)], trainers.WordLevelTrainer(vocab_size=2000, special_tokens=specials))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", model_max_length=48)
    torch.manual_seed(7)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=fast.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=48, num_labels=1))
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def cross_encoder(stratrag_first30: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    import pyarrow.parquet as pq

    words = []
    for f in sorted((stratrag_first30 / "corpus").glob("*.parquet")):
        words += " ".join(pq.read_table(f, columns=["text"]).column("text").to_pylist()).split()
    return build_cross_encoder(tmp_path_factory.mktemp("ce") / "tiny-ce", words)


def metric_means(out: Path, system_file: str, measures: list[str]) -> dict[str, dict[str, float]]:
    """Per-query scores of a written run file by ``evaluate.load("metrics/retrieval")`` against runs/qrels.trec."""
    import evaluate

    run, qrels = read_run(out / "runs" / system_file), read_qrels(out / "runs" / "qrels.trec")
    qids = sorted(qrels)
    result = evaluate.load(str(REPO / "metrics" / "retrieval")).compute(
        predictions=[[{"id": d, "score": s} for d, s in run.get(q, {}).items()] for q in qids],
        references=[[{"id": d, "grade": g} for d, g in qrels[q].items()] for q in qids],
        query_ids=qids, measures=measures, per_query=True)
    return result


def evaluate_cli(folder: Path, out: Path, *extra: str) -> dict:
    assert main(["evaluate", str(folder), "--retrievers", "bm25", "--bootstrap", "0", "--no-progress",
                 "--out", str(out), *extra]) == 0
    return json.loads((out / "results.json").read_text())


def test_cross_encoder_rerank_is_its_own_system_scored_like_its_run_and_cached(
        stratrag_first30: Path, cross_encoder: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sentence_transformers import CrossEncoder

    monkeypatch.setenv("CONVRAG_RERANK_CACHE", str(tmp_path / "cache"))
    results = evaluate_cli(stratrag_first30, tmp_path / "a", "--rerank", f"cross-encoder:{cross_encoder}@15")
    assert list(results["systems"]) == ["bm25", "bm25>ce"]
    measures = results["measures"]
    config = results["retriever_configs"]["bm25>ce"]
    assert config["first_stage"] == "bm25" and config["reranker"]["kind"] == "cross_encoder"
    counts = config["reranker"]["cache"]
    assert counts["pairs"] == 30 * 15 and 0 < counts["scored"] < counts["pairs"]  # placeholder pads repeat a pair
    assert counts["scored"] + counts["reused"] == counts["pairs"]
    for system, file in (("bm25", "bm25.trec"), ("bm25>ce", "bm25_ce.trec")):
        expected = metric_means(tmp_path / "a", file, measures)
        for m in measures:
            assert results["systems"][system]["overall"][m]["mean"] == pytest.approx(expected[m], abs=1e-12)
            for q, scores in expected["per_query"].items():
                assert results["per_query"][system][q][m] == pytest.approx(scores[m], abs=1e-12)

    # the reranked order is the cross-encoder's, applied by hand to each query's bm25 ranking (ties: bm25 rank)
    first, reranked = (read_run(tmp_path / "a" / "runs" / f) for f in ("bm25.trec", "bm25_ce.trec"))
    queries = {}
    import pyarrow.parquet as pq

    for f in sorted((stratrag_first30 / "queries").glob("validation-*.parquet")):
        table = pq.read_table(f, columns=["_id", "text"]).to_pylist()
        queries.update({r["_id"]: r["text"] for r in table})
    texts = {}
    for f in sorted((stratrag_first30 / "corpus").glob("*.parquet")):
        texts.update({r["_id"]: r["text"] for r in pq.read_table(f, columns=["_id", "text"]).to_pylist()})
    model = CrossEncoder(cross_encoder, device="cpu", local_files_only=True)
    orders = {q: sorted(sorted(r, reverse=True), key=lambda d: -r[d]) for q, r in first.items()}  # trec_eval order
    pairs = [(queries[q], texts[d]) for q, order in orders.items() for d in order]
    flat = iter(model.predict(pairs, show_progress_bar=False).tolist())
    changed = 0
    for q, order in orders.items():
        scores = [next(flat) for _ in order]
        by_hand = [order[i] for i in sorted(range(len(order)), key=lambda i: (-scores[i], i))]
        got = sorted(reranked[q], key=lambda d: -reranked[q][d])
        assert got == by_hand
        changed += got != order
    assert changed > 5  # a random cross-encoder reorders most pools

    # a rerun reads every score from the cache: predicting anything would fail
    def refuse(*args, **kwargs):
        raise AssertionError("the rerun scored pairs again")

    monkeypatch.setattr(CrossEncoder, "predict", refuse)
    again = evaluate_cli(stratrag_first30, tmp_path / "b", "--rerank", f"cross-encoder:{cross_encoder}@15")
    cache = again["retriever_configs"]["bm25>ce"]["reranker"]["cache"]
    assert cache["scored"] == 0 and cache["reused"] == cache["pairs"] == counts["pairs"]
    assert again["per_query"]["bm25>ce"] == results["per_query"]["bm25>ce"]
    assert (tmp_path / "b" / "runs" / "bm25_ce.trec").read_text() == (tmp_path / "a" / "runs" / "bm25_ce.trec"
                                                                       ).read_text()


def test_rerank_depth_leaves_the_tail_in_first_stage_order(stratrag_first30: Path, cross_encoder: str,
                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVRAG_RERANK_CACHE", "none")
    evaluate_cli(stratrag_first30, tmp_path / "o", "--rerank", f"top3=ce:{cross_encoder}@3")
    first, reranked = (read_run(tmp_path / "o" / "runs" / f) for f in ("bm25.trec", "bm25_top3.trec"))
    for q, ranking in first.items():
        order = sorted(ranking, key=lambda d: -ranking[d])
        got = sorted(reranked[q], key=lambda d: -reranked[q][d])
        assert sorted(got[:3]) == sorted(order[:3]) and got[3:] == order[3:]


@pytest.mark.parametrize("spec, message", [
    ("cross-encoder:{ce}", "end the spec with @K"),
    ("cross-encoder:{ce}@0", "end the spec with @K"),
    ("monoT5:{ce}@10", "unknown reranker 'monot5'"),
    ("cross-encoder:{missing}@10", "no model folder at"),
    ("cross-encoder@10", "give the cross-encoder"),
    ("llm:gpt4@10", "unknown LLM backend 'gpt4'"),
])  # fmt: skip
def test_bad_rerank_specs_are_one_line_exit_2_before_any_work(spec: str, message: str, stratrag_first30: Path,
                                                              cross_encoder: str, tmp_path: Path, capsys) -> None:
    value = spec.format(ce=cross_encoder, missing=tmp_path / "nope")
    code = main(["evaluate", str(stratrag_first30), "--retrievers", "bm25", "--rerank", value,
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and "\n" not in err and not (tmp_path / "out").exists()


def test_two_reranks_of_one_kind_need_names(stratrag_first30: Path, cross_encoder: str, tmp_path: Path,
                                            capsys) -> None:
    code = main(["evaluate", str(stratrag_first30), "--retrievers", "bm25", "--out", str(tmp_path / "out"),
                 "--rerank", f"ce:{cross_encoder}@5", "--rerank", f"ce:{cross_encoder}@10"])
    assert code == 2 and "name them" in capsys.readouterr().err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("form", ["spec", "--llm"])
def test_listwise_llm_rerank_through_the_llm_layer(form: str, stratrag_first30: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``llm:SPEC@K`` and ``llm@K --llm SPEC``. Replies as chat models write them: a fenced JSON object after a
    preamble, a RankGPT chain, and a refusal for one query (its window keeps the bm25 order and is counted)."""
    monkeypatch.setenv("CONVRAG_CACHE_DIR", str(tmp_path / "llm-cache"))
    refused = []

    def reply(body: dict) -> str:
        user = body["messages"][-1]["content"]
        n = len(re.findall(r"^\[\d+\] ", user, flags=re.M))
        if "Were Scott Derrickson and Ed Wood" in user:
            refused.append(1)
            return "I'm sorry, but I can't rank these passages without more context about what you need."
        backwards = list(range(n, 0, -1))
        if n % 2:
            return "Here is the ranking, most useful first:\n\n" + " > ".join(f"[{i}]" for i in backwards)
        return f'Sure! Based on the request, here is my ordering:\n```json\n{{"order": {backwards}}}\n```'

    server = FakeServer()
    server.responder = reply
    try:
        llm = f"openai:test-model@{server.url};max_retries=0;timeout=5"
        given = ["--rerank", f"llm:{llm}@4"] if form == "spec" else ["--rerank", "llm@4", "--llm", llm]
        results = evaluate_cli(stratrag_first30, tmp_path / "o", *given)
    finally:
        server.close()
    assert list(results["systems"]) == ["bm25", "bm25>llm"]
    assert "test-model" in results["llm"]["note"] and not results["llm"]["placeholder"]
    report = results["retriever_configs"]["bm25>llm"]["reranker"]["report"]
    assert refused and report["failed"] >= 1 and report["windows"] == len(results["per_query"]["bm25"])
    assert any("kept the first-stage order" in w for w in results["coverage"]["bm25>llm"]["warnings"])
    first, reranked = (read_run(tmp_path / "o" / "runs" / f) for f in ("bm25.trec", "bm25_llm.trec"))
    reversed_heads = 0
    for q, ranking in first.items():
        order = sorted(ranking, key=lambda d: -ranking[d])
        got = sorted(reranked[q], key=lambda d: -reranked[q][d])
        assert got[4:] == order[4:] and got[:4] in (order[:4][::-1], order[:4])
        reversed_heads += got[:4] == order[:4][::-1]
    assert reversed_heads == len(first) - report["failed"]


def test_score_cache_reuses_pairs_across_runs_and_skips_a_damaged_file(tmp_path: Path) -> None:
    from convrag.evaluation.rerank import CachedPredictor, ScoreCache
    from convrag.retrievers.embed import CacheWarning

    class Counting:
        def __init__(self) -> None:
            self.asked: list[list[tuple[str, str]]] = []

        def predict(self, pairs, **options):
            self.asked.append(list(pairs))
            return [float(len(q) + len(d)) for q, d in pairs]

    model = Counting()
    first = CachedPredictor(model, ScoreCache(tmp_path, {"model": "m"}))
    assert first.predict([("q", "aa"), ("q", "b"), ("q", "aa")], batch_size=4) == [3.0, 2.0, 3.0]
    assert model.asked == [[("q", "aa"), ("q", "b")]] and first.counts == {"pairs": 3, "scored": 2, "reused": 1}
    (first.cache.folder / "scores-damaged.json").write_text('{"scores": {"x": ', encoding="utf-8")
    second = CachedPredictor(model, ScoreCache(tmp_path, {"model": "m"}))
    with pytest.warns(CacheWarning, match="scores-damaged.json"):
        assert second.predict([("q", "b"), ("q", "ccc")]) == [2.0, 4.0]
    assert model.asked[1:] == [[("q", "ccc")]] and second.counts == {"pairs": 2, "scored": 1, "reused": 1}
    other = ScoreCache(tmp_path, {"model": "another"})
    assert other.folder != first.cache.folder and other.scores() == {}
    off = CachedPredictor(model, ScoreCache(None, {"model": "m"}))
    assert off.predict([("q", "b")]) == [2.0] and off.counts["scored"] == 1
