"""Curation + clustering end to end on real passages (MTRAG cited passages, HotpotQA paragraphs), offline,
and a run killed with SIGKILL at several points then rerun giving the output of an uninterrupted run."""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from scipy import sparse

from convrag.cli import main
from convrag.synthesis.curation.text import jaccard, shingles
from convrag.synthesis.engine.shards import iter_shard, shard_files
from convrag.synthesis.mtr.cluster import read_clusters
from tests.conftest import DATA

pytestmark = pytest.mark.slow
FAST_EMBED = ["--stages", "curate,cluster", "--option", "max_seq_length=64"]  # short inputs: plumbing, not quality
#: MTRAG's ~960 curated chunks: shorter still (the clusters' shape is checked, not what they group)
FASTER_EMBED = ["--stages", "curate,cluster", "--option", "max_seq_length=32"]


def _corpus(out: Path) -> list[dict]:
    return [row for path in shard_files(out / "curate" / "corpus") for row in iter_shard(path)]


def _report(out: Path, stage: str) -> dict:
    return json.loads((out / stage / "report.json").read_text())


def _check_clusters(out: Path, ids: list[str], cluster_size: int) -> list[list[str]]:
    clusters = [docs for _, docs in read_clusters(out)]
    flat = [d for docs in clusters for d in docs]
    assert len(flat) == len(set(flat)), "a document is in two clusters"
    dropped = pq.read_table(out / "cluster" / "dropped.parquet").column("_id").to_pylist()
    assert sorted(flat + dropped) == sorted(ids)
    assert all(len(docs) >= cluster_size for docs in clusters)
    return clusters


def _max_pair_jaccard(texts: list[str]) -> float:
    """The largest Jaccard similarity of two texts' shingle sets, over every pair whose sizes allow 0.5 or more
    (J <= |small| / |large|). Exact: every pair's |A & B| comes at once from the sparse text x shingle incidence
    matrix X (X X^T), |A | B| = |A| + |B| - |A & B|; the best pair is read again with ``jaccard`` itself."""
    sets = [shingles(t) for t in texts]
    sizes = np.array([len(s) for s in sets], dtype=np.float64)
    allowed = np.triu(np.minimum.outer(sizes, sizes) >= 0.5 * np.maximum.outer(sizes, sizes), k=1)
    if not allowed.any():
        return 0.0
    ids: dict[str, int] = {}
    columns = [ids.setdefault(shingle, len(ids)) for group in sets for shingle in group]
    rows = np.cumsum([0, *(len(s) for s in sets)])
    x = sparse.csr_matrix((np.ones(len(columns), dtype=np.int32), columns, rows), shape=(len(sets), len(ids)))
    inter = (x @ x.T).toarray().astype(np.float64)
    union = sizes[:, None] + sizes[None, :] - inter
    sim = np.where(allowed, inter / np.maximum(union, 1), -1.0)  # union 0: both sets empty, J = 0
    i, j = np.unravel_index(int(np.argmax(sim)), sim.shape)
    best = jaccard(sets[i], sets[j])
    assert math.isclose(best, sim[i, j], rel_tol=0, abs_tol=1e-12)
    return best


@pytest.fixture(scope="module")
def hotpot_jsonl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The distinct paragraphs of the shared HotpotQA records (first occurrence of each title)."""
    paragraphs: dict[str, str] = {}
    for name in ("hotpot_dev_distractor_v1.first30.json", "hotpot_train_v1.1.first10.indent4.json"):
        for record in json.loads((DATA / "hotpotqa" / name).read_text(encoding="utf-8")):
            for title, sentences in record["context"]:
                paragraphs.setdefault(title, "".join(sentences))
    path = tmp_path_factory.mktemp("hotpot") / "paragraphs.jsonl"
    path.write_text("".join(json.dumps({"_id": f"p{i}", "title": t, "text": x}) + "\n"
                            for i, (t, x) in enumerate(paragraphs.items())), encoding="utf-8")
    return path


def test_mtrag_cited_passages_curate_and_cluster(mtrag_cited: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "syn"
    assert main(["synthesize", "mtr", "--corpus", str(mtrag_cited), "--out", str(out), *FASTER_EMBED]) == 0
    printed = capsys.readouterr().out
    assert "curate: 2,021 in ->" in printed and "dropped" in printed and "cluster:" in printed
    curate = _report(out, "curate")
    rows = _corpus(out)
    assert curate["records_in"] == 2021 and curate["records_out"] == len(rows) > 300
    # every chunk the splitter made is either kept or dropped for a stated reason
    chunks_made = curate["figures"]["chunks"] + curate["dropped"]["chunk_too_short"]
    assert chunks_made == len(rows) + sum(curate["dropped"].values())
    assert all(1024 <= len(r["text"]) <= 2048 for r in rows)
    assert all(r["heuristic_quality"] == "pass" for r in rows)
    assert _max_pair_jaccard([r["text"] for r in rows]) < 0.5
    assert curate["dropped"]["near_duplicate"] > 0  # MTRAG's passages overlap: the dedup has real work here
    _check_clusters(out, [r["_id"] for r in rows], 8)
    params = json.loads((out / "cluster" / "params.json").read_text())
    assert params["seed"] == 0 and params["params"]["cluster_size"] == 8 and params["params"]["k"] == 100


def test_hotpotqa_paragraphs_curate_and_cluster_with_small_chunks(hotpot_jsonl: Path, tmp_path: Path) -> None:
    out = tmp_path / "syn"
    assert main(["synthesize", "mtr", "--corpus", str(hotpot_jsonl), "--out", str(out), *FAST_EMBED,
                 "--option", "chunk_size=512", "--option", "cluster_size=6", "--option", "k=20"]) == 0
    rows = _corpus(out)
    assert _report(out, "curate")["records_in"] == 391 and len(rows) > 100
    assert all(256 <= len(r["text"]) <= 512 for r in rows)
    assert _max_pair_jaccard([r["text"] for r in rows]) < 0.5
    clusters = _check_clusters(out, [r["_id"] for r in rows], 6)
    # the random baseline on the same corpus: exact blocks of 6, a partial last block dropped and counted
    assert main(["synthesize", "mtr", "--corpus", str(hotpot_jsonl), "--out", str(tmp_path / "rnd"), *FAST_EMBED,
                 "--option", "chunk_size=512", "--option", "cluster_size=6", "--option", "method=random"]) == 0
    random_clusters = [docs for _, docs in read_clusters(tmp_path / "rnd")]
    assert all(len(d) == 6 for d in random_clusters) and len(random_clusters) == len(rows) // 6
    assert random_clusters != clusters
    # the optional adjacent near-duplicate skip (a low threshold here, so that it has work on this corpus)
    assert main(["synthesize", "mtr", "--corpus", str(hotpot_jsonl), "--out", str(tmp_path / "nd"), *FAST_EMBED,
                 "--option", "chunk_size=512", "--option", "cluster_size=6", "--option", "k=20",
                 "--option", "near_duplicate_jaccard=0.12"]) == 0
    assert _report(tmp_path / "nd", "cluster")["figures"]["skipped_near_duplicates"] > 0
    _check_clusters(tmp_path / "nd", [r["_id"] for r in rows], 6)


def _snapshot(out: Path) -> dict:
    """Everything a run produces that must not depend on interruptions (timings left out)."""
    snap = {"corpus": _corpus(out), "clusters": read_clusters(out),
            "dropped": pq.read_table(out / "cluster" / "dropped.parquet").to_pylist(),
            "near_duplicates": pq.read_table(out / "curate" / "dedup" / "near_duplicates.parquet").to_pylist()}
    for stage in ("curate", "cluster"):
        report = _report(out, stage)
        report.pop("seconds")
        snap[stage] = report
        snap[f"{stage}-params"] = json.loads((out / stage / "params.json").read_text())
    return snap


def _wait_until_started(out: Path, proc: subprocess.Popen) -> None:
    """Until the run writes ``pipeline.json`` (interpreter and command-line imports done, the stages about to run),
    or ends."""
    while not (out / "pipeline.json").is_file() and proc.poll() is None:
        time.sleep(0.05)


def test_sigkill_at_random_points_then_rerun_gives_the_uninterrupted_output(hotpot_jsonl: Path,
                                                                            tmp_path: Path) -> None:
    """Three kills, at random points of the stages' work: the clock starts when a run writes ``pipeline.json``,
    so that no kill is spent on the interpreter starting (nothing written yet, nothing to resume)."""
    def command(out: Path) -> list[str]:
        return [sys.executable, "-m", "convrag.cli", "synthesize", "mtr", "--corpus", str(hotpot_jsonl),
                "--out", str(out), "--stages", "curate,cluster", "--tasks", "3", "--workers", "1",
                "--option", "chunk_size=512",
                "--option", "max_seq_length=32", "--option", "block=32", "--option", "k=20"]

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with open(tmp_path / "clean.log", "w") as log:
        clean = subprocess.Popen(command(tmp_path / "clean"), env=env, stdout=log, stderr=subprocess.STDOUT)
        _wait_until_started(tmp_path / "clean", clean)
        start = time.perf_counter()
        assert clean.wait() == 0, (tmp_path / "clean.log").read_text()[-2000:]
    work = time.perf_counter() - start
    expected = _snapshot(tmp_path / "clean")

    rng = random.Random(13)
    for n, fraction in enumerate((0.25, 0.5, 0.75)):
        out = tmp_path / f"killed{n}"
        proc = subprocess.Popen(command(out), env=env, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_until_started(out, proc)
        time.sleep(work * (fraction + rng.uniform(-0.1, 0.1)))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        finished = subprocess.run(command(out), env=env, capture_output=True, text=True)
        assert finished.returncode == 0, finished.stderr[-2000:]
        assert _snapshot(out) == expected, f"run killed at {fraction:.0%} differs after the rerun"
        assert not list(out.rglob("*.tmp"))
