"""SEARA validation across chunkings: do ``select``'s chunk- and fact-level rankings order them as true recall does?

* *Evidence sets* (:class:`EvidenceSet`, :func:`load_hotpotqa_evidence`, :func:`load_mtrag_evidence`): documents
  ``(doc_id, title, text)``, queries, and per query its gold evidence spans (verbatim, kept once under
  :func:`~convrag.seara.evidence.normalize_span`).
* *Configurations* (:func:`make_runs`): :data:`CHUNKINGS` x :data:`RETRIEVALS` (``dense`` optional), named
  ``<chunking>/<retrieval>``, run exactly as ``select`` runs them, top ``K`` chunks each; *truth*: their evidence
  recall@K (:func:`evidence_recall`).
* *Judges*: ``oracle`` = :class:`~convrag.seara.evidence.EvidenceOracle` (grade 3 when a chunk contains a whole
  evidence span, else 0; facts = the spans located in the documents), judged once; ``noisy-<r>``, r in
  :data:`NOISE_RATES`, seeds 0..seeds-1: grades flipped (:func:`flip`), facts perturbed (:func:`noisy_evidence`).
* *Rankings*, compared with the truth by :func:`convrag.seara.validation.compare` (Kendall tau-b, top-1 agreement,
  regret = true best - true value of the chosen): ``chunk`` = micro step PR-AUC@K (``score_chunks``, unjudged =
  non-relevant) against the judged pool of all configurations (union of their top-K lists, as ``select`` pools);
  ``fact`` = :func:`convrag.seara.fact_level.score_runs` ``pr_auc`` over the judge's facts.
"""

from __future__ import annotations

import functools
import random
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from statistics import fmean, median
from typing import Any

from convrag.builders.mtrag import MTRAG
from convrag.builders.mtrag_source import locate
from convrag.builders.stratrag import read_hotpot
from convrag.core.errors import ConvragError
from convrag.seara.chunking import sentence_spans
from convrag.seara.evidence import EvidenceOracle, normalize_span
from convrag.seara.fact_level import score_runs
from convrag.seara.facts import Chunk
from convrag.seara.inputs import Document
from convrag.seara.judge import judge_pool
from convrag.seara.pool import build_pool
from convrag.seara.runner import Runner
from convrag.seara.space import parse_space
from convrag.seara.validation import NOISE_RATES, ValidationError, compare, load_mtrag, micro_pr_auc

CHUNKINGS: dict[str, dict[str, Any]] = {
    "paragraphs": {"strategy": "original"}, "sent1": {"strategy": "sentences", "n": 1},
    "sent3": {"strategy": "sentences", "n": 3}, "r256": {"strategy": "recursive", "chunk_size": 256},
    "r512": {"strategy": "recursive", "chunk_size": 512}}
#: dense keeps no embeddings on disk (the validation writes nothing outside its output)
RETRIEVALS: dict[str, dict[str, Any]] = {"bm25": {"retriever": "bm25"},
                                         "dense": {"retriever": "dense", "options": {"cache": False}}}
_TOKEN = re.compile(r"\w+")
Run = dict[str, list[str]]
Progress = Callable[[str], None] | None


@dataclass
class EvidenceSet:
    """Documents, queries ``{qid: text}``, gold ``evidence`` ``{qid: [span]}`` and ``skipped`` counts by reason."""

    name: str
    docs: list[Document]
    queries: dict[str, str]
    evidence: dict[str, list[str]]
    skipped: dict[str, int] = field(default_factory=dict)

    def head(self, n: int | None) -> EvidenceSet:
        """The first ``n`` queries (None = all); the documents are kept whole."""
        if n is None:
            return self
        keep = list(self.queries)[:n]
        return replace(self, queries={q: self.queries[q] for q in keep}, evidence={q: self.evidence[q] for q in keep})


def _unique(spans: Sequence[str]) -> list[str]:
    """``spans`` without repeats under ``normalize_span`` (first kept)."""
    seen: dict[str, str] = {}
    for s in spans:
        seen.setdefault(normalize_span(s), s)
    return list(seen.values())


def load_hotpotqa_evidence(folder: str | Path, max_queries: int | None = None) -> EvidenceSet:
    """The ``hotpotqa`` evidence set of the first ``max_queries`` records (None = all): every record of the HotpotQA
    files of ``folder`` (``*dev*.json`` files first, then ``*train*.json``, so the dev questions come first); one
    document per unique context paragraph title of the kept records (first seen wins; id ``hp<nnnn>`` in order of
    first appearance; text = ``"".join(sentences)``, title separate); queries = the questions; evidence = the
    ``supporting_facts`` sentences, whitespace-stripped (a supporting fact naming no sentence is counted and
    skipped)."""
    folder = Path(folder)
    files = sorted(folder.glob("*dev*.json")) + sorted(folder.glob("*train*.json"))
    if not files:
        raise ValidationError(f"no HotpotQA *dev*.json or *train*.json file in {folder}")
    records = [raw for f in files for raw in read_hotpot(str(f))][:max_queries]
    ids: dict[str, str] = {}
    out = EvidenceSet("hotpotqa", [], {}, {}, {"supporting facts naming no sentence": 0})
    for raw in records:
        context = {title: sents for title, sents in raw["context"]}
        for title, sents in raw["context"]:
            if title not in ids:
                ids[title] = f"hp{len(ids):04d}"
                out.docs.append((ids[title], title, "".join(sents)))
        spans = []
        for title, i in raw["supporting_facts"]:
            sents = context.get(title, [])
            if not 0 <= i < len(sents) or not sents[i].strip():
                out.skipped["supporting facts naming no sentence"] += 1
                continue
            spans.append(sents[i].strip())
        out.queries[raw["_id"]], out.evidence[raw["_id"]] = raw["question"], _unique(spans)
    if not out.queries:
        raise ValidationError(f"no HotpotQA record in {folder}")
    return out


def tokens(text: str) -> set[str]:
    """The distinct case-folded ``\\w+`` tokens of ``text``."""
    return set(_TOKEN.findall(text.casefold()))


def best_sentence(passage: str, answer: str) -> str | None:
    """The sentence of ``passage`` sharing the most distinct tokens with ``answer`` (earliest on ties), or None
    when none shares a token."""
    want = tokens(answer)
    best, score = None, 0
    for s, e in sentence_spans(passage):
        shared = len(tokens(passage[s:e]) & want)
        if shared > score:
            best, score = passage[s:e], shared
    return best


def load_mtrag_evidence(folder: str | Path, max_queries: int | None = None) -> EvidenceSet:
    """The ``mtrag`` evidence set of the first ``max_queries`` queries (None = all): corpus (ids, passages) and
    queries (``rewrite`` view, tasks with qrels) of :func:`convrag.seara.validation.load_mtrag`, each passage's title
    kept apart from its text. Evidence is *derived*: per task and relevant passage, :func:`best_sentence` of the
    passage text (sentences as :func:`convrag.seara.chunking.sentence_spans` cuts them, tokens as :func:`tokens`)
    against the task's reference answer (``targets``: the agent reply of that turn). Skipped and counted: tasks
    without a reference answer, passages without text, passages where no sentence shares a token with the answer,
    and queries left with no span (dropped)."""
    truth = load_mtrag(folder).head(max_queries)
    data = MTRAG.parse(locate(str(folder), MTRAG.layout()))
    rows = {f"{d}:{pid}": row for d, passages in data.cited.items() for pid, row in passages.items()}
    docs = [(doc_id, rows[doc_id].get("title") or "", rows[doc_id].get("text") or "") for doc_id in truth.corpus]
    texts = {doc_id: text for doc_id, _, text in docs}
    answers = {t["task_id"]: " ".join(m["text"] for m in t["targets"]) for t in data.tasks}
    skipped: Counter[str] = Counter({k: 0 for k in ("tasks without a reference answer", "passages without text",
                                                    "passages sharing no token with the answer",
                                                    "queries without evidence (dropped)")})
    out = EvidenceSet("mtrag", docs, {}, {})
    for qid, text in truth.queries.items():
        answer = answers.get(qid, "")
        spans = []
        if not answer.strip():
            skipped["tasks without a reference answer"] += 1
        else:
            for doc_id in sorted(truth.qrels[qid]):
                if not texts[doc_id].strip():
                    skipped["passages without text"] += 1
                elif (span := best_sentence(texts[doc_id], answer)) is None:
                    skipped["passages sharing no token with the answer"] += 1
                else:
                    spans.append(span)
        if spans:
            out.queries[qid], out.evidence[qid] = text, _unique(spans)
        else:
            skipped["queries without evidence (dropped)"] += 1
    out.skipped = dict(skipped)
    if not out.queries:
        raise ValidationError(f"no MTRAG query with derivable evidence in {folder}")
    return out


# --- runs ----------------------------------------------------------------------------------------------------------
@dataclass
class ChunkingRuns:
    """``runs`` ``{configuration: {qid: top-K chunk ids}}``, every chunk made (``chunks``), and per chunking its
    chunk count and mean chunk length in characters (``sizes``)."""

    runs: dict[str, Run]
    chunks: dict[str, Chunk]
    sizes: dict[str, dict[str, float]]


def _no_llm(spec: str) -> Any:
    raise ConvragError(f"the chunkings validation calls no LLM (asked for {spec!r})")


def make_runs(evset: EvidenceSet, k: int, *, dense: bool = True, progress: Progress = None) -> ChunkingRuns:
    """Every configuration's top-``k`` lists, through a ``select`` strategy space and :class:`Runner`."""
    retrievals = {n: o for n, o in RETRIEVALS.items() if dense or n != "dense"}
    space = parse_space({"depth": k, "dimensions": {"chunking": CHUNKINGS, "retrieval": retrievals}},
                        "chunkings-validation")
    runner = Runner(space, evset.docs, evset.queries, _no_llm, echo=None)
    qids, out = list(evset.queries), ChunkingRuns({}, {}, {})
    for config in space.full_grid():
        chunking, retrieval = config.get("chunking"), config.get("retrieval")
        if progress:
            progress(f"{evset.name}: {chunking}/{retrieval}")
        made = runner.chunks(chunking, config.get("filter"))
        out.chunks.update(made)
        out.sizes[chunking] = {"chunks": len(made), "mean_chars": fmean(len(c.text) for c in made.values())}
        out.runs[f"{chunking}/{retrieval}"] = runner.run(config, qids)
    return out


# --- truth and judges ----------------------------------------------------------------------------------------------
def evidence_recall(runs: Mapping[str, Run], chunks: Mapping[str, Chunk], evidence: Mapping[str, Sequence[str]],
                    k: int) -> dict[str, float]:
    """Evidence recall@``k`` of every run: evidence spans (summed over queries) contained, under ``normalize_span``,
    in at least one of the run's top-``k`` chunks / all evidence spans; 0.0 when there is no span."""
    norm: dict[str, str] = {}
    total = sum(len(v) for v in evidence.values())
    out = {}
    for name, run in runs.items():
        found = 0
        for q, spans in evidence.items():
            texts = [norm.setdefault(c, normalize_span(chunks[c].text)) for c in run.get(q, [])[:k]]
            found += sum(any(normalize_span(s) in t for t in texts) for s in spans)
        out[name] = found / total if total else 0.0
    return out


def oracle_qrels(evset: EvidenceSet, runs: Mapping[str, Run], chunks: Mapping[str, Chunk],
                 k: int) -> dict[str, dict[str, int]]:
    """The oracle's grades of the depth-``k`` pool of all ``runs``, judged through :func:`judge_pool`."""
    pool = build_pool(runs, k, list(evset.queries))
    texts = {c: chunks[c].text for row in pool.runs.values() for ids in row.values() for c in ids}
    pseudo = judge_pool(pool, evset.queries, texts, EvidenceOracle(evset.evidence, evset.name), echo=None,
                        concurrency=1)
    if pseudo.failed:
        raise ValidationError(f"{evset.name}: {len(pseudo.failed)} oracle judgments failed")
    return pseudo.qrels


def flip(qrels: Mapping[str, Mapping[str, int]], rate: float, seed: int) -> dict[str, dict[str, int]]:
    """``qrels`` with each grade flipped 3 <-> 0 with probability ``rate``, drawn from ``random.Random`` keyed by
    (seed, query, chunk), as :class:`convrag.judging.pooling.NoisyOracleJudge` does."""
    return {q: {c: (0 if g >= 2 else 3) if random.Random(f"noisy-oracle:{seed}:{q}:{c}").random() < rate else g
                for c, g in row.items()} for q, row in qrels.items()}


@functools.lru_cache(maxsize=8192)
def _sentences(text: str) -> tuple[tuple[int, str, str], ...]:
    """(start, text, normalised text) of each sentence of a document text (kept across seeds)."""
    return tuple((s, text[s:e], normalize_span(text[s:e])) for s, e in sentence_spans(text))


def noisy_evidence(evset: EvidenceSet, pooled: Mapping[str, Sequence[str]], doc_of: Mapping[str, str],
                   rate: float, seed: int) -> dict[str, list[str]]:
    """The evidence a noisy judge gives as facts: each evidence span dropped with probability ``rate`` (keyed by
    (seed, query, span)), and each *candidate* sentence added with probability rate x |E_q| / |C_q| (keyed by (seed,
    query, document, offset)), the candidates C_q being the sentences (``sentence_spans``) of the documents of the
    query's pooled chunks that contain no evidence span of the query; the spans are then located as the oracle's.
    ``pooled``: each query's pooled chunk ids, ``doc_of``: each chunk's document. Queries left without a span are
    absent: they have no facts and are excluded from the fact-level score, as R' = 0."""
    texts = {d: text for d, _, text in evset.docs}
    out: dict[str, list[str]] = {}
    for q, spans in evset.evidence.items():
        kept = [s for s in spans if random.Random(f"noisy-facts:drop:{seed}:{q}:{s}").random() >= rate]
        needles = [normalize_span(s) for s in spans]
        candidates = [(d, s, text) for d in sorted({doc_of[c] for c in pooled.get(q, [])})
                      for s, text, norm in _sentences(texts[d]) if not any(n in norm for n in needles)]
        p = min(1.0, rate * len(spans) / len(candidates)) if candidates else 0.0
        added = [t for d, s, t in candidates if random.Random(f"noisy-facts:add:{seed}:{q}:{d}:{s}").random() < p]
        if kept or added:
            out[q] = _unique(kept + added)
    return out


def fact_level(evset: EvidenceSet, runs: Mapping[str, Run], chunks: Mapping[str, Chunk],
               evidence: Mapping[str, Sequence[str]], k: int) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Each run's ``score_runs`` result over the facts of ``evidence`` located in the documents, and the
    location counts (:class:`~convrag.seara.evidence.EvidenceFacts` ``to_dict``)."""
    located = EvidenceOracle(evidence, evset.name).facts(evset.docs, list(evidence))
    qids = [q for q in evset.queries if q in evidence]
    return score_runs(runs, chunks, located.factset, k, qids), located.to_dict()


# --- the validation ------------------------------------------------------------------------------------------------
def _row(judge: str, measure: str, cmp: Sequence[dict[str, Any]]) -> dict[str, Any]:
    taus = [c["tau_b"] for c in cmp]
    return {"judge": judge, "measure": measure, "tau_b_mean": fmean(taus), "tau_b_min": min(taus),
            "top1_share": sum(c["top1"] for c in cmp) / len(cmp), "regret_mean": fmean(c["regret"] for c in cmp),
            "regret_max": max(c["regret"] for c in cmp), "chosen": [c["chosen"] for c in cmp]}


def _value(result: Mapping[str, Any], key: str) -> float:
    return 0.0 if result[key] is None else float(result[key])


def validate_chunkings(evset: EvidenceSet, k: int = 10, *, dense: bool = True, seeds: int = 5,
                       rates: Sequence[float] = NOISE_RATES, progress: Progress = None) -> dict[str, Any]:
    """The configuration table (``configurations``: truth recall, oracle chunk- and fact-level PR-AUC and the
    oracle's fact recall@K, chunk count and mean chunk characters) and the validation ``rows`` (judge x measure:
    tau-b mean/min, top-1 share, regret mean/max over seeds) of one evidence set (module docstring), with the
    evidence spans' count, median length and how many exceed 256 characters (the r256 chunk size),
    the skipped counts and where the oracle located the spans (``located``)."""
    if seeds < 1 or k < 1:
        raise ValidationError(f"need seeds >= 1 and k >= 1, got {seeds} and {k}")
    made = make_runs(evset, k, dense=dense, progress=progress)
    runs, chunks = made.runs, made.chunks
    truth = evidence_recall(runs, chunks, evset.evidence, k)
    if progress:
        progress(f"{evset.name}: judging the pool with the evidence oracle")
    qrels = oracle_qrels(evset, runs, chunks, k)
    chunk_oracle = micro_pr_auc(runs, qrels, k)
    facts, located = fact_level(evset, runs, chunks, evset.evidence, k)
    fact_oracle = {n: _value(r, "pr_auc") for n, r in facts.items()}
    rows = [_row("oracle", "chunk", [compare(truth, chunk_oracle)]),
            _row("oracle", "fact", [compare(truth, fact_oracle)])]
    pooled = {q: list(ids) for q, ids in qrels.items()}
    doc_of = {c: x.doc_id for c, x in chunks.items()}
    for rate in rates:
        if progress:
            progress(f"{evset.name}: noisy judges at {rate:g}, {seeds} seeds")
        by_chunk, by_fact = [], []
        for s in range(seeds):
            by_chunk.append(compare(truth, micro_pr_auc(runs, flip(qrels, rate, s), k)))
            noisy = fact_level(evset, runs, chunks, noisy_evidence(evset, pooled, doc_of, rate, s), k)[0]
            by_fact.append(compare(truth, {n: _value(r, "pr_auc") for n, r in noisy.items()}))
        rows += [_row(f"noisy-{rate:g}", "chunk", by_chunk), _row(f"noisy-{rate:g}", "fact", by_fact)]
    table = {n: {"truth_recall": truth[n], "chunk_pr_auc": chunk_oracle[n], "fact_pr_auc": fact_oracle[n],
                 "fact_recall": _value(facts[n], "recall_at_k"), "chunks": made.sizes[n.split("/")[0]]["chunks"],
                 "mean_chunk_chars": made.sizes[n.split("/")[0]]["mean_chars"]} for n in runs}
    sizes = [len(s) for spans in evset.evidence.values() for s in spans]
    return {"dataset": evset.name, "k": k, "queries": len(evset.queries), "seeds": seeds, "documents": len(evset.docs),
            "evidence_spans": len(sizes), "evidence_median_chars": median(sizes),
            "evidence_over_256_chars": sum(n > 256 for n in sizes), "skipped": dict(evset.skipped),
            "located": located, "configurations": table, "rows": rows}
