"""The README of a folder written by ``convrag build``: its YAML header and the ``convrag`` block in it.

Every reader of a built folder (``convrag evaluate``, ``evaluate-generation``, ``push``, ``build
--overwrite``) goes through ``read_card`` / ``read_manifest``, so a missing folder, a missing README, non-UTF-8
bytes, bad YAML or a missing block is one error naming the README (and the YAML line where there is one).
"""

from __future__ import annotations

import copy
import functools
import os
import re
from pathlib import Path
from typing import Any

import yaml

from convrag.core.errors import ConvragError, DataError

# The YAML header as huggingface_hub's RepoCard finds it: from a first line "---" to the next line "---".
_HEADER = re.compile(r"^(\s*---[\r\n]+)([\S\s]*?)([\r\n]+---(\r\n|\n|$))")
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: ~10x faster on a 40 KB header


def read_card(folder: str | os.PathLike) -> tuple[Path, dict[str, Any]]:
    """(README path, YAML header) of a built folder; a missing folder or README, or bad YAML, is one error."""
    path = Path(folder)
    if not path.is_dir():
        raise ConvragError(f"{path}: {'not a folder' if path.exists() else 'no such folder'} "
                           "(give a folder written by `convrag build`)")  # fmt: skip
    readme = path / "README.md"
    if not readme.is_file():
        raise ConvragError(f"{readme} not found: is {path} a folder written by `convrag build`?")
    try:
        text = readme.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"not UTF-8 text (byte {err.start + 1})", str(readme)) from None
    return readme, copy.deepcopy(_parse_card(readme, text))


@functools.lru_cache(maxsize=8)
def _parse_card(readme: Path, text: str) -> dict[str, Any]:
    """The YAML header of ``text`` (the contents of ``readme``), parsed once per contents; callers get copies."""
    match = _HEADER.search(text) if text.startswith("---") else None
    if match is None:
        raise DataError("has no YAML header: it was not written by `convrag build`", str(readme))
    try:
        data = yaml.load(match.group(2), Loader=_LOADER)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = mark.line + 2 if mark is not None else None  # +1: 1-based, +1: the opening '---' line
        raise DataError(f"invalid YAML header: {getattr(err, 'problem', None) or err}", str(readme), line) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise DataError("invalid YAML header: it is not a mapping", str(readme))
    return data


def read_manifest(folder: str | os.PathLike) -> dict[str, Any]:
    """The ``convrag`` block of a built folder's README (benchmark, options, report, evaluation profile)."""
    readme, data = read_card(folder)
    block = data.get("convrag")
    if not isinstance(block, dict):
        raise DataError("has no 'convrag' block: the folder was not written by `convrag build`", str(readme))
    if not isinstance(block.get("benchmark"), str):
        raise DataError("the 'convrag' block names no benchmark", str(readme))
    return block
