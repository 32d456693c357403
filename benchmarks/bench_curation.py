"""Speed of the curation stage (``Curate``) on datatrove's local executor vs a plain single-process loop.

Corpus: ``--docs`` synthetic Wikipedia-like documents (default 100,000), seeded, written as ``--files`` JSONL
files (default 8, consecutive blocks; the reader deals files to tasks round-robin). A document is a title and
2-8 paragraphs; sentences are Zipf-drawn words (exponent 0.95) of a 50,000-word vocabulary (the shared
HotpotQA sample's words when present, then made-up words), so two unrelated chunks have a character 5-gram
Jaccard of about 0.04 (MTRAG's cited passages: 0.035). Most documents give 1-3 chunks of 1024-2048
characters, some none. About 20% end in a "References" / "See also" tail, about 4% carry a list of short
bullet lines (for the quality rules) and about 5% are near-copies of an earlier document, 2-6 words changed.

Timed (wall clock, own output folder each, the stage's defaults except ``--minhash-mode``): ``engine 8x1``,
``Pipeline("mtr", [Curate(src, tasks=8, workers=1)])``; ``engine 8x2``, the same with 2 worker processes (the
dedup pipeline is one task either way); ``plain loop``, the same steps in one process and one pass: read ->
boilerplate cut -> chunking -> MinHash -> greedy keep-first near-duplicate check -> heuristic scorer -> Parquet.

Checked: the three keep the same chunk ids and count the same drops per reason (``StageReport.dropped`` vs
the loop's counters); a difference is printed as MISMATCH. Printed: seconds, documents/s, chunks/s (chunks
long enough to keep), speed-ups, CPU seconds, the time of each engine pipeline (from the executor's log
files) and of each plain-loop step, load average, and peak RSS of this process and of its waited-for
children (``getrusage``) plus the peak summed RSS of all descendants sampled with psutil every 0.2 s
(datatrove's workers are children of its forkserver, so ``RUSAGE_CHILDREN`` misses them).

Cost: ``--minhash-mode verified`` (the stage's default) screens every LSH candidate by its MinHash estimate and
checks the likely ones with an exact Jaccard (``minhash_dedup.confirmed``, shared by the stage and the plain
loop); its bands (42 x 3) make about 0.4% of the kept chunks candidates of each query here, and the screen keeps
the exact checks to the few likely pairs (before it, dedup grew with the square of the corpus: 17 s at 2,000
documents, on course for 11 hours at 100,000). ``authors`` mode checks nothing. ``--reuse DIR`` times the plain
loop again over a finished work folder and compares it with the engine runs recorded there.
Not a test; run it by hand:

    python benchmarks/bench_curation.py [--docs 100000] [--files 8] [--seed 0] [--out DIR] [--skip-plain]
        [--minhash-mode verified|authors] [--reuse DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import resource
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from datasketch import MinHashLSH

from convrag.synthesis.boilerplate import cut_tail
from convrag.synthesis.chunking import Chunker
from convrag.synthesis.corpus_source import corpus_files, iter_file
from convrag.synthesis.curate import Curate
from convrag.synthesis.engine import Pipeline
from convrag.synthesis.minhash_dedup import MODES, confirmed, recall_bands, signature
from convrag.synthesis.quality import HeuristicScorer
from convrag.synthesis.shards import shard_files

HOTPOT = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"
ONSETS = ("b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "br", "ch",
          "cl", "dr", "fl", "gr", "pl", "pr", "sh", "st", "th", "tr")
VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "ie", "ou", "y")
PLAIN_SCHEMA = pa.schema([(name, pa.int64() if name in ("chunk", "source_line") else pa.string()) for name in (
    "_id", "title", "text", "source_id", "chunk", "source_file", "source_line", "heuristic_quality")])


def vocabulary(size: int = 50_000) -> list[str]:
    """Words by frequency: the HotpotQA sample's words if present, then made-up words of 2-4 random syllables
    (from a fixed-seed RNG, so they share few character 5-grams with each other)."""
    counts: Counter[str] = Counter()
    if HOTPOT.exists():
        for record in json.loads(HOTPOT.read_text(encoding="utf-8")):
            for title, sentences in record["context"]:
                counts.update(re.findall(r"[a-z]+", f"{title} {' '.join(sentences)}".lower()))
    words = [w for w, _ in counts.most_common()][:size]
    known = set(words)
    rng = np.random.default_rng(12345)
    while len(words) < size:
        word = "".join(ONSETS[rng.integers(len(ONSETS))] + VOWELS[rng.integers(len(VOWELS))]
                       for _ in range(int(rng.integers(2, 5))))
        if word not in known:
            words.append(word)
            known.add(word)
    return words


class Writer:
    """Seeded text generator: Zipf-distributed words, sentences, paragraphs, tails and bullet lists."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.vocab = vocabulary()
        weights = 1.0 / np.arange(1, len(self.vocab) + 1) ** 0.95
        self.cdf = np.cumsum(weights / weights.sum())

    def words(self, n: int) -> list[str]:
        picks = np.minimum(np.searchsorted(self.cdf, self.rng.random(n)), len(self.vocab) - 1)
        return [self.vocab[i] for i in picks]

    def sentence(self) -> str:
        words = self.words(int(self.rng.integers(8, 27)))
        for i in np.nonzero(self.rng.random(len(words) - 1) < 0.06)[0]:
            words[i] += ","
        text = " ".join(words)
        return text[0].upper() + text[1:] + "."

    def paragraph(self) -> str:
        return " ".join(self.sentence() for _ in range(int(self.rng.integers(3, 9))))

    def title(self) -> str:
        return " ".join(w.capitalize() for w in self.words(int(self.rng.integers(1, 4))))

    def bullets(self) -> str:
        return "\n".join("* " + " ".join(self.words(int(self.rng.integers(1, 4))))
                         for _ in range(int(self.rng.integers(15, 40))))

    def tail(self) -> str:
        if self.rng.random() < 0.5:
            refs = (f"{self.title()} ({int(self.rng.integers(1900, 2024))}). {self.sentence()}"
                    for _ in range(int(self.rng.integers(2, 12))))
            return "\n\nReferences\n" + "\n".join(refs)
        return "\n\nSee also\n" + "\n".join(f"* {self.title()}" for _ in range(int(self.rng.integers(2, 8))))

    def document(self) -> str:
        paragraphs = [self.paragraph() for _ in range(int(self.rng.integers(2, 9)))]
        if self.rng.random() < 0.04:
            paragraphs.insert(int(self.rng.integers(1, len(paragraphs) + 1)), self.bullets())
        return "\n\n".join(paragraphs) + (self.tail() if self.rng.random() < 0.2 else "")

    def near_copy(self, text: str) -> str:
        """``text`` with 2-6 of its plain words (letters only, so no line break or heading) replaced."""
        tokens = text.split(" ")
        plain = [i for i, token in enumerate(tokens) if token.isalpha()]
        for i in self.rng.choice(plain, size=min(len(plain), int(self.rng.integers(2, 7))), replace=False):
            tokens[i] = self.words(1)[0]
        return " ".join(tokens)


def build(n_docs: int, seed: int) -> list[dict[str, str]]:
    """Deterministic rows ``{_id, title, text}``; about 5% are near-copies of an earlier document."""
    writer = Writer(seed)
    rows: list[dict[str, str]] = []
    for i in range(n_docs):
        if i and writer.rng.random() < 0.05:
            text = writer.near_copy(rows[int(writer.rng.integers(0, i))]["text"])
        else:
            text = writer.document()
        rows.append({"_id": f"doc{i:07d}", "title": writer.title(), "text": text})
    return rows


def write_corpus(rows: list[dict[str, str]], folder: Path, files: int) -> None:
    """Consecutive blocks of ``rows`` as ``folder/part-NN.jsonl`` (corpus order = generation order)."""
    folder.mkdir(parents=True)
    bounds = np.linspace(0, len(rows), files + 1).astype(int)
    for k in range(files):
        with open(folder / f"part-{k:02d}.jsonl", "w", encoding="utf-8") as handle:
            for row in rows[bounds[k] : bounds[k + 1]]:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")


@contextlib.contextmanager
def watch_descendants(interval: float = 0.2) -> Iterator[dict[str, float]]:
    """Sample all descendant processes every ``interval`` s (psutil). The yielded dict gets ``peak_rss`` (summed
    RSS, bytes) and, on exit, ``cpu``: this process's CPU seconds plus every descendant's last-seen CPU seconds."""
    import psutil

    stats, seen, stop, me, own = {"peak_rss": 0.0}, {}, threading.Event(), psutil.Process(), time.process_time()

    def loop() -> None:
        while not stop.wait(interval):
            total = 0
            for child in me.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    total += child.memory_info().rss
                    seen[child.pid] = sum(child.cpu_times()[:2])  # user + system
            stats["peak_rss"] = max(stats["peak_rss"], total)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield stats
    finally:
        stop.set()
        thread.join()
        stats["cpu"] = time.process_time() - own + sum(seen.values())


@dataclass
class Result:
    """One timed setup: seconds, documents, chunks, kept chunk ids, drops per reason and a time breakdown."""

    label: str
    seconds: float
    documents: int
    chunks: int
    kept: set[str]
    dropped: dict[str, int]
    phases: dict[str, float] = field(default_factory=dict)
    cpu: float = 0.0
    descendants_peak: int = 0


def engine_result(out: Path, label: str) -> Result:
    """A finished engine setup read back from its folder (``--reuse``): report, kept ids, phase times."""
    report = json.loads((out / "curate" / "report.json").read_text(encoding="utf-8"))
    shards = shard_files(out / "curate" / "corpus")
    kept = {i for p in shards for i in pq.read_table(p, columns=["_id"]).column(0).to_pylist()}
    return Result(label, report["seconds"], report["records_in"], int(report["figures"]["chunks"]), kept,
                  dict(report["dropped"]), _phases(out))


def _phases(out: Path) -> dict[str, float]:
    phases = {}
    for logs in sorted((out / "curate" / "_datatrove").iterdir(), key=lambda p: (p / "executor.json").stat().st_mtime):
        began, ended = (logs / "executor.json").stat().st_mtime, (logs / "stats.json").stat().st_mtime
        phases[logs.name.split("-")[0]] = ended - began
    return phases


def run_engine(src: Path, out: Path, tasks: int, workers: int, mode: str) -> Result:
    """Time the Curate stage through the engine; phase times from the datatrove log folders' file times."""
    stage = Curate(str(src), tasks=tasks, workers=workers, minhash_mode=mode)
    with watch_descendants() as sampled:
        start = time.perf_counter()
        (report,) = Pipeline("mtr", [stage], seed=0).run(out, progress=False)
        seconds = time.perf_counter() - start
    shards = shard_files(out / "curate" / "corpus")
    kept = {i for p in shards for i in pq.read_table(p, columns=["_id"]).column(0).to_pylist()}
    return Result(f"engine {tasks}x{workers}", seconds, report.records_in, int(report.figures["chunks"]), kept,
                  dict(report.dropped), _phases(out), sampled["cpu"], int(sampled["peak_rss"]))


def run_plain(src: Path, out: Path, mode: str) -> Result:
    """The same curation steps in one process, one pass, writing ``out/corpus.parquet``.

    Near-duplicates as the stage's ``minhash_mode``: ``authors``, any LSH candidate among the kept chunks
    matches; ``verified``, recall-tuned bands and a candidate matches when the exact Jaccard of the shingle
    sets is >= 0.5, after the stage's MinHash-estimate screen (``minhash_dedup.confirmed``, the stage's own
    function; kept texts and signatures held in memory, candidates' shingles recomputed)."""
    times: Counter[str] = Counter()
    clock = [time.perf_counter()]

    def lap(step: str) -> None:
        now = time.perf_counter()
        times[step] += now - clock[0]
        clock[0] = now

    start, cpu = clock[0], time.process_time()
    chunker, scorer = Chunker(), HeuristicScorer()
    verify = mode == "verified"
    lsh = MinHashLSH(threshold=0.5, num_perm=128, params=recall_bands(128, 0.5) if verify else None)
    texts: dict[str, str] = {}
    sigs: dict[str, np.ndarray] = {}
    dropped: Counter[str] = Counter()
    kept: set[str] = set()
    documents = chunks = 0
    out.mkdir(parents=True)
    writer = pq.ParquetWriter(out / "corpus.parquet", PLAIN_SCHEMA)
    rows: list[dict[str, object]] = []
    for path in corpus_files(src).files:
        for number, doc_id, title, text in iter_file(path):
            lap("read")
            documents += 1
            cut = cut_tail(text)
            if len(cut) != len(text) and cut.strip():
                text = cut
            pieces = chunker.split(text)
            lap("cut + chunk")
            if not pieces:
                dropped["document_without_chunks"] += 1
            for n, chunk in pieces:
                if chunk is None:
                    dropped["chunk_too_short"] += 1
                    continue
                chunks += 1
                chunk_id = f"{doc_id}#{n}"
                lap("cut + chunk")
                minhash = signature(chunk)
                lap("signature")
                hits = lsh.query(minhash)
                if hits and verify:
                    hits = confirmed(hits, minhash.hashvalues, chunk, sigs, texts)
                if hits:
                    dropped["near_duplicate"] += 1
                    lap("near-duplicates")
                    continue
                lsh.insert(chunk_id, minhash)
                if verify:
                    texts[chunk_id] = chunk
                    sigs[chunk_id] = minhash.hashvalues
                lap("near-duplicates")
                cols = scorer.score([chunk])[0]
                reason = scorer.verdict(cols)
                lap("quality")
                if reason is not None:
                    dropped[reason] += 1
                    continue
                kept.add(chunk_id)
                rows.append({"_id": chunk_id, "title": title, "text": chunk, "source_id": doc_id, "chunk": n,
                             "source_file": path, "source_line": number, **cols})
                if len(rows) >= 1024:
                    writer.write_table(pa.Table.from_pylist(rows, schema=PLAIN_SCHEMA))
                    rows = []
                lap("write")
    writer.write_table(pa.Table.from_pylist(rows, schema=PLAIN_SCHEMA))
    writer.close()
    lap("write")
    return Result("plain loop", time.perf_counter() - start, documents, chunks, kept, dict(dropped), dict(times),
                  time.process_time() - cpu)


def compare(base: Result, other: Result) -> bool:
    """Print whether ``other`` kept the same chunk ids and dropped the same counts as ``base``; loud if not."""
    same_ids = base.kept == other.kept
    reasons = sorted(set(base.dropped) | set(other.dropped))
    diff = {r: (base.dropped.get(r, 0), other.dropped.get(r, 0)) for r in reasons
            if base.dropped.get(r, 0) != other.dropped.get(r, 0)}
    if same_ids and not diff and base.documents == other.documents and base.chunks == other.chunks:
        print(f"  {other.label} == {base.label}: {len(other.kept):,} kept chunk ids, drops per reason identical")
        return True
    print(f"  !!! MISMATCH {other.label} vs {base.label} !!!")
    print(f"      documents {base.documents:,} vs {other.documents:,}; chunks {base.chunks:,} vs {other.chunks:,}")
    if not same_ids:
        only_base, only_other = sorted(base.kept - other.kept), sorted(other.kept - base.kept)
        print(f"      kept ids: {len(only_base):,} only in {base.label} (e.g. {only_base[:5]}), "
              f"{len(only_other):,} only in {other.label} (e.g. {only_other[:5]})")  # fmt: skip
    for reason, (a, b) in diff.items():
        print(f"      dropped:{reason}: {a:,} vs {b:,}")
    return False


def memory(label: str, descendants: int) -> None:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    sampled = f", descendants sampled (sum) {descendants / 2**30:.2f} GiB" if descendants else ""
    print(f"  after {label}: peak RSS parent {own:.2f} GiB, waited-for children {children:.2f} GiB{sampled}; "
          f"load average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="work folder (new or empty; default a temp folder)")
    parser.add_argument("--skip-plain", action="store_true", help="time the engine only")
    parser.add_argument("--minhash-mode", choices=MODES, default="verified", help="the stage's minhash_mode")
    parser.add_argument("--reuse", type=Path, default=None,
                        help="a finished work folder: keep its corpus and engine runs (their recorded seconds), time "
                             "only the plain loop again (CPU s and RSS of the engine runs are then not shown)")
    args = parser.parse_args()
    if args.reuse is not None:
        reuse(args.reuse, args.minhash_mode)
        return
    if args.out is not None and args.out.exists() and any(args.out.iterdir()):
        raise SystemExit(f"--out {args.out}: not empty; give a new or empty folder")
    work = args.out or Path(tempfile.mkdtemp(prefix="bench_curation_"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs; work folder {work}; "
          f"load average (1 min) {os.getloadavg()[0]:.2f}")  # fmt: skip

    t = time.perf_counter()
    rows = build(args.docs, args.seed)
    write_corpus(rows, work / "corpus", args.files)
    chars = sum(len(r["text"]) for r in rows)
    print(f"corpus: {len(rows):,} documents in {args.files} JSONL files, {chars:,} characters of text "
          f"(mean {chars / len(rows):,.0f} per document); built in {time.perf_counter() - t:.1f} s; "
          f"minhash_mode={args.minhash_mode}")  # fmt: skip
    del rows

    # First-use costs (LangChain import, datatrove's word tokenizer) stay out of the timings.
    HeuristicScorer().score(["Warm-up text for the word tokenizer of the quality rules."])
    Chunker().split("warm up")

    results: list[Result] = []
    for tasks, workers in ((8, 1), (8, 2)):
        results.append(run_engine(work / "corpus", work / f"engine-{tasks}x{workers}", tasks, workers,
                                  args.minhash_mode))
        print(f"{results[-1].label}: {results[-1].seconds:.1f} s", flush=True)
        memory(results[-1].label, results[-1].descendants_peak)
    if not args.skip_plain:
        results.append(run_plain(work / "corpus", work / "plain", args.minhash_mode))
        print(f"{results[-1].label}: {results[-1].seconds:.1f} s", flush=True)
        memory(results[-1].label, 0)

    report(results, args.skip_plain)
    if args.out is None:
        shutil.rmtree(work)


def reuse(work: Path, mode: str) -> None:
    """``--reuse``: the plain loop again over ``work``'s corpus, compared with its recorded engine runs."""
    results = [engine_result(work / f"engine-8x{w}", f"engine 8x{w}") for w in (1, 2)]
    for r in results:
        print(f"{r.label}: {r.seconds:.1f} s (recorded in {work})")
    shutil.rmtree(work / "plain", ignore_errors=True)
    HeuristicScorer().score(["Warm-up text for the word tokenizer of the quality rules."])
    Chunker().split("warm up")
    print(f"plain loop over {work / 'corpus'} (minhash_mode={mode}); load average (1 min) {os.getloadavg()[0]:.2f}",
          flush=True)
    results.append(run_plain(work / "corpus", work / "plain", mode))
    print(f"{results[-1].label}: {results[-1].seconds:.1f} s", flush=True)
    memory(results[-1].label, 0)
    report(results, False)


def report(results: list[Result], skip_plain: bool) -> None:
    """Agreement, the speed table and the time breakdown of the setups (the plain loop last unless skipped)."""
    base = results[-1]
    print(f"\nagreement (against {base.label}):")
    agree = [compare(base, other) for other in results[:-1]]
    print(f"  documents {base.documents:,}, chunks {base.chunks:,}, kept {len(base.kept):,}; drops per reason "
          f"({base.label}): {json.dumps(dict(sorted(base.dropped.items())))}")  # fmt: skip
    if not all(agree):
        print("  !!! THE SETUPS DISAGREE (see MISMATCH above) !!!")

    plain = None if skip_plain else results[-1]
    print(f"\n{'setup':12s} {'seconds':>8s} {'docs/s':>7s} {'chunks/s':>8s} {'vs plain':>8s} {'2w vs 1w':>8s} "
          f"{'CPU s':>7s} {'CPU/wall':>8s}")  # fmt: skip
    for r in results:
        vs_plain = f"x{plain.seconds / r.seconds:.2f}" if plain else "-"
        vs_one = f"x{results[0].seconds / r.seconds:.2f}" if r.label == "engine 8x2" else "-"
        print(f"{r.label:12s} {r.seconds:8.1f} {r.documents / r.seconds:7.0f} {r.chunks / r.seconds:8.0f} "
              f"{vs_plain:>8s} {vs_one:>8s} {r.cpu:7.1f} {r.cpu / r.seconds:8.2f}")  # fmt: skip
    print("vs plain = plain-loop seconds / setup seconds; 2w vs 1w = engine 8x1 seconds / engine 8x2 seconds;\n"
          "CPU s = this process's CPU time plus the last sampled CPU time of every descendant process")

    print("\ntime breakdown (s; engine: wall time of each datatrove pipeline, plain loop: time in each step):")
    for r in results:
        print(f"  {r.label:12s} " + ", ".join(f"{k} {v:.1f}" for k, v in r.phases.items()))
    memory("all runs", 0)


if __name__ == "__main__":
    main()
