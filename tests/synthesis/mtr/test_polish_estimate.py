"""The polish stage's dry-run estimate against a measured run (issue 42: it was 25% high where the Questioner writes
long questions and the Polisher short rewrites, because it counted the Questioner's questions in every later turn's
history, where a run shows the rewrites).

As in ``test_estimates``: a real run over HTTP against a fake OpenAI-compatible server that counts prompt tokens with
the estimate's tokenizer and framing, on real MTRAG passages. Here the Questioner asks long compound questions (as a
served model often does) and the Polisher answers as its prompt asks, in fewer than 12 words. The estimate made
before the run (stand-in turns) and the one made once converse has finished (its real conversations) are both
checked: calls exact, prompt tokens and all tokens within 10%.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from convrag.cli import main
from convrag.synthesis.engine.pipeline import Estimate
from convrag.synthesis.mtr.pipeline import mtr_pipeline
from tests.llm.test_faults import FakeServer
from tests.synthesis.mtr.test_estimates import OPTIONS, _args, _passages, _pick, _write, agents, usage

#: 3 conversations of 8 turns (MTR-Bench's length): 3 x 7 rewrites
RUN = {**OPTIONS, "turns": 8}
#: what the fake Questioner adds to each question: a second part, as compound questions have
TAILS = (
    ", and how did that come about in the first place, and why does it still matter to people today?",
    ", and what were the main consequences of it for the people and the places that were most affected?",
    ", and could you explain how experts have interpreted it over the years and whether they still agree?",
)
OPENERS = ("ok so what about", "and what about", "wait, how about", "so what's up with")


def long_questions(body: dict[str, Any]) -> str:
    """``test_estimates.agents``, but the Questioner's questions get a compound second part (30-40 tokens in all)
    and the Polisher keeps the first part's last words behind a casual opener (fewer than 12 words)."""
    reply = agents(body)
    system, last = body["messages"][0]["content"], body["messages"][-1]["content"]
    if system.startswith("You play a curious person"):
        asked = json.loads(reply.split("```json\n", 1)[1].split("\n```", 1)[0])
        asked["question"] = asked["question"].rstrip("?") + TAILS[_pick(asked["question"], len(TAILS))]
        return f"Here is my next question:\n\n```json\n{json.dumps(asked)}\n```"
    if system.startswith("You turn written-up questions"):
        question = re.search(r"Next question, as written: (.+)", last).group(1)
        words = question.split(",", 1)[0].rstrip("?").split()
        return f"{OPENERS[_pick(question, len(OPENERS))]} {' '.join(words[-4:]).lower()}?"
    return reply


@pytest.fixture
def server() -> Iterator[FakeServer]:
    s = FakeServer()
    s.responder, s.usage = long_questions, usage
    yield s
    s.close()


def _polish_estimate(corpus: Path, out: Path, options: dict[str, Any]) -> Estimate:
    return dict(mtr_pipeline(str(corpus), seed=0, options=options).estimate(out))["polish"]


def test_polish_estimate_is_within_ten_percent_of_a_measured_run(tmp_path: Path, server: FakeServer) -> None:
    corpus = _write(tmp_path / "corpus.jsonl", _passages(700, 2000)[:40])
    spec = f"openai:test-model@{server.url};max_retries=0;timeout=5"
    roles = {"questioner": spec, "responder": spec, "polisher": spec}
    out = tmp_path / "out"
    before = _polish_estimate(corpus, out, {**RUN, **roles})
    argv = ["synthesize", "mtr", "--corpus", str(corpus), "--out", str(out), "--no-progress", "--concurrency", "4",
            "--questioner", spec, "--responder", spec]  # fmt: skip
    converse = {k: v for k, v in RUN.items() if k != "test_fraction"}  # an assemble option
    assert main([*argv, "--stages", "curate,cluster,converse", *_args(converse)]) == 0
    after = _polish_estimate(corpus, out, {**RUN, **roles})
    assert "of the converse stage's conversations" in after.note
    assert main([*argv, "--polisher", spec, *_args(RUN)]) == 0
    run = json.loads((out / "polish" / "report.json").read_text())["llm"]
    assert run["calls"] == 21 and run["failures"] == 0
    lines = []
    for name, estimate in (("before the run", before), ("after converse", after)):
        ratios = {
            "prompt": estimate.prompt_tokens / run["prompt_tokens"],
            "completion": estimate.completion_tokens / run["completion_tokens"],
            "all": (estimate.prompt_tokens + estimate.completion_tokens)
            / (run["prompt_tokens"] + run["completion_tokens"]),
        }
        lines.append(
            f"{name}: calls {estimate.llm_calls} / {run['calls']}, prompt tokens {estimate.prompt_tokens:,} / "
            f"{run['prompt_tokens']:,}, completion {estimate.completion_tokens:,} / {run['completion_tokens']:,}; "
            + ", ".join(f"{k} {v:.3f}" for k, v in ratios.items())
        )
        assert estimate.llm_calls == run["calls"]
        assert 0.9 <= ratios["prompt"] <= 1.1 and 0.9 <= ratios["all"] <= 1.1, lines[-1]
    print("\npolish, estimated / measured:\n  " + "\n  ".join(lines))
