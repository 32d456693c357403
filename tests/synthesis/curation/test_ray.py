"""Curation on a real Ray cluster (``--option executor=ray``, datatrove's Ray executor): a local Ray head of 2 CPUs,
the same command as the README's, and the same output as the local executor's, byte for byte."""

from __future__ import annotations

import importlib.util
import json
import secrets
from pathlib import Path

import pytest

from convrag.cli import main
from convrag.core.errors import ConvragError
from convrag.synthesis.curation.curate import Curate
from tests.synthesis.curation.test_curation import _mtrag_passages

#: Files of a run that name when they were made or how long it took, not what was made.
TIMED = {"curate/report.json", "inputs.json"}


def _source(tmp_path: Path) -> Path:
    """The first 100 real MTRAG cited passages in two files of 50, and in the second a copy of a passage of the first
    under another id, so that the dedup task works across the two chunk tasks' shards."""
    rows = [json.loads(line) for line in _mtrag_passages(tmp_path / "all.jsonl", 100).read_text().splitlines()]
    copy = {**rows[3], "_id": "copy-of-" + rows[3]["_id"]}
    folder = tmp_path / "src"
    folder.mkdir()
    for name, part in (("a.jsonl", rows[:50]), ("b.jsonl", [*rows[50:], copy])):
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in part), encoding="utf-8")
    return folder


def _curate(source: Path, out: Path, *extra: str, tasks: int = 2) -> int:
    return main(["synthesize", "mtr", "--corpus", str(source), "--out", str(out), "--stages", "curate",
                 "--tasks", str(tasks), *extra])


def _files(out: Path) -> dict[str, bytes]:
    """Every file of a run but datatrove's logs, stats and completion markers (``_datatrove``)."""
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and "_datatrove" not in p.parts}


def _untimed(name: str, data: bytes) -> dict:
    """A timed file without its times: the report without ``seconds`` (and ``execution``, compared on its own), the
    input fingerprints without the ``hashed_at`` of each file."""
    value = json.loads(data)
    if name == "curate/report.json":
        value.pop("seconds")
        value["figures"].pop("execution")
    else:
        for stage in value["stages"].values():
            for entry in stage["files"].values():
                entry.pop("hashed_at")
    return value


def test_executor_ray_without_ray_fails_before_any_work(tmp_path: Path, monkeypatch) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else find_spec(name, *a))
    with pytest.raises(ConvragError, match=r"executor=ray needs Ray, .*: pip install 'convrag\[ray\]'"):
        Curate(str(tmp_path), executor="ray")


@pytest.mark.slow
def test_ray_executor_gives_the_local_executors_output(tmp_path: Path, capsys, monkeypatch) -> None:
    """The README's curation command with ``--option executor=ray`` on a local Ray head writes the same files as the
    local executor (two chunk tasks, the dedup task, two filter tasks), and a task's error comes back as the same
    one-line error (exit 2) it is locally."""
    ray = pytest.importorskip("ray", reason="the ray extra: pip install -e '.[ray]'")
    source = _source(tmp_path)
    assert _curate(source, tmp_path / "local") == 0
    # Ray's token authentication (on by default for a new local head) with a token of this test's own: without one,
    # ray.init() writes ~/.ray/auth_token. It sets RAY_AUTH_MODE=token in this process; delenv puts it back as it was
    monkeypatch.setenv("RAY_AUTH_TOKEN", secrets.token_hex(32))
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        capsys.readouterr()
        assert _curate(source, tmp_path / "ray", "--option", "executor=ray") == 0
        printed = capsys.readouterr().out
        assert ray.is_initialized()  # a cluster the caller connected to is left as it was
        assert "curate: Ray cluster at " in printed and "(2 CPUs)" in printed
        assert "curate: chunk (2 task(s), at most 2 at once)" in printed

        local, on_ray = _files(tmp_path / "local"), _files(tmp_path / "ray")
        assert sorted(on_ray) == sorted(local)
        assert {"curate/corpus/00000.parquet", "curate/corpus/00001.parquet", "curate/dedup/near_duplicates.parquet",
                "curate/chunks/00000.parquet", "curate/chunks/00001.parquet", "curate/params.json"} <= set(local)
        for name in sorted(local):
            if name in TIMED:
                assert _untimed(name, on_ray[name]) == _untimed(name, local[name]), name
            else:
                assert on_ray[name] == local[name], name
        reports = [json.loads(files["curate/report.json"]) for files in (local, on_ray)]
        assert [r["figures"]["execution"] for r in reports] == ["in this process", "Ray tasks"]
        assert reports[0]["records_in"] == 101 and reports[0]["records_out"] > 50
        assert reports[0]["dropped"]["near_duplicate"] == 1
        for name, tasks in (("chunk", 2), ("dedup", 1), ("filter", 2)):
            logs = tmp_path / "ray" / "curate" / "_datatrove" / f"{name}-{tasks}tasks"
            assert len(list((logs / "completions").iterdir())) == tasks and not (logs / "errors").exists()

        # a task's error on Ray: the same line and exit status as locally, not a wait for a dependency that failed
        # (the dedup task finds the id of a.jsonl's line 4 again in b.jsonl, line 6; one chunk task, one Ray worker
        # fewer to start)
        bad = tmp_path / "bad"
        bad.mkdir()
        lines = (source / "a.jsonl").read_text().splitlines(keepends=True)
        (bad / "a.jsonl").write_text("".join(lines[:5]))
        (bad / "b.jsonl").write_text("".join(lines[5:10] + lines[3:4]))
        capsys.readouterr()
        whole = ("--option", "corpus_level=passage")  # every passage is a chunk, so the copy reaches the dedup task
        assert _curate(bad, tmp_path / "local-bad", *whole, tasks=1) == 2
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert "b.jsonl:6: duplicate document id" in error and "a.jsonl:4)" in error
        assert _curate(bad, tmp_path / "ray-bad", *whole, "--option", "executor=ray", tasks=1) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == error
        assert (tmp_path / "ray-bad" / "curate" / "_datatrove" / "dedup-1tasks" / "errors" / "00000.json").is_file()
    finally:
        ray.shutdown()
