"""Export builder configs to a Hub-layout folder and publish it.

The folder is what ``push_to_hub(config_name=...)`` produces and what ``load_dataset(folder, config)`` and
the Hub viewer read::

    <out>/README.md                               YAML front matter (configs, dataset_info, convrag) + card
    <out>/<config>/<split>-00000-of-00001.parquet one file per split (more shards for big splits)

The README's ``convrag`` block records the benchmark name, builder version, build options and the build
report (excluded records, pads...), so ``convrag evaluate`` knows what it is looking at.
"""

from __future__ import annotations

import importlib.resources
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import jinja2
import yaml
from datasets.info import DatasetInfosDict
from datasets.utils.metadata import MetadataConfigs
from huggingface_hub import DatasetCard, DatasetCardData

from convrag.builders import get_builder_class
from convrag.errors import ConvragError

logger = logging.getLogger(__name__)
MAX_SHARD_ROWS = 500_000


@dataclass
class ExportSummary:
    """What an export wrote: rows per config and split, and the build report."""

    out_dir: Path
    benchmark: str
    rows: dict[str, dict[str, int]] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)

    def table(self) -> str:
        """Markdown table: config x split row counts."""
        splits = sorted({s for per in self.rows.values() for s in per})
        lines = ["| config | " + " | ".join(splits) + " |", "|---|" + "---|" * len(splits)]
        for name, per in self.rows.items():
            lines.append(f"| {name} | " + " | ".join(str(per.get(s, "")) for s in splits) + " |")
        return "\n".join(lines)


def build_config(
    benchmark: str, config_name: str, cache_dir: str, options: dict[str, Any]
) -> tuple[datasets.DatasetDict, Any]:
    """Run one builder config; returns its splits and the builder (for ``info`` and ``report``)."""
    cls = get_builder_class(benchmark)
    try:
        builder = cls(config_name=config_name, cache_dir=cache_dir, **options)
        builder.download_and_prepare()
    except datasets.exceptions.DatasetGenerationError as err:
        if isinstance(err.__cause__, ConvragError):
            raise err.__cause__ from None
        raise
    return builder.as_dataset(), builder


def export_benchmark(
    benchmark: str,
    out_dir: str | os.PathLike,
    configs: list[str] | None = None,
    options: dict[str, Any] | None = None,
    overwrite: bool = False,
) -> ExportSummary:
    """Build ``configs`` (default: all) of ``benchmark`` with ``options`` and write a Hub-layout folder."""
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise ConvragError(f"{out} exists and is not empty (use overwrite / --overwrite)")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    options = dict(options or {})
    cls = get_builder_class(benchmark)
    all_names = [c.name for c in cls.BUILDER_CONFIGS]
    skipped: list[str] = []
    if configs:
        names = list(configs)
    elif hasattr(cls, "default_configs"):
        names = cls.default_configs(options)
        skipped = [n for n in all_names if n not in names]
    else:
        names = all_names
    if not names:
        raise ConvragError(f"{benchmark}: the given source holds none of the files any config needs")
    unknown = set(names) - {c.name for c in cls.BUILDER_CONFIGS}
    if unknown:
        raise ConvragError(f"unknown configs for {benchmark}: {sorted(unknown)}")
    summary = ExportSummary(out_dir=out, benchmark=benchmark)
    infos: dict[str, datasets.DatasetInfo] = {}
    metadata: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="convrag-build-") as cache_dir:
        for name in names:
            dataset, builder = build_config(benchmark, name, cache_dir, options)
            summary.rows[name] = {}
            data_files = []
            for split, ds in dataset.items():
                write_parquet_shards(ds, out / name, split)
                data_files.append({"split": split, "path": f"{name}/{split}-*"})
                summary.rows[name][split] = len(ds)
            metadata[name] = {"data_files": data_files}
            if name == cls.DEFAULT_CONFIG_NAME:
                metadata[name]["default"] = True
            info = builder.info.copy()
            info.config_name = name
            infos[name] = info
            report = builder.report.to_dict()
            if report["counts"] and not summary.report:
                summary.report = report
    if skipped:
        summary.report.setdefault("counts", {})["configs skipped: the source lacks their files"] = len(skipped)
        summary.report.setdefault("examples", {})["configs skipped: the source lacks their files"] = skipped
    write_readme(out, cls, infos, metadata, summary, options)
    return summary


def _streamable(ds: datasets.Dataset, files: list[str]) -> bool:
    """True when ``ds`` is exactly the rows of its Arrow cache files, in order (no indices, no in-memory or
    transformed parts), so streaming those files writes exactly ``ds``."""
    from datasets.table import ConcatenationTable, MemoryMappedTable

    table = ds.data
    leaves = [t for row in table.blocks for t in row] if isinstance(table, ConcatenationTable) else [table]
    return bool(
        files and len(ds) and ds._indices is None
        and all(isinstance(t, MemoryMappedTable) and all(r[0] == "replace_schema_metadata" for r in t.replays)
                for t in leaves)
        and [t.path for t in leaves] == files and sum(t.num_rows for t in leaves) == len(ds)
        and table.schema.names == ds.features.arrow_schema.names
    )  # fmt: skip


def write_parquet_shards(ds: datasets.Dataset, folder: Path, split: str) -> list[Path]:
    """Write ``ds`` as ``<split>-XXXXX-of-YYYYY.parquet`` files of at most ``MAX_SHARD_ROWS`` rows (contiguous,
    sizes as ``Dataset.shard(contiguous=True)``), streaming record batches from the Arrow cache files so that
    memory stays flat in the split's size (no memory-mapped pages are touched). Falls back to
    ``Dataset.to_parquet`` for an in-memory dataset."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    n_rows = len(ds)
    n_shards = max(1, -(-n_rows // MAX_SHARD_ROWS))
    sizes = [n_rows // n_shards + (1 if i < n_rows % n_shards else 0) for i in range(n_shards)]
    paths = [folder / f"{split}-{i:05d}-of-{n_shards:05d}.parquet" for i in range(n_shards)]
    files = [f["filename"] for f in ds.cache_files]
    if not _streamable(ds, files):
        for i, path in enumerate(paths):
            (ds.shard(n_shards, i, contiguous=True) if n_shards > 1 else ds).to_parquet(str(path))
        return paths
    schema = ds.features.arrow_schema
    index, written, writer = 0, 0, pq.ParquetWriter(str(paths[0]), schema)
    try:
        for filename in files:
            with pa.OSFile(filename) as source:
                for batch in pa.ipc.open_stream(source):
                    batch = batch.cast(schema) if batch.schema != schema else batch
                    while batch.num_rows:
                        if written == sizes[index]:
                            writer.close()
                            index, written = index + 1, 0
                            writer = pq.ParquetWriter(str(paths[index]), schema)
                        take = min(batch.num_rows, sizes[index] - written)
                        writer.write_batch(batch.slice(0, take))
                        written, batch = written + take, batch.slice(take)
    finally:
        writer.close()
    if index != n_shards - 1 or written != sizes[-1]:
        raise ConvragError(f"export of split {split!r} wrote {sum(sizes[:index]) + written} of {n_rows} rows")
    return paths


def _card_template(card_file: str) -> str:
    return importlib.resources.files("convrag.dataset_cards").joinpath(card_file).read_text(encoding="utf-8")


def write_readme(
    out: Path,
    cls: type,
    infos: dict[str, datasets.DatasetInfo],
    metadata: dict[str, dict[str, Any]],
    summary: ExportSummary,
    options: dict[str, Any],
) -> None:
    """Write README.md: YAML configs and dataset_info as ``push_to_hub`` writes them, our block, the card."""
    card_data = DatasetCardData()
    MetadataConfigs(metadata).to_dataset_card_data(card_data)
    DatasetInfosDict(infos).to_dataset_card_data(card_data)
    first = next(iter(infos.values()))
    if first.license:
        card_data["license"] = first.license
    card_data["convrag"] = {
        "benchmark": cls.BENCHMARK,
        "builder_version": str(cls.VERSION),
        "options": {k: v for k, v in sorted(options.items()) if v is not None},
        "report": summary.report,
    }
    profile = getattr(cls, "EVALUATION", None)
    if profile is not None:
        card_data["convrag"]["evaluation"] = profile.to_dict()
    body = jinja2.Template(_card_template(cls.CARD), undefined=jinja2.StrictUndefined).render(
        rows_table=summary.table(),
        report_yaml=yaml.safe_dump(summary.report or {"counts": {}}, sort_keys=True).strip(),
        options=card_data["convrag"]["options"],
    )
    card = DatasetCard(f"---\n{card_data.to_yaml()}\n---\n\n{body.strip()}\n")
    card.save(str(out / "README.md"))


def read_manifest(folder: str | os.PathLike) -> dict[str, Any]:
    """The ``convrag`` block of an exported folder's README (benchmark, options, report)."""
    readme = Path(folder) / "README.md"
    if not readme.exists():
        raise ConvragError(f"{readme} not found: is {folder} a folder written by `convrag build`?")
    data = DatasetCard.load(str(readme)).data.to_dict()
    if "convrag" not in data:
        raise ConvragError(f"{readme} has no 'convrag' block: it was not written by `convrag build`")
    return data["convrag"]


def push_folder(folder: str | os.PathLike, repo_id: str, private: bool = False, token: str | None = None) -> str:
    """Upload an exported folder to the Hub as dataset ``repo_id`` (token: argument or HF_TOKEN)."""
    from huggingface_hub import HfApi

    read_manifest(folder)
    api = HfApi(token=token or os.environ.get("HF_TOKEN"))
    api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    commit = api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="dataset",
                               commit_message="Upload benchmark built with convrag")  # fmt: skip
    return str(commit)
