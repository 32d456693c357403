"""Write a built folder as BEIR or TREC files, for tools that read those instead of Hub configs.

Every subset of the build (:func:`convrag.builders.profile.built_subsets`) is read from the configs mteb reads,
``[<subset>-]corpus``, ``[<subset>-]queries`` and ``[<subset>-]qrels`` (aliases included), and written into ``DIR``
(no subsets) or ``DIR/<subset>/``:

* ``beir``: ``corpus.jsonl`` (``_id``, ``title``, ``text``, other columns under ``metadata``), ``queries.jsonl``
  (``_id``, ``text``, ``metadata``) and ``qrels/<split>.tsv`` (header ``query-id corpus-id score``, tab separated)
  for every split of the qrels config: ``GenericDataLoader(DIR).load(split=<split>)`` reads them.
* ``trec``: ``topics.tsv`` (``qid<TAB>text``), ``topics.txt`` (classic ``<top>`` blocks with ``<num>`` and
  ``<title>``), ``qrels/<split>.txt`` (``qid 0 docid grade``) and, TREC having no corpus format, ``corpus.jsonl`` as
  Pyserini / Anserini ``JsonCollection`` lines ``{"id", "contents"}`` (contents = title, newline, text). Topic texts
  have every run of whitespace replaced by one space; ids with whitespace cannot be written in TREC files (an error).

Row checks, the all-or-nothing write and its marker file: :func:`export_folder`.
"""

from __future__ import annotations

import csv
import glob
import json
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from convrag.core.errors import ConvragError, DataError
from convrag.core.jsonl import json_safe

FORMATS = ("beir", "trec")
MARKER = "convrag-export.json"
BATCH_ROWS = 1024
HELP = (  # `convrag export --help`; this module imports pyarrow and datasets only when it exports
    "beir: corpus.jsonl, queries.jsonl and qrels/<split>.tsv per subset (DIR or DIR/<subset>/), read by BEIR's "
    "GenericDataLoader. trec: topics.tsv (qid<TAB>text, whitespace in texts flattened to one space), topics.txt "
    "(classic <top> blocks), qrels/<split>.txt (qid 0 docid grade) and corpus.jsonl; TREC has no corpus format, so "
    "the corpus is written as Pyserini/Anserini JsonCollection lines {\"id\", \"contents\"} (title, newline, text)."
)


@dataclass
class ExportSummary:
    """What an export wrote: rows per file (relative to ``out``) and, per qrels file, the rows naming documents
    missing from the corpus."""

    source: str
    folder: str
    benchmark: str
    format: str
    out: str
    files: dict[str, int] = field(default_factory=dict)
    missing_documents: dict[str, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """The summary printed by ``convrag export``: one line per file with its row count."""
        out = [f"Wrote {self.out} ({self.format} export of {self.benchmark} from {self.source})"]
        for name, rows in self.files.items():
            missing = self.missing_documents.get(name)
            note = f" ({missing} name documents missing from the corpus)" if missing else ""
            out.append(f"  {name}: {rows} rows{note}")
        return out


@dataclass(frozen=True)
class _Subset:
    name: str  # "": a benchmark without subsets
    corpus: str
    queries: str
    qrels: str


def _configs(path: Path, data: dict[str, Any], readme: Path) -> dict[str, dict[str, list[str]]]:
    """config -> split -> sorted Parquet files, for every entry of the README's ``configs`` (aliases included)."""
    out: dict[str, dict[str, list[str]]] = {}
    for entry in data.get("configs") or []:
        try:
            out[entry["config_name"]] = {
                item["split"]: sorted({f for p in ([item["path"]] if isinstance(item["path"], str) else item["path"])
                                       for f in glob.glob(str(path / p))})
                for item in entry.get("data_files") or []
            }  # fmt: skip
        except (AttributeError, KeyError, TypeError):
            raise DataError(f"malformed 'configs' entry {entry!r}", str(readme)) from None
    return out


def _subsets(data: dict[str, Any], configs: dict[str, dict[str, list[str]]], readme: Path) -> list[_Subset]:
    """Each subset's corpus, queries and qrels configs, by their mteb names (aliases planned for folders built
    before aliases existed)."""
    from convrag.builders.profile import built_subsets, profile_of
    from convrag.hub import mteb_layout

    profile = profile_of(data.get("convrag") or {}, str(readme))
    built = list(configs)
    aliases, _ = mteb_layout.plan(profile, built)
    found = []
    for subset in built_subsets(profile, built):
        names = {}
        for kind in ("corpus", "queries", "qrels"):
            name = f"{subset}-{kind}" if subset else kind
            names[kind] = name if name in configs else aliases.get(name)
            if names[kind] is None:
                where = f"subset {subset!r}" if subset else "the build"
                raise DataError(f"{where} has no {name!r} config (was it built?)", str(readme))
        found.append(_Subset(subset, **names))
    if not found:
        raise DataError(f"no config matches {profile.qrels!r}: nothing to export", str(readme))
    return found


def _rows(files: list[str]) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """(Parquet file, 1-based row in it, row) of every row, read in record batches."""
    import pyarrow.parquet as pq

    for path in files:
        try:
            batches = pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS)
            row = 0
            for batch in batches:
                for record in batch.to_pylist():
                    row += 1
                    yield path, row, record
        except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
            raise DataError(f"cannot read Parquet file: {err}", path) from None


def _id(record: dict[str, Any], column: str, path: str, row: int, tokens: bool) -> str:
    """The non-empty string id in ``column``; ``tokens``: it must also have no whitespace (TREC files)."""
    value = record.get(column)
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{column!r} must be a non-empty string, got {value!r}", path, row)
    if tokens and any(c.isspace() for c in value):
        raise DataError(f"{column!r} {value!r} has whitespace, which TREC files cannot hold", path, row)
    return value


def _text(record: dict[str, Any], column: str, path: str, row: int) -> str:
    value = record.get(column)
    if value is None and column == "title":
        return ""
    if not isinstance(value, str):
        raise DataError(f"{column!r} must be a string, got {value!r}", path, row)
    return value


def _json_line(handle: IO[str], value: dict[str, Any]) -> None:
    handle.write(json.dumps(json_safe(value), ensure_ascii=False, default=str) + "\n")


def _flat(text: str) -> str:
    return " ".join(text.split())


def _all_files(splits: dict[str, list[str]]) -> list[str]:
    return list(dict.fromkeys(f for files in splits.values() for f in files))


class _Writer:
    """Writes one subset's files into ``folder`` (``prefix``: its path relative to the export, for the summary)."""

    def __init__(self, fmt: str, folder: Path, prefix: str, summary: ExportSummary) -> None:
        self.fmt, self.folder, self.prefix, self.summary = fmt, folder, prefix, summary
        self.tokens = fmt == "trec"

    def _count(self, name: str, rows: int) -> None:
        self.summary.files[self.prefix + name] = rows

    def _unique(self, files: list[str], what: str, line: Callable[[str, dict[str, Any], str, int], None]) -> set[str]:
        """Call ``line(id, row, file, row number)`` for every row; returns the ids (a repeated one is an error)."""
        seen: set[str] = set()
        for path, row, record in _rows(files):
            key = _id(record, "_id", path, row, self.tokens)
            if key in seen:
                raise DataError(f"duplicate {what} id {key!r}", path, row)
            seen.add(key)
            line(key, record, path, row)
        return seen

    def corpus(self, files: list[str]) -> set[str]:
        with open(self.folder / "corpus.jsonl", "w", encoding="utf-8", newline="\n") as out:
            def line(key: str, record: dict[str, Any], path: str, row: int) -> None:
                title, text = _text(record, "title", path, row), _text(record, "text", path, row)
                if self.fmt == "beir":
                    extra = {k: v for k, v in record.items() if k not in ("_id", "title", "text")}
                    _json_line(out, {"_id": key, "title": title, "text": text, "metadata": extra})
                else:
                    _json_line(out, {"id": key, "contents": f"{title}\n{text}" if title else text})

            ids = self._unique(files, "corpus", line)
        self._count("corpus.jsonl", len(ids))
        return ids

    def queries(self, files: list[str]) -> set[str]:
        names = ["queries.jsonl"] if self.fmt == "beir" else ["topics.tsv", "topics.txt"]
        with ExitStack() as stack:
            handles = [stack.enter_context(open(self.folder / n, "w", encoding="utf-8", newline="\n")) for n in names]

            def line(key: str, record: dict[str, Any], path: str, row: int) -> None:
                text = _text(record, "text", path, row)
                if self.fmt == "beir":
                    extra = {k: v for k, v in record.items() if k not in ("_id", "text")}
                    _json_line(handles[0], {"_id": key, "text": text, "metadata": extra})
                else:
                    handles[0].write(f"{key}\t{_flat(text)}\n")
                    handles[1].write(f"<top>\n<num> Number: {key}\n<title> {_flat(text)}\n</top>\n\n")

            ids = self._unique(files, "query", line)
        for name in names:
            self._count(name, len(ids))
        return ids

    def qrels(self, split: str, files: list[str], queries: set[str], docs: set[str]) -> None:
        name = f"qrels/{split}.{'tsv' if self.fmt == 'beir' else 'txt'}"
        (self.folder / "qrels").mkdir(exist_ok=True)
        pairs: set[tuple[str, str]] = set()
        missing = 0
        with open(self.folder / name, "w", encoding="utf-8", newline="") as out:
            tsv = csv.writer(out, delimiter="\t", lineterminator="\n")
            if self.fmt == "beir":
                tsv.writerow(["query-id", "corpus-id", "score"])
            for path, row, record in _rows(files):
                qid = _id(record, "query-id", path, row, self.tokens)
                doc = _id(record, "corpus-id", path, row, self.tokens)
                score = record.get("score")
                if not isinstance(score, int) or isinstance(score, bool):
                    raise DataError(f"'score' must be an integer, got {score!r}", path, row)
                if qid not in queries:
                    raise DataError(f"qrels row names query {qid!r}, which is not in the queries", path, row)
                if (qid, doc) in pairs:
                    raise DataError(f"duplicate qrels pair ({qid}, {doc})", path, row)
                pairs.add((qid, doc))
                missing += doc not in docs
                if self.fmt == "beir":
                    tsv.writerow([qid, doc, score])
                else:
                    out.write(f"{qid} 0 {doc} {score}\n")
        self._count(name, len(pairs))
        if missing:
            self.summary.missing_documents[self.prefix + name] = missing


def _check_target(out: Path, overwrite: bool) -> None:
    """Refuse a non-empty ``out`` unless ``overwrite`` and it holds an earlier export (its marker file)."""
    if not (out.is_dir() and any(out.iterdir())):
        return
    if not overwrite:
        raise ConvragError(f"{out} exists and is not empty (give --overwrite to replace an earlier export)")
    if not (out / MARKER).is_file():
        raise ConvragError(f"{out} is not empty and has no {MARKER}, so it is not a `convrag export` folder: not "
                           "replacing it; remove it yourself or choose another --out")  # fmt: skip


def export_folder(ref: str, fmt: str, out: str | os.PathLike, overwrite: bool = False) -> ExportSummary:
    """Write the built folder (or Hub dataset repo id) ``ref`` as ``fmt`` files into ``out`` (module docstring).

    Parquet files are read in record batches and written line by line (memory holds the ids, not the texts). Empty
    or non-string ids, duplicate corpus or query ids, duplicate qrels pairs and qrels naming an unknown query are a
    ``DataError`` naming the Parquet file and row; qrels naming a document missing from the corpus are written and
    counted. The export is written into a temporary folder beside ``out`` and renamed into place when complete;
    ``convrag-export.json`` in it records the source (the Hub repo id, revision sha and endpoint, or the folder's path
    relative to the working directory: :func:`convrag.hub.repo.resolve_source`), format and row counts, and only a
    folder holding that file is replaced (with ``overwrite``)."""
    from convrag.core.manifest import read_card, read_manifest
    from convrag.core.out_folder import check_out, replacing
    from convrag.hub.repo import resolve_source

    if fmt not in FORMATS:
        raise ConvragError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    out_path = Path(out)
    folder, source = resolve_source(ref)
    manifest = read_manifest(folder)
    readme, data = read_card(folder)
    configs = _configs(folder, data, readme)
    subsets = _subsets(data, configs, readme)
    target = check_out(out_path, str(folder))
    _check_target(target, overwrite)
    summary = ExportSummary(ref, str(folder.resolve()), manifest["benchmark"], fmt, str(out_path))
    with replacing(out_path, target, overwrite, lambda p: (p / MARKER).is_file()) as work:
        for subset in subsets:
            where = work / subset.name if subset.name else work
            where.mkdir(exist_ok=True)
            writer = _Writer(fmt, where, f"{subset.name}/" if subset.name else "", summary)
            docs = writer.corpus(_all_files(configs[subset.corpus]))
            queries = writer.queries(_all_files(configs[subset.queries]))
            for split, files in configs[subset.qrels].items():
                writer.qrels(split, files, queries, docs)
        marker = {"source": source, "benchmark": summary.benchmark, "format": fmt,
                  "files": summary.files, "qrels_missing_documents": summary.missing_documents}  # fmt: skip
        (work / MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
    return summary
