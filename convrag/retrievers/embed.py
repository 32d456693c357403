"""Document embeddings kept on disk (filled ahead of time by ``convrag embed``, :mod:`convrag.cli.embed`).

Root: ``--embeddings-cache DIR`` / the dense retriever's ``cache_dir``, else ``$CONVRAG_EMBEDDINGS_CACHE``, else
``$CONVRAG_CACHE_DIR/embeddings``, else ``~/.cache/convrag/embeddings`` (beside the LLM cache; never inside a built
folder, which is what ``convrag push`` uploads); ``none`` (or ``off``) turns the disk cache off. Any entry may be
deleted at any time: it is then encoded again.

An entry is the folder ``<root>/<key>/``: ``embeddings.npy`` (float32, one row per document, read back memory-mapped;
L2-normalised unless its metadata says ``"normalize": "none"``, as ``dual`` with inner product), ``ids.json`` (doc ids
in row order) and ``meta.json`` (the key's fields, the array's sha256 and, for information only, :func:`provenance`,
which names the model by its record, never by its path).
The key (:func:`entry_key`) is the sha256 of the canonical JSON of everything that changes the vectors: the model
identity (:func:`model_identity`), pooling, document token limit and truncation side, document prompt, normalisation,
dtype and the corpus fingerprint (:func:`corpus_fingerprint`). Device and batch size are not in it: they can move the
last bits of a float, not its meaning. An entry whose files disagree with its key, ids, shape, dtype or checksum is
encoded again with a ``CacheWarning``. A faiss index built over an entry is stored beside it (``faiss-<kind>.index``)
and read back when its size matches.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from convrag.core.errors import ConvragError

CACHE_ENV = "CONVRAG_EMBEDDINGS_CACHE"
FORMAT_VERSION = 1
OFF = ("none", "off")
DEVICES = ("auto", "cpu", "cuda", "mps")
_WHOLE_FILE = 1 << 20  # files up to 1 MiB are hashed whole, larger ones by their first and last MiB
_CHUNK = 1 << 24


class CacheWarning(UserWarning):
    """A cache entry was unreadable or did not match its key; it is encoded again."""


def default_cache_dir() -> Path | None:
    """The embeddings cache root (see the module docstring); ``None`` when turned off."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return None if env.strip().lower() in OFF else Path(env)
    base = os.environ.get("CONVRAG_CACHE_DIR")
    return Path(base) / "embeddings" if base else Path.home() / ".cache" / "convrag" / "embeddings"


def resolve_device(device: str | None) -> str | None:
    """``None`` for ``auto`` (sentence-transformers picks cuda, then mps, then cpu), else the device checked:
    one of cpu, cuda, cuda:N, mps, and available here (``ConvragError`` otherwise)."""
    if device is None or device == "auto":
        return None
    base, _, number = device.partition(":")
    if base not in DEVICES[1:] or (number and (base != "cuda" or not number.isdigit())):
        raise ConvragError(f"device must be one of {', '.join(DEVICES)} or cuda:N, got {device!r}")
    import torch

    if base == "cuda" and not torch.cuda.is_available():
        raise ConvragError(f"device {device!r}: no CUDA device is available here (use --device cpu or auto)")
    if base == "mps" and not torch.backends.mps.is_available():
        raise ConvragError(f"device {device!r}: no Apple MPS device is available here (use --device cpu or auto)")
    return device


def _file_digest(path: Path, h: Any) -> None:
    size = path.stat().st_size
    with path.open("rb") as f:
        if size <= _WHOLE_FILE:
            h.update(f.read())
        else:
            h.update(f.read(_WHOLE_FILE))
            f.seek(size - _WHOLE_FILE)
            h.update(f.read(_WHOLE_FILE))


def _local_folder(model: str) -> Path | None:
    if Path(model).is_dir():
        return Path(model)
    from huggingface_hub import snapshot_download

    for repo in (model, f"sentence-transformers/{model}") if "/" not in model else (model,):
        try:
            return Path(snapshot_download(repo, local_files_only=True))
        except Exception:  # not in the local Hugging Face cache (or not a valid repo id)
            continue
    return None


@lru_cache(maxsize=16)
def model_identity(model: str) -> dict[str, str]:
    """``{"files": sha256}`` over the model folder's files (a Hub name: its snapshot in the local Hugging Face cache),
    or ``{"name": model}`` when no local folder is found. The digest covers each file's relative path and size, and
    the whole content of files up to 1 MiB, the first and last 1 MiB of larger ones (i.e. weights); the folder's path
    is not part of it, so a copied cache stays valid for the same model elsewhere."""
    folder = _local_folder(model)
    if folder is None:
        return {"name": model}
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts):
            continue
        h.update(f"{rel.as_posix()}\0{path.stat().st_size}\0".encode())
        _file_digest(path, h)
    return {"files": h.hexdigest()}


def corpus_fingerprint(ids: Sequence[str], texts: Sequence[str]) -> str:
    """``<n>:<sha256>`` over each (doc id, text) in order, every string length-prefixed; the text is exactly what is
    encoded (title joined or not, as the retriever's ``use_title`` chose)."""
    h = hashlib.sha256()
    for doc_id, text in zip(ids, texts, strict=True):
        for s in (doc_id, text):
            b = s.encode("utf-8")
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
    return f"{len(ids)}:{h.hexdigest()}"


def entry_key(settings: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of ``settings`` (model identity, encoding settings, corpus fingerprint)."""
    payload = json.dumps({"format": FORMAT_VERSION, **settings}, sort_keys=True, separators=(",", ":"),
                         ensure_ascii=False)  # fmt: skip
    return hashlib.sha256(payload.encode()).hexdigest()


def provenance(model: str, device: str, batch_size: int, seconds: float | None) -> dict[str, Any]:
    """What an entry records beside its key, for information only: the model's record (name, package, version,
    weights digest: :func:`convrag.retrievers.model_record.model_record`, never its path), device, batch size,
    encoding seconds (None: not encoded by this write), time and library versions."""
    from importlib.metadata import version

    from convrag.retrievers.model_record import model_record

    return {"model_record": model_record(model), "device": device, "batch_size": batch_size, "seconds": seconds,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "versions": {p: version(p) for p in ("sentence-transformers", "torch", "transformers")}}  # fmt: skip


def _array_digest(array: np.ndarray) -> str:
    h = hashlib.sha256()
    flat = array.reshape(-1)
    step = max(1, _CHUNK // max(1, array.itemsize))
    for start in range(0, flat.size, step):
        h.update(np.ascontiguousarray(flat[start : start + step]).tobytes())
    return h.hexdigest()


class EmbeddingStore:
    """The entries under one cache root (see the module docstring)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / key

    def load(self, key: str, ids: Sequence[str]) -> np.ndarray | None:
        """The entry's embeddings (read-only, memory-mapped) when every check passes; ``None`` when there is no
        entry, or (with a ``CacheWarning``) when it is unreadable or mismatched."""
        entry = self.path(key)
        if not entry.exists():
            return None
        try:
            meta = json.loads((entry / "meta.json").read_text())
            stored_ids = json.loads((entry / "ids.json").read_text())
            array = np.load(entry / "embeddings.npy", mmap_mode="r")
            problem = (
                "its key differs" if meta.get("key") != key
                else "its doc ids differ" if stored_ids != list(ids)
                else f"its array is {array.dtype} {array.shape}" if array.dtype != np.float32 or array.ndim != 2
                or array.shape[0] != len(ids)
                else "its checksum differs" if _array_digest(array) != meta.get("sha256")
                else None
            )  # fmt: skip
        except (OSError, ValueError, TypeError, AttributeError) as err:
            problem = f"it cannot be read ({type(err).__name__}: {err})"
        if problem is None:
            return array
        warnings.warn(f"embeddings cache entry {entry} is not used, {problem}: encoding again", CacheWarning,
                      stacklevel=3)  # fmt: skip
        return None

    def save(self, key: str, ids: Sequence[str], embeddings: np.ndarray, meta: Mapping[str, Any]) -> Path:
        """Write an entry atomically (a temporary folder renamed into place; an older entry is replaced)."""

        def fill(out: np.ndarray) -> None:
            out[:] = embeddings

        return self.write(key, ids, tuple(embeddings.shape), fill, meta)

    def write(self, key: str, ids: Sequence[str], shape: tuple[int, int], fill: Callable[[np.ndarray], None],
              meta: Mapping[str, Any]) -> Path:  # fmt: skip
        """Write an entry whose ``embeddings.npy`` (float32, ``shape``) ``fill`` writes into a memory-mapped array,
        atomically (a temporary folder renamed into place; an older entry is replaced)."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:16]}-", dir=self.root))
        try:
            out = np.lib.format.open_memmap(tmp / "embeddings.npy", mode="w+", dtype=np.float32, shape=shape)
            fill(out)
            out.flush()
            (tmp / "ids.json").write_text(json.dumps(list(ids), ensure_ascii=False))
            full = {**meta, "key": key, "rows": len(ids), "dim": int(shape[1]), "dtype": "float32",
                    "sha256": _array_digest(out)}  # fmt: skip
            del out
            (tmp / "meta.json").write_text(json.dumps(full, indent=2, ensure_ascii=False, default=str))
            target = self.path(key)
            if target.exists():
                old = target.with_name(f".{key[:16]}-old-{os.getpid()}")
                os.replace(target, old)
                shutil.rmtree(old, ignore_errors=True)
            os.replace(tmp, target)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not self.path(key).exists():  # another process may have written the same entry meanwhile
                raise
        return self.path(key)

    def load_faiss(self, key: str, name: str, rows: int, dim: int, mmap: bool = False) -> Any:
        """A stored faiss index ``name`` of the entry when it holds ``rows`` vectors of ``dim``; else ``None``.
        ``mmap``: its inverted lists are memory-mapped from the file (faiss ``IO_FLAG_MMAP``), not read into RAM."""
        import faiss

        path = self.path(key) / f"faiss-{name}.index"
        if not path.exists():
            return None
        try:
            index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP if mmap else 0)
        except RuntimeError as err:
            index, problem = None, f"it cannot be read ({err})"
        else:
            problem = None if (index.ntotal, index.d) == (rows, dim) else f"it holds {index.ntotal}x{index.d}"
        if problem is None:
            return index
        warnings.warn(f"faiss index {path} is not used, {problem}: building again", CacheWarning, stacklevel=3)
        return None

    def save_faiss(self, key: str, name: str, index: Any) -> None:
        """Store a faiss index beside the entry's embeddings (written to a temporary file, then renamed)."""
        import faiss

        entry = self.path(key)
        if not entry.is_dir():
            return
        fd, tmp = tempfile.mkstemp(prefix=f".faiss-{name}-", dir=entry)
        os.close(fd)
        try:
            faiss.write_index(index, tmp)
            os.replace(tmp, entry / f"faiss-{name}.index")
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)


