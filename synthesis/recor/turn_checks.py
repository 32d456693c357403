"""The rules of the D&V ``turns`` stage that decide what a turn keeps (RECOR section 3.2.2-3.2.3), under the two
profiles of :data:`convrag.synthesis.recor.common.PROFILES`, and the replies of the turn checks only the ``authors``
profile asks for.

* **Gold documents** (:func:`select_gold`): the scored documents at or above a cut (``authors``: the authors'
  ``apply_document_selection_with_fallback``, relative to the best score; ``convrag``: a fixed threshold).
* **Lexical distinctness** (:func:`lexical_distinctness`, the authors' ``validate_turn_diversity`` without its LLM
  part): word-overlap and repeated-phrase rules of a new turn against every earlier turn; the largest similarity
  also decides whether the LLM diversity judge is asked (above :data:`JUDGE_ABOVE`, from the third turn on).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from convrag.synthesis.recor.common import label_to_id
from convrag.synthesis.recor.turn_agents import VALUE_TYPES, DocScoresReply, Reply, document_score, squash

STAGE = "turns"
#: the share of the best score a gold document must reach under the ``authors`` profile
RELATIVE_CUT = 0.6
#: ``threshold`` when not given: the authors' floor (``documents.scoring_threshold``) and our earlier cut
DEFAULT_THRESHOLD = {"authors": 4.0, "convrag": 5.0}
#: the word similarity above which the LLM diversity judge is asked (authors: from the third turn on)
JUDGE_ABOVE = 0.25
WORD_STOPS = frozenset({"the", "a", "an", "and", "or", "but", "in", "on", "at", "to", "for", "of", "with", "by",
                        "from", "is", "are", "was", "were", "be", "been", "being"})
PHRASE_STOPS = WORD_STOPS | {"have", "has", "had", "do", "does", "did", "will", "would", "should", "could", "may",
                             "might", "must", "can", "this", "that", "these", "those", "it", "its", "they", "them",
                             "their"}


class AnswerabilityReply(Reply):
    """Whether the documents can answer a sub-question (authors' ``can_documents_answer_question``); the
    ``coverage_score`` decides."""

    can_answer: bool | None = None
    coverage_score: float = Field(ge=0, le=1, description="0.0 to 1.0")
    reason: str = Field(default="", max_length=400)
    specific_gaps: list[str] = Field(default_factory=list, max_length=10)


class FactOverlapReply(Reply):
    """How much two sets of facts say the same thing (authors' ``compute_semantic_fact_similarity``)."""

    similarity: float = Field(ge=0, le=1, description="0.0 to 1.0")
    reason: str = Field(default="", max_length=400)


def value_kind(value_type: str) -> str:
    """The diversity reply's ``value_type`` as counted: one of the prompt's types, else ``"other type"`` (``"no
    type"`` when blank)."""
    kind = squash(value_type).lower().replace(" ", "_")
    return kind if kind in VALUE_TYPES else ("other type" if kind else "no type")


def key_facts(aspect: dict[str, Any]) -> list[str]:
    """The aspect's verified facts (``supported`` true; all of them when none is marked)."""
    facts = [f for f in aspect.get("facts") or [] if str(f.get("fact") or "").strip()]
    verified = [f for f in facts if f.get("supported", True)]
    return [squash(f["fact"]) for f in (verified or facts)]


def score_rows(reply: DocScoresReply, documents: Sequence[dict[str, Any]],
               counts: Counter[str]) -> list[dict[str, Any]]:
    """One row per scored candidate, in document order: ``{doc_id, support, completeness, clarity, misleading,
    score}``; unknown and repeated labels, and candidates the reply left out, are counted."""
    by_id: dict[str, Any] = {}
    for entry in reply.document_scores:
        doc_id = label_to_id(entry.doc_id, documents)
        if doc_id is None:
            counts[f"{STAGE}: unknown document label ignored"] += 1
        elif doc_id in by_id:
            counts[f"{STAGE}: repeated document score ignored"] += 1
        else:
            by_id[doc_id] = entry
    rows = []
    for doc in documents:
        entry = by_id.get(str(doc["doc_id"]))
        if entry is None:
            counts[f"{STAGE}: document not scored"] += 1
            continue
        score = document_score(entry.support_score, entry.completeness_score, entry.clarity_score,
                               entry.misleading_score)
        rows.append({"doc_id": str(doc["doc_id"]), "support": entry.support_score,
                     "completeness": entry.completeness_score, "clarity": entry.clarity_score,
                     "misleading": entry.misleading_score, "score": score})
    return rows


def select_gold(rows: Sequence[dict[str, Any]], profile: str, threshold: float) -> tuple[list[str], dict[str, Any]]:
    """The gold document ids of scored ``rows`` and how they were chosen: ``{rule, cut, best_score, fallback}``.

    ``authors`` (the authors' ``apply_document_selection_with_fallback``): the cut is ``max(threshold, RELATIVE_CUT x
    best score)`` with ``threshold`` 4.0 by default; the documents scoring ``>= cut`` are gold, best first; when
    none reaches it (the best scores under the floor) the best document alone is gold (a counted fallback).
    ``convrag`` (our earlier reading): the documents scoring ``>= threshold`` (5.0 by default); none -> no gold and
    the turn is rejected. Ties: by score descending, then document order."""
    ranked = [row for _, row in sorted(enumerate(rows), key=lambda p: (-p[1]["score"], p[0]))]
    best = ranked[0]["score"] if ranked else None
    if profile == "authors":
        cut = max(threshold, round(RELATIVE_CUT * best, 4)) if best is not None else threshold
        gold = [row["doc_id"] for row in ranked if row["score"] >= cut]
        fallback = not gold and bool(ranked)
        if fallback:
            gold = [ranked[0]["doc_id"]]
        rule = f"score >= max({threshold:g}, {RELATIVE_CUT:g} x best); none: the best alone"
    else:
        cut, fallback = threshold, False
        gold = [row["doc_id"] for row in ranked if row["score"] >= cut]
        rule = f"score >= {threshold:g}; none: turn rejected"
    return gold, {"rule": rule, "cut": cut, "best_score": best, "fallback": fallback}


def content_words(text: str) -> set[str]:
    """Lower-cased whitespace tokens of ``text`` outside :data:`WORD_STOPS`."""
    return set(text.lower().split()) - WORD_STOPS


def phrases(text: str, size: int = 4) -> set[str]:
    """The ``size``-token windows of ``text`` (lower-cased whitespace tokens) with two or more words outside
    :data:`PHRASE_STOPS`."""
    tokens = text.lower().split()
    windows = (tokens[i:i + size] for i in range(len(tokens) - size + 1))
    return {" ".join(w) for w in windows if sum(t not in PHRASE_STOPS for t in w) >= 2}


def lexical_distinctness(query: str, answer: str, earlier: Sequence[dict[str, Any]], documents_text: str, *,
                         max_similarity: float = 0.58, min_new_words: int = 10, max_repeated_phrases: int = 1,
                         max_repeated_share: float = 0.30) -> tuple[str, float]:
    """``(problem, similarity)``: the first failed rule (``""`` when none) against the ``earlier`` turns
    (``{query, answer}``), and the largest query or answer word similarity seen.

    Content words of a text: its lower-cased whitespace tokens minus :data:`WORD_STOPS`. Against every earlier
    turn: ``|new query words & old query words| / |new query words| > max_similarity`` (0.58) fails (``query too
    similar``), the same on the answers (``answer too similar``), and fewer than ``min_new_words`` (10) answer words
    absent from the earlier answer fails (``too few new answer words``). Phrases of a text: its 4-token windows
    (lower-cased whitespace tokens) holding at least two words outside :data:`PHRASE_STOPS`. The new answer's
    phrases that also occur in an earlier answer, less those occurring in the turn's gold documents
    (``documents_text``: domain terms), are repeated phrases: more than ``max_repeated_phrases`` (1) fails
    (``repeated phrases``), and so does a share of repeated phrases among the answer's phrases above
    ``max_repeated_share`` (0.30). The returned similarity decides the LLM diversity judge: asked only from the
    third turn on and only when it exceeds :data:`JUDGE_ABOVE` (0.25)."""
    new_q, new_a = content_words(query), content_words(answer)
    top = 0.0
    for turn in earlier:
        old_q, old_a = content_words(turn["query"]), content_words(turn["answer"])
        if new_q and old_q:
            share = len(new_q & old_q) / len(new_q)
            top = max(top, share)
            if share > max_similarity:
                return "query too similar", top
        if new_a and old_a:
            share = len(new_a & old_a) / len(new_a)
            top = max(top, share)
            if share > max_similarity:
                return "answer too similar", top
            if len(new_a - old_a) < min_new_words:
                return "too few new answer words", top
    own = phrases(answer)
    if earlier and own:
        repeated = set().union(*(own & phrases(t["answer"]) for t in earlier)) - phrases(documents_text)
        if len(repeated) > max_repeated_phrases or len(repeated) / len(own) > max_repeated_share:
            return "repeated phrases", top
    return "", top


def document_diversity(turns: Sequence[dict[str, Any]], required: int = 2) -> bool:
    """Section 3.2.3's document diversity across turns: true when ``required`` < 2 (nothing to vary), else when
    the turns' gold documents together cover at least ``required`` documents and, with two or more turns, not
    every turn has the same gold set."""
    if required < 2:
        return True
    distinct = {d for t in turns for d in t["gold_doc_ids"]}
    sets = {frozenset(t["gold_doc_ids"]) for t in turns}
    return len(distinct) >= required and (len(turns) < 2 or len(sets) >= 2)
