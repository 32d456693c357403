"""``dual:QUERY_MODEL,CONTEXT_MODEL``: two tiny BERT models built here (random weights, fixed seeds, a small
vocabulary; nothing downloaded). Scores are checked against a hand computation with transformers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from convrag.cli import main
from convrag.core.errors import ConvragError
from convrag.retrievers import RetrieverSpecError, get_retriever, split_specs
from convrag.retrievers.dual import role_lines
from convrag.retrievers.query_text import FITS, TRIMMED, QueryText
from convrag.retrievers.strategies import Turn, dialogue_text, history_text

CORPUS = {
    "nitrogen": "Liquid nitrogen boils at 77 kelvin at atmospheric pressure.",
    "eiffel": "The Eiffel Tower in Paris was built for the 1889 World's Fair.",
    "louvre": "The Louvre in Paris is the most visited art museum.",
    "helium": "Liquid helium cools superconducting magnets.",
    "bread": "A recipe for banana bread with walnuts.",
}
TURN = Turn(
    qid="c1-3",
    query="How tall is it?",
    history=(("user", "Who built the Eiffel Tower in Paris?"), ("assistant", "Gustave Eiffel's company built it.")),
)
DRAGON_QUERY = ("user: Who built the Eiffel Tower in Paris?\nagent: Gustave Eiffel's company built it.\n"
                "user: How tall is it?")
QUERIES = {"q1": dialogue_text(TURN), "q2": QueryText([], ["When does liquid nitrogen boil?"]), "q3": "banana bread"}


def _vocab() -> list[str]:
    words = {w.strip(".,?:'").lower() for text in [*CORPUS.values(), DRAGON_QUERY] for w in text.split()}
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]
    pieces = sorted(words - {""}) + letters + [f"##{c}" for c in letters] + list(".,?':")
    return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *dict.fromkeys(pieces)]


def _tiny_bert(folder: Path, seed: int, hidden: int = 16) -> str:
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True)
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(_vocab()) + "\n", encoding="utf-8")
    BertTokenizerFast(vocab=str(vocab), do_lower_case=True).save_pretrained(folder)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(_vocab()), hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64)  # fmt: skip
    BertModel(config).eval().save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("dual")
    return _tiny_bert(root / "query", 0), _tiny_bert(root / "context", 1)


def _by_hand(folder: str, text: str, pooling: str) -> np.ndarray:
    """One text, no padding: the model's last hidden state pooled (CLS vector, or the mean over its tokens)."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        hidden = model(**tokenizer(text, return_tensors="pt")).last_hidden_state[0]
    return (hidden[0] if pooling == "cls" else hidden.mean(dim=0)).numpy().astype(np.float64)


def _expected(models: tuple[str, str], pooling: str, cosine: bool) -> dict[str, dict[str, float]]:
    texts = {"q1": DRAGON_QUERY, "q2": "user: When does liquid nitrogen boil?", "q3": "user: banana bread"}
    docs = {d: _by_hand(models[1], t, pooling) for d, t in CORPUS.items()}
    run = {}
    for qid, text in texts.items():
        q = _by_hand(models[0], text, pooling)
        scores = {d: float(q @ v / (np.linalg.norm(q) * np.linalg.norm(v)) if cosine else q @ v)
                  for d, v in docs.items()}  # fmt: skip
        run[qid] = dict(sorted(sorted(scores.items(), reverse=True), key=lambda kv: -kv[1]))  # ties: id descending
    return run


def _check(run: dict[str, dict[str, float]], expected: dict[str, dict[str, float]]) -> None:
    assert run.keys() == expected.keys()
    for qid in expected:
        assert list(run[qid]) == list(expected[qid]), qid  # same ranking
        assert np.allclose(list(run[qid].values()), list(expected[qid].values()), rtol=1e-5, atol=1e-5), qid


def test_scores_are_inner_products_of_the_two_models_cls_vectors(models, tmp_path) -> None:
    retriever = get_retriever(f"dual:{models[0]},{models[1]}", cache_dir=tmp_path, show_progress=False)
    assert (retriever.pooling, retriever.similarity) == ("cls", "dot")
    run = retriever.index(CORPUS).search(QUERIES)
    _check(run, _expected(models, "cls", cosine=False))
    pools = {q: ["louvre", "eiffel", "bread"] for q in QUERIES}
    pooled = retriever.search(QUERIES, pools=pools)
    for qid in QUERIES:
        assert pooled[qid] == pytest.approx({d: s for d, s in run[qid].items() if d in pools[qid]}, rel=1e-5)
    described = retriever.describe()  # the models by name and weights digest, never by path
    assert [described[k]["name"] for k in ("query_model", "context_model")] == ["query", "context"]
    assert all(described[k]["digest"].startswith("sha256:") for k in ("query_model", "context_model"))


def test_mean_pooling_and_cosine_similarity(models, tmp_path) -> None:
    retriever = get_retriever(f"dual:{models[0]},{models[1]}", pooling="mean", similarity="cosine",
                              cache_dir=tmp_path, show_progress=False)  # fmt: skip
    _check(retriever.index(CORPUS).search(QUERIES), _expected(models, "mean", cosine=True))
    assert np.allclose(np.linalg.norm(retriever.embeddings, axis=1), 1.0, atol=1e-5)


def test_faiss_inner_product_search_equals_brute_force(models, tmp_path) -> None:
    spec = f"dual:{models[0]},{models[1]}"
    brute = get_retriever(spec, cache_dir=tmp_path, show_progress=False).index(CORPUS).search(QUERIES, top_k=3)
    viaf = get_retriever(spec, cache_dir=tmp_path, faiss_threshold=2, show_progress=False).index(CORPUS)
    assert viaf.uses_faiss(3)
    run = viaf.search(QUERIES, top_k=3)
    for qid in QUERIES:
        assert list(run[qid]) == list(brute[qid])
        assert np.allclose(list(run[qid].values()), list(brute[qid].values()), rtol=1e-5, atol=1e-6)
    assert (Path(viaf.cache_entry) / "faiss-flat.index").is_file()


def test_corpus_vectors_are_cached_on_disk_per_setting(models, tmp_path) -> None:
    spec = f"dual:{models[0]},{models[1]}"
    first = get_retriever(spec, cache_dir=tmp_path, show_progress=False).index(CORPUS)
    again = get_retriever(spec, cache_dir=tmp_path, show_progress=False).index(CORPUS)
    assert (first.cache_status, again.cache_status) == ("encoded", "reused (disk)")
    assert first.cache_entry == again.cache_entry and np.array_equal(first.embeddings, again.embeddings)
    meta = json.loads((Path(first.cache_entry) / "meta.json").read_text())
    assert (meta["encoder"], meta["pooling"], meta["normalize"]) == ("transformers", "cls", "none")
    cosine = get_retriever(spec, similarity="cosine", cache_dir=tmp_path, show_progress=False).index(CORPUS)
    assert cosine.cache_status == "encoded" and cosine.cache_entry != first.cache_entry
    off = get_retriever(spec, cache=False, show_progress=False).index(CORPUS)
    assert (off.cache_status, off.cache_entry) == ("encoded", None)


def test_conversations_are_written_as_user_and_agent_lines() -> None:
    assert str(role_lines(dialogue_text(TURN))) == DRAGON_QUERY  # User:/Agent: lines
    assert str(role_lines(history_text(TURN))) == DRAGON_QUERY  # Q:/A: lines
    assert str(role_lines("How tall is it?")) == "user: How tall is it?"
    questions = QueryText(["Who built the Eiffel Tower?", "When?"], ["How tall is it?"])  # MTRAG's questions view
    assert str(role_lines(questions)) == "user: Who built the Eiffel Tower?\nuser: When?\nuser: How tall is it?"
    multiline = QueryText(["Q: first line", "second line", "A: answer"], ["next?", "Reasoning: about height"])
    expected = "user: first line\nsecond line\nagent: answer\nuser: next?\nReasoning: about height"
    assert str(role_lines(multiline)) == expected  # continuation lines and appended parts kept as they are


def test_long_conversations_lose_their_oldest_turns(models, tmp_path) -> None:
    history = tuple(("user" if i % 2 == 0 else "assistant", f"Paris tower question number {i}") for i in range(30))
    turn = Turn(qid="long", query="When does liquid nitrogen boil?", history=history)
    retriever = get_retriever(f"dual:{models[0]},{models[1]}", cache_dir=tmp_path, show_progress=False)
    retriever.index(CORPUS).search({"long": dialogue_text(turn), "short": "banana bread"})
    assert retriever.fit_stats == {FITS: 1, TRIMMED: 1, "tail cut": 0}
    fitted = retriever.query_texts([dialogue_text(turn)])[0]
    assert fitted.endswith("user: When does liquid nitrogen boil?") and "number 0\n" not in fitted
    assert retriever.count_tokens(fitted) <= retriever.limit("query") == 64
    plain = get_retriever(f"dual:{models[0]},{models[1]}", query_format="text", fit_queries=False, cache=False)
    assert plain.query_texts([dialogue_text(TURN)]) == [str(dialogue_text(TURN))] and plain.fit_stats == {}


def test_bad_specs_are_one_line_errors(models, tmp_path) -> None:
    (tmp_path / "no-config").mkdir()
    cases = [
        ("dual", {}, "dual needs two models"),
        (f"dual:{models[0]}", {}, "dual needs two models"),
        (f"dual:{models[0]},{models[1]},{models[1]}", {}, "dual needs two models"),
        (f"dual:{models[0]},{tmp_path / 'missing'}", {}, "context model"),
        (f"dual:./nowhere,{models[1]}", {}, "query model './nowhere': no such folder"),
        (f"dual:{tmp_path / 'no-config'},{models[1]}", {}, "has no config.json"),
        (f"dual:{models[0]},{models[1]}", {"pooling": "max"}, "pooling must be one of cls, mean"),
        (f"dual:{models[0]},{models[1]}", {"similarity": "l2"}, "similarity must be one of dot, cosine"),
    ]
    for spec, options, message in cases:
        with pytest.raises(ConvragError) as err:
            get_retriever(spec, **options)
        assert message in str(err.value) and "\n" not in str(err.value), spec
    with pytest.raises(RetrieverSpecError):
        get_retriever(f"dual:{models[0]},")
    with pytest.raises(ConvragError, match="cannot load model 'not-a-cached-model'") as err:
        get_retriever(f"dual:{models[0]},not-a-cached-model", cache=False).index(CORPUS)
    assert "\n" not in str(err.value)


def test_a_pair_of_different_vector_sizes_is_refused_before_encoding(models, tmp_path) -> None:
    wide = _tiny_bert(tmp_path / "wide", 2, hidden=24)
    retriever = get_retriever(f"dual:{models[0]},{wide}", cache=False)
    with pytest.raises(ConvragError) as err:
        retriever.index(CORPUS)
    assert "gives 16-d vectors and the context model" in str(err.value) and "24-d ones" in str(err.value)
    assert retriever.embeddings.size == 0  # nothing was encoded


def test_dual_takes_the_short_model_names_dense_takes() -> None:
    from convrag.retrievers.encoders import default_model_path

    retriever = get_retriever("dual:all-MiniLM-L6-v2,all-MiniLM-L6-v2", cache=False)
    assert retriever.query_model == retriever.context_model == default_model_path()


def test_split_specs_keeps_the_two_models_of_a_dual_spec() -> None:
    assert split_specs("bm25, dual:q/a,c/b ,dense") == ["bm25", "dual:q/a,c/b", "dense"]
    assert split_specs("dual:q,c,dual:x,y") == ["dual:q,c", "dual:x,y"]
    assert split_specs("random,bm25") == ["random", "bm25"]
    assert split_specs("rrf:bm25+dual:q,c,bm25") == ["rrf:bm25+dual:q,c", "bm25"]


def test_evaluate_runs_a_dual_encoder_on_stratrag(models, stratrag_first30, tmp_path, monkeypatch, capsys) -> None:
    """Plumbing only: random tiny models, no claim about quality."""
    monkeypatch.setenv("CONVRAG_EMBEDDINGS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "results"
    spec = f"dual:{models[0]},{models[1]}"
    assert main(["evaluate", str(stratrag_first30), "--retrievers", f"bm25,{spec}", "--out", str(out),
                 "--no-progress", "--device", "cpu", "--bootstrap", "0", "--dense-option", "max_seq_length=32"]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    system = "dual:query,context"  # the models by their folders' names, never their paths
    config = results["retriever_configs"][system]
    assert (config["class"], config["pooling"], config["similarity"], config["query_format"]) == (
        "DualEncoderRetriever", "cls", "dot", "roles")
    assert config["max_seq_length"] == config["query_fitting"]["max_tokens"] == 32  # --dense-option reaches it
    assert sum(config["query_fitting_counts"]["baseline"].values()) == results["systems"][system]["overall"]["MRR"]["n"]
    assert [p.name for p in (out / "runs").iterdir() if p.name.startswith("dual")]  # its TREC run file
    assert len(list((tmp_path / "cache").iterdir())) == 1  # the corpus vectors went to the cache the env names
    assert system in capsys.readouterr().out


def test_dual_is_a_component_of_rrf(models, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CONVRAG_EMBEDDINGS_CACHE", str(tmp_path))
    spec = f"rrf:bm25+dual:{models[0]},{models[1]}"
    fused = get_retriever(split_specs(f"{spec},bm25")[0], show_progress=False).index(CORPUS)
    assert [type(c).__name__ for c in fused.components] == ["BM25Retriever", "DualEncoderRetriever"]
    assert set(fused.search(QUERIES)["q2"]) == set(CORPUS)
