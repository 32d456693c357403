"""Quality filtering of curated passages: scorers and a datatrove filter step.

A scorer (:data:`SPEC_FORMS`) maps texts to metadata columns and decides, from one text's columns, whether to keep it:

* ``heuristic`` (offline default; ours): datatrove's Gopher, then FineWeb quality rules; column ``heuristic_quality``
  = ``"pass"`` or the first failing rule's name. The ``authors`` profile (default) turns off for chunks two rules
  that judge page layout rather than text (:func:`profile_options`); ``convrag`` keeps both.
* ``fineweb-edu:MODEL`` (MTR-Suite: ``nvidia/nemocurator-fineweb-nemotron-4-edu-classifier``), a regression
  classifier: column ``edu_quality`` = ``logits[:, 0]``; kept when strictly greater than the threshold (1.9).
* ``nvidia-quality:MODEL`` (MTR-Suite: ``nvidia/quality-classifier-deberta``), a 3-class classifier: column
  ``naive_quality`` = the argmax class's label from ``id2label`` (e.g. ``"High"``); kept when the label is in
  ``keep`` (``("High",)``).

MTR-Suite's final filter is the two classifiers combined (``quality=fineweb-edu:...,nvidia-quality:...``: both must
keep a text; not the default, as it needs the two models). Classifier inputs are truncated to ``max_length`` (512)
tokens; models load lazily, so scorers and :class:`QualityFilter` pickle cheaply (datatrove ships steps to workers).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.filters import FineWebQualityFilter, GopherQualityFilter
from datatrove.pipeline.writers.disk_base import DiskWriter
from datatrove.utils.batching import batched
from datatrove.utils.typeshelper import StatHints

from convrag.core.errors import ConvragError
from convrag.synthesis.curation.quality_models import FineWebEduScorer, NvidiaQualityScorer

PROFILES = ("authors", "convrag")
#: datatrove rule settings that turn off the two page-layout rules for chunks (see :func:`profile_options`)
CHUNK_EXEMPT: dict[str, dict[str, Any]] = {"gopher": {"max_non_alpha_words_ratio": None},
                                           "fineweb": {"line_punct_thr": 0.0}}
SPEC_FORMS = "heuristic, fineweb-edu:PATH_OR_NAME, nvidia-quality:PATH_OR_NAME (comma-separated to combine)"


@runtime_checkable
class QualityScorer(Protocol):
    """Scores texts into metadata columns and turns one text's columns into a keep/drop verdict."""

    name: str

    def score(self, texts: list[str]) -> list[dict[str, Any]]:
        """One dict of metadata columns per text, in input order."""
        ...

    def verdict(self, scores: dict[str, Any]) -> str | None:
        """``None`` to keep the text, else a short snake_case drop reason."""
        ...


class HeuristicScorer:
    """Datatrove's Gopher then FineWeb quality rules; column ``heuristic_quality`` = "pass" or the failing rule.

    ``gopher`` / ``fineweb``: ``True`` for datatrove's default thresholds, ``False`` to skip that filter, or a
    dict of keyword arguments for ``GopherQualityFilter`` / ``FineWebQualityFilter``. A blank text fails as
    ``"empty"`` whichever filters run.
    """

    name = "heuristic"
    column = "heuristic_quality"

    def __init__(self, gopher: bool | dict[str, Any] = True, fineweb: bool | dict[str, Any] = True) -> None:
        self.filters = [
            f for f in (_make_filter(GopherQualityFilter, "gopher", gopher),
                        _make_filter(FineWebQualityFilter, "fineweb", fineweb)) if f is not None
        ]

    def _rule(self, text: str) -> str:
        if not text.strip():
            return "empty"
        doc = Document(text=text, id="")
        for step in self.filters:
            result = step.filter(doc)  # True, or (False, rule name)
            if isinstance(result, tuple):
                return result[1]
        return "pass"

    def score(self, texts: list[str]) -> list[dict[str, Any]]:
        """``{"heuristic_quality": "pass" | rule}`` per text."""
        return [{self.column: self._rule(text)} for text in texts]

    def verdict(self, scores: dict[str, Any]) -> str | None:
        """Keep on "pass"; otherwise ``"heuristic:<rule>"``."""
        rule = scores[self.column]
        return None if rule == "pass" else f"heuristic:{rule}"


def _make_filter(cls: type, option: str, setting: bool | dict[str, Any] | None) -> Any:
    if setting is None or setting is False:
        return None
    kwargs = {} if setting is True else setting
    if not isinstance(kwargs, dict):
        raise ConvragError(f"heuristic option {option} must be true, false or a dict of {cls.__name__} arguments")
    try:
        return cls(**kwargs)
    except TypeError as err:
        raise ConvragError(f"heuristic option {option}: {err}") from err


class CombinedScorer:
    """Several scorers at once: their columns merged; the verdict is the first scorer's drop reason."""

    def __init__(self, scorers: Sequence[QualityScorer]) -> None:
        self.scorers = list(scorers)
        self.name = ",".join(s.name for s in self.scorers)

    def score(self, texts: list[str]) -> list[dict[str, Any]]:
        """Every scorer's columns per text, merged in scorer order."""
        merged: list[dict[str, Any]] = [{} for _ in texts]
        for scorer in self.scorers:
            for row, cols in zip(merged, scorer.score(texts), strict=True):
                row.update(cols)
        return merged

    def verdict(self, scores: dict[str, Any]) -> str | None:
        """The first non-``None`` verdict of the scorers, in order."""
        return next((r for s in self.scorers if (r := s.verdict(scores)) is not None), None)


_OPTIONS = {
    "heuristic": ("gopher", "fineweb"),
    "fineweb-edu": ("threshold", "batch_size", "max_length", "device", "dtype"),
    "nvidia-quality": ("keep", "batch_size", "max_length", "device", "dtype"),
}
_MODEL_SCORERS = {"fineweb-edu": FineWebEduScorer, "nvidia-quality": NvidiaQualityScorer}


def profile_options(spec: str, options: dict[str, Any] | None, profile: str = "authors") -> dict[str, Any]:
    """The quality options ``profile`` implies for ``spec``: under ``authors``, a spec with ``heuristic`` gets
    :data:`CHUNK_EXEMPT` for each of ``gopher`` / ``fineweb`` the options do not set (a dict given is merged over
    it; ``true`` / ``false`` given win whole, so ``true`` is datatrove's defaults); ``convrag`` (our earlier
    reading) and the classifier specs: the options unchanged.

    The two rules :data:`CHUNK_EXEMPT` turns off judge web-page layout rather than text: FineWeb's "at least 12% of
    lines end in punctuation" (a chunk is one line or a few, cut mid-sentence by the splitter) and Gopher's "at
    least 80% of words hold a letter" (datatrove counts every comma and bracket as a word)."""
    if profile not in PROFILES:
        raise ConvragError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    out = dict(options or {})
    if profile == "convrag" or "heuristic" not in [p.strip() for p in spec.split(",")]:
        return out
    for name, exempt in CHUNK_EXEMPT.items():
        given = out.get(name)
        if given is None:
            out[name] = dict(exempt)
        elif isinstance(given, dict):
            out[name] = {**exempt, **given}
    return out


def scorer_from_spec(spec: str = "heuristic", options: dict[str, Any] | None = None) -> QualityScorer:
    """Build a scorer from ``SPEC_FORMS``; several comma-separated specs give a :class:`CombinedScorer`.

    ``options`` is one flat dict; each scorer takes the keys it knows (``_OPTIONS``); a key no scorer in the
    spec takes is an error. Model paths may not contain commas.
    """
    options = dict(options or {})
    parts = [p.strip() for p in spec.split(",")]
    if not any(parts):
        parts = ["heuristic"]
    scorers: list[QualityScorer] = []
    for part in parts:
        kind, _, model = part.partition(":")
        kind, model = kind.strip(), model.strip()
        if kind == "heuristic" and not model:
            scorers.append(HeuristicScorer(**{k: options[k] for k in _OPTIONS[kind] if k in options}))
        elif kind in _MODEL_SCORERS and model:
            kwargs = {k: options[k] for k in _OPTIONS[kind] if k in options}
            scorers.append(_MODEL_SCORERS[kind](model, **kwargs))
        else:
            raise ConvragError(f"unknown quality scorer {part!r}; use {SPEC_FORMS}")
    names = [s.name for s in scorers]
    if len(set(names)) != len(names):
        raise ConvragError(f"quality scorer spec {spec!r} names a scorer twice")
    known = {k for name in names for k in _OPTIONS[name]}
    if unknown := sorted(set(options) - known):
        raise ConvragError(f"quality option(s) {', '.join(unknown)} not used by {spec!r}; "
                           f"accepted: {', '.join(sorted(known))}")
    return scorers[0] if len(scorers) == 1 else CombinedScorer(scorers)


class QualityFilter(PipelineStep):
    """Datatrove filter step: score documents in batches, store the columns in ``doc.metadata``, drop by verdict.

    Stats: ``total``, ``kept``, ``dropped`` and ``dropped:<reason>`` per document; ``batches`` per batch.
    Dropped documents go to ``exclusion_writer`` (if given) with their reason in ``metadata["filter_reason"]``.
    """

    name = "quality filter"
    type = "🔻 - FILTER"

    def __init__(self, scorer: QualityScorer, batch_size: int = 64, exclusion_writer: DiskWriter | None = None):
        super().__init__()
        if batch_size < 1:
            raise ConvragError("quality filter batch_size must be >= 1")
        self.scorer, self.batch_size, self.exclusion_writer = scorer, batch_size, exclusion_writer

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        """Yield the kept documents of ``data`` with their score columns added to ``metadata``."""
        if data is None:
            return
        with self.exclusion_writer if self.exclusion_writer else contextlib.nullcontext() as writer:
            for batch in batched(data, self.batch_size):
                self.stat_update("batches")
                with self.track_time("batch"):
                    rows = self.scorer.score([doc.text for doc in batch])
                for doc, cols in zip(batch, rows, strict=True):
                    self.stat_update(StatHints.total)
                    doc.metadata.update(cols)
                    reason = self.scorer.verdict(cols)
                    if reason is None:
                        self.stat_update("kept")
                        self.update_doc_stats(doc)
                        yield doc
                        continue
                    self.stat_update(StatHints.dropped, f"dropped:{reason}")
                    if writer is not None:
                        doc.metadata["filter_reason"] = reason
                        writer.write(doc, rank)
