"""Overhead of `convrag evaluate` over the lexical retriever's own index + search, on release-shaped RECOR data.

Data: a synthetic RECOR release (``bench_build_scale.make_recor``: 11 domains; at scale 0.1 about 50k documents
and 296 turns, at 1 507,141 documents and 2,971 turns), built once with ``convrag build recor``.

Per retriever (``bm25s``, ``bm25``), each measurement in its own subprocess (wall time; peak RSS from that
child's ``os.wait4`` resource usage):

* evaluate: ``convrag evaluate BUILT --retrievers R --strategies baseline --bootstrap 0 --no-progress``;
* alone: a script that reads every domain's corpus (``_id``, ``title``, ``text``) and query texts from the
  built Parquet files and runs the same retriever class with its default settings (index, then top-100 search,
  domain by domain).

Each is run ``--repeat`` times (default 3), alternating, and the fastest run of each is kept (a run's peak RSS is
that of its fastest run), so that a busy moment of the machine is not read as overhead.

Printed: time and peak RSS of both and their ratios (targets: time <= 1.2x, RSS <= 1.2x), and whether every
query's top-10 is identical in both. Usage::

    python benchmarks/bench_evaluate_overhead.py [--scales 0.1 1] [--retrievers bm25s bm25] [--repeat 3] [--work /tmp/x]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_build_scale import make_recor  # noqa: E402

TOP_K, COMPARE_K = 100, 10

CLI = "import sys; from convrag.cli import main; sys.exit(main(sys.argv[1:]))"

ALONE = r"""
import sys
from pathlib import Path
import pyarrow.parquet as pq
from convrag.metrics.retrieval.trec import write_run
from convrag.retrievers import get_retriever
built, spec, out = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
domains = sorted(p.name[:-len("-queries")] for p in built.glob("*-queries") if not p.name.startswith("all-"))
run = {}
for domain in domains:
    corpus = pq.read_table(sorted((built / f"{domain}-corpus").glob("*.parquet")), columns=["_id", "title", "text"])
    queries = pq.read_table(sorted((built / f"{domain}-queries").glob("*.parquet")), columns=["_id", "text"])
    retriever = get_retriever(spec).index(corpus.to_pylist(), show_progress=False)
    del corpus
    texts = {q: t.strip() for q, t in zip(queries.column("_id").to_pylist(), queries.column("text").to_pylist())}
    run.update(retriever.search(texts, top_k=TOP_K, show_progress=False))
    del retriever
write_run(run, out, tag="alone")  # written as evaluate writes its runs (same score digits, same tie order)
""".replace("TOP_K", str(TOP_K))


def measure(args: list[str]) -> tuple[float, float]:
    """Run ``python ARGS`` in a subprocess: (wall seconds, peak RSS in MB of that child)."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read() if proc.stderr else ""
    if proc.returncode:
        raise SystemExit(f"{' '.join(args[:4])} failed ({proc.returncode}):\n{err[-3000:]}")
    return seconds, usage.ru_maxrss / 1024


def trec_top(path: Path, k: int) -> dict[str, list[str]]:
    """Query -> its first ``k`` documents in a TREC run file (file order is rank order)."""
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        qid, _, doc, *_ = line.split()
        docs = out.setdefault(qid, [])
        if len(docs) < k:
            docs.append(doc)
    return out


def prepare(work: Path, scale: float) -> Path:
    """The built folder of the synthetic release at ``scale`` (generated and built when missing)."""
    source, built = work / f"recor-{scale:g}", work / f"built-{scale:g}"
    if not source.exists():
        make_recor(source, scale)
    if not (built / "README.md").exists():
        t0 = time.perf_counter()
        measure(["-c", CLI, "build", "recor", "--source", str(source), "--out", str(built)])
        print(f"built {built} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return built


def compare(work: Path, built: Path, spec: str, repeat: int) -> dict:
    """Evaluate vs alone for one retriever on one built folder (the fastest of ``repeat`` runs of each)."""
    out, alone_run = work / f"eval-{built.name}-{spec}", work / f"alone-{built.name}-{spec}.trec"
    alone, evaluate = [], []
    for _ in range(repeat):
        alone.append(measure(["-c", ALONE, str(built), spec, str(alone_run)]))
        evaluate.append(measure(["-c", CLI, "evaluate", str(built), "--retrievers", spec, "--strategies", "baseline",
                                 "--bootstrap", "0", "--no-progress", "--out", str(out)]))  # fmt: skip
    (alone_s, alone_mb), (eval_s, eval_mb) = min(alone), min(evaluate)
    evaluated = trec_top(next((out / "runs").glob(f"{spec}*.trec")), COMPARE_K)
    alone = trec_top(alone_run, COMPARE_K)
    same = evaluated == alone
    return {"eval_s": eval_s, "eval_mb": eval_mb, "alone_s": alone_s, "alone_mb": alone_mb, "same_top10": same,
            "queries": len(alone)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scales", type=float, nargs="+", default=[0.1, 1.0])
    parser.add_argument("--retrievers", nargs="+", default=["bm25s", "bm25"])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement; the fastest is kept")
    parser.add_argument("--work", default=None, help="folder for data and results (default: a new /tmp folder)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="convrag-bench-evaluate-"))
    rows = []
    for scale in args.scales:
        built = prepare(work, scale)
        for spec in args.retrievers:
            r = compare(work, built, spec, args.repeat)
            rows.append((scale, spec, r))
            print(f"x{scale:g} {spec}: {r}", file=sys.stderr)
    print("| scale | retriever | queries | evaluate s | alone s | time ratio | evaluate RSS MB | alone RSS MB | "
          "RSS ratio | same top-10 |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for scale, spec, r in rows:
        print(f"| {scale:g} | {spec} | {r['queries']} | {r['eval_s']:.1f} | {r['alone_s']:.1f} | "
              f"{r['eval_s'] / r['alone_s']:.2f}x | {r['eval_mb']:.0f} | {r['alone_mb']:.0f} | "
              f"{r['eval_mb'] / r['alone_mb']:.2f}x | {'yes' if r['same_top10'] else 'NO'} |")  # fmt: skip


if __name__ == "__main__":
    main()
