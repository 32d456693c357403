"""Export builder configs to a Hub-layout folder and publish it.

The folder is what ``push_to_hub(config_name=...)`` produces and what ``load_dataset(folder, config)`` and
the Hub viewer read::

    <out>/README.md                               YAML front matter (configs, dataset_info, convrag) + card
    <out>/<config>/<split>-00000-of-00001.parquet one file per split (more shards for big splits)

The README's ``convrag`` block records the benchmark name, builder version, build options and the build report
(excluded records, pads, empty configs...), so ``convrag evaluate`` knows what it is looking at. A source synthesized
by convrag (``synthesis.json`` beside its files) gets its own card (:func:`synthesized_card`: its own ``pretty_name``,
the corpus and the models that wrote it, placeholder flagged; never the published benchmark's name and sources), the
record kept in the block as ``synthesis``. A build never destroys data: a failed or interrupted build leaves
``<out>`` as it was (:func:`export_benchmark`).
"""

from __future__ import annotations

import importlib.resources
import logging
import os
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
from convrag.builders.base import SourceCache
from convrag.builders.options import check_options
from convrag.core.errors import ConvragError, DataError
from convrag.core.manifest import read_manifest
from convrag.core.out_folder import check_out, replacing
from convrag.core.provenance import is_url, public_report
from convrag.hub import mteb_layout
from convrag.synthesis.engine.provenance import PIPELINES, model_lines, pretty_name, read_record, source_datasets

logger = logging.getLogger(__name__)
MAX_SHARD_ROWS = 500_000
#: build-report events of configs / splits that came out with 0 rows (not written: ``load_dataset`` cannot
#: read a 0-row split)
EMPTY_CONFIGS = "configs skipped: 0 rows in every split"
EMPTY_SPLITS = "splits skipped: 0 rows"
MISSING_FILES = "configs skipped: the source lacks their files"
#: the card of a benchmark synthesized by convrag (a source with ``synthesis.json``), in place of the builder's
SYNTHESIZED_CARD = "synthesized.md"


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
    benchmark: str, config_name: str, cache_dir: str, options: dict[str, Any], sources: SourceCache | None = None
) -> tuple[dict[str, list[str]], Any]:
    """Run one builder config; returns split -> its Arrow files, for the non-empty splits, and the builder (for
    ``info`` and ``report``). ``sources``: parsed source files shared with the other configs of the export
    (each file is read once).

    The files are those ``as_dataset`` would memory-map; it is not called: opening a mapped file reads every
    record batch's header, and the kernel maps a run of pages around each, tens of MB of resident memory for a
    large corpus. Splits that came out with 0 rows are left out (still named in ``builder.info.splits``).
    """
    from datasets.arrow_reader import ArrowReader

    cls = get_builder_class(benchmark)
    try:
        builder = cls(config_name=config_name, cache_dir=cache_dir, source_cache=sources, **options)
        builder.download_and_prepare()
    except datasets.exceptions.DatasetGenerationError as err:
        if isinstance(err.__cause__, ConvragError):
            raise err.__cause__ from None
        raise
    splits = builder.info.splits or {}
    reader = ArrowReader(builder._output_dir, builder.info)
    files = {}
    for split, info in splits.items():
        if info.num_examples:
            parts = reader.get_file_instructions(builder.dataset_name, split, splits.values())
            if any(part["skip"] for part in parts):  # whole files only; their row count is checked as they are read
                raise ConvragError(f"{config_name}: split {split!r} is not a plain sequence of Arrow files")
            files[split] = [part["filename"] for part in parts]
    return files, builder


def export_benchmark(
    benchmark: str,
    out_dir: str | os.PathLike,
    configs: list[str] | None = None,
    options: dict[str, Any] | None = None,
    overwrite: bool = False,
) -> ExportSummary:
    """Build ``configs`` (default: all the source can build) of ``benchmark`` with ``options`` (see
    ``check_options``) and write a Hub-layout folder at ``out_dir``.

    Nothing is touched before the arguments are checked: ``out_dir`` must not be a file, nor overlap a local
    ``source``; an existing non-empty ``out_dir`` is replaced only with ``overwrite`` and only if it is a
    previous ``convrag build`` (README with a ``convrag`` block). The build is written into a temporary
    folder ``.<name>.convrag-tmp-*`` beside ``out_dir`` and swapped in when complete; on any error or
    interrupt the temporary folder is removed and ``out_dir`` is left as it was. Leftovers of a killed build
    are cleaned (or, if it died mid-swap, the previous build restored) by the next build into ``out_dir``.

    A split that comes out with 0 rows is not written (``load_dataset`` cannot read an empty split): it is
    listed in the build report (``splits skipped: 0 rows``, ``config:split``), and a config with no rows in
    any split is left out of the folder and listed (``configs skipped: 0 rows in every split``). A build in
    which every config is empty is an error.
    """
    cls = get_builder_class(benchmark)
    options = check_options(cls, dict(options or {}))
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
    unknown = set(names) - set(all_names)
    if unknown:
        raise ConvragError(f"unknown configs for {benchmark}: {sorted(unknown)}")
    out = Path(out_dir).expanduser()
    target = check_out(out, options.get("source"))
    summary = ExportSummary(out_dir=out, benchmark=benchmark)
    with replacing(out, target, overwrite, _is_build) as work:
        _build_into(work, cls, names, options, summary, skipped)
    return summary


def _build_into(
    work: Path, cls: type, names: list[str], options: dict[str, Any], summary: ExportSummary, skipped: list[str]
) -> None:
    """Build every config of ``names`` into ``work`` (Parquet + README); fills ``summary`` (``skipped``: the
    configs the source lacks files for)."""
    infos: dict[str, datasets.DatasetInfo] = {}
    metadata: dict[str, dict[str, Any]] = {}
    empty_configs: list[str] = []
    empty_splits: list[str] = []
    with tempfile.TemporaryDirectory(prefix="convrag-build-") as cache_dir:
        sources = SourceCache(Path(cache_dir, "sources"))
        for name in names:
            files, builder = build_config(cls.BENCHMARK, name, cache_dir, options, sources)
            merge_report(summary.report, public_report(builder.report.to_dict(), options.get("source")))
            info = builder.info.copy()
            empty = [s for s in info.splits or {} if s not in files]
            if not files:
                empty_configs.append(name)
                continue
            empty_splits += [f"{name}:{s}" for s in empty]
            summary.rows[name] = {}
            data_files = []
            written: list[Path] = []
            schema = info.features.arrow_schema
            for split, arrow_files in files.items():
                n_rows = info.splits[split].num_examples
                written += write_arrow_shards(arrow_files, schema, n_rows, work / name, split)
                data_files.append({"split": split, "path": f"{name}/{split}-*"})
                summary.rows[name][split] = n_rows
            metadata[name] = {"data_files": data_files}
            if name == cls.DEFAULT_CONFIG_NAME:
                metadata[name]["default"] = True
            info.config_name = name
            kept = datasets.SplitDict(dataset_name=info.splits.dataset_name)
            for split in files:
                kept.add(info.splits[split])
            info.splits = kept
            info.download_size = sum(p.stat().st_size for p in written)  # the Parquet files a user downloads
            infos[name] = info
            del builder  # this config's parsed source stays in ``sources``; its builder goes before the next
    if not infos:
        source = options.get("source")
        raise DataError(f"every config built from this source has 0 rows ({', '.join(names)}); nothing to write",
                        source if isinstance(source, str) else None)  # fmt: skip
    aliases = _mteb_configs(work, cls, metadata, infos)
    events = {EMPTY_CONFIGS: empty_configs, EMPTY_SPLITS: empty_splits, MISSING_FILES: skipped}
    for event, items in events.items():
        if items:
            summary.report.setdefault("counts", {})[event] = len(items)
            summary.report.setdefault("examples", {})[event] = items
    write_readme(work, cls, infos, metadata, summary, options, aliases)


def _mteb_configs(
    work: Path, cls: type, metadata: dict[str, dict[str, Any]], infos: dict[str, datasets.DatasetInfo]
) -> dict[str, str]:
    """Add the configs mteb's retrieval loader asks for (see :mod:`convrag.hub.mteb_layout`): ``top_ranked`` tables
    are written into ``work``, aliases added to ``metadata`` / ``infos``; returns the aliases."""
    profile = getattr(cls, "EVALUATION", None)
    if profile is None:
        return {}
    aliases, tables = mteb_layout.plan(profile, list(metadata))
    for name, (turns, column) in tables.items():
        splits = [item["split"] for item in metadata[turns]["data_files"]]
        infos[name] = mteb_layout.write_top_ranked(work, name, turns, column, splits)
        metadata[name] = {"data_files": [{"split": s, "path": f"{name}/{s}-*"} for s in splits]}
    mteb_layout.add_aliases(aliases, metadata, infos)
    return aliases


def merge_report(into: dict[str, Any], report: dict[str, Any]) -> None:
    """Merge one config's build report into ``into``. Configs built from the same source report the same
    events (each re-reads it), so an event's count is its largest count over configs (with that config's
    examples), not their sum; events seen by one config only (its corpus, say) are kept as they are."""
    counts = into.setdefault("counts", {})
    examples = into.setdefault("examples", {})
    for event, count in report.get("counts", {}).items():
        if count > counts.get(event, 0):
            counts[event] = count
            if event in report.get("examples", {}):
                examples[event] = report["examples"][event]


def _is_build(folder: Path) -> bool:
    """Whether ``folder`` was written by ``convrag build`` (a README with a ``convrag`` block)."""
    try:
        read_manifest(folder)
    except (ConvragError, OSError):
        return False
    return True


def write_arrow_shards(files: list[str], schema: Any, n_rows: int, folder: Path, split: str) -> list[Path]:
    """Write the ``n_rows`` rows of the Arrow stream ``files`` (in order, cast to ``schema``) as
    ``<split>-XXXXX-of-YYYYY.parquet`` files of at most ``MAX_SHARD_ROWS`` rows (contiguous, sizes as
    ``Dataset.shard(contiguous=True)``). Record batches are read one at a time from the files (not memory-mapped),
    so memory stays flat in the split's size; a row count other than ``n_rows`` is an error."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    n_shards = max(1, -(-n_rows // MAX_SHARD_ROWS))
    sizes = [n_rows // n_shards + (1 if i < n_rows % n_shards else 0) for i in range(n_shards)]
    paths = [folder / f"{split}-{i:05d}-of-{n_shards:05d}.parquet" for i in range(n_shards)]
    index, written, writer = 0, 0, pq.ParquetWriter(str(paths[0]), schema)
    try:
        for filename in files:
            with pa.OSFile(filename) as source:
                for batch in pa.ipc.open_stream(source):
                    batch = batch.cast(schema) if batch.schema != schema else batch
                    while batch.num_rows:
                        if written == sizes[index]:
                            if index == n_shards - 1:
                                raise ConvragError(f"export of split {split!r}: its Arrow files hold more than "
                                                   f"{n_rows} rows")  # fmt: skip
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


#: the Hub's size_categories bins, by upper bound on the number of rows
SIZE_BINS = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
             (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B"))  # fmt: skip


def size_category(rows: int) -> str:
    """The Hub's ``size_categories`` value for a dataset whose largest config has ``rows`` rows."""
    return next((name for bound, name in SIZE_BINS if rows < bound), "n>1B")


def public_value(value: Any) -> Any:
    """An option value as a card may show it: a local path becomes ``local:<its name>`` (a card is published;
    the builder's machine layout is not), URLs and other values stay."""
    if isinstance(value, dict):
        return {k: public_value(v) for k, v in value.items()}
    if isinstance(value, (str, os.PathLike)) and not is_url(str(value)):
        path = Path(value)
        if path.is_absolute() or path.exists() or str(value).startswith(("..", "~")):
            return f"local:{path.expanduser().resolve().name}"
    return value


def synthesized_card(record: dict[str, Any]) -> dict[str, Any]:
    """The fields of the card of a benchmark synthesized by convrag (``synthesis.json``, see
    ``convrag.synthesis.engine.provenance``): its own name, the method, the corpus and the models that wrote it."""
    method, schema, reference = PIPELINES[record["pipeline"]]
    return {"pretty_name": pretty_name(record), "method": method, "method_ref": reference, "schema": schema,
            "corpus": record.get("corpus") or "(not recorded)", "pipeline": record["pipeline"],
            "benchmark": record.get("benchmark") or "",
            "seed": record.get("seed"), "models": model_lines(record) or ["(not recorded)"],
            "placeholder": bool(record.get("placeholder"))}


def _card_template(card_file: str) -> str:
    return importlib.resources.files("convrag.dataset_cards").joinpath(card_file).read_text(encoding="utf-8")


def write_readme(
    out: Path,
    cls: type,
    infos: dict[str, datasets.DatasetInfo],
    metadata: dict[str, dict[str, Any]],
    summary: ExportSummary,
    options: dict[str, Any],
    aliases: dict[str, str] | None = None,
) -> None:
    """Write README.md: YAML configs and dataset_info as ``push_to_hub`` writes them, our block, the card.
    ``aliases`` (mteb config name -> built config) go in ``convrag.aliases``."""
    card_data = DatasetCardData()
    MetadataConfigs(metadata).to_dataset_card_data(card_data)
    DatasetInfosDict(infos).to_dataset_card_data(card_data)
    first = next(iter(infos.values()))
    if first.license:
        card_data["license"] = first.license
    synthesis = read_record(options.get("source"))
    for key, value in getattr(cls, "HUB_METADATA", {}).items():
        card_data[key] = value
    if synthesis is not None:  # the published benchmark's name, licence page and sources are not this data's
        for key in ("license_name", "license_link"):
            card_data.pop(key, None)
        card_data["pretty_name"] = pretty_name(synthesis)
        card_data["source_datasets"] = source_datasets(synthesis)
        card_data["tags"] = sorted({*card_data.get("tags", []), "synthetic", "convrag-synthesized"})
    card_data["size_categories"] = [size_category(max(n for per in summary.rows.values() for n in per.values()))]
    card_data["convrag"] = {
        "benchmark": cls.BENCHMARK,
        "builder_version": str(cls.VERSION),
        "options": {k: public_value(v) for k, v in sorted(options.items()) if v is not None},
        "report": summary.report,
    }
    if aliases:
        card_data["convrag"]["aliases"] = dict(sorted(aliases.items()))
    if synthesis is not None:
        card_data["convrag"]["synthesis"] = synthesis
    profile = getattr(cls, "EVALUATION", None)
    if profile is not None:
        card_data["convrag"]["evaluation"] = profile.to_dict()
    fields = {} if synthesis is None else synthesized_card(synthesis)
    body = jinja2.Template(_card_template(SYNTHESIZED_CARD if fields else cls.CARD),
                           undefined=jinja2.StrictUndefined).render(
        rows_table=summary.table(),
        report_yaml=yaml.safe_dump(summary.report or {"counts": {}}, sort_keys=True).strip(),
        options=card_data["convrag"]["options"],
        loaders=mteb_layout.card_section(aliases or {}, [n for n in metadata if n.endswith("top_ranked")]),
        **fields,
    )
    card = DatasetCard(f"---\n{card_data.to_yaml()}\n---\n\n{body.strip()}\n")
    card.save(str(out / "README.md"))

