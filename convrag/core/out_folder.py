"""Replace an output folder without ever destroying data.

A build is written into a temporary folder ``.<name>.convrag-tmp-*`` beside ``<out>`` (same filesystem, so
the final rename is atomic) and swapped in only once complete; on any error or interrupt the temporary
folder is removed and ``<out>`` is left as it was. One build at a time writes a given ``<out>`` (a lock file
beside it); leftovers of a killed build are cleaned, or the previous ``<out>`` put back, by the next build.
"""

from __future__ import annotations

import glob
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from convrag.core.errors import ConvragError
from convrag.core.provenance import is_url

WORK_TAGS = ("convrag-tmp", "convrag-old")  # names of our own folders beside <out>: .<name>.<tag>-<random>


def _local_sources(source: Any) -> list[Path]:
    """The local paths in a ``source`` option (a path, or a mapping name -> path; URLs left out)."""
    values = source.values() if isinstance(source, dict) else [source] if source is not None else []
    return [Path(str(v)).expanduser().resolve() for v in values if not is_url(str(v))]


def check_out(out: Path, source: Any) -> Path:
    """Refuse an ``out`` that is a file, is a local source or contains one (replacing it would delete the
    source); returns the real folder to write (symbolic links followed). A folder inside a source folder is
    allowed: only that folder is ever replaced."""
    if out.exists() and not out.is_dir():
        raise ConvragError(f"{out}: --out names an existing file, not a folder")
    target = out.resolve()
    blocking = next((p for p in target.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise ConvragError(f"{out}: cannot create it, {blocking} is a file, not a folder")
    for path in _local_sources(source):
        if path == target or target in path.parents:
            relation = "is" if path == target else "contains"
            raise ConvragError(f"{out}: --out {relation} the source {path}; write the build somewhere else")
    return target


def _check_replace(out: Path, target: Path, overwrite: bool, is_build: Callable[[Path], bool]) -> None:
    """Replace a non-empty ``target`` only with ``overwrite``, and only a previous ``convrag build``."""
    if not (target.is_dir() and any(target.iterdir())):
        return
    if not overwrite:
        raise ConvragError(f"{out} exists and is not empty (use overwrite / --overwrite)")
    if not is_build(target):
        raise ConvragError(
            f"{out} is not empty and not a folder written by `convrag build` (no README.md with a convrag block): "
            "not replacing it; remove it yourself or choose another --out"
        )


@contextmanager
def replacing(out: Path, target: Path, overwrite: bool, is_build: Callable[[Path], bool]) -> Iterator[Path]:
    """Yield a fresh folder beside ``target``; on success it replaces ``target``, on any error or interrupt it
    is removed and ``target`` (and its parents) are left as they were. A non-empty ``target`` is replaced only
    with ``overwrite`` and only if ``is_build(target)``."""
    created = [p for p in (target.parent, *target.parent.parents) if not p.exists()]
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with locked(target):
            _clean_leftovers(target)
            _check_replace(out, target, overwrite, is_build)
            work = _work_path(target, "convrag-tmp")
            work.mkdir()
            try:
                if target.exists():
                    work.chmod(target.stat().st_mode & 0o7777)
                yield work
                _swap(work, target)
            except BaseException:
                shutil.rmtree(work, ignore_errors=True)
                raise
    except BaseException:
        for folder in created:  # deepest first; only the ones this build created, if still empty
            try:
                folder.rmdir()
            except OSError:
                break
        raise


def _work_path(target: Path, tag: str) -> Path:
    return target.parent / f".{target.name}.{tag}-{secrets.token_hex(4)}"


def _swap(work: Path, target: Path) -> None:
    """Put the complete build ``work`` at ``target``; the previous ``target`` is deleted only afterwards."""
    if not target.exists():
        os.rename(work, target)
        return
    old = _work_path(target, "convrag-old")
    os.rename(target, old)
    try:
        os.rename(work, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def locked(target: Path, command: str = "convrag build") -> Iterator[None]:
    """Hold an exclusive lock on ``.<name>.convrag-lock`` beside ``target`` (one ``command`` at a time per folder;
    the kernel releases it when a run dies, so leftovers found while holding it are stale)."""
    import fcntl

    target.parent.mkdir(parents=True, exist_ok=True)
    lock = target.parent / f".{target.name}.convrag-lock"
    busy = ConvragError(f"{target}: another `{command}` is writing this folder; wait for it to end")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino  # not unlinked by a build that just finished
        except (BlockingIOError, FileNotFoundError):
            raise busy from None
        if not same:
            raise busy
        try:
            yield
        finally:
            with suppress(FileNotFoundError):
                os.unlink(lock)
    finally:
        os.close(fd)


def _clean_leftovers(target: Path) -> None:
    """Remove the work folders of killed builds into ``target``; a previous build moved aside by a build
    killed mid-swap is put back if ``target`` is missing."""
    for entry in sorted(target.parent.glob(f".{glob.escape(target.name)}.convrag-*")):
        tag = entry.name[len(target.name) + 2 :].rsplit("-", 1)[0]
        if tag not in WORK_TAGS or not entry.is_dir() or entry.is_symlink():
            continue
        if tag == "convrag-old" and not target.exists():
            os.rename(entry, target)
        else:
            shutil.rmtree(entry)


OWNER_MARKER = ".convrag-out.json"  # written into every results folder a command owns


def _resolved(paths: Iterable[str | os.PathLike[str] | None]) -> list[Path]:
    out = []
    for p in paths:
        if p is None or is_url(str(p)):
            continue
        path = Path(p).expanduser()
        if path.exists():
            out.append(path.resolve())
    return out


def check_not_input(out: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str] | None], *,
                    what: str = "--out", read_whole: Iterable[str | os.PathLike[str] | None] = ()) -> Path:
    """Refuse an ``out`` (file or folder) that is one of the ``inputs`` or contains one, or that lies inside one of
    the ``read_whole`` folders (folders whose every file the command reads, e.g. a corpus folder: its outputs would
    be read back next time); returns it resolved. ``inputs`` may hold files, folders, None and URLs (the last two
    are ignored)."""
    target = Path(out).expanduser().resolve()
    read_whole = _resolved(read_whole)
    for path in [*_resolved(inputs), *read_whole]:
        if path == target:
            raise ConvragError(f"{out}: {what} is an input of this command ({path}); write somewhere else")
        if target in path.parents:
            raise ConvragError(f"{out}: {what} contains the input {path}; write somewhere else")
    for folder in read_whole:
        if folder.is_dir() and folder in target.parents:
            raise ConvragError(f"{out}: {what} is inside the input folder {folder}, whose files are all read; "
                               "write somewhere else")
    return target


def _marker(folder: Path) -> dict[str, Any]:
    try:
        record = json.loads((folder / OWNER_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def out_owner(folder: Path) -> str | None:
    """The command named by ``folder``'s :data:`OWNER_MARKER`, or None (no marker, or an unreadable one)."""
    owner = _marker(folder).get("command")
    return owner if isinstance(owner, str) else None


def out_identity(folder: Path) -> str | None:
    """What the results in ``folder`` are of (``of`` in its :data:`OWNER_MARKER`: the identity of the inputs, e.g.
    ``benchmark stratrag at /data/out/stratrag``), or None for a marker written before identities were recorded."""
    of = _marker(folder).get("of")
    return of if isinstance(of, str) else None


def unnested(path: Path) -> Path:
    """A default output folder ``path`` that does not land inside another run's results: when one of its parent
    folders holds an :data:`OWNER_MARKER` (say ``results/recor``, which ``--out results/recor`` made), the parts of
    ``path`` from that folder down are joined with ``-`` beside it (``results/recor/recor-evaluate`` becomes
    ``results/recor-recor-evaluate``), again until no parent is a results folder; else ``path`` as it is."""
    parts = path.parts
    for i in range(1, len(parts)):
        if (Path(*parts[:i]) / OWNER_MARKER).is_file():
            return unnested(Path(*parts[: i - 1]) / "-".join(parts[i - 1 :]))
    return path


def check_results_out(out: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str] | None], command: str,
                      *, read_whole: Iterable[str | os.PathLike[str] | None] = (), earlier: bool = False,
                      identity: str | None = None, overwrite: bool = False) -> Path:
    """Refuse (one-line :class:`ConvragError`) an ``out`` that :func:`claim_out` would refuse, writing nothing:
    a file; an input, a folder holding one or one inside a ``read_whole`` folder (:func:`check_not_input`); a
    non-empty folder without the :data:`OWNER_MARKER` of ``command`` (``earlier``: the caller recognised the
    folder as its own from before markers existed); without ``overwrite``, a folder of ``command`` whose results
    are of other inputs than ``identity`` (:func:`out_identity`; a rerun of the same thing may replace its own
    results, another benchmark's never silently). Returns it resolved."""
    path = Path(out).expanduser()
    if path.exists() and not path.is_dir():
        raise ConvragError(f"{out}: --out names an existing file, not a folder")
    target = check_not_input(path, inputs, read_whole=read_whole)
    if target.is_dir() and any(target.iterdir()) and not earlier:
        owner = out_owner(target)
        if owner != command:
            held = f"it holds `convrag {owner}` results" if owner else f"it has no {OWNER_MARKER}"
            raise ConvragError(f"{out}: --out is not empty and is not a results folder of `convrag {command}` "
                               f"({held}): not writing into it; choose a new or empty folder")
        recorded = out_identity(target)
        if identity is not None and recorded is not None and recorded != identity and not overwrite:
            raise ConvragError(f"{out}: --out holds the `convrag {command}` results of {recorded}, not of {identity}: "
                               "not replacing them; choose another --out, or pass --overwrite to replace them")
    return target


def claim_out(out: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str] | None], command: str, *,
              read_whole: Iterable[str | os.PathLike[str] | None] = (), earlier: bool = False,
              identity: str | None = None, overwrite: bool = False) -> Path:
    """Make ``out`` a results folder owned by ``convrag COMMAND`` (of ``identity``) and return it (resolved): refused
    as :func:`check_results_out` says, nothing written; a new or empty folder is created and marked; a folder the
    same command wrote before is reused (its files are replaced one by one) and marked with ``identity``."""
    target = check_results_out(out, inputs, command, read_whole=read_whole, earlier=earlier, identity=identity,
                               overwrite=overwrite)
    record: dict[str, Any] = {"command": command, **({"of": identity} if identity is not None else {})}
    if _marker(target) != record:
        target.mkdir(parents=True, exist_ok=True)
        (target / OWNER_MARKER).write_text(json.dumps(record) + "\n", encoding="utf-8")
    return target


@contextmanager
def claimed_out(out: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str] | None], command: str, *,
                read_whole: Iterable[str | os.PathLike[str] | None] = (), identity: str | None = None,
                overwrite: bool = False) -> Iterator[Path]:
    """:func:`claim_out` (same arguments) for the block's duration, yielding the folder. When the block raises
    while a folder the claim created or found empty still holds only the marker, the claim is undone (marker and the
    folders it needed removed), so a run that fails before writing leaves nothing behind; one that wrote outputs
    keeps them. In a folder of earlier results the earlier marker is put back, so the results a failed
    ``--overwrite`` run left in place keep saying what they are of."""
    path = Path(out).expanduser().absolute()
    created = [p for p in (path, *path.parents) if not p.exists()]  # deepest first
    fresh = not (path.is_dir() and any(path.iterdir()))
    previous = None if fresh else _marker(path)
    target = claim_out(out, inputs, command, read_whole=read_whole, identity=identity, overwrite=overwrite)
    try:
        yield target
    except BaseException:
        if previous and _marker(target) != previous:
            (target / OWNER_MARKER).write_text(json.dumps(previous) + "\n", encoding="utf-8")
        if fresh and target.is_dir() and [p.name for p in target.iterdir()] == [OWNER_MARKER]:
            (target / OWNER_MARKER).unlink()
            for folder in created:
                try:
                    folder.rmdir()
                except OSError:
                    break
        raise
