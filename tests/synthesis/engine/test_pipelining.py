"""Per-conversation pipelining (issue 33): the converse stage writes the same records as the turn-batched schedule
whatever order replies come back in, and keeps an OpenAI-compatible server at ``--concurrency`` requests in flight
while conversations remain, across shard boundaries; so do the polish stage and the D&V stages' item loop
(``synthesis.engine.schedule.overlap_shards``: its bound, order and failure rules are checked on their own too). A dead
endpoint still stops the run at once.

Corpus: the paragraphs of the first 30 HotpotQA dev-distractor records (real texts, read in place), cut by hand
into clusters of five paragraphs of one record, so that no embedding model is loaded. The served model writes what
each agent would: the Questioner's pick as bare JSON, as fenced JSON after a preamble or in the authors' "[N]
question" form, and a refusal for some titles; the Responder's answer after a reasoning block, bold title first,
and a refusal for some titles; the Polisher's casual rewrite, sometimes behind a meta preamble.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import threading
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from convrag.cli import main
from convrag.llm import EndpointUnreachable, LLMError, run_batch
from convrag.synthesis.engine.pipeline import StageContext, write_json_atomic, write_table_atomic
from convrag.synthesis.engine.records import RecordStage, read_records, write_shard
from convrag.synthesis.engine.roles import failure_reason
from convrag.synthesis.engine.run_folder import claim_run_folder
from convrag.synthesis.engine.schedule import overlap_shards
from convrag.synthesis.mtr import pipeline as mtr
from convrag.synthesis.mtr.agents import draw_documents
from convrag.synthesis.mtr.converse import Converse, turn_record
from convrag.synthesis.mtr.pipeline import mtr_pipeline
from convrag.synthesis.recor.common import Drop, DVStage, Outcome, Tokens
from tests.conftest import DATA
from tests.llm.test_concurrency_in_flight import DELAY
from tests.llm.test_faults import FakeServer

HOTPOT = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"
DOC = re.compile(r"^\[(\d+)\] (.+)$", re.M)
ASKED = re.compile(r"^\d+\. (.+)$", re.M)


def _unlucky(role: str, title: str) -> bool:
    """Titles the served model fails on (about one in seven per role), the same in every run."""
    return zlib.crc32(f"{role}:{title}".encode()) % 7 == 0


def _question(title: str) -> str:
    return f"What is there to know about {title}?"


def served(body: dict[str, Any], *, failures: bool = True) -> str:
    """The reply of a served model to an agent's request (module docstring)."""
    messages = body["messages"]
    system = messages[0]["content"]
    if system.startswith("You play a curious person"):
        mine = messages[1]["content"].split("Now your turn.", 1)[-1]
        asked = set(ASKED.findall(mine))
        number, title = next((n, t) for n, t in DOC.findall(mine) if _question(t) not in asked)
        if failures and _unlucky("questioner", title):
            return "I'm sorry, but I can't pick one of these; they all look equally interesting to me."
        style = zlib.crc32(title.encode()) % 3
        if style == 0:
            return json.dumps({"document": int(number), "question": _question(title)})
        if style == 1:
            return (f"Sure! Document {number} looks like the best fit.\n```json\n"
                    f'{{"document": {number}, "question": "{_question(title)}"}}\n```')
        return f"[{number}] {_question(title)}"
    if system.startswith("You are a helpful assistant"):
        lines = messages[-1]["content"].splitlines()
        title, text = lines[1], lines[2]
        if failures and _unlucky("responder", title):
            return "I'm sorry, but I cannot help with that request."
        first = text.split(". ")[0].rstrip(".")
        return (f"<think>The reference text is about {title}; answer from its first sentence.</think>\n"
                f"**{title}**: {first}. That is the main point worth knowing, and the rest of the story follows "
                "from it.")
    original = re.search(r"Next question, as written: (.+)", messages[-1]["content"]).group(1)
    topic = original.removeprefix("What is there to know about ").rstrip("?")
    if zlib.crc32(original.encode()) % 4 == 0:
        return f"Sure, here is a casual version: {topic.lower()}?"
    return f"and what about {topic}?"


def _corpus(tmp_path: Path) -> tuple[Path, list[list[str]]]:
    """The HotpotQA paragraphs as a JSONL corpus, and clusters of five paragraphs of one record."""
    records = json.loads(HOTPOT.read_text(encoding="utf-8"))
    lines: list[str] = []
    clusters: list[list[str]] = []
    for r, rec in enumerate(records):
        ids = []
        for p, (title, sentences) in enumerate(rec["context"]):
            ids.append(f"h{r:02d}p{p}")
            lines.append(json.dumps({"_id": ids[-1], "title": title, "text": "".join(sentences).strip()}))
        clusters += [ids[:5], ids[5:]]
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, clusters


def _clustered(out: Path, clusters: list[list[str]]) -> Path:
    """A run folder whose cluster stage finished with ``clusters``."""
    (out / "cluster").mkdir(parents=True, exist_ok=True)
    schema = pa.schema([("cluster_idx", pa.int64()), ("doc_ids", pa.list_(pa.string()))])
    rows = [{"cluster_idx": i, "doc_ids": ids} for i, ids in enumerate(clusters)]
    write_table_atomic(out / "cluster" / "clusters.parquet", pa.Table.from_pylist(rows, schema=schema))
    n = sum(map(len, clusters))
    write_json_atomic(out / "cluster" / "report.json", {"stage": "cluster", "records_in": n, "records_out": n})
    return out


class TurnBatched(Converse):
    """The reference: converse's schedule before pipelining (its code then, on the stage's helpers). Shard by shard;
    inside a shard, turn t of every live conversation as one batch, the Questioner batch, then the Responder
    batch."""

    #: the shards it wrote
    shards = 0

    def process_shards(self, shards: Iterator[list[dict[str, Any]]],
                       ctx: StageContext) -> Iterator[tuple[list[dict[str, Any]], Counter[str]]]:
        return RecordStage.process_shards(self, shards, ctx)

    def process(self, batch: list[dict[str, Any]], ctx: StageContext) -> tuple[list[dict[str, Any]], Counter[str]]:
        TurnBatched.shards += 1
        convs = self._conversations(batch)
        for t in range(1, self.generated_turns + 1):
            live = [c for c in convs if not c.reason]
            keys = [f"{ctx.seed}:{c.id}:{t}" for c in live]
            drawn = [draw_documents(c.pool, self.documents_per_turn, key) for c, key in zip(live, keys, strict=True)]
            asked = run_batch(list(zip(live, drawn, keys, strict=True)),
                              lambda item: self._questioner.ask(item[1], item[0].history, item[2]),
                              self.concurrency, catch=(LLMError,))
            for i, err in asked.errors.items():
                live[i].reason = failure_reason("questioner", err)
            shown = {c.id: docs for c, docs in zip(live, drawn, strict=True)}
            posed = [(c, q) for c, q in zip(live, asked.results, strict=True) if q is not None]
            answered = run_batch(posed, lambda cq: self._responder.answer(cq[0].history, cq[1].text, cq[1].gold),
                                 self.concurrency, catch=(LLMError,))
            for i, ((conv, question), answer) in enumerate(zip(posed, answered.results, strict=True)):
                if answer is None:
                    conv.reason = failure_reason("responder", answered.errors[i])
                    continue
                conv.turns.append(turn_record(t, question, answer, shown[conv.id]))
        return self._rows(convs)


def _synthesize(out: Path, corpus: Path, spec: str) -> None:
    """converse (3 turns, kept from 2), polish and assemble, 4 requests in flight, shards of 5 conversations."""
    options = {"turns": 3, "documents_per_turn": 3, "min_turns": 2, "questioner": spec, "responder": spec,
               "polisher": spec, "concurrency": 4, "shard_size": 5, "test_fraction": 0.5}
    mtr_pipeline(str(corpus), ["converse", "polish", "assemble"], options=options).run(out, progress=False)


def _files(out: Path) -> dict[str, bytes]:
    """The bytes of every record shard and assembled file."""
    paths = [*sorted((out / "converse").glob("part-*.parquet")), *sorted((out / "polish").glob("part-*.parquet")),
             *sorted((out / "assemble").glob("*.parquet"))]
    return {str(p.relative_to(out)): p.read_bytes() for p in paths}


def _prompts(s: FakeServer) -> list[str]:
    return [hashlib.sha256(json.dumps(r["messages"]).encode()).hexdigest() for r in s.requests]


def test_pipelined_converse_writes_the_turn_batched_output_byte_for_byte(tmp_path: Path, monkeypatch) -> None:
    """12 conversations in shards of 5: the turn-batched run, then the pipelined run against a server that holds
    each reply a random 0-40 ms (so replies come back in another order), then the pipelined run on a copy of the
    turn-batched run's cache. Same shard files, records and assembled benchmark, byte for byte; the two server runs
    got the same requests in another order, and the run on the cache asked only what is never cached."""
    corpus, clusters = _corpus(tmp_path)
    s = FakeServer()
    try:
        spec = f"openai:served-model@{s.url};max_retries=0;timeout=10"
        s.responder = served
        batched = _clustered(tmp_path / "turns", clusters[:12])
        with monkeypatch.context() as patch:
            patch.setitem(mtr.STAGES, "converse", TurnBatched)
            _synthesize(batched, corpus, spec)
        batched_prompts = _prompts(s)
        assert TurnBatched.shards == 3  # shards of 5, 5 and 2 conversations, written by the reference

        rng, lock = random.Random(33), threading.Lock()

        def held(body: dict[str, Any]) -> str:
            with lock:
                pause = rng.uniform(0, 0.04)
            time.sleep(pause)
            return served(body)

        s.requests.clear()
        s.responder = held
        pipelined = _clustered(tmp_path / "pipelined", clusters[:12])
        _synthesize(pipelined, corpus, spec)
        pipelined_prompts = _prompts(s)

        s.requests.clear()
        cached = _clustered(tmp_path / "cached", clusters[:12])
        shutil.copytree(batched / "llm-cache", cached / "llm-cache")
        _synthesize(cached, corpus, spec)
        # every cache key of the pipelined run is one the turn-batched run wrote: only the Questioner's refused
        # requests are made again (a reply that never parsed is not cached), the same requests as before
        again = _prompts(s)
        assert again and set(again) <= set(batched_prompts)
        assert all(served(body).startswith("I'm sorry, but I can't pick") for body in s.requests)
    finally:
        s.close()

    print(f"{len(batched_prompts)} requests; first 8 in the turn-batched run {[p[:6] for p in batched_prompts[:8]]}, "
          f"in the pipelined run {[p[:6] for p in pipelined_prompts[:8]]}")
    assert Counter(batched_prompts) == Counter(pipelined_prompts) and batched_prompts != pipelined_prompts
    reference = _files(batched)
    assert len([f for f in reference if f.startswith("converse/")]) == 3  # shards of 5, 5 and 2 conversations
    assert _files(pipelined) == reference and _files(cached) == reference
    records = list(read_records(batched / "converse"))
    assert list(read_records(pipelined / "converse")) == records == list(read_records(cached / "converse"))
    report = json.loads((pipelined / "converse" / "report.json").read_text(encoding="utf-8"))
    # the failure rule ran too: conversations stopped by a refusal (dropped before turn 2, else kept incomplete)
    print("converse: kept", report["records_out"], "dropped", report["dropped"], "of", report["records_in"])
    assert report["dropped"] and any(not r["complete"] for r in records) and any(r["complete"] for r in records)
    assert report["records_out"] + sum(report["dropped"].values()) == 12


def test_synthesize_mtr_keeps_the_server_at_concurrency_across_shards(tmp_path: Path) -> None:
    """``convrag synthesize mtr --stages converse,polish --concurrency 16`` over 32 conversations of 2 turns in shards
    of 8 (smaller than the bound: a shard barrier would allow at most 8 in flight), each request held ``DELAY`` (as in
    the commands' tests of tests/llm/test_concurrency_in_flight.py). The Questioner and Responder call one server, the
    Polisher another, so each stage's requests in flight are counted apart by the server itself: peak 16 and mean >=
    12 (while work remained to be handed out) in both."""
    corpus, clusters = _corpus(tmp_path)
    out = tmp_path / "run"
    claim_run_folder(out, [corpus], "synthesize mtr", "mtr", [corpus])  # as the command does before its first stage
    _clustered(out, clusters[:32])
    agents, polisher = FakeServer(), FakeServer()
    try:
        for s in (agents, polisher):
            s.delay = DELAY
            s.responder = lambda body: served(body, failures=False)
        start = time.perf_counter()
        code = main(["synthesize", "mtr", "--corpus", str(corpus), "--out", str(out), "--stages", "converse,polish",
                     "--concurrency", "16", "--no-progress", "--option", "turns=2", "--option", "shard_size=8",
                     "--questioner", f"openai:served-model@{agents.url};max_retries=0;timeout=30",
                     "--responder", f"openai:served-model@{agents.url};max_retries=0;timeout=30",
                     "--polisher", f"openai:served-model@{polisher.url};max_retries=0;timeout=30"])
        seconds = time.perf_counter() - start
        assert code == 0
        figures = {name: (len(s.requests), *s.in_flight()) for name, s in (("converse", agents), ("polish", polisher))}
    finally:
        agents.close()
        polisher.close()
    print(f"{seconds:.1f} s; requests, peak, mean in flight: {figures}")
    assert figures["converse"][0] == 32 * 2 * 2 and figures["polish"][0] == 32
    for _, peak, mean in figures.values():
        assert peak == 16 and mean >= 12
    for stage in ("converse", "polish"):  # the stage reports state the achieved figures against the one bound
        flight = json.loads((out / stage / "report.json").read_text(encoding="utf-8"))["llm"]["in_flight"]
        assert flight["limit"] == 16 and flight["peak"] == figures[stage][1] and flight["mean"] >= 12
    assert len(list(read_records(out / "polish"))) == 32 and len(list((out / "converse").glob("part-*"))) == 4


def test_a_dead_endpoint_stops_the_pipelined_run_at_once(tmp_path: Path) -> None:
    """Every request answered 503 (a server that is down behind its proxy): the 16 conversations started first fail,
    the LLM layer's breaker trips after 3 failures in a row and the stage stops there. Only the (at most 2)
    conversations that took the slots of the first failures before it tripped sent a request besides: the rest never
    start, no shard is written and the stage is marked to resume."""
    corpus, clusters = _corpus(tmp_path)
    out = tmp_path / "run"
    claim_run_folder(out, [corpus], "synthesize mtr", "mtr", [corpus])
    _clustered(out, clusters[:32])
    s = FakeServer()
    try:
        s.script = ["503"] * 1000
        s.delay = 0.1
        spec = f"openai:served-model@{s.url};max_retries=0;timeout=30"
        start = time.perf_counter()
        code = main(["synthesize", "mtr", "--corpus", str(corpus), "--out", str(out), "--stages", "converse",
                     "--concurrency", "16", "--no-progress", "--option", "turns=2", "--option", "shard_size=8",
                     "--questioner", spec, "--responder", spec])
        seconds = time.perf_counter() - start
    finally:
        s.close()
    print(f"exit {code} after {seconds:.1f} s and {len(s.requests)} requests")
    assert code != 0 and len(s.requests) <= 16 + 2 and seconds < 5
    assert not list((out / "converse").glob("part-*"))
    stopped = json.loads((out / "converse" / "incomplete.json").read_text(encoding="utf-8"))
    assert stopped["rerun"] == "resume" and "unreachable" in stopped["reason"]


def test_overlap_shards_keeps_the_bound_across_shards_and_the_order() -> None:
    """60 items in shards of 3, 8 threads, each item held 20-60 ms (seeded): 8 items run at once although every shard
    is smaller; shards come out in order with their results in item order; an LLM error is kept per item. A dead
    endpoint (item 20 fails at once) stops the run: no item after those already running starts."""
    rng = random.Random(7)
    pauses = [rng.uniform(0.02, 0.06) for _ in range(60)]
    shards = [list(range(k, k + 3)) for k in range(0, 60, 3)]
    lock = threading.Lock()
    running, peak, started = [0], [0], []
    dead = [False]

    def work(i: int) -> int:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            started.append(i)
        try:
            if i == 20 and dead[0]:
                raise EndpointUnreachable("down", endpoint="http://127.0.0.1:9/v1", failed=3, calls=3)
            time.sleep(pauses[i])
            if i == 4:
                raise LLMError("the reply never parsed")
            return i * i
        finally:
            with lock:
                running[0] -= 1

    out = list(overlap_shards(iter(shards), work, 8))
    assert peak[0] == 8 and [items for items, _ in out] == shards
    assert [r for _, done in out for r in done.results] == [None if i == 4 else i * i for i in range(60)]
    assert isinstance(out[1][1].errors[1], LLMError)  # item 4, the second of shard 1

    dead[0], started[:] = True, []
    with pytest.raises(EndpointUnreachable):
        list(overlap_shards(iter(shards), work, 8))
    # no item starts once its failure is seen: at most one per other slot freed in the few ms before (items are
    # held 20 ms or more), against 60 in all
    assert max(started) <= 27


def test_dv_items_keep_the_server_at_concurrency_across_shards(tmp_path: Path) -> None:
    """A D&V stage whose items each ask one question (the first 24 HotpotQA dev questions) in shards of 3 at
    concurrency 8, each request held 0.5 s: the server sees 8 in flight (a shard barrier would allow 3), the records
    come out in input order and a refused question is dropped with its counted reason."""
    questions = [r["question"] for r in json.loads(HOTPOT.read_text(encoding="utf-8"))[:24]]
    (tmp_path / "load").mkdir()
    write_shard(tmp_path / "load" / "part-00000.parquet", [{"id": f"q{i:02d}", "query": q}
                                                          for i, q in enumerate(questions)], {})
    write_json_atomic(tmp_path / "load" / "report.json", {"stage": "load"})

    def answer(body: dict[str, Any]) -> str:
        question = body["messages"][-1]["content"]
        if "nationality" in question:
            return "I'm sorry, but I can't help with questions about people's nationality."
        return f"Short answer first, then the reasoning.\n**Answer:** {question.split()[-1].rstrip('?')}"

    class Answer(DVStage):
        name, upstream = "answer", "load"

        def handle(self, item: dict[str, Any], llm: Any, tokens: Tokens) -> Outcome:
            reply = llm.chat([{"role": "user", "content": f"Answer in one line: {item['query']}"}])
            tokens.add(reply.usage)
            if reply.text.startswith("I'm sorry"):
                raise Drop("answer: refused")
            return Outcome({**item, "answer": reply.text.split("**Answer:** ", 1)[1]})

    s = FakeServer()
    try:
        s.delay, s.responder = 0.5, answer
        stage = Answer(llm=f"openai:served-model@{s.url};max_retries=0;timeout=30", concurrency=8, shard_size=3)
        (tmp_path / "answer").mkdir()
        report = stage.run(StageContext(out=tmp_path, folder=tmp_path / "answer", seed=0, progress=False))
        peak, mean = s.in_flight()
    finally:
        s.close()
    print(f"{len(s.requests)} requests, peak {peak}, mean {mean:.1f} in flight; dropped {report.dropped}")
    assert peak == 8 and mean >= 6 and len(s.requests) == 24
    assert report.dropped == {"answer: refused": 1} and report.records_out == 23
    kept = list(read_records(tmp_path / "answer"))
    assert [r["id"] for r in kept] == [f"q{i:02d}" for i in range(24) if "nationality" not in questions[i]]
    assert len(list((tmp_path / "answer").glob("part-*"))) == 8


@pytest.mark.parametrize("fatal", [RuntimeError("a corrupt shard"), KeyboardInterrupt()])
def test_a_fatal_error_stops_the_running_chains_at_their_next_call(fatal: BaseException) -> None:
    """8 chains of 10 calls (0.1 s each) on 8 threads; chain 0 fails fatally (an error the stage does not keep, or
    Ctrl-C) after its second call. With the stop event the other chains send no new request once it is set: the run
    ends at their next call, not after every chain played out its remaining turns."""
    from convrag.llm import LLM, RetryPolicy, RunStopped
    from convrag.llm.backends.fake import FakeBackend

    llm = LLM(FakeBackend(responder=lambda messages: "ok", delay=0.1), cache=False, retry=RetryPolicy(max_retries=0),
              max_concurrency=8)
    stop = threading.Event()
    llm.stop = stop
    failed_at: list[float] = []
    after: list[int] = []

    def chain(n: int) -> int:
        for call in range(10):
            if n == 0 and call == 2:
                failed_at.append(time.perf_counter())
                raise fatal
            llm.chat([{"role": "user", "content": f"chain {n} call {call}"}], use_cache=False)
            if failed_at:
                after.append(n)
        return n

    with pytest.raises(type(fatal)):
        for _ in overlap_shards([list(range(8))], chain, 8, catch=(LLMError,), stop=stop):
            pass
    assert stop.is_set()
    # each other chain finishes the call it had in flight, and may start another in the moment before the main thread
    # has seen the failure and set the event (a loaded machine may delay that): a few per chain at most, where
    # without the event the 7 other chains would make all their 56 remaining calls
    assert len(after) <= 21
    with pytest.raises(RunStopped):  # and the client refuses new requests while the run is stopping
        llm.chat([{"role": "user", "content": "one more"}], use_cache=False)
