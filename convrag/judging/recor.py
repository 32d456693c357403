"""RECOR's quality judges (RECOR appendix G), per item: four conversation-level scores and two turn-level labels.

**Conversation level** (:func:`judge_conversation`, one call per conversation, keyed as
:func:`convrag.judging.items.conversations` keys it): :data:`DIMENSIONS`, each a whole number 1-5 (5 best) on the
anchors of the prompt ``audit_conversation_quality``; ``groundedness`` checks the answers' claims against the turns'
gold documents and is not asked of a conversation without answers. RECOR asks one prompt per criterion; we ask the
four in one call. The judge sees every turn in order (answers cut to :data:`ANSWER_CHARS`, ending "[...]"), each gold
document once (cut to :data:`DOCUMENT_CHARS`) and, for RECOR, the ``original_query`` as the topic. A missing,
fractional or out-of-range score makes that dimension unparseable and keeps the others.
**Turn level** (:func:`judge_turn`, one call per turn, ``score`` None): ``kind="dependency"`` picks one of
:data:`DEPENDENCY_LABELS` from the query and the turns before it (a turn without history is ``self_contained`` by
rule, with no call, ``extra["rule"]``); ``kind="pattern"`` one of :data:`PATTERN_LABELS` from the query alone, as
RECOR's prompt; each prompt defines its labels. :func:`match_label` ignores case, space, hyphen and underscore.
Profiles ``authors`` / ``convrag``, with the quoted evidence kept in ``extra["evidence"]`` (its absence fails no
score): :mod:`convrag.judging.recor_profile`; distributions: :mod:`convrag.benchmarks.recor.judges_tables`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model

from convrag.core.errors import ConvragError
from convrag.evaluation.data import Folder
from convrag.judging.items import AuditItem, AuditSet, conversations
from convrag.judging.recor_profile import (
    CONTEXT_TURNS,
    DEFAULT_PROFILE,
    EVIDENCE_LINES,
    TURN_EVIDENCE,
    check_profile,
    context,
    evidence_prompt,
    evidence_schema,
    read_evidence,
    read_quote,
)
from convrag.judging.recor_profile import normalized_entropy as normalized_entropy
from convrag.judging.verdict import Verdict, judge_call
from convrag.llm import LLM, ParseError, SamplingParams, extract_json, load_prompt

DIMENSIONS = ("naturalness", "turn_coherence", "question_quality", "groundedness")
DEPENDENCY = "dependency_type"
PATTERN = "question_pattern"
DEPENDENCY_LABELS = ("coreference", "ellipsis", "substitution", "continuation", "topic_shift", "self_contained")
PATTERN_LABELS = ("why", "how", "what", "compare", "what_if", "confirm", "more_detail", "example", "effect")
#: the label a turn without history gets, by rule
FIRST_TURN_LABEL = "self_contained"
#: kind -> (dimension, label set, prompt)
TURN_JUDGES = {"dependency": (DEPENDENCY, DEPENDENCY_LABELS, "audit_turn_dependency"),
               "pattern": (PATTERN, PATTERN_LABELS, "audit_question_pattern")}
#: answers (and earlier assistant turns) longer than this many characters are cut
ANSWER_CHARS = 600
#: documents (and RECOR's original query) longer than this many characters are cut
DOCUMENT_CHARS = 800
CONVERSATION_PARAMS = SamplingParams(temperature=0.0, max_tokens=400)
#: the conversation reply with RECOR's eleven evidence lists (profile ``authors``) needs room for them
EVIDENCE_CONVERSATION_PARAMS = SamplingParams(temperature=0.0, max_tokens=1000)
TURN_PARAMS = SamplingParams(temperature=0.0, max_tokens=200)


_SCORE_NAMES = {"naturalness": r"naturalness", "turn_coherence": r"(?:turn[\s_-]*)?coherence",
                "question_quality": r"question[\s_-]*quality", "groundedness": r"groundedness|grounding"}
#: "Naturalness: 4", "**Turn coherence:** 5/5", "- Groundedness (1-5): 3", a table row "| Naturalness | 4 |";
#: group 1 is the number
_SCORE_LINE = {d: re.compile(rf"^[ \t>*_#|-]*(?:{n})(?:\s+score)?\s*(?:\([^)\n]{{0,12}}\))?\s*\**\s*[:=|]\s*\**\s*"
                             rf"(\d+(?:\.\d+)?)[^\n]*$", re.I | re.M) for d, n in _SCORE_NAMES.items()}


def _cut(text: str, limit: int) -> tuple[str, bool]:
    """``text`` with whitespace runs collapsed, cut at a word boundary to about ``limit`` characters plus "[...]"."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat, False
    head = flat[:limit]
    if " " in head[limit // 2:]:
        head = head.rsplit(" ", 1)[0]
    return f"{head} [...]", True


def _strict(required: Sequence[str], types: dict[str, dict[str, Any]]) -> Callable[[dict[str, Any]], None]:
    """A ``json_schema_extra`` hook: the schema shown to the backend requires ``required`` and gives ``types`` to
    those fields, while validation stays lenient so that each field can be checked (and fail) on its own."""
    def hook(schema: dict[str, Any]) -> None:
        schema["properties"].update(types)
        schema["required"] = list(required)
    return hook


@functools.lru_cache(maxsize=8)
def scores_model(dimensions: tuple[str, ...] = DIMENSIONS, evidence: bool = False) -> type[BaseModel]:
    """The structured reply of the conversation judge: ``rationale``, with ``evidence`` the quoted-evidence lists
    per dimension, then ``scores`` (one integer 1-5 per dimension in the schema; any JSON value passes validation
    and is checked by :func:`judge_conversation`)."""
    scores = create_model("ConversationScoreSet", __config__=ConfigDict(json_schema_extra=_strict(
        dimensions, {d: {"type": "integer", "minimum": 1, "maximum": 5} for d in dimensions})),
        **{d: (Any, None) for d in dimensions})
    names = ("rationale", "evidence", "scores") if evidence else ("rationale", "scores")
    types = {"rationale": {"type": "string"}, **({"evidence": evidence_schema(dimensions)} if evidence else {})}
    extra: dict[str, Any] = {"evidence": (Any, None)} if evidence else {}
    return create_model("ConversationScores", __config__=ConfigDict(json_schema_extra=_strict(names, types)),
                        rationale=(str, ""), **extra, scores=(scores, ...))


@functools.lru_cache(maxsize=16)
def label_model(dimension: str, labels: tuple[str, ...], evidence: bool = False) -> type[BaseModel]:
    """The structured reply of a turn judge: ``rationale``, with ``evidence`` the deciding words quoted, then the
    label field (an enum in the schema; any value passes validation and is read by :func:`match_label`)."""
    names = ("rationale", TURN_EVIDENCE, dimension) if evidence else ("rationale", dimension)
    types = {"rationale": {"type": "string"}, TURN_EVIDENCE: {"type": "string"},
             dimension: {"type": "string", "enum": list(labels)}}
    extra: dict[str, Any] = {TURN_EVIDENCE: (Any, None)} if evidence else {}
    return create_model(f"{dimension.title().replace('_', '')}Verdict", __config__=ConfigDict(
        json_schema_extra=_strict(names, {n: types[n] for n in names})), rationale=(str, ""), **extra,
        **{dimension: (Any, None)})


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value, _ = extract_json(text)
    except ParseError:
        return None
    return value if isinstance(value, dict) else None


def read_scores(text: str, dimensions: Sequence[str] = DIMENSIONS) -> dict[str, Any] | None:
    """The scores in a free-text reply, unchecked: from a JSON object in it (``{"scores": {...}}`` or flat) when
    that names a dimension, else from the last "Criterion: N" line (or "| Criterion | N |" table row) of each
    dimension. None when none is found."""
    obj = _json_object(text)
    if obj is not None:
        inner = obj.get("scores") if isinstance(obj.get("scores"), dict) else obj
        found = {d: inner[d] for d in dimensions if d in inner}
        if found:
            return found
    found = {}
    for d in dimensions:
        values = _SCORE_LINE[d].findall(text)
        if values:
            found[d] = float(values[-1]) if "." in values[-1] else int(values[-1])
    return found or None


def check_score(value: Any, low: int = 1, high: int = 5) -> tuple[int | None, str | None]:
    """``(score, None)`` for a whole number in ``[low, high]`` (``4.0`` and ``"4"`` count), else ``(None, why)``."""
    if value is None:
        return None, "no score"
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return None, f"score {value!r} is not a whole number"
    if not low <= value <= high:
        return None, f"score {value} is outside {low}-{high}"
    return value, None


@functools.lru_cache(maxsize=8)
def _recor_topics(folder: str, config: str, subsets: tuple[str, ...], split: str) -> dict[str, str]:
    files = Folder(folder)
    out: dict[str, str] = {}
    for subset in subsets:
        name = config.replace("{subset}", subset)
        for row in files.rows(name, split) if files.has(name) else []:
            text = row.get("original_query")
            if isinstance(text, str) and text.strip():
                out[str(row["conversation_id"])] = text
    return out


def conversation_topic(audit_set: AuditSet, conversation_id: str) -> str | None:
    """RECOR's ``original_query`` of a conversation (the request it was built from); None for other benchmarks."""
    profile = audit_set.profile
    if profile.reader != "recor" or not profile.conversations:
        return None
    topics = _recor_topics(str(audit_set.folder), profile.conversations, tuple(audit_set.data.subsets),
                           audit_set.data.split)
    return topics.get(conversation_id)


def conversation_fields(items: Sequence[AuditItem], audit_set: AuditSet,
                        profile: str = DEFAULT_PROFILE) -> tuple[dict[str, Any], dict[str, Any]]:
    """The conversation prompt's fields (``turns``, ``dimensions``, ``documents``, ``topic``, and per ``profile``
    ``whole_conversation`` and ``evidence``) for turns in order, and what to record about them (turn ids, document
    ids, how many texts were cut, the profile)."""
    authors = check_profile(profile) == "authors"
    keys: dict[str, str] = {}
    documents: list[dict[str, str]] = []
    turns: list[dict[str, Any]] = []
    answers_cut = documents_cut = 0
    for n, it in enumerate(items, 1):
        answer, cut = _cut(it.answer, ANSWER_CHARS) if it.answer else (None, False)
        answers_cut += cut
        for doc in it.gold:
            if doc.doc_id not in keys:
                keys[doc.doc_id] = f"D{len(keys) + 1}"
                text, cut = _cut(doc.text, DOCUMENT_CHARS)
                documents_cut += cut
                documents.append({"key": keys[doc.doc_id], "title": doc.title, "text": text})
        turns.append({"number": n, "query": it.query, "answer": answer, "documents": [keys[d.doc_id] for d in it.gold]})
    dims = DIMENSIONS if any(t["answer"] for t in turns) else DIMENSIONS[:3]
    topic = conversation_topic(audit_set, items[0].conversation_id)
    fields = {"turns": turns, "dimensions": list(dims), "documents": documents,
              "topic": _cut(topic, DOCUMENT_CHARS)[0] if topic else None, "whole_conversation": authors,
              "evidence": evidence_prompt(dims) if authors else []}
    extra = {"domain": items[0].domain, "conversation_id": items[0].conversation_id,
             "turns": [it.item_id for it in items], "documents": list(keys), "answers_cut": answers_cut,
             "documents_cut": documents_cut, "topic": topic is not None, "profile": profile}
    return fields, extra


def _json_rationale(text: str) -> str | None:
    """The ``rationale`` of a JSON object in a free-text reply, if it has one."""
    obj = _json_object(text)
    value = obj.get("rationale") if obj is not None else None
    return value.strip() if isinstance(value, str) else None


def _without_lines(text: str, patterns: Iterable[re.Pattern[str]]) -> str:
    for p in patterns:
        text = p.sub("", text)
    return text.strip()


def judge_conversation(llm: LLM, conversation_items: Sequence[AuditItem], audit_set: AuditSet,
                       profile: str = DEFAULT_PROFILE) -> list[Verdict]:
    """One judge call for one conversation's turns; one :class:`Verdict` per dimension (groundedness only when
    some turn has an answer), ``item_id`` = the conversation key, score 1-5 or None with the reason in ``error``;
    under ``authors`` the dimension's quoted evidence in ``extra["evidence"]`` (``{field: [quotes]}``, the fields
    the reply gave)."""
    grouped = conversations(conversation_items)
    if len(grouped) != 1:
        raise ConvragError(f"judge_conversation needs the turns of one conversation, got {len(grouped)}")
    key, items = next(iter(grouped.items()))
    fields, extra = conversation_fields(items, audit_set, profile)
    dims = tuple(fields["dimensions"])
    evidence = bool(fields["evidence"])
    free_text = llm.free_text
    messages = load_prompt("audit_conversation_quality").render(
        **fields, free_text=free_text, answer_chars=ANSWER_CHARS, document_chars=DOCUMENT_CHARS)
    value, rationale, raw, error = judge_call(llm, messages, scores_model(dims, evidence),
                                              lambda t: read_scores(t, dims), free_text=free_text,
                                              params=EVIDENCE_CONVERSATION_PARAMS if evidence else CONVERSATION_PARAMS)
    if free_text:
        rationale = _json_rationale(raw) or _without_lines(rationale, (*_SCORE_LINE.values(), *EVIDENCE_LINES))
    quotes = read_evidence(_json_object(raw), raw, dims) if evidence else {}
    scores = value.model_dump() if isinstance(value, BaseModel) else value or {}
    out = []
    for d in dims:
        score, why = (None, None) if error else check_score(scores.get(d))
        problem = error or (f"unparseable: {d}: {why}" if why else None)
        out.append(Verdict(key, llm.spec, d, None if score is None else float(score), None, rationale, raw, problem,
                           {**extra, **({"evidence": quotes[d]} if evidence else {})}))
    return out


def match_label(text: Any, labels: Sequence[str]) -> str | None:
    """The label a judge's text names, or None. Case-insensitive; space, hyphen and underscore are the same;
    quotes, stars and brackets around it are ignored. The text may be the label, start with it followed by
    punctuation and an explanation, or name exactly one label as a whole word (a label inside a longer one,
    "what" in "what if", does not count)."""
    if not isinstance(text, str):
        return None
    low = text.lower()
    spans: list[tuple[int, int, str]] = []
    for label in labels:
        pattern = r"[\s_-]+".join(map(re.escape, label.split("_")))
        spans += [(m.start(), m.end(), label) for m in re.finditer(rf"(?<![a-z0-9]){pattern}(?![a-z0-9])", low)]
    spans = [s for s in spans if not any(o != s and o[0] <= s[0] and s[1] <= o[1] for o in spans)]
    named = {s[2] for s in spans}
    if len(named) == 1:
        return named.pop()
    if not spans:
        return None
    first = min(spans)
    lead = re.sub(r"[\s\"'*`\[(]", "", low[:first[0]])
    rest = low[first[1]:].lstrip(" \"'*`])")
    if not lead and (not rest or rest[0] in ".,;:(-\u2014"):
        return first[2]
    return None


def _label_line(field: str) -> re.Pattern[str]:
    """A line "Field name: <label>" (``field`` with spaces, hyphens or underscores; optionally bold or a heading),
    the label after the colon or, when nothing follows it, on the next non-blank line; group 1 is the label."""
    name = r"[\s_-]+".join(map(re.escape, field.split("_")))
    return re.compile(rf"^[ \t>*_#-]*{name}[\s*_]*:[*_ \t]*(?:\n\s*)?([^\n]*\S)", re.I | re.M)


def read_label(text: str, field: str) -> str | None:
    """The label text of a free-text reply, unchecked: the ``field`` of a JSON object in it, else the label of its
    last "Field name:" line (:func:`_label_line`; a note may follow on later lines), else the last non-blank line
    after its last colon. None for a blank reply."""
    obj = _json_object(text)
    if obj is not None and isinstance(obj.get(field), str):
        return obj[field]
    named = _label_line(field).findall(text)
    if named:
        return named[-1].strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1].rsplit(":", 1)[-1].strip() if lines else None


def judge_turn(llm: LLM, kind: str, item: AuditItem, profile: str = DEFAULT_PROFILE) -> Verdict:
    """One turn-level label (``kind`` "dependency" or "pattern", see the module docstring): ``label`` set, or
    ``label`` None and ``error`` "unparseable: ..." / "call failed: ..."; ``score`` is always None. Under
    ``authors`` the quoted deciding words are in ``extra["evidence"]`` (None when the reply gave none)."""
    if kind not in TURN_JUDGES:
        raise ConvragError(f"unknown turn judge {kind!r}: choose from {sorted(TURN_JUDGES)}")
    dimension, labels, prompt = TURN_JUDGES[kind]
    authors = check_profile(profile) == "authors"
    extra: dict[str, Any] = {"domain": item.domain, "conversation_id": item.conversation_id, "turn": item.turn,
                             "profile": profile}
    if kind == "dependency" and not item.history:
        return Verdict(item.item_id, llm.spec, dimension, None, FIRST_TURN_LABEL,
                       "first turn: there are no earlier turns to depend on", "", None, {**extra, "rule": "first turn"})
    free_text = llm.free_text
    fields: dict[str, Any] = {"query": item.query, "free_text": free_text, "evidence": authors}
    if kind == "dependency":
        cut = None if authors else ANSWER_CHARS  # RECOR's code shows its two turns in full
        fields["history"] = [(role, _cut(text, cut)[0] if role == "assistant" and cut else text)
                             for role, text in context(item.history, profile)]
        fields.update(answer_chars=cut, context_turns=CONTEXT_TURNS if authors else None)
    messages = load_prompt(prompt).render(**fields)
    value, rationale, raw, error = judge_call(llm, messages, label_model(dimension, labels, authors),
                                              lambda t: read_label(t, dimension), params=TURN_PARAMS,
                                              free_text=free_text)
    label = None if error else match_label(value, labels)
    if error is None and label is None:
        error = (f"unparseable: {value!r} is not one of the {dimension} labels" if value
                 else f"unparseable: the reply names no {dimension}")
    if free_text and label is not None:  # the label and evidence lines are not part of the reasoning
        rationale = _json_rationale(raw) or _without_lines(rationale.rstrip().rpartition("\n")[0], EVIDENCE_LINES)
    if authors:
        extra["evidence"] = read_quote(_json_object(raw), raw)
    return Verdict(item.item_id, llm.spec, dimension, None, label, rationale, raw, error, extra)
