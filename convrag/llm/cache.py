"""On-disk response cache: one JSON file per key, written atomically (temp file + ``os.replace``).

Safe with concurrent writers (threads or processes: the last complete write wins, readers never see a
partial file) and after a crash (a killed writer leaves at most a stray temp file, never an entry).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

CACHE_ENV = "CONVRAG_CACHE_DIR"
FORMAT_VERSION = 1


def default_cache_dir() -> Path:
    """``$CONVRAG_CACHE_DIR/llm`` if set, else ``~/.cache/convrag/llm``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) / "llm" if env else Path.home() / ".cache" / "convrag" / "llm"


def canonical_json(obj: Any) -> str:
    """Deterministic JSON: sorted keys, no whitespace, non-ASCII kept."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def cache_key(payload: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a request (backend identity, messages, params, schema)."""
    return hashlib.sha256(canonical_json({"v": FORMAT_VERSION, **payload}).encode()).hexdigest()


class DiskCache:
    """A directory of ``<key[:2]>/<key>.json`` files."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.dir = Path(directory) if directory is not None else default_cache_dir()

    def path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored entry, or None (missing or unreadable entries are misses)."""
        p = self.path(key)
        try:
            with p.open(encoding="utf-8") as f:
                entry = json.load(f)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, ValueError):
            return None  # unreadable: treated as a miss and overwritten by the next put
        if not isinstance(entry, dict) or entry.get("key") != key:
            return None
        return entry.get("value")

    def put(self, key: str, value: dict[str, Any], *, request: dict[str, Any] | None = None) -> None:
        """Store ``value`` under ``key`` atomically; ``request`` is kept alongside for inspection."""
        p = self.path(key)
        p.parent.mkdir(parents=True, exist_ok=True)
        data = canonical_json({"key": key, "value": value, "request": request})
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=p.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, p)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def __len__(self) -> int:
        return sum(1 for _ in self.dir.glob("??/*.json")) if self.dir.exists() else 0

    def clear(self) -> None:
        """Remove every entry (and stray temp files)."""
        if not self.dir.exists():
            return
        for p in list(self.dir.glob("??/*")):
            with contextlib.suppress(OSError):
                p.unlink()
