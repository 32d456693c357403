"""Read a built benchmark folder as its evaluation profile describes it: turns, corpora, qrels and pools.

Configs are read straight from the Parquet files that the README's ``configs`` block lists (no
``load_dataset`` cache: results always reflect the files on disk). Subsets (``{subset}`` in config names)
are searched separately: each turn carries its subset as ``Turn.domain``.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from huggingface_hub import DatasetCard

from convrag.errors import ConvragError, DataError
from convrag.evaluation.profile import EvaluationProfile
from convrag.strategies import Turn, mtrag_turns, recor_turns

SPLIT_PREFERENCE = ("test", "validation", "dev", "train")
ALL = "all"


class Folder:
    """A folder written by ``convrag build``: its configs and their Parquet files per split."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        readme = self.path / "README.md"
        if not readme.exists():
            raise ConvragError(f"{readme} not found: is {path} a folder written by `convrag build`?")
        data = DatasetCard.load(str(readme)).data.to_dict()
        self.files: dict[str, dict[str, list[str]]] = {}
        for entry in data.get("configs") or []:
            splits: dict[str, list[str]] = {}
            for item in entry.get("data_files") or []:
                patterns = item["path"] if isinstance(item["path"], list) else [item["path"]]
                found = sorted(f for p in patterns for f in glob.glob(str(self.path / p)))
                splits[item["split"]] = found
            self.files[entry["config_name"]] = splits

    def has(self, config: str) -> bool:
        return config in self.files

    def splits(self, config: str) -> list[str]:
        return list(self.files.get(config, {}))

    def rows(self, config: str, split: str) -> list[dict[str, Any]]:
        """Every row of ``config`` / ``split`` as dicts, in file order."""
        if config not in self.files:
            raise DataError(f"config {config!r} was not built (has {sorted(self.files)})", str(self.path))
        if split not in self.files[config]:
            raise DataError(f"config {config!r} has no split {split!r} (has {self.splits(config)})", str(self.path))
        paths = self.files[config][split]
        if not paths:
            raise DataError(f"config {config!r} split {split!r}: its data files are missing", str(self.path))
        out: list[dict[str, Any]] = []
        for path in paths:
            try:
                out += pq.read_table(path).to_pylist()
            except Exception as err:  # pyarrow raises several types for unreadable files
                raise DataError(f"cannot read Parquet file: {err}", path) from None
        return out


@dataclass
class BenchmarkData:
    """What one evaluation needs: turns (with subset in ``domain``), per-subset corpora and qrels, pools."""

    split: str
    subsets: list[str]
    turns: list[Turn]
    corpus: dict[str, list[dict[str, Any]]]
    corpus_kind: dict[str, str]
    qrels: dict[str, dict[str, dict[str, int]]]
    pools: dict[str, list[str]] | None = None
    missing_docs: dict[str, int] = field(default_factory=dict)

    def subset_turns(self, subset: str) -> list[Turn]:
        return [t for t in self.turns if t.domain == subset]

    @functools.cached_property
    def doc_keys(self) -> dict[tuple[str, str], str]:
        """(subset, doc id) -> id in written runs: ``<subset>:<id>`` where two subsets share an id with different
        texts (the ``all-corpus`` convention of the builders), else the id itself. Computed once."""
        seen: dict[str, set[str]] = {}
        for rows in self.corpus.values():
            for row in rows:
                seen.setdefault(row["_id"], set()).add(hashlib.sha1(str(row["text"]).encode()).hexdigest())
        return {(s, row["_id"]): (f"{s}:{row['_id']}" if s and len(seen[row["_id"]]) > 1 else row["_id"])
                for s, rows in self.corpus.items() for row in rows}  # fmt: skip


def _subsets(folder: Folder, profile: EvaluationProfile) -> list[str]:
    if not profile.has_subsets:
        return [""]
    prefix, suffix = profile.qrels.split("{subset}")
    found = [n[len(prefix): len(n) - len(suffix) if suffix else None] for n in folder.files
             if n.startswith(prefix) and n.endswith(suffix) and len(n) > len(prefix) + len(suffix)]  # fmt: skip
    return sorted(s for s in found if s != ALL)


def _name(pattern: str, subset: str) -> str:
    return pattern.replace("{subset}", subset)


def _choose_split(folder: Folder, profile: EvaluationProfile, subset: str, split: str | None) -> str:
    if profile.reader == "views":
        configs = [_name(c, subset) for c in profile.views.values() if folder.has(_name(c, subset))]
    else:
        configs = [c for c in [_name(profile.turns, subset)] if folder.has(c)]
    if not configs or not folder.splits(configs[0]):
        wanted = [_name(c, subset) for c in profile.views.values()] if profile.reader == "views" else [
            _name(profile.turns, subset)]
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
    where = str(folder.path)
    if profile.reader == "recor":
        from convrag.evaluation.recor import aspect_count

        conversations = folder.rows(_name(profile.conversations or "", subset), split)
        aspects = {str(c["conversation_id"]): aspect_count(c) for c in conversations}
        turns = [Turn(**{**t.__dict__, "fields": {"aspects": aspects.get(t.conversation_id)}})
                 for t in recor_turns(folder.rows(_name(profile.turns, subset), split), conversations)]  # fmt: skip
    elif profile.reader == "views":
        turns = _view_turns(folder, profile, subset, split)
    elif profile.reader == "queries":
        turns = [_query_turn(row, line, where) for line, row in enumerate(
            folder.rows(_name(profile.turns, subset), split), start=1)]  # fmt: skip
    else:
        raise ConvragError(f"unknown turn reader {profile.reader!r}")
    turns = [Turn(**{**t.__dict__, "domain": subset}) for t in turns]
    dupes = [q for q, n in Counter(t.qid for t in turns).items() if n > 1]
    if dupes:
        raise DataError(f"duplicate query ids {dupes[:5]}", f"{where}/{_name(profile.turns, subset)}")
    return turns


def _query_turn(row: Mapping[str, Any], line: int, where: str) -> Turn:
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
    views = {v: _name(c, subset) for v, c in profile.views.items() if folder.has(_name(c, subset))}
    if not views:
        raise DataError(f"no query view config of subset {subset!r} was built", str(folder.path))
    texts: dict[str, dict[str, str]] = {}
    labels: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    for view, config in views.items():
        rows = folder.rows(config, split)
        texts[view] = {r["_id"]: r["text"] for r in rows}
        for r in rows:
            labels.setdefault(r["_id"], {k: v for k, v in r.items() if k not in ("_id", "text")})
        order = order or [r["_id"] for r in rows]
    history: dict[str, Turn] = {}
    tasks = _name(profile.turns, subset)
    if folder.has(tasks):
        history = {t.qid: t for t in mtrag_turns(folder.rows(tasks, split))}
    turns = []
    for qid in order:
        fields = {**labels[qid], **{v: texts[v].get(qid) for v in views}}
        base = history.get(qid)
        first = texts[next(iter(views))][qid]
        turns.append(Turn(qid=qid, query=base.query if base else first, history=base.history if base else (),
                          position=base.position if base else int(labels[qid].get("turn") or 1),
                          conversation_id=base.conversation_id if base else "", fields=fields))  # fmt: skip
    return turns


def _qrels(rows: Sequence[Mapping[str, Any]], qids: set[str], doc_ids: set[str], where: str,
           unknown_docs: str) -> tuple[dict[str, dict[str, int]], int]:
    """{query: {doc: grade}}; unknown queries and duplicate pairs are errors; unknown documents are an error
    (``unknown_docs="error"``) or kept and counted (``"count"``: relevant but unretrievable)."""
    qrels: dict[str, dict[str, int]] = {}
    missing = 0
    for line, row in enumerate(rows, start=1):
        qid, did = str(row["query-id"]), str(row["corpus-id"])
        if qid not in qids:
            raise DataError(f"qrels row names unknown query {qid!r}", where, line)
        if did not in doc_ids:
            if unknown_docs == "error":
                raise DataError(f"qrels row names unknown document {did!r}", where, line)
            missing += 1
        if did in qrels.setdefault(qid, {}):
            raise DataError(f"duplicate qrels pair ({qid}, {did})", where, line)
        qrels[qid][did] = int(row["score"])
    return qrels, missing


def load_benchmark(folder_path: str | os.PathLike, profile: EvaluationProfile, split: str | None = None,
                   corpus: str = "auto", search: str | None = None) -> BenchmarkData:
    """Read every subset's turns, corpus (kind ``corpus``: a key of ``profile.corpus`` or ``auto`` = the first
    built) and qrels, and the pools when ``search`` (default ``profile.search``) is ``pool``."""
    folder = Folder(folder_path)
    subsets = _subsets(folder, profile)
    if not subsets:
        raise DataError(f"no config matches {profile.qrels!r}: not a folder of this benchmark", str(folder.path))
    if corpus != "auto" and corpus not in profile.corpus:
        raise ConvragError(f"unknown corpus kind {corpus!r}; this benchmark has {list(profile.corpus)}")
    search = search or profile.search
    if search == "pool" and not profile.pool:
        raise ConvragError("this benchmark has no per-turn pools; use --search corpus")
    chosen_split = _choose_split(folder, profile, subsets[0], split)
    data = BenchmarkData(chosen_split, subsets, [], {}, {}, {})
    for s in subsets:
        kinds = [corpus] if corpus != "auto" else [k for k, c in profile.corpus.items() if folder.has(_name(c, s))]
        if not kinds or not folder.has(_name(profile.corpus[kinds[0]], s)):
            wanted = [_name(profile.corpus[k], s) for k in ([corpus] if corpus != "auto" else profile.corpus)]
            raise DataError(f"{'subset ' + s if s else 'the benchmark'}: corpus config {' or '.join(wanted)} "
                            "was not built", str(folder.path))  # fmt: skip
        config = _name(profile.corpus[kinds[0]], s)
        corpus_split = chosen_split if chosen_split in folder.splits(config) else folder.splits(config)[0]
        rows = folder.rows(config, corpus_split)
        dupes = [k for k, n in Counter(r["_id"] for r in rows).items() if n > 1]
        if dupes:
            raise DataError(f"duplicate corpus ids {dupes[:5]}", f"{folder.path}/{config}")
        turns = read_turns(folder, profile, s, chosen_split)
        qrels_config = _name(profile.qrels, s)
        qrels, missing = _qrels(folder.rows(qrels_config, chosen_split), {t.qid for t in turns},
                                {r["_id"] for r in rows}, f"{folder.path}/{qrels_config}",
                                "count")  # fmt: skip
        data.turns += turns
        data.corpus[s], data.corpus_kind[s], data.qrels[s], data.missing_docs[s] = rows, kinds[0], qrels, missing
    dupes = [q for q, n in Counter(t.qid for t in data.turns).items() if n > 1]
    if dupes:
        raise DataError(f"query ids shared by several subsets: {dupes[:5]}", str(folder.path))
    if search == "pool":
        data.pools = _pools(folder, profile, data)
    return data


def _pools(folder: Folder, profile: EvaluationProfile, data: BenchmarkData) -> dict[str, list[str]]:
    kind, _, name = (profile.pool or "").partition(":")
    pools: dict[str, list[str]] = {}
    if kind == "field":
        for t in data.turns:
            if name not in t.fields:
                raise DataError(f"query {t.qid!r} has no pool field {name!r}", str(folder.path))
            pools[t.qid] = [str(d) for d in t.fields[name]]
    elif kind == "config":
        for s in data.subsets:
            config = _name(name, s)
            for line, row in enumerate(folder.rows(config, data.split), start=1):
                if row["query-id"] in pools:
                    raise DataError(f"duplicate pool for query {row['query-id']!r}", f"{folder.path}/{config}", line)
                pools[str(row["query-id"])] = [str(d) for d in row["corpus-ids"]]
    else:
        raise ConvragError(f"pool must be 'field:NAME' or 'config:NAME', got {profile.pool!r}")
    missing = [t.qid for t in data.turns if t.qid not in pools]
    if missing:
        raise DataError(f"{len(missing)} queries have no pool (first: {missing[0]!r})", str(folder.path))
    return pools
