"""Argument habits shared by the commands: where results go by default, and names checked before any work.

* :func:`default_out`: ``results/<benchmark>/<name>-<command>``, the benchmark read from the built folder's
  README and the name from the folder or Hub repo id (:func:`run_name`), so that two benchmarks' results never
  share a folder.
* :func:`check_retrievers` / :func:`check_strategies`: an unknown retriever or query strategy name is one error
  listing the known names, raised before any index is built, model loaded or LLM called.
* :func:`name_value_pairs` / :func:`parse_options`: repeated ``--flag NAME=VALUE`` arguments as a mapping.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from convrag.errors import ConvragError

#: ``NAME=VALUE``: a name (letters, digits, ``_``, ``-``; not starting with a digit), then anything
NAME_EQ = re.compile(r"^([A-Za-z_][\w-]*)=(.+)$")

#: Root of the default output folders: ``results/<benchmark>/<run>``.
RESULTS = Path("results")


def run_name(ref: str | Path) -> str:
    """The name a folder or Hub dataset repo id gives its runs: the repo's name part (``org/name@rev`` ->
    ``name``), the name of a Hugging Face cache snapshot's repo, else the folder's base name."""
    from convrag.hub import REPO_ID, names_hub_repo

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
    results never share a folder."""
    from convrag.hub import resolve_folder
    from convrag.manifest import read_manifest

    benchmarks = list(dict.fromkeys(str(read_manifest(resolve_folder(r))["benchmark"]) for r in refs))
    names = list(dict.fromkeys(run_name(r) for r in refs))
    return RESULTS / "+".join(benchmarks) / f"{'+'.join(names)}-{command}"


def check_retrievers(specs: list[str], flag: str) -> None:
    """Refuse, before any work, a retriever spec whose name (or a component of ``rrf:A+B``) is not registered."""
    from convrag.retrievers.registry import RETRIEVERS

    for spec in specs:
        name, _, argument = spec.strip().partition(":")
        parts = [name, *(argument.split("+") if name.strip().lower() == "rrf" else [])]
        for part in parts:
            if part.strip() and part.partition(":")[0].strip().lower() not in RETRIEVERS:
                raise ConvragError(f"{flag}: unknown retriever {part.strip()!r}; known: {', '.join(RETRIEVERS)}")


def check_strategies(names: list[str], flag: str, profile: Any = None) -> None:
    """Refuse, before any work, a query strategy that neither ``profile`` (its views and strategies) nor the
    strategy registry knows."""
    from convrag.strategies import available_strategies, get_strategy

    own = [*profile.strategies, *profile.extra_strategies] if profile is not None else []
    for name in names:
        if name in own:
            continue
        try:
            get_strategy(name)
        except ConvragError:
            known = list(dict.fromkeys([*own, *available_strategies(), "field:NAME"]))
            raise ConvragError(f"{flag}: unknown query strategy {name!r}; known: {', '.join(known)}") from None


def name_value_pairs(values: list[str] | None, flag: str, form: str = "NAME=FILE") -> dict[str, str]:
    """``flag NAME=VALUE`` arguments as a mapping of strings (``form`` names the expected shape in errors)."""
    pairs = {}
    for value in values or []:
        match = NAME_EQ.match(value)
        if not match:
            raise ConvragError(f"{flag} expects {form}, got {value!r}")
        pairs[match.group(1)] = match.group(2)
    return pairs


def parse_options(values: list[str] | None, flag: str) -> dict[str, Any]:
    """``flag key=value`` pairs; values are read as YAML scalars (ints, null, true...)."""
    import yaml

    return {k: yaml.safe_load(v) for k, v in name_value_pairs(values, flag, "key=value").items()}
