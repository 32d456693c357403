"""The documents the agents and the assembly read: the curated corpus of a run (or the source itself when the
run has no curate stage), streamed in one fixed order whose row number is the MTR-Bench ``document_idx``.

Rows carry the MTR-DOCUMENT fields: ``document_idx``, ``id`` (our ``_id``), ``url`` (always "": our readers
keep no URL), ``title``, ``text``,
``naive_quality`` and ``edu_quality``. A corpus without quality classifiers has no such scores: then
``edu_quality`` is NaN and ``naive_quality`` -1 ("not scored"; MTR-DOCUMENT's columns are non-null). The
nvidia quality label maps back to its class index: ``naive_quality`` 0 / 1 / 2 for High / Medium / Low.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convrag.core.corpus import corpus_files, iter_file
from convrag.core.errors import ConvragError
from convrag.synthesis.engine.pipeline import REPORT_FILE
from convrag.synthesis.engine.shards import iter_shard, shard_files

#: the NVIDIA quality classifier's class index (its id2label is {0: High, 1: Medium, 2: Low})
NAIVE_LABELS = {"high": 0, "medium": 1, "low": 2}
DOCUMENT_FIELDS = ("document_idx", "id", "url", "title", "text", "naive_quality", "edu_quality")


@dataclass(frozen=True)
class CorpusRef:
    """Where a run's documents are: the curate stage's output under ``out`` if it finished, else ``source``."""

    out: Path
    source: str | None = None
    corpus_config: str | None = None

    @property
    def curated(self) -> Path | None:
        folder = self.out / "curate"
        return folder / "corpus" if (folder / REPORT_FILE).is_file() else None


def _naive(label: Any) -> int:
    if isinstance(label, str):
        return NAIVE_LABELS.get(label.strip().lower(), -1)
    return -1


def _edu(score: Any) -> float:
    return float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else math.nan


def iter_documents(ref: CorpusRef, ids: Iterable[str] | None = None) -> Iterator[dict[str, Any]]:
    """Every document (or only those whose id is in ``ids``) with its ``document_idx``, in corpus order."""
    wanted = None if ids is None else set(ids)
    idx = 0
    curated = ref.curated
    if curated is not None:
        for path in shard_files(curated):
            for row in iter_shard(path):
                if wanted is None or row["_id"] in wanted:
                    yield {"document_idx": idx, "id": row["_id"], "url": "",
                           "title": row.get("title") or "", "text": row["text"],
                           "naive_quality": _naive(row.get("naive_quality")),
                           "edu_quality": _edu(row.get("edu_quality"))}
                idx += 1
        return
    if ref.source is None:
        raise ConvragError(f"{ref.out}: no curated corpus in this run and no --corpus to read documents from")
    for path in corpus_files(ref.source, ref.corpus_config).files:
        for _, doc_id, title, text in iter_file(path):
            if wanted is None or doc_id in wanted:
                yield {"document_idx": idx, "id": doc_id, "url": "", "title": title, "text": text,
                       "naive_quality": -1, "edu_quality": math.nan}
            idx += 1


def fetch_documents(ref: CorpusRef, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The documents with these ids (one streaming pass over the corpus); a missing id is an error."""
    wanted = set(ids)
    found = {row["id"]: row for row in iter_documents(ref, wanted)}
    missing = sorted(wanted - set(found))
    if missing:
        raise ConvragError(f"{ref.out}: {len(missing)} clustered documents are not in the corpus (first: "
                           f"{missing[0]!r}); the corpus changed after clustering? give --redo cluster")
    return found
