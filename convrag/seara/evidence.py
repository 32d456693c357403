"""An evidence oracle for ``convrag select --judge oracle:EVIDENCE.jsonl``: labelled evidence spans as judge and facts.

- *Evidence file*: JSON Lines (plain or gzip), one object per non-blank line, ``{"query_id": str | int, "evidence":
  ["verbatim text span", ...]}`` (an integer id becomes its string; other fields ignored); each line needs a non-empty
  id and a non-empty list of spans with a non-space character each; a query id appears on one line only.
- *Normalisation* (:func:`normalize_span`): whitespace runs become one space, ends stripped, text case-folded
  (``str.casefold``: "Straße" and "STRASSE" both read "strasse"); punctuation and Unicode forms untouched.
- *Contains* (:func:`locate_span`): the normalised span occurs in the normalised text on whole source characters
  (never half a character's case-folded expansion); located ``[start, end)`` from its first to its last source
  character, both non-space.
- *Grade* (:class:`EvidenceOracle`): 3 when a chunk's text contains a whole evidence span of its query, else 0; a
  query without an evidence line gets no grade (score None, with an error).
- *Facts* (:meth:`EvidenceOracle.facts`): each span located in the first document (corpus order) whose text, never
  title, contains it: id ``"<doc_id>:<start>-<end>"``, one fact per slice (listing every query reaching it, overlapping
  slices kept apart). A span in no document is *unfound*; one in several counts in ``several_documents``.
"""

from __future__ import annotations

import bisect
import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from convrag.core.errors import ConvragError, DataError
from convrag.core.jsonl import iter_jsonl, text_lines, type_name, typed_field
from convrag.judging.items import AuditDoc, AuditItem
from convrag.judging.pooling import POOLED, RelevanceJudge, relevance_verdict
from convrag.judging.verdict import Verdict
from convrag.llm.cache import canonical_json
from convrag.seara.facts import Fact, FactSet

ORACLE_PREFIX = "oracle:"
#: longest span quoted in a verdict's rationale
RATIONALE_CHARS = 80


def is_oracle_spec(spec: str | None) -> bool:
    """Whether a ``--judge`` value names an evidence oracle (``oracle:EVIDENCE.jsonl``)."""
    return isinstance(spec, str) and spec.startswith(ORACLE_PREFIX)


def read_evidence(path: str | os.PathLike) -> dict[str, list[str]]:
    """``{query_id: [span, ...]}`` of an evidence file (module docstring); every problem a DataError with its line."""
    return read_evidence_lines(path)[0]


def read_evidence_lines(path: str | os.PathLike) -> tuple[dict[str, list[str]], dict[str, int]]:
    """:func:`read_evidence` and the line each query id is on."""
    where = os.fspath(path)
    evidence: dict[str, list[str]] = {}
    first_line: dict[str, int] = {}
    for line, obj in iter_jsonl(text_lines(where), where):
        qid = str(typed_field(obj, "query_id", (str, int), where, line, empty=False))
        spans = typed_field(obj, "evidence", list, where, line)
        if not spans:
            raise DataError(f"query {qid!r}: field 'evidence' is an empty list (give at least one span)", where, line)
        for i, span in enumerate(spans):
            if not isinstance(span, str):
                raise DataError(f"query {qid!r}: evidence[{i}] must be a string, got {type_name(span)}", where, line)
            if not span.strip():
                raise DataError(f"query {qid!r}: evidence[{i}] is empty", where, line)
        if qid in first_line:
            raise DataError(f"duplicate query_id {qid!r} (first on line {first_line[qid]})", where, line)
        first_line[qid] = line
        evidence[qid] = list(spans)
    if not evidence:
        raise DataError("the evidence file holds no line (expected {\"query_id\": ..., \"evidence\": [...]})", where)
    return evidence, first_line


def load_oracle(spec: str) -> EvidenceOracle:
    """The oracle of ``oracle:EVIDENCE.jsonl``: the file after the prefix, read by :func:`read_evidence`."""
    if not is_oracle_spec(spec):
        raise ConvragError(f"not an evidence oracle: {spec!r} (expected {ORACLE_PREFIX}EVIDENCE.jsonl)")
    path = os.path.expanduser(spec[len(ORACLE_PREFIX):])
    if not path:
        raise ConvragError(f"{spec!r} names no evidence file (expected {ORACLE_PREFIX}EVIDENCE.jsonl)")
    if not os.path.exists(path):
        raise ConvragError(f"{path}: no such evidence file (from --judge {spec})")
    evidence, lines = read_evidence_lines(path)
    return EvidenceOracle(evidence, source=path, lines=lines)


def normalize_span(text: str) -> str:
    """``text`` with whitespace runs read as one space, stripped, and case-folded."""
    return " ".join(text.split()).casefold()


def _fold_map(text: str) -> tuple[str, list[int]]:
    """:func:`normalize_span` of ``text`` built per source character, and per normalised character its source
    index (a case-folded expansion such as "ß" -> "ss" maps each of its characters to the one source index)."""
    out: list[str] = []
    where: list[int] = []
    for i, ch in enumerate(text):
        if ch.isspace():
            if out and out[-1] != " ":
                out.append(" ")
                where.append(i)
            continue
        for c in ch.casefold():
            out.append(c)
            where.append(i)
    if out and out[-1] == " ":
        out.pop()
        where.pop()
    return "".join(out), where


def _find(needle: str, hay: str, where: list[int], start: int = 0) -> int:
    """First position >= ``start`` of ``needle`` in ``hay`` that starts and ends on whole source characters,
    or -1."""
    pos = hay.find(needle, start)
    while pos >= 0:
        end = pos + len(needle)
        if (pos == 0 or where[pos - 1] != where[pos]) and (end == len(where) or where[end] != where[end - 1]):
            return pos
        pos = hay.find(needle, pos + 1)
    return -1


def locate_span(span: str, text: str) -> tuple[int, int] | None:
    """``[start, end)`` in ``text`` of the first occurrence of ``span`` under the normalisation, or None."""
    needle = normalize_span(span)
    if not needle or needle not in normalize_span(text):
        return None
    hay, where = _fold_map(text)
    pos = _find(needle, hay, where)
    return None if pos < 0 else (where[pos], where[pos + len(needle) - 1] + 1)


def _short(span: str) -> str:
    text = " ".join(span.split())
    return text if len(text) <= RATIONALE_CHARS else text[: RATIONALE_CHARS - 3] + "..."


@dataclass
class EvidenceFacts:
    """The oracle's facts for some queries: ``factset``; ``unfound`` (query -> spans contained in no document);
    ``spans`` read for those queries, ``found`` of them located, ``several_documents`` of them contained in more
    than one document (the first used)."""

    factset: FactSet
    unfound: dict[str, list[str]] = field(default_factory=dict)
    spans: int = 0
    found: int = 0
    several_documents: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The counts and the unfound spans, JSON-ready."""
        return {"spans": self.spans, "found": self.found, "unfound_spans": self.spans - self.found,
                "several_documents": self.several_documents, "facts": len(self.factset.facts),
                "unfound": {q: list(s) for q, s in self.unfound.items()}}


class EvidenceOracle(RelevanceJudge):
    """Grades chunks and gives minimal facts from labelled evidence spans (module docstring). ``source``: the file
    the evidence came from (named in errors and in ``name``)."""

    def __init__(self, evidence: Mapping[str, Sequence[str]], source: str = "",
                 lines: Mapping[str, int] | None = None) -> None:
        self.evidence = {str(q): list(spans) for q, spans in evidence.items()}
        self.source = source
        self.lines = dict(lines or {})
        self._needles: dict[str, list[str]] = {}
        for qid, spans in self.evidence.items():
            needles = [normalize_span(s) for s in spans]
            if not needles or not all(needles):
                raise ConvragError(f"{source or 'evidence'}: query {qid!r} has no evidence span or an empty one")
            self._needles[qid] = needles
        digest = hashlib.sha256(canonical_json(self.evidence).encode("utf-8")).hexdigest()[:12]
        self.name = f"evidence-oracle({os.path.basename(source) or 'in-memory'}, {digest})"

    def verdict(self, item: AuditItem, doc: AuditDoc, dimension: str = POOLED) -> Verdict:
        """Grade 3 when ``doc.text`` contains a whole evidence span of ``item``, else 0; None when it has none."""
        needles = self._needles.get(item.item_id)
        if needles is None:
            return relevance_verdict(item, doc, self.name, dimension, None, "", "",
                                     f"no evidence for query {item.item_id!r} in {self.source or 'the evidence'}")
        hay = normalize_span(doc.text)
        spans = self.evidence[item.item_id]
        for i, needle in enumerate(needles):
            if needle in hay and locate_span(spans[i], doc.text) is not None:
                note = f"contains evidence span {i + 1}/{len(spans)}: {_short(spans[i])!r}"
                return relevance_verdict(item, doc, self.name, dimension, 3, note, "", None, span=i)
        return relevance_verdict(item, doc, self.name, dimension, 0,
                                 f"contains none of the {len(spans)} evidence spans", "", None)

    def check_queries(self, query_ids: Iterable[str]) -> None:
        """A ConvragError naming the source file, the count and the first 5 queries without an evidence line."""
        ids = list(dict.fromkeys(query_ids))
        missing = [q for q in ids if q not in self.evidence]
        if missing:
            first = ", ".join(repr(q) for q in missing[:5]) + (", ..." if len(missing) > 5 else "")
            raise DataError(f"no evidence line for {len(missing)} of {len(ids)} queries ({first})",
                            self.source or "evidence")

    def check_known(self, query_ids: Iterable[str]) -> None:
        """A DataError naming the source file and line of the first evidence line whose query id is not among
        ``query_ids`` (a mistyped id is never silently ignored)."""
        known = set(query_ids)
        unknown = sorted((self.lines.get(q, 0), q) for q in self.evidence if q not in known)
        if unknown:
            line, qid = unknown[0]
            more = f" ({len(unknown) - 1} more unknown ids)" if len(unknown) > 1 else ""
            raise DataError(f"query_id {qid!r} is not one of the {len(known)} queries{more}", self.source or "evidence",
                            line or None)

    def facts(self, docs: Sequence[tuple[str, str, str]], query_ids: Iterable[str]) -> EvidenceFacts:
        """The located facts of ``query_ids`` in ``docs`` (``(doc_id, title, text)``, module docstring)."""
        ids = list(dict.fromkeys(query_ids))
        self.check_queries(ids)
        norms = [normalize_span(text) for _, _, text in docs]
        starts: list[int] = []
        offset = 0
        for norm in norms:
            starts.append(offset)
            offset += len(norm) + 1
        corpus = "\n".join(norms)  # normalised text holds no newline: no match crosses two documents
        maps: dict[int, list[int]] = {}

        def find(needle: str, start: int) -> tuple[int, int] | None:
            """(document index, normalised position) of the first whole-character match at or after ``start``."""
            pos = corpus.find(needle, start)
            while pos >= 0:
                d = bisect.bisect_right(starts, pos) - 1
                if d not in maps:
                    maps[d] = _fold_map(docs[d][2])[1]
                local = _find(needle, norms[d], maps[d], pos - starts[d])
                if local >= 0:
                    return d, local
                pos = corpus.find(needle, starts[d + 1]) if d + 1 < len(starts) else -1
            return None

        out = EvidenceFacts(FactSet({}, {}))
        located: dict[tuple[int, int, int], set[str]] = {}
        for qid in ids:
            for span, needle in zip(self.evidence[qid], self._needles[qid], strict=True):
                out.spans += 1
                hit = find(needle, 0)
                if hit is None:
                    out.unfound.setdefault(qid, []).append(span)
                    continue
                d, pos = hit
                out.found += 1
                if d + 1 < len(starts) and find(needle, starts[d + 1]) is not None:
                    out.several_documents += 1
                key = (d, maps[d][pos], maps[d][pos + len(needle) - 1] + 1)
                located.setdefault(key, set()).add(qid)
        by_query: dict[str, set[str]] = {}
        for d, start, end in sorted(located):
            doc_id, _, text = docs[d]
            fid = f"{doc_id}:{start}-{end}"
            qids = tuple(sorted(located[(d, start, end)]))
            out.factset.facts[fid] = Fact(fid, doc_id, start, end, text[start:end], qids, ())
            for q in qids:
                by_query.setdefault(q, set()).add(fid)
        out.factset.by_query.update({q: sorted(by_query[q]) for q in ids if q in by_query})
        return out
