"""MTRAG (Katsis et al., 2025): 110 human multi-turn RAG conversations over four corpora, 842 tasks.

Configs ``<domain>-<view>`` (domain ``clapnq``, ``cloud``, ``fiqa``, ``govt``, or ``all``: the four), split ``test``:

* ``conversations``: one row per conversation, every message with speaker, enrichments (Question Type, Multi-Turn,
  Answerability, ...), alternatives, and the cited passages with their relevance feedback;
* ``tasks``: one row per user turn: prior turns + question (``input``), reference answer (``targets``), labels, and
  the relevant passages (from the released qrels); ``scored`` marks the tasks with qrels;
* ``lastturn`` / ``questions`` / ``rewrite`` and ``qrels``: the released query views (BEIR ``_id``, ``text``, plus
  labels) and qrels (``query-id``, ``corpus-id``, ``score``);
* ``corpus``: the official passage-level corpus (needs ``corpora/passage_level/<domain>.jsonl.zip``); ``cited-corpus``:
  the passages cited in the conversations (text from conversations.json), for retrieval without the corpora (every
  relevant passage is in it; the ranking task is far easier).

``source``: None (the upstream repository by URL), a local checkout / folder in its layout, or a mapping name -> path
(names in ``mtrag_source.mtrag_paths()``, plus ``root``); without corpora, everything but ``*-corpus`` is built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import datasets
from datasets import Features

from convrag.builders.base import BenchmarkBuilder, BenchmarkConfig, BuildReport
from convrag.builders.profile import EvaluationProfile
from convrag.core.errors import DataError

from . import mtrag_parse as mp
from .mtrag_source import DOMAINS, VIEWS, expected_paths, fetch, iter_corpus, locate, mtrag_paths

SPLIT = "test"
ALL = "all"
DOMAIN_NAMES = (*DOMAINS, ALL)
VIEW_NAMES = ("conversations", "tasks", *VIEWS, "qrels", "cited-corpus", "corpus")
FEATURES: dict[str, Features] = {
    "conversations": mp.CONVERSATION_FEATURES,
    "tasks": mp.TASK_FEATURES,
    **{v: mp.QUERY_FEATURES for v in VIEWS},
    "qrels": mp.schema.QRELS,
    "cited-corpus": mp.CORPUS_FEATURES,
    "corpus": mp.CORPUS_FEATURES,
}


@dataclass
class MTRAGConfig(BenchmarkConfig):
    domain: str = ALL


def config_name(domain: str, view: str) -> str:
    """``<domain>-<view>``, e.g. ``clapnq-lastturn``, ``all-tasks``."""
    return f"{domain}-{view}"


def make_configs(label: str, views: tuple[str, ...]) -> list[MTRAGConfig]:
    """One config per domain (and ``all``) and view."""
    return [MTRAGConfig(name=config_name(d, v), domain=d, view=v, description=f"{label} {v} ({d})")
            for d in DOMAIN_NAMES for v in views]  # fmt: skip


def domains_of(domain: str) -> tuple[str, ...]:
    """The domains a config covers: all four for ``all``, else the one named."""
    return DOMAINS if domain == ALL else (domain,)


def needed_files(domain: str, view: str) -> list[str]:
    """Source names a config reads (release files are small; corpora only for ``corpus``)."""
    if view == "corpus":
        return [f"{d}-corpus" for d in domains_of(domain)]
    return ["conversations"] + [f"{d}-{v}" for d in DOMAINS for v in (*VIEWS, "qrels")]


def required_files(domain: str, view: str) -> list[str]:
    """Source names without which a config cannot be built."""
    if view == "corpus":
        return needed_files(domain, view)
    if view in (*VIEWS, "qrels"):
        return ["conversations"] + [f"{d}-{view}" for d in domains_of(domain)]
    return ["conversations"]


def missing_error(source: Any, layout: dict[str, str], names: list[str], why: str) -> DataError:
    """The error of source files ``names`` that a local ``source`` lacks, naming where each was looked for."""
    paths = expected_paths(source, layout, names)
    if len(paths) == 1:
        return DataError(f"not found ({why})", paths[0])
    return DataError(f"not found: {', '.join(paths)} ({why})")


class MTRAGFamily(BenchmarkBuilder):
    """What the MTRAG and MTRAG-UN builders share: ``<domain>-<view>`` configs over the four domains and ``all``,
    source location, the build report, and the ``tasks``, ``qrels``, ``corpus`` and ``cited-corpus`` views.

    A subclass gives ``LABEL``, ``VIEW_NAMES``, ``FEATURES``, ``DESCRIPTION``, ``layout`` (source name -> path in
    the upstream repository), ``required_files`` / ``needed_files`` (per domain and view), ``parse`` (files ->
    parsed data with ``tasks``, ``qrels``, ``cited``, ``events``, ``examples``) and ``view_rows`` for its query views.
    """

    BUILDER_CONFIG_CLASS = MTRAGConfig
    VERSION = datasets.Version("1.0.0")
    DEFAULT_CONFIG_NAME = "all-tasks"
    LABEL = ""
    DESCRIPTION = ""
    VIEW_NAMES: tuple[str, ...] = ()
    #: MTRAGEval Subtask A: nDCG@k and Recall@k (k = 1, 3, 5, 10) per domain over its own corpus, top 10 kept;
    #: the shipped query views are strategies that read their field; official weighted "all" row.
    EVALUATION = EvaluationProfile(
        turns="{subset}-tasks", qrels="{subset}-qrels", reader="views",
        corpus={"full": "{subset}-corpus", "cited": "{subset}-cited-corpus"},
        views={v: f"{{subset}}-{v}" for v in VIEWS},
        strategies={v: f"field:{v}" for v in VIEWS},
        extra_strategies={"history": "history", "llm-rewrite": "rewrite", "dialogue": "dialogue"},
        retrievers=("bm25", "dense", "hybrid"),
        measures=tuple(f"{m}@{k}" for m in ("nDCG", "Recall") for k in (1, 3, 5, 10)),
        groups=("answerability", "multi_turn", "standalone"), aggregation="mtrag-official", report="mtrag",
        top_k=10, submission="mtrag", generation="mtrag",
    )  # fmt: skip
    FEATURES: dict[str, Features] = {}

    @staticmethod
    def layout() -> dict[str, str]:
        raise NotImplementedError

    @staticmethod
    def required_files(domain: str, view: str) -> list[str]:
        raise NotImplementedError

    @staticmethod
    def needed_files(domain: str, view: str) -> list[str]:
        raise NotImplementedError

    @staticmethod
    def parse(files: dict[str, str | None]) -> Any:
        raise NotImplementedError

    def view_rows(self, data: Any, view: str, wanted: tuple[str, ...]) -> Iterator[tuple[str, dict[str, Any]]]:
        raise NotImplementedError

    def _corpus(self, path: str | None, report: BuildReport | None = None) -> Callable[[], Iterator[dict[str, str]]]:
        """The passages of a corpus file, streamed from its one read per export (events into ``report``)."""
        return self.sources.spilled("mtrag-corpus", [path], lambda events: iter_corpus(str(path), events), report)

    def check_companions(self, located: dict[str, str | None]) -> None:
        """Raise a ``DataError`` naming a source file that the located files cannot be read without (none here)."""

    @classmethod
    def default_configs(cls, options: dict[str, Any] | None = None) -> list[str]:
        """Configs that ``options['source']`` can build (all of them for URL sources); a source that can build
        none is an error naming the file every non-corpus config needs."""
        source = (options or {}).get("source")
        located = locate(source, cls.layout())
        names = [c.name for c in cls.BUILDER_CONFIGS
                 if all(located.get(n) for n in cls.required_files(c.domain, c.view))]  # fmt: skip
        if not names:
            needed = cls.required_files(ALL, "tasks")
            raise missing_error(source, cls.layout(), needed, f"every {cls.LABEL} config but *-corpus needs "
                                f"{', '.join(needed)}; is the source a folder in the mt-rag-benchmark layout?")
        return names

    def _info(self) -> datasets.DatasetInfo:
        return datasets.DatasetInfo(
            description=self.DESCRIPTION,
            features=self.FEATURES[self.config.view],
            homepage="https://github.com/IBM/mt-rag-benchmark",
            license="apache-2.0",
        )

    def _split_generators(self, dl_manager: datasets.DownloadManager) -> list[datasets.SplitGenerator]:
        domain, view = self.config.domain, self.config.view
        if domain not in DOMAIN_NAMES or view not in self.VIEW_NAMES:
            raise DataError(f"unknown {self.LABEL} config domain={domain!r} view={view!r}")
        located = locate(self.config.source, self.layout())
        missing = [n for n in self.required_files(domain, view) if not located.get(n)]
        if missing:
            hint = ("; also looked for unzipped and in corpora/; the corpora are separate downloads, "
                    "`cited-corpus` configs work without them") if view == "corpus" else ""
            raise missing_error(self.config.source, self.layout(), missing,
                                f"config {self.config.name} needs {', '.join(missing)}{hint}")  # fmt: skip
        if view != "corpus":
            self.check_companions(located)
        files = fetch(located, self.needed_files(domain, view), dl_manager)
        if view == "corpus":  # read each corpus once per export (spilled to the shared cache), errors unwrapped
            for d in domains_of(domain):
                self._corpus(files[f"{d}-corpus"], self.report)
        else:
            data = self.parse(files)  # parse and check here, so errors surface unwrapped
            for event, count in data.events.items():
                self.report.counts[event] = count
                if data.examples.get(event):
                    self.report.examples[event] = list(data.examples[event])
        return [datasets.SplitGenerator(name=SPLIT, gen_kwargs={"files": files})]

    def _generate_examples(self, files: dict[str, str | None]) -> Iterator[tuple[str, dict[str, Any]]]:
        view, wanted = self.config.view, domains_of(self.config.domain)
        if view == "corpus":
            for d in wanted:
                for row in self._corpus(files[f"{d}-corpus"])():
                    yield f"{d}:{row['_id']}", {**row, "domain": d}
            return
        data = self.parse(files)
        if view == "tasks":
            yield from ((row["task_id"], row) for row in data.tasks if row["domain"] in wanted)
        elif view == "qrels":
            for d in wanted:
                for row in data.qrels.get(d, []):
                    yield f"{row['query-id']}:{row['corpus-id']}", row
        elif view == "cited-corpus":
            for d in wanted:
                for doc_id in sorted(data.cited.get(d, {})):
                    yield f"{d}:{doc_id}", data.cited[d][doc_id]
        else:
            yield from self.view_rows(data, view, wanted)


class MTRAG(MTRAGFamily):
    """Builder of MTRAG conversations, tasks, query views, qrels and corpora."""

    BENCHMARK = "mtrag"
    CARD = "mtrag.md"
    HUB_METADATA = {
        "pretty_name": "MTRAG", "license": "apache-2.0", "language": ["en"],
        "task_categories": ["text-retrieval", "question-answering"],
        "task_ids": ["document-retrieval", "open-domain-qa"],
        "tags": ["conversational-retrieval", "multi-turn", "rag", "answerability", "mtrag", "convrag"],
        "source_datasets": ["extended|other-mt-rag-benchmark"],
    }  # fmt: skip
    LABEL = "MTRAG"
    DESCRIPTION = "MTRAG: multi-turn conversational RAG benchmark (IBM), conversations, tasks and retrieval views."
    DEFAULT_SOURCES = mtrag_paths()
    VIEW_NAMES = VIEW_NAMES
    FEATURES = FEATURES
    BUILDER_CONFIGS = make_configs(LABEL, VIEW_NAMES)
    layout = staticmethod(mtrag_paths)
    required_files = staticmethod(required_files)
    needed_files = staticmethod(needed_files)
    parse = staticmethod(mp.parse_mtrag)

    def check_companions(self, located: dict[str, str | None]) -> None:
        """A domain's task ids are read from its questions file: a domain whose other query files or qrels are
        in the source but whose questions file is not is an error naming the questions file."""
        for d in DOMAINS:
            given = [n for n in (f"{d}-lastturn", f"{d}-rewrite", f"{d}-qrels") if located.get(n)]
            if given and not located.get(f"{d}-questions"):
                raise missing_error(self.config.source, self.layout(), [f"{d}-questions"],
                                    f"{d}'s conversation ids are read from it; {', '.join(given)} name them")

    def view_rows(self, data: Any, view: str, wanted: tuple[str, ...]) -> Iterator[tuple[str, dict[str, Any]]]:
        """``conversations`` and the released query views."""
        if view == "conversations":
            yield from ((row["conversation_id"], row) for row in data.conversations if row["domain"] in wanted)
        else:
            for d in wanted:
                for row in data.queries.get(d, {}).get(view, []):
                    yield row["_id"], row

