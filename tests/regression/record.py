"""Record ``expected.json``: run every case of ``cases.py`` through the CLI and flatten its results.json.

Usage: ``python -m tests.regression.record [--out FILE]`` from the repository root (``../shared`` beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

from convrag.cli import main

from .cases import CASES, EXPECTED, flatten


def run_case(name: str, data: Path, work: Path, extra: tuple[str, ...] = ()) -> dict:
    """Build case ``name`` (once per ``work`` folder) and evaluate it with ``extra`` arguments added."""
    build, evaluate = CASES[name]
    folder, out = work / name, work / f"{name}-results{len(list(work.glob(f'{name}-results*')))}"
    if not folder.exists():
        assert main([a.format(data=data) for a in build] + ["--out", str(folder)]) == 0
    assert main(["evaluate", str(folder), "--out", str(out), "--no-progress", *evaluate, *extra]) == 0
    return json.loads((out / "results.json").read_text())


def main_record() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(EXPECTED))
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    repo = Path(__file__).resolve().parents[2]
    data = Path(os.environ.get("CONVRAG_SHARED_DATA", repo.parent / "shared" / "data"))
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=repo).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        cases = {name: flatten(run_case(name, data, Path(tmp))) for name in CASES}
    Path(args.out).write_text(json.dumps({"recorded_at_commit": commit, "cases": cases}, indent=0, sort_keys=True)
                              + "\n")


if __name__ == "__main__":
    main_record()
