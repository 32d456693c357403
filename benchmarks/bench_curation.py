"""Speed of the curation stage (``Curate``) on datatrove's local executor vs a plain single-process loop.

Corpus: ``--docs`` synthetic Wikipedia-like documents per size (default 2,000 and 20,000), seeded, as ``--files`` JSONL
files (default 8, consecutive blocks; the reader deals files to tasks round-robin). A document is a title and
2-8 paragraphs; sentences are Zipf-drawn words (exponent 0.95) of a 50,000-word vocabulary (the shared
HotpotQA sample's words when present, then made-up words), so two unrelated chunks have a character 5-gram
Jaccard of about 0.04 (MTRAG's cited passages: 0.035). Most documents give 1-3 chunks of 1024-2048
characters, some none. About 20% end in a "References" / "See also" tail, about 4% carry a list of short
bullet lines (for the quality rules) and about 5% are near-copies of an earlier document, 2-6 words changed.

Timed, each in a fresh child process with its own output folder (``SETUPS``, the stage's defaults otherwise):
``ours 1x1``, ``Pipeline("mtr", [Curate(src)])`` (1 task, 1 worker: what ``synthesize mtr`` runs by default);
``ours 8x2``, ``Curate(src, tasks=8, workers=2)`` (in this process below the stage's ``in_process_below``, 5,000
documents; 2 worker processes above); ``pool 8x2``, the same with ``in_process_below=0`` (always 2 worker
processes, forked from a fork server that preloads the heavy modules); ``plain loop``, the same steps in one process
and one pass: read -> boilerplate cut -> chunking -> MinHash -> greedy keep-first near-duplicate check -> the
stage's quality rules -> Parquet.

Checked: all keep the same chunk ids and count the same drops per reason (``StageReport.dropped`` vs the loop's
counters); a difference is printed as MISMATCH. Printed per size: seconds, documents/s, speed against the plain
loop, CPU seconds and their ratio to the plain loop's, the time of each engine pipeline (from the executor's log
files) and of each plain-loop step; at the end, the CPU ratios of every size. CPU seconds are those of the setup's
whole process tree after its warm-up (LangChain import, the word tokenizer): this process makes itself the
subreaper of its descendants (Linux ``PR_SET_CHILD_SUBREAPER``), so datatrove's fork server and worker processes,
imports included, are waited for by it and counted in ``RUSAGE_CHILDREN``.

Cost: ``--minhash-mode verified`` (the stage's default) screens every LSH candidate by its MinHash estimate and
checks the likely ones with an exact Jaccard (``minhash_dedup.confirmed``, shared by the stage and the plain
loop); its bands (42 x 3) make about 0.4% of the kept chunks candidates of each query here, and the screen keeps
the exact checks to the few likely pairs (before it, dedup grew with the square of the corpus: 17 s at 2,000
documents, on course for 11 hours at 100,000). ``authors`` mode checks nothing.
Not a test; run it by hand:

    python benchmarks/bench_curation.py [--docs 2000,20000] [--files 8] [--seed 0] [--out DIR]
        [--minhash-mode verified|authors]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from datasketch import MinHashLSH

from convrag.core.corpus import corpus_files, iter_file
from convrag.synthesis.curation.boilerplate import cut_tail
from convrag.synthesis.curation.chunking import Chunker
from convrag.synthesis.curation.curate import Curate
from convrag.synthesis.curation.minhash_dedup import MODES, confirmed, recall_bands, signature
from convrag.synthesis.curation.quality import HeuristicScorer, scorer_from_spec
from convrag.synthesis.engine.pipeline import Pipeline
from convrag.synthesis.engine.shards import shard_files

HOTPOT = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"
ONSETS = ("b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "br", "ch",
          "cl", "dr", "fl", "gr", "pl", "pr", "sh", "st", "th", "tr")
VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "ie", "ou", "y")
#: The timed setups of the stage (Curate options); the plain loop is timed last, as the reference.
SETUPS: dict[str, dict[str, int]] = {
    "ours 1x1": {},  # the stage's defaults: 1 task, 1 worker (what ``synthesize mtr`` runs unless told otherwise)
    "ours 8x2": {"tasks": 8, "workers": 2},  # in this process below in_process_below documents, 2 workers above
    "pool 8x2": {"tasks": 8, "workers": 2, "in_process_below": 0},  # always 2 worker processes
}
PLAIN = "plain loop"
RESULT = "result.json"
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


def own_cpu() -> float:
    """CPU seconds (user + system) of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def children_cpu() -> float:
    """CPU seconds of every waited-for descendant so far (with this process a subreaper: all of them)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``), so that the CPU
    of datatrove's fork server and of its worker processes ends up in ``RUSAGE_CHILDREN``; False where unsupported."""
    with contextlib.suppress(OSError, AttributeError):
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    return False


def reap(deadline: float = 60.0) -> None:
    """Wait for every orphan handed to this process (fork server, resource tracker) after a setup's child exits."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)
    print(f"  (descendants still running after {deadline:.0f} s: their CPU time is missing)")


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
    peak_rss: int = 0


def _phases(out: Path) -> dict[str, float]:
    phases = {}
    for logs in sorted((out / "curate" / "_datatrove").iterdir(), key=lambda p: (p / "executor.json").stat().st_mtime):
        began, ended = (logs / "executor.json").stat().st_mtime, (logs / "stats.json").stat().st_mtime
        phases[logs.name.split("-")[0]] = ended - began
    return phases


def run_engine(src: Path, out: Path, label: str, mode: str) -> Result:
    """Time the Curate stage through the engine with ``SETUPS[label]``; phase times from the datatrove log folders."""
    stage = Curate(str(src), minhash_mode=mode, **SETUPS[label])
    start = time.perf_counter()
    (report,) = Pipeline("mtr", [stage], seed=0).run(out, progress=False)
    seconds = time.perf_counter() - start
    shards = shard_files(out / "curate" / "corpus")
    kept = {i for p in shards for i in pq.read_table(p, columns=["_id"]).column(0).to_pylist()}
    label = f"{label} ({report.figures.get('execution', '?')})"
    return Result(label, seconds, report.records_in, int(report.figures["chunks"]), kept, dict(report.dropped),
                  _phases(out))


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

    start = clock[0]
    stage = Curate(str(src))  # the stage's defaults: its chunker settings and its (profile's) quality rules
    chunker, scorer = stage.chunker, scorer_from_spec(stage.quality, stage.quality_options)
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
    return Result("plain loop", time.perf_counter() - start, documents, chunks, kept, dict(dropped), dict(times))


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


def child(label: str, corpus: Path, out: Path, mode: str) -> None:
    """``--child``: one setup in this (fresh) process; its result and its CPU time before the run go to a JSON file."""
    # First-use costs (LangChain import, datatrove's word tokenizer) stay out of the timings.
    HeuristicScorer().score(["Warm-up text for the word tokenizer of the quality rules."])
    Chunker().split("warm up")
    before = own_cpu()
    r = run_plain(corpus, out, mode) if label == PLAIN else run_engine(corpus, out, label, mode)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    (out / RESULT).write_text(json.dumps({"label": r.label, "seconds": r.seconds, "documents": r.documents,
                                          "chunks": r.chunks, "kept": sorted(r.kept), "dropped": r.dropped,
                                          "phases": r.phases, "cpu_before": before, "peak_rss": peak}))


def measure(label: str, corpus: Path, out: Path, mode: str) -> Result:
    """Run one setup in a child process and return its result with the CPU time of its whole process tree (the child
    after its warm-up, datatrove's fork server and worker processes; see ``become_subreaper``)."""
    before = children_cpu()
    subprocess.run([sys.executable, __file__, "--child", label, "--corpus", str(corpus), "--out", str(out),
                    "--minhash-mode", mode], check=True)
    reap()
    data = json.loads((out / RESULT).read_text())
    return Result(data["label"], data["seconds"], data["documents"], data["chunks"], set(data["kept"]),
                  data["dropped"], data["phases"], children_cpu() - before - data["cpu_before"], data["peak_rss"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", default="2000,20000", help="corpus sizes, comma-separated (default 2000,20000)")
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="work folder (new or empty; default a temp folder)")
    parser.add_argument("--minhash-mode", choices=MODES, default="verified", help="the stage's minhash_mode")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.corpus, args.out, args.minhash_mode)
        return
    if args.out is not None and args.out.exists() and any(args.out.iterdir()):
        raise SystemExit(f"--out {args.out}: not empty; give a new or empty folder")
    work = args.out or Path(tempfile.mkdtemp(prefix="bench_curation_"))
    work.mkdir(parents=True, exist_ok=True)
    reaper = become_subreaper()
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs; work folder {work}; "
          f"load average (1 min) {os.getloadavg()[0]:.2f}; minhash_mode={args.minhash_mode}; CPU of worker processes "
          f"{'counted (subreaper)' if reaper else 'NOT counted (no PR_SET_CHILD_SUBREAPER here)'}")  # fmt: skip
    ratios: list[str] = []
    for size in (int(n) for n in args.docs.split(",")):
        t = time.perf_counter()
        rows = build(size, args.seed)
        corpus = work / f"corpus-{size}"
        write_corpus(rows, corpus, args.files)
        chars = sum(len(r["text"]) for r in rows)
        print(f"\ncorpus: {len(rows):,} documents in {args.files} JSONL files, {chars:,} characters of text "
              f"(mean {chars / len(rows):,.0f} per document); built in {time.perf_counter() - t:.1f} s")  # fmt: skip
        del rows
        results = []
        for label in (*SETUPS, PLAIN):
            results.append(measure(label, corpus, work / f"{size}-{label.replace(' ', '-')}", args.minhash_mode))
            print(f"{results[-1].label}: {results[-1].seconds:.1f} s, {results[-1].cpu:.1f} CPU s "
                  f"(load average {os.getloadavg()[0]:.2f})", flush=True)
        report(results)
        plain = results[-1]
        ratios.append(f"{size:,} documents: " + ", ".join(f"{r.label.split(' (')[0]} x{r.cpu / plain.cpu:.2f}"
                                                             for r in results[:-1]))
    print("\nCPU ratio (setup's CPU s / plain loop's CPU s):\n  " + "\n  ".join(ratios))
    if args.out is None:
        shutil.rmtree(work)


def report(results: list[Result]) -> None:
    """Agreement, the speed table and the time breakdown of the setups (the plain loop last)."""
    base = results[-1]
    print(f"agreement (against {base.label}):")
    agree = [compare(base, other) for other in results[:-1]]
    print(f"  documents {base.documents:,}, chunks {base.chunks:,}, kept {len(base.kept):,}; drops per reason "
          f"({base.label}): {json.dumps(dict(sorted(base.dropped.items())))}")  # fmt: skip
    if not all(agree):
        print("  !!! THE SETUPS DISAGREE (see MISMATCH above) !!!")
    width = max(len(r.label) for r in results)
    print(f"{'setup':{width}s} {'seconds':>8s} {'docs/s':>7s} {'vs plain':>8s} {'CPU s':>7s} {'CPU/plain':>9s} "
          f"{'peak RSS':>9s}")  # fmt: skip
    for r in results:
        print(f"{r.label:{width}s} {r.seconds:8.1f} {r.documents / r.seconds:7.0f} x{base.seconds / r.seconds:7.2f} "
              f"{r.cpu:7.1f} x{r.cpu / base.cpu:8.2f} {r.peak_rss / 2**20:6.0f} MB")  # fmt: skip
    print("vs plain = plain-loop seconds / setup seconds; CPU s = CPU time of the setup's whole process tree after its "
          "warm-up; peak RSS of the setup's main process")
    print("time breakdown (s; engine: wall time of each datatrove pipeline, plain loop: time in each step):")
    for r in results:
        print(f"  {r.label:{width}s} " + ", ".join(f"{k} {v:.1f}" for k, v in r.phases.items()))


if __name__ == "__main__":
    main()
