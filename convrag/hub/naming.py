"""Where a command's results go by default: ``results/<benchmark>/<name>-<command>``, the benchmark read from the
built folder's README and the name from the folder or Hub repo id, so that two benchmarks' results never share a
folder, and never inside a folder that holds another run's results."""

from __future__ import annotations

from pathlib import Path

#: Root of the default output folders: ``results/<benchmark>/<run>``.
RESULTS = Path("results")


def run_name(ref: str | Path) -> str:
    """The name a folder or Hub dataset repo id gives its runs: the repo's name part (``org/name@rev`` ->
    ``name``), the name of a Hugging Face cache snapshot's repo, else the folder's base name."""
    from convrag.hub.repo import REPO_ID, names_hub_repo

    text = str(ref)
    if names_hub_repo(text):
        return REPO_ID.match(text).group("repo").rsplit("/", 1)[-1]  # type: ignore[union-attr]
    path = Path(text).resolve()
    if path.parent.name == "snapshots" and path.parent.parent.name.startswith("datasets--"):
        return path.parent.parent.name.rsplit("--", 1)[-1]
    return path.name


def default_out(refs: list[str], command: str) -> Path:
    """Default ``--out`` of a command reading built folders (or Hub repo ids) ``refs``:
    ``results/<benchmark>/<name>-<command>``, the benchmark from the folder's README and the name from
    :func:`run_name` (several folders: their benchmarks and names joined by ``+``), so that two benchmarks'
    results never share a folder; never inside another run's results folder (:func:`convrag.core.out_folder.unnested`:
    beside it instead)."""
    from convrag.core.manifest import read_manifest
    from convrag.core.out_folder import unnested
    from convrag.hub.repo import resolve_folder

    benchmarks = list(dict.fromkeys(str(read_manifest(resolve_folder(r))["benchmark"]) for r in refs))
    names = list(dict.fromkeys(run_name(r) for r in refs))
    return unnested(RESULTS / "+".join(benchmarks) / f"{'+'.join(names)}-{command}")
