"""Fact-level scoring of one SEARA pool: every configuration scored on the same minimal facts, whatever its
chunking (memo ``shared/reference/seara.md`` section 3; paper section 2.3).

* **facts of a pool** (F'_q): an evidence oracle's spans (:class:`OracleFacts`), else the verbatim quotes an LLM
  extracts from the chunks judged relevant (grade >= the level) in this pool (:class:`LLMFacts`), mapped to document
  offsets and merged across chunkings (:func:`convrag.seara.facts.dedupe_facts`). A query with a failed extraction
  (call failed after retries, no readable reply) is left out of the pool's fact-level scores and listed; one whose
  relevant chunks gave no accepted quote has no facts and is excluded like a query with R' = 0.
* **a retrieved chunk states a fact** (:func:`chunk_facts`) when it holds the whole fact: same document and a span
  containing every character of the fact's, or the fact's normalised text (:func:`convrag.seara.facts.normalize_text`)
  occurs in the chunk's. A fact cut by a chunk boundary is stated by neither half (:data:`FACT_THETA` = 1.0).
* **fact-level PR-AUC** (``metrics/pr_auc`` config ``facts``, coverage by that mapping): micro step PR-AUC at cut-offs
  1..K, R(k) = facts of F'_q stated by some top-k chunk / |F'_q|, P(k) = top-k chunks stating a fact of F'_q /
  min(k, n), both summed over queries: precision rests on the facts like recall.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from convrag.llm import LLM, load_prompt
from convrag.metrics.pr_auc.compute import QueryCounts
from convrag.metrics.pr_auc.facts import mapping_counts, score_facts
from convrag.seara.facts import EXTRACT_PROMPT, Chunk, FactQuotes, FactSet, dedupe_facts, extract_facts, match_chunks

#: share of a fact's characters a single chunk must hold to state it
FACT_THETA = 1.0

RunLists = Mapping[str, Sequence[str]]


def chunk_facts(run: RunLists, chunks: Mapping[str, Chunk], factset: FactSet,
                query_ids: Sequence[str]) -> dict[str, dict[str, list[str]]]:
    """``{query: {retrieved chunk: [fact ids of F'_q it states]}}`` (module docstring rule) for ``query_ids``."""
    out: dict[str, dict[str, list[str]]] = {}
    for q in query_ids:
        ranked = list(run.get(q, ()))
        covers: dict[str, list[str]] = {c: [] for c in ranked}
        for m in match_chunks([chunks[c] for c in ranked], factset.for_query(q), theta=FACT_THETA):
            covers[m.chunk_id].append(m.fact_id)
        out[q] = covers
    return out


def _counts(covers: Mapping[str, Mapping[str, list[str]]], factset: FactSet,
            query_ids: Sequence[str]) -> list[QueryCounts]:
    return [mapping_counts(q, list(covers[q]), frozenset(factset.by_query.get(q, [])), covers[q], True, None)
            for q in query_ids]


def score_and_count(runs: Mapping[str, RunLists], chunks: Mapping[str, Chunk], factset: FactSet, k: int,
                    query_ids: Sequence[str], *, pool_signature: str | None = None
                    ) -> tuple[dict[str, dict[str, Any]], dict[str, list[QueryCounts]]]:
    """:func:`score_runs` and, per configuration, the :func:`query_counts` it aggregates (for the paired
    bootstrap), from one matching of each run's chunks to the facts."""
    facts = {q: list(factset.by_query.get(q, [])) for q in query_ids}
    scores, counts = {}, {}
    for name, run in runs.items():
        ranked = {q: list(run.get(q, ()))[:k] for q in query_ids}
        covers = chunk_facts(ranked, chunks, factset, query_ids)
        scores[name] = score_facts(ranked, facts, chunk_facts=covers, k=k, pool_signature=pool_signature)
        counts[name] = _counts(covers, factset, query_ids)
    return scores, counts


def score_runs(runs: Mapping[str, RunLists], chunks: Mapping[str, Chunk], factset: FactSet, k: int,
               query_ids: Sequence[str], *, pool_signature: str | None = None) -> dict[str, dict[str, Any]]:
    """Each configuration's ``metrics/pr_auc`` ``facts`` result over ``query_ids`` (a query without facts is
    excluded, as R' = 0), cut at ``k``."""
    return score_and_count(runs, chunks, factset, k, query_ids, pool_signature=pool_signature)[0]


def query_counts(run: RunLists, chunks: Mapping[str, Chunk], factset: FactSet, k: int,
                 query_ids: Sequence[str]) -> list[QueryCounts]:
    """Per query of ``query_ids`` (in order) the fact-level counts at cut-offs 1..k: what :func:`score_runs`
    aggregates, for the paired bootstrap."""
    covers = chunk_facts({q: list(run.get(q, ()))[:k] for q in query_ids}, chunks, factset, query_ids)
    return _counts(covers, factset, query_ids)


#: extraction outcomes that mean the extractor gave no usable answer for a pair (the query is left out)
FAILED = ("call_failed", "unparseable")


@dataclass
class PoolFacts:
    """The minimal facts of one pool and how they were obtained.

    ``source``: ``"llm"`` (extracted) or ``"evidence"`` (an oracle's spans); ``counts``: outcomes (pairs, quotes,
    accepted, rejected_not_verbatim, rejected_cut_off, no_quotes, unparseable, call_failed; for evidence: spans,
    found, unfound, several_documents); ``failed_queries``: left out of the fact-level scores (a failed
    extraction); ``errors``: one ``{query_id, chunk_id, reason, error}`` per failed pair; ``unfound``: evidence
    spans found in no document; ``llm``: the extractor's share of its LLM report for this pool."""

    factset: FactSet
    source: str
    counts: dict[str, int] = field(default_factory=dict)
    failed_queries: list[str] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)
    unfound: dict[str, list[str]] = field(default_factory=dict)
    llm: dict[str, Any] | None = None

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures (errors and unfound spans listed, the first 50 of each)."""
        return {"source": self.source, "facts": len(self.factset.facts),
                "queries_with_facts": len(self.factset.by_query), "counts": dict(self.counts),
                "failed_queries": list(self.failed_queries), "errors": self.errors[:50],
                "unfound": {q: v for q, v in list(self.unfound.items())[:50]}, "llm": self.llm}


#: what gives a pool its facts: ``(queries {id: text}, chunks {id: Chunk}, relevant {query: [chunk ids]})``
FactSource = Callable[[Mapping[str, str], Mapping[str, Chunk], Mapping[str, Sequence[str]]], PoolFacts]


class LLMFacts:
    """Facts extracted by ``llm`` from the judged-relevant chunks (:func:`convrag.seara.facts.extract_facts`, prompt
    ``seara_fact_extract``), ``concurrency`` calls at a time (None: the LLM's own ``max_concurrency``), through the
    LLM cache (a rerun or a later pool with the same pair makes no call)."""

    source = "llm"

    def __init__(self, llm: LLM, concurrency: int | None = None) -> None:
        self.llm, self.concurrency = llm, concurrency

    def estimate(self, queries: Mapping[str, str], chunks: Mapping[str, Chunk],
                 relevant: Mapping[str, Sequence[str]]) -> tuple[int, int]:
        """(pairs, calls): relevant (query, chunk) pairs and those not answered by the cache yet."""
        pairs = [(q, c) for q, ids in relevant.items() for c in ids]
        cached = sum(self.llm.is_cached(load_prompt(EXTRACT_PROMPT).render(query=queries[q], chunk=chunks[c].text),
                                        FactQuotes) for q, c in pairs)  # fmt: skip
        return len(pairs), len(pairs) - cached

    def __call__(self, queries: Mapping[str, str], chunks: Mapping[str, Chunk],
                 relevant: Mapping[str, Sequence[str]]) -> PoolFacts:
        before = self.llm.report.to_dict()
        got = extract_facts(queries, chunks, relevant, self.llm, concurrency=self.concurrency)
        failed = sorted({e["query_id"] for e in got.errors if e["reason"] in FAILED})
        factset = dedupe_facts(u for u in got.units if u.query_id not in failed)
        after = self.llm.report.to_dict()
        delta = {k: v - before.get(k, 0) for k, v in after.items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool)}
        return PoolFacts(factset, self.source, dict(got.counts), failed, got.errors, llm=delta)


class OracleFacts:
    """The facts of an evidence oracle (:class:`convrag.seara.evidence.EvidenceOracle`): its spans located in the
    corpus ``docs``, the same for every pool (no LLM call)."""

    source = "evidence"

    def __init__(self, oracle: Any, docs: Sequence[tuple[str, str, str]]) -> None:
        self.oracle, self.docs = oracle, docs
        self._found: dict[tuple[str, ...], Any] = {}

    def estimate(self, queries: Mapping[str, str], chunks: Mapping[str, Chunk],
                 relevant: Mapping[str, Sequence[str]]) -> tuple[int, int]:
        return sum(map(len, relevant.values())), 0

    def __call__(self, queries: Mapping[str, str], chunks: Mapping[str, Chunk],
                 relevant: Mapping[str, Sequence[str]]) -> PoolFacts:
        qids = tuple(sorted(queries))
        if qids not in self._found:
            self._found[qids] = self.oracle.facts(self.docs, qids)
        got = self._found[qids]
        counts = {"spans": got.spans, "found": got.found, "unfound": got.spans - got.found,
                  "several_documents": got.several_documents}
        return PoolFacts(got.factset, self.source, counts, unfound=dict(got.unfound))
