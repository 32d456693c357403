"""Judge ensembles with scripted fake judges: combiners, per-judge results, failures, position-bias control."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from convrag.llm import LLM, JudgeEnsemble, LLMFailure, RetryPolicy, SamplingParams, combine, load_prompt, permute
from convrag.llm.backends.fake import FakeBackend, transient


class Score(BaseModel):
    score: float


class Pick(BaseModel):
    best: int
    reason: str = ""


def judge(replies: list, tmp_path: Path | None = None, name: str = "j") -> LLM:
    return LLM(FakeBackend(replies, model=name), cache=False, retry=RetryPolicy(max_retries=0), spec=f"fake:{name}")


MSGS = [{"role": "user", "content": "grade this"}]


def test_combiners() -> None:
    assert combine([1, 2, 6], "mean")[0] == 3
    assert combine([1, 2, 6], "median")[0] == 2
    assert combine([True, False, True], "mean")[0] == pytest.approx(2 / 3)
    value, tie, agreement = combine(["yes", "no", "yes"], "majority")
    assert value == "yes" and not tie and agreement == pytest.approx(2 / 3)
    value, tie, _ = combine(["no", "yes"], "majority")
    assert value == "no" and tie  # ties go to the first value seen, and are flagged
    with pytest.raises(ValueError):
        combine([], "mean")
    with pytest.raises(ValueError):
        combine([1], "mode")


def test_ensemble_keeps_per_judge_results() -> None:
    judges = [judge(['{"score": 1}'], name="a"), judge(['{"score": 2}'], name="b"), judge(['{"score": 6}'], name="c")]
    res = JudgeEnsemble(judges, combine="median").judge(MSGS, Score, "score")
    assert res.value == 2 and res.n_ok == 3 and res.n_failed == 0
    assert [j.value for j in res.judges] == [1, 2, 6]
    assert [j.judge for j in res.judges] == ["0:fake:a", "1:fake:b", "2:fake:c"]
    assert res.judges[2].parsed == Score(score=6)
    mean = JudgeEnsemble([judge(['{"score": 1}']), judge(['{"score": 2}'])], combine="mean").judge(
        MSGS, Score, lambda s: s.score * 10)
    assert mean.value == 15


def test_failed_judge_is_surfaced() -> None:
    judges = [judge(['{"score": 1}']), judge([transient()]), judge(['{"score": 3}'])]
    with pytest.raises(LLMFailure, match="2 of 3 judges succeeded"):
        JudgeEnsemble(judges).judge(MSGS, Score, "score")
    judges = [judge(['{"score": 1}']), judge([transient()]), judge(['{"score": 3}'])]
    res = JudgeEnsemble(judges, min_ok=2).judge(MSGS, Score, "score")
    assert res.value == 2 and res.n_failed == 1 and "rate_limit" in (res.judges[1].error or "")
    with pytest.raises(LLMFailure, match="0 of 1"):
        JudgeEnsemble([judge(["garbage"] * 3)], min_ok=0).judge(MSGS, Score, "score")


def test_same_model_different_seeds() -> None:
    fb = FakeBackend(responder=lambda m: '{"score": 4}')
    llm = LLM(fb, cache=False)
    res = JudgeEnsemble([(llm, SamplingParams(temperature=0.8, seed=s)) for s in range(3)]).judge(MSGS, Score, "score")
    assert res.value == 4 and sorted(c["params"].seed for c in fb.calls) == [0, 1, 2]


def test_permute_maps_back() -> None:
    perm = permute(["a", "b", "c", "d"], random.Random(3))
    assert sorted(perm.items) == ["a", "b", "c", "d"]
    for shown, item in enumerate(perm.items):
        assert ["a", "b", "c", "d"][perm.to_original(shown)] == item
    assert permute(["x", "y"], None).order == [0, 1]


def _pick_text(target: str):
    """A judge that always picks the candidate whose text is ``target``, wherever it is shown."""
    def reply(msgs):
        shown = re.findall(r"Candidate (\d+):\n(.+)", msgs[-1]["content"])
        idx = next(int(i) for i, text in shown if text.strip() == target)
        return f'{{"best": {idx}, "reason": "most complete"}}'
    return reply


def test_compare_controls_position_bias() -> None:
    cands = ["Paris is the capital.", "Lyon.", "It is Paris, on the Seine."]
    tpl = load_prompt("pairwise_judge")

    def render(items):
        return tpl.render(question="Capital of France?", candidates=items)

    judges = [LLM(FakeBackend(responder=_pick_text(cands[2])), cache=False) for _ in range(4)]
    res = JudgeEnsemble(judges).compare(render, cands, Pick, "best", seed=7)
    assert res.value == 2 and res.agreement == 1.0
    orders = [tuple(j.order or []) for j in res.judges]
    assert len(set(orders)) > 1  # judges saw different orders
    # a position-biased judge (always "0") no longer maps to one fixed candidate
    biased = [LLM(FakeBackend(responder=lambda m: '{"best": 0}'), cache=False) for _ in range(6)]
    res = JudgeEnsemble(biased).compare(render, cands, Pick, "best", seed=1)
    assert len({j.value for j in res.judges}) > 1
    unshuffled = JudgeEnsemble(biased).compare(render, cands, Pick, "best", shuffle=False)
    assert {j.value for j in unshuffled.judges} == {0}


def test_compare_rejects_out_of_range_pick() -> None:
    fb = FakeBackend(['{"best": 5}', '{"best": 1}'])
    res = JudgeEnsemble([LLM(fb, cache=False)]).compare(
        lambda items: [{"role": "user", "content": "\n".join(items)}], ["a", "b"], Pick, "best", shuffle=False)
    assert res.value == 1 and "from 0 to 1" in fb.calls[1]["messages"][-1]["content"]
