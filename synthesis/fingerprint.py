"""Input fingerprints of synthesis stages: what a stage's output was computed from, so that a rerun after an
input changed redoes that stage and every stage after it.

A stage's fingerprint is the SHA-256 of its parameters (stage name, seed and options, as in params.json), the
SHA-256 of every file it reads itself (``Stage.input_files``: the corpus, the items file, option files) and the
fingerprint of the stage before it (the nearest earlier stage of the pipeline that runs now or has a folder
under OUT), so a change reaches every later stage. ``OUT/inputs.json`` holds every stage's record (its fingerprint, each
file's hash, size and modification time, its upstream stage), written when the stage starts; a record counts
only while the stage's folder exists.

Files are read by streaming, in blocks of 1 MiB, at most once per run. A file whose size and modification time
equal the recorded ones keeps its recorded hash without being read, unless it was modified within 2 seconds
before that hash was taken (an edit in the same clock tick would go unseen: such a file is read again).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from convrag.errors import ConvragError

INPUTS_FILE = "inputs.json"
BLOCK = 1 << 20
#: a recorded hash is trusted only for a file last modified at least this many seconds before it was taken
RACY_SECONDS = 2.0


def sha256_file(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _records(out: Path) -> dict[str, Any]:
    try:
        data = json.loads((out / INPUTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    stages = data.get("stages") if isinstance(data, dict) else None
    return stages if isinstance(stages, dict) else {}


def read_inputs(out: Path, stage: str) -> dict[str, Any] | None:
    """The recorded inputs of ``stage`` in the run folder ``out``; None when absent, unreadable, or its folder
    is gone."""
    record = _records(out).get(stage)
    if not (out / stage).is_dir() or not isinstance(record, dict) or not isinstance(record.get("fingerprint"), str):
        return None
    return record


def write_inputs(out: Path, stage: str, record: dict[str, Any]) -> None:
    """Record the inputs of ``stage`` in ``OUT/inputs.json`` (through a temporary file and a rename)."""
    stages = {**_records(out), stage: record}
    tmp = out / (INPUTS_FILE + ".tmp")
    tmp.write_text(json.dumps({"stages": stages}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, out / INPUTS_FILE)


class FileHashes:
    """Content hashes of input files: each file read at most once, recorded hashes of unchanged files reused.

    ``known`` maps an absolute path to a recorded entry ``{sha256, size, mtime_ns, hashed_at}``."""

    def __init__(self, known: dict[str, dict[str, Any]] | None = None) -> None:
        self.known = dict(known or {})
        self.done: dict[str, dict[str, Any]] = {}

    @classmethod
    def recorded_under(cls, out: Path) -> FileHashes:
        """Hashes recorded by the stages of the run folder ``out``."""
        known: dict[str, dict[str, Any]] = {}
        for record in _records(out).values():
            for path, entry in ((record or {}).get("files") or {}).items() if isinstance(record, dict) else ():
                if isinstance(entry, dict):
                    known.setdefault(path, entry)
        return cls(known)

    def entry(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """``{sha256, size, mtime_ns, hashed_at}`` of one file (see the module docstring)."""
        key = str(Path(path).resolve())
        if key in self.done:
            return self.done[key]
        stat = os.stat(key)
        old = self.known.get(key) or {}
        trusted = (old.get("size") == stat.st_size and old.get("mtime_ns") == stat.st_mtime_ns
                   and float(old.get("hashed_at") or 0) - stat.st_mtime_ns / 1e9 >= RACY_SECONDS)
        if trusted and isinstance(old.get("sha256"), str):
            entry = dict(old)
        else:
            entry = {"sha256": sha256_file(key), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                     "hashed_at": round(time.time(), 3)}
        self.done[key] = entry
        return entry


def stage_record(params: dict[str, Any], files: list[str], upstream: tuple[str, str] | None,
                 hashes: FileHashes) -> dict[str, Any]:
    """The ``inputs.json`` record of a stage: its fingerprint, the entries of its files, its upstream stage."""
    entries = {str(Path(f).resolve()): hashes.entry(f) for f in dict.fromkeys(files)}
    basis = {"params": params, "files": {p: e["sha256"] for p, e in sorted(entries.items())},
             "upstream": upstream[1] if upstream else None}
    fingerprint = hashlib.sha256(json.dumps(basis, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    return {"fingerprint": fingerprint, "files": entries,
            "upstream": {"stage": upstream[0], "fingerprint": upstream[1]} if upstream else None}


def what_changed(old: dict[str, Any], new: dict[str, Any]) -> str:
    """What differs between two records, in words: the changed files' names, else the upstream stage's output."""
    old_files = {p: (e or {}).get("sha256") for p, e in (old.get("files") or {}).items()}
    new_files = {p: e["sha256"] for p, e in new["files"].items()}
    names = [os.path.basename(p) for p in sorted(set(old_files) | set(new_files))
             if old_files.get(p) != new_files.get(p)]
    if names:
        return ", ".join(names[:3]) + (f" and {len(names) - 3} more files" if len(names) > 3 else "")
    upstream = new.get("upstream") or old.get("upstream") or {}
    if upstream:
        return f"the output of stage {upstream['stage']}"
    return "its parameters"


def plan_records(out: Path, stages: Sequence[tuple[str, dict[str, Any], list[str]]],
                 order: Sequence[str]) -> list[dict[str, Any]]:
    """The record of each stage run now, from its (name, params, input files), in run order. ``order`` is every
    stage of the pipeline: a stage's upstream is the nearest earlier one run now or with a folder under ``out``.

    An earlier stage not run now whose recorded input files changed since it ran is an error naming it (its
    output no longer follows its inputs, and this run would build on it)."""
    hashes = FileHashes.recorded_under(out)
    planned: dict[str, str] = {}
    records = []
    for name, params, files in stages:
        earlier = list(order[:order.index(name)]) if name in order else []
        kept = [before for before in earlier if before not in planned and (out / before).is_dir()]
        for before in kept:
            _refuse_stale(out, before, read_inputs(out, before), hashes)
        upstream = None
        for before in reversed(earlier):
            if before in planned:
                upstream = (before, planned[before])
            elif before in kept:
                old = read_inputs(out, before)
                upstream = (before, old["fingerprint"] if old else "not recorded")
            if upstream:
                break
        record = stage_record(params, files, upstream, hashes)
        planned[name] = record["fingerprint"]
        records.append(record)
    return records


def _refuse_stale(out: Path, name: str, old: dict[str, Any] | None, hashes: FileHashes) -> None:
    changed = [os.path.basename(p) for p, e in ((old or {}).get("files") or {}).items()
               if os.path.isfile(p) and hashes.entry(p)["sha256"] != (e or {}).get("sha256")]
    if changed:
        raise ConvragError(f"{out / name}: input changed since stage {name} ran ({', '.join(changed)}) and it is "
                           f"not among the stages run; add {name} and the stages after it to --stages")


def first_changed(out: Path, names: Sequence[str], plan: list[dict[str, Any]], first_redo: int,
                  on_note: Callable[[str], None] | None) -> int:
    """Index of the first stage run now whose recorded fingerprint differs from its planned one (said in one line
    through ``on_note``), or ``first_redo`` when none comes before it. No record (older runs) counts as unchanged."""
    for i, (name, record) in enumerate(zip(names[:first_redo], plan, strict=False)):
        old = read_inputs(out, name)
        if old is None or old["fingerprint"] == record["fingerprint"]:
            continue
        after = len(names) - i - 1
        rest = "" if not after else f" and the {after} stages after it" if after > 1 else " and the stage after it"
        if on_note is not None:
            on_note(f"{name}: input changed ({what_changed(old, record)}), redoing {name}{rest}")
        return i
    return first_redo
