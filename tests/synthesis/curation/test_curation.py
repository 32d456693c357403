"""Curation steps (boilerplate cut, chunking, MinHash-LSH keep-first), corpus readers and their errors."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from convrag.cli import main
from convrag.core.corpus import corpus_files, count_documents, iter_file
from convrag.core.errors import ConvragError, DataError
from convrag.synthesis.curation.boilerplate import cut_tail
from convrag.synthesis.curation.chunking import Chunker, trim_chunk
from convrag.synthesis.curation.curate import Curate
from convrag.synthesis.curation.text import ngram_jaccard, shingles
from convrag.synthesis.engine.pipeline import Pipeline
from convrag.synthesis.engine.shards import iter_shard, shard_files
from tests.conftest import DATA

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


def test_in_process_and_worker_pool_give_identical_output(tmp_path: Path) -> None:
    """Below ``in_process_below`` the tasks run in this process whatever ``workers`` says; forcing the worker pool
    (``in_process_below=0``) on the same corpus gives the same chunks, order, ids, columns and report counts."""
    rng = random.Random(5)
    (tmp_path / "src").mkdir()
    for f in range(3):
        docs = [{"_id": f"f{f}d{i}", "text": _article(rng, rng.randint(1, 5), 600)} for i in range(8)]
        docs.append({"_id": f"f{f}copy", "text": docs[0]["text"]})  # a near-duplicate in every file
        _write_jsonl(tmp_path / "src" / f"{f}.jsonl", docs)
    # the made-up articles fail Gopher's stop-word rule: without the quality filters something is kept to compare
    lenient = {"chunk_size": 1024, "quality_options": {"gopher": False, "fineweb": False}}
    setups = {"one": {}, "asked": {"tasks": 3, "workers": 2}, "pool": {"tasks": 3, "workers": 2, "in_process_below": 0}}
    runs = {name: _run(tmp_path / "src", tmp_path / name, **lenient, **options)[0] for name, options in setups.items()}
    assert [runs[n].figures.pop("execution") for n in runs] == ["in this process", "in this process",
                                                                "2 worker processes"]
    rows = _corpus(tmp_path / "one")
    assert runs["one"].records_out == len(rows) > 0 and runs["one"].dropped["near_duplicate"] >= 3
    for name in ("asked", "pool"):
        assert _corpus(tmp_path / name) == rows  # same rows, same order, every column
        assert (runs[name].records_in, runs[name].records_out, runs[name].dropped, runs[name].figures) == (
            runs["one"].records_in, runs["one"].records_out, runs["one"].dropped, runs["one"].figures)
        drops = tmp_path / name / "curate" / "dedup" / "near_duplicates.parquet"
        assert pq.read_table(drops).to_pylist() == pq.read_table(
            tmp_path / "one" / "curate" / "dedup" / "near_duplicates.parquet").to_pylist()
    assert [p.name for p in shard_files(tmp_path / "pool" / "curate" / "corpus")] == [
        "00000.parquet", "00001.parquet", "00002.parquet"]
    assert len(list((tmp_path / "pool" / "curate" / "_datatrove" / "chunk-3tasks" / "completions").iterdir())) == 3


def _mtrag_passages(path: Path, n: int = 300) -> Path:
    """The first ``n`` MTRAG cited passages by ``<domain>:<document id>`` (the order of the built cited corpus), read
    from the shared conversations file and written as JSONL."""
    conversations = json.loads((DATA / "mtrag" / "mtrag-human" / "conversations" / "conversations.json").read_text(
        encoding="utf-8"))
    passages: dict[str, dict] = {}
    for conversation in conversations:
        domain = conversation["domain"].split("-")[2]
        for message in conversation["messages"]:
            for context in message.get("contexts") or []:
                if context.get("text"):
                    passages.setdefault(f"{domain}:{context['document_id']}", context)
    ids = sorted(passages)[:n]
    return _write_jsonl(path, [{"_id": i, "title": passages[i].get("title") or "", "text": passages[i]["text"]}
                               for i in ids])


def test_a_passage_level_corpus_is_kept_whole_and_said_before_work(tmp_path: Path, capsys) -> None:
    """Issue 34: 300 MTRAG passages with the defaults. 239 are shorter than min_length (1,024 characters), so the
    corpus is passage-level: they are kept whole (the article rule dropped 247 chunks and kept 59 passages); the
    line saying so, with the count and the option, comes before the stage's own progress lines."""
    source = _mtrag_passages(tmp_path / "mtrag300.jsonl")
    out = tmp_path / "out"
    assert main(["synthesize", "mtr", "--corpus", str(source), "--out", str(out), "--stages", "curate"]) == 0
    printed = capsys.readouterr().out
    line = "curate: 239 of 300 documents are shorter than min_length=1,024 characters (more than half: a passage-level"
    assert line in printed and "--option corpus_level=article" in printed
    assert printed.index(line) < printed.index("curate: chunk (1 task(s), 1 worker(s))")
    report = json.loads((tmp_path / "out" / "curate" / "report.json").read_text())
    assert (report["records_in"], report["records_out"]) == (300, 259)
    assert report["figures"]["corpus_level"] == "passage" and report["figures"]["kept_whole"] == 239
    assert report["figures"]["documents_below_min_length"] == 239
    # the rest is counted: 8 short tails of passages over 2,048 characters, 41 below Gopher's rules (36 under 50 words)
    assert report["dropped"] == {"chunk_too_short": 8, "heuristic:gopher_short_doc": 36,
                                 "heuristic:gopher_enough_stop_words": 5}
    params = json.loads((tmp_path / "out" / "curate" / "params.json").read_text())
    assert params["params"]["corpus_level"] == "auto"
    rows = _corpus(tmp_path / "out")
    assert sum(len(r["text"]) < 1024 for r in rows) == 200 and all(r["_id"].endswith("#0") for r in rows[:5])
    # the authors' rule on request: the same drop as in the issue, announced with the option that changes it
    [article] = _run(source, tmp_path / "article", corpus_level="article")
    assert (article.records_out, article.dropped["chunk_too_short"]) == (59, 247)
    printed = capsys.readouterr().out
    assert "of 300 documents are shorter than min_length=1,024 characters: the size rule drops them whole" in printed
    assert "--option corpus_level=passage" in printed


def test_an_article_corpus_still_gets_the_authors_size_rules(tmp_path: Path, capsys) -> None:
    """Wikipedia-like articles (3-6 paragraphs of ~700 characters) and a few stubs: ``auto`` picks the article rules,
    so the stubs and the short last pieces of articles are dropped as chunk_too_short, and the stubs are counted
    before work."""
    rng = random.Random(8)
    docs = [{"_id": f"a{i}", "title": f"Article {i}", "text": _article(rng, rng.randint(3, 6))} for i in range(12)]
    docs += [{"_id": f"stub{i}", "text": _prose(rng, 300)} for i in range(3)]
    _write_jsonl(tmp_path / "wiki.jsonl", docs)
    [report] = _run(tmp_path / "wiki.jsonl", tmp_path / "out", quality_options={"gopher": False, "fineweb": False})
    assert report.figures["corpus_level"] == "article" and report.figures["kept_whole"] == 0
    assert report.figures["documents_below_min_length"] == 3
    assert "curate: 3 of 15 documents are shorter than min_length=1,024 characters" in capsys.readouterr().out
    rows = _corpus(tmp_path / "out")
    assert rows and all(1024 <= len(r["text"]) <= 2048 for r in rows)
    assert not any(r["_id"].startswith("stub") for r in rows)
    assert report.dropped["chunk_too_short"] > 3  # the stubs and short last pieces
    assert Curate(str(tmp_path / "wiki.jsonl")).estimate(None).note.endswith(  # type: ignore[arg-type]
        "corpus_level=article: 3 documents shorter than min_length=1,024, dropped whole")


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
    with pytest.raises(ConvragError, match="corpus_level must be one of auto, article, passage, got 'page'"):
        Curate(str(tmp_path), corpus_level="page")
