"""D&V stage ``release``: the conversations of the ``turns`` stage written as a RECOR release, so that
``convrag build recor --source OUT/release`` builds them and ``convrag evaluate`` / ``convrag audit`` apply.

Layout (the public release's, per domain ``D`` in its released spelling, e.g. ``Drones``)::

    OUT/release/data/benchmark/D_benchmark.jsonl   one conversation per line
    OUT/release/data/corpus/D_documents.jsonl      {doc_id, content}: the kept items' documents and negatives
    OUT/release/synthesis.json                     the input file and the LLM of every stage, for the card
                                                   (``synthesis.engine.provenance``)

A conversation line: ``id`` (the item id), ``task`` (the domain), ``original_query``, ``original_answer``,
``metadata`` {created_at (when the load stage finished), gold_doc_count (distinct gold documents over the turns),
method ``convrag-decomposition-verification``, num_turns, source (the input file's name), version}, and ``turns``
[{turn_id, query, answer, conversation_history (:func:`history_text`), gold_doc_ids, subquestion_reasoning,
subquestion_reasoning_metadata {target_information, relevance_signals, irrelevance_signals}}]. A document id that two
items of one domain use for different texts is written ``<item id>_<doc id>`` in corpus and turns (counted).
"""

from __future__ import annotations

import datetime as dt
import os
from collections import Counter, defaultdict
from typing import Any

from convrag.builders.recor_source import FILE_NAME
from convrag.core.jsonl import write_jsonl_atomic
from convrag.synthesis.engine.pipeline import REPORT_FILE, Estimate, Stage, StageContext, StageReport
from convrag.synthesis.engine.records import count_records, read_records

METHOD = "convrag-decomposition-verification"
VERSION = "convrag-dv-1"
NO_HISTORY = "No previous conversation."


def history_text(turns: list[dict[str, Any]]) -> str:
    """The release's ``conversation_history`` before a turn: ``Q: ...`` / ``A: ...`` lines of the earlier turns,
    or ``"No previous conversation."``."""
    if not turns:
        return NO_HISTORY
    return "\n".join(f"Q: {t['query']}\nA: {t['answer']}" for t in turns)


class Release(Stage):
    """Writes the RECOR release files (see the module docstring); no LLM."""

    name = "release"
    unit = "items"
    upstream = "turns"

    def __init__(self, source: str | None = None) -> None:
        self.source = source
        self.source_name = os.path.basename(source) if source else ""

    def params(self) -> dict[str, Any]:
        return {"method": METHOD, "version": VERSION, "source": self.source_name}

    def _write_provenance(self, ctx: StageContext) -> None:
        """``synthesis.json`` (``synthesis.engine.provenance``): the input items file and the LLM of every D&V stage."""
        from convrag.synthesis.engine.provenance import write_record

        write_record(ctx.folder, pipeline="recor-dv", out=ctx.out, corpus=self.source,
                     stages=["align", "aspects", "facts", "turns"], seed=ctx.seed)

    def empty(self, report: StageReport) -> str | None:
        """Nothing usable: no conversation, or conversations without a single turn."""
        if report.records_out and not report.figures.get("turns"):
            return f"release wrote {report.records_out:,} conversations with 0 turns (of {report.records_in:,} items)"
        return super().empty(report)

    def estimate(self, ctx: StageContext) -> Estimate:
        done = (ctx.out / self.upstream / REPORT_FILE).is_file()
        return Estimate(records=count_records(ctx.out / self.upstream) if done else None)

    def run(self, ctx: StageContext) -> StageReport:
        created = dt.datetime.fromtimestamp((ctx.out / "load" / REPORT_FILE).stat().st_mtime, dt.UTC) \
            if (ctx.out / "load" / REPORT_FILE).is_file() else dt.datetime.now(dt.UTC)
        conversations: dict[str, list[dict[str, Any]]] = defaultdict(list)
        corpus: dict[str, dict[str, str]] = defaultdict(dict)
        counts: Counter[str] = Counter()
        items = list(read_records(ctx.stage_folder(self.upstream)))
        for item in items:
            domain = item["domain"]
            docs = corpus[domain]
            rename: dict[str, str] = {}
            for d in [*item["documents"], *(item.get("negatives") or [])]:
                doc_id = d["doc_id"]
                if doc_id in docs and docs[doc_id] != d["text"]:
                    rename[doc_id] = f"{item['id']}_{doc_id}"
                    counts["document ids qualified with their item id (same id, other text)"] += 1
                docs[rename.get(doc_id, doc_id)] = d["text"]
            turns: list[dict[str, Any]] = []
            for t in item["turns"]:
                meta = t.get("subquestion_reasoning_metadata") or {}
                turns.append({
                    "turn_id": int(t["turn"]), "query": t["query"], "answer": t["answer"],
                    "conversation_history": history_text(turns),
                    "gold_doc_ids": [rename.get(g, g) for g in t["gold_doc_ids"]],
                    "subquestion_reasoning": t.get("subquestion_reasoning") or "",
                    "subquestion_reasoning_metadata": {
                        "target_information": meta.get("target_information") or "",
                        "relevance_signals": list(meta.get("relevance_signals") or []),
                        "irrelevance_signals": list(meta.get("irrelevance_signals") or [])}})
            gold = {g for t in turns for g in t["gold_doc_ids"]}
            conversations[domain].append({
                "id": item["id"], "task": domain, "original_query": item["query"], "original_answer": item["answer"],
                "metadata": {"created_at": created.isoformat(timespec="seconds"), "gold_doc_count": len(gold),
                             "method": METHOD, "num_turns": len(turns), "source": self.source_name,
                             "version": VERSION},
                "turns": turns})
        root = ctx.folder / "data"
        for domain, rows in sorted(conversations.items()):
            write_jsonl_atomic(root / "benchmark" / f"{FILE_NAME[domain]}_benchmark.jsonl", rows)
            write_jsonl_atomic(root / "corpus" / f"{FILE_NAME[domain]}_documents.jsonl",
                         [{"doc_id": k, "content": v} for k, v in sorted(corpus[domain].items())])
        self._write_provenance(ctx)
        figures: dict[str, Any] = {f"conversations: {d}": len(r) for d, r in sorted(conversations.items())}
        figures["turns"] = sum(len(c["turns"]) for rows in conversations.values() for c in rows)
        figures["corpus documents"] = sum(len(docs) for docs in corpus.values())
        figures.update(counts)
        return StageReport(self.name, len(items), sum(len(r) for r in conversations.values()), {}, {}, figures)
