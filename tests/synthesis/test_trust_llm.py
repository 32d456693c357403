"""Trust in `convrag synthesize mtr` / `synthesize recor` (issue 29, classes 2, 3, 4 and 6): the agents talk over HTTP
to a fake OpenAI-compatible server answering as instruction-tuned models do.

* No empty success: a stage that drops everything (dead endpoint, unusable replies) stops the run there with exit 1
  and one line naming the stage and the drops per reason; later stages never run; no "Build it" hint.
* ``--out`` is never an input nor a folder the command does not own; ``--dry-run`` writes nothing.
* A rerun after one corpus line changed redoes the stages that depend on it and says so; the output carries the edit,
  and unchanged LLM calls come from the cache.
* Every option is checked by name, type and allowed values before any work, in ``--dry-run`` too.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from convrag.cli import main
from convrag.core.errors import EmptyResult
from convrag.core.out_folder import OWNER_MARKER
from convrag.synthesis.engine.pipeline import Pipeline, write_json_atomic
from convrag.synthesis.engine.records import read_records, write_shard
from convrag.synthesis.recor.release import Release
from tests.llm.test_faults import FakeServer
from tests.mtr_bench_fixture import CLUSTERS

TOPICS = [(title, text) for name in ("volcano", "sibelius") for title, text in CLUSTERS[name][1]]
#: a cheap run: short chunks, no quality model, no embedding model (random clusters), 2 conversations x 2 turns
SMALL = ["--no-progress", "--option", "chunk_size=256", "--option", "min_length=50",
         "--option", "quality_options={gopher: false, fineweb: false}", "--option", "method=random",
         "--option", "cluster_size=4", "--option", "turns=2", "--option", "conversations=2",
         "--option", "test_fraction=0.5", "--concurrency", "2"]  # fmt: skip
DOC_LINE = re.compile(r"^\[(\d+)\] (.+)$", re.M)


# -- the fake server's replies, in the shapes chat models write ---------------------------------------------------
def agents(body: dict) -> str:
    """Questioner: a preamble and fenced JSON naming a document not asked about yet; Responder: reasoning then a
    markdown answer restating the reference text's first sentence; Polisher: a short casual rewrite."""
    messages = body["messages"]
    system, last = messages[0]["content"], messages[-1]["content"]
    if system.startswith("You play a curious person"):
        mine = messages[1]["content"].split("Now your turn.", 1)[1]
        asked = set(re.findall(r"^\d+\. (.+)$", mine, re.M))
        number, title = next((n, t) for n, t in DOC_LINE.findall(mine) if _question(t) not in asked)
        reply = json.dumps({"document": int(number), "question": _question(title)})
        return f"Sure! Here is my question:\n```json\n{reply}\n```"
    if system.startswith("You are a helpful assistant"):
        reference = last.split("\n", 1)[1].split("\n\nQuestion:", 1)[0]
        first = reference.split("\n", 1)[1].split(". ")[0].rstrip(".")
        return f"<think>The reference covers this.</think>\n**In short:** {first}. Ask me if you want more."
    question = re.search(r"Next question, as written: (.+)", last).group(1)
    return "and " + question.removeprefix("What is worth knowing about ").rstrip("?").lower() + "?"


def _question(title: str) -> str:
    return f"What is worth knowing about {title}?"


def refusal(body: dict) -> str:
    return "I'm sorry, but I can't help with that request."


@pytest.fixture
def server() -> Iterator[FakeServer]:
    s = FakeServer()
    s.responder = agents
    yield s
    s.close()


@pytest.fixture
def dead() -> str:
    """The base URL of a port nobody listens on (connections refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _roles(url: str) -> list[str]:
    spec = f"openai:test-model@{url};max_retries=0;timeout=5"
    return ["--questioner", spec, "--responder", spec, "--polisher", spec]


def _corpus(folder: Path) -> Path:
    path = folder / "corpus.jsonl"
    path.write_text("".join(json.dumps({"_id": f"d{i}", "title": t, "text": x}) + "\n"
                            for i, (t, x) in enumerate(TOPICS)), encoding="utf-8")
    return path


def _digest(*paths: Path) -> list[str]:
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]


def _mtr(corpus: Path, out: Path, *extra: str) -> int:
    return main(["synthesize", "mtr", "--corpus", str(corpus), "--out", str(out), *SMALL, *extra])


def _failed(capsys: pytest.CaptureFixture[str], code: int, expected: int) -> tuple[str, str]:
    """(the one stderr line, stdout) after a run that must end with ``expected``."""
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == expected, captured.err
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert lines[0].startswith("convrag synthesize: " + ("failed: " if expected == 1 else "error: ")), lines[0]
    return lines[0], captured.out


# -- class 2: no empty success ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("conversations", "message"), [
    ("2", "converse dropped all 2 conversations (questioner: call failed after retries (endpoint unreachable: "
          "connection): 2)"),
    ("4", "converse stopped: openai:test-model@"),  # 3 refused calls in a row: the breaker ends the run at once
])
def test_mtr_against_a_dead_endpoint_stops_at_converse(tmp_path, capsys, dead, conversations, message) -> None:
    corpus, out = _corpus(tmp_path), tmp_path / "out"
    before = _digest(corpus)
    line, stdout = _failed(capsys, _mtr(corpus, out, *_roles(dead), "--option", f"conversations={conversations}"), 1)
    assert message in line, line
    assert "Build it" not in stdout and "no conversation to assemble" not in line
    assert (out / "cluster" / "report.json").is_file() and not (out / "converse" / "report.json").exists()
    assert not (out / "polish").exists() and not (out / "assemble").exists()
    marked = json.loads((out / "converse" / "incomplete.json").read_text())
    assert marked["complete"] is False and marked["reason"] in line
    assert _digest(corpus) == before


@pytest.mark.parametrize(("reply", "message"), [
    (refusal, "converse dropped all 2 conversations (questioner: reply unparsable after re-asks: 2)"),
    (lambda body: "Great question! I would ask about the volcano, of course.",
     "(questioner: reply unparsable after re-asks: 2)"),
    (lambda body: "" if body["messages"][0]["content"].startswith("You are a helpful") else agents(body),
     "converse dropped all 2 conversations (responder: unusable reply (blank answer): 2)"),
    (lambda body: "[ERROR: generation failed]" if body["messages"][0]["content"].startswith("You are a helpful")
     else agents(body), "(responder: unusable reply (failure marker): 2)"),
])
def test_mtr_with_every_reply_unusable_stops_at_converse(tmp_path, capsys, server, reply, message) -> None:
    server.responder = reply
    corpus, out = _corpus(tmp_path), tmp_path / "out"
    line, stdout = _failed(capsys, _mtr(corpus, out, *_roles(server.url)), 1)
    assert message in line and line.startswith("convrag synthesize: failed: converse"), line
    assert "Build it" not in stdout and not (out / "polish").exists() and not (out / "assemble").exists()
    # the next run redoes the stage from the start: unparsable replies were not cached, so once the model answers
    # properly the run goes through; a reply that parsed but is unusable is cached and stays a failure
    server.responder = agents
    code = _mtr(corpus, out, *_roles(server.url))
    if "questioner" in message:
        assert code == 0 and not (out / "converse" / "incomplete.json").exists()
        assert (out / "assemble" / "test.parquet").is_file()
    else:
        assert message in _failed(capsys, code, 1)[0] and not (out / "polish").exists()


def _items(folder: Path) -> Path:
    path = folder / "items.jsonl"
    rows = [{"id": f"q{i}", "query": f"Why did the {what} happen?", "answer": f"Because of {why}.", "domain": "law",
             "documents": [{"doc_id": f"d{i}", "text": f"The {what} happened because of {why}, the court found."}]}
            for i, (what, why) in enumerate([("appeal", "a procedural error"), ("retrial", "new evidence")])]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", ["dead endpoint", "refusals", "prose without JSON"])
def test_recor_with_no_usable_reply_stops_at_align(tmp_path, capsys, server, dead, kind) -> None:
    server.responder = refusal if kind == "refusals" else lambda body: "**Assessment:** the documents look fine."
    url = dead if kind == "dead endpoint" else server.url
    items, out = _items(tmp_path), tmp_path / "out"
    before = _digest(items)
    code = main(["synthesize", "recor", "--input", str(items), "--out", str(out), "--no-progress",
                 "--llm", f"openai:test-model@{url};max_retries=0;timeout=5", "--concurrency", "1"])
    line, stdout = _failed(capsys, code, 1)
    reason = ("llm: call failed after retries (endpoint unreachable: connection)" if kind == "dead endpoint"
              else "alignment: reply unparsable after re-asks")
    assert f"align dropped all 2 items (align: {reason}: 2)" in line, line
    assert "Build it" not in stdout
    assert (out / "load" / "report.json").is_file() and (out / "align" / "incomplete.json").is_file()
    assert not any((out / stage).exists() for stage in ("aspects", "facts", "turns", "release"))
    assert _digest(items) == before


def test_a_release_with_no_turn_is_a_failure(tmp_path) -> None:
    out = tmp_path / "run"
    (out / "turns").mkdir(parents=True)
    item = {"id": "q1", "query": "Why?", "answer": "Because.", "domain": "law", "turns": [],
            "documents": [{"doc_id": "d1", "text": "Because."}], "negatives": []}
    write_shard(out / "turns" / "part-00000.parquet", [item], {"records_in": 1, "first": "q1", "last": "q1"})
    write_json_atomic(out / "turns" / "report.json", {"stage": "turns", "records_in": 1, "records_out": 1})
    with pytest.raises(EmptyResult, match=r"release wrote 1 conversations with 0 turns \(of 1 items\)"):
        Pipeline("recor-dv", [Release("items.jsonl")]).run(out, progress=False)
    assert not (out / "release" / "report.json").exists()
    assert json.loads((out / "release" / "incomplete.json").read_text())["complete"] is False


# -- class 3: --out is never an input, and only a folder this command owns ----------------------------------------
@pytest.mark.parametrize(("where", "message"), [
    ("user folder", "--out is not empty and is not a results folder of `convrag synthesize mtr` (it has no "),
    ("audit folder", "it holds `convrag audit` results"),
    ("recor folder", "it holds `convrag synthesize recor` results"),
    ("corpus folder", "--out is an input of this command"),
    ("inside corpus folder", "--out is inside the input folder"),
    ("parent of corpus", "--out contains the input"),
    ("corpus file", "--out names an existing file, not a folder"),
])
@pytest.mark.parametrize("dry_run", [False, True])
def test_out_refusals_leave_everything_as_it_was(tmp_path, capsys, server, where, message, dry_run) -> None:
    data = tmp_path / "data"
    data.mkdir()
    corpus, notes = _corpus(data), data / "notes.txt"
    notes.write_text("my own notes\n")
    source: Path = corpus
    out = {"user folder": data, "audit folder": tmp_path / "audit", "recor folder": tmp_path / "recor",
           "corpus folder": data, "inside corpus folder": data / "syn", "parent of corpus": tmp_path,
           "corpus file": corpus}[where]
    if where == "user folder":
        source = tmp_path / "elsewhere.jsonl"
        source.write_bytes(corpus.read_bytes())
    if where in ("corpus folder", "inside corpus folder"):
        source = data
        notes.unlink()
    for name, command in (("audit", "audit"), ("recor", "synthesize recor")):
        if where.startswith(name):
            out.mkdir()
            (out / OWNER_MARKER).write_text(json.dumps({"command": command}) + "\n")
            (out / "summary.md").write_text("results\n")
    files = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    before = _digest(*files)
    line, _ = _failed(capsys, _mtr(source, out, *_roles(server.url), *(["--dry-run"] if dry_run else [])), 2)
    assert message in line, line
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == files and _digest(*files) == before
    assert server.requests == []


def test_dry_run_creates_nothing_and_an_earlier_run_folder_is_resumed(tmp_path, capsys) -> None:
    corpus, out = _corpus(tmp_path), tmp_path / "out"
    assert _mtr(corpus, out, "--dry-run") == 0 and not out.exists()
    # a folder an earlier run of the same pipeline wrote before folders were marked: taken over and resumed
    out.mkdir()
    (out / "pipeline.json").write_text(json.dumps({"pipeline": "mtr", "seed": 0, "stages": ["curate"]}))
    curate = ["synthesize", "mtr", "--corpus", str(corpus), "--out", str(out), "--stages", "curate", *SMALL[:7]]
    assert main(curate) == 0
    assert json.loads((out / OWNER_MARKER).read_text()) == {"command": "synthesize mtr"}
    capsys.readouterr()
    assert main(curate) == 0
    assert re.search(r"curate: 16 in -> 16 out in [\d.]+ s \(finished earlier, not rerun\)", capsys.readouterr().out)
    # the folder of one pipeline is not the other's
    items = _items(tmp_path)
    code = main(["synthesize", "recor", "--input", str(items), "--out", str(out), "--llm", "fake", "--dry-run"])
    line, _ = _failed(capsys, code, 2)
    assert "it holds `convrag synthesize mtr` results" in line


# -- class 4: reruns follow the inputs ----------------------------------------------------------------------------
def _turns(out: Path) -> dict[tuple[str, int], dict]:
    return {(r["id"], t["turn"]): t for r in read_records(out / "polish") for t in r["turns"]}


def test_a_rerun_after_one_corpus_line_changed_carries_the_edit(tmp_path, capsys, server) -> None:
    corpus, out = _corpus(tmp_path), tmp_path / "out"
    command = [*_roles(server.url)]
    assert _mtr(corpus, out, *command) == 0
    first_calls = len(server.requests)
    assert "Build it: convrag build mtr-bench" in capsys.readouterr().out
    # edit the line of the document asked about first
    key, turn = sorted(_turns(out).items())[0]
    line_no = int(turn["gold"].split("#")[0][1:])
    lines = corpus.read_text(encoding="utf-8").splitlines()
    row = json.loads(lines[line_no])
    row["text"] = "A lava lamp is a decorative light whose wax blobs rise and fall. " + row["text"]
    lines[line_no] = json.dumps(row)
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")

    # a run of the later stages only would build on the stale curation: refused, naming the first stale stage
    later = ["synthesize", "mtr", "--corpus", str(corpus), "--out", str(out), "--stages", "converse,polish,assemble",
             "--option", "turns=2", "--option", "conversations=2", "--option", "test_fraction=0.5", *command]
    line, _ = _failed(capsys, main(later), 2)
    assert "out/curate: input changed since stage curate ran (corpus.jsonl) and it is not among the stages" in line

    assert _mtr(corpus, out, *command) == 0
    printed = capsys.readouterr().out
    assert "curate: input changed (corpus.jsonl), redoing curate and the 4 stages after it" in printed
    assert "finished earlier, not rerun" not in printed
    edited = _turns(out)[key]
    assert edited["gold"] == turn["gold"] and "A lava lamp is a decorative light" in edited["answer"]
    documents = pq.read_table(out / "assemble" / "corpus.parquet").to_pylist()
    assert [d["text"] for d in documents if d["id"] == turn["gold"]][0].startswith("A lava lamp")
    rows = [r for split in ("test", "train") for r in pq.read_table(out / "assemble" / f"{split}.parquet").to_pylist()]
    assert any("A lava lamp" in r["ground_truth_ctx"]["text"] for r in rows)
    # only the calls whose prompt shows the edited document were made again; the rest came from the cache
    second_calls = len(server.requests) - first_calls
    assert 0 < second_calls < first_calls

    # nothing changed: nothing is redone, no call is made
    assert _mtr(corpus, out, *command) == 0
    printed = capsys.readouterr().out
    assert printed.count("(finished earlier, not rerun)") == 5 and "input changed" not in printed
    assert len(server.requests) == first_calls + second_calls


#: the options of SMALL that each later stage takes, for runs of some stages only
TAKES = {"converse": ["turns=2", "conversations=2"], "assemble": ["test_fraction=0.5"]}


def _some(stages: str, corpus: Path | None, out: Path, url: str, *extra: str) -> int:
    """A run of ``stages`` only (``--corpus`` left out when ``corpus`` is None), with their SMALL options and roles."""
    names = stages.split(",")
    spec = f"openai:test-model@{url};max_retries=0;timeout=5"
    options = [a for s in names for o in TAKES.get(s, []) for a in ("--option", o)]
    roles = [a for role, s in (("questioner", "converse"), ("responder", "converse"), ("polisher", "polish"))
             if s in names for a in (f"--{role}", spec)]
    source = ["--corpus", str(corpus)] if corpus is not None else []
    return main(["synthesize", "mtr", *source, "--out", str(out), "--stages", stages, "--no-progress", *options,
                 *roles, *extra])


def _tree(out: Path) -> dict[str, str]:
    """Every file under a run folder (but its lock) with its content hash."""
    return {str(p.relative_to(out)): _digest(p)[0] for p in sorted(out.rglob("*")) if p.is_file() and p.name != ".lock"}


def _rows(out: Path) -> str:
    """The MTR-Bench turn rows of the assemble stage, as one JSON text."""
    return json.dumps([r for split in ("test", "train") for r in pq.read_table(out / "assemble" / f"{split}.parquet")
                       .to_pylist()], default=str)


def test_a_file_added_to_or_removed_from_a_corpus_folder_is_a_change(tmp_path, capsys, server) -> None:
    data, out = tmp_path / "corpus", tmp_path / "out"
    data.mkdir()
    rows = [json.dumps({"_id": f"d{i}", "title": t, "text": x}) + "\n" for i, (t, x) in enumerate(TOPICS)]
    (data / "a.jsonl").write_text("".join(rows[:8]), encoding="utf-8")
    (data / "b.jsonl").write_text("".join(rows[8:]), encoding="utf-8")
    assert _mtr(data, out, *_roles(server.url)) == 0
    calls = len(server.requests)
    added = {"_id": "lava", "title": "Lava lamp", "text": "A lava lamp is a decorative light whose wax blobs rise "
             "and fall in a glass vessel filled with water and a little salt, heated by a bulb in its base."}
    (data / "c.jsonl").write_text(json.dumps(added) + "\n", encoding="utf-8")
    capsys.readouterr()
    # later stages only on top of a curation that lacks the new file: refused, with --corpus or without it (the
    # corpus folder recorded by curate is listed again), before any call and with the run folder untouched
    inputs, before = sorted(data.iterdir()), _tree(out)
    for stages, corpus in (("converse,assemble", data), ("converse,polish", None)):
        line, _ = _failed(capsys, _some(stages, corpus, out, server.url), 2)
        assert line.endswith("out/curate: input changed since stage curate ran (c.jsonl (added)) and it is not "
                             "among the stages run; add curate and the stages after it to --stages"), line
    assert _tree(out) == before and len(server.requests) == calls
    assert _digest(*inputs) == _digest(*sorted(data.iterdir()))
    # the whole pipeline: redone from curate, and the new document is in the benchmark's corpus
    assert _mtr(data, out, *_roles(server.url)) == 0
    printed = capsys.readouterr().out
    assert "curate: input changed (c.jsonl (added)), redoing curate and the 4 stages after it" in printed
    assert "finished earlier" not in printed
    assert "lava#0" in pq.read_table(out / "assemble" / "corpus.parquet").column("id").to_pylist()
    # a file taken away is a change too
    (data / "b.jsonl").unlink()
    line, _ = _failed(capsys, _some("converse,assemble", data, out, server.url), 2)
    assert "out/curate: input changed since stage curate ran (b.jsonl (removed))" in line, line
    assert _mtr(data, out, *_roles(server.url)) == 0
    assert "curate: input changed (b.jsonl (removed)), redoing curate and the 4 stages after it" in \
        capsys.readouterr().out
    documents = {d.split("#")[0] for d in pq.read_table(out / "assemble" / "corpus.parquet").column("id").to_pylist()}
    assert documents == {"lava", *(f"d{i}" for i in range(8))}


def test_a_redone_stage_whose_output_changed_makes_the_later_stages_redo(tmp_path, capsys, server) -> None:
    corpus, out = _corpus(tmp_path), tmp_path / "out"
    assert _mtr(corpus, out, *_roles(server.url)) == 0
    calls = len(server.requests)
    # converse redone with the cache in place: the same output, so polish and assemble stand
    assert _some("converse", corpus, out, server.url, "--redo", "converse") == 0
    capsys.readouterr()
    assert _mtr(corpus, out, *_roles(server.url)) == 0
    printed = capsys.readouterr().out
    assert printed.count("(finished earlier, not rerun)") == 5 and "input changed" not in printed, printed
    assert len(server.requests) == calls
    # converse redone without the cache, the model now answering otherwise: its output changed
    shutil.rmtree(out / "llm-cache")
    server.responder = lambda body: agents(body).replace("**In short:**", "**Briefly:**")
    assert _some("converse", corpus, out, server.url, "--redo", "converse") == 0
    assert "Briefly" not in _rows(out)
    # assemble alone would build on the polish of the old conversations: refused, naming polish
    before = _tree(out)
    line, _ = _failed(capsys, _some("assemble", corpus, out, server.url), 2)
    assert line.endswith("out/polish: input changed since stage polish ran (the output of stage converse) and it "
                         "is not among the stages run; add polish and the stages after it to --stages"), line
    assert _tree(out) == before
    # the whole pipeline redoes polish and assemble, on the new conversations
    assert _mtr(corpus, out, *_roles(server.url)) == 0
    printed = capsys.readouterr().out
    assert "polish: input changed (the output of stage converse), redoing polish and the stage after it" in printed
    assert printed.count("(finished earlier, not rerun)") == 3, printed
    assert "Briefly" in _rows(out) and "In short" not in _rows(out)

# -- class 6: options checked by name, type and value before any work ---------------------------------------------
@pytest.mark.parametrize(("option", "message"), [
    ("index=foo", "index must be one of flat, hnsw, ivf, got 'foo'"),
    ("turns=2.5", "--option turns=2.5: turns takes a whole number"),
    ("conversations=many", "--option conversations='many': conversations takes a whole number or null"),
    ("merge=sometimes", "--option merge='sometimes': merge takes true or false"),
    ("headings=References", "--option headings='References': headings takes a list of texts or null"),
    ("switch_ratio=half", "--option switch_ratio='half': switch_ratio takes a number"),
    ("index_options={nprobe: 0}", "index_options: nprobe must be a whole number >= 1, got 0"),
    ("index_options={probes: 4}", "index_options: unknown key 'probes'"),
    ("minhash_perm=0", "minhash_perm must be a whole number >= 1, got 0"),
    ("max_seq_length=0", "max_seq_length must be a whole number >= 1, got 0"),
    ("min_length=-1", "chunking: min_length must be a whole number >= 0, got -1"),
    ("--questioner=nonsense:model", "questioner: unknown LLM backend 'nonsense'"),
    ("--polisher=openai:", "polisher: LLM spec 'openai:': give a model"),
])
@pytest.mark.parametrize("dry_run", [False, True])
def test_bad_mtr_options_exit_2_before_any_work(tmp_path, capsys, server, option, message, dry_run) -> None:
    corpus, out = _corpus(tmp_path), tmp_path / "out"
    given = [option] if option.startswith("--") else ["--option", option]
    code = _mtr(corpus, out, *_roles(server.url), *given, *(["--dry-run"] if dry_run else []))
    line, _ = _failed(capsys, code, 2)
    assert message in line, line
    assert not out.exists() and server.requests == []


@pytest.mark.parametrize(("option", "message"), [
    ("max_turns=2.5", "--option max_turns=2.5: max_turns takes a whole number"),
    ("enforce_form=sometimes", "--option enforce_form='sometimes': enforce_form takes true or false"),
    ("domain=astrology", "domain must be one of RECOR's"),
    ("min_coverage=most", "--option min_coverage='most': min_coverage takes a number"),
    ("answer_sentences=[two]", "answer_sentences takes a text or a list of whole numbers"),
    ("limit=0", "limit must be a whole number >= 1"),
])
@pytest.mark.parametrize("dry_run", [False, True])
def test_bad_recor_options_exit_2_before_any_work(tmp_path, capsys, option, message, dry_run) -> None:
    items, out = _items(tmp_path), tmp_path / "out"
    code = main(["synthesize", "recor", "--input", str(items), "--out", str(out), "--no-progress", "--llm", "fake",
                 "--option", option, *(["--dry-run"] if dry_run else [])])
    line, _ = _failed(capsys, code, 2)
    assert message in line, line
    assert not out.exists()
