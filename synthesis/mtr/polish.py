"""MTR-Pipeline stage 4: the Polisher rewrites user turns 2..T into casual, context-dependent speech (paper
4.3; reference 3.2).

Input: the ``converse`` stage's conversations; output: the same records (``OUT/polish/part-NNNNN.parquet``) with
each turn's ``question`` replaced by its accepted rewrite, ``original_question`` keeping the Questioner's text and
``polish`` saying what happened: ``rewritten``, ``kept: <rejection reason>`` (``synthesis.mtr.agents.rejection``),
``kept: call failed`` (the call failed after its retries: the formal question is kept, the failure counted) or
``first turn`` (turn 1 stays formal, as the authors do).

Each conversation is polished turn after turn, as soon as its previous call returned, ``concurrency`` at a time
across shard boundaries (``synthesis.engine.schedule``); the Polisher of turn t sees the rewrites of turns 2..t-1 in
its history, so a rewrite propagates into later turns' history, and the output does not depend on timing. Answers
were written for the formal questions (as in the authors' pipeline, which polishes after answering). Calls are
cached in ``OUT/llm-cache`` like the other agents'.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tqdm.auto import tqdm

from convrag.core.errors import ConvragError
from convrag.core.progress import label
from convrag.llm import EndpointUnreachable, LLMError
from convrag.synthesis.engine.pipeline import Estimate, StageContext, StageReport
from convrag.synthesis.engine.records import RecordStage, count_records, read_records
from convrag.synthesis.engine.roles import check_spec, role_llm, spec_label
from convrag.synthesis.engine.schedule import overlap_shards
from convrag.synthesis.mtr.agents import Exchange, Polisher
from convrag.synthesis.mtr.converse import Converse, turn_figures

CALL_FAILED = "kept: call failed"


class Polish(RecordStage):
    """The Polisher over every conversation of the converse stage (see the module docstring)."""

    name = "polish"
    unit = "conversations"

    def __init__(self, source: str | None = None, *, corpus_config: str | None = None, polisher: str | None = None,
                 polish_context_chars: int = 300, concurrency: int = 8, shard_size: int = 256) -> None:
        for name, value in (("polish_context_chars", polish_context_chars), ("concurrency", concurrency),
                            ("shard_size", shard_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConvragError(f"{name} must be a whole number >= 1, got {value!r}")
        check_spec("polisher", polisher)
        self.polisher, self.context_chars = polisher, polish_context_chars
        self.concurrency, self.shard_size = concurrency, shard_size
        #: the converse stage of the same run (set by the pipeline), for estimates before it has run
        self.upstream: Converse | None = None

    def params(self) -> dict[str, Any]:
        return {"polisher": spec_label(self.polisher), "polish_context_chars": self.context_chars,
                "shard_size": self.shard_size}

    def models(self) -> dict[str, dict[str, Any]]:
        from convrag.llm import describe

        return {"polisher": describe(self.polisher).to_dict()}

    def records(self, ctx: StageContext) -> Iterable[dict[str, Any]]:
        return read_records(ctx.stage_folder("converse"))

    def total(self, ctx: StageContext) -> int | None:
        return count_records(ctx.stage_folder("converse"))

    def estimate(self, ctx: StageContext) -> Estimate:
        """Calls and tokens from a sample of rendered prompts and a per-turn growth model (synthesis.mtr.estimate):
        the converse stage's conversations once it ran, else the expected ones of ``upstream``."""
        from convrag.synthesis.mtr.estimate import estimate_polish

        return estimate_polish(self, ctx)

    def run(self, ctx: StageContext) -> StageReport:
        llm = role_llm(self.polisher, ctx, self.concurrency)
        self._polisher = Polisher(llm, context_answer_chars=self.context_chars)
        report = super().run(ctx)
        records = list(read_records(ctx.folder, columns=["turns"]))
        outcomes = Counter(turn["polish"] for rec in records for turn in rec["turns"])
        report.figures = {**{f"turns {k}": v for k, v in sorted(outcomes.items())},
                          **turn_figures(records, ("polisher",))}
        return report

    def process_shards(self, shards: Iterator[list[dict[str, Any]]],
                       ctx: StageContext) -> Iterator[tuple[list[dict[str, Any]], Counter[str]]]:
        """Every conversation of ``shards`` polished turn after turn, ``concurrency`` conversations at a time across
        shard boundaries (``synthesis.engine.schedule``)."""
        bar = tqdm(total=0, unit="question", leave=False, desc=label("rewriting user turns"),
                   disable=not ctx.progress)
        lock = threading.Lock()

        def start(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
            with lock:
                bar.total += sum(max(0, len(rec["turns"]) - 1) for rec in batch)
                bar.refresh()
            return batch

        def tick() -> None:
            with lock:
                bar.update()

        try:
            for _, done in overlap_shards(map(start, shards), lambda rec: self._polish(rec, tick), self.concurrency,
                                          catch=(), stop=ctx.stop):
                yield [conv for conv in done.results if conv is not None], Counter()
        finally:
            bar.close()

    def process(self, batch: list[dict[str, Any]], ctx: StageContext) -> tuple[list[dict[str, Any]], Counter[str]]:
        [shard] = self.process_shards(iter([batch]), ctx)  # runs the generator to its end: its threads are joined
        return shard

    def _polish(self, rec: dict[str, Any], tick: Callable[[], None]) -> dict[str, Any]:
        """``rec`` with user turns 2..T rewritten in order, each Polisher call seeing the rewrites before it."""
        conv = dict(rec, turns=[dict(t) for t in rec["turns"]])
        conv["turns"][0]["polish"] = "first turn"
        for index in range(1, len(conv["turns"])):
            turn = conv["turns"][index]
            history = [Exchange(t["question"], t["answer"]) for t in conv["turns"][:index]]
            try:
                rewrite = self._polisher.polish(history, turn["question"])
            except EndpointUnreachable:
                raise
            except LLMError:
                turn["polish"] = CALL_FAILED
                tick()
                continue
            turn["question"] = rewrite.text
            turn["polish"] = rewrite.status if rewrite.status == "rewritten" else f"kept: {rewrite.status}"
            tokens = dict(turn.get("role_tokens") or {})
            tokens.update(polisher_prompt=rewrite.prompt_tokens, polisher_completion=rewrite.completion_tokens)
            turn["role_tokens"] = tokens
            turn["prompt_tokens"] += rewrite.prompt_tokens
            turn["completion_tokens"] += rewrite.completion_tokens
            tick()
        return conv
