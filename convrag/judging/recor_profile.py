"""The two readings of RECOR's quality judges, their quoted-evidence fields, and label entropy.

``profile`` (``convrag audit --profile``) picks what :mod:`convrag.judging.recor` does where RECOR's paper (appendix
G) is silent or loose: ``authors`` (default) follows the authors' released code (``RECOR-Benchmark/RECOR``,
``pipeline/quality_analysis.py``); ``convrag`` keeps convrag's own readings, so that runs made with them reproduce.

* naturalness: ``authors`` judges the wording of the whole conversation, questions and replies (the paper and the
  authors' prompt show the full dialogue); ``convrag`` the user's turns only;
* quoted evidence: ``authors`` asks for the authors' fields (:data:`EVIDENCE_FIELDS`; one quote field for the turn
  labels), kept in ``extra["evidence"]``; ``convrag`` asks for none;
* dependency context: ``authors`` the :data:`CONTEXT_TURNS` turns before the question, replies in full; ``convrag``
  every earlier turn, replies cut to ``ANSWER_CHARS``;
* normalised entropy: ``authors`` H / log m, m = labels observed (the authors' ``compute_entropy``; one label gives 0);
  ``convrag`` H / log k, k = size of the label set. Both use parsed labels only: failed calls are counted apart,
  never as a label (the authors count them as a label "unknown").
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from convrag.core.errors import ConvragError

PROFILES = ("authors", "convrag")
DEFAULT_PROFILE = "authors"
#: turns shown to the dependency judge under ``authors`` (the authors' "up to 2 previous turns")
CONTEXT_TURNS = 2
#: criterion -> (evidence field, what it lists): the authors' reply fields, described in our words
EVIDENCE_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "naturalness": (("natural_phrases", "two or three phrases that sound like real speech, quoted"),
                    ("unnatural_phrases", "stiff or mechanical phrases, quoted")),
    "turn_coherence": (("good_connections", "one or two turns that clearly build on the reply before them"),
                       ("weak_connections", "turns that do not clearly follow from what came before"),
                       ("unclear_references", "words such as 'it' or 'this' whose referent is unclear")),
    "question_quality": (("aspects_covered", "the subtopics the questions reach"),
                         ("repeated_questions", "pairs of questions that ask the same thing"),
                         ("weak_questions", "questions that are vague or trivial")),
    "groundedness": (("supported_claims", "two or three claims the documents back"),
                     ("unsupported_claims", "claims the documents do not back"),
                     ("made_up_content", "invented facts, names or figures")),
}
#: the turn judges' evidence field: the words of the question that decide the label, quoted
TURN_EVIDENCE = "evidence"
_NOTHING = {"", "none", "n/a", "na", "-", "(none)", "nothing", "[]"}
_QUOTED = re.compile(r'"([^"\n]+)"|\u201c([^\u201d\n]+)\u201d')


def check_profile(profile: str) -> str:
    """``profile`` itself when it is one of :data:`PROFILES`; else a :class:`ConvragError`."""
    if profile not in PROFILES:
        raise ConvragError(f"unknown RECOR judge profile {profile!r}: choose from {', '.join(PROFILES)}")
    return profile


def label_of(name: str) -> str:
    """A field name as a free-text line label: ``natural_phrases`` -> ``Natural phrases``."""
    return name.replace("_", " ").capitalize()


def evidence_prompt(dimensions: Sequence[str]) -> list[dict[str, Any]]:
    """The conversation prompt's ``evidence`` field: per criterion, its fields with line label and description."""
    return [{"dimension": d, "fields": [{"name": n, "label": label_of(n), "about": about}
                                        for n, about in EVIDENCE_FIELDS[d]]} for d in dimensions]


def evidence_schema(dimensions: Sequence[str]) -> dict[str, Any]:
    """The JSON schema of the structured reply's ``evidence`` object: per criterion, lists of strings."""
    lists = {d: {"type": "object", "required": [n for n, _ in EVIDENCE_FIELDS[d]],
                 "properties": {n: {"type": "array", "items": {"type": "string"}} for n, _ in EVIDENCE_FIELDS[d]}}
             for d in dimensions}
    return {"type": "object", "required": list(dimensions), "properties": lists}


def _line(name: str) -> re.Pattern[str]:
    """A free-text line "Field name: ..." (optionally bold or a list item); group 1 is what follows the colon."""
    words = r"[\s_-]+".join(map(re.escape, name.split("_")))
    return re.compile(rf"^[ \t>*_#-]*{words}\**\s*:\**[ \t]*([^\n]*)$", re.I | re.M)


#: every evidence line of a free-text reply (removed from its rationale)
EVIDENCE_LINES = tuple(_line(n) for fields in EVIDENCE_FIELDS.values() for n, _ in fields) + (_line(TURN_EVIDENCE),)


def _items(value: Any) -> list[str]:
    """Evidence as a list of non-empty strings: a list kept (items as text), a string read as a line."""
    if isinstance(value, list):
        return [t for t in (str(v).strip() for v in value) if t.lower() not in _NOTHING]
    if not isinstance(value, str):
        return []
    quoted = [a or b for a, b in _QUOTED.findall(value)]
    parts = quoted or value.split(";")
    return [t for t in (p.strip().strip("*").strip() for p in parts) if t.lower() not in _NOTHING]


def read_evidence(obj: Mapping[str, Any] | None, text: str, dimensions: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per criterion, the evidence fields the reply gives (fields it leaves out are absent): from the JSON object
    ``obj`` of the reply (``{"evidence": {criterion: {field: [...]}}}``, or the fields flat in ``evidence`` or in
    the object), else from its last "Field name: "quote"; "quote"" line per field."""
    out: dict[str, dict[str, Any]] = {}
    for d in dimensions:
        found: dict[str, Any] = {}
        for name, _ in EVIDENCE_FIELDS[d]:
            if obj is not None:
                ev = obj.get("evidence") if isinstance(obj.get("evidence"), dict) else {}
                for where in (ev.get(d), ev, obj):
                    if isinstance(where, dict) and name in where:
                        found[name] = _items(where[name])
                        break
            else:
                lines = _line(name).findall(text)
                if lines:
                    found[name] = _items(lines[-1])
        out[d] = found
    return out


def read_quote(obj: Mapping[str, Any] | None, text: str) -> str | None:
    """The turn judge's quoted evidence: ``evidence`` of the reply's JSON object, else its last "Evidence:" line;
    the quoted parts without their quote marks, several joined with "; " (as a JSON list is); None when absent
    or empty."""
    if obj is not None:
        value = obj.get(TURN_EVIDENCE)
    else:
        lines = _line(TURN_EVIDENCE).findall(text)
        value = lines[-1] if lines else None
    return "; ".join(_items(value)) or None


def context(history: Sequence[tuple[str, str]], profile: str) -> tuple[tuple[str, str], ...]:
    """The earlier messages the dependency judge sees: all of them (``convrag``), or those from the
    :data:`CONTEXT_TURNS`-th last user message on (``authors``: the two previous turns, question and reply)."""
    if profile == "convrag":
        return tuple(history)
    starts = [i for i, (role, _) in enumerate(history) if role == "user"]
    return tuple(history[starts[-CONTEXT_TURNS] if len(starts) >= CONTEXT_TURNS else 0:])


def _values(counts: Mapping[str, int] | Iterable[int]) -> list[int]:
    values = list(counts.values()) if isinstance(counts, Mapping) else list(counts)
    if any(v < 0 for v in values):
        raise ValueError(f"counts must not be negative: {values}")
    return values


def _shannon(nonzero: Sequence[int]) -> float:
    total = sum(nonzero)
    return -sum(v / total * math.log(v / total) for v in nonzero)


def normalized_entropy(counts: Mapping[str, int] | Iterable[int], k: int) -> float | None:
    """Shannon entropy of the distribution given by ``counts``, divided by ``log k`` (``k``: the size of the label
    set, at least 2, not the number of labels observed): 0.0 when one label has every count, 1.0 when all ``k``
    labels are equally frequent. None when the counts sum to 0 (no distribution). The ``convrag`` profile."""
    values = _values(counts)
    if k < 2:
        raise ValueError(f"normalized entropy needs a label set of at least 2 labels, got k={k}")
    nonzero = [v for v in values if v > 0]
    if len(nonzero) > k:
        raise ValueError(f"{len(nonzero)} labels observed but the label set has only k={k}")
    if not nonzero:
        return None
    return max(0.0, _shannon(nonzero) / math.log(k))


def observed_entropy(counts: Mapping[str, int] | Iterable[int]) -> float | None:
    """Shannon entropy of ``counts`` divided by ``log m``, m = the number of labels with a count above 0 (the
    authors' normalisation): 0.0 when one label is observed, 1.0 when the observed labels are equally frequent,
    whatever the size of the label set. None when the counts sum to 0. The ``authors`` profile."""
    nonzero = [v for v in _values(counts) if v > 0]
    if not nonzero:
        return None
    if len(nonzero) == 1:
        return 0.0
    return max(0.0, _shannon(nonzero) / math.log(len(nonzero)))


def profile_entropy(counts: Mapping[str, int] | Iterable[int], k: int, profile: str) -> float | None:
    """The normalised entropy ``profile`` reports: :func:`observed_entropy` (``authors``) or
    :func:`normalized_entropy` over a label set of ``k`` (``convrag``)."""
    return normalized_entropy(counts, k) if check_profile(profile) == "convrag" else observed_entropy(counts)


#: how each profile normalises entropy, as recorded in the audit's summary
ENTROPY_DENOMINATOR = {"authors": "log of the number of labels observed", "convrag": "log of the label-set size"}
