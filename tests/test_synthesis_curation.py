"""Curation steps (boilerplate cut, chunking, MinHash-LSH keep-first), corpus readers and their errors."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from convrag.errors import ConvragError, DataError
from convrag.synthesis.boilerplate import cut_tail
from convrag.synthesis.chunking import Chunker, trim_chunk
from convrag.synthesis.corpus_source import corpus_files, count_documents, iter_file
from convrag.synthesis.curate import Curate
from convrag.synthesis.engine import Pipeline
from convrag.synthesis.shards import iter_shard, shard_files
from convrag.synthesis.text import ngram_jaccard, shingles

_LETTERS = random.Random(0)
#: 3,000 pseudo-words, so that unrelated texts share few character 5-grams (as real prose does).
WORDS = ["".join(_LETTERS.choice("abcdefghijklmnoprstuvwy") for _ in range(_LETTERS.randint(3, 10)))
         for _ in range(3000)]


def _prose(rng: random.Random, chars: int) -> str:
    sentences, size = [], 0
    while size < chars:
        s = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))).capitalize() + "."
        sentences.append(s)
        size += len(s) + 1
    return " ".join(sentences)


def _article(rng: random.Random, paragraphs: int, chars: int = 700) -> str:
    return "\n\n".join(_prose(rng, chars) for _ in range(paragraphs))


def _write_jsonl(path: Path, docs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path


# ---------------------------------------------------------------- boilerplate and chunking


def test_cut_tail_cuts_at_the_earliest_heading_after_a_blank_line() -> None:
    body = "Basalt is an igneous rock.\n\nIt forms columns when lava cools slowly."
    assert cut_tail(body + "\n\nSee also\nGabbro\n\nReferences\n1. A book") == body
    assert cut_tail(body + "\n\nReferences\nX\n\nSee also\nY") == body
    assert cut_tail(body + "\n\nNotes on the quarry: it closed in 1921.") == body  # substring match, as the authors
    assert cut_tail(body + "\nSee also: gabbro") == body + "\nSee also: gabbro"  # no blank line before it
    assert cut_tail(body) == body
    assert cut_tail(body + "\n\nBibliography\nX", headings=["Bibliography"]) == body


def test_trim_chunk_rules() -> None:
    assert trim_chunk("Text of a section.\n\n") == "Text of a section."
    assert trim_chunk("Text of a section.\n\nEarly life") == "Text of a section."  # dangling heading
    six = "Text.\n\nOne two three four five six words here"
    assert trim_chunk(six) == six
    assert trim_chunk("Text.\n\nOne two three four five", dangling_tokens=4) == "Text.\n\nOne two three four five"
    assert trim_chunk("No blank line at all") == "No blank line at all"


@pytest.mark.parametrize(("size", "separators"), [(2048, "authors"), (1024, "paper"), (512, "authors")])
def test_chunks_respect_the_length_bounds(size: int, separators: str) -> None:
    rng = random.Random(size)
    chunker = Chunker(chunk_size=size, separators=separators)
    kept = dropped = 0
    for _ in range(40):
        text = _article(rng, rng.randint(1, 8), rng.randint(100, 1500))
        for _, chunk in chunker.split(text):
            if chunk is None:
                dropped += 1
                continue
            kept += 1
            assert size // 2 <= len(chunk) <= size
            assert not chunk.endswith("\n\n") and chunk == chunk.strip()
    assert kept > 20 and dropped > 0


def test_chunker_rejects_bad_settings() -> None:
    with pytest.raises(ConvragError, match="chunk_overlap < chunk_size"):
        Chunker(chunk_size=100, chunk_overlap=100)
    with pytest.raises(ConvragError, match="separators must be one of authors, paper"):
        Chunker(separators="mine")


def test_shingles_normalise_case_and_whitespace() -> None:
    assert shingles("AB  cD\n\tE", 3) == {"ab ", "b c", " cd", "cd ", "d e"}
    assert shingles("abcd", 5) == set()
    assert ngram_jaccard("The same text", "the   SAME text") == 1.0


# ---------------------------------------------------------------- readers


def test_readers_report_the_file_and_line_of_bad_documents(tmp_path: Path) -> None:
    good = {"_id": "a", "title": "T", "text": "Some text."}
    cases = [
        ({"_id": "b", "title": "T"}, "field 'text' must be a string, got null"),
        ({"_id": "b", "text": "   "}, "document b: empty text"),
        ({"_id": "b", "text": 5}, "field 'text' must be a string, got int"),
        ({"title": "T", "text": "x"}, r"document id \(_id or id\) missing"),
        ({"_id": True, "text": "x"}, r"document id \(_id or id\) must be a non-empty string or an integer, got bool"),
        ({"_id": "a", "text": "again"}, "duplicate document id 'a' \\(first at .*1\\)"),
        ({"_id": "b", "text": "x", "title": ["T"]}, "field 'title' must be a string, got list"),
    ]
    for n, (bad, message) in enumerate(cases):
        path = _write_jsonl(tmp_path / f"c{n}.jsonl", [good, bad])
        with pytest.raises(DataError, match=f"^{path}:2: {message}"):
            list(iter_file(str(path)))
    raw = tmp_path / "latin1.jsonl"
    raw.write_bytes(b'{"_id": "a", "text": "ok"}\n{"_id": "b", "text": "caf\xe9"}\n')
    with pytest.raises(DataError, match=f"^{raw}:2: not UTF-8"):
        list(iter_file(str(raw)))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"_id": "a", "text": "ok"}\n{"_id": "b", "text": \n')
    with pytest.raises(DataError, match=f"^{broken}:2: invalid JSON"):
        list(iter_file(str(broken)))


def test_readers_accept_gzip_parquet_ids_as_integers_and_folders(tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    folder.mkdir()
    with gzip.open(folder / "a.jsonl.gz", "wt", encoding="utf-8") as handle:
        handle.write(json.dumps({"id": 7, "text": "seven"}) + "\n\n" + json.dumps({"id": "x", "text": "ex"}) + "\n")
    pq.write_table(pa.table({"_id": ["p1", "p2"], "title": ["P", None], "text": ["one", "two"]}), folder / "b.parquet")
    (folder / "notes.txt").write_text("ignored: not a corpus file")
    files = corpus_files(folder)
    assert [Path(f).name for f in files.files] == ["a.jsonl.gz", "b.parquet"]
    assert count_documents(files) == 4
    assert list(iter_file(files.files[0])) == [(1, "7", "", "seven"), (3, "x", "", "ex")]
    assert list(iter_file(files.files[1])) == [(1, "p1", "P", "one"), (2, "p2", "", "two")]
    pq.write_table(pa.table({"_id": ["p1"], "body": ["one"]}), tmp_path / "nobody.parquet")
    with pytest.raises(DataError, match="nobody.parquet: needs columns 'text' and '_id'"):
        list(iter_file(str(tmp_path / "nobody.parquet")))
    pq.write_table(pa.table({"_id": ["p1", "p2"], "text": ["one", ""]}), tmp_path / "empty.parquet")
    with pytest.raises(DataError, match="empty.parquet:2: document p2: empty text"):
        list(iter_file(str(tmp_path / "empty.parquet")))


def test_corpus_source_errors(tmp_path: Path) -> None:
    with pytest.raises(ConvragError, match="no such file or folder"):
        corpus_files(tmp_path / "missing")
    (tmp_path / "c.csv").write_text("a,b")
    with pytest.raises(ConvragError, match="c.csv: not a corpus file"):
        corpus_files(tmp_path / "c.csv")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConvragError, match="no .jsonl / .jsonl.gz / .parquet files"):
        corpus_files(tmp_path / "empty")


# ---------------------------------------------------------------- the curation stage


def _run(source: Path, out: Path, **options: object) -> list:
    return Pipeline("mtr", [Curate(str(source), **options)]).run(out, progress=False)


def _corpus(out: Path) -> list[dict]:
    return [row for path in shard_files(out / "curate" / "corpus") for row in iter_shard(path)]


def test_curation_counts_every_drop_and_dedups_keep_first(tmp_path: Path) -> None:
    rng = random.Random(3)
    base = [_article(rng, 3, 500) for _ in range(6)]
    near = base[2].replace("river", "stream", 2)  # a near-copy of document 2 (Jaccard well above 0.5)
    assert ngram_jaccard(base[2], near) > 0.9
    tail = "\n\nReferences\n1. An atlas."
    docs = [{"_id": f"d{i}", "title": f"Doc {i}", "text": t + tail} for i, t in enumerate(base)]
    docs.insert(4, {"_id": "copy", "title": "Copy", "text": near})
    docs.append({"_id": "short", "text": "A short stub about a canal."})
    _write_jsonl(tmp_path / "a.jsonl", docs)
    [report] = _run(tmp_path / "a.jsonl", tmp_path / "out", chunk_size=1024, quality="heuristic",
                    quality_options={"gopher": False, "fineweb": False})
    rows = _corpus(tmp_path / "out")
    ids = [r["_id"] for r in rows]
    assert report.records_in == 8 and report.records_out == len(rows)
    assert not any(i.startswith("copy#") for i in ids)  # the later near-copy goes, the earlier one stays
    assert any(i.startswith("d2#") for i in ids)
    assert report.dropped["near_duplicate"] == sum(1 for c in Chunker(1024).split(near) if c[1])
    assert report.dropped["chunk_too_short"] >= 1  # the stub
    assert report.figures["boilerplate_cut"] == 6
    assert all("References" not in r["text"] for r in rows)
    assert report.figures["chunks"] == len(rows) + report.dropped["near_duplicate"]
    columns = {"_id", "title", "text", "source_id", "chunk", "source_file", "source_line", "heuristic_quality"}
    assert columns <= set(rows[0])
    assert "minhash" not in rows[0]
    drops = pq.read_table(tmp_path / "out" / "curate" / "dedup" / "near_duplicates.parquet").to_pylist()
    assert {d["duplicate_of"].split("#")[0] for d in drops} == {"d2"}


def test_keep_first_is_greedy_not_transitive(tmp_path: Path) -> None:
    """A~B and B~C but A!~C: keep-first keeps A and C (a connected-component dedup would keep only A)."""
    rng = random.Random(11)
    words = [rng.choice(WORDS) + str(rng.randint(0, 99)) for _ in range(440)]
    a, b, c = " ".join(words[:300]), " ".join(words[70:370]), " ".join(words[140:440])
    assert ngram_jaccard(a, b) > 0.6 and ngram_jaccard(b, c) > 0.6 and ngram_jaccard(a, c) < 0.45
    _write_jsonl(tmp_path / "abc.jsonl", [{"_id": k, "text": t} for k, t in (("A", a), ("B", b), ("C", c))])
    [report] = _run(tmp_path / "abc.jsonl", tmp_path / "out", chunk_size=4096, min_length=100,
                    quality_options={"gopher": False, "fineweb": False})
    assert [r["_id"] for r in _corpus(tmp_path / "out")] == ["A#0", "C#0"]
    assert report.dropped == {"near_duplicate": 1}


def test_authors_mode_drops_every_lsh_candidate_unchecked(tmp_path: Path) -> None:
    """In the authors' mode an LSH collision is a drop even below the threshold; verified mode re-checks it."""
    rng = random.Random(2)
    words = [rng.choice(WORDS) + str(rng.randint(0, 99)) for _ in range(800)]
    docs = [{"_id": f"w{s}", "text": " ".join(words[s:s + 300])} for s in range(0, 500, 25)]  # Jaccard steps
    _write_jsonl(tmp_path / "w.jsonl", docs)
    options = {"chunk_size": 4096, "min_length": 100, "quality_options": {"gopher": False, "fineweb": False}}
    _run(tmp_path / "w.jsonl", tmp_path / "authors", minhash_mode="authors", **options)
    _run(tmp_path / "w.jsonl", tmp_path / "verified", **options)
    texts = {d["_id"] + "#0": d["text"] for d in docs}
    for mode in ("authors", "verified"):
        drops = pq.read_table(tmp_path / mode / "curate" / "dedup" / "near_duplicates.parquet").to_pylist()
        pairs = [ngram_jaccard(texts[d["_id"]], texts[d["duplicate_of"]]) for d in drops]
        assert drops, mode
        if mode == "verified":
            assert min(pairs) >= 0.5
        else:
            assert min(pairs) < 0.5  # a collision below the threshold, dropped unchecked


def test_output_does_not_depend_on_tasks_and_workers(tmp_path: Path) -> None:
    rng = random.Random(5)
    for f in range(3):
        _write_jsonl(tmp_path / "src" / f"{f}.jsonl" if (tmp_path / "src").exists() else
                     (tmp_path / "src").mkdir() or tmp_path / "src" / f"{f}.jsonl",
                     [{"_id": f"f{f}d{i}", "text": _article(rng, rng.randint(1, 5), 600)} for i in range(8)])
    # the made-up articles fail Gopher's stop-word rule: without the quality filters something is kept to compare
    lenient = {"quality_options": {"gopher": False, "fineweb": False}}
    one = _run(tmp_path / "src", tmp_path / "one", chunk_size=1024, **lenient)[0]
    three = _run(tmp_path / "src", tmp_path / "three", chunk_size=1024, tasks=3, workers=2, **lenient)[0]
    assert one.records_out > 0 and _corpus(tmp_path / "one") == _corpus(tmp_path / "three")
    assert (one.records_in, one.records_out, one.dropped) == (three.records_in, three.records_out, three.dropped)
    assert [p.name for p in shard_files(tmp_path / "three" / "curate" / "corpus")] == [
        "00000.parquet", "00001.parquet", "00002.parquet"]


def test_a_duplicate_id_across_files_names_both_places(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    text = _article(random.Random(1), 2, 900)
    _write_jsonl(tmp_path / "src" / "a.jsonl", [{"_id": "x", "text": text}])
    _write_jsonl(tmp_path / "src" / "b.jsonl", [{"_id": "y", "text": text[::-1]}, {"_id": "x", "text": text[::-1]}])
    with pytest.raises(DataError, match=r"b.jsonl:2: duplicate document id 'x' \(also at .*a.jsonl:1\)"):
        _run(tmp_path / "src", tmp_path / "out", chunk_size=1024)
    assert not (tmp_path / "out" / "curate" / "report.json").exists()


def test_bad_stage_options_fail_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(ConvragError, match="unknown quality scorer"):
        Curate(str(tmp_path), quality="perplexity")
    with pytest.raises(ConvragError, match="executor must be one of local, slurm, ray"):
        Curate(str(tmp_path), executor="k8s")
    with pytest.raises(ConvragError, match="minhash_mode must be one of verified, authors"):
        Curate(str(tmp_path), minhash_mode="exact")
    with pytest.raises(ConvragError, match="minhash_threshold must be in"):
        Curate(str(tmp_path), minhash_threshold=0)
