"""StratRAG: 15-document multi-hop retrieval pools built from HotpotQA (distractor setting).

Configs, each with ``train`` / ``validation`` splits as far as sources are given:

* ``all``, ``bridge``, ``comparison``, ``yes-no``: records in the format of the paper's section 3.4 (``id, query,
  reference_answer, doc_pool[{doc_id, text, source}], gold_doc_indices, metadata, created_at, provenance``); the
  per-type configs hold the records of one question type;
* ``corpus`` / ``queries`` / ``qrels``: the same data as a BEIR / mteb retrieval view; ``queries`` carries each query's
  ``pool`` (its 15 doc ids) for pool-restricted retrieval, ``qrels`` lists the 2 gold documents (score 1), and pads
  are in the corpus (flagged ``is_pad``), so pools are complete.
Options (config keywords): :class:`StratRAGConfig`.
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import random
from dataclasses import dataclass
from typing import Any

import datasets
from datasets import Features, List, Value

from convrag.builders.base import BenchmarkBuilder, BenchmarkConfig, BuildReport
from convrag.builders.profile import EvaluationProfile
from convrag.core import schema
from convrag.core.errors import DataError
from convrag.core.jsonl import read_json_records
from convrag.core.provenance import is_url

from . import stratrag_rules as rules

_URLS = {
    "train": "http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_train_v1.1.json",
    "validation": "http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_distractor_v1.json",
}
RECORD_CONFIGS = ("all", *rules.QUESTION_TYPES)
VIEW_CONFIGS = ("corpus", "queries", "qrels")
RELEASE_TRAIN_SIZE = 2000

DOC = {"doc_id": Value("string"), "text": Value("string"), "source": Value("string")}
RECORD_FEATURES = Features(
    {
        "id": Value("string"),
        "query": Value("string"),
        "reference_answer": Value("string"),
        "doc_pool": List(DOC),
        "gold_doc_indices": List(Value("int32")),
        "metadata": {
            "split": Value("string"),
            "question_type": Value("string"),
            "hotpot_type": Value("string"),
            "hotpot_level": Value("string"),
            "num_real_docs": Value("int32"),
        },
        "created_at": Value("string"),
        "provenance": {
            "dataset": Value("string"),
            "setting": Value("string"),
            "source_id": Value("string"),
            "source_split": Value("string"),
            "license": Value("string"),
        },
    }
)
VIEW_FEATURES = {
    "corpus": schema.with_extra(schema.CORPUS, {"source": Value("string"), "is_pad": Value("bool")}),
    "queries": schema.with_extra(
        schema.QUERIES,
        {
            "question_type": Value("string"),
            "reference_answer": Value("string"),
            "pool": List(Value("string")),
        },
    ),
    "qrels": schema.QRELS,
}


@dataclass
class StratRAGConfig(BenchmarkConfig):
    """Options (config keywords): ``source`` (a HotpotQA file, or {"train": path, "validation": path}; default: the
    official URLs), ``seed`` (42), ``pool_size`` (15), ``fill`` ("pad" or "borrow"), ``max_train`` /
    ``max_validation`` (keep the first N records, or a seeded sample of N with ``sample_seed``),
    ``validation_row_offset`` (first global row number of validation when train is not built: 2000, as in the
    release), ``created_at`` (timestamp written into records; default: SOURCE_DATE_EPOCH or today)."""

    seed: int = 42
    pool_size: int = rules.POOL_SIZE
    fill: str = "pad"
    max_train: int | None = None
    max_validation: int | None = None
    sample_seed: int | None = None
    validation_row_offset: int = RELEASE_TRAIN_SIZE
    created_at: str | None = None


def _default_created_at() -> str:
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = _dt.datetime.fromtimestamp(int(epoch), _dt.timezone.utc) if epoch else _dt.datetime.now(_dt.timezone.utc)
    return when.strftime("%Y-%m-%dT00:00:00Z")


@functools.lru_cache(maxsize=2)
def _read_hotpot(path: str, mtime: float) -> tuple[dict, ...]:
    """Parse and check a HotpotQA JSON file (a list of records); errors name the file and the line where the
    offending record starts."""
    records = read_json_records(path, "HotpotQA records")
    if not records:
        raise DataError("the file holds no HotpotQA records", path)
    seen: dict[str, int] = {}
    for index, (line, raw) in enumerate(records):
        rules.check_record(raw, path, index, line)
        if raw["_id"] in seen:
            raise DataError(f"duplicate _id {raw['_id']!r} (records starting on lines {seen[raw['_id']]} and "
                            f"{line})", path, line)  # fmt: skip
        seen[raw["_id"]] = line
    return tuple(raw for _, raw in records)


def read_hotpot(path: str) -> tuple[dict, ...]:
    """HotpotQA records of ``path`` (cached per file version)."""
    return _read_hotpot(path, os.path.getmtime(path))


def _select(records: tuple[dict, ...], limit: int | None, sample_seed: int | None) -> list[dict]:
    if limit is None or limit >= len(records):
        return list(records)
    if sample_seed is None:
        return list(records[:limit])
    chosen = sorted(random.Random(sample_seed).sample(range(len(records)), limit))
    return [records[i] for i in chosen]


class StratRAG(BenchmarkBuilder):
    """Builder of StratRAG records and its retrieval views from HotpotQA distractor files."""

    BENCHMARK = "stratrag"
    CARD = "stratrag.md"
    HUB_METADATA = {
        "pretty_name": "StratRAG", "license": "cc-by-sa-4.0", "language": ["en"],
        "task_categories": ["text-retrieval", "question-answering"],
        "task_ids": ["document-retrieval", "open-domain-qa"],
        "tags": ["multi-hop", "rag", "retrieval-evaluation", "reranking", "hotpotqa", "convrag"],
        "source_datasets": ["extended|hotpotqa/hotpot_qa", "extended|Aryanp088/StratRAG"],
    }  # fmt: skip
    #: StratRAG Tables 2 and 3: R@1, R@2, R@5, MRR (no cut-off), nDCG@5; each query ranks its own pool;
    #: by question type.
    EVALUATION = EvaluationProfile(
        turns="queries", qrels="qrels", corpus={"pool": "corpus"}, pool="field:pool", search="pool",
        strategies={"baseline": "baseline"}, retrievers=("random", "bm25", "dense", "hybrid"),
        measures=("Recall@1", "Recall@2", "Recall@5", "MRR", "nDCG@5"),
        labels={"Recall@1": "R@1", "Recall@2": "R@2", "Recall@5": "R@5", "nDCG@5": "NDCG@5"},
        groups=("question_type",), aggregation="mean", report="stratrag", top_k=None,
    )  # fmt: skip
    DEFAULT_SOURCES = _URLS
    VERSION = datasets.Version("1.0.0")
    BUILDER_CONFIG_CLASS = StratRAGConfig
    BUILDER_CONFIGS = [
        StratRAGConfig(name=name, view="records", description=f"StratRAG records ({name})")
        for name in RECORD_CONFIGS
    ] + [StratRAGConfig(name=name, view=name, description=f"retrieval view: {name}") for name in VIEW_CONFIGS]
    DEFAULT_CONFIG_NAME = "all"

    def _info(self) -> datasets.DatasetInfo:
        features = RECORD_FEATURES if self.config.view == "records" else VIEW_FEATURES[self.config.view]
        return datasets.DatasetInfo(
            description="StratRAG multi-hop retrieval pools derived from HotpotQA (distractor setting).",
            features=features,
            homepage="https://huggingface.co/datasets/Aryanp088/StratRAG",
            license="cc-by-sa-4.0",
        )

    def assign_source(self, path: str) -> dict[str, str]:
        """One local file: its split is read from the name (``train`` or ``dev``/``validation``)."""
        name = os.path.basename(path).lower()
        if not is_url(path) and not os.path.exists(path):
            raise DataError("source file or folder does not exist", path)
        if "train" in name:
            return {"train": path}
        if "dev" in name or "valid" in name:
            return {"validation": path}
        raise DataError("cannot tell the split from the file name; use --source train=PATH or validation=PATH", path)

    def _split_generators(self, dl_manager: datasets.DownloadManager) -> list[datasets.SplitGenerator]:
        sources = self.resolve_sources(dl_manager)
        if self.config.fill not in ("pad", "borrow"):
            raise DataError(f"fill must be 'pad' or 'borrow', got {self.config.fill!r}")
        if self.config.pool_size < rules.N_GOLD:
            raise DataError(f"option pool_size must be at least {rules.N_GOLD}, got {self.config.pool_size}")
        for name in ("max_train", "max_validation", "validation_row_offset"):
            if (getattr(self.config, name) or 0) < 0:
                raise DataError(f"option {name} must not be negative, got {getattr(self.config, name)}")
        for path in sources.values():
            read_hotpot(path)  # parse and check here, so errors surface unwrapped
        order = [s for s in ("train", "validation") if s in sources]
        return [datasets.SplitGenerator(name=s, gen_kwargs={"split": s, "sources": sources}) for s in order]

    def split_records(self, split: str, sources: dict[str, str]) -> list[dict[str, Any]]:
        """All StratRAG records of ``split`` (invalid examples reported in ``self.report``); the rules are
        applied once per export (the configs share ``self.sources``)."""
        c = self.config
        options = (split, c.max_train, c.max_validation, c.sample_seed, c.pool_size, c.seed, c.fill,
                   c.created_at or _default_created_at(), c.validation_row_offset, *sorted(sources))  # fmt: skip
        paths = [sources[name] for name in sorted(sources)]
        return self.sources.parsed(f"stratrag-records:{options!r}", paths,
                                   lambda report: build_split(split, sources, c, report), self.report)  # fmt: skip

    def _generate_examples(self, split: str, sources: dict[str, str]):
        records = self.split_records(split, sources)
        view = self.config.view
        if view == "records":
            wanted = self.config.name
            for record in records:
                if wanted == "all" or record["metadata"]["question_type"] == wanted:
                    yield record["id"], record
        elif view == "queries":
            for r in records:
                yield r["id"], {
                    "_id": r["id"],
                    "text": r["query"],
                    "question_type": r["metadata"]["question_type"],
                    "reference_answer": r["reference_answer"],
                    "pool": [d["doc_id"] for d in r["doc_pool"]],
                }
        elif view == "qrels":
            for r in records:
                for i in r["gold_doc_indices"]:
                    key = f"{r['id']}:{r['doc_pool'][i]['doc_id']}"
                    yield key, {"query-id": r["id"], "corpus-id": r["doc_pool"][i]["doc_id"], "score": 1}
        else:
            yield from _corpus_rows(records)


def _corpus_rows(records: list[dict[str, Any]]):
    """Unique pool documents (borrowed documents appear in several pools with the same id and text)."""
    seen: dict[str, str] = {}
    for r in records:
        for d in r["doc_pool"]:
            if d["doc_id"] in seen:
                if seen[d["doc_id"]] != d["text"]:
                    raise DataError(f"doc_id {d['doc_id']} has two different texts (record {r['id']})")
                continue
            seen[d["doc_id"]] = d["text"]
            is_pad = d["source"] == rules.PAD_SOURCE
            yield d["doc_id"], {"_id": d["doc_id"], "title": "", "text": d["text"], "source": d["source"],
                                "is_pad": is_pad}  # fmt: skip


def build_split(
    split: str, sources: dict[str, str], config: StratRAGConfig, report: BuildReport
) -> list[dict[str, Any]]:
    """Apply the StratRAG rules to every selected HotpotQA record of ``split``.

    Global row numbers (used in doc ids) run over train first, then validation; without a train source,
    validation starts at ``config.validation_row_offset``.
    """
    limits = {"train": config.max_train, "validation": config.max_validation}
    raws = _select(read_hotpot(sources[split]), limits[split], config.sample_seed)
    if split == "train":
        offset = 0
    elif "train" in sources:
        offset = len(_select(read_hotpot(sources["train"]), config.max_train, config.sample_seed))
    else:
        offset = config.validation_row_offset
    options = rules.PoolOptions(pool_size=config.pool_size, seed=config.seed, fill=config.fill)
    created_at = config.created_at or _default_created_at()

    valid = []
    for row, raw in enumerate(raws):
        parts = rules.gold_and_distractors(raw, report)
        if parts is not None:
            valid.append((offset + row, raw, *parts))
            if not raw["answer"].strip():
                report.add(rules.EMPTY_ANSWER, raw["_id"])
    borrow = []
    if config.fill == "borrow":
        for global_row, raw, _, distractors in valid:
            for i in distractors:
                title, sentences = raw["context"][i]
                borrow.append({"doc_id": f"doc_{global_row:08d}_{i:02d}",
                               "text": rules.paragraph_text(title, sentences), "source": title})  # fmt: skip
    records = []
    for number, (global_row, raw, gold, distractors) in enumerate(valid):
        pool = rules.build_pool(raw, global_row, gold, distractors, options, borrow, report)
        qtype = rules.question_type(raw["question"], raw["answer"])
        report.add(f"{split} records: {qtype}")
        records.append(
            {
                "id": f"{rules.split_prefix(split)}_{number:06d}",
                "query": raw["question"],
                "reference_answer": raw["answer"],
                "doc_pool": pool,
                "gold_doc_indices": list(range(rules.N_GOLD)),
                "metadata": {
                    "split": split,
                    "question_type": qtype,
                    "hotpot_type": raw.get("type") or "",
                    "hotpot_level": raw.get("level") or "",
                    "num_real_docs": sum(d["source"] != rules.PAD_SOURCE for d in pool),
                },
                "created_at": created_at,
                "provenance": {
                    "dataset": "hotpot_qa",
                    "setting": "distractor",
                    "source_id": raw["_id"],
                    "source_split": "train" if split == "train" else "dev",
                    "license": "CC BY-SA 4.0",
                },
            }
        )
    return records
