"""The output folder of ``convrag synthesize``: a results folder owned by the pipeline's command, never an input.

``--out`` is refused (one line, nothing written) when it is a file, is one of the run's inputs or contains one
(the corpus, the items file, a file named in an option), lies inside a corpus folder (whose files are all read),
or is a non-empty folder that is not this command's results folder. A folder an earlier run of the same pipeline
wrote (``pipeline.json`` naming it, from before folders were marked) is taken as this command's and resumed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from convrag.core.out_folder import OWNER_MARKER, check_results_out, claim_out
from convrag.synthesis.engine.pipeline import PIPELINE_FILE


def option_paths(options: Mapping[str, Any]) -> list[str]:
    """The option values (nested ones too) that name an existing file or folder: inputs of the run."""
    found: list[str] = []
    for value in options.values():
        if isinstance(value, Mapping):
            found += option_paths(value)
        elif isinstance(value, (list, tuple)):
            found += option_paths(dict(enumerate(value)))
        elif isinstance(value, str) and value.strip() and os.path.exists(value):
            found.append(value)
    return found


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _earlier_run(target: Path, pipeline: str) -> bool:
    """An unmarked folder written by an earlier run of ``pipeline``."""
    return not (target / OWNER_MARKER).exists() and _read(target / PIPELINE_FILE).get("pipeline") == pipeline


def check_run_folder(out: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str] | None], command: str,
                     pipeline: str, read_folders: Iterable[str | os.PathLike[str] | None] = ()) -> Path:
    """Refuse an ``out`` the run must not write (see the module docstring); writes nothing. Returns it resolved."""
    path = Path(out).expanduser()
    earlier = path.is_dir() and _earlier_run(path.resolve(), pipeline)
    return check_results_out(path, inputs, command, read_whole=read_folders, earlier=earlier)


def claim_run_folder(out: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str] | None], command: str,
                     pipeline: str, read_folders: Iterable[str | os.PathLike[str] | None] = ()) -> Path:
    """:func:`check_run_folder`, then make ``out`` this command's results folder (created and marked; an earlier
    run's folder is marked and resumed). Returns it resolved."""
    path = Path(out).expanduser()
    earlier = path.is_dir() and _earlier_run(path.resolve(), pipeline)
    return claim_out(path, inputs, command, read_whole=read_folders, earlier=earlier)
