"""MTR-Pipeline last stage: conversation records -> MTR-Bench files (hard topic switches, splits, corpus).

Input: the conversation records of ``OUT/polish`` (or of ``OUT/converse`` when the run has no polish stage).
Output under ``OUT/assemble/``, a source for ``convrag build mtr-bench --source OUT/assemble``: ``test.parquet`` and
``train.parquet`` (one row per turn, :func:`turn_rows`, conversations in consecutive rows), ``corpus.parquet``
(MTR-DOCUMENT: every document of the run's corpus, row number = ``document_idx``) and ``synthesis.json`` (the corpus
and the models that wrote the conversations, ``synthesis.engine.provenance``, for the built benchmark's card); the
same record is in each Parquet file's schema metadata, so the files copied anywhere still build as a synthesis. A
split with no conversation gets no file (the builder refuses a split file without rows; it builds those it finds).

Layouts (:func:`assemble`): ``splice`` (default, the current 12-turn release) cuts random pairs of complete
conversations at one switch point K and crosses them into two conversations with ``switch_turn`` K, keeping the
others whole (``switch_turn`` -1); ``paper`` (the legacy 4+4 layout) joins random pairs of complete conversations
end to end. Draws use ``random.Random("assemble:<layout>:<seed>")``. The train / test split (:func:`split`) is by
conversation and keeps a spliced pair's two children together.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections import Counter
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from convrag.core.errors import ConvragError
from convrag.synthesis.engine.fingerprint import ReadsCorpus
from convrag.synthesis.engine.pipeline import REPORT_FILE, Estimate, Stage, StageContext, StageReport
from convrag.synthesis.engine.provenance import make_record, parquet_metadata, write_record
from convrag.synthesis.engine.records import count_records, read_records
from convrag.synthesis.mtr.documents import CorpusRef, fetch_documents, iter_documents

LAYOUTS = ("splice", "paper")
DOC = pa.struct([("document_idx", pa.int64()), ("edu_quality", pa.float64()), ("id", pa.string()),
                 ("naive_quality", pa.int64()), ("text", pa.string()), ("title", pa.string()),
                 ("url", pa.string())])  # fmt: skip
MESSAGE = pa.struct([("content", pa.string()), ("role", pa.string())])
TURN_SCHEMA = pa.schema([("messages", pa.list_(MESSAGE)), ("ctxs", pa.list_(DOC)),
                         ("ground_truth_document_idx", pa.int64()), ("ground_truth_ctx", DOC),
                         ("cluster_idx", pa.int64()), ("prompt_tokens", pa.int64()),
                         ("completion_tokens", pa.int64()), ("turn", pa.int64()), ("switch_turn", pa.int64()),
                         ("conversation_id", pa.string()), ("original_query", pa.string())])  # fmt: skip
CORPUS_SCHEMA = pa.schema([("id", pa.string()), ("url", pa.string()), ("title", pa.string()), ("text", pa.string()),
                           ("naive_quality", pa.int64()), ("edu_quality", pa.float64())])  # fmt: skip
NO_TURN = "conversations without a single turn"
INCOMPLETE = "incomplete conversations (the paper layout pairs complete ones only)"
ODD = "complete conversation left without a partner (odd count)"
CONVERSATIONS_PER_BATCH = 64
DOCUMENTS_PER_BATCH = 2048


def _floor(x: float) -> int:
    """floor(x), immune to float noise such as 0.29 * 100 = 28.999999999999996."""
    return math.floor(round(x, 9))


def _turns(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The record's turns, each carrying the record's cluster, pool and id."""
    return [{**t, "cluster_idx": record["cluster_idx"], "doc_ids": list(record["doc_ids"]), "source": record["id"]}
            for t in record["turns"]]  # fmt: skip


def whole(record: dict[str, Any]) -> dict[str, Any]:
    """A conversation record kept as it is, in the assembled shape (no hard switch, its own split unit)."""
    return {"id": record["id"], "unit": record["id"], "switch_turn": -1, "sources": [record["id"]],
            "complete": record["complete"], "turns": _turns(record)}  # fmt: skip


def splice(front: dict[str, Any], back: dict[str, Any], k: int) -> dict[str, Any]:
    """front's turns 1..k then back's turns k+1..T (T = len(back's turns)), which keep their own gold, pool
    and cluster; ``switch_turn`` = k. Needs 1 <= k < T and at least k front turns."""
    if not 1 <= k < len(back["turns"]) or len(front["turns"]) < k:
        raise ValueError(f"cannot splice {front['id']} ({len(front['turns'])} turns) and {back['id']} "
                         f"({len(back['turns'])} turns) at k={k}")  # fmt: skip
    cid = f"{front['id']}+{back['id']}"
    return {"id": cid, "unit": cid, "switch_turn": k, "sources": [front["id"], back["id"]],
            "complete": front["complete"] and back["complete"],
            "turns": _turns(front)[:k] + _turns(back)[k:]}  # fmt: skip


def paper_pair(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The legacy layout: a's turns then b's turns renumbered from len(a)+1; ``switch_turn`` = len(a)."""
    n = len(a["turns"])
    cid = f"{a['id']}+{b['id']}"
    return {"id": cid, "unit": cid, "switch_turn": n, "sources": [a["id"], b["id"]],
            "complete": a["complete"] and b["complete"],
            "turns": _turns(a) + [{**t, "turn": t["turn"] + n} for t in _turns(b)]}  # fmt: skip


def assemble(records: Iterable[dict[str, Any]], *, layout: str = "splice", switch_ratio: float = 0.5,
             seed: int = 0) -> tuple[list[dict[str, Any]], Counter[str]]:
    """Assembled conversations and the drops per reason.

    ``splice``: the conversations eligible for a hard topic switch are the complete ones with at least 3 turns. Of
    those, ``floor(n_eligible * switch_ratio)`` (one less when odd) are drawn at random and paired in draw order. A
    pair (A, B) draws one switch point K uniformly from {2, ..., T-1}, T = the shorter length of the two (the
    complete conversations of one run all have the requested length), and yields two conversations: A[1..K] +
    B[K+1..] (id ``A+B``) and B[1..K] + A[K+1..] (id ``B+A``), both with ``switch_turn`` K (:func:`splice`). A
    spliced conversation's turn t > K is the back conversation's turn t as generated: its question, answer, gold
    document, document pool (``doc_ids``) and ``cluster_idx``; only its history differs (the front's turns 1..K,
    then the back's turns K+1..t-1). Inherited artifact: the back's turn K+1 question was written after the back's
    own first K turns, which the spliced conversation lacks, so it may point at things never said in it ("that
    pigment"); the builder's ``first turn after switch`` phase isolates those turns. Every other conversation (not
    drawn, incomplete, too short) is kept whole with ``switch_turn`` -1; incomplete ones are never spliced, and one
    with no turn at all is dropped. The output keeps the input order, a spliced child taking its front
    conversation's place.

    ``paper``: every complete conversation is paired at random; a pair (A, B) gives one conversation, A's turns then
    B's turns renumbered from len(A)+1, ``switch_turn`` = len(A) (:func:`paper_pair`); B's first turn was generated
    with no history, a clean fresh start. Incomplete conversations and an odd one out are dropped. One conversation
    per pair, in draw order.

    An assembled conversation (per-turn pools, as they change at the switch)::

        id: str              the record's id, or "<front id>+<back id>" for spliced / paired conversations
        unit: str            split unit: the two children of one spliced pair share it (the id of the first)
        switch_turn: int     K, len(A) in the paper layout, or -1 (no hard switch)
        sources: list[str]   ids of the conversation records it is made of, front first
        complete: bool
        turns: list of the record's turn dicts, renumbered 1..n in ``turn``, each with its own ``cluster_idx``,
               ``doc_ids`` (the pool) and ``source`` (the id of the record it comes from)
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    rng = random.Random(f"assemble:{layout}:{seed}")
    records = list(records)
    dropped: Counter[str] = Counter()
    if layout == "paper":
        complete = [r for r in records if r["complete"]]
        if len(complete) < len(records):
            dropped[INCOMPLETE] = len(records) - len(complete)
        rng.shuffle(complete)
        if len(complete) % 2:
            dropped[ODD] = 1
        return [paper_pair(a, b) for a, b in zip(complete[::2], complete[1::2], strict=False)], dropped
    kept = [r for r in records if r["turns"]]
    if len(kept) < len(records):
        dropped[NO_TURN] = len(records) - len(kept)
    out = [whole(r) for r in kept]
    eligible = [i for i, r in enumerate(kept) if r["complete"] and len(r["turns"]) >= 3]
    count = _floor(len(eligible) * switch_ratio)
    chosen = rng.sample(eligible, count - count % 2)
    for a, b in zip(chosen[::2], chosen[1::2], strict=True):
        k = rng.randint(2, min(len(kept[a]["turns"]), len(kept[b]["turns"])) - 1)
        out[a], out[b] = splice(kept[a], kept[b], k), splice(kept[b], kept[a], k)
        out[b]["unit"] = out[a]["id"]
    return out, dropped


def split(conversations: list[dict[str, Any]], *, test_size: int = 1000, test_fraction: float = 0.2,
          seed: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(test, train): whole units in a seeded random order go to test until it holds at least
    min(test_size, floor(n * test_fraction)) conversations, and at least one when test_size and test_fraction are
    both above 0 (a small run still gets a test split, the benchmark); both keep the input order.

    Units (a spliced pair's two children, else one conversation; in order of first appearance) are shuffled with
    ``random.Random("split:<seed>")`` and moved into test one whole unit at a time, so test may exceed the target by
    one conversation. The children of a pair stay together because they share their source conversations' clusters
    and gold documents."""
    target = min(test_size, _floor(len(conversations) * test_fraction))
    if conversations and test_size > 0 and test_fraction > 0:
        target = max(target, 1)
    sizes = Counter(c["unit"] for c in conversations)
    units = list(sizes)
    random.Random(f"split:{seed}").shuffle(units)
    chosen: set[str] = set()
    taken = 0
    for unit in units:
        if taken >= target:
            break
        chosen.add(unit)
        taken += sizes[unit]
    return ([c for c in conversations if c["unit"] in chosen], [c for c in conversations if c["unit"] not in chosen])


def _doc(docs: dict[str, dict[str, Any]], doc_id: str, cid: str) -> dict[str, Any]:
    row = docs.get(doc_id)
    if row is None:
        raise ConvragError(f"conversation {cid}: document {doc_id!r} is not among the fetched documents")
    return {name: row[name] for name in DOC.names}


def turn_rows(conversation: dict[str, Any], docs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The MTR-Bench rows (``TURN_SCHEMA``) of one assembled conversation, one per turn; ``docs`` maps a
    document id to its ``documents`` row.

    MTR-Bench's 12-turn schema (``messages`` = the history and the turn's question and answer, 2t messages;
    ``ctxs`` = the turn's pool; ``ground_truth_document_idx`` / ``ground_truth_ctx``; ``cluster_idx``; token
    counts; ``turn``; ``switch_turn``) plus ``conversation_id`` and ``original_query`` (the turn's question before
    polishing)."""
    cid = conversation["id"]
    rows: list[dict[str, Any]] = []
    history: list[dict[str, str]] = []
    for t in conversation["turns"]:
        ctxs = [_doc(docs, d, cid) for d in t["doc_ids"]]
        gold = next((c for c in ctxs if c["id"] == t["gold"]), None)
        if gold is None:
            raise ConvragError(f"conversation {cid} turn {t['turn']}: gold document {t['gold']!r} is not in the "
                               f"turn's pool")  # fmt: skip
        messages = [*history, {"role": "user", "content": t["question"]},
                    {"role": "assistant", "content": t["answer"]}]  # fmt: skip
        rows.append({"messages": messages, "ctxs": ctxs, "ground_truth_document_idx": gold["document_idx"],
                     "ground_truth_ctx": gold, "cluster_idx": t["cluster_idx"], "prompt_tokens": t["prompt_tokens"],
                     "completion_tokens": t["completion_tokens"], "turn": t["turn"],
                     "switch_turn": conversation["switch_turn"], "conversation_id": cid,
                     "original_query": t["original_question"]})  # fmt: skip
        history = messages
    return rows


def write_parquet_atomic(path: Path, schema: pa.Schema, batches: Iterable[list[dict[str, Any]]]) -> int:
    """Write row batches one by one to a temporary Parquet file, then rename it to ``path``; returns the rows."""
    tmp = path.with_name(path.name + ".tmp")
    rows = 0
    with pq.ParquetWriter(tmp, schema) as writer:
        for batch in batches:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            rows += len(batch)
    os.replace(tmp, path)
    return rows


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConvragError(f"assemble option {name} must be a number, got {value!r}")
    return float(value)


class Assemble(ReadsCorpus, Stage):
    """Hard topic switches (:func:`assemble`), conversation-level split (:func:`split`) and MTR-Bench files.

    ``switch_ratio`` applies to the ``splice`` layout only; ``source`` / ``corpus_config`` name the corpus when
    the run has no curate stage."""

    name = "assemble"
    unit = "conversations"

    def __init__(self, source: str | None = None, *, corpus_config: str | None = None, layout: str = "splice",
                 switch_ratio: float = 0.5, test_size: int = 1000, test_fraction: float = 0.2) -> None:
        if layout not in LAYOUTS:
            raise ConvragError(f"assemble option layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
        if not 0 <= _number(switch_ratio, "switch_ratio") <= 1:
            raise ConvragError(f"assemble option switch_ratio must be in [0, 1], got {switch_ratio}")
        if isinstance(test_size, bool) or not isinstance(test_size, int) or test_size < 0:
            raise ConvragError(f"assemble option test_size must be an integer >= 0, got {test_size!r}")
        if not 0 <= _number(test_fraction, "test_fraction") <= 1:
            raise ConvragError(f"assemble option test_fraction must be in [0, 1], got {test_fraction}")
        self.source, self.corpus_config, self.layout = source, corpus_config, layout
        self.switch_ratio, self.test_size, self.test_fraction = float(switch_ratio), test_size, float(test_fraction)

    def params(self) -> dict[str, Any]:
        return {"source": self.source, "corpus_config": self.corpus_config, "layout": self.layout,
                "switch_ratio": self.switch_ratio, "test_size": self.test_size, "test_fraction": self.test_fraction}

    def _provenance(self, ctx: StageContext, agents_input: str) -> dict[str, Any]:
        """The arguments of ``synthesis.json`` (``synthesis.engine.provenance``): the corpus (``source``, else the
        curate stage's) and the models of the converse stage and, when its output is what was assembled, the polish
        stage."""
        corpus = self.source
        curate = ctx.out / "curate" / "params.json"
        if corpus is None and curate.is_file():
            corpus = (json.loads(curate.read_text(encoding="utf-8")).get("params") or {}).get("source")
        stages = ["converse", "polish"] if agents_input == "polish" else ["converse"]
        return {"pipeline": "mtr", "out": ctx.out, "stages": stages, "corpus": corpus, "seed": ctx.seed}

    def _input(self, ctx: StageContext) -> Path:
        """The polish stage's records when it finished, else the converse stage's (an error if unfinished)."""
        polish = ctx.out / "polish"
        return polish if (polish / REPORT_FILE).is_file() else ctx.stage_folder("converse")

    def estimate(self, ctx: StageContext) -> Estimate:
        for name in ("polish", "converse"):
            if (ctx.out / name / REPORT_FILE).is_file():
                return Estimate(records=count_records(ctx.out / name), note="no LLM calls")
        return Estimate(records=None, note="no LLM calls; conversations known after the converse stage")

    def run(self, ctx: StageContext) -> StageReport:
        folder = self._input(ctx)
        records = list(read_records(folder))
        conversations, dropped = assemble(records, layout=self.layout, switch_ratio=self.switch_ratio, seed=ctx.seed)
        if not conversations:  # nothing to write: the engine stops the run with the drops per reason
            return StageReport(self.name, records_in=len(records), records_out=0, dropped=dict(dropped))
        test, train = split(conversations, test_size=self.test_size, test_fraction=self.test_fraction, seed=ctx.seed)
        ref = CorpusRef(ctx.out, self.source, self.corpus_config)
        docs = fetch_documents(ref, {d for c in conversations for t in c["turns"] for d in t["doc_ids"]})
        provenance = self._provenance(ctx, folder.name)
        identity = parquet_metadata(make_record(**provenance))  # a copied file still says what it is
        for name, part in (("test", test), ("train", train)):
            path = ctx.folder / f"{name}.parquet"
            if part and not path.is_file():  # a file under its final name is complete (resume)
                rows = ([r for c in chunk for r in turn_rows(c, docs)]
                        for chunk in _chunks(part, CONVERSATIONS_PER_BATCH))  # fmt: skip
                write_parquet_atomic(path, TURN_SCHEMA.with_metadata(identity), rows)
        corpus = ctx.folder / "corpus.parquet"
        if not corpus.is_file():
            documents = ({name: row[name] for name in CORPUS_SCHEMA.names} for row in iter_documents(ref))
            write_parquet_atomic(corpus, CORPUS_SCHEMA.with_metadata(identity),
                                 _chunks(documents, DOCUMENTS_PER_BATCH))
        write_record(ctx.folder, **provenance)
        switched = sum(c["switch_turn"] != -1 for c in conversations)
        figures = {"test_conversations": len(test), "train_conversations": len(train),
                   "test_turns": sum(len(c["turns"]) for c in test),
                   "train_turns": sum(len(c["turns"]) for c in train),
                   # splice: each pair gives two switched conversations; paper: each conversation is a pair
                   "spliced_pairs" if self.layout == "splice" else "paper_pairs":
                       switched // 2 if self.layout == "splice" else switched,
                   "corpus_documents": pq.ParquetFile(corpus).metadata.num_rows}  # fmt: skip
        return StageReport(self.name, records_in=len(records), records_out=len(conversations),
                           dropped=dict(dropped), figures=figures)
