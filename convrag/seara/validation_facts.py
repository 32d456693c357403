"""SEARA minimal-facts validation on HotpotQA (memo ``shared/reference/seara.md`` section 6.7 item 6).

Each query's document D_q is its StratRAG pool (:func:`convrag.seara.validation.load_hotpotqa`) joined into one
text; gold facts are the ``supporting_facts`` sentences as spans of it. Several chunkings of D_q are retrieved
with BM25 and scored by :func:`convrag.seara.facts.fact_scores` (:func:`facts_checks` states what is checked).
"""

from __future__ import annotations

from statistics import fmean
from typing import Any

from convrag.retrievers import get_retriever
from convrag.seara.facts import Chunk, Fact, FactSet, fact_scores
from convrag.seara.validation import TruthSet, ValidationError

#: chunkings of a query's document: HotpotQA sentences, paragraphs, merges of two consecutive paragraphs, fixed
#: character windows of 300 starting at offset 0 and at offset 150
CHUNKINGS = ("sentence", "paragraph", "paragraph-pair", "window-300", "window-300+150")
WINDOW = 300


def query_document(truth: TruthSet, qid: str) -> tuple[str, dict[str, int]]:
    """D_q: the query's pool paragraphs sorted by doc id, joined by a blank line; and each paragraph's offset."""
    if truth.pools is None:
        raise ValidationError(f"truth set {truth.name!r} has no pools: the facts checks need hotpotqa")
    offsets, parts, pos = {}, [], 0
    for doc_id in sorted(truth.pools[qid]):
        offsets[doc_id] = pos
        parts.append(truth.corpus[doc_id])
        pos += len(parts[-1]) + 2
    return "\n\n".join(parts), offsets


def chunk_document(truth: TruthSet, qid: str, how: str) -> list[Chunk]:
    """The chunks of D_q (:func:`query_document`) under chunking ``how`` (:data:`CHUNKINGS`): verbatim slices of
    D_q, ``doc_id`` = ``qid``, ids ``<qid>#<how>#<start>``."""
    text, offsets = query_document(truth, qid)
    sentences = truth.sentences
    paras = sorted((o, o + len(truth.corpus[d])) for d, o in offsets.items())
    if how == "sentence":
        spans = [(offsets[d] + s, offsets[d] + e) for d in sorted(offsets) for s, e in sentences.get(d, ())]
    elif how == "paragraph":
        spans = paras
    elif how == "paragraph-pair":
        spans = [(paras[i][0], paras[min(i + 1, len(paras) - 1)][1]) for i in range(0, len(paras), 2)]
    elif how.startswith("window-"):
        start = WINDOW // 2 if how.endswith("+150") else 0
        spans = ([(0, start)] if start else []) + [(s, min(s + WINDOW, len(text))) for s in range(start, len(text),
                                                                                                  WINDOW)]
    else:
        raise ValidationError(f"unknown chunking {how!r}; known: {', '.join(CHUNKINGS)}")
    return [Chunk(f"{qid}#{how}#{s}", qid, s, text[s:e]) for s, e in spans if e > s]


def facts_checks(truth: TruthSet, k: int = 10) -> dict[str, Any]:
    """Memo 6.7 item 6 on HotpotQA, per chunking (BM25 top-``k`` over each query's chunks; gold facts = the
    supporting sentences). Per chunking: (i) ``fact_recall`` (:func:`fact_scores`, theta = 1.0) and
    ``sentence_recall`` (gold sentences whose every character lies in the union of retrieved spans);
    (ii) ``chunk_recall``: relevant retrieved / relevant pooled, where the pool is every chunking's chunks and a
    chunk is relevant when it overlaps a gold sentence, for the BM25 run and for the ``ideal`` run (every relevant
    chunk of the chunking), whose fact recall is 1; (iii) ``chunk_precision`` and ``char_precision`` at ``k``
    (:func:`fact_scores`), with ``mean_chunk_chars`` to name the coarsest chunking."""
    facts: dict[str, Fact] = {}
    by_query: dict[str, list[str]] = {}
    chunks: dict[str, dict[str, Chunk]] = {how: {} for how in CHUNKINGS}
    for qid in truth.queries:
        text, offsets = query_document(truth, qid)
        for d, s, e in truth.facts.get(qid, []):
            f = Fact(f"{qid}:{offsets[d] + s}-{offsets[d] + e}", qid, offsets[d] + s, offsets[d] + e, text[
                offsets[d] + s:offsets[d] + e], (qid,), ())
            facts[f.fact_id] = f
            by_query.setdefault(qid, []).append(f.fact_id)
        for how in CHUNKINGS:
            chunks[how].update((c.chunk_id, c) for c in chunk_document(truth, qid, how))
    factset = FactSet(facts, {q: sorted(v) for q, v in by_query.items()})

    def relevant(c: Chunk) -> bool:
        return any(f.start < c.end and c.start < f.end for f in factset.for_query(c.doc_id))

    pooled = sum(relevant(c) for by in chunks.values() for c in by.values())
    out: dict[str, Any] = {"k": k, "queries": len(by_query), "facts": len(facts), "pooled_relevant_chunks": pooled,
                           "chunkings": {}}
    for how, by in chunks.items():
        pools = {q: [c for c in by if by[c].doc_id == q] for q in truth.queries}
        bm25 = get_retriever("bm25", show_progress=False).index({c: x.text for c, x in by.items()}, show_progress=False)
        run = {q: list(r) for q, r in bm25.search(truth.queries, top_k=k, pools=pools).items()}
        ideal = {q: [c for c in pools[q] if relevant(by[c])] for q in truth.queries}
        scores, best = fact_scores(run, by, factset, theta=1.0), fact_scores(ideal, by, factset, theta=1.0)
        covered = total = 0
        for q, ids in run.items():
            spans = [(by[c].start, by[c].end) for c in ids]
            for f in factset.for_query(q):
                total += 1
                covered += all(any(s <= i < e for s, e in spans) for i in range(f.start, f.end))
        out["chunkings"][how] = {
            "chunks": len(by), "mean_chunk_chars": fmean([len(c.text) for c in by.values()]),
            "fact_recall": scores["micro"]["fact_recall"], "sentence_recall": covered / total,
            "chunk_recall": sum(relevant(by[c]) for ids in run.values() for c in ids) / pooled,
            "ideal_fact_recall": best["micro"]["fact_recall"],
            "ideal_chunk_recall": sum(map(len, ideal.values())) / pooled,
            "chunk_precision": scores["micro"]["chunk_precision"], "char_precision": scores["micro"]["char_precision"]}
    rows = out["chunkings"]
    coarsest = max(rows, key=lambda h: rows[h]["mean_chunk_chars"])
    out["coarsest"] = coarsest
    out["best_chunk_precision"] = max(rows, key=lambda h: rows[h]["chunk_precision"])
    out["best_char_precision"] = max(rows, key=lambda h: rows[h]["char_precision"])
    return out
