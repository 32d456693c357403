"""The on-disk cache: keys, atomic writes, concurrent writers, crash leftovers."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import threading
from pathlib import Path

from convrag.llm.cache import DiskCache, cache_key, default_cache_dir


def test_key_is_canonical_and_sensitive() -> None:
    a = {"backend": {"backend": "x", "model": "m"}, "messages": [{"role": "user", "content": "hi"}],
         "params": {"temperature": 0}, "schema": None}
    b = json.loads(json.dumps(a, sort_keys=False))
    b = dict(reversed(list(b.items())))
    assert cache_key(a) == cache_key(b)
    for change in ({"schema": {"type": "object"}}, {"params": {"temperature": 0.7}},
                   {"backend": {"backend": "x", "model": "m2"}},
                   {"messages": [{"role": "user", "content": "hi!"}]}):
        assert cache_key({**a, **change}) != cache_key(a)


def test_roundtrip_and_miss(tmp_path: Path) -> None:
    c = DiskCache(tmp_path)
    k = cache_key({"x": 1})
    assert c.get(k) is None
    c.put(k, {"text": "héllo"})
    assert c.get(k) == {"text": "héllo"}
    assert k in c and len(c) == 1
    c.clear()
    assert len(c) == 0


def test_default_dir_env(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CONVRAG_CACHE_DIR", str(tmp_path))
    assert default_cache_dir() == tmp_path / "llm"
    monkeypatch.delenv("CONVRAG_CACHE_DIR")
    assert default_cache_dir() == Path.home() / ".cache" / "convrag" / "llm"


def test_corrupt_and_partial_entries_are_misses(tmp_path: Path) -> None:
    c = DiskCache(tmp_path)
    k = cache_key({"x": 2})
    p = c.path(k)
    p.parent.mkdir(parents=True)
    p.write_text('{"key": "' + k + '", "value": {"text": "cut')  # a torn write (cannot happen via put)
    assert c.get(k) is None
    p.write_text(json.dumps({"key": "other", "value": {}}))
    assert c.get(k) is None
    c.put(k, {"text": "ok"})
    assert c.get(k) == {"text": "ok"}
    # a writer killed before os.replace leaves only a temp file, which is never read as an entry
    (p.parent / f".{k[:16]}.abc.tmp").write_text("{")
    assert c.get(k) == {"text": "ok"} and len(c) == 1


def test_concurrent_threads_same_key(tmp_path: Path) -> None:
    c = DiskCache(tmp_path)
    k = cache_key({"x": 3})
    seen: list[object] = []

    def writer(n: int) -> None:
        for i in range(30):
            c.put(k, {"text": f"{n}-{i}", "pad": "x" * 5000})
            seen.append(c.get(k))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(v, dict) and v["pad"] == "x" * 5000 for v in seen)
    assert not [p for p in tmp_path.rglob("*.tmp")]


def _proc_writer(directory: str, n: int) -> None:
    c = DiskCache(directory)
    for i in range(40):
        c.put(cache_key({"i": i % 10}), {"text": f"{n}-{i}", "pad": "y" * 20000})
        got = c.get(cache_key({"i": (i + 3) % 10}))
        assert got is None or got["pad"] == "y" * 20000


def test_concurrent_processes(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn" if os.name == "nt" else "fork")
    procs = [ctx.Process(target=_proc_writer, args=(str(tmp_path), n)) for n in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    c = DiskCache(tmp_path)
    assert len(c) == 10
    assert all(c.get(cache_key({"i": i}))["pad"] == "y" * 20000 for i in range(10))
