"""Base class of convrag's benchmark builders (``datasets.GeneratorBasedBuilder`` subclasses).

A builder reads its sources from their public URLs by default; ``source`` (a config keyword) points it at
a local file or folder in the same format instead. Every builder declares:

* ``BENCHMARK``: the registry name used by the CLI (``convrag build <BENCHMARK>``),
* ``CARD``: the file in ``dataset_cards/`` rendered into the exported README,
* ``DEFAULT_SOURCES``: split or file name -> public URL.

Problems found while building (records excluded by a rule, pads added, ids repaired) are collected in
``self.report`` as counters plus examples, so the exporter can print them and write them into the card:
nothing is dropped silently.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import datasets

from convrag.errors import DataError


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


def is_url(path: str) -> bool:
    """True for http(s)/hf/s3-style URLs, False for local paths."""
    return "://" in path


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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.report = BuildReport()

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
