"""Input fingerprints of synthesis stages: what a stage's output was computed from, so that a rerun after an
input changed redoes that stage and every stage after it.

A stage's fingerprint is the SHA-256 of its parameters (stage name, seed and options, as in params.json), of every
file it reads itself (``Stage.input_files``: the corpus, the items file, option files; the set counts too, so a file
added to or removed from a corpus folder is a change) and of the output of the stage it builds on: the nearest
earlier stage of the pipeline finished under OUT, named with its output digest (:func:`output_digest`, kept in its
``report.json``). A redone stage whose output differs thus makes every later stage redo; one whose output came out
the same leaves them. ``OUT/inputs.json`` holds every stage's record (its fingerprint, each file's hash, size and
modification time, how the files were listed, the stage it builds on and that stage's output digest), written when
the stage starts; a record counts only while the stage's folder exists. Files are read by streaming, in 1 MiB
blocks, at most once per run; one whose size and modification time equal the recorded ones keeps its recorded hash
unread, unless modified within 2 seconds before that hash was taken (an edit in the same clock tick would go unseen).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from convrag.core.errors import ConvragError

INPUTS_FILE = "inputs.json"
#: written last into a stage's folder: the stage has finished (its figures and its output digest)
REPORT_FILE = "report.json"
#: the key of the output digest in report.json
OUTPUT_KEY = "output_sha256"
#: files of a stage folder that are not its output: its parameters and its end markers
NOT_OUTPUT = frozenset({"params.json", REPORT_FILE, "incomplete.json"})
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


def output_digest(folder: Path) -> str:
    """A stage's output digest: SHA-256 over the relative path and content hash of every file under ``folder``
    except params.json, report.json, incomplete.json, ``*.tmp`` and whatever lies under a name starting with
    ``_`` or ``.`` (an executor's logs and completion markers)."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*"), key=lambda p: p.relative_to(folder).as_posix()):
        rel = path.relative_to(folder)
        if (not path.is_file() or rel.as_posix() in NOT_OUTPUT or path.name.endswith(".tmp")
                or any(part[0] in "_." for part in rel.parts)):
            continue
        digest.update(f"{rel.as_posix()}\0{sha256_file(path)}\n".encode())
    return digest.hexdigest()


def finished_output(folder: Path, computed: dict[Path, str] | None = None) -> str | None:
    """The output digest of a finished stage (the one in its report.json, else computed now and kept in
    ``computed`` for the next call); None when it has not finished."""
    report = folder / REPORT_FILE
    if not report.is_file():
        return None
    try:
        data = json.loads(report.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        data = None
    recorded = data.get(OUTPUT_KEY) if isinstance(data, dict) else None
    if isinstance(recorded, str):
        return recorded
    computed = {} if computed is None else computed
    if folder not in computed:
        computed[folder] = output_digest(folder)
    return computed[folder]


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


def listed_files(listing: dict[str, Any]) -> list[str]:
    """The files a recorded listing names now (absolute): its corpus source's files, as the corpus reader lists
    them."""
    from convrag.core.corpus import corpus_files

    return [str(Path(f).resolve()) for f in corpus_files(listing["corpus"], listing.get("corpus_config")).files]


class ReadsCorpus:
    """Mixin of a stage that reads the corpus source ``source`` (None: none) with ``corpus_config``: its files
    are the stage's input files, and the source is recorded so that a later run lists it again."""

    source: str | None
    corpus_config: str | None

    def input_files(self) -> list[str]:
        """The corpus source's files, as the corpus reader lists them."""
        from convrag.core.corpus import corpus_files

        return list(corpus_files(self.source, self.corpus_config).files) if self.source is not None else []

    def input_listing(self) -> dict[str, Any] | None:
        """The corpus source (absolute) and config the input files come from; None without a source."""
        if self.source is None:
            return None
        return {"corpus": str(Path(self.source).resolve()), "corpus_config": self.corpus_config}


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


def file_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The files whose hash differs between two ``{path: sha256}`` maps, by name; ``NAME (added)`` for one only
    in ``new``, ``NAME (removed)`` for one only in ``old``."""
    return [os.path.basename(p) + (" (added)" if p not in old else " (removed)" if p not in new else "")
            for p in sorted(set(old) | set(new)) if old.get(p) != new.get(p)]


def _shown(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more files" if len(names) > 3 else "")


def what_changed(old: dict[str, Any], new: dict[str, Any]) -> str:
    """What differs between two records, in words: the changed files, else the output of the stage built on,
    else the parameters."""
    names = file_changes({p: (e or {}).get("sha256") for p, e in (old.get("files") or {}).items()},
                         {p: e["sha256"] for p, e in new["files"].items()})
    if names:
        return _shown(names)
    upstream = new.get("upstream") or old.get("upstream")
    if old.get("upstream") != new.get("upstream") and isinstance(upstream, dict):
        return f"the output of stage {upstream.get('stage')}"
    return "its parameters"


class RunInputs:
    """The inputs of one run of a pipeline under ``out``: ``order`` is every stage of the pipeline, ``names``
    the stages run now; every other stage with a folder under ``out`` is kept as it is."""

    def __init__(self, out: Path, order: Sequence[str], names: Sequence[str]) -> None:
        self.out, self.order, self.names = out, list(order), list(names)
        self.hashes = FileHashes.recorded_under(out)
        #: output digests computed for finished stages whose report.json has none (written by older versions)
        self.computed: dict[Path, str] = {}

    def _earlier(self, name: str) -> list[str]:
        return self.order[:self.order.index(name)] if name in self.order else []

    def upstream(self, name: str) -> dict[str, str] | None:
        """What ``name`` builds on: the nearest earlier stage of the pipeline finished under OUT and its output
        digest; None when there is none."""
        for before in reversed(self._earlier(name)):
            digest = finished_output(self.out / before, self.computed)
            if digest is not None:
                return {"stage": before, "output": digest}
        return None

    def record(self, name: str, params: dict[str, Any], files: list[str],
               listing: dict[str, Any] | None) -> dict[str, Any]:
        """The ``inputs.json`` record of stage ``name`` now: its fingerprint, its files' entries, how they were
        listed, what it builds on."""
        entries = {str(Path(f).resolve()): self.hashes.entry(f) for f in dict.fromkeys(files)}
        upstream = self.upstream(name)
        basis = {"params": params, "files": {p: e["sha256"] for p, e in sorted(entries.items())},
                 "upstream": upstream}
        fingerprint = hashlib.sha256(json.dumps(basis, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
        return {"fingerprint": fingerprint, "files": entries, "listing": listing, "upstream": upstream}

    def changed(self, name: str, record: dict[str, Any]) -> str | None:
        """What changed since stage ``name`` last started under OUT (see :func:`what_changed`); None when its
        fingerprint is the recorded one or nothing is recorded (older runs)."""
        old = read_inputs(self.out, name)
        if old is None or old["fingerprint"] == record["fingerprint"]:
            return None
        return what_changed(old, record)

    def refuse_stale(self, name: str) -> None:
        """An error naming the first kept stage before ``name`` whose inputs changed since it ran: its output no
        longer follows them, and ``name`` would build on it."""
        for before in self._earlier(name):
            old = read_inputs(self.out, before) if before not in self.names else None
            why = self._stale(before, old) if old is not None else ""
            if why:
                raise ConvragError(f"{self.out / before}: input changed since stage {before} ran ({why}) and it "
                                   f"is not among the stages run; add {before} and the stages after it to --stages")

    def _stale(self, name: str, old: dict[str, Any]) -> str:
        """What changed in a kept stage's inputs: a recorded file edited or missing, a file its corpus source
        lists now and did not then, the output it builds on; empty when nothing did."""
        recorded = {p: (e or {}).get("sha256") for p, e in (old.get("files") or {}).items()}
        now = {p: self.hashes.entry(p)["sha256"] for p in recorded if os.path.isfile(p)}
        listing = old.get("listing")
        if isinstance(listing, dict) and isinstance(listing.get("corpus"), str):
            try:
                listed = listed_files(listing)
            except ConvragError:
                return f"its corpus {listing.get('corpus')} can no longer be read"
            now = {p: now[p] if p in now else self.hashes.entry(p)["sha256"] for p in listed}
        names = file_changes(recorded, now)
        if names:
            return _shown(names)
        upstream = self.upstream(name)
        if old.get("upstream") != upstream:
            return f"the output of stage {(old.get('upstream') or upstream or {}).get('stage')}"
        return ""
