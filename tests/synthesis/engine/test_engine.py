"""The synthesis stage engine: resume after an interruption, parameters, redo, dry runs, LLM accounting."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from convrag.core.errors import ConvragError
from convrag.llm.backends.fake import FakeBackend
from convrag.llm.client import LLM
from convrag.synthesis.engine.pipeline import Estimate, Pipeline, StageContext, format_estimates, format_reports
from convrag.synthesis.engine.records import RecordStage, read_records, shard_meta

TOPICS = ["basalt columns", "the Danube delta", "tidal locking", "Baroque organs", "lichen symbiosis",
          "the Hanseatic League", "permafrost thaw", "pulsar timing", "cuneiform tablets", "mangrove roots"]


def _replies(messages: list[dict[str, Any]]) -> str:
    """A scripted questioner: a realistic question for the topic named in the prompt, malformed for one topic."""
    topic = messages[-1]["content"].split("Topic: ", 1)[1]
    if topic == "pulsar timing":
        return "Sure! Here are some thoughts about the document you gave me."  # no question mark: unusable
    return f"What first drew researchers to study {topic}, and what did they find?"


class AskStage(RecordStage):
    """A toy record stage: one LLM call per topic record; an unusable reply drops the record."""

    name = "ask"
    shard_size = 3

    def __init__(self, cache: Path, backend: FakeBackend, fail_after: int | None = None) -> None:
        self.cache, self.backend, self.fail_after = cache, backend, fail_after
        self.batches = 0

    def params(self) -> dict[str, Any]:
        return {"prompt": "ask-v1"}

    def estimate(self, ctx: StageContext) -> Estimate:
        return Estimate(records=len(TOPICS), llm_calls=len(TOPICS), prompt_tokens=40 * len(TOPICS),
                        completion_tokens=20 * len(TOPICS), model="gpt-4o-mini")

    def total(self, ctx: StageContext) -> int:
        return len(TOPICS)

    def records(self, ctx: StageContext) -> list[dict[str, Any]]:
        return [{"id": f"t{i:02d}", "topic": t} for i, t in enumerate(TOPICS)]

    def process(self, batch: list[dict[str, Any]], ctx: StageContext) -> tuple[list[dict[str, Any]], Counter[str]]:
        llm = LLM(self.backend, cache=self.cache, report=ctx.llm_report)
        out, drops = [], Counter()
        for i, record in enumerate(batch):
            if self.fail_after is not None and self.batches == self.fail_after and i == 1:
                raise KeyboardInterrupt  # killed in the middle of a shard, after one answered call
            reply = llm.chat([{"role": "user", "content": f"Ask one question. Topic: {record['topic']}"}]).text
            if not reply.rstrip().endswith("?"):
                drops["reply_without_question"] += 1
                continue
            out.append({"id": record["id"], "question": reply})
        self.batches += 1
        return out, drops


def test_interrupted_record_stage_resumes_without_repeating_calls(tmp_path: Path) -> None:
    out, cache = tmp_path / "run", tmp_path / "cache"
    first = FakeBackend(responder=_replies)
    with pytest.raises(KeyboardInterrupt):
        Pipeline("toy", [AskStage(cache, first, fail_after=2)]).run(out, progress=False)
    # shards 0 and 1 finished (6 records); shard 2 was cut after one call; no report, no half-written shard
    assert len(first.calls) == 7
    assert sorted(p.name for p in (out / "ask").iterdir()) == ["params.json", "part-00000.parquet",
                                                                "part-00001.parquet"]
    second = FakeBackend(responder=_replies)
    [report] = Pipeline("toy", [AskStage(cache, second)]).run(out, progress=False)
    # only the 4 records never answered were asked; the one answered before the kill came from the cache
    assert len(second.calls) == 3
    assert report.llm["calls"] == 3 and report.llm["cache_hits"] == 1
    assert (report.records_in, report.records_out) == (10, 9)
    assert report.dropped == {"reply_without_question": 1}
    rows = list(read_records(out / "ask"))
    assert [r["id"] for r in rows] == [f"t{i:02d}" for i in range(10) if i != 7]
    assert shard_meta(out / "ask" / "part-00002.parquet")["dropped"] == {"reply_without_question": 1}

    # an uninterrupted run in another folder gives the same records
    clean = Pipeline("toy", [AskStage(tmp_path / "cache2", FakeBackend(responder=_replies))]).run(
        tmp_path / "clean", progress=False)
    assert list(read_records(tmp_path / "clean" / "ask")) == rows
    assert clean[0].to_dict() | {"seconds": 0, "llm": {}} == report.to_dict() | {"seconds": 0, "llm": {}}


def test_finished_stage_is_not_rerun_and_report_is_kept(tmp_path: Path) -> None:
    backend = FakeBackend(responder=_replies)
    Pipeline("toy", [AskStage(tmp_path / "c", backend)]).run(tmp_path / "run", progress=False)
    again = FakeBackend(responder=_replies)
    [report] = Pipeline("toy", [AskStage(tmp_path / "c", again)]).run(tmp_path / "run", progress=False)
    assert again.calls == [] and report.resumed
    assert "finished earlier" in format_reports([report])
    saved = json.loads((tmp_path / "run" / "ask" / "params.json").read_text())
    assert saved == {"stage": "ask", "seed": 0, "params": {"prompt": "ask-v1"}}


def test_other_parameters_or_seed_are_refused_and_redo_clears(tmp_path: Path) -> None:
    run = tmp_path / "run"
    Pipeline("toy", [AskStage(tmp_path / "c", FakeBackend(responder=_replies))]).run(run, progress=False)
    with pytest.raises(ConvragError, match=r"made with other parameters \(seed: 0 -> 7\).*--redo ask"):
        Pipeline("toy", [AskStage(tmp_path / "c", FakeBackend(responder=_replies))], seed=7).run(run)
    changed = AskStage(tmp_path / "c", FakeBackend(responder=_replies))
    changed.params = lambda: {"prompt": "ask-v2"}  # type: ignore[method-assign]
    with pytest.raises(ConvragError, match="prompt: 'ask-v1' -> 'ask-v2'"):
        Pipeline("toy", [changed]).run(run)
    backend = FakeBackend(responder=_replies)
    [report] = Pipeline("toy", [AskStage(tmp_path / "c2", backend)], seed=7).run(run, redo=["ask"], progress=False)
    assert len(backend.calls) == 10 and not report.resumed
    with pytest.raises(ConvragError, match="--redo nope: not a stage of this run"):
        Pipeline("toy", [AskStage(tmp_path / "c", backend)]).run(run, redo=["nope"])


def test_changed_input_under_an_interrupted_stage_is_an_error(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        Pipeline("toy", [AskStage(tmp_path / "c", FakeBackend(responder=_replies), fail_after=2)]).run(run)
    stage = AskStage(tmp_path / "c", FakeBackend(responder=_replies))
    stage.records = lambda ctx: [{"id": f"x{i}", "topic": t} for i, t in enumerate(TOPICS)]  # type: ignore
    with pytest.raises(ConvragError, match="part-00000.parquet: written for other input records"):
        Pipeline("toy", [stage]).run(run, progress=False)


def test_dry_run_writes_nothing_and_prices_the_calls(tmp_path: Path) -> None:
    backend = FakeBackend(responder=_replies)
    estimates = Pipeline("toy", [AskStage(tmp_path / "c", backend)]).estimate(tmp_path / "run")
    assert not (tmp_path / "run").exists() and backend.calls == []
    [(name, estimate)] = estimates
    assert name == "ask" and estimate.llm_calls == 10
    cost = estimate.cost_usd()
    assert cost is not None and cost > 0
    table = format_estimates(estimates)
    assert "ask" in table and "400" in table and f"${cost:.4f}" in table
    assert Estimate(llm_calls=3, prompt_tokens=10, model="no-such-model-xyz").cost_usd() is None


def test_a_second_run_on_the_same_folder_is_refused_while_the_first_holds_it(tmp_path: Path) -> None:
    import fcntl

    run = tmp_path / "run"
    run.mkdir()
    with open(run / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        with pytest.raises(ConvragError, match="another synthesis run is writing this folder"):
            Pipeline("toy", [AskStage(tmp_path / "c", FakeBackend(responder=_replies))]).run(run)


def test_out_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConvragError, match="not a folder"):
        Pipeline("toy", [AskStage(tmp_path / "c", FakeBackend())]).run(tmp_path / "f")
