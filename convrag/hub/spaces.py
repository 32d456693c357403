"""Assemble a Hugging Face Space from a metric folder (``convrag space METRIC --out DIR``).

A *Space folder* is the metric folder's README.md (the Space card), app.py, requirements.txt and modules, plus,
when those modules import ``convrag`` (not on PyPI), the *vendored closure*: every convrag module reachable from
them through imports (module-level and function-level, absolute and relative), the ``__init__.py`` of each package
on the way, and the data files (package data: *.md, *.txt, *.yaml, *.json, *.jinja) beside the vendored modules,
copied unchanged under ``DIR/convrag/``. ``python app.py`` puts DIR first on ``sys.path``, so the Space imports its
own copy. DIR/requirements.txt is the metric's list plus the distributions of the third-party imports of the
vendored modules (with convrag's own version constraints where it declares one). Push the folder with
``huggingface_hub.upload_folder(repo_type="space")`` or ``--push ORG/NAME``.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import sys
from dataclasses import dataclass, field
from importlib.machinery import ModuleSpec
from pathlib import Path

from convrag.core.errors import ConvragError

METRICS = ("retrieval", "generation", "audit", "pr_auc")
MARKER = ".convrag-space.json"  # written into every Space folder; --overwrite replaces only folders holding it
DATA_SUFFIXES = (".md", ".txt", ".yaml", ".json", ".jinja")  # the package data of pyproject.toml
READS_PACKAGE = {"convrag.llm.prompts": "convrag.prompts"}  # modules that read another package's data files
SDK_PROVIDED = {"gradio", "gradio-client"}  # installed by the Space's sdk; listing them could clash with sdk_version
BROUGHT_BY = {"torch": {"bert-score", "sentence-transformers"}}  # left out when one of these is listed


@dataclass
class SpaceReport:
    """What ``assemble`` wrote: files copied from the metric folder, vendored modules and data files, requirement
    lines, and the optional imports left out of the requirements."""

    metric: str
    out: Path
    copied: list[str] = field(default_factory=list)
    vendored: list[str] = field(default_factory=list)
    data_files: list[str] = field(default_factory=list)
    requirements: list[str] = field(default_factory=list)
    optional: list[str] = field(default_factory=list)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _find(name: str, locations: list[str] | None) -> ModuleSpec | None:
    """The spec of module ``name`` as the import system would find it, without importing its parents."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = find(name, locations) if find else None
        if spec is not None:
            return spec
    return None


class _Closure:
    """The convrag modules reachable from a set of source files, found on the installed convrag."""

    def __init__(self) -> None:
        self.specs: dict[str, ModuleSpec] = {}
        self.done: set[str] = set()  # vendored modules
        self.third_party: dict[str, set[bool]] = {}  # top-level name -> imported lazily (in a function)?

    def spec(self, name: str) -> ModuleSpec | None:
        """The spec of convrag module ``name`` (None when no such module); found specs are cached."""
        if name not in self.specs:
            parent = name.rpartition(".")[0]
            locations = None
            if parent:
                parent_spec = self.spec(parent)
                if parent_spec is None or not parent_spec.submodule_search_locations:
                    return None
                locations = list(parent_spec.submodule_search_locations)
            spec = _find(name, locations)
            if spec is None or not spec.origin or not spec.origin.endswith(".py"):
                return None
            self.specs[name] = spec
        return self.specs[name]

    def add(self, name: str) -> None:
        """Vendor module ``name`` (a convrag module) with its parent packages and everything they import."""
        queue = [name]
        while queue:
            current = queue.pop()
            for prefix in [".".join(current.split(".")[:i]) for i in range(1, current.count(".") + 2)]:
                if prefix in self.done or self.spec(prefix) is None:
                    continue
                self.done.add(prefix)
                queue.extend(self.scan(Path(self.specs[prefix].origin), prefix, is_package=self._is_package(prefix)))
                if prefix in READS_PACKAGE:
                    queue.append(READS_PACKAGE[prefix])

    def _is_package(self, name: str) -> bool:
        return self.specs[name].submodule_search_locations is not None

    def scan(self, path: Path, module: str | None, is_package: bool = False) -> list[str]:
        """The convrag modules ``path`` imports (``from X import y`` also names ``X.y`` when that is a module);
        its other absolute imports' top-level names go to ``third_party`` (with whether each import is inside a
        function). ``module`` (None for a file outside
        convrag) resolves relative imports."""
        found: list[str] = []
        package = module if is_package else (module.rpartition(".")[0] if module else None)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        functions = (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
        lazy = {id(inner) for function in functions for inner in ast.walk(function)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [(alias.name, []) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    if package is None:
                        continue  # a sibling module of the metric folder, copied as it is
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                targets = [(base, [alias.name for alias in node.names])]
            else:
                continue
            for base, names in targets:
                top = base.split(".")[0]
                if top != "convrag":
                    self.third_party.setdefault(top, set()).add(id(node) in lazy)
                    continue
                found.append(base)
                found.extend(f"{base}.{n}" for n in names if n != "*" and self.spec(f"{base}.{n}") is not None)
        return found


def _closure(sources: list[Path]) -> _Closure:
    closure = _Closure()
    local = {path.stem for path in sources}
    for path in sources:
        for name in closure.scan(path, None):
            closure.add(name)
    for name in local | set(sys.stdlib_module_names) | {"__future__"}:
        closure.third_party.pop(name, None)
    return closure


def _declared() -> tuple[dict[str, str], set[str]]:
    """convrag's own requirements: normalized distribution name -> its requirement (name and version specifier),
    and the names declared only in optional extras."""
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement

    try:
        parsed = [Requirement(line) for line in requires("convrag") or []]
    except PackageNotFoundError:
        return {}, set()
    extras = {_normal(r.name) for r in parsed if r.marker and "extra" in str(r.marker)}
    core = {_normal(r.name) for r in parsed if not (r.marker and "extra" in str(r.marker))}
    return {_normal(r.name): f"{r.name}{r.specifier}" for r in parsed}, extras - core


def _requirements(metric_lines: list[str], imports: dict[str, set[bool]]) -> tuple[list[str], list[str]]:
    """The metric's requirement lines plus one line per distribution of ``imports`` not yet listed, and the
    *optional* imports left out: imported only inside functions (an unused backend's client) and either not
    installed here or declared by convrag only as an extra. A module-level import not installed here is an error."""
    from importlib.metadata import packages_distributions

    from packaging.requirements import Requirement

    lines = [line.strip() for line in metric_lines if line.strip()]
    listed = {_normal(Requirement(line).name) for line in lines if not line.startswith("#")}
    distributions, (declared, extras) = packages_distributions(), _declared()
    eager = sorted(name for name in imports if name not in distributions and False in imports[name])
    if eager:
        raise ConvragError(f"the metric or its vendored modules import {', '.join(eager)} at module level, which is "
                           "not installed here, so its distribution is unknown; install it and run again")  # fmt: skip
    wanted = {name: sorted({_normal(d) for d in distributions.get(name, [])}) for name in sorted(imports)}
    optional = sorted(name for name, dists in wanted.items() if False not in imports[name] and (
        not dists or set(dists) <= extras))  # fmt: skip
    every = listed | {d for name, dists in wanted.items() if name not in optional for d in dists}
    for name, dists in wanted.items():
        if name in optional or set(dists) & (listed | SDK_PROVIDED) or BROUGHT_BY.get(name, set()) & every:
            continue
        listed.add(dists[0])
        lines.append(declared.get(dists[0], dists[0]))
    return lines, optional


def _check_out(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ConvragError(f"{out}: --out names an existing file, not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise ConvragError(f"{out} exists and is not empty (use --overwrite to replace a previous Space folder)")
        if not (out / MARKER).is_file():
            raise ConvragError(f"{out} is not empty and not a folder written by `convrag space` (no {MARKER}): "
                               "not replacing it; remove it yourself or choose another --out")  # fmt: skip


def metric_folder(metric: str) -> Path:
    """The installed folder of metric ``metric`` (one of METRICS)."""
    if metric not in METRICS:
        raise ConvragError(f"unknown metric {metric!r}; available: {', '.join(METRICS)}")
    spec = _find("convrag.metrics", list(_find("convrag", None).submodule_search_locations))
    return Path(spec.submodule_search_locations[0]) / metric


def assemble(metric: str, out: str | Path, overwrite: bool = False) -> SpaceReport:
    """Write the Space folder of ``metric`` to ``out`` (atomically: a temporary folder beside it, then a rename).
    A non-empty ``out`` is replaced only with ``overwrite`` and only when it is a previous Space folder."""
    from convrag.core.out_folder import replacing

    folder, out = metric_folder(metric), Path(out)
    _check_out(out, overwrite)
    files = sorted(p for p in folder.iterdir() if p.is_file() and (p.suffix == ".py" or p.name in (
        "README.md", "requirements.txt")))  # fmt: skip
    closure = _closure([p for p in files if p.suffix == ".py"])
    report = SpaceReport(metric, out, copied=[p.name for p in files], vendored=sorted(closure.done))
    requirements = (folder / "requirements.txt").read_text(encoding="utf-8").splitlines()
    report.requirements, report.optional = _requirements(requirements, closure.third_party)
    with replacing(out, out.resolve(), overwrite, lambda target: (target / MARKER).is_file()) as work:
        for path in files:
            shutil.copy2(path, work / path.name)
        for name in report.vendored:
            spec = closure.specs[name]
            source = Path(spec.origin)
            relative = Path(*name.split("."))
            target = work / (relative / "__init__.py" if spec.submodule_search_locations is not None
                             else relative.with_suffix(".py"))  # fmt: skip
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
            if spec.submodule_search_locations is not None:
                for data in sorted(source.parent.iterdir()):
                    if data.is_file() and data.suffix in DATA_SUFFIXES:
                        shutil.copy2(data, target.parent / data.name)
                        report.data_files.append(str((target.parent / data.name).relative_to(work)))
        (work / "requirements.txt").write_text("\n".join(report.requirements) + "\n", encoding="utf-8")
        marker = {"metric": metric, "vendored": report.vendored, "optional": report.optional}
        (work / MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
    return report


def push_space(folder: Path, repo_id: str, private: bool = False) -> str:
    """Upload a Space folder to the Hub as Space ``repo_id`` (created when missing, sdk gradio); the commit URL."""
    from convrag.hub.repo import upload_folder

    return upload_folder(folder, repo_id, "space", "Upload Space assembled by convrag", private=private,
                         ignore=[MARKER], space_sdk="gradio")  # fmt: skip


