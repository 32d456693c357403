"""Generation scoring components without judges: ROUGE-L, BERTScore wrappers, K-Precision, harmonic mean,
answerability conditioning (every row of both variants)."""

from __future__ import annotations

import doctest
import functools
import math
import shutil
from pathlib import Path

import pytest

import convrag.metrics.generation.components as components
from convrag.metrics.generation.components import (
    BertScorer,
    ComponentError,
    condition,
    harmonic_mean,
    k_precision,
    k_precision_batch,
    needs_clarification,
    normalize_answerability,
    rb_alg,
    recall_batch,
    recall_component,
    rouge_l,
)


@functools.lru_cache(maxsize=1)
def minilm() -> BertScorer:
    return BertScorer()


def tiny_bert(folder: Path) -> Path:
    """A different BERTScore model: a 2-layer random BERT with MiniLM's vocabulary, saved locally."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=64))
    model.save_pretrained(folder)
    src = Path(minilm().model)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(src / name, folder / name)
    return folder


PAIRS = [
    ("The cat sat on the mat.", "A cat was sitting on the mat."),
    ("Paris is the capital of France", "The capital of France is Paris"),
    ("running runs ran", "run running"),
    ("", "something"),
    ("Completely different words here", "nothing in common at all"),
    ("Ten Super Bowl appearances for the Patriots.", "The New England Patriots have the most Super Bowl appearances."),
]


def test_doctests() -> None:
    failed, attempted = doctest.testmod(components)
    assert attempted > 0 and failed == 0


@pytest.mark.parametrize(("prediction", "reference"), PAIRS)
def test_rouge_l_equals_rouge_score(prediction: str, reference: str) -> None:
    from rouge_score import rouge_scorer

    expected = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False).score(reference, prediction)["rougeL"]
    assert rouge_l(prediction, reference) == expected.fmeasure


def test_rouge_l_has_no_stemming() -> None:
    from rouge_score import rouge_scorer

    stemmed = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True).score("run running", "running runs ran")
    assert rouge_l("running runs ran", "run running") < stemmed["rougeL"].fmeasure


def test_harmonic_mean_rules() -> None:
    assert harmonic_mean([0.5, 0.5, 0.5]) == pytest.approx(0.5)
    assert harmonic_mean([1.0, 0.5]) == pytest.approx(2 / 3)
    assert harmonic_mean([0.2, 0.4, 0.8]) == pytest.approx(3 / (5 + 2.5 + 1.25))
    assert harmonic_mean([0.0, 0.9, 0.9]) == 0.0
    assert harmonic_mean([0.9, 0.9, 0.0]) == 0.0
    assert harmonic_mean([-0.1, 0.9]) == 0.0
    assert math.isnan(harmonic_mean([math.nan, 0.5]))
    # one value is itself exactly; 1 / (1 / x) is not (this x came from a BERTScore run on an AVX-512 CPU)
    x = 0.37505218662682643
    assert 1 / (1 / x) != x and harmonic_mean([x]) == x
    with pytest.raises(ComponentError, match="no values"):
        harmonic_mean([])
    # the official 3-term formula 3abc / (ab + ac + bc)
    a, b, c = 0.7, 0.3, 0.9
    assert rb_alg(a, b, c) == pytest.approx(3 * a * b * c / (a * b + a * c + b * c))
    assert rb_alg(0.7, 0.0, 0.9) == 0.0


def test_recall_component() -> None:
    assert recall_component(1.0) == 1.0 and recall_component(-1.0) == 0.0 and recall_component(0.6) == 0.8


# --- conditioning -----------------------------------------------------------------------------------------------
# (answerability, idk, clarification, expected mtrag-un, expected semeval) for raw = 0.42
ROWS = [
    ("UNDERSPECIFIED", 0.0, 1.0, 1.0, 0.42),
    ("UNDERSPECIFIED", 0.0, 0.0, 0.0, 0.42),
    ("UNDERSPECIFIED", 1.0, 0.5, 0.0, 0.0),
    ("UNDERSPECIFIED", 1.0, 1.0, 1.0, 0.0),
    ("UNANSWERABLE", 1.0, None, 1.0, 1.0),
    ("UNANSWERABLE", 0.5, None, 0.0, 0.0),
    ("UNANSWERABLE", 0.0, None, 0.0, 0.0),
    ("CONVERSATIONAL", 1.0, None, 1.0, 1.0),
    ("CONVERSATIONAL", 0.0, None, 0.0, 0.0),
    ("ANSWERABLE", 1.0, None, 0.0, 0.0),
    ("ANSWERABLE", 0.5, None, 0.42, 0.42),
    ("ANSWERABLE", 0.0, None, 0.42, 0.42),
    ("PARTIAL", 1.0, None, 0.0, 0.0),
    ("PARTIAL", 0.5, None, 0.42, 0.42),
    ("PARTIAL", 0.0, None, 0.42, 0.42),
    (None, 1.0, None, 0.0, 0.0),
    (None, 0.0, None, 0.42, 0.42),
]


@pytest.mark.parametrize(("label", "idk", "clar", "un", "semeval"), ROWS)
def test_every_conditioning_row(label, idk, clar, un, semeval) -> None:
    assert condition(0.42, label, idk, clar, "mtrag-un") == un
    assert condition(0.42, label, idk, clar, "semeval") == semeval


def test_conditioning_passes_undefined_raw_through_only_where_raw_is_used() -> None:
    assert condition(None, "ANSWERABLE", 0.0, None) is None
    assert condition(None, "ANSWERABLE", 1.0, None) == 0.0
    assert condition(None, "UNANSWERABLE", 1.0, None) == 1.0


def test_label_normalisation_and_errors() -> None:
    assert normalize_answerability(["answerable"]) == "ANSWERABLE"
    assert normalize_answerability(" Partial ") == "PARTIAL"
    assert normalize_answerability([]) is None and normalize_answerability(math.nan) is None
    assert normalize_answerability("") is None
    assert condition(0.3, ["unanswerable"], 1.0, None) == 1.0
    with pytest.raises(ComponentError, match="unknown answerability label 'MAYBE'"):
        condition(0.3, "MAYBE", 0.0, None)
    with pytest.raises(ComponentError, match="unknown conditioning variant 'mtrag'"):
        condition(0.3, "ANSWERABLE", 0.0, None, variant="mtrag")
    with pytest.raises(ComponentError, match="clarification"):
        condition(0.3, "UNDERSPECIFIED", 0.0, None, variant="mtrag-un")
    assert needs_clarification("underspecified") and not needs_clarification("UNDERSPECIFIED", "semeval")
    assert not needs_clarification("ANSWERABLE")


# --- BERTScore ----------------------------------------------------------------------------------------------------
def test_k_precision_several_passages_equals_bert_score_directly() -> None:
    from bert_score import score

    scorer = minilm()
    prediction = "The Patriots have played in ten Super Bowls, more than any other team."
    passages = ["Super Bowl LII was the Patriots' tenth Super Bowl appearance.",
                "The Pittsburgh Steelers have won six Super Bowls.",
                "Gillette Stadium is in Foxborough, Massachusetts."]
    p, _, _ = score([prediction] * 3, passages, model_type=scorer.model, num_layers=6, lang="en")
    expected = (max(float(x) for x in p) + 1) / 2
    assert k_precision(prediction, passages, scorer) == pytest.approx(expected, abs=1e-6)
    assert k_precision(prediction, passages[:1], scorer) == pytest.approx((float(p[0]) + 1) / 2, abs=1e-6)
    assert k_precision(prediction, [], scorer) == 0.0
    batch = k_precision_batch([prediction, "x", prediction], [passages, [], passages[1:]], scorer)
    assert batch[0] == pytest.approx(expected, abs=1e-6) and batch[1] == 0.0
    assert batch[2] == pytest.approx((max(float(x) for x in p[1:]) + 1) / 2, abs=1e-6)


def test_recall_equals_bert_score_directly() -> None:
    from bert_score import score

    scorer = minilm()
    cands, refs = [p for p, _ in PAIRS[:3]], [r for _, r in PAIRS[:3]]
    _, r, _ = score(cands, refs, model_type=scorer.model, num_layers=6, lang="en")
    assert recall_batch(cands, refs, scorer) == pytest.approx([(float(x) + 1) / 2 for x in r], abs=1e-6)


def test_bertscore_model_is_replaceable_and_recorded(tmp_path: Path) -> None:
    default = minilm()
    d = default.describe()
    assert d["num_layers"] == 6 and "MiniLM" in d["model"] and not d["rescale_with_baseline"] and not d["official"]
    pair = (["The cat sat on the mat."], ["A cat was sitting on the mat."])
    base = default.score(*pair)
    lower = BertScorer(num_layers=3)
    assert lower.describe()["num_layers"] == 3 and lower.score(*pair) != base
    other = BertScorer(str(tiny_bert(tmp_path / "tiny")))
    assert other.describe()["num_layers"] == 2 and other.describe()["model"] == "tiny"
    assert other.score(*pair)[1] != base[1]


def test_bertscore_errors() -> None:
    with pytest.raises(ComponentError, match="no rescaling baseline"):
        BertScorer(rescale_with_baseline=True)
    with pytest.raises(ComponentError, match="pass num_layers"):
        BertScorer("/nonexistent/model")
    official = BertScorer("microsoft/deberta-xlarge-mnli", rescale_with_baseline=True)
    assert official.describe()["official"] and official.num_layers == 40
    with pytest.raises(ComponentError, match="cannot load BERTScore model 'microsoft/deberta-xlarge-mnli'"):
        official.score(["a"], ["b"])
    with pytest.raises(ComponentError, match="2 candidates for 1 references"):
        minilm().score(["a", "b"], ["c"])
