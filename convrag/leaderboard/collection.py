"""A leaderboard collection: results of many systems on one benchmark, in a local folder or a Hub dataset repo.

Layout (the same in a folder and in a repo; every path relative to the collection's root):

```
collection.json                 format, the benchmark identity (convrag.leaderboard.entry), aggregation, measures,
                                primary measure
entries/<name>/entry.json       name, when it was added, identity, systems (retriever, strategy, run file, model
                                record), caveats, LLM and synthesis notes, turn info (domain, turn position)
entries/<name>/per_query.jsonl  one line per system and scored query: system, query_id, one value per measure
entries/<name>/results.json     the results folder's files as submitted (results.md too)
entries/<name>/runs/*.trec      its run files and the qrels they were scored against (MTRAG: and its submission
                                files, runs/*.jsonl)
```

The first entry fixes the collection's identity; a later one of another identity is refused, as is one whose
numbers do not re-score from its runs (:func:`convrag.leaderboard.entry.check_rescores`) or whose name is taken.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from convrag.core.errors import ConvragError
from convrag.leaderboard.entry import Entry, check_identity, check_rescores, read_entry
from convrag.metrics.retrieval.trec import safe_token

FORMAT = "convrag-leaderboard/1"
HEADER = "collection.json"
ENTRIES = "entries"


def read_header(root: Path) -> dict[str, Any] | None:
    """The collection's ``collection.json``; None for an empty collection (no such file)."""
    try:
        header = json.loads((root / HEADER).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ConvragError(f"{root / HEADER}: not a convrag leaderboard collection ({FORMAT})")
    return header


def entry_names(root: Path) -> list[str]:
    """Names of the collection's entries, sorted."""
    folder = root / ENTRIES
    return sorted(p.name for p in folder.iterdir() if (p / "entry.json").is_file()) if folder.is_dir() else []


def add_entry(root: Path, results: str | Path, name: str | None = None) -> str:
    """Check the results folder ``results`` and add it to the collection in ``root`` as entry ``name`` (default:
    the folder's name); returns the name. Nothing is written when a check fails."""
    entry = read_entry(results)
    name = safe_token(name or Path(results).resolve().name)
    header = read_header(root)
    if header is None and root.is_dir() and any(root.iterdir()):
        raise ConvragError(
            f"{root}: a folder that is not a leaderboard collection (no {HEADER}); give an empty or new folder"
        )
    if header is not None:
        check_identity(entry, header["identity"])
        missing = [m for m in header["measures"] if m not in entry.measures]
        if missing:
            raise ConvragError(f"{results}: lacks the collection's measures {', '.join(missing)}")
    if name in entry_names(root):
        raise ConvragError(f"{root}: an entry named {name!r} exists; give another with --name")
    check_rescores(entry)
    staged = Path(tempfile.mkdtemp(prefix=".convrag-entry-", dir=_made(root)))
    try:
        _write_entry(staged, entry, name)
        if header is None:
            header = {"format": FORMAT, "identity": entry.identity, "aggregation": entry.aggregation,
                      "measures": entry.measures, "primary": entry.primary}  # fmt: skip
            (root / HEADER).write_text(json.dumps(header, indent=1) + "\n", encoding="utf-8")
        (root / ENTRIES).mkdir(exist_ok=True)
        os.replace(staged, root / ENTRIES / name)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return name


def _made(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    return root


def _write_entry(out: Path, entry: Entry, name: str) -> None:
    """Write the files of entry ``name`` (see the module docstring) into the folder ``out``."""
    results = entry.results
    record = {"name": name, "added": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "identity": entry.identity, "aggregation": entry.aggregation, "measures": entry.measures,
              "systems": entry.systems, "caveats": results.get("caveats") or [], "llm": results.get("llm"),
              "synthesis": results.get("synthesis"), "strategy_specs": results.get("strategy_specs"),
              "top_k": results.get("top_k"), "turns": entry.turns}  # fmt: skip
    (out / "entry.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    with (out / "per_query.jsonl").open("w", encoding="utf-8") as handle:
        for system, per_query in entry.scores.items():
            for qid in sorted(per_query):
                row = {"system": system, "query_id": qid, **{m: per_query[qid][m] for m in entry.measures}}
                handle.write(json.dumps(row) + "\n")
    (out / "runs").mkdir()
    runs = [s[key] for s in entry.systems.values() for key in ("run", "submission") if key in s]
    for file in ["results.json", "results.md", "runs/qrels.trec", *runs]:
        if (entry.folder / file).is_file():
            shutil.copyfile(entry.folder / file, out / file)


def read_entries(root: Path) -> list[dict[str, Any]]:
    """Every entry of the collection: its ``entry.json`` record with ``scores`` (system -> query id -> measure ->
    value) read from its ``per_query.jsonl``."""
    out = []
    for name in entry_names(root):
        folder = root / ENTRIES / name
        record = json.loads((folder / "entry.json").read_text(encoding="utf-8"))
        scores: dict[str, dict[str, dict[str, float]]] = {}
        with (folder / "per_query.jsonl").open(encoding="utf-8") as handle:
            for line in handle:
                row = json.loads(line)
                scores.setdefault(row.pop("system"), {})[row.pop("query_id")] = row
        out.append({**record, "scores": scores})
    return out


@contextmanager
def opened(ref: str, write: bool) -> Iterator[tuple[Path, dict[str, str] | None]]:
    """The collection ``ref`` as a local folder, and its Hub source (repo id, revision) or None for a local one.

    A local folder is used in place. A Hub dataset repo id (``org/name[@revision]``) is read from the Hub (or,
    offline, the Hugging Face cache); with ``write`` it is copied into a temporary folder, a repo that does not exist
    yet is an empty collection, and :func:`publish` uploads the folder after the change."""
    from convrag.hub.repo import names_hub_repo, repo_snapshot, resolve_source

    if not names_hub_repo(ref):
        yield Path(ref), None
        return
    if not write:
        folder, source = resolve_source(ref)
        yield folder, source
        return
    if "@" in ref:
        raise ConvragError(f"{ref}: an entry is added to the repo's main branch; give the repo id without @revision")
    with tempfile.TemporaryDirectory(prefix="convrag-collection-") as tmp:
        snapshot = repo_snapshot(ref)
        work = Path(tmp) / "collection"
        if snapshot is None:
            work.mkdir()
        else:
            shutil.copytree(snapshot, work, ignore=shutil.ignore_patterns(".cache", ".git*"))
        yield work, {"repo_id": ref}


def publish(folder: Path, repo_id: str, message: str) -> str:
    """Upload the collection ``folder`` to Hub dataset repo ``repo_id`` as one commit; the commit URL."""
    from convrag.hub.repo import upload_folder

    return upload_folder(folder, repo_id, "dataset", message, ignore=[".convrag-*"])
