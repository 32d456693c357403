"""Where results and builds came from, written without the layout of the machine that made them.

A local path is written in one of two forms, never as an absolute path:

- in what stays on this machine (``results.json`` of ``convrag evaluate``, ``convrag-export.json`` of ``convrag
  export``): relative to the working directory of the command (POSIX separators, ``..`` where needed);
- in what is published (the ``convrag`` block of a built folder's README): ``local:<name>``, the name of the
  source file or folder given, followed by the path inside it when the path lies in that folder.

Either way a file of a Hugging Face cache snapshot (``$HF_HUB_CACHE/<type>s--<org>--<name>/snapshots/<sha>/...``)
is written as the Hub URL it was downloaded from, pinned to the snapshot's commit: ``hf://datasets/org/name@sha/file``
(``hf://org/name@sha/file`` for a model), the form ``HfFileSystem`` reads.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# An absolute path inside a text: from a "/" at the start or after a space, quote, bracket or "=", to the next
# space, quote, bracket, comma or ":" (so "path:line" keeps its line number).
_ABSOLUTE = re.compile(r"(?:^|(?<=[\s'\"(\[=]))/[^\s'\":,()\[\]]+")


def hub_url(path: str | os.PathLike) -> str | None:
    """The ``hf://`` URL of ``path`` when it lies in a snapshot of the Hugging Face cache, else None."""
    from huggingface_hub import constants

    cache = Path(constants.HF_HUB_CACHE).expanduser().absolute()
    try:
        parts = Path(path).expanduser().absolute().relative_to(cache).parts
    except ValueError:
        return None
    if len(parts) < 3 or parts[1] != "snapshots" or "--" not in parts[0]:
        return None
    kind, repo = parts[0].split("--", 1)  # repo ids never hold "--", so the rest is org--name
    prefix = "" if kind == "models" else f"{kind}/"
    return "/".join([f"hf://{prefix}{repo.replace('--', '/')}@{parts[2]}", *parts[3:]])


def local_path(path: str | os.PathLike) -> str:
    """``path`` as results on this machine record it: its ``hf://`` URL (see :func:`hub_url`), else relative to the
    working directory; on Windows, a path on another drive than the working directory is written as its name."""
    url = hub_url(path)
    if url is not None:
        return url
    try:
        return Path(os.path.relpath(Path(path).expanduser().absolute())).as_posix()
    except ValueError:  # another drive
        return Path(path).name


def relative_paths(value: Any) -> Any:
    """``value`` (JSON-like) with every string that is the absolute path of an existing file or folder replaced
    by :func:`local_path`; other values are kept as they are."""
    if isinstance(value, dict):
        return {k: relative_paths(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [relative_paths(v) for v in value]
    if isinstance(value, str) and os.path.isabs(value) and os.path.exists(value):
        return local_path(value)
    return value


def _roots(source: Any) -> list[Path]:
    """The local paths of a build's ``source`` option (a path, or a mapping name -> path; URLs left out)."""
    values = source.values() if isinstance(source, dict) else [source] if source is not None else []
    return [Path(str(v)).expanduser().absolute() for v in values if isinstance(v, (str, os.PathLike))
            and "://" not in str(v)]  # fmt: skip


def public_path(path: str | os.PathLike, roots: Iterable[Path] = ()) -> str:
    """``path`` as a published card records it: its ``hf://`` URL, else ``local:<root name>/<path inside it>``
    for the first of the source ``roots`` holding it, else ``local:<its name>``."""
    url = hub_url(path)
    if url is not None:
        return url
    absolute = Path(path).expanduser().absolute()
    for root in roots:
        if absolute == root or root in absolute.parents:
            return "/".join([f"local:{root.name}", *absolute.relative_to(root).parts])
    return f"local:{absolute.name}"


def public_report(value: Any, source: Any) -> Any:
    """A build report (JSON-like) as a card may show it: every absolute path of an existing file or folder inside
    its texts (``/data/test.jsonl:12``) written by :func:`public_path` against the build's ``source`` option."""
    roots = _roots(source)

    def scrub(text: str) -> str:
        return _ABSOLUTE.sub(lambda m: public_path(m[0], roots) if os.path.exists(m[0]) else m[0], text)

    def walk(item: Any) -> Any:
        if isinstance(item, dict):
            return {k: walk(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [walk(v) for v in item]
        return scrub(item) if isinstance(item, str) else item

    return walk(value)


def is_url(path: str) -> bool:
    """True for http(s)/hf/s3-style URLs, False for local paths."""
    return "://" in path


def is_path(model: str) -> bool:
    """Whether a model given as ``model`` names a local file or folder (it exists, or is written as a path), not a
    Hub id."""
    return (Path(model).expanduser().exists() or model.startswith(("/", ".", "~")) or os.path.isabs(model)
            or (os.sep != "/" and os.sep in model))  # fmt: skip
