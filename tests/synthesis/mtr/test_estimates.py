"""Dry-run estimates of the MTR agents (``synthesis.mtr.estimate``): a paper-scale dry run in seconds, and estimates
made before a real run within 10% of the prompt tokens that run's reports measure, with the calls exact.

The real runs talk over HTTP to a fake OpenAI-compatible server answering as chat models do, on real MTRAG passages.
The server counts prompt tokens with the tokenizer and message framing the estimate uses
(``synthesis.engine.tokens.prompt_tokens``: all-MiniLM-L6-v2's WordPiece, 4 tokens per message, 3 per reply), so these
tests check the sample and the growth model; the slow test checks them against the embedded model's own counts.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from convrag.cli import main
from convrag.synthesis.engine.pipeline import Estimate
from convrag.synthesis.engine.records import read_records
from convrag.synthesis.engine.tokens import count_tokens, prompt_tokens
from convrag.synthesis.mtr.converse import DEFAULT_MAX_HISTORY_TOKENS
from convrag.synthesis.mtr.pipeline import mtr_pipeline
from tests.conftest import DATA
from tests.llm.test_faults import FakeServer

#: a small real run: no quality model, random clusters of 8, 3 conversations of 12 turns
OPTIONS: dict[str, Any] = {"min_length": 50, "quality_options": {"gopher": False, "fineweb": False},
                           "method": "random", "cluster_size": 8, "conversations": 3, "turns": 12,
                           "test_fraction": 0.5}


def _passages(low: int, high: int) -> list[dict[str, str]]:
    """MTRAG's cited passages (unique, real texts) whose length is in ``low..high`` characters, in id order."""
    conversations = json.loads((DATA / "mtrag" / "mtrag-human" / "conversations" / "conversations.json").read_text())
    seen: dict[str, dict[str, str]] = {}
    for conv in conversations:
        for message in conv["messages"]:
            for ctx in message.get("contexts") or []:
                if low <= len(ctx["text"]) <= high:
                    seen.setdefault(ctx["document_id"], {"_id": ctx["document_id"], "title": ctx.get("title") or "",
                                                         "text": ctx["text"]})
    return [seen[k] for k in sorted(seen)]


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# -- the fake server's replies ------------------------------------------------------------------------------------
#: real answers of MTRAG's human agents (prose at the density answers have), read one after another
ANSWERS = [m["text"] for c in json.loads((DATA / "mtrag" / "mtrag-human" / "conversations" / "conversations.json")
                                         .read_text()) for m in c["messages"] if m["speaker"] == "agent"][:200]
DOC = re.compile(r"^\[(\d+)\] ?(.*)\n(.+)$", re.M)  # number, title (may be blank), first line of text
ASKS = ("What should I know about {}?", "how did {} come about in the first place?",
        "Can you tell me more about {} and why it matters?", "what's the story with {}?")


def _pick(text: str, n: int) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % n


def agents(body: dict) -> str:
    """Questioner: a preamble and fenced JSON naming a shown document, preferably one not asked about yet;
    Responder: a markdown answer of 65-90 words of real MTRAG answers' prose; Polisher: a short casual rewrite."""
    messages = body["messages"]
    system, last = messages[0]["content"], messages[-1]["content"]
    if system.startswith("You play a curious person"):
        mine = messages[1]["content"].split("Now your turn", 1)[1]
        shown = [(n, title.strip() or " ".join(text.split()[:5])) for n, title, text in DOC.findall(mine)]
        start = _pick(mine, len(shown) * len(ASKS))
        options = [(n, ask.format(subject), subject) for ask in ASKS for n, subject in shown]
        options = options[start:] + options[:start]
        asked = mine.split("Documents:", 1)[0]  # as the prompt asks: a document the conversation has not used yet
        number, question, _ = next((o for o in options if o[2] not in asked),
                                   next((o for o in options if o[1] not in mine), options[0]))
        reply = json.dumps({"document": int(number), "question": question})
        return f"Here is my next question:\n\n```json\n{reply}\n```"
    if system.startswith("You are a helpful assistant"):
        length = 65 + _pick(last, 26) - 2  # 65-90 words with the bold lead
        words = " ".join(ANSWERS[_pick(last + "answer", len(ANSWERS)):]).split()[:length]
        return f"**In short:** {' '.join(words).rstrip('.,;')}."
    question = re.search(r"Next question, as written: (.+)", last).group(1)
    return " ".join(question.lower().rstrip("?").split()[:6]) + "?"


def usage(body: dict, content: str) -> tuple[int, int]:
    return prompt_tokens(body["messages"]), count_tokens(content)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    yield from FakeServer.running(responder=agents, usage=usage)


def _args(options: dict[str, Any]) -> list[str]:
    out = []
    for key, value in options.items():
        text = "{" + ", ".join(f"{k}: {str(v).lower()}" for k, v in value.items()) + "}" if isinstance(value, dict) \
            else str(value)
        out += ["--option", f"{key}={text}"]
    return out


def _role_tokens(out: Path) -> dict[str, int]:
    """Prompt tokens per role as the run measured them (each turn's role_tokens)."""
    sums = {"questioner": 0, "responder": 0, "polisher": 0}
    for rec in read_records(out / "polish"):
        for turn in rec["turns"]:
            for role in sums:
                sums[role] += turn["role_tokens"][f"{role}_prompt"]
    return sums


@pytest.mark.parametrize("budget", [DEFAULT_MAX_HISTORY_TOKENS, 0])
def test_estimate_made_before_a_real_run_is_within_ten_percent(tmp_path: Path, server: FakeServer,
                                                               budget: int) -> None:
    corpus = _write(tmp_path / "corpus.jsonl", _passages(700, 2000)[:40])
    spec = f"openai:test-model@{server.url};max_retries=0;timeout=5"
    options = {**OPTIONS, "max_history_tokens": budget}
    out = tmp_path / "out"
    estimates = dict(mtr_pipeline(str(corpus), seed=0, options={
        **options, "questioner": spec, "responder": spec, "polisher": spec}).estimate(out))
    assert not out.exists()
    assert main(["synthesize", "mtr", "--corpus", str(corpus), "--out", str(out), "--no-progress", "--concurrency",
                 "4", "--questioner", spec, "--responder", spec, "--polisher", spec, *_args(options)]) == 0
    converse = json.loads((out / "converse" / "report.json").read_text())
    polish = json.loads((out / "polish" / "report.json").read_text())
    assert converse["records_out"] == 3 and converse["llm"]["failures"] == 0
    # calls exact: 3 conversations x 12 turns x 2 agents, 3 x 11 rewrites
    assert (estimates["converse"].llm_calls, estimates["polish"].llm_calls) == (72, 33)
    assert (converse["llm"]["calls"], polish["llm"]["calls"]) == (72, 33)
    measured = _role_tokens(out)
    assert measured["questioner"] + measured["responder"] == converse["llm"]["prompt_tokens"]
    assert measured["polisher"] == polish["llm"]["prompt_tokens"]
    predicted = {"questioner": estimates["converse"].parts[0].prompt_tokens,
                 "responder": estimates["converse"].parts[1].prompt_tokens,
                 "polisher": estimates["polish"].prompt_tokens}
    predicted["total"], measured["total"] = sum(predicted.values()), sum(measured.values())
    ratios = {role: predicted[role] / measured[role] for role in predicted}
    turns = {k.rsplit("_", 1)[1]: v.split(", max")[0].split()[1] for k, v in converse["figures"].items()
             if k.startswith("prompt_tokens_questioner_turn_")}
    print(f"\nmax_history_tokens={budget}: estimated / measured prompt tokens "
          + ", ".join(f"{role} {predicted[role]:,} / {measured[role]:,} ({ratios[role]:.3f})" for role in ratios)
          + f"\n  {estimates['converse'].note}\n  measured Questioner prompt per turn (mean): {turns}"
          + f"\n  {converse['figures']['history_cut_questioner']}")
    assert all(0.9 <= r <= 1.1 for r in ratios.values()), ratios
    means = [int(v.replace(",", "")) for v in turns.values()]
    if budget:  # the default budget keeps every turn under the paper's ~3,000 prompt tokens on these passages
        assert max(means) < 3000 and not converse["figures"]["history_cut_questioner"].startswith("0 prompts")
    else:  # without it, the re-sent history takes the late turns over it
        assert means[-1] > 3000 and converse["figures"]["history_cut_questioner"].startswith("no budget")


def test_paper_scale_dry_run_takes_seconds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """4,987 conversations x 12 turns (the paper's MTR-Bench) over MTRAG's cited passages."""
    corpus = _write(tmp_path / "corpus.jsonl", _passages(1, 10**6))
    start = time.perf_counter()
    assert main(["synthesize", "mtr", "--corpus", str(corpus), "--out", str(tmp_path / "out"), "--dry-run",
                 "--option", "conversations=4987", "--option", "turns=12"]) == 0
    seconds = time.perf_counter() - start
    table = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in table.splitlines() if line.split()}
    print(f"\n{table}\npaper-scale dry run: {seconds:.1f} s")
    assert seconds < 30 and not (tmp_path / "out").exists()
    assert rows["converse"][1:3] == ["4,987", "119,688"] and rows["polish"][1:3] == ["4,987", "54,857"]
    per_call = int(rows["converse"][3].replace(",", "")) / 119_688
    assert 1000 < per_call < 3000, per_call  # Questioner and Responder calls together, averaged


def test_estimate_samples_are_seeded_and_fall_back_to_stand_ins(tmp_path: Path) -> None:
    from convrag.synthesis.engine.pipeline import StageContext
    from convrag.synthesis.mtr.converse import Converse
    from convrag.synthesis.mtr.estimate import TurnModel, sample_conversations

    corpus = _write(tmp_path / "corpus.jsonl", _passages(700, 2000)[:40])
    ctx = StageContext(out=tmp_path / "out", folder=tmp_path / "out" / "converse", seed=0, progress=False)
    real = Converse(str(corpus), conversations=10)
    first, again = sample_conversations(real, ctx), sample_conversations(real, ctx)
    assert first.pools == again.pools and "40 documents of the --corpus" in first.source
    alone = sample_conversations(Converse(conversations=10), ctx)
    assert alone.source == "stand-in documents of 2,048 characters"
    a: Estimate = Converse(str(corpus), conversations=10).estimate(ctx)
    assert a.llm_calls == 240 and a.records == 10 and "8 sampled conversations" in a.note
    model = TurnModel(first=100, second=150, growth=10, turn_tokens=20, budget=50)
    assert [model.shown(t) for t in (1, 2, 3, 4, 9)] == [0, 1, 2, 2, 2]
    assert [model.prompt(t) for t in (1, 2, 3, 4)] == [100, 150, 160, 160] and model.total(1, 4) == 570


@pytest.mark.slow
def test_estimate_against_the_embedded_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same comparison through the embedded SmolLM2-135M (``default``), whose server-side counts use its own BPE
    tokenizer and chat template: one conversation of 2 turns over 3 short documents per turn."""
    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    corpus = _write(tmp_path / "corpus.jsonl", _passages(1024, 2000)[:8])
    options = {**OPTIONS, "conversations": 1, "turns": 2, "min_turns": 1, "documents_per_turn": 3,
               "questioner_doc_chars": 600, "answer_max_tokens": 96, "test_fraction": 1.0}
    out = tmp_path / "out"
    estimates = dict(mtr_pipeline(str(corpus), seed=0, options=options).estimate(out))
    start = time.perf_counter()
    assert main(["synthesize", "mtr", "--corpus", str(corpus), "--out", str(out), "--no-progress",
                 *_args(options)]) == 0
    converse = json.loads((out / "converse" / "report.json").read_text())
    polish = json.loads((out / "polish" / "report.json").read_text())
    measured = _role_tokens(out)
    turns = sum(len(r["turns"]) for r in read_records(out / "converse"))
    predicted = {"questioner": estimates["converse"].parts[0].prompt_tokens,
                 "responder": estimates["converse"].parts[1].prompt_tokens,
                 "polisher": estimates["polish"].prompt_tokens}
    predicted["total"], measured["total"] = sum(predicted.values()), sum(measured.values())
    print(f"\nembedded model, {turns} turns in {time.perf_counter() - start:.0f} s: calls estimated "
          f"{estimates['converse'].llm_calls} + {estimates['polish'].llm_calls}, made {converse['llm']['calls']} + "
          f"{polish['llm']['calls']}; answer tokens mean {converse['figures']['answer_tokens_mean']}\n  "
          + ", ".join(f"{role} {predicted[role]:,} / {measured[role]:,} ({predicted[role] / measured[role]:.3f})"
                      for role in predicted))
    if turns == 2 and converse["llm"]["calls"] == 4:  # no re-ask, no early stop: the estimate's assumptions hold
        assert polish["llm"]["calls"] == estimates["polish"].llm_calls == 1
        assert 0.8 <= predicted["total"] / measured["total"] <= 1.2
