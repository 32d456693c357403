"""mteb-conformant config names for a built folder, declared from its evaluation profile.

mteb's retrieval loader reads a Hub dataset by config name: ``corpus``, ``queries``, ``qrels`` (and ``top_ranked``
for reranking tasks), each prefixed ``<subset>-`` when the task has subsets. Our builders name configs after the
benchmark's own views (MTRAG: ``clapnq-lastturn``, ``clapnq-cited-corpus``), so for every name mteb asks for that the
build lacks the export adds (:func:`plan`) an **alias**, a second ``configs`` entry in the README whose
``data_files`` are the built config's (no copy of the data), or a small table: ``<subset>-top_ranked`` for
benchmarks searched within a per-query pool, so that mteb reranks each query's pool as ``convrag evaluate`` does
instead of searching the whole corpus, and a flat ``query`` config where mteb cannot batch the turns' nested history.

Aliases are listed in the README's ``convrag.aliases`` block (alias -> config); convrag's own readers skip them, so
``convrag evaluate --corpus auto`` still tells a cited corpus from a full one.

The conversational mteb tasks (``convrag.mteb_tasks``, ``view="conversation"``) read no config of their own: their
queries are each turn's whole conversation, read from the turns config ``convrag evaluate`` reads
(:func:`conversation_config`, :func:`conversations`). :func:`content_revision` is the revision mteb records for a
built folder: a digest of its data files.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets
import pyarrow.parquet as pq

from convrag.builders.profile import EvaluationProfile, built_subsets, config_name
from convrag.core.errors import ConvragError
from convrag.core.manifest import read_card

TOP_RANKED_FEATURES = datasets.Features(
    {"query-id": datasets.Value("string"), "corpus-ids": datasets.List(datasets.Value("string"))}
)
FLAT_QUERY_FEATURES = datasets.Features(
    {"_id": datasets.Value("string"), "text": datasets.Value("string"), "history": datasets.Value("string")}
)
#: the config mteb's loader reads in place of ``queries`` when a folder has it
FLAT_QUERY = "query"
#: the turns column holding the earlier messages (``role``, ``content``)
HISTORY = "history"


def _mteb(kind: str, subset: str) -> str:
    return f"{subset}-{kind}" if subset else kind


def plan(profile: EvaluationProfile, built: list[str]) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    """(aliases: mteb name -> built config, tables: table name -> (turns config, column)).

    * aliases: ``<subset>-queries`` -> the view of the profile's first query strategy when the turns are read from
      views (MTRAG: ``lastturn``), else the turns config; ``<subset>-corpus`` -> the first built corpus of the
      profile (MTRAG without its full corpus: the cited corpus); ``<subset>-qrels`` -> the qrels.
    * ``[<subset>-]top_ranked`` (``query-id``, ``corpus-ids``; column: the pool) for benchmarks searched within a
      per-query pool (``search: pool``): an alias of a pool config, or a table written from the turns' pool column.
    * the flat ``query`` table (``_id``, ``text``, ``history`` as text; column: the history) for benchmarks without
      subsets whose turns config carries the conversation as a list of messages that a strategy reads (MTR-Bench):
      mteb's collate cannot batch that nested column, and mteb reads a config named ``query`` instead of
      ``queries`` when there is one (``convrag evaluate`` still reads ``queries``). mteb reads ``query`` for every
      subset, so a benchmark with subsets cannot get one.

    Only names the build lacks are planned; nothing is planned for a subset whose qrels, corpus or queries
    cannot be found (mteb could not read it anyway)."""
    aliases: dict[str, str] = {}
    tables: dict[str, tuple[str, str]] = {}
    first_strategy = next(iter(profile.strategies.values()), "")
    for subset in built_subsets(profile, built):
        qrels = config_name(profile.qrels, subset)
        corpus = next((c for c in (config_name(p, subset) for p in profile.corpus.values()) if c in built), None)
        if profile.reader == "views" and first_strategy.startswith("field:"):
            queries = config_name(profile.views.get(first_strategy.removeprefix("field:"), ""), subset)
        else:
            queries = config_name(profile.turns, subset)
        wanted = {"qrels": qrels, "corpus": corpus, "queries": queries}
        if any(c is None or c not in built for c in wanted.values()):
            continue
        for kind, config in wanted.items():
            name = _mteb(kind, subset)
            if name != config and name not in built:
                aliases[name] = config
        if profile.search != "pool" or not profile.pool:
            continue
        name = _mteb("top_ranked", subset)
        where, _, what = profile.pool.partition(":")
        if where == "config" and config_name(what, subset) in built and name != config_name(what, subset):
            aliases[name] = config_name(what, subset)
        elif where == "field" and name not in built:
            tables[name] = (config_name(profile.turns, subset), what)
    flat = "{subset}" not in profile.turns and {profile.turns, profile.qrels} <= set(built)
    if flat and FLAT_QUERY not in built and _reads_history(profile):
        tables[FLAT_QUERY] = (profile.turns, HISTORY)
    return aliases, tables


def _reads_history(profile: EvaluationProfile) -> bool:
    """Whether mteb's queries are the turns config and one of the profile's strategies reads its history."""
    strategies = {*profile.strategies.values(), *profile.extra_strategies.values()}
    reads = any(part in ("history", "dialogue") for s in strategies for part in s.split("+"))
    return profile.reader == "queries" and reads


def history_text(messages: list[dict[str, Any]] | None) -> str:
    """A conversation history as text: one ``role: content`` line per message, oldest first."""
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages or [])


def write_top_ranked(work: Path, name: str, turns: str, column: str, splits: list[str]) -> datasets.DatasetInfo:
    """Write a table planned by :func:`plan` as ``<work>/<name>/<split>-00000-of-00001.parquet``; returns its
    ``DatasetInfo`` (features and split sizes). ``[<subset>-]top_ranked``: ``query-id`` and ``corpus-ids`` from the
    turns' ``_id`` and pool ``column``; ``query``: the turns' ``_id`` and ``text`` with ``column`` (the history)
    written by :func:`history_text`. Every turn of the split is written."""
    features = FLAT_QUERY_FEATURES if name == FLAT_QUERY else TOP_RANKED_FEATURES
    info = datasets.DatasetInfo(features=features, config_name=name)
    info.splits = datasets.SplitDict()
    for split in splits:
        files = sorted(glob.glob(str(work / turns / f"{split}-*.parquet")))
        parts = [pq.read_table(f, columns=["_id", "text", column] if name == FLAT_QUERY else ["_id", column])
                 for f in files]  # fmt: skip
        ids = [i for t in parts for i in t.column("_id").to_pylist()]
        values = [v for t in parts for v in t.column(column).to_pylist()]
        if name == FLAT_QUERY:
            data = {"_id": ids, "text": [x for t in parts for x in t.column("text").to_pylist()],
                    "history": [history_text(v) for v in values]}  # fmt: skip
        else:
            data = {"query-id": ids, "corpus-ids": values}
        table = datasets.Dataset.from_dict(data, features=features)
        (work / name).mkdir(parents=True, exist_ok=True)
        table.to_parquet(str(work / name / f"{split}-00000-of-00001.parquet"))
        info.splits.add(datasets.SplitInfo(name=split, num_examples=len(table), num_bytes=table.data.nbytes))
    info.dataset_size = sum(s.num_bytes for s in info.splits.values())
    info.download_size = sum(p.stat().st_size for p in (work / name).glob("*.parquet"))
    return info


def add_aliases(
    aliases: Mapping[str, str], metadata: dict[str, dict[str, Any]], infos: dict[str, datasets.DatasetInfo]
) -> None:
    """Give every alias the ``data_files`` and ``dataset_info`` of its config (in place)."""
    for alias, config in aliases.items():
        metadata[alias] = {"data_files": [dict(item) for item in metadata[config]["data_files"]]}
        info = infos[config].copy()
        info.config_name = alias
        infos[alias] = info


def card_section(aliases: Mapping[str, str], top_ranked: list[str]) -> str:
    """The card's "mteb, BEIR and TREC" section: which configs mteb reads and how to get BEIR / TREC files."""
    lines = [
        "## mteb, BEIR and TREC",
        "mteb's retrieval loader reads this folder as it is: every subset has `[<subset>-]corpus`, "
        "`[<subset>-]queries` and `[<subset>-]qrels` configs.",
    ]
    if aliases:
        lines += ["", "Some of them are aliases: README entries that point at another config's files (no copies).", "",
                  "| mteb config | reads the files of |", "|---|---|"]
        lines += [f"| `{alias}` | `{config}` |" for alias, config in sorted(aliases.items())]
    if top_ranked:
        names = ", ".join(f"`{n}`" for n in sorted(top_ranked))
        lines += ["", f"{names} (`query-id`, `corpus-ids`) lists each query's candidate pool, so mteb reranks "
                  "that pool, as `convrag evaluate` does, instead of searching the whole corpus."]
    lines += ["", "`convrag export PATH_OR_REPO --format beir --out DIR` writes `corpus.jsonl`, `queries.jsonl` and "
              "`qrels/<split>.tsv` for BEIR's `GenericDataLoader`; `--format trec` writes TREC topics and qrels."]
    return "\n".join(lines)


def conversation_config(profile: EvaluationProfile, subset: str) -> str:
    """The config holding each turn's conversation: the profile's turns config (MTRAG's ``<domain>-tasks``, whose
    ``input`` is the conversation; RECOR's ``<domain>-queries`` and MTR-Bench's ``queries``, with ``history``)."""
    return config_name(profile.turns, subset)


def conversations(
    profile: EvaluationProfile, rows: Sequence[Mapping[str, Any]], where: Callable[[int], tuple[str, int | None]]
) -> dict[str, list[dict[str, str]]]:
    """query id -> the turn's conversation as ``{role, content}`` messages
    (:func:`convrag.retrievers.conversation.conversation_messages`), from ``rows`` of :func:`conversation_config`
    read by the profile's turn reader, as ``convrag evaluate`` reads them; ``where(n)`` names the n-th row in
    errors."""
    from convrag.evaluation.data import query_turn
    from convrag.retrievers.conversation import conversation_messages
    from convrag.retrievers.strategies import mtrag_turns, recor_turns

    if profile.reader == "views":
        turns = mtrag_turns(rows, where)
    elif profile.reader == "recor":
        turns = recor_turns(rows, where=where)
    elif profile.reader == "queries":
        turns = [query_turn(row, *where(line)) for line, row in enumerate(rows, start=1)]
    else:
        raise ConvragError(f"unknown turn reader {profile.reader!r}")
    return {t.qid: conversation_messages(t) for t in turns}


def _data_files(folder: Path) -> list[Path]:
    """Every file of ``folder`` but its README and hidden paths, sorted by path."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found += [Path(root, f) for f in files if not f.startswith(".")]
    return sorted((p for p in found if p != folder / "README.md"), key=lambda p: p.relative_to(folder).as_posix())


def content_revision(folder: str | os.PathLike[str]) -> str:
    """A built folder's revision for mteb: the sha256 (hex) of its README's ``configs`` entries (which files each
    config name reads, aliases included) and of every data file's path, size and bytes, in path order. Two builds
    with other data get other revisions; the same data, wherever and whenever built, the same one. It reads every
    data file once (about a second per GB)."""
    path = Path(folder)
    _, header = read_card(path)
    digest = hashlib.sha256(json.dumps(header.get("configs") or [], sort_keys=True).encode())
    for file in _data_files(path):
        digest.update(f"\0{file.relative_to(path).as_posix()}\0{file.stat().st_size}\0".encode())
        with file.open("rb") as handle:
            digest.update(hashlib.file_digest(handle, "sha256").digest())
    return digest.hexdigest()
