"""The converse, polish and assemble stages with scripted agents: turn batches, gold recording, the failure
rule, resuming from the LLM cache after a crash, the Polisher's propagation, estimates.

The scripted model plays all three roles with hand-written texts: per document title a question a person
would ask, an answer, and a casual rewrite (some rewrites break the Polisher's rules on purpose).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from convrag.cli import main
from convrag.core.errors import ConvragError
from convrag.llm import LLM, DiskCache, RetryPolicy
from convrag.llm.backends.fake import FakeBackend
from convrag.synthesis.engine.pipeline import StageContext, write_json_atomic, write_table_atomic
from convrag.synthesis.engine.records import read_records
from convrag.synthesis.mtr import converse as converse_module
from convrag.synthesis.mtr import polish as polish_module
from convrag.synthesis.mtr.assemble import Assemble
from convrag.synthesis.mtr.converse import PROFILE_DEFAULTS, Converse
from convrag.synthesis.mtr.polish import Polish
from tests.mtr_bench_fixture import CLUSTERS

TITLES = {name: [title for title, _ in CLUSTERS[name][1][:4]] for name in ("volcano", "sibelius")}
QUESTION = {
    "Mount Etna": "How tall is Mount Etna these days?",
    "Stratovolcano": "Why do some volcanoes explode instead of just oozing lava?",
    "Pyroclastic flow": "How fast can the hot cloud from an eruption move downhill?",
    "Volcanic Explosivity Index": "How do scientists rate how big an eruption was?",
    "Jean Sibelius": "When did Sibelius live and where was he from?",
    "Finlandia": "What happened to the hymn part of Finlandia later on?",
    "Symphony No. 5 (Sibelius)": "When was his Fifth Symphony first played?",
    "Violin Concerto (Sibelius)": "Did Sibelius write more than one concerto?",
}
ANSWER = {
    "Mount Etna": "Mount Etna stands at roughly 3,300 metres, which makes it the tallest active volcano in Europe "
                  "outside the Caucasus. Its exact height shifts over time because each eruption adds or removes "
                  "material near the summit.",
    "Stratovolcano": "Steep cone volcanoes, called stratovolcanoes, have thick, sticky lava that traps gas. The "
                     "pressure builds until it is released violently, which is why their eruptions tend to be "
                     "explosive rather than gentle.",
    "Pyroclastic flow": "These currents of hot gas and rock fragments can race down a slope at more than 100 km/h, "
                        "at temperatures of several hundred degrees Celsius, so there is no outrunning them.",
    "Volcanic Explosivity Index": "They use the Volcanic Explosivity Index, a scale from 0 to 8 based on how much "
                                  "material was erupted and how high the column rose; each step is about ten times "
                                  "more material than the one before.",
    "Jean Sibelius": "Jean Sibelius lived from 1865 to 1957. He was a Finnish composer of the late Romantic era, and "
                     "his music became closely linked with Finland's national identity before independence.",
    "Finlandia": "The calm, hymn-like middle section of Finlandia took on a life of its own and became a popular "
                 "song in its own right, sung separately from the tone poem.",
    "Symphony No. 5 (Sibelius)": "The Fifth Symphony premiered in December 1915, on Sibelius's 50th birthday. He "
                                 "revised it twice; the 1919 version ends with six widely spaced chords.",
    "Violin Concerto (Sibelius)": "No, the Violin Concerto in D minor is the only concerto he wrote. It was first "
                                  "performed in 1904 and tightened into its familiar form in 1905.",
}
CASUAL = {  # the Polisher's replies; some break its rules on purpose
    QUESTION["Stratovolcano"]: "why do some of them explode",
    QUESTION["Pyroclastic flow"]: "Sure, here is a casual version: how fast is that hot cloud",
    QUESTION["Volcanic Explosivity Index"]: "so like how do they even measure or rate how big one of those "
                                            "eruptions was compared to other ones in history",
    QUESTION["Finlandia"]: "what happened to the hymn bit later",
    QUESTION["Symphony No. 5 (Sibelius)"]: "ok",
    QUESTION["Violin Concerto (Sibelius)"]: "did he write any other concertos",
    QUESTION["Mount Etna"]: "how tall is it now",
    QUESTION["Jean Sibelius"]: "when did he live",
}
DOC_LINE = re.compile(r"^\[(\d+)\] (.+)$", re.M)


class World:
    """The scripted model: reads which role is asked and answers with the texts above."""

    def __init__(self, broken: set[str] = frozenset(), blank: set[str] = frozenset()) -> None:
        self.broken, self.blank = broken, blank  # titles whose question / answer comes back unusable

    def __call__(self, messages: list[dict[str, str]]) -> str:
        system = messages[0]["content"]
        if system.startswith("You play a curious person"):
            return self.question(messages[1]["content"])
        if system.startswith("You are a helpful assistant"):
            title = messages[-1]["content"].splitlines()[1]
            return "" if title in self.blank else f"<think>The reference covers this.</think>\n{ANSWER[title]}"
        question = re.search(r"Next question, as written: (.+)", messages[-1]["content"]).group(1)
        return CASUAL[question]

    def question(self, prompt: str) -> str:
        mine = prompt.split("Now your turn.", 1)[1]
        asked = set(re.findall(r"^\d+\. (.+)$", mine, re.M))
        for number, title in DOC_LINE.findall(mine):
            if QUESTION[title] not in asked:
                if title in self.broken:
                    return "Good one! I'd love to know more about that fast hot cloud thing."
                return f'Here is my question:\n{{"document": {number}, "question": "{QUESTION[title]}"}}'
        raise AssertionError("the scripted user ran out of questions")


def scripted(world: World, cache: Path, calls: list[int]) -> Any:
    def make(spec: str | None, ctx: StageContext, concurrency: int) -> LLM:
        backend = FakeBackend(responder=lambda m: (calls.append(1), world(m))[1])
        return LLM(backend, cache=DiskCache(cache), report=ctx.llm_report, retry=RetryPolicy(max_retries=0),
                   max_concurrency=concurrency)
    return make


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A run folder whose cluster stage finished: two clusters of four documents, the corpus as a JSONL source."""
    out = tmp_path / "run"
    corpus = tmp_path / "corpus.jsonl"
    texts = dict(text for name in TITLES for text in CLUSTERS[name][1])
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "title": t, "text": texts[t]}) + "\n"
                              for i, t in enumerate(TITLES["volcano"] + TITLES["sibelius"])), encoding="utf-8")
    (out / "cluster").mkdir(parents=True)
    rows = [{"cluster_idx": 7, "doc_ids": ["d0", "d1", "d2", "d3"]},
            {"cluster_idx": 9, "doc_ids": ["d4", "d5", "d6", "d7"]}]
    schema = pa.schema([("cluster_idx", pa.int64()), ("doc_ids", pa.list_(pa.string()))])
    write_table_atomic(out / "cluster" / "clusters.parquet", pa.Table.from_pylist(rows, schema=schema))
    write_json_atomic(out / "cluster" / "report.json", {"stage": "cluster", "records_in": 8, "records_out": 8})
    return out


def _stage(stage: Any, out: Path, seed: int = 0):
    folder = out / stage.name
    folder.mkdir(exist_ok=True)
    report = stage.run(StageContext(out=out, folder=folder, seed=seed, progress=False))
    write_json_atomic(folder / "report.json", report.to_dict())  # finished, as the pipeline marks it
    return report


def _converse(run: Path, monkeypatch, world: World, calls: list[int], **options: Any):
    monkeypatch.setattr(converse_module, "role_llm", scripted(world, run / "llm-cache", calls))
    stage = Converse(str(run.parent / "corpus.jsonl"), turns=4, documents_per_turn=3, **options)
    return _stage(stage, run), list(read_records(run / "converse"))


def test_every_turn_records_the_document_the_questioner_named(run: Path, monkeypatch) -> None:
    calls: list[int] = []
    report, records = _converse(run, monkeypatch, World(), calls)
    assert [r["id"] for r in records] == ["c000007", "c000009"] and report.records_out == 2
    titles = {f"d{i}": t for i, t in enumerate(TITLES["volcano"] + TITLES["sibelius"])}
    for rec in records:
        assert rec["complete"] and rec["stop_reason"] == "" and [t["turn"] for t in rec["turns"]] == [1, 2, 3, 4]
        for turn in rec["turns"]:
            assert turn["gold"] in turn["drawn"] and len(turn["drawn"]) == 3
            assert turn["question"] == turn["original_question"] == QUESTION[titles[turn["gold"]]]
            assert turn["answer"] == ANSWER[titles[turn["gold"]]]  # the reasoning before </think> is gone
            tokens = turn["role_tokens"]
            assert turn["prompt_tokens"] == tokens["questioner_prompt"] + tokens["responder_prompt"] > 0
        assert len({t["gold"] for t in rec["turns"]}) == 4  # each turn asked about a new document
    assert len(calls) == 16 and report.llm["calls"] == 16 and report.llm["cache_hits"] == 0
    assert report.figures["profile"] == "authors" and report.figures["answer_tokens_mean"] > 0
    later = [int(v.split()[1].replace(",", "")) for k, v in report.figures.items() if "questioner_turn" in k]
    assert len(later) == 4 and later == sorted(later)  # the history makes later prompts longer


def test_an_unusable_reply_stops_the_conversation_by_the_stated_rule(run: Path, monkeypatch) -> None:
    world = World(broken={"Pyroclastic flow"}, blank={"Finlandia"})
    report, records = _converse(run, monkeypatch, world, [])
    assert records == [] and report.records_out == 0
    assert report.dropped == {"questioner: reply unparsable after re-asks": 1,
                              "responder: unusable reply (blank answer)": 1}


def test_min_turns_keeps_the_good_turns_of_a_stopped_conversation(run: Path, monkeypatch) -> None:
    report, records = _converse(run, monkeypatch, World(blank={"Finlandia"}), [], min_turns=1)
    sibelius = next(r for r in records if r["id"] == "c000009")
    assert not sibelius["complete"] and sibelius["stop_reason"].startswith("responder: unusable reply")
    n = len(sibelius["turns"])
    assert sibelius["stop_reason"].endswith(f"at turn {n + 1}") and all(t["answer"].strip() for t in sibelius["turns"])
    assert next(r for r in records if r["id"] == "c000007")["complete"] and report.dropped == {}
    # a kept conversation that stopped early is counted by its reason in the report, beside the complete ones
    assert report.figures["conversations kept, stopped early: responder: unusable reply (blank answer)"] == 1
    assert report.figures["conversations complete"] == len(records) - 1


def test_a_crash_mid_stage_resumes_from_the_cache_with_the_same_output(run: Path, monkeypatch, tmp_path) -> None:
    calls: list[int] = []
    world = World()

    class Crash(Exception):
        pass

    def crashing(messages):
        if len(calls) == 11:
            raise Crash("power cut")
        return world(messages)

    with pytest.raises(Crash):
        _converse(run, monkeypatch, crashing, calls, shard_size=1, concurrency=1)  # type: ignore[arg-type]
    assert len(calls) == 11 and len(list((run / "converse").glob("part-*.parquet"))) == 1
    resumed_calls: list[int] = []
    report, records = _converse(run, monkeypatch, world, resumed_calls, shard_size=1, concurrency=1)
    # shard 0 (8 calls) is kept; shard 1 is redone: its 2 finished calls come from the cache, 6 are new
    assert len(resumed_calls) == 6 and report.llm["cache_hits"] == 2
    clean = tmp_path / "clean"
    clean.mkdir()
    for name in ("cluster",):
        (clean / name).mkdir()
        for f in (run / name).iterdir():
            (clean / name / f.name).write_bytes(f.read_bytes())
    _, uninterrupted = _converse(clean, monkeypatch, world, [], shard_size=1, concurrency=1)
    assert records == uninterrupted


def test_polish_statuses_and_rewrites_propagate_into_later_history(run: Path, monkeypatch) -> None:
    _converse(run, monkeypatch, World(), [])
    seen: list[list[dict[str, str]]] = []
    world = World()

    def spy(messages):
        seen.append(messages)
        return world(messages)

    monkeypatch.setattr(polish_module, "role_llm", scripted(spy, run / "llm-cache", []))  # type: ignore[arg-type]
    report = _stage(Polish(), run)
    records = list(read_records(run / "polish"))
    statuses = {t["original_question"]: t["polish"] for r in records for t in r["turns"]}
    expected = {QUESTION["Pyroclastic flow"]: "kept: meta phrase: here is",
                QUESTION["Volcanic Explosivity Index"]: "kept: too long",
                QUESTION["Symphony No. 5 (Sibelius)"]: "kept: too short"}
    for original, status in statuses.items():
        first = any(r["turns"][0]["original_question"] == original for r in records)
        assert status == ("first turn" if first else expected.get(original, "rewritten")), original
    for rec in records:
        for turn in rec["turns"]:
            if turn["polish"] == "rewritten":
                assert turn["question"] == CASUAL[turn["original_question"]]
            else:
                assert turn["question"] == turn["original_question"]
    assert report.figures["turns first turn"] == 2 and len(seen) == 6
    last = next(m for m in seen if "[User]" in m[-1]["content"] and m[-1]["content"].count("[User]") == 3)
    rec = next(r for r in records if f"as written: {r['turns'][3]['original_question']}" in last[-1]["content"])
    for turn in rec["turns"][1:3]:
        assert f"[User]: {turn['question']}" in last[-1]["content"]  # the rewrite, not the formal question


def test_assembled_benchmark_builds_and_evaluates(run: Path, monkeypatch, tmp_path: Path) -> None:
    _converse(run, monkeypatch, World(), [])
    monkeypatch.setattr(polish_module, "role_llm", scripted(World(), run / "llm-cache", []))
    _stage(Polish(), run)
    report = _stage(Assemble(str(run.parent / "corpus.jsonl"), switch_ratio=1.0, test_fraction=1.0), run)
    assert report.records_in == 2 and report.records_out == 2 and report.figures["spliced_pairs"] == 1
    built = tmp_path / "built"
    assert main(["build", "mtr-bench", "--source", str(run / "assemble"), "--out", str(built)]) == 0
    queries = pq.read_table(next((built / "queries").glob("test-*.parquet"))).to_pylist()
    assert len(queries) == 8 and {q["switch_phase"] for q in queries} >= {"before switch", "first turn after switch"}
    assert main(["evaluate", str(built), "--retrievers", "bm25", "--bootstrap", "0", "--no-progress",
                 "--out", str(tmp_path / "results")]) == 0
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    assert set(results["per_query"]["bm25|lastturn"]) == {q["_id"] for q in queries}


def test_estimates_before_and_after_the_agents(run: Path, monkeypatch) -> None:
    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    ctx = StageContext(out=run, folder=run / "converse", seed=0, progress=False)
    local = Converse(turns=12).estimate(ctx)
    assert local.records == 2 and local.llm_calls == 48 and local.cost_usd() == 0.0
    priced = Converse(turns=12, questioner="openai:gpt-4o-mini", responder="openai:gpt-4o").estimate(ctx)
    assert priced.cost_usd() > 0 and [p.model for p in priced.parts] == ["gpt-4o-mini", "gpt-4o"]
    assert priced.prompt_tokens / 48 < 3000  # the mean prompt per call over 12 turns (characters / 4)
    assert Polish().estimate(ctx).records is None
    ahead = Polish(polisher="openai:gpt-4o-mini")
    ahead.upstream = Converse(turns=12)  # as the pipeline links them: 11 rewrites per expected conversation
    assert (ahead.estimate(ctx).records, ahead.estimate(ctx).llm_calls) == (2, 22)
    _converse(run, monkeypatch, World(), [])
    polish = Polish(polisher="openai:gpt-4o-mini").estimate(ctx)
    assert polish.records == 2 and polish.llm_calls == 6 and polish.cost_usd() > 0


def test_bad_options_are_one_line_errors() -> None:
    with pytest.raises(ConvragError, match="layout must be one of splice, paper"):
        Converse(layout="zigzag")
    with pytest.raises(ConvragError, match="min_turns must be in 1..6"):
        Converse(layout="paper", turns=12, min_turns=7)
    with pytest.raises(ConvragError, match="documents_per_turn must be a whole number >= 1"):
        Converse(documents_per_turn=0)


def test_prompt_budget_at_twelve_turns_with_real_texts() -> None:
    """Prompt tokens (the embedded model's tokenizer) of each agent at turn 12 with full history, built from real
    MTRAG texts at their longest: passages joined to 2,048-character chunks, agent answers of 120+ words. The
    ``convrag`` profile's cuts keep every prompt under 3,000 tokens even here; the ``authors`` profile's whole
    texts do not (its budget at the paper's sizes: tests/synthesis/mtr/test_authors.py)."""
    from llama_cpp import Llama

    from convrag.llm.backends.llamacpp import default_gguf_path
    from convrag.llm.prompts import load_prompt
    from convrag.llm.structured import compact_schema, json_schema_for
    from convrag.synthesis.mtr.agents import Doc, Exchange, Polisher, Questioner, QuestionReply, Responder
    from tests.conftest import DATA

    vocab = Llama(str(default_gguf_path()), vocab_only=True, verbose=False)

    def tokens(messages: list[dict[str, str]]) -> int:
        return sum(len(vocab.tokenize(m["content"].encode("utf-8"), add_bos=False)) for m in messages)

    conversations = json.loads((DATA / "mtrag" / "mtrag-human" / "conversations" / "conversations.json").read_text())
    messages = [m for c in conversations for m in c["messages"]]
    questions = [m["text"] for m in messages if m["speaker"] == "user"]
    answers = [m["text"] for m in messages if m["speaker"] == "agent" and len(m["text"].split()) >= 120]
    passages = [x["text"] for m in messages for x in m.get("contexts") or [] if len(x["text"]) > 900]
    docs = [Doc(f"d{i}", "A title of a few words", f"{passages[i]} {passages[i + 1]}"[:2048]) for i in range(5)]
    history = [Exchange(questions[i], answers[i]) for i in range(11)]
    schema = json.dumps(compact_schema(json_schema_for(QuestionReply)), ensure_ascii=False)
    structured = load_prompt("structured_output").render(schema_json=schema)
    cuts = PROFILE_DEFAULTS["convrag"]
    questioner = Questioner(None, doc_chars=cuts["questioner_doc_chars"],
                            history_answer_chars=cuts["questioner_history_chars"])
    responder = Responder(None, answer_words=cuts["answer_words"], history_answer_chars=cuts["responder_history_chars"])
    budget = {"questioner": tokens(questioner.messages(docs, history, "0:c1:12")) + tokens(structured),
              "responder": tokens(responder.messages(history, questions[11], docs[0])),
              "polisher": tokens(Polisher(None).messages(history, questions[11]))}
    print(f"\nprompt tokens at turn 12 with full history: {budget}")
    assert all(n < 3000 for n in budget.values()), budget
    # what keeps the Questioner under budget in the convrag profile: its history answers are cut (to 240
    # characters) and its documents (to 800); with whole answers and documents (the authors' view) it is far over
    whole = Questioner(None).messages(docs, history, "0:c1:12")
    print(f"questioner with whole answers and 2,048-character documents: {tokens(whole)}")
    assert tokens(whole) > 4000, tokens(whole)
