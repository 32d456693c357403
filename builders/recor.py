"""RECOR (2026): reasoning-focused multi-turn conversational retrieval over 11 BRIGHT / StackExchange domains.

Configs ``<domain>-<view>`` (split ``test``), domain ``all`` or one of ``recor_source.DOMAINS`` (lower case, so the
release's ``Drones`` files are the ``drones`` configs):

* ``conversations``: one row per conversation (``conversation_id`` = ``<domain>:<id>``, since BRIGHT-sourced ids are
  bare numbers that repeat across domains), its turns (query, answer, gold documents, history, sub-question
  reasoning and its metadata), the original query / answer and the release metadata;
* ``queries``: one row per turn, ``_id`` = ``<domain>:<conversation id>:<turn_id>``, ``text`` = the turn's query, plus
  ``domain``, ``conversation_id``, ``turn``, ``history`` and ``reasoning``;
* ``qrels``: every turn's ``gold_doc_ids`` with score 1 (the release ships no qrels files);
* ``corpus``: the domain's documents (``_id``, ``title`` = "", ``text``, ``domain``); in ``all-corpus`` (and
  ``all-qrels``) a document id used by two domains with different texts is written ``<domain>:<id>``.

``source``: None (the release on the Hub, by URL), a URL prefix, or a local folder (release layout, the files directly,
or a flat ``benchmark.jsonl`` + ``documents.jsonl`` folder; domains whose files it lacks are skipped).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import datasets
from datasets import Features, List, Value

from convrag.builders.base import BenchmarkBuilder, BenchmarkConfig
from convrag.builders.profile import EvaluationProfile
from convrag.core import schema
from convrag.core.errors import DataError
from convrag.core.provenance import is_url

from . import recor_source as rs

SPLIT = "test"
ALL = "all"
DOMAIN_NAMES = (ALL, *rs.DOMAINS)  # all-* first: the exported card shows the first report
VIEW_NAMES = ("conversations", "queries", "qrels", "corpus")
TURN_EXTRA = {
    "answer": Value("string"),
    "gold_doc_ids": List(Value("string")),
    "conversation_history": Value("string"),
    "subquestion_reasoning": Value("string"),
    "target_information": Value("string"),
    "relevance_signals": List(Value("string")),
    "irrelevance_signals": List(Value("string")),
}
METADATA = {
    "created_at": Value("string"), "gold_doc_count": Value("int32"), "method": Value("string"),
    "num_turns": Value("int32"), "source": Value("string"), "version": Value("string"),
}  # fmt: skip
FEATURES: dict[str, Features] = {
    "conversations": schema.conversation_features(TURN_EXTRA, {
        "id": Value("string"), "task": Value("string"), "original_query": Value("string"),
        "original_answer": Value("string"), "metadata": METADATA}),
    "queries": schema.with_extra(schema.QUERIES, {
        "domain": Value("string"), "conversation_id": Value("string"), "turn": Value("int32"),
        "history": Value("string"), "reasoning": Value("string")}),
    "qrels": schema.QRELS,
    "corpus": schema.with_extra(schema.CORPUS, {"domain": Value("string")}),
}  # fmt: skip


@dataclass
class RECORConfig(BenchmarkConfig):
    domain: str = ALL


def config_name(domain: str, view: str) -> str:
    """``<domain>-<view>``, e.g. ``law-queries``, ``all-corpus``."""
    return f"{domain}-{view}"


def _domains(domain: str) -> list[str]:
    return list(rs.DOMAINS) if domain == ALL else [domain]


class RECOR(BenchmarkBuilder):
    """Builder of RECOR conversations, per-turn queries, qrels (from gold_doc_ids) and corpora."""

    BENCHMARK = "recor"
    CARD = "recor.md"
    HUB_METADATA = {
        "pretty_name": "RECOR", "license": "other", "license_name": "recor-mixed",
        "license_link": "https://huggingface.co/datasets/RECOR-Benchmark/RECOR", "language": ["en"],
        "task_categories": ["text-retrieval", "question-answering"],
        "task_ids": ["document-retrieval", "open-domain-qa"],
        "tags": ["conversational-retrieval", "multi-turn", "reasoning-intensive-retrieval", "rag", "convrag"],
        "source_datasets": ["extended|RECOR-Benchmark/RECOR", "extended|xlangai/BRIGHT"],
    }  # fmt: skip
    #: RECOR section 4.1: each domain over its own corpus, nDCG@10 (primary), MAP@10, Recall@10, MRR@10 per
    #: turn, mean within a domain, macro over domains; the paper's five query strategies.
    EVALUATION = EvaluationProfile(
        turns="{subset}-queries", qrels="{subset}-qrels", corpus={"full": "{subset}-corpus"}, reader="recor",
        conversations="{subset}-conversations", split="test",
        strategies={s: s for s in ("baseline", "rewrite", "reasoning", "history", "history+reasoning")},
        extra_strategies={"reasoning-metadata": "reasoning-metadata", "dialogue": "dialogue"},
        retrievers=("bm25", "dense"), measures=("nDCG@10", "MAP@10", "Recall@10", "MRR@10"), groups=("turn",),
        aggregation="domain-macro", report="recor", top_k=100, generation="judge",
    )  # fmt: skip
    DEFAULT_SOURCES = {name: rs.HUB_URL + rel for name, rel in rs.release_paths().items()}
    VERSION = datasets.Version("1.0.0")
    BUILDER_CONFIG_CLASS = RECORConfig
    BUILDER_CONFIGS = [
        RECORConfig(name=config_name(d, v), domain=d, view=v, description=f"RECOR {v} ({d})")
        for d in DOMAIN_NAMES for v in VIEW_NAMES
    ]  # fmt: skip
    DEFAULT_CONFIG_NAME = "all-queries"
    WRITER_BATCH_SIZES = {"conversations": 100}  # a conversation row holds every turn with its history and reasoning

    @classmethod
    def default_configs(cls, options: dict[str, Any] | None = None) -> list[str]:
        """Configs that ``options['source']`` can build (all for URL sources; local: domains present, corpus
        configs of a release layout where their corpus file is too); a local folder without any benchmark file is
        an error naming the file looked for."""
        source = (options or {}).get("source")
        if source is None or is_url(str(source)):
            return [c.name for c in cls.BUILDER_CONFIGS]
        located = rs.locate(source)
        present = set(rs.available_domains(located))
        if not present:
            raise rs.missing_benchmark(str(source))
        # a flat folder without documents.jsonl builds empty corpus configs, skipped and reported as such
        corpora = present if located.get(rs.FLAT) else {d for d in present if located.get(f"{d}-corpus")}

        def buildable(domains: set[str], domain: str) -> bool:
            return bool(domains) if domain == ALL else domain in domains

        return [c.name for c in cls.BUILDER_CONFIGS
                if buildable(corpora if c.view == "corpus" else present, c.domain)]  # fmt: skip

    def _info(self) -> datasets.DatasetInfo:
        return datasets.DatasetInfo(
            description="RECOR: reasoning-focused multi-turn conversational retrieval benchmark "
            "(conversations, per-turn queries, qrels from gold documents, corpora).",
            features=FEATURES[self.config.view],
            homepage="https://huggingface.co/datasets/RECOR-Benchmark/RECOR",
            license="other",  # MIT annotations; BRIGHT texts CC BY 4.0; StackExchange texts CC BY-SA 4.0
        )

    def _files(self, dl_manager: datasets.DownloadManager) -> tuple[dict[str, str | None], list[str]]:
        located = rs.locate(self.config.source)
        if located.get(rs.FLAT):
            domains = [d for d in rs.available_domains(located) if d in _domains(self.config.domain)]
            if not domains:
                raise DataError(f"config {self.config.name}: the flat source holds no such domain",
                                str(self.config.source))  # fmt: skip
            return {rs.FLAT: located[rs.FLAT]}, domains
        domains = _domains(self.config.domain)
        files: dict[str, str | None] = {}
        for d in domains:
            for kind in ("benchmark", "corpus"):
                path = located.get(f"{d}-{kind}")
                files[f"{d}-{kind}"] = dl_manager.download(path) if path and is_url(path) else path
        if not any(files.get(f"{d}-benchmark") for d in domains):
            raise rs.missing_benchmark(str(self.config.source), None if self.config.domain == ALL else domains[0])
        built = [d for d in domains if files.get(f"{d}-benchmark")]
        if self.config.view == "corpus" and not any(files.get(f"{d}-corpus") for d in built):
            path = os.path.join(os.path.expanduser(str(self.config.source)), rs.release_paths()[f"{built[0]}-corpus"])
            raise DataError(f"not found (config {self.config.name} needs {built[0]}-corpus; also looked for it in "
                            "corpus/ and directly in the folder)", path)  # fmt: skip
        return files, domains

    def _split_generators(self, dl_manager: datasets.DownloadManager) -> list[datasets.SplitGenerator]:
        domain, view = self.config.domain, self.config.view
        if domain not in DOMAIN_NAMES or view not in VIEW_NAMES:
            raise DataError(f"unknown RECOR config domain={domain!r} view={view!r}")
        files, domains = self._files(dl_manager)
        data = rs.parse_recor(files, domains, self.sources)  # parse and check here, so errors surface unwrapped
        self._parsed = (files, domains, data)
        self.report.counts.update(data.report.counts)
        self.report.examples.update(data.report.examples)
        return [datasets.SplitGenerator(name=SPLIT, gen_kwargs={"files": files, "domains": domains})]

    def _generate_examples(self, files: dict[str, str | None], domains: list[str]):
        view = self.config.view
        cached = getattr(self, "_parsed", None)
        data = cached[2] if cached and cached[:2] == (files, domains) else rs.parse_recor(files, domains, self.sources)
        qualify = rs.conflicting_ids(data) if self.config.domain == ALL else set()

        def doc_key(d: str, doc_id: str) -> str:
            return f"{d}:{doc_id}" if doc_id in qualify else doc_id

        for d in domains:
            if view == "conversations":
                for row in data.conversations.get(d, []):
                    yield row["conversation_id"], row
            elif view == "queries":
                for row in data.queries.get(d, []):
                    yield row["_id"], row
            elif view == "qrels":
                for row in data.qrels.get(d, []):
                    row = {**row, "corpus-id": doc_key(d, row["corpus-id"])}
                    yield f"{row['query-id']}|{row['corpus-id']}", row
            else:
                for doc_id, text in data.documents[d]() if d in data.documents else ():
                    key = doc_key(d, doc_id)
                    if (
                        self.config.domain == ALL
                        and key == doc_id
                        and doc_id in data.shared
                        and data.shared[doc_id][0][0] != d
                    ):
                        continue  # same id, same text in an earlier domain: kept once
                    yield f"{d}:{doc_id}", {"_id": key, "title": "", "text": text, "domain": d}
