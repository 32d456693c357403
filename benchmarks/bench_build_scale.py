"""Build time, peak RSS and source opens of `convrag build` on release-shaped synthetic data, at 1/10 and full size.

Data (seeded, written under ``--work``, default a folder in /tmp):

* RECOR: 11 domains, 507,141 documents, 707 conversations / 2,971 turns (release file layout and fields);
* MTRAG: a clapnq-size corpus of 183,408 passages in ``corpora/passage_level/clapnq.jsonl.zip``;
* MTR-Bench: an MTR-DOCUMENT-shaped corpus of 1,041,047 passages (``corpus.parquet``: id, url, title, text,
  naive_quality, edu_quality; row index = document_idx) and a 12-turn ``test.parquet`` split whose turns quote
  8 corpus passages each (ctxs) with one gold.

Each build runs in its own subprocess started through a small wrapper that counts ``open`` audit events and
``pyarrow.parquet.ParquetFile`` openings (footer reads included) per source file and reports its own peak RSS
(``ru_maxrss``). Usage::

    python benchmarks/bench_build_scale.py [--scales 0.1 1] [--only recor mtrag mtr-bench] [--work /tmp/x]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

RECOR_DOCS, RECOR_CONVERSATIONS, RECOR_TURNS = 507_141, 707, 2_971
RECOR_FILES = ("biology", "earth_science", "economics", "psychology", "robotics", "sustainable_living",
               "Drones", "hardware", "law", "medicalsciences", "politics")  # fmt: skip
CLAPNQ_PASSAGES = 183_408
MTR_DOCUMENTS, MTR_CONVERSATIONS, MTR_TURNS = 1_041_047, 200, 12
WORDS = [
    "".join(random.Random(i).choice("abcdefghijklmnopqrstuvwxyz") for _ in range(random.Random(-i).randint(2, 10)))
    for i in range(5000)
]

WRAPPER = r"""
import json, os, resource, sys
root, report = os.path.realpath(sys.argv[1]), sys.argv[2]
opens = {}
def hook(event, args):
    if event == "open" and isinstance(args[0], str) and (args[1] is None or "r" in str(args[1])):
        path = os.path.realpath(args[0])
        if path.startswith(root + os.sep) and os.path.isfile(path):
            opens[path] = opens.get(path, 0) + 1
sys.addaudithook(hook)
import pyarrow.parquet as pq
_parquet_init = pq.ParquetFile.__init__
def counted_init(self, source, *args, **kwargs):
    if isinstance(source, str):
        hook("open", (source, "rb"))
    _parquet_init(self, source, *args, **kwargs)
pq.ParquetFile.__init__ = counted_init
from convrag.cli import main
try:
    code = main(sys.argv[3:])
finally:
    with open(report, "w") as out:
        json.dump({"opens": opens, "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}, out)
sys.exit(code)
"""


def _text(rng: random.Random, mean_words: int) -> str:
    """Random words, length drawn around ``mean_words`` (documents of BRIGHT / Wikipedia size)."""
    n = max(5, int(rng.expovariate(1 / mean_words)))
    return " ".join(rng.choices(WORDS, k=n))


def make_recor(root: Path, scale: float, seed: int = 0) -> None:
    """The RECOR release layout: ``data/benchmark/<D>_benchmark.jsonl`` and ``data/corpus/<D>_documents.jsonl``."""
    rng = random.Random(seed)
    (root / "data" / "benchmark").mkdir(parents=True)
    (root / "data" / "corpus").mkdir(parents=True)
    n_docs, n_convs = int(RECOR_DOCS * scale), max(len(RECOR_FILES), int(RECOR_CONVERSATIONS * scale))
    turns_left = int(RECOR_TURNS * scale)
    for i, name in enumerate(RECOR_FILES):
        docs = n_docs // len(RECOR_FILES) + (1 if i < n_docs % len(RECOR_FILES) else 0)
        ids = [f"{name.lower()}_doc_{j}.txt" for j in range(docs)]
        with open(root / "data" / "corpus" / f"{name}_documents.jsonl", "w") as out:
            for doc_id in ids:
                out.write(json.dumps({"doc_id": doc_id, "content": _text(rng, 180)}) + "\n")
        convs = n_convs // len(RECOR_FILES) + (1 if i < n_convs % len(RECOR_FILES) else 0)
        with open(root / "data" / "benchmark" / f"{name}_benchmark.jsonl", "w") as out:
            for c in range(convs):
                k = max(1, min(turns_left, round(RECOR_TURNS / RECOR_CONVERSATIONS + rng.uniform(-1, 1))))
                turns_left -= k
                turns = [{"turn_id": t + 1, "query": _text(rng, 20), "answer": _text(rng, 60),
                          "gold_doc_ids": rng.sample(ids, min(len(ids), rng.randint(1, 4))),
                          "conversation_history": _text(rng, 40), "subquestion_reasoning": _text(rng, 40),
                          "subquestion_reasoning_metadata": {"target_information": _text(rng, 10),
                                                             "relevance_signals": [_text(rng, 5)],
                                                             "irrelevance_signals": [_text(rng, 5)]}}
                         for t in range(k)]  # fmt: skip
                out.write(json.dumps({
                    "id": f"{name.lower()}_{c}", "task": name.lower(), "turns": turns,
                    "original_query": _text(rng, 30), "original_answer": _text(rng, 60),
                    "metadata": {"created_at": "2025-01-01", "gold_doc_count": 3, "method": "synthetic",
                                 "num_turns": k, "source": "bench", "version": "1"},
                }) + "\n")  # fmt: skip


def make_mtrag(root: Path, scale: float, seed: int = 0) -> None:
    """A clapnq-size passage corpus at ``corpora/passage_level/clapnq.jsonl.zip`` (one JSONL member)."""
    rng = random.Random(seed)
    folder = root / "corpora" / "passage_level"
    folder.mkdir(parents=True)
    with (zipfile.ZipFile(folder / "clapnq.jsonl.zip", "w", zipfile.ZIP_DEFLATED) as archive,
          archive.open("clapnq.jsonl", "w") as raw):  # fmt: skip
        for i in range(int(CLAPNQ_PASSAGES * scale)):
            row = {"_id": f"{i}-{i * 7}", "title": _text(rng, 4), "text": _text(rng, 90), "url": f"https://x/{i}"}
            raw.write((json.dumps(row) + "\n").encode())


def _mtr_document(idx: int) -> dict:
    """Corpus row ``idx`` of the synthetic MTR-DOCUMENT (a function of ``idx``, so turns can quote it)."""
    rng = random.Random(idx)
    title = _text(rng, 3)
    return {"id": f"{idx}-0", "url": f"https://en.wikipedia.org/wiki/{idx}", "title": title, "text": _text(rng, 240),
            "naive_quality": 0, "edu_quality": 2.5}  # fmt: skip


def make_mtr_bench(root: Path, scale: float, seed: int = 0) -> None:
    """``corpus.parquet`` (MTR-DOCUMENT shape, ``scale`` x 1,041,047 rows) and a 12-turn ``test.parquet``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir(parents=True)
    n_docs = int(MTR_DOCUMENTS * scale)
    schema = pa.schema([("id", pa.string()), ("url", pa.string()), ("title", pa.string()), ("text", pa.string()),
                        ("naive_quality", pa.int64()), ("edu_quality", pa.float64())])  # fmt: skip
    with pq.ParquetWriter(root / "corpus.parquet", schema) as writer:
        for start in range(0, n_docs, 10_000):
            rows = [_mtr_document(i) for i in range(start, min(n_docs, start + 10_000))]
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))
    rng = random.Random(seed)
    rows = []
    for c in range(MTR_CONVERSATIONS):
        ctxs = [{"document_idx": i, **_mtr_document(i)} for i in rng.sample(range(n_docs), 8)]
        messages: list[dict] = []
        for t in range(1, MTR_TURNS + 1):
            messages = [*messages, {"role": "user", "content": _text(rng, 15)},
                        {"role": "assistant", "content": _text(rng, 40)}]  # fmt: skip
            gold = rng.choice(ctxs)
            rows.append({"messages": messages, "ctxs": ctxs, "ground_truth_document_idx": gold["document_idx"],
                         "ground_truth_ctx": gold, "cluster_idx": c, "turn": t, "switch_turn": -1})  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), root / "test.parquet")


def run_build(benchmark: str, source: Path, out: Path) -> dict:
    """Run ``convrag build`` in a subprocess; returns seconds, peak RSS (MB) and opens per source file."""
    report = out.with_suffix(".json")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", WRAPPER, str(source), str(report), "build", benchmark,
                           "--source", str(source), "--out", str(out), "--overwrite"],
                          capture_output=True, text=True)  # fmt: skip
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"build {benchmark} failed:\n{proc.stderr[-3000:]}")
    data = json.loads(report.read_text())
    files = sorted(p for p in (str(q.resolve()) for q in source.rglob("*") if q.is_file()))
    opens = [data["opens"].get(p, 0) for p in files]
    return {"seconds": seconds, "rss_mb": data["maxrss_kb"] / 1024, "files": len(files),
            "opens_min": min(opens), "opens_max": max(opens)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scales", type=float, nargs="+", default=[0.1, 1.0])
    parser.add_argument("--only", nargs="+", default=["recor", "mtrag", "mtr-bench"],
                        choices=["recor", "mtrag", "mtr-bench"])  # fmt: skip
    parser.add_argument("--work", default=None, help="folder for the synthetic data (default: a new /tmp folder)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="convrag-bench-build-"))
    makers = {"recor": make_recor, "mtrag": make_mtrag, "mtr-bench": make_mtr_bench}
    rows = []
    for benchmark in args.only:
        for scale in args.scales:
            source = work / f"{benchmark}-{scale:g}"
            if not source.exists():
                t0 = time.perf_counter()
                makers[benchmark](source, scale)
                print(f"generated {source} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
            result = run_build(benchmark, source, work / f"out-{benchmark}-{scale:g}")
            rows.append((benchmark, scale, result))
            print(f"built {benchmark} x{scale:g}: {result}", file=sys.stderr)
    print("| benchmark | scale | build s | peak RSS MB | source files | opens per file (min-max) |")
    print("|---|---|---|---|---|---|")
    for benchmark, scale, r in rows:
        print(f"| {benchmark} | {scale:g} | {r['seconds']:.1f} | {r['rss_mb']:.0f} | {r['files']} | "
              f"{r['opens_min']}-{r['opens_max']} |")
    for benchmark in args.only:
        rss = [r["rss_mb"] for b, _, r in rows if b == benchmark]
        if len(rss) > 1:
            print(f"{benchmark}: peak RSS largest / smallest scale = {max(rss) / min(rss):.2f}x")


if __name__ == "__main__":
    main()
