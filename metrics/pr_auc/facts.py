"""Fact-level counts for the ``facts`` config: recall over a query's pooled minimal facts F'_q, which does not
depend on how the corpus was chunked, and precision from chunk judgments or from retrieved characters.

- Fact recall at k: facts of F'_q covered by the top min(k, n) chunks / |F'_q|. A chunk may cover several
  facts; a fact counts once, however many chunks repeat it.
- Coverage from a mapping (``chunk_facts``: chunk -> facts it states, e.g. from entailment): covered when some
  top-k chunk maps to it. From spans (``chunk_spans``, ``fact_spans``: (doc id, start, end) character offsets,
  end exclusive): covered when the union of the top-k chunk spans holds at least ``coverage_threshold`` of the
  fact's characters (so a fact split across two chunks counts once both are retrieved).
- Precision ``chunk``: relevant chunks in the top min(k, n) / min(k, n) (or / k), relevant meaning listed in
  ``relevant_chunks`` or, without that list, stating some fact of F'_q (with spans: sharing a character with
  one). Precision ``char`` (spans only): characters of the union of the top-k spans inside a fact of F'_q /
  characters of that union.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .compute import PRECISION_DENOMINATORS, QueryCounts, aggregate
from .inputs import PrAucInputError, check_k, choice, id_list, is_number, ranking, unique_ids

PRECISION_UNITS = ("chunk", "char")
DEFAULT_COVERAGE_THRESHOLD = 0.9

Span = tuple[str, int, int]
Intervals = list[tuple[int, int]]


def parse_span(owner: str, value: Any) -> Span:
    """``[doc_id, start, end]`` or ``{"doc_id", "start", "end"}`` with 0 <= start < end (character offsets)."""
    if isinstance(value, Mapping):
        value = [value.get("doc_id"), value.get("start"), value.get("end")]
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 3:
        raise PrAucInputError(f"{owner}: a span must be [doc_id, start, end], got {value!r}")
    doc, start, end = value
    if not isinstance(doc, str) or not is_number(start, True) or not is_number(end, True) or not 0 <= start < end:
        raise PrAucInputError(f"{owner}: a span needs a doc id string and integer offsets 0 <= start < end, "
                              f"got {list(value)!r}")  # fmt: skip
    return doc, int(start), int(end)


def _merge(intervals: Intervals, start: int, end: int) -> Intervals:
    """``intervals`` (sorted, disjoint) with [start, end) added."""
    out: Intervals = []
    for s, e in sorted([*intervals, (start, end)]):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _overlap(a: Intervals, b: Intervals) -> int:
    """Characters shared by two sorted lists of disjoint intervals."""
    i = j = total = 0
    while i < len(a) and j < len(b):
        total += max(0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def mapping_counts(query_id: str, ranked: Sequence[str], facts: frozenset[str],
                   covers: Mapping[str, Sequence[str]], strict: bool,
                   relevant_chunks: frozenset[str] | None) -> QueryCounts:
    """Counts when coverage is a chunk -> facts mapping. With ``strict`` (a mapping for this query) a fact outside
    F'_q is an error; a shared mapping may name other queries' facts, which are ignored here."""
    covered: set[str] = set()
    found: list[int] = []
    hits: list[float] = []
    for chunk in ranked:
        stated = set(id_list(query_id, covers.get(chunk, []), f"chunk_facts[{chunk!r}]"))
        if strict and stated - facts:
            raise PrAucInputError(f"query {query_id!r}: chunk {chunk!r} covers {sorted(stated - facts)[0]!r}, "
                                  "which is not one of the query's pooled facts")  # fmt: skip
        stated &= facts
        covered |= stated
        found.append(len(covered))
        relevant = chunk in relevant_chunks if relevant_chunks is not None else bool(stated)
        hits.append((hits[-1] if hits else 0.0) + relevant)
    sizes = tuple(float(i) for i in range(1, len(found) + 1))
    return QueryCounts(query_id, len(facts), tuple(found), tuple(hits), sizes)


def span_counts(query_id: str, ranked: Sequence[str], facts: frozenset[str], chunk_spans: Mapping[str, Any],
                fact_spans: Mapping[str, Any], threshold: float, unit: str,
                relevant_chunks: frozenset[str] | None) -> QueryCounts:
    """Counts when coverage comes from character spans (see the module docstring)."""
    fact_at: dict[str, Span] = {}
    inside: dict[str, Intervals] = {}
    for fact in sorted(facts):
        if fact not in fact_spans:
            raise PrAucInputError(f"query {query_id!r}: fact {fact!r} has no span in fact_spans")
        fact_at[fact] = parse_span(f"query {query_id!r}, fact {fact!r}", fact_spans[fact])
        doc, start, end = fact_at[fact]
        inside[doc] = _merge(inside.get(doc, []), start, end)
    retrieved: dict[str, Intervals] = {}
    covered: set[str] = set()
    found: list[int] = []
    hits: list[float] = []
    sizes: list[float] = []
    for rank, chunk in enumerate(ranked, start=1):
        if chunk not in chunk_spans:
            raise PrAucInputError(f"query {query_id!r}: chunk {chunk!r} (rank {rank}) has no span in chunk_spans")
        doc, start, end = parse_span(f"query {query_id!r}, chunk {chunk!r}", chunk_spans[chunk])
        retrieved[doc] = _merge(retrieved.get(doc, []), start, end)
        for fact, (fdoc, fstart, fend) in fact_at.items():
            if fact in covered:
                continue
            share = _overlap([(fstart, fend)], retrieved[doc]) / (fend - fstart) if fdoc == doc else 0.0
            if share >= threshold:
                covered.add(fact)
        found.append(len(covered))
        if unit == "char":
            hits.append(float(sum(_overlap(iv, inside.get(d, [])) for d, iv in retrieved.items())))
            sizes.append(float(sum(e - s for iv in retrieved.values() for s, e in iv)))
        else:
            if relevant_chunks is not None:
                relevant = chunk in relevant_chunks
            else:
                relevant = _overlap([(start, end)], inside.get(doc, [])) > 0
            hits.append((hits[-1] if hits else 0.0) + relevant)
            sizes.append(float(rank))
    return QueryCounts(query_id, len(facts), tuple(found), tuple(hits), tuple(sizes))


def score_facts(run: Mapping[str, Sequence[str]], facts: Mapping[str, Sequence[str]], *,
                chunk_facts: Mapping[str, Any] | None = None, chunk_spans: Mapping[str, Any] | None = None,
                fact_spans: Mapping[str, Any] | None = None,
                relevant_chunks: Mapping[str, Sequence[str]] | None = None,
                coverage_threshold: float = DEFAULT_COVERAGE_THRESHOLD, precision_unit: str = "chunk",
                k: int | None = None, precision_denominator: str = "retrieved", integration: str = "step",
                include_unanswerable_in_precision: bool = False, duplicates: str = "error",
                scores: Mapping[str, Sequence[float]] | None = None, pool_signature: str | None = None,
                return_query_curves: bool = False) -> dict[str, Any]:
    """Fact-level PR-AUC of ``run`` ({query: ranked chunk ids}) against ``facts`` ({query: pooled fact ids}).

    Coverage: ``chunk_facts`` ({chunk: [facts]}, shared, or {query: {chunk: [facts]}}) or ``chunk_spans`` with
    ``fact_spans``. Queries without pooled facts are excluded. Outputs as :func:`compute.aggregate`."""
    if not isinstance(run, Mapping) or not isinstance(facts, Mapping):
        raise PrAucInputError("run and facts must be dicts keyed by query id")
    choice("precision_unit", precision_unit, PRECISION_UNITS)
    choice("precision_denominator", precision_denominator, PRECISION_DENOMINATORS)
    choice("duplicates", duplicates, ("error", "keep_first"))
    if pool_signature is not None and not isinstance(pool_signature, str):
        raise PrAucInputError(f"pool_signature must be a string, got {pool_signature!r}")
    spans = chunk_spans is not None or fact_spans is not None
    if spans == (chunk_facts is not None) or (spans and (chunk_spans is None or fact_spans is None)):
        raise PrAucInputError("give the coverage either as chunk_facts or as chunk_spans with fact_spans")
    if precision_unit == "char" and (not spans or precision_denominator != "retrieved"):
        raise PrAucInputError("precision_unit='char' needs chunk_spans and fact_spans and "
                              "precision_denominator='retrieved'")  # fmt: skip
    if not is_number(coverage_threshold) or not 0 < coverage_threshold <= 1:
        raise PrAucInputError(f"coverage_threshold must be in (0, 1], got {coverage_threshold!r}")
    for name, value in (("chunk_spans", chunk_spans), ("fact_spans", fact_spans), ("chunk_facts", chunk_facts),
                        ("relevant_chunks", relevant_chunks), ("scores", scores)):
        if value is not None and not isinstance(value, Mapping):
            raise PrAucInputError(f"{name} must be a dict, got {type(value).__name__}")
    per_query_map = chunk_facts is not None and any(isinstance(v, Mapping) for v in chunk_facts.values())
    if per_query_map and not all(isinstance(v, Mapping) for v in chunk_facts.values()):
        raise PrAucInputError("chunk_facts must map chunks to fact lists, or queries to such dicts, not a mix")
    lists: dict[str, list[str]] = {}
    for qid, items in run.items():
        if not isinstance(qid, str) or qid not in facts:
            raise PrAucInputError(f"query {qid!r} is ranked but has no pooled facts: every ranked query needs them")
        lists[qid] = ranking(qid, items, None if scores is None else scores.get(qid), duplicates)
    missing = [qid for qid in facts if qid not in lists]
    depth = check_k(k, list(lists.values()))
    counts: list[QueryCounts] = []
    for qid in [*lists, *missing]:
        pooled = unique_ids(qid, facts[qid], "the pooled facts")
        ranked = lists.get(qid, [])[:depth]
        judged = None if relevant_chunks is None else unique_ids(qid, relevant_chunks.get(qid, []), "relevant_chunks")
        if spans:
            counts.append(span_counts(qid, ranked, pooled, chunk_spans, fact_spans, float(coverage_threshold),
                                      precision_unit, judged))  # fmt: skip
        else:
            covers = chunk_facts.get(qid, {}) if per_query_map else chunk_facts
            if not isinstance(covers, Mapping):
                raise PrAucInputError(f"query {qid!r}: chunk_facts must map chunk ids to fact id lists")
            counts.append(mapping_counts(qid, ranked, pooled, covers, per_query_map, judged))
    result = aggregate(counts, depth, precision_denominator=precision_denominator, integration=integration,
                       include_unanswerable_in_precision=bool(include_unanswerable_in_precision),
                       return_query_curves=bool(return_query_curves))  # fmt: skip
    result.update(missing_query_ids=missing, n_unjudged=0, pool_signature=pool_signature)
    result["settings"] = dict(config="facts", k=depth, coverage="spans" if spans else "mapping",
                                  coverage_threshold=float(coverage_threshold), precision_unit=precision_unit,
                                  precision_denominator=precision_denominator, integration=integration,
                                  include_unanswerable_in_precision=bool(include_unanswerable_in_precision),
                                  duplicates=duplicates, pool_signature=pool_signature)  # fmt: skip
    return result
