"""Read a built benchmark folder as its evaluation profile describes it: turns, corpora, qrels and pools.

Configs are read straight from the Parquet files that the README's ``configs`` block lists (no
``load_dataset`` cache: results always reflect the files on disk). Subsets (``{subset}`` in config names)
are searched separately: each turn carries its subset as ``Turn.domain``. Corpora are checked column-wise when
the folder is loaded (string ids and texts, no duplicate id) and read again, one subset at a time, when a
retriever indexes them (:class:`Corpora`), so memory holds one subset's documents, not the collection's.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from convrag.builders.profile import EvaluationProfile, built_subsets, config_name
from convrag.core.errors import ConvragError, DataError, parquet_reason
from convrag.core.manifest import read_card
from convrag.retrievers.strategies import Turn, mtrag_turns, recor_turns

SPLIT_PREFERENCE = ("test", "validation", "dev", "train")
ALL = "all"
T = TypeVar("T")


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _clean_text(path: str, column: str) -> bool:
    """Whether the Parquet metadata of ``path`` alone shows ``column`` as text without nulls (every row group's
    statistics count its nulls); False when it does not say, and the column is then read."""
    try:
        meta = pq.ParquetFile(path)
        if column not in meta.schema_arrow.names or not _is_text(meta.schema_arrow.field(column).type):
            return False
        for g in range(meta.metadata.num_row_groups):
            group = meta.metadata.row_group(g)
            stats = next((group.column(i).statistics for i in range(group.num_columns)
                          if group.column(i).path_in_schema == column), None)  # fmt: skip
            if stats is None or not stats.has_null_count or stats.null_count:
                return False
    except Exception:  # an unreadable file: the read that follows names it
        return False
    return True


class Folder:
    """A folder written by ``convrag build``: its configs and their Parquet files per split."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.readme, data = read_card(self.path)
        self.files: dict[str, dict[str, list[str]]] = {}
        self.patterns: dict[tuple[str, str], list[str]] = {}
        self._sizes: dict[tuple[str, str], list[tuple[str, int]]] = {}
        block = data.get("convrag")
        aliases = block.get("aliases") if isinstance(block, dict) else None
        #: mteb config names that repeat another config's files (see :mod:`convrag.hub.mteb_layout`); skipped
        self.aliases: dict[str, str] = dict(aliases) if isinstance(aliases, dict) else {}
        for entry in data.get("configs") or []:
            if isinstance(entry, dict) and entry.get("config_name") in self.aliases:
                continue
            try:
                splits: dict[str, list[str]] = {}
                for item in entry.get("data_files") or []:
                    patterns = item["path"] if isinstance(item["path"], list) else [item["path"]]
                    splits[item["split"]] = sorted(f for p in patterns for f in glob.glob(str(self.path / p)))
                    self.patterns[(entry["config_name"], item["split"])] = patterns
                self.files[entry["config_name"]] = splits
            except (AttributeError, KeyError, TypeError):
                raise DataError(f"malformed 'configs' entry {entry!r}", str(self.readme)) from None

    def has(self, config: str) -> bool:
        return config in self.files

    def splits(self, config: str) -> list[str]:
        return list(self.files.get(config, {}))

    def _paths(self, config: str, split: str) -> list[str]:
        """The Parquet files of ``config`` / ``split``, in order; an unbuilt config or split, or no file, is an
        error."""
        if config not in self.files:
            raise DataError(f"config {config!r} was not built (has {sorted(self.files)})", str(self.path))
        if split not in self.files[config]:
            raise DataError(f"config {config!r} has no split {split!r} (has {self.splits(config)})", str(self.path))
        paths = self.files[config][split]
        if not paths:
            wanted = ", ".join(self.patterns.get((config, split), []))
            raise DataError(f"config {config!r} split {split!r}: no data file matches {wanted} (deleted?)",
                            str(self.path))  # fmt: skip
        return paths

    def _tables(self, config: str, split: str, columns: list[str] | None = None) -> list[tuple[str, pa.Table]]:
        """(file, table) of every Parquet file of ``config`` / ``split`` (``columns``: only those), in order."""
        paths = self._paths(config, split)
        out = []
        for path in paths:
            try:
                names = None if columns is None else [c for c in columns if c in pq.read_schema(path).names]
                out.append((path, pq.read_table(path, columns=names)))
            except Exception as err:  # pyarrow raises several types for unreadable files
                raise DataError(f"cannot read Parquet file: {parquet_reason(err)}", path) from None
        self._sizes[(config, split)] = [(path, len(table)) for path, table in out]
        return out

    def rows(self, config: str, split: str) -> list[dict[str, Any]]:
        """Every row of ``config`` / ``split`` as dicts, in file order (re-read from disk on every call)."""
        return [row for _, table in self._tables(config, split) for row in table.to_pylist()]

    def string_columns(self, config: str, split: str, columns: list[str], keep: int | None = None) -> list[list[str]]:
        """The first ``keep`` (default all) of ``columns`` of every row of ``config`` / ``split`` as lists of
        strings, read column-wise (no row dicts); every one of ``columns`` is checked: a missing column, a null or
        a non-string value is the ``DataError`` of :meth:`checked_rows`."""
        kept = columns[:keep]
        unread = [c for c in columns[len(kept):] if c not in kept]
        paths = self._paths(config, split)
        unread = [c for c in unread if not all(_clean_text(path, c) for path in paths)]
        tables = self._tables(config, split, kept + unread)
        if not all(c in t.column_names and _is_text(t.schema.field(c).type) and not t.column(c).null_count
                   for _, t in tables for c in kept + unread):  # fmt: skip
            rows = self.checked_rows(config, split, dict.fromkeys(columns, str))
            return [[r[c] for r in rows] for c in kept]
        return [[v for _, t in tables for v in t.column(c).to_pylist()] for c in kept]

    def locate(self, config: str, split: str, index: int) -> tuple[str, int | None]:
        """(Parquet file, 1-based row in it) of the ``index``-th row (1-based) of the last :meth:`rows` read."""
        for path, n in self._sizes.get((config, split), []):
            if index <= n:
                return path, index
            index -= n
        return f"{self.path}/{config}", None

    def checked_rows(self, config: str, split: str, columns: Mapping[str, type | tuple[type, ...]]) -> list[dict]:
        """:meth:`rows`, with every value of ``columns`` checked against its type (``DataError`` at file:row)."""
        rows = self.rows(config, split)
        for index, row in enumerate(rows, start=1):
            for column, kind in columns.items():
                value = row.get(column)
                if not isinstance(value, kind) or isinstance(value, bool):
                    what = "has no column" if column not in row else "has a wrong value in column"
                    names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
                    raise DataError(f"row {what} {column!r} (needs {names}, got {value!r})",
                                    *self.locate(config, split, index))  # fmt: skip
        return rows


class Corpora(Mapping[str, list[dict[str, Any]]]):
    """Subset -> its corpus rows, read from the Parquet files when asked for. Only the subset read last is
    held (asking for subsets one after the other keeps one corpus in memory); :meth:`read` holds nothing."""

    def __init__(self, folder: Folder, configs: Mapping[str, tuple[str, str]]) -> None:
        self.folder, self.configs = folder, dict(configs)  # subset -> (config, split)
        self._held: tuple[str | None, list[dict[str, Any]]] = (None, [])

    def __getitem__(self, subset: str) -> list[dict[str, Any]]:
        if self._held[0] != subset:
            self._held = (None, [])  # the previous subset's rows go before the next are read
            self._held = (subset, self.read(subset))
        return self._held[1]

    def __iter__(self) -> Iterator[str]:
        return iter(self.configs)

    def __len__(self) -> int:
        return len(self.configs)

    def read(self, subset: str) -> list[dict[str, Any]]:
        """The rows of ``subset``'s corpus, read now and not held."""
        return self.folder.rows(*self.configs[subset])

    def ids(self, subset: str) -> list[str]:
        """Document ids of ``subset``'s corpus in file order (the ``_id`` column alone is read)."""
        return self.folder.string_columns(*self.configs[subset], ["_id"])[0]


@dataclass
class BenchmarkData:
    """What one evaluation needs: turns (with subset in ``domain``), per-subset corpora (a :class:`Corpora` when
    read from a folder) and qrels, pools."""

    split: str
    subsets: list[str]
    turns: list[Turn]
    corpus: Mapping[str, list[dict[str, Any]]]
    corpus_kind: dict[str, str]
    qrels: dict[str, dict[str, dict[str, int]]]
    pools: dict[str, list[str]] | None = None
    missing_docs: dict[str, int] = field(default_factory=dict)

    def subset_turns(self, subset: str) -> list[Turn]:
        return [t for t in self.turns if t.domain == subset]

    def doc_ids(self, subset: str) -> set[str]:
        """Ids of ``subset``'s corpus documents."""
        if isinstance(self.corpus, Corpora):
            return set(self.corpus.ids(subset))
        return {row["_id"] for row in self.corpus[subset]}

    @functools.cached_property
    def doc_keys(self) -> dict[tuple[str, str], str]:
        """(subset, doc id) -> id in written runs, for ids that need one: ``<subset>:<id>`` where two subsets share
        an id with different texts (the ``all-corpus`` convention of the builders); an id absent here is written
        as it is. Computed once; only the subsets holding shared ids have their texts read."""
        ids = {s: self.doc_ids(s) for s in self.subsets}
        shared = {d for d, n in Counter(d for s in self.subsets for d in ids[s]).items() if n > 1}
        texts: dict[str, set[str]] = {}
        for s in self.subsets:
            if shared & ids[s]:
                for row in self.corpus[s]:
                    if row["_id"] in shared:
                        texts.setdefault(row["_id"], set()).add(hashlib.sha1(str(row["text"]).encode()).hexdigest())
        return {(s, d): f"{s}:{d}" if s else d for s in self.subsets for d in shared & ids[s] if len(texts[d]) > 1}


def subsets(folder: Folder, profile: EvaluationProfile) -> list[str]:
    """The subsets an evaluation of ``folder`` scores: every built one but the ``all`` aggregate, sorted
    (``[""]`` for a benchmark without subsets)."""
    return sorted(s for s in built_subsets(profile, folder.files) if s != ALL)


def _choose_split(folder: Folder, profile: EvaluationProfile, subset: str, split: str | None) -> str:
    if profile.reader == "views":
        configs = [config_name(c, subset) for c in profile.views.values() if folder.has(config_name(c, subset))]
    else:
        configs = [c for c in [config_name(profile.turns, subset)] if folder.has(c)]
    if not configs or not folder.splits(configs[0]):
        wanted = [config_name(c, subset) for c in profile.views.values()] if profile.reader == "views" else [
            config_name(profile.turns, subset)]
        raise DataError(f"no query config was built (needs {' or '.join(wanted)})", str(folder.path))
    config = configs[0]
    available = folder.splits(config)
    wanted = split or profile.split
    if wanted:
        if wanted not in available:
            raise DataError(f"config {config!r} has no split {wanted!r} (has {available})", str(folder.path))
        return wanted
    return next((s for s in SPLIT_PREFERENCE if s in available), None) or available[0]


def read_turns(folder: Folder, profile: EvaluationProfile, subset: str, split: str) -> list[Turn]:
    """Turns of one subset, by the profile's reader (see :class:`EvaluationProfile`)."""
    config = config_name(profile.turns, subset)
    if profile.reader == "recor":
        conv_config = config_name(profile.conversations or "", subset)
        conversations = folder.checked_rows(conv_config, split, {"conversation_id": (str, int), "turns": list})
        aspects = {str(c["conversation_id"]): aspect_count(c) for c in conversations}
        queries = folder.checked_rows(config, split, {"_id": str, "text": str, "turn": int})
        located = _guarded(folder, conv_config, split, lambda: recor_turns(
            queries, conversations, where=lambda line: folder.locate(config, split, line)))  # fmt: skip
        turns = [Turn(**{**t.__dict__, "fields": {"aspects": aspects.get(t.conversation_id)}}) for t in located]
    elif profile.reader == "views":
        turns = _view_turns(folder, profile, subset, split)
    elif profile.reader == "queries":
        rows = folder.rows(config, split)
        turns = [_guarded(folder, config, split, lambda r=row, i=line: query_turn(r, *folder.locate(config, split, i)))
                 for line, row in enumerate(rows, start=1)]  # fmt: skip
    else:
        raise ConvragError(f"unknown turn reader {profile.reader!r}")
    turns = [Turn(**{**t.__dict__, "domain": subset}) for t in turns]
    dupes = [q for q, n in Counter(t.qid for t in turns).items() if n > 1]
    if dupes:
        raise DataError(f"duplicate query ids {dupes[:5]}", f"{folder.path}/{config}")
    return turns


def _guarded(folder: Folder, config: str, split: str, read: Callable[[], T]) -> T:
    """``read()``, with a value of an unexpected type or shape reported as one ``DataError`` naming the config's
    files instead of a traceback (``DataError`` itself passes through)."""
    try:
        return read()
    except DataError:
        raise
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        files = ", ".join(folder.files.get(config, {}).get(split, [])) or f"{folder.path}/{config}"
        raise DataError(f"unexpected content ({type(err).__name__}: {err})", files) from None


def query_turn(row: Mapping[str, Any], where: str, line: int | None) -> Turn:
    """Generic reader: ``_id``, ``text``; ``history`` as a string or a list of ``{role, content}``."""
    if not isinstance(row.get("_id"), str) or not isinstance(row.get("text"), str) or not row["text"].strip():
        raise DataError("query row needs a string '_id' and a non-empty 'text'", where, line)
    history = row.get("history")
    messages: tuple[tuple[str, str], ...] = ()
    history_text = None
    if isinstance(history, str):
        history_text = history
    elif history:
        messages = tuple((str(m.get("role") or m.get("speaker")), str(m.get("content") or m.get("text") or ""))
                         for m in history)  # fmt: skip
    return Turn(qid=row["_id"], query=row["text"], history=messages, history_text=history_text,
                reasoning=str(row.get("reasoning") or ""), position=int(row.get("turn") or 1),
                conversation_id=str(row.get("conversation_id") or ""), fields=dict(row))  # fmt: skip


def _view_turns(folder: Folder, profile: EvaluationProfile, subset: str, split: str) -> list[Turn]:
    """MTRAG-style: one query config per view; the turn's fields hold every view's text by query id.
    Histories come from the ``turns`` config (tasks) when it was built."""
    views = {v: config_name(c, subset) for v, c in profile.views.items() if folder.has(config_name(c, subset))}
    if not views:
        raise DataError(f"no query view config of subset {subset!r} was built", str(folder.path))
    texts: dict[str, dict[str, str]] = {}
    labels: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    for view, config in views.items():
        rows = folder.checked_rows(config, split, {"_id": str, "text": str})
        texts[view] = {r["_id"]: r["text"] for r in rows}
        for r in rows:
            labels.setdefault(r["_id"], {k: v for k, v in r.items() if k not in ("_id", "text")})
        order = order or [r["_id"] for r in rows]
    history: dict[str, Turn] = {}
    tasks = config_name(profile.turns, subset)
    if folder.has(tasks):
        rows = folder.checked_rows(tasks, split, {"task_id": str, "input": list})
        history = {t.qid: t for t in _guarded(folder, tasks, split, lambda: mtrag_turns(
            rows, where=lambda line: folder.locate(tasks, split, line)))}  # fmt: skip
    turns = []
    for qid in order:
        fields = {**labels[qid], **{v: texts[v].get(qid) for v in views}}
        base = history.get(qid)
        first = texts[next(iter(views))][qid]
        turns.append(Turn(qid=qid, query=base.query if base else first, history=base.history if base else (),
                          position=base.position if base else int(labels[qid].get("turn") or 1),
                          conversation_id=base.conversation_id if base else "", fields=fields))  # fmt: skip
    return turns


def _qrels(folder: Folder, config: str, split: str, qids: set[str],
           doc_ids: set[str]) -> tuple[dict[str, dict[str, int]], int]:
    """{query: {doc: grade}}; unknown queries, duplicate pairs and wrong types are errors naming the Parquet file
    and row; unknown documents are kept and counted (relevant but unretrievable)."""
    qrels: dict[str, dict[str, int]] = {}
    missing = 0
    rows = folder.checked_rows(config, split, {"query-id": str, "corpus-id": str, "score": int})
    for line, row in enumerate(rows, start=1):
        qid, did = row["query-id"], row["corpus-id"]
        if qid not in qids:
            raise DataError(f"qrels row names unknown query {qid!r}", *folder.locate(config, split, line))
        if did not in doc_ids:
            missing += 1
        if did in qrels.setdefault(qid, {}):
            raise DataError(f"duplicate qrels pair ({qid}, {did})", *folder.locate(config, split, line))
        qrels[qid][did] = row["score"]
    return qrels, missing


def load_benchmark(folder_path: str | os.PathLike, profile: EvaluationProfile, split: str | None = None,
                   corpus: str = "auto", search: str | None = None) -> BenchmarkData:
    """Read every subset's turns, corpus (kind ``corpus``: a key of ``profile.corpus`` or ``auto`` = the first
    built) and qrels, and the pools when ``search`` (default ``profile.search``) is ``pool``."""
    folder = Folder(folder_path)
    names = subsets(folder, profile)
    if not names:
        raise DataError(f"no config matches {profile.qrels!r}: not a folder of this benchmark", str(folder.path))
    if corpus != "auto" and corpus not in profile.corpus:
        raise ConvragError(f"unknown corpus kind {corpus!r}; this benchmark has {list(profile.corpus)}")
    search = search or profile.search
    if search == "pool" and not profile.pool:
        raise ConvragError("this benchmark has no per-turn pools; use --search corpus")
    chosen_split = _choose_split(folder, profile, names[0], split)
    corpora = Corpora(folder, {})
    data = BenchmarkData(chosen_split, names, [], corpora, {}, {})
    for s in names:
        kinds = [corpus] if corpus != "auto" else [k for k, c in profile.corpus.items()
                                                   if folder.has(config_name(c, s))]  # fmt: skip
        if not kinds or not folder.has(config_name(profile.corpus[kinds[0]], s)):
            wanted = [config_name(profile.corpus[k], s) for k in ([corpus] if corpus != "auto" else profile.corpus)]
            raise DataError(f"{'subset ' + s if s else 'the benchmark'}: corpus config {' or '.join(wanted)} "
                            "was not built", str(folder.path))  # fmt: skip
        config = config_name(profile.corpus[kinds[0]], s)
        corpus_split = chosen_split if chosen_split in folder.splits(config) else folder.splits(config)[0]
        ids = folder.string_columns(config, corpus_split, ["_id", "text"], keep=1)[0]
        doc_ids = set(ids)
        if len(doc_ids) < len(ids):
            dupes = [k for k, n in Counter(ids).items() if n > 1]
            raise DataError(f"duplicate corpus ids {dupes[:5]}", f"{folder.path}/{config}")
        del ids
        turns = read_turns(folder, profile, s, chosen_split)
        qrels_config = config_name(profile.qrels, s)
        qrels, missing = _qrels(folder, qrels_config, chosen_split, {t.qid for t in turns}, doc_ids)
        data.turns += turns
        corpora.configs[s] = (config, corpus_split)
        data.corpus_kind[s], data.qrels[s], data.missing_docs[s] = kinds[0], qrels, missing
    dupes = [q for q, n in Counter(t.qid for t in data.turns).items() if n > 1]
    if dupes:
        raise DataError(f"query ids shared by several subsets: {dupes[:5]}", str(folder.path))
    if not any(v > 0 for qrels in data.qrels.values() for rels in qrels.values() for v in rels.values()):
        configs = ", ".join(config_name(profile.qrels, s) for s in names)
        raise DataError(f"no qrels row of split {chosen_split!r} marks a relevant document (configs {configs}): "
                        "nothing to score", str(folder.path))  # fmt: skip
    if search == "pool":
        data.pools = _pools(folder, profile, data)
    return data


def _pools(folder: Folder, profile: EvaluationProfile, data: BenchmarkData) -> dict[str, list[str]]:
    kind, _, name = (profile.pool or "").partition(":")
    pools: dict[str, list[str]] = {}
    if kind == "field":
        for t in data.turns:
            value = t.fields.get(name)
            if not isinstance(value, list) or not all(isinstance(d, str) for d in value):
                raise DataError(f"query {t.qid!r}: pool field {name!r} must be a list of document ids, got {value!r}",
                                f"{folder.path}/{config_name(profile.turns, t.domain)}")  # fmt: skip
            pools[t.qid] = value
    elif kind == "config":
        for s in data.subsets:
            config = config_name(name, s)
            for line, row in enumerate(folder.checked_rows(config, data.split, {"query-id": str, "corpus-ids": list}),
                                       start=1):  # fmt: skip
                if row["query-id"] in pools:
                    raise DataError(f"duplicate pool for query {row['query-id']!r}", *folder.locate(config, data.split,
                                                                                                   line))  # fmt: skip
                pools[row["query-id"]] = [str(d) for d in row["corpus-ids"]]
    else:
        raise ConvragError(f"pool must be 'field:NAME' or 'config:NAME', got {profile.pool!r}")
    missing = [t.qid for t in data.turns if t.qid not in pools]
    if missing:
        raise DataError(f"{len(missing)} queries have no pool (first: {missing[0]!r})", str(folder.path))
    return pools


ASPECT_KEYS = ("num_aspects", "aspect_count", "aspects")


def aspect_count(conversation: Mapping[str, Any]) -> int | None:
    """Number of semantic aspects of a conversation, if its row (or its metadata) carries one."""
    for where in (conversation, conversation.get("metadata") or {}):
        for key in ASPECT_KEYS:
            value = where.get(key) if isinstance(where, Mapping) else None
            if isinstance(value, (list, tuple)):
                return len(value)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None
