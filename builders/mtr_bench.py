"""MTR-Bench (MTR-Suite, ACL 2026): synthetic multi-turn conversational retrieval over Wikipedia 2025-01.

Configs (split ``test`` = the benchmark, plus ``train`` when the source has it):

* ``conversations``: one row per conversation (``conversation_id``, ``domain`` = "", ``turns`` with the query as
  ``text``, ``answer``, ``gold_doc_id``, ``cluster_idx``; ``switch_turn`` (-1: none), ``n_turns``);
* ``queries``: one row per turn, ``_id`` = ``<conversation_id>:<turn>``, ``text`` = the current user query
  (``messages[-2]``), ``history`` = every message before it, ``switch_turn``, ``switch_phase``, ``cluster_idx``,
  ``answer`` (``messages[-1]``); mteb, which cannot batch the nested ``history``, reads the ``query`` view the export
  adds instead (``history`` as text, ``convrag.hub.mteb_layout``); ``convrag evaluate`` reads ``queries``;
* ``qrels``: the turn's one gold document (``corpus-id`` = str(ground_truth_document_idx), score 1);
* ``candidates``: the turn's pool, the ``document_idx`` of its ``ctxs`` in stored order;
* ``corpus``: MTR-DOCUMENT (``_id`` = row index; the repository the authors' README, rangehow/mtr-suite, names),
  streamed; split ``test`` only, built when the source has it;
* ``cluster-corpus``: every ``ctxs`` document of the split, sorted by document_idx (a far smaller search space).

Conversation ids: the source's ``conversation_id`` column, else ``<split>-<n:05d>`` (n: 0-based file position).
Option ``release``: ``12turn`` (default, the current Hub release) or ``8turn`` (the paper's MTR-BENCH / MTR-train).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import datasets
import pyarrow.parquet as pq
from datasets import Features, List, Value

from convrag.builders.base import BenchmarkBuilder, BenchmarkConfig, BuildReport
from convrag.builders.profile import EvaluationProfile
from convrag.core import schema
from convrag.core.errors import DataError
from convrag.core.jsonl import iter_jsonl, text_lines

from . import mtr_bench_source as ms

SPLITS = ("test", "train")
#: build-report event: a corpus row whose text differs from the conversations' copy of that document_idx
MISALIGNED = "corpus rows unlike the conversations' document of that index (row order != document_idx?)"
BENCH_VIEWS = ("conversations", "queries", "qrels", "candidates", "cluster-corpus")
VIEW_NAMES = ("conversations", "queries", "qrels", "candidates", "corpus", "cluster-corpus")
MESSAGE = {"role": Value("string"), "content": Value("string")}
DOCUMENT = schema.with_extra(schema.CORPUS, {"url": Value("string")})
FEATURES: dict[str, Features] = {
    "conversations": schema.conversation_features(
        {"answer": Value("string"), "gold_doc_id": Value("string"), "cluster_idx": Value("int64")},
        {"switch_turn": Value("int32"), "n_turns": Value("int32")}),
    "queries": schema.with_extra(schema.QUERIES, {
        "conversation_id": Value("string"), "turn": Value("int32"), "history": List(MESSAGE),
        "switch_turn": Value("int32"), "switch_phase": Value("string"), "cluster_idx": Value("int64"),
        "answer": Value("string")}),
    "qrels": schema.QRELS,
    "candidates": Features({"query-id": Value("string"), "corpus-ids": List(Value("string"))}),
    "corpus": DOCUMENT,
    "cluster-corpus": DOCUMENT,
}  # fmt: skip


@dataclass
class MTRBenchConfig(BenchmarkConfig):
    """``release``: ``12turn`` (current Hub release) or ``8turn`` (the paper's legacy MTR-BENCH / MTR-train)."""

    release: str = "12turn"


class MTRBench(BenchmarkBuilder):
    """Builder of MTR-Bench conversations, per-turn queries, qrels, candidate pools and corpora."""

    BENCHMARK = "mtr-bench"
    CARD = "mtr-bench.md"
    HUB_METADATA = {
        "pretty_name": "MTR-Bench", "license": "other", "license_name": "mtr-bench-mixed",
        "license_link": "https://huggingface.co/datasets/OkayestProgrammer/mtr-qwen35-fp8-12turn",
        "language": ["en"],
        "task_categories": ["text-retrieval", "question-answering"],
        "task_ids": ["document-retrieval", "open-domain-qa"],
        "tags": ["conversational-retrieval", "multi-turn", "topic-switch", "synthetic", "rag", "convrag"],
        "source_datasets": ["extended|OkayestProgrammer/mtr-qwen35-fp8-12turn", "extended|wikimedia/wikipedia"],
    }  # fmt: skip
    DEFAULT_SOURCES = {name: ms.HF + repo for name, (repo, _) in ms.RELEASES["12turn"].items()}
    VERSION = datasets.Version("1.0.0")
    BUILDER_CONFIG_CLASS = MTRBenchConfig
    BUILDER_CONFIGS = [MTRBenchConfig(name=v, view=v, description=f"MTR-Bench {v}") for v in VIEW_NAMES]
    DEFAULT_CONFIG_NAME = "queries"
    DEFAULT_WRITER_BATCH_SIZE = 1000  # rows per Arrow record batch while writing (corpus rows are ~1.7 kB)
    WRITER_BATCH_SIZES = {"conversations": 50}  # a row: 12 turns, each with its 8 quoted passages
    EVALUATION = EvaluationProfile(
        turns="queries", qrels="qrels", corpus={"full": "corpus", "cluster": "cluster-corpus"}, reader="queries",
        pool="config:candidates", search="corpus", split="test",
        strategies={"history": "dialogue", "lastturn": "baseline"},
        extra_strategies={"rewrite": "rewrite", "history+rewrite": "dialogue+rewrite"},
        retrievers=("bm25", "dense"), measures=("Recall@1", "Recall@5", "Recall@20", "MRR@20", "nDCG@20"),
        labels={"Recall@1": "R@1", "Recall@5": "R@5", "Recall@20": "R@20", "MRR@20": "MRR@20", "nDCG@20": "nDCG@20"},
        scale=100.0, groups=("turn", "switch_phase"), aggregation="mean", report="mtr-bench", top_k=100,
        generation="judge",
    )  # fmt: skip

    @classmethod
    def default_configs(cls, options: dict[str, Any] | None = None) -> list[str]:
        """Configs the source can build: benchmark views need test or train, ``corpus`` needs a corpus."""
        options = options or {}
        found = ms.specs(options.get("source"), str(options.get("release") or "12turn"))
        names = list(BENCH_VIEWS) if {"test", "train"} & set(found) else []
        if "corpus" in found:
            names.append("corpus")
        if not names:
            release = str(options.get("release") or "12turn")
            where = "; ".join(looked_for(options.get("source"), n, release) for n in ms.NAMES)
            raise DataError(f"no MTR-Bench file found: looked for {where}")
        return [c.name for c in cls.BUILDER_CONFIGS if c.name in names]

    def _info(self) -> datasets.DatasetInfo:
        return datasets.DatasetInfo(
            description="MTR-Bench: synthetic multi-turn conversational retrieval over Wikipedia (conversations, "
            "per-turn queries, one gold document per turn, cluster candidate pools, corpora).",
            features=FEATURES[self.config.view],
            homepage="https://huggingface.co/datasets/OkayestProgrammer/mtr-qwen35-fp8-12turn",
            license="other",  # Wikipedia text is CC BY-SA 4.0; no licence for the generated dialogues is known
        )

    def _split_generators(self, dl_manager: datasets.DownloadManager) -> list[datasets.SplitGenerator]:
        view, release = self.config.view, self.config.release
        if view not in VIEW_NAMES:
            raise DataError(f"unknown MTR-Bench config {view!r}; expected one of {list(VIEW_NAMES)}")
        found = ms.specs(self.config.source, release)
        if view == "corpus":
            corpus = ms.fetch(found.get("corpus"), "corpus")
            if not corpus:
                raise DataError("config 'corpus' needs an MTR-DOCUMENT corpus, not found: looked for "
                                + looked_for(self.config.source, "corpus", release))  # fmt: skip
            test = ms.fetch(found.get("test"), "test")
            return [datasets.SplitGenerator(name="test", gen_kwargs={"split": "test", "files": corpus,
                                                                     "bench": test, "corpus_rows": None})]
        files = {s: ms.fetch(found.get(s), s) for s in SPLITS}
        if not any(files.values()):
            raise DataError("the source holds no test or train split of MTR-Bench: looked for "
                            + "; ".join(looked_for(self.config.source, n, release) for n in SPLITS))
        for s in SPLITS:
            if not files[s]:
                self.report.add("splits skipped: the source lacks their files", s)
        corpus_rows = self._corpus_rows(found.get("corpus"))
        return [datasets.SplitGenerator(name=s, gen_kwargs={"split": s, "files": files[s], "bench": [],
                                                            "corpus_rows": corpus_rows})
                for s in SPLITS if files[s]]  # fmt: skip

    def _corpus_rows(self, spec: ms.Spec | None) -> int | None:
        """Corpus size for the gold check: local footers / line count; a Hub corpus only if already cached."""
        unchecked = "gold ids not checked against the corpus (the source has no corpus, or it is not downloaded)"
        if spec is None:
            self.report.add(unchecked)
            return None
        try:
            files = ms.fetch(spec, "corpus", local_only=spec[0] == "hub")
            return self.sources.parsed("mtr-bench-corpus-rows", files, lambda _: corpus_size(files, self._parquet))
        except DataError:
            if spec[0] != "hub":
                raise
            self.report.add(unchecked)
            return None

    def _generate_examples(self, split: str, files: list[str], bench: list[str], corpus_rows: int | None):
        view = self.config.view
        if view == "corpus":
            n = 0
            # row index must be document_idx: every row the conversations quote is compared with their copy
            parsed = self._parsed(split, bench) if bench else _no_items
            quoted = {item[1]: item[3] for item in parsed() if item[0] == "document"}
            for idx, title, text, url in iter_corpus(files, opener=self._parquet):
                if idx in quoted and quoted[idx].strip() != text.strip():
                    self.report.add(MISALIGNED, str(idx))
                if not text.strip():
                    self.report.add(ms.EMPTY_DOCUMENT, str(idx))
                yield idx, {"_id": str(idx), "title": title, "text": text, "url": url}
                n = idx + 1
            self.report.counts["corpus documents"] = n
            self.sources.parsed("mtr-bench-corpus-rows", files, lambda _: n)  # later configs need not count
            for item in parsed():  # the gold check of the benchmark's test split against the corpus just read
                if item[0] == "conversation":
                    check_gold(item[1], n, self.report)
            return
        documents = 0
        for item in self._parsed(split, files)():
            if item[0] == "conversation":
                conv = item[1]
                check_gold(conv, corpus_rows, self.report)
                if view == "conversations":
                    yield conv.conversation_id, conversation_row(conv)
                elif view != "cluster-corpus":
                    for t in conv.turns:
                        qid = f"{conv.conversation_id}:{t.turn}"
                        yield qid, turn_row(view, qid, conv, t)
            elif view == "cluster-corpus":
                _, idx, title, text, url = item
                documents += 1
                yield idx, {"_id": str(idx), "title": title, "text": text, "url": url}
        if view == "cluster-corpus":
            self.report.counts[f"cluster-corpus documents: {split}"] = documents

    def _parquet(self, path: str) -> pq.ParquetFile:
        """``path`` opened once per export (``self.sources``): the footer count and the corpus stream share it."""
        return self.sources.parsed("parquet-file", [path], lambda _: ms.open_parquet(path))

    def _parsed(self, split: str, files: list[str]) -> Callable[[], Iterator[tuple]]:
        """The split's parse, once per export (``self.sources``): a stream of ("conversation", Conversation)
        items in file order, then ("document", document_idx, title, text, url) for every ``ctxs`` document
        sorted by document_idx; parse events go to ``self.report``."""
        release = self.config.release

        def produce(report: BuildReport) -> Iterator[tuple]:
            parser = ms.Parser(split, release, report, keep_docs=True)
            for conv in parser.conversations(files):
                yield "conversation", conv
            for idx in sorted(parser.docs):
                yield "document", idx, *parser.docs[idx]

        return self.sources.spilled(f"mtr-bench:{split}:{release}", files, produce, self.report)


def looked_for(source: Any, name: str, release: str) -> str:
    """Where :func:`~builders.mtr_bench_source.specs` looks for source ``name`` in a local folder ``source``
    (for an error naming it)."""
    if isinstance(source, dict):
        return f"--source {name}=PATH (not given)"
    if source is None or str(source).startswith(ms.HF):
        return f"source {name!r} on the Hub"
    root = os.path.expanduser(str(source))
    repo = ms.RELEASES[release][name][0].split("/")[1]
    return (f"{os.path.join(root, name)}.parquet|.jsonl (or {name}*.* in {os.path.join(root, 'data')}, "
            f"or the release folder {os.path.join(root, repo)})")


def _no_items() -> Iterator[tuple]:
    return iter(())


def check_gold(conv: ms.Conversation, corpus_rows: int | None, report: BuildReport) -> None:
    """Count the turns whose gold document_idx lies beyond a corpus of ``corpus_rows`` rows (None: unknown)."""
    if corpus_rows is None:
        return
    for t in conv.turns:
        if t.gold >= corpus_rows:
            qid = f"{conv.conversation_id}:{t.turn}"
            report.add("gold document_idx beyond the corpus's last row (qrels kept)", qid, limit=100)


def conversation_row(conv: ms.Conversation) -> dict[str, Any]:
    """The ``conversations`` row of a parsed conversation."""
    turns = [{"turn": t.turn, "speaker": "user", "text": t.query, "answer": t.answer, "gold_doc_id": str(t.gold),
              "cluster_idx": t.cluster_idx} for t in conv.turns]  # fmt: skip
    return {"conversation_id": conv.conversation_id, "domain": "", "turns": turns, "switch_turn": conv.switch_turn,
            "n_turns": len(conv.turns)}  # fmt: skip


def turn_row(view: str, qid: str, conv: ms.Conversation, t: ms.Turn) -> dict[str, Any]:
    """The ``queries`` / ``qrels`` / ``candidates`` row of one turn."""
    if view == "qrels":
        return {"query-id": qid, "corpus-id": str(t.gold), "score": 1}
    if view == "candidates":
        return {"query-id": qid, "corpus-ids": [str(c) for c in t.candidates]}
    return {"_id": qid, "text": t.query, "conversation_id": conv.conversation_id, "turn": t.turn,
            "history": [{"role": m["role"], "content": m["content"]} for m in t.history],
            "switch_turn": conv.switch_turn, "switch_phase": ms.switch_phase(t.turn, conv.switch_turn),
            "cluster_idx": t.cluster_idx, "answer": t.answer}  # fmt: skip


def iter_corpus(
    files: Iterable[str], batch_size: int = 2048, opener: Callable[[str], pq.ParquetFile] = ms.open_parquet
) -> Iterator[tuple[int, str, str, str]]:
    """(document_idx = row index, title, text, url) of an MTR-DOCUMENT corpus, streamed batch by batch
    (``opener`` opens a Parquet file: a cached one keeps each file opened once per export)."""
    idx = 0
    for path in files:
        if path.endswith(".jsonl"):
            rows: Iterator = ((line, (o.get("title"), o.get("text"), o.get("url")))
                              for line, o in iter_jsonl(text_lines(path), path))  # fmt: skip
        else:
            rows = enumerate(_corpus_batches(opener(path), path, batch_size), start=1)
        for where, values in rows:
            if not all(type(v) is str for v in values):
                raise DataError("corpus row needs string 'title', 'text' and 'url'", path, where)
            yield idx, *values
            idx += 1


def _corpus_batches(pf: pq.ParquetFile, path: str, batch_size: int) -> Iterator[tuple[Any, Any, Any]]:
    missing = [c for c in ("title", "text", "url") if c not in pf.schema_arrow.names]
    if missing:
        raise DataError(f"corpus lacks columns {missing}", path)
    for batch in ms.parquet_batches(path, ["title", "text", "url"], batch_size, pf):
        yield from zip(*(batch.column(c).to_pylist() for c in ("title", "text", "url")), strict=True)


def corpus_size(files: list[str], opener: Callable[[str], pq.ParquetFile] = ms.open_parquet) -> int:
    """Rows of a corpus: Parquet footers only (``opener`` as in :func:`iter_corpus`); JSONL non-blank lines."""
    total = 0
    for path in files:
        if path.endswith(".jsonl"):
            with open(path, "rb") as handle:
                total += sum(1 for line in handle if line.strip())
        else:
            total += opener(path).metadata.num_rows
    return total
