"""MTR-Pipeline stage 4: the Polisher rewrites user turns 2..T into casual, context-dependent speech (paper
4.3; reference 3.2).

Input: the ``converse`` stage's conversations; output: the same records (``OUT/polish/part-NNNNN.parquet``)
with each turn's ``question`` replaced by its accepted rewrite, ``original_question`` keeping the Questioner's
text and ``polish`` saying what happened: ``rewritten``, ``kept: <rejection reason>`` (``synthesis.agents.
rejection``: too long, too short, meta phrase, several lines, unchanged), ``kept: call failed`` (the call
failed after its retries: the formal question is kept, the failure counted) or ``first turn`` (turn 1 stays
formal, as the authors do).

Turn t of every conversation of a shard runs as one batch; the Polisher of turn t sees the conversation
before it with the rewrites of turns 2..t-1 already in place, so a rewrite propagates into later turns'
history. Answers were written for the formal questions (as in the authors' pipeline, which polishes after
answering). Calls are cached in ``OUT/llm-cache`` like the other agents'.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from tqdm.auto import tqdm

from convrag.errors import ConvragError
from convrag.llm import LLMError, run_batch
from convrag.progress import label
from convrag.synthesis.agents import Exchange, Polisher
from convrag.synthesis.converse import Converse, check_spec, role_estimate, role_llm, spec_label, turn_figures
from convrag.synthesis.engine import REPORT_FILE, Estimate, StageContext, StageReport
from convrag.synthesis.records import RecordStage, count_records, read_records

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

    def records(self, ctx: StageContext) -> Iterable[dict[str, Any]]:
        return read_records(ctx.stage_folder("converse"))

    def total(self, ctx: StageContext) -> int | None:
        return count_records(ctx.stage_folder("converse"))

    def _prompt_chars(self, turns: int) -> int:
        """Characters of every Polisher prompt of one conversation of ``turns`` turns (typical texts)."""
        question = "What is a typical question about this document, in about eighty characters?"
        polisher = Polisher(None, context_answer_chars=self.context_chars)  # type: ignore[arg-type]
        history: list[Exchange] = []
        total = 0
        for _ in range(2, turns + 1):
            history.append(Exchange(question, "word " * 200))
            total += sum(len(m["content"]) for m in polisher.messages(history, question))
        return total

    def estimate(self, ctx: StageContext) -> Estimate:
        converse = ctx.out / "converse"
        if (converse / REPORT_FILE).is_file():
            lengths = [len(r["turns"]) for r in read_records(converse, columns=["turns"])]
            how = ""
        elif self.upstream is not None and self.upstream._expected_conversations(ctx)[0] is not None:
            n, how = self.upstream._expected_conversations(ctx)
            lengths = [self.upstream.generated_turns] * (n or 0)
        else:
            return Estimate(note="one call per user turn after the first; known after the converse stage")
        calls = sum(max(0, t - 1) for t in lengths)
        chars = sum(self._prompt_chars(t) for t in set(lengths) for _ in range(lengths.count(t)))
        part = role_estimate(self.polisher, calls, chars, calls * 60)
        return Estimate(records=len(lengths), llm_calls=calls, prompt_tokens=part.prompt_tokens,
                        completion_tokens=part.completion_tokens, parts=[part],
                        note=f"{how + ' ' if how else ''}{len(lengths):,} conversations; tokens ~ chars / 4")

    def run(self, ctx: StageContext) -> StageReport:
        llm = role_llm(self.polisher, ctx, self.concurrency)
        self._polisher = Polisher(llm, context_answer_chars=self.context_chars)
        report = super().run(ctx)
        records = list(read_records(ctx.folder, columns=["turns"]))
        outcomes = Counter(turn["polish"] for rec in records for turn in rec["turns"])
        report.figures = {**{f"turns {k}": v for k, v in sorted(outcomes.items())},
                          **turn_figures(records, ("polisher",))}
        return report

    def process(self, batch: list[dict[str, Any]], ctx: StageContext) -> tuple[list[dict[str, Any]], Counter[str]]:
        convs = [dict(rec, turns=[dict(t) for t in rec["turns"]]) for rec in batch]
        for conv in convs:
            conv["turns"][0]["polish"] = "first turn"
        longest = max((len(c["turns"]) for c in convs), default=0)
        bar = tqdm(total=sum(max(0, len(c["turns"]) - 1) for c in convs), unit="question", leave=False,
                   desc=label("rewriting user turns"), disable=not ctx.progress)
        for index in range(1, longest):
            todo = [c for c in convs if len(c["turns"]) > index]
            asks = [([Exchange(t["question"], t["answer"]) for t in c["turns"][:index]], c["turns"][index]["question"])
                    for c in todo]
            done = run_batch(asks, lambda ask: self._polisher.polish(*ask), self.concurrency, catch=(LLMError,),
                             on_result=lambda *_: bar.update())
            for conv, rewrite in zip(todo, done.results, strict=True):
                turn = conv["turns"][index]
                if rewrite is None:
                    turn["polish"] = CALL_FAILED
                    continue
                turn["question"] = rewrite.text
                turn["polish"] = rewrite.status if rewrite.status == "rewritten" else f"kept: {rewrite.status}"
                tokens = dict(turn.get("role_tokens") or {})
                tokens.update(polisher_prompt=rewrite.prompt_tokens, polisher_completion=rewrite.completion_tokens)
                turn["role_tokens"] = tokens
                turn["prompt_tokens"] += rewrite.prompt_tokens
                turn["completion_tokens"] += rewrite.completion_tokens
        bar.close()
        return convs, Counter()
