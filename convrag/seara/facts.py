"""SEARA minimal retrieval facts (memo ``seara.md`` section 3.2): extract, deduplicate, match, score.

- A *chunk* (:class:`Chunk`) is a verbatim slice of a source document; its span is ``(doc_id, start, end)``,
  character offsets, end exclusive.
- *Extraction* (:func:`extract_facts`): for each (query, judged-relevant chunk) an LLM (prompt ``seara_fact_extract``,
  structured reply ``{"quotes": [...]}``, a bare JSON list read as that list) or any callable returns quotes. A quote
  is kept only when :func:`locate` finds it verbatim in the chunk text (whitespace normalised), its first occurrence
  mapped to document offsets. Quotes not found, the last quote of a reply cut off at ``max_tokens`` (it may end
  mid-quote), failed and unparseable replies are counted by reason and never give facts.
- *Dedupe* (:func:`dedupe_facts`): same-document units merged by span overlap (IoU >= 0.5) into facts with ids
  ``"<doc_id>:<start>-<end>"``, independent of the chunking, the LLM order and the run.
- *Matching* (:func:`match_chunks`), per retrieved chunk and fact, the first rule that holds: ``"span"`` (same
  document, the chunk span holds >= ``theta`` = 0.9 of the fact's characters, as the ``facts`` config of
  ``metrics/pr_auc``), ``"string"`` (the fact text occurs in the chunk text, both under :func:`normalize_text`),
  ``"entail"`` (an optional judge, off by default). *Scores*: :func:`fact_scores`, per query and micro.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from convrag.llm import LLM, load_prompt, run_batch
from convrag.llm.types import EndpointUnreachable, LLMFailure, UnparsableReply
from convrag.retrievers.llm_rewrite import limit_of, list_reply

DEFAULT_THETA = 0.9
DEFAULT_IOU = 0.5
EXTRACT_PROMPT = "seara_fact_extract"
ENTAIL_PROMPT = "seara_fact_entail"


@dataclass(frozen=True)
class Chunk:
    """A retrievable unit: ``text`` is ``document[start:start + len(text)]`` of document ``doc_id``."""

    chunk_id: str
    doc_id: str
    start: int
    text: str

    @property
    def end(self) -> int:
        return self.start + len(self.text)


@dataclass(frozen=True)
class Unit:
    """One accepted quote: the query it answers, the chunk it came from and its document span."""

    query_id: str
    chunk_id: str
    doc_id: str
    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Fact:
    """A deduplicated minimal fact: its span (that of its first unit) and where it was found."""

    fact_id: str
    doc_id: str
    start: int
    end: int
    text: str
    query_ids: tuple[str, ...]
    chunk_ids: tuple[str, ...]


@dataclass
class Extraction:
    """Accepted units, counts by outcome and the rejected quotes ``{query_id, chunk_id, quote}``."""

    units: list[Unit] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    rejected: list[dict[str, str]] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)


@dataclass
class FactSet:
    """``facts`` by id and ``by_query``: the pooled fact ids F'_q of each query, sorted."""

    facts: dict[str, Fact]
    by_query: dict[str, list[str]]

    def for_query(self, query_id: str) -> list[Fact]:
        return [self.facts[f] for f in self.by_query.get(query_id, [])]


@dataclass(frozen=True)
class Match:
    """Retrieved chunk ``chunk_id`` states fact ``fact_id``, decided by ``rule``: span, string or entail."""

    chunk_id: str
    fact_id: str
    rule: str


class FactQuotes(BaseModel):
    """Structured extractor reply."""

    quotes: list[str] = Field(description="verbatim quotes copied from the passage, one fact each")


class Entailment(BaseModel):
    """Structured entailment reply (a reply without its rationale still gives the verdict)."""

    rationale: str = ""
    entailed: bool


Extractor = LLM | Callable[[str, Chunk], Sequence[str]]
Entailer = Callable[[Fact, Chunk], bool | None]


def _ws_index(text: str) -> tuple[str, list[int]]:
    """Whitespace-normalised ``text`` (runs of whitespace -> one space) and, per character, its source index."""
    out: list[str] = []
    where: list[int] = []
    for i, ch in enumerate(text):
        if ch.isspace():
            if out and out[-1] == " ":
                continue
            ch = " "
        out.append(ch)
        where.append(i)
    return "".join(out), where


def locate(quote: str, text: str) -> tuple[int, int] | None:
    """``[start, end)`` in ``text`` of the first verbatim occurrence of ``quote`` under whitespace normalisation
    (leading and trailing whitespace dropped, every run of whitespace read as one space, on both sides; case,
    punctuation and Unicode forms untouched), or None. The span starts and ends on a non-space character of
    ``text``."""
    needle = " ".join(quote.split())
    if not needle:
        return None
    hay, where = _ws_index(text)
    pos = hay.find(needle)
    if pos < 0:
        return None
    return where[pos], where[pos + len(needle) - 1] + 1


def normalize_text(text: str) -> str:
    """String-match normalisation: NFKC, casefold, punctuation and symbols removed, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = "".join(" " if unicodedata.category(c)[0] in "PSZ" or c.isspace() else c for c in text)
    return " ".join(text.split())


def _relevant(relevant: Any) -> dict[str, list[str]]:
    """{query: [relevant chunk ids]} from a mapping of lists or a ``PseudoQrels`` (grade >= its cutoff)."""
    if hasattr(relevant, "qrels") and hasattr(relevant, "cutoff"):
        return {q: sorted(c for c, g in row.items() if g >= relevant.cutoff) for q, row in relevant.qrels.items()}
    return {q: list(chunks) for q, chunks in relevant.items()}


def _quotes_from_llm(llm: LLM, query: str, chunk: Chunk, attempts: int | None) -> tuple[list[str], list[str]]:
    """The extractor's quotes, and the one it cut off: a reply whose JSON had to be closed (cut off at
    ``max_tokens``) and that ends inside a string ended mid-quote, so its last quote is not used."""
    messages = load_prompt(EXTRACT_PROMPT).render(query=query, chunk=chunk.text)
    parsed = llm.structured(messages, FactQuotes, attempts=attempts, fallback=list_reply("quotes"))
    quotes = list(parsed.value.quotes)
    mid_quote = not parsed.text.rstrip().rstrip("`").rstrip().endswith(('"', "]", "}"))
    if "truncated" in parsed.repairs and mid_quote and quotes:
        return quotes[:-1], quotes[-1:]
    return quotes, []


def extract_facts(queries: Mapping[str, str], chunks: Mapping[str, Chunk] | Iterable[Chunk], relevant: Any,
                  extractor: Extractor, *, concurrency: int | None = None, attempts: int | None = None) -> Extraction:
    """Minimal evidence units for every (query, judged-relevant chunk).

    ``relevant``: {query_id: [chunk ids]} or a ``PseudoQrels`` (chunks graded >= its cutoff). ``extractor``: an
    :class:`LLM` (prompt ``seara_fact_extract``, structured, cached by the LLM layer: a rerun makes no calls) or
    ``fn(query, chunk) -> quotes`` (e.g. an oracle). Counts: ``pairs``, ``quotes``, ``accepted``,
    ``rejected_not_verbatim``, ``rejected_cut_off`` (the last quote of a reply cut off at ``max_tokens``),
    ``no_quotes`` (an empty reply: judge/extractor disagreement), ``unparseable``, ``call_failed``,
    ``missing_chunk``. A dead endpoint (:class:`EndpointUnreachable`) propagates. ``concurrency``: pairs asked at
    once (None: an LLM extractor's own ``max_concurrency``, 4 for a callable).
    """
    table = chunks if isinstance(chunks, Mapping) else {c.chunk_id: c for c in chunks}
    out = Extraction()
    pairs: list[tuple[str, Chunk]] = []
    for qid, ids in sorted(_relevant(relevant).items()):
        for cid in ids:
            if cid not in table:
                out.counts["missing_chunk"] += 1
                out.errors.append({"query_id": qid, "chunk_id": cid, "reason": "missing_chunk"})
            else:
                pairs.append((qid, table[cid]))
    out.counts["pairs"] = len(pairs)

    def ask(pair: tuple[str, Chunk]) -> tuple[list[str], list[str]]:
        qid, chunk = pair
        if isinstance(extractor, LLM):
            return _quotes_from_llm(extractor, queries[qid], chunk, attempts)
        return list(extractor(queries[qid], chunk)), []

    batch = run_batch(pairs, ask, limit_of(extractor, concurrency), catch=(LLMFailure,))
    for i, (qid, chunk) in enumerate(pairs):
        err = batch.errors.get(i)
        if err is not None:
            if isinstance(err, EndpointUnreachable):
                raise err
            reason = "unparseable" if isinstance(err, UnparsableReply) else "call_failed"
            out.counts[reason] += 1
            out.errors.append({"query_id": qid, "chunk_id": chunk.chunk_id, "reason": reason, "error": str(err)})
            continue
        got, cut = batch.results[i] or ([], [])
        quotes = [q for q in got if isinstance(q, str)]
        for quote in cut:
            out.counts["rejected_cut_off"] += 1
            out.rejected.append({"query_id": qid, "chunk_id": chunk.chunk_id, "quote": quote})
        if not quotes and not cut:
            out.counts["no_quotes"] += 1
        for quote in quotes:
            out.counts["quotes"] += 1
            span = locate(quote, chunk.text)
            if span is None:
                out.counts["rejected_not_verbatim"] += 1
                out.rejected.append({"query_id": qid, "chunk_id": chunk.chunk_id, "quote": quote})
                continue
            s, e = span
            out.counts["accepted"] += 1
            out.units.append(Unit(qid, chunk.chunk_id, chunk.doc_id, chunk.start + s, chunk.start + e,
                                  chunk.text[s:e]))
    return out


def _iou(a: tuple[int, int], b: tuple[int, int]) -> float:
    inter = max(0, min(a[1], b[1]) - max(a[0], b[0]))
    return inter / (max(a[1], b[1]) - min(a[0], b[0]))


def dedupe_facts(units: Iterable[Unit], *, iou: float = DEFAULT_IOU) -> FactSet:
    """One fact per cluster of same-document units. Units are sorted by (doc, start, end); a unit joins the existing
    fact of its document whose span it overlaps with the highest IoU (intersection / union of characters) when that
    IoU is >= ``iou`` (ties: the earlier fact), else it starts a new fact. A fact keeps the span of its first unit
    in that order (earliest start, then shortest), id ``"<doc_id>:<start>-<end>"``, so ids do not depend on the
    chunking, the LLM order or the run. Facts in different documents are never merged."""
    clusters: dict[str, list[tuple[Unit, list[Unit]]]] = {}
    for unit in sorted(units, key=lambda u: (u.doc_id, u.start, u.end, u.query_id, u.chunk_id)):
        group = clusters.setdefault(unit.doc_id, [])
        best, best_iou = None, 0.0
        for rep, members in group:
            value = _iou((rep.start, rep.end), (unit.start, unit.end))
            if value >= iou and value > best_iou:
                best, best_iou = members, value
        if best is None:
            group.append((unit, [unit]))
        else:
            best.append(unit)
    facts: dict[str, Fact] = {}
    by_query: dict[str, set[str]] = {}
    for doc in sorted(clusters):
        for rep, members in clusters[doc]:
            fid = f"{doc}:{rep.start}-{rep.end}"
            facts[fid] = Fact(fid, doc, rep.start, rep.end, rep.text,
                              tuple(sorted({m.query_id for m in members})),
                              tuple(sorted({m.chunk_id for m in members})))
            for m in members:
                by_query.setdefault(m.query_id, set()).add(fid)
    return FactSet(facts, {q: sorted(ids) for q, ids in sorted(by_query.items())})


def _union(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted disjoint intervals covering ``spans``."""
    merged: list[tuple[int, int]] = []
    for s, e in sorted(spans):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def _covered_share(fact: Fact, spans: Iterable[tuple[int, int]]) -> float:
    inside = sum(max(0, min(e, fact.end) - max(s, fact.start)) for s, e in _union(spans))
    return inside / (fact.end - fact.start)


def match_chunks(retrieved: Iterable[Chunk], facts: Iterable[Fact], *, theta: float = DEFAULT_THETA,
                 entail: Entailer | None = None) -> list[Match]:
    """Which retrieved chunk states which fact, and by which rule (span, then string, then ``entail``)."""
    facts = list(facts)
    needles = [normalize_text(f.text) for f in facts]
    out: list[Match] = []
    for chunk in retrieved:
        norm = None
        for fact, needle in zip(facts, needles, strict=True):
            if fact.doc_id == chunk.doc_id and _covered_share(fact, [(chunk.start, chunk.end)]) >= theta:
                out.append(Match(chunk.chunk_id, fact.fact_id, "span"))
                continue
            norm = normalize_text(chunk.text) if norm is None else norm
            if needle and needle in norm:
                out.append(Match(chunk.chunk_id, fact.fact_id, "string"))
            elif entail is not None and entail(fact, chunk):
                out.append(Match(chunk.chunk_id, fact.fact_id, "entail"))
    return out


def llm_entailment(llm: LLM, counts: Counter[str] | None = None) -> Entailer:
    """An ``entail`` judge for :func:`match_chunks` (prompt ``seara_fact_entail``, structured, cached). Counts
    ``entail_calls`` and ``entail_failed`` (no verdict: treated as not entailed) in ``counts``."""
    tally = counts if counts is not None else Counter()

    def judge(fact: Fact, chunk: Chunk) -> bool | None:
        tally["entail_calls"] += 1
        messages = load_prompt(ENTAIL_PROMPT).render(fact=fact.text, chunk=chunk.text)
        try:
            return bool(llm.structured(messages, Entailment).value.entailed)
        except EndpointUnreachable:
            raise
        except LLMFailure:
            tally["entail_failed"] += 1
            return None

    judge.counts = tally  # type: ignore[attr-defined]
    return judge


def fact_scores(run: Mapping[str, Sequence[str]], chunks: Mapping[str, Chunk], factset: FactSet, *,
                theta: float = DEFAULT_THETA, entail: Entailer | None = None) -> dict[str, Any]:
    """``fact_recall`` = facts of F'_q matched by some retrieved chunk, or covered >= ``theta`` by the union of
    retrieved spans (a fact split by a chunk boundary) / |F'_q|; ``chunk_precision`` = retrieved chunks matching >= 1
    fact of F'_q / retrieved chunks; ``char_precision`` = characters of the union of retrieved spans inside some
    fact span of F'_q / characters of that union. Per query and micro (numerators and denominators summed over
    queries with facts), with the matches and how many each rule decided. Queries without facts are listed in
    ``excluded``."""
    per_query: dict[str, dict[str, Any]] = {}
    totals: Counter[str] = Counter()
    rules: Counter[str] = Counter()
    excluded: list[str] = []
    for qid, ranking in run.items():
        facts = factset.for_query(qid)
        if not facts:
            excluded.append(qid)
            continue
        retrieved = [chunks[c] for c in ranking]
        matches = match_chunks(retrieved, facts, theta=theta, entail=entail)
        rules.update(m.rule for m in matches)
        covered = {m.fact_id for m in matches}
        for fact in facts:
            spans = [(c.start, c.end) for c in retrieved if c.doc_id == fact.doc_id]
            if fact.fact_id not in covered and spans and _covered_share(fact, spans) >= theta:
                covered.add(fact.fact_id)
        hit_chunks = len({m.chunk_id for m in matches})
        inside = size = 0
        for doc in sorted({c.doc_id for c in retrieved}):
            union = _union((c.start, c.end) for c in retrieved if c.doc_id == doc)
            size += sum(e - s for s, e in union)
            in_facts = _union((f.start, f.end) for f in facts if f.doc_id == doc)
            inside += sum(max(0, min(e, fe) - max(s, fs)) for s, e in union for fs, fe in in_facts)
        row = {"n_facts": len(facts), "n_covered": len(covered), "n_retrieved": len(retrieved),
               "n_chunks_with_fact": hit_chunks, "chars_retrieved": size, "chars_in_facts": inside,
               "fact_recall": len(covered) / len(facts),
               "chunk_precision": hit_chunks / len(retrieved) if retrieved else None,
               "char_precision": inside / size if size else None,
               "covered": sorted(covered), "matches": matches}
        per_query[qid] = row
        for key in ("n_facts", "n_covered", "n_retrieved", "n_chunks_with_fact", "chars_retrieved", "chars_in_facts"):
            totals[key] += row[key]

    def ratio(a: str, b: str) -> float | None:
        return totals[a] / totals[b] if totals[b] else None

    micro = {"fact_recall": ratio("n_covered", "n_facts"),
             "chunk_precision": ratio("n_chunks_with_fact", "n_retrieved"),
             "char_precision": ratio("chars_in_facts", "chars_retrieved")}
    return {"micro": micro, "per_query": per_query, "rules": dict(rules), "excluded": excluded}


def pr_auc_inputs(run: Mapping[str, Sequence[str]], chunks: Mapping[str, Chunk], factset: FactSet, *,
                  coverage: str = "spans", theta: float = DEFAULT_THETA,
                  entail: Entailer | None = None) -> dict[str, Any]:
    """Keyword arguments for ``evaluate.load("metrics/pr_auc", "facts").compute(**inputs)``.

    ``coverage="spans"``: ``chunk_spans`` and ``fact_spans`` (the metric applies ``coverage_threshold`` over the
    union of top-k spans); ``"mapping"``: ``chunk_facts`` per query from :func:`match_chunks` (all three rules,
    for chunks whose offsets cannot be trusted). A query without facts gets an empty reference (excluded)."""
    qids = list(run)
    inputs: dict[str, Any] = {"predictions": [list(run[q]) for q in qids],
                              "references": [list(factset.by_query.get(q, [])) for q in qids], "query_ids": qids}
    if coverage == "spans":
        used = {c for q in qids for c in run[q]}
        inputs["chunk_spans"] = {c: [chunks[c].doc_id, chunks[c].start, chunks[c].end] for c in sorted(used)}
        inputs["fact_spans"] = {f.fact_id: [f.doc_id, f.start, f.end] for f in factset.facts.values()}
        inputs["coverage_threshold"] = theta
    elif coverage == "mapping":
        per_query: dict[str, dict[str, list[str]]] = {}
        for q in qids:
            covers: dict[str, list[str]] = {c: [] for c in run[q]}
            for m in match_chunks([chunks[c] for c in run[q]], factset.for_query(q), theta=theta, entail=entail):
                covers[m.chunk_id].append(m.fact_id)
            per_query[q] = covers
        inputs["chunk_facts"] = [per_query[q] for q in qids]
    else:
        raise ValueError(f"coverage must be 'spans' or 'mapping', got {coverage!r}")
    return inputs
