"""Base class of convrag's benchmark builders (``datasets.GeneratorBasedBuilder`` subclasses).

A builder reads its sources from their public URLs by default; ``source`` (a config keyword) points it at a local file
or folder in the same format instead. Every builder declares ``BENCHMARK`` (the registry name used by the CLI,
``convrag build <BENCHMARK>``), ``CARD`` (the file in ``dataset_cards/`` rendered into the exported README) and
``DEFAULT_SOURCES`` (split or file name -> public URL).

Problems found while building (records excluded by a rule, pads added, ids repaired) are collected in ``self.report``
as counters plus examples, which the exporter prints and writes into the card: nothing is dropped silently. A
``SourceCache`` (builder keyword ``source_cache``) shared by the configs of one export opens and parses each source
file once: small parse results stay in memory, row streams (corpora) are spilled to an intermediate file in the
cache's folder and re-read from there. A builder used on its own gets a private cache.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import datasets

from convrag.core.errors import DataError
from convrag.core.provenance import is_url


@dataclass
class BenchmarkConfig(datasets.BuilderConfig):
    """A builder config with a ``source``: None (public URLs), a local path, or {split/file: path or URL}."""

    source: str | dict[str, str] | None = None
    view: str = "records"


@dataclass
class BuildReport:
    """What a build did besides writing rows: counted events with a few example ids each."""

    counts: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, event: str, example: str | None = None, limit: int = 10) -> None:
        """Count one ``event``; keep up to ``limit`` example ids for it."""
        self.counts[event] += 1
        if example is not None:
            kept = self.examples.setdefault(event, [])
            if len(kept) < limit:
                kept.append(example)

    def to_dict(self) -> dict[str, Any]:
        return {"counts": dict(sorted(self.counts.items())), "examples": self.examples}


class RecordingReport(BuildReport):
    """A build report that also logs its ``add`` calls, so they can be replayed into another report."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str | None, int]] = []
        self.added: Counter = Counter()

    def add(self, event: str, example: str | None = None, limit: int = 10) -> None:
        super().add(event, example, limit)
        self.calls.append((event, example, limit))
        self.added[event] += 1

    def replay(self, into: BuildReport) -> None:
        """Make the same ``add`` calls on ``into``, in the same order; counts set directly (not by ``add``,
        e.g. ``counts["turns"] = n``) are added to ``into``'s counts."""
        for event, example, limit in self.calls:
            into.add(event, example, limit)
        for event, count in self.counts.items():
            if count != self.added[event]:
                into.counts[event] += count - self.added[event]


T = TypeVar("T")
#: rows per pickled batch of a spilled row stream
SPILL_BATCH = 2048


class SourceCache:
    """Parse results of source files, shared by the builder configs of one export.

    An entry's key is its ``kind`` (what was parsed, and how) plus, per source file, its resolved path, size
    and modification time, so a changed file is parsed again. ``parsed`` keeps a result in memory; ``spilled``
    writes a row stream to ``folder`` once and streams it back from there (memory flat in the number of rows).
    Report events of the parse are recorded once and replayed into each caller's report.
    """

    def __init__(self, folder: str | os.PathLike | None = None) -> None:
        if folder is None:
            folder = tempfile.mkdtemp(prefix="convrag-sources-")
            weakref.finalize(self, shutil.rmtree, folder, True)
        os.makedirs(folder, exist_ok=True)
        self.folder = str(folder)
        self._values: dict[tuple, tuple[Any, RecordingReport]] = {}
        self._files: dict[tuple, tuple[str, RecordingReport]] = {}

    @staticmethod
    def key(kind: str, paths: Sequence[str | None]) -> tuple:
        """``kind`` and (resolved path, size, mtime) of each existing path (None and missing paths as given)."""
        parts: list[Any] = [kind]
        for path in paths:
            if path is None or not os.path.exists(path):
                parts.append(path)
            else:
                stat = os.stat(path)
                parts.append((os.path.realpath(path), stat.st_size, stat.st_mtime_ns))
        return tuple(parts)

    def parsed(
        self, kind: str, paths: Sequence[str | None], parse: Callable[[BuildReport], T],
        report: BuildReport | None = None,
    ) -> T:  # fmt: skip
        """``parse(report)`` of ``paths``, computed once; its report events are replayed into ``report``."""
        key = self.key(kind, paths)
        if key not in self._values:
            recorded = RecordingReport()
            self._values[key] = (parse(recorded), recorded)
        value, recorded = self._values[key]
        if report is not None:
            recorded.replay(report)
        return value

    def spilled(
        self, kind: str, paths: Sequence[str | None], produce: Callable[[BuildReport], Iterable[Any]],
        report: BuildReport | None = None,
    ) -> Callable[[], Iterator[Any]]:  # fmt: skip
        """A function streaming the rows ``produce(report)`` yields; the source is read (and the rows written
        to an intermediate file) once, on the first call; report events are replayed into ``report``."""
        key = self.key(kind, paths)
        if key not in self._files:
            recorded = RecordingReport()
            fd, target = tempfile.mkstemp(prefix="rows-", suffix=".pickle", dir=self.folder)
            with os.fdopen(fd, "wb") as out:
                batch: list[Any] = []
                for row in produce(recorded):
                    batch.append(row)
                    if len(batch) == SPILL_BATCH:
                        pickle.dump(batch, out, protocol=pickle.HIGHEST_PROTOCOL)
                        batch = []
                if batch:
                    pickle.dump(batch, out, protocol=pickle.HIGHEST_PROTOCOL)
            self._files[key] = (target, recorded)
        target, recorded = self._files[key]
        if report is not None:
            recorded.replay(report)

        def rows() -> Iterator[Any]:
            with open(target, "rb") as handle:
                while True:
                    try:
                        batch = pickle.load(handle)
                    except EOFError:
                        return
                    yield from batch

        return rows


class BenchmarkBuilder(datasets.GeneratorBasedBuilder):
    """Common behaviour of convrag builders: source resolution and the build report."""

    BUILDER_CONFIG_CLASS = BenchmarkConfig
    BENCHMARK: str = ""
    CARD: str = ""
    #: Hub card metadata written in the README's YAML (``pretty_name``, ``license`` and, for ``other``,
    #: ``license_name`` / ``license_link``, ``language``, ``task_categories``, ``task_ids``, ``tags``,
    #: ``source_datasets``); ``size_categories`` and ``download_size`` are measured by the exporter
    HUB_METADATA: dict[str, Any] = {}
    DEFAULT_SOURCES: dict[str, str] = {}
    #: rows per Arrow record batch for configs of a view whose rows are large (a conversation with every turn's
    #: history): datasets' writer holds one batch in memory, and the Parquet export reads one at a time
    WRITER_BATCH_SIZES: dict[str, int] = {}

    def __init__(self, *args: Any, source_cache: SourceCache | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "writer_batch_size" not in kwargs:
            self._writer_batch_size = self.WRITER_BATCH_SIZES.get(self.config.view, self._writer_batch_size)
        self.report = BuildReport()
        self.sources = source_cache if source_cache is not None else SourceCache()

    def resolve_sources(self, dl_manager: datasets.DownloadManager) -> dict[str, str]:
        """Return {name: local path} for this build: downloads URLs, checks local paths exist.

        ``source`` may be None (all ``DEFAULT_SOURCES``), one path/URL (used by ``assign_source``), or
        a mapping name -> path/URL.
        """
        source = self.config.source
        if source is None:
            mapping = dict(self.DEFAULT_SOURCES)
        elif isinstance(source, dict):
            unknown = set(source) - set(self.DEFAULT_SOURCES)
            if unknown:
                raise DataError(
                    f"unknown source names {sorted(unknown)}; expected some of {sorted(self.DEFAULT_SOURCES)}"
                )
            mapping = dict(source)
        else:
            mapping = self.assign_source(str(source))
        resolved: dict[str, str] = {}
        for name, path in mapping.items():
            if is_url(path):
                resolved[name] = dl_manager.download(path)
            else:
                path = os.path.expanduser(path)
                if not os.path.exists(path):
                    raise DataError(f"source file or folder does not exist (for {name!r})", source=path)
                resolved[name] = path
        return resolved

    def assign_source(self, path: str) -> dict[str, str]:
        """Map one user-given path to source names. Subclasses with several sources override this."""
        if len(self.DEFAULT_SOURCES) != 1:
            raise DataError(
                f"{self.BENCHMARK}: give sources as name=path for names {sorted(self.DEFAULT_SOURCES)}",
                source=path,
            )
        return {next(iter(self.DEFAULT_SOURCES)): path}
