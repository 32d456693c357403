"""What an audit judges: the turns of a built benchmark folder, each with its gold documents, answer and pool.

Any folder written by ``convrag build`` (StratRAG, MTRAG / MTRAG-UN tasks, RECOR, MTR-Bench, a synthesized
MTR-Bench source built with ``convrag build mtr-bench``) is read through its evaluation profile, exactly as
``convrag evaluate`` reads it (:func:`convrag.evaluation.data.load_benchmark`). One :class:`AuditItem` per
turn: the current (last) query with its history, every document its qrels mark relevant (grade > 0), the
reference answer when the benchmark has one, and the turn's candidate pool when the benchmark ships one.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from convrag.builders.profile import EvaluationProfile, profile_of
from convrag.core.errors import ConvragError
from convrag.core.manifest import read_manifest
from convrag.evaluation.data import BenchmarkData, Folder, load_benchmark

#: turn fields that hold the reference answer: MTR-Bench ``answer``, StratRAG ``reference_answer``; MTRAG's
#: (``targets``) and RECOR's (``answer``) are read from their tasks / conversations configs
ANSWER_FIELDS = ("answer", "reference_answer", "targets")


@dataclass(frozen=True)
class AuditDoc:
    """A corpus document as judges see it."""

    doc_id: str
    title: str
    text: str


@dataclass(frozen=True)
class AuditItem:
    """One turn to judge. ``history``: earlier messages as (role, text), role ``user`` / ``assistant``;
    ``gold``: the documents with qrels grade > 0 (every one found in the corpus); ``answer``: the reference
    answer or None; ``pool``: the benchmark's candidate ids for the turn, or None when it ships none."""

    item_id: str
    domain: str
    conversation_id: str
    turn: int
    query: str
    history: tuple[tuple[str, str], ...]
    gold: tuple[AuditDoc, ...]
    answer: str | None = None
    pool: tuple[str, ...] | None = None
    fields: Mapping[str, Any] = field(default_factory=dict, compare=False)


@dataclass
class AuditSet:
    """The items of one folder, the documents of each subset (``domain`` -> id -> document) and the data."""

    folder: Path
    benchmark: str
    items: list[AuditItem]
    documents: dict[str, dict[str, AuditDoc]]
    data: BenchmarkData
    profile: EvaluationProfile
    #: turns left out, with the reason (no relevant document in the qrels, ...)
    skipped: dict[str, int] = field(default_factory=dict)

    def document(self, item: AuditItem, doc_id: str) -> AuditDoc:
        """A document of the item's subset; an unknown id is an error."""
        try:
            return self.documents[item.domain][doc_id]
        except KeyError:
            where = item.domain or "the benchmark"
            raise ConvragError(f"{self.folder}: document {doc_id!r} is not in the corpus of {where}") from None


def _text(value: Any) -> str | None:
    """A non-blank answer text from a string, a message ``{"text": ...}`` or a list of either (the first)."""
    if isinstance(value, dict):
        value = value.get("text")
    if isinstance(value, list):
        value = next((t for t in map(_text, value) if t), None)
    return value if isinstance(value, str) and value.strip() else None


def _answer(fields: Mapping[str, Any]) -> str | None:
    return next((t for t in (_text(fields.get(name)) for name in ANSWER_FIELDS) if t), None)


def _stored_answers(data: BenchmarkData, profile: EvaluationProfile, folder: Path) -> dict[str, str]:
    """Answers kept outside the turns' fields: MTRAG's ``targets`` in its tasks config (``views`` reader) and
    RECOR's per-turn ``answer`` in its conversations config (``recor`` reader), by query id."""
    out: dict[str, str] = {}
    files = Folder(folder)
    for subset in data.subsets:
        if profile.reader == "views":
            config = profile.turns.replace("{subset}", subset)
            for row in files.rows(config, data.split) if files.has(config) else []:
                text = _text(row.get("targets"))
                if text and row.get("task_id") is not None:
                    out[str(row["task_id"])] = text
        elif profile.reader == "recor" and profile.conversations:
            config = profile.conversations.replace("{subset}", subset)
            for row in files.rows(config, data.split) if files.has(config) else []:
                for turn in row.get("turns") or []:
                    text = _text(turn.get("answer"))
                    if text:
                        out[f"{row['conversation_id']}:{turn['turn']}"] = text
    return out


def load_items(folder: str | os.PathLike, *, split: str | None = None, sample: int | None = None, seed: int = 0,
               corpus: str = "auto", pools: bool = True) -> AuditSet:
    """Every turn of a built folder as an :class:`AuditItem` (``sample``: a seeded random sample of that many
    turns, kept in folder order). ``pools``: read the benchmark's candidate pools when its profile has them."""
    path = Path(folder)
    manifest = read_manifest(str(path))
    profile = profile_of(manifest, source=str(path / "README.md"))
    search = "pool" if pools and profile.pool else "corpus"
    data = load_benchmark(path, profile, split=split, corpus=corpus, search=search)
    documents = {s: {str(r["_id"]): AuditDoc(str(r["_id"]), str(r.get("title") or ""), str(r["text"])) for r in rows}
                 for s, rows in data.corpus.items()}
    stored = _stored_answers(data, profile, path)
    items: list[AuditItem] = []
    skipped: dict[str, int] = {}
    for t in data.turns:
        grades = data.qrels.get(t.domain, {}).get(t.qid, {})
        gold = tuple(documents[t.domain][d] for d, g in grades.items() if g > 0 and d in documents[t.domain])
        if not gold:
            skipped["no relevant document in the qrels or the corpus"] = skipped.get(
                "no relevant document in the qrels or the corpus", 0) + 1
            continue
        pool = tuple(data.pools[t.qid]) if data.pools is not None else None
        items.append(AuditItem(item_id=t.qid, domain=t.domain, conversation_id=t.conversation_id or t.qid,
                               turn=t.position, query=t.query, history=tuple(t.history_messages()), gold=gold,
                               answer=_answer(t.fields) or stored.get(t.qid), pool=pool, fields=dict(t.fields)))
    if sample is not None:
        if sample < 1:
            raise ConvragError(f"--sample must be at least 1, got {sample}")
        keep = set(random.Random(f"audit-sample:{seed}").sample(range(len(items)), min(sample, len(items))))
        items = [it for i, it in enumerate(items) if i in keep]
    name = str(manifest["benchmark"])
    return AuditSet(path, name, items, documents, data, profile, skipped)


def conversations(items: Sequence[AuditItem]) -> dict[str, list[AuditItem]]:
    """Items grouped by (domain, conversation), turns in order: the unit of conversation-level judges."""
    grouped: dict[str, list[AuditItem]] = {}
    for it in items:
        grouped.setdefault(f"{it.domain}:{it.conversation_id}" if it.domain else it.conversation_id, []).append(it)
    return {k: sorted(v, key=lambda it: it.turn) for k, v in grouped.items()}
