"""What every Decomposition-and-Verification stage (RECOR, section 3.2) shares: the item record, the stage base
(:class:`DVStage`), the documents as the prompts show them, and one structured LLM call with its token count.

The item record flows through the stages; each stage copies it and adds its own keys::

    load     id, query, answer, reasoning, domain, documents [{doc_id, text}], negatives [{doc_id, text}],
             origin (the input file and line, for messages)
    align    + alignment {key_claims, supported_claims, unsupported_claims, coverage, sufficient}
    aspects  + aspects [{name, type, excerpt[, document_coverage, name_original]}] in conversation order,
             aspect_log (every candidate and its fate)
    facts    + aspects[i].facts [{fact, supported, doc_id, reason}] (only aspects with a verified fact remain),
             fact_log (per aspect: extracted, verified, kept)
    turns    + turns [{turn, aspect, sub_question, query, answer, facts, gold_doc_ids, doc_scores, gold_selection
             {rule, cut, best_score, fallback}, subquestion_reasoning, subquestion_reasoning_metadata
             {target_information, relevance_signals, irrelevance_signals}[, answerability, fact_overlap]}]
    release  RECOR release files (benchmark / corpus JSONL) under OUT/release
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

from convrag.core.errors import ConvragError
from convrag.llm import LLM, BatchResult, LLMError, SamplingParams, UnparsableReply, load_prompt
from convrag.synthesis.engine.pipeline import REPORT_FILE, Estimate, StageContext, StageReport
from convrag.synthesis.engine.records import RecordStage, count_records, read_records
from convrag.synthesis.engine.roles import failure_reason, role_estimate, role_llm, spec_label
from convrag.synthesis.engine.schedule import overlap_shards

M = TypeVar("M", bound=BaseModel)


@dataclass
class Tokens:
    """Prompt and completion tokens spent on one item (every call and re-ask included)."""

    prompt: int = 0
    completion: int = 0

    def add(self, usage: Any) -> None:
        self.prompt += int(usage.prompt_tokens)
        self.completion += int(usage.completion_tokens)


@dataclass
class Outcome:
    """What a stage made of one item: the record to keep (None: dropped, with ``reason``), the finer rejections
    to count in the stage's figures, and the tokens spent."""

    record: dict[str, Any] | None
    reason: str = ""
    counts: Counter[str] = field(default_factory=Counter)
    tokens: Tokens = field(default_factory=Tokens)


class Drop(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raised inside :meth:`DVStage.handle` to drop the item with a counted ``reason``."""

    def __init__(self, reason: str, counts: Counter[str] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.counts = counts or Counter()


#: the readings a D&V run follows: ``authors`` (RECOR-Benchmark/RECOR's ``pipeline/generate_bright.py`` wherever
#: the paper leaves a rule open; the default) or ``convrag`` (the readings convrag used before, kept so that earlier
#: runs can be reproduced)
PROFILES = ("authors", "convrag")


def check_profile(value: Any) -> str:
    """``value`` if it names a profile of :data:`PROFILES`, else a :class:`ConvragError` listing them."""
    if value not in PROFILES:
        raise ConvragError(f"profile must be one of {', '.join(PROFILES)}, got {value!r}")
    return str(value)


def ask(llm: LLM, prompt: str, fields: dict[str, Any], schema: type[M], params: SamplingParams, tokens: Tokens,
        check: Callable[[M], str | None] | None = None, cut: Callable[[M], M | None] | None = None) -> M:
    """Render prompt file ``prompt`` with ``fields``, get a reply valid against ``schema`` (and ``check``: an
    error message is fed back and the model re-asked), add its tokens to ``tokens``. LLM errors propagate.

    A reply cut off at max_tokens (the LLM layer closed its JSON) is read as closed when ``cut`` is None (a judge:
    its verdict fields are complete or the reply fails the schema), else as ``cut(value)``: the value of its
    complete pieces, or None (:func:`whole`) for no reading (:class:`UnparsableReply`)."""
    messages = load_prompt(prompt).render(**fields)
    parsed = llm.structured(messages, schema, params, check=check)
    tokens.add(parsed.usage)
    if cut is None or "truncated" not in parsed.repairs:
        return parsed.value
    value = cut(parsed.value)
    if value is None:
        raise UnparsableReply(f"{llm.spec}: {prompt}: reply cut off before its JSON closed (max_tokens reached?)",
                              attempts=parsed.attempts, last_text=parsed.text)
    return value


def whole(value: Any) -> None:
    """``cut`` of :func:`ask` for a reply whose texts are kept as written: a cut-off reply is no reading."""
    return None


def doc_labels(documents: Sequence[dict[str, Any]]) -> list[str]:
    """The labels the prompts use for an item's documents, in order: ``doc_0``, ``doc_1``, ... (the paper's
    ``doc_X``); :func:`label_to_id` maps them back to document ids."""
    return [f"doc_{i}" for i in range(len(documents))]


def documents_field(documents: Sequence[dict[str, Any]], chars: int) -> list[dict[str, str]]:
    """Documents as prompts show them: ``{"label": "doc_i", "text": <text cut to chars at a word boundary>}``."""
    from convrag.synthesis.engine.roles import cut

    return [{"label": label, "text": cut(" ".join(str(d["text"]).split()), chars)}
            for label, d in zip(doc_labels(documents), documents, strict=True)]


def label_to_id(label: Any, documents: Sequence[dict[str, Any]]) -> str | None:
    """The document id of a prompt label (``doc_3``, ``3``, ``[doc_3]`` or the id itself); None when unknown."""
    text = str(label or "").strip().strip("[]").strip()
    ids = [str(d["doc_id"]) for d in documents]
    if text in ids:
        return text
    number = text.removeprefix("doc_").removeprefix("doc ").strip()
    if number.isdigit() and int(number) < len(ids):
        return ids[int(number)]
    return None


def sampling(temperature: float, max_tokens: int) -> SamplingParams:
    """Sampling parameters of a D&V call (seeded, so that a fixed model gives the same reply)."""
    return SamplingParams(temperature=temperature, top_p=0.95, max_tokens=max_tokens, seed=0)


class DVStage(RecordStage):
    """A D&V stage: reads ``upstream``'s records, calls :meth:`handle` on each item (in parallel over the items,
    across shard boundaries), keeps what it returns and counts every drop and finer rejection.

    A stage drops an item by returning no record for it and counting one reason (``"<stage>: <why>"``); finer
    rejections (an aspect, a fact, a turn) are counted in the stage report's figures. Item-level LLM work runs
    ``concurrency`` items at a time and across shard boundaries (``synthesis.engine.schedule``: the next shard's
    items start while the last ones of a shard finish); the calls of one item run in order.

    Subclasses set ``name`` and ``upstream``, implement :meth:`params_extra` and :meth:`handle`, and call
    ``super().__init__(llm=..., concurrency=..., shard_size=...)``.
    """

    upstream: str = ""
    unit = "items"
    #: a cap on every call's completion tokens (None: each call's own budget)
    max_tokens: int | None = None

    def __init__(self, *, llm: str | None = None, concurrency: int = 8, shard_size: int = 32) -> None:
        for name, value in (("concurrency", concurrency), ("shard_size", shard_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConvragError(f"{name} must be a whole number >= 1, got {value!r}")
        self.llm_spec, self.concurrency, self.shard_size = llm, concurrency, shard_size
        self._figures: Counter[str] = Counter()
        self._llm: LLM | None = None
        #: items the run starts from (set by the pipeline), for estimates before earlier stages ran
        self.expected_items: int | None = None

    def cap(self, budget: int) -> int:
        """A call's completion-token ``budget`` under the stage's ``max_tokens`` cap."""
        return budget if self.max_tokens is None else min(budget, self.max_tokens)

    def set_cap(self, max_tokens: int | None) -> None:
        """Check and keep the ``max_tokens`` cap (None or a whole number >= 16)."""
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                       or max_tokens < 16):
            raise ConvragError(f"max_tokens must be a whole number >= 16, got {max_tokens!r}")
        self.max_tokens = max_tokens

    # -- what subclasses give ---------------------------------------------------------------------------------
    def params_extra(self) -> dict[str, Any]:
        """The stage's own parameters (besides the LLM spec)."""
        return {}

    def item_cost(self) -> tuple[int, int, int]:
        """Rough LLM calls, prompt characters and completion characters per item, for dry-run estimates."""
        return 1, 4000, 800

    def handle(self, item: dict[str, Any], llm: LLM, tokens: Tokens) -> Outcome:
        """One item -> its outcome; raise :class:`Drop` to drop it with a reason. LLM errors may propagate:
        they drop the item with the counted reason ``"<stage>: <role> ..."``."""
        raise NotImplementedError

    # -- the engine's side ------------------------------------------------------------------------------------
    def params(self) -> dict[str, Any]:
        return {"llm": spec_label(self.llm_spec), "shard_size": self.shard_size, **self.params_extra()}

    def models(self) -> dict[str, dict[str, Any]]:
        from convrag.llm import describe

        return {"llm": describe(self.llm_spec).to_dict()}

    def estimate(self, ctx: StageContext) -> Estimate:
        done = (ctx.out / self.upstream / REPORT_FILE).is_file()
        n = count_records(ctx.out / self.upstream) if done else self.expected_items
        if n is None:
            return Estimate(note="items known after the load stage")
        calls, prompt_chars, completion_chars = self.item_cost()
        part = role_estimate(self.llm_spec, n * calls, n * prompt_chars, n * completion_chars)
        part.records = n
        part.note = f"{'' if done else 'at most '}{n:,} items x ~{calls} calls; tokens ~ chars / 4"
        return part

    def records(self, ctx: StageContext) -> Iterable[dict[str, Any]]:
        return read_records(ctx.stage_folder(self.upstream))

    def total(self, ctx: StageContext) -> int | None:
        return count_records(ctx.stage_folder(self.upstream))

    def llm(self, ctx: StageContext) -> LLM:
        """The stage's LLM (cached in OUT/llm-cache, accounted in the stage report)."""
        if self._llm is None:
            self._llm = role_llm(self.llm_spec, ctx, self.concurrency)
        return self._llm

    def run(self, ctx: StageContext) -> StageReport:
        self._figures = Counter()
        report = super().run(ctx)
        report.figures = {**report.figures, **dict(sorted(self._figures.items()))}
        return report

    def process_shards(self, shards: Iterator[list[dict[str, Any]]],
                       ctx: StageContext) -> Iterator[tuple[list[dict[str, Any]], Counter[str]]]:
        """Every item of ``shards`` handled in up to ``concurrency`` threads across shard boundaries (an item's
        calls in order, ``synthesis.engine.schedule``); each shard's rows and drops once its items are done."""
        llm = self.llm(ctx)

        def one(item: dict[str, Any]) -> Outcome:
            tokens = Tokens()
            try:
                return self.handle(item, llm, tokens)
            except Drop as drop:
                return Outcome(None, drop.reason, drop.counts, tokens)

        stop = ctx.stop if ctx is not None else None  # unit tests run a stage without a context
        for _, done in overlap_shards(shards, one, self.concurrency, catch=(LLMError,), stop=stop):
            yield self._rows(done)

    def process(self, batch: list[dict[str, Any]], ctx: StageContext) -> tuple[list[dict[str, Any]], Counter[str]]:
        [shard] = self.process_shards(iter([batch]), ctx)  # runs the generator to its end: its threads are joined
        return shard

    def _rows(self, done: BatchResult[Outcome]) -> tuple[list[dict[str, Any]], Counter[str]]:
        """The kept records of a shard's outcomes (tokens added) and its drops; finer rejections go to the figures."""
        rows: list[dict[str, Any]] = []
        drops: Counter[str] = Counter()
        for i, outcome in enumerate(done.results):
            if outcome is None:
                drops[f"{self.name}: {failure_reason('llm', done.errors[i])}"] += 1
                continue
            self._figures.update(outcome.counts)
            if outcome.record is None:
                drops[outcome.reason] += 1
                continue
            rec = dict(outcome.record)
            rec["tokens"] = {**(rec.get("tokens") or {}), self.name: [outcome.tokens.prompt, outcome.tokens.completion]}
            rows.append(rec)
        return rows, drops
