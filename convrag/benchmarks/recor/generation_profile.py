"""The two scoring profiles of RECOR-style generation evaluation, and whether a result is comparable with the
RECOR paper's generation tables (Tables 7-9, 21-26, Figure 3).

``authors`` (default) follows RECOR's public code (``experiments/generation/llm_judge.py`` and
``generate_and_evaluate.py``) wherever the paper is silent or ambiguous:

* judge: an integer 1-10 per dimension with level anchors (1-3, 4-6, 7-9, 10), shown the question, reference,
  passages (if any) and answer, not the earlier turns; a grade g becomes g / 10, so a turn's judge average is the
  sum of its grades / (10 x dimensions) (the code's formula; the paper's section 4.2.1 speaks of a 1-5 scale);
* ROUGE-L with rouge-score's Porter stemmer (``use_stemmer=True``); BERTScore F1 as :func:`authors_bertscorer` makes it;
* generator prompt (``convrag generate`` on RECOR): ``gen_recor_answer``, answer directly in 2-4 sentences.

``convrag``: 1-5 grades mapped by (g - 1) / 4, no anchors, earlier turns shown; ROUGE-L without stemming; BERTScore
on all-MiniLM-L6-v2, not rescaled; MTRAG's ``rag_answer`` generator prompt. Both profiles aggregate as the paper says
(mean within each domain, then over domains).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from convrag.core.errors import ConvragError

PROFILES = ("authors", "convrag")
DEFAULT_PROFILE = "authors"
AUTHORS_BERTSCORE_MODEL = "roberta-large"
"""bert-score's model for ``lang="en"`` (what the authors' ``BERTScorer(lang="en")`` loads), layer 17."""
AUTHORS_BERTSCORE_LAYER = 17
ANSWER_PROMPTS = {"authors": "gen_recor_answer", "convrag": "rag_answer"}
PAPER_JUDGE = "GPT-4o"
SCALE_NOTE = "RECOR's paper says 1-5, the authors' code grades 1-10: the sources disagree; this follows the code"


@dataclass(frozen=True)
class Profile:
    """How one profile judges and scores: ``top`` is the highest grade (the lowest is 1)."""

    name: str
    top: int
    anchors: bool
    history: bool
    stem: bool

    def normalise(self, grade: float) -> float:
        """A grade on 0-1: grade / 10 (authors), or (grade - 1) / 4 (convrag)."""
        return float(grade) / 10.0 if self.top == 10 else (float(grade) - 1.0) / 4.0

    @property
    def normalisation(self) -> str:
        """The scale and normalisation in words (written into the summary and the tables)."""
        if self.top == 10:
            return ("1-10 grades with level anchors, divided by 10 (1 -> 0.1, 10 -> 1); judge shown no earlier "
                    f"turns ({SCALE_NOTE}); a turn's judge average is the mean of its judged dimensions (4 in "
                    "NoRetrieval mode, 5 with passages); means are macro over domains")
        return ("1-5 grades without anchors, normalised as (s - 1) / 4 (1 -> 0, 5 -> 1); judge shown the earlier "
                "turns; a turn's judge average is the mean of its judged dimensions (4 in NoRetrieval mode, 5 with "
                "passages); means are macro over domains")


_PROFILES = {"authors": Profile("authors", 10, anchors=True, history=False, stem=True),
             "convrag": Profile("convrag", 5, anchors=False, history=True, stem=False)}


def get_profile(name: str) -> Profile:
    """The profile called ``name`` (``ConvragError`` naming the known ones otherwise)."""
    if name not in _PROFILES:
        raise ConvragError(f"unknown profile {name!r}; known: {', '.join(PROFILES)}")
    return _PROFILES[name]


def cached_offline(model: str) -> bool:
    """Whether the Hub model ``model`` is in the local Hugging Face cache (its config.json), so it loads offline."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(model, "config.json"), str)


def authors_bertscorer(available: Callable[[str], bool] = cached_offline) -> Any:
    """The authors' BERTScore, ``bert_score.BERTScorer(lang="en", rescale_with_baseline=True)`` (roberta-large,
    layer 17, rescaled with the baseline file bert-score ships, ``rescale_baseline/en/roberta-large.tsv``), when the
    model is available offline; else the bundled all-MiniLM-L6-v2 (layer 6) without rescaling (bert-score ships no
    baseline for it), whose BERT-F1 is on another scale than RECOR's Table 25 (the output says so)."""
    from convrag.metrics.generation.components import BertScorer
    from convrag.retrievers.model_record import bertscore_record

    if available(AUTHORS_BERTSCORE_MODEL):
        return BertScorer(model=AUTHORS_BERTSCORE_MODEL, num_layers=AUTHORS_BERTSCORE_LAYER,
                          rescale_with_baseline=True, record=bertscore_record(AUTHORS_BERTSCORE_MODEL))
    return BertScorer(record=bertscore_record(None))


def bertscore_matches_authors(described: Mapping[str, Any]) -> bool:
    """Whether a ``BertScorer.describe()`` is the authors' setting (roberta-large, layer 17, rescaled, English)."""
    return (described.get("model") == AUTHORS_BERTSCORE_MODEL and described.get("num_layers") == AUTHORS_BERTSCORE_LAYER
            and bool(described.get("rescale_with_baseline")) and described.get("lang", "en") == "en")


def _lexical_part(profile: Profile, lexical: Mapping[str, Any] | None) -> tuple[str, dict[str, bool | None], str]:
    """(settings words, comparability per metric, comparability words) of the lexical metrics."""
    if not lexical:
        return "no lexical metrics", {}, "Table 25 not computed"
    said, ok, verdict = [], {}, []
    metrics = lexical.get("metrics", [])
    unavailable = lexical.get("unavailable", {})
    if "rouge-l" in metrics:
        said.append("ROUGE-L " + ("stemmed" if profile.stem else "unstemmed"))
        ok["rouge-l"] = profile.stem
        verdict.append("ROUGE-L " + ("yes" if profile.stem else "no (unstemmed; the authors stem)"))
    if "meteor" in metrics:
        ok["meteor"] = None if "meteor" in unavailable else True
        verdict.append("METEOR " + ("not available" if "meteor" in unavailable else "yes"))
    if "bertscore" in metrics:
        b = lexical.get("bertscore") or {}
        said.append(f"BERT-F1 {b.get('model')} layer {b.get('num_layers')}, "
                    + ("rescaled" if b.get("rescale_with_baseline") else "not rescaled"))
        ok["bertscore"] = bertscore_matches_authors(b)
        verdict.append("BERT-F1 " + ("yes" if ok["bertscore"] else
                                     f"no (paper: {AUTHORS_BERTSCORE_MODEL} rescaled, 0.35-0.38)"))
    return "; ".join(said) or "no lexical metrics", ok, "Table 25 " + ", ".join(verdict)


def comparability(profile: Profile, recor: bool, judge: Mapping[str, Any],
                  lexical: Mapping[str, Any] | None) -> dict[str, Any]:
    """Which scale and settings were used and whether the figures are comparable with RECOR's tables:
    ``{"profile", "judge_scale", "judge_comparable", "lexical_comparable", "line"}``. The judge scores are
    comparable when the benchmark is RECOR, the profile is ``authors`` and the judge is a real model (the paper's
    judge is GPT-4o: another judge model is named in the line)."""
    if profile.top == 10:
        scale = f"judge 1-10 per dimension / 10, level anchors, no earlier turns ({SCALE_NOTE})"
    else:
        scale = "judge 1-5 per dimension as (s - 1) / 4, no anchors, earlier turns shown"
    lexical_words, lexical_ok, lexical_verdict = _lexical_part(profile, lexical)
    models = ", ".join(judge.get("models") or judge.get("judges") or [])
    if not recor:
        judge_ok, why = False, "no (this benchmark is not RECOR: the paper has no tables for it)"
        lexical_ok = dict.fromkeys(lexical_ok, False)
        lexical_verdict = ""
    elif judge.get("placeholder"):
        judge_ok, why = False, "no (placeholder judge: its figures are not measurements)"
    elif profile.top != 10:
        judge_ok, why = False, "no (not the authors' scale; --profile authors gives it)"
    else:
        judge_ok, why = True, f"yes, on the authors' scale (judge {models}; paper: {PAPER_JUDGE})"
    tables = f"judge scores (Tables 7-9, 21-24, 26, Figure 3) {why}" + (f"; {lexical_verdict}" if lexical_verdict
                                                                          else "")
    line = (f"Scoring profile {profile.name}: {scale}; {lexical_words}. Comparable with RECOR's tables: {tables}.")
    return {"profile": profile.name, "judge_scale": scale, "judge_comparable": judge_ok,
            "lexical_comparable": lexical_ok, "line": line}
