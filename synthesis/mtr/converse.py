"""MTR-Pipeline stage 3: conversations written by two agents, turn by turn (paper 4.3; reference 3.1).

One conversation per cluster of the ``cluster`` stage (all, or a seeded sample of ``conversations``). Per turn
t = 1..T the Questioner sees a seeded draw of ``documents_per_turn`` documents of the cluster and the history and
names the one document its question targets (the turn's gold, recorded exactly); the Responder sees the history
and only that document and answers (``synthesis.mtr.agents``; what they see: :class:`Converse`).

Scheduling: shards of ``shard_size`` (``OUT/converse/part-NNNNN.parquet``, ``synthesis.engine.records``); each
conversation goes on as soon as its own previous call returned, ``concurrency`` at a time across shards
(``synthesis.engine.schedule``); draws and prompts depend on the seed, the conversation and its history only, never
on timing. Calls are cached in ``OUT/llm-cache``: after a kill, finished shards are kept, the rest redone from it.

Failure rule: a Questioner reply unparsable after the re-asks, a call failing after its retries, or an unusable
answer (blank, the failure marker) stops the conversation at the last good turn: kept, marked incomplete, when it
reached ``min_turns`` (default: all turns, so by default dropped), else dropped; the reason is counted. Nothing is
filled in; an endpoint that stays down stops the run (rerun to resume).
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from convrag.core.errors import ConvragError
from convrag.core.progress import label
from convrag.llm import EndpointUnreachable, LLMError
from convrag.synthesis.engine.fingerprint import ReadsCorpus
from convrag.synthesis.engine.pipeline import REPORT_FILE, Estimate, StageContext, StageReport
from convrag.synthesis.engine.records import RecordStage, read_records
from convrag.synthesis.engine.roles import check_spec, failure_reason, role_llm, spec_label
from convrag.synthesis.engine.schedule import overlap_shards
from convrag.synthesis.mtr.agents import Answer, Doc, Exchange, Question, Questioner, Responder, draw_documents
from convrag.synthesis.mtr.documents import CorpusRef, fetch_documents

LAYOUTS = ("splice", "paper")
#: what each profile shows the agents when the option is not given (None: whole texts, no length target)
PROFILE_DEFAULTS: dict[str, dict[str, int | None]] = {
    "authors": {"questioner_doc_chars": None, "questioner_history_chars": None, "answer_words": None,
                "responder_history_chars": None},
    "convrag": {"questioner_doc_chars": 800, "questioner_history_chars": 240, "answer_words": 150,
                "responder_history_chars": 600},
}
#: default ``max_history_tokens``: the tokens of earlier turns one agent prompt shows, at most (as
#: ``synthesis.engine.tokens.count_tokens`` counts them); see :class:`Converse`
DEFAULT_MAX_HISTORY_TOKENS = 700


@dataclass
class _Conversation:
    """A conversation being written: its pool and the turns so far."""

    id: str
    cluster_idx: int
    pool: list[Doc]
    turns: list[dict[str, Any]] = field(default_factory=list)
    #: why the conversation stopped early ("" while it goes on)
    reason: str = ""

    @property
    def history(self) -> list[Exchange]:
        return [Exchange(t["question"], t["answer"]) for t in self.turns]


class Converse(ReadsCorpus, RecordStage):
    """Questioner + Responder over every cluster (see the module docstring).

    ``profile`` (what the agents see; an option given by name wins over it; :data:`PROFILE_DEFAULTS`): ``authors``
    (default) shows the Questioner the drawn documents and the earlier answers whole and the Responder the earlier
    answers whole, as the authors' code shows them, and sets no answer length (neither paper nor code sets one).
    ``convrag`` (our earlier reading) cuts documents to 800 characters and earlier answers to 240 for the
    Questioner, earlier answers to 600 for the Responder, and asks for answers of about 150 words. The paper's cost
    estimate, about 3,000 input tokens per turn (appendix A.5.4), is the prompt size a run is checked against: the
    report has the prompt tokens per role and turn (``prompt_tokens_<role>_turn_<t>``) and the mean answer length
    (``answer_tokens_mean``).

    ``max_history_tokens`` (default :data:`DEFAULT_MAX_HISTORY_TOKENS` = 700, 0: none; the rule in
    ``synthesis.mtr.agents``): each agent prompt shows the latest earlier turns that fit, the oldest left out whole
    first, never the current question or the documents. Documents are never cut by it, so long chunks alone can
    pass 3,000 tokens (``questioner_doc_chars`` cuts them). The report counts the prompts that left turns out and
    the turns left out (``history_cut_<role>``). Dry-run estimates: ``synthesis.mtr.estimate``.
    """

    name = "converse"
    unit = "conversations"

    def __init__(self, source: str | None = None, *, corpus_config: str | None = None, turns: int = 12,
                 layout: str = "splice", conversations: int | None = None, min_turns: int | None = None,
                 documents_per_turn: int = 5, questioner_doc_chars: int | None = None,
                 questioner_history_chars: int | None = None, answer_words: int | None = None,
                 answer_max_tokens: int = 512, responder_history_chars: int | None = None,
                 questioner: str | None = None, responder: str | None = None, concurrency: int = 8,
                 shard_size: int = 256, profile: str = "authors",
                 max_history_tokens: int = DEFAULT_MAX_HISTORY_TOKENS) -> None:
        if layout not in LAYOUTS:
            raise ConvragError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
        if turns < 1 or (layout == "paper" and (turns < 2 or turns % 2)):
            raise ConvragError(f"turns must be >= 1 (an even number >= 2 for layout=paper), got {turns}")
        if profile not in PROFILE_DEFAULTS:
            raise ConvragError(f"profile must be one of {', '.join(PROFILE_DEFAULTS)}, got {profile!r}")
        given = {"questioner_doc_chars": questioner_doc_chars, "questioner_history_chars": questioner_history_chars,
                 "answer_words": answer_words, "responder_history_chars": responder_history_chars}
        view = {k: PROFILE_DEFAULTS[profile][k] if v is None else v for k, v in given.items()}
        self.profile = profile
        if isinstance(max_history_tokens, bool) or not isinstance(max_history_tokens, int) or max_history_tokens < 0:
            raise ConvragError(f"max_history_tokens must be a whole number >= 0 (0: no budget), got "
                               f"{max_history_tokens!r}")
        #: the agents' history budget in tokens (0: none; ``synthesis.mtr.agents``)
        self.max_history_tokens = max_history_tokens
        for name, value in (("documents_per_turn", documents_per_turn), ("concurrency", concurrency),
                            ("shard_size", shard_size), ("answer_max_tokens", answer_max_tokens), *view.items()):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConvragError(f"{name} must be a whole number >= 1, got {value!r}")
        self.source, self.corpus_config = source, corpus_config
        self.turns, self.layout = turns, layout
        #: turns each agent conversation gets: the paper layout joins two conversations of half the length
        self.generated_turns = turns // 2 if layout == "paper" else turns
        if min_turns is not None and not 1 <= min_turns <= self.generated_turns:
            raise ConvragError(f"min_turns must be in 1..{self.generated_turns}, got {min_turns}")
        if conversations is not None and conversations < 1:
            raise ConvragError(f"conversations must be >= 1, got {conversations}")
        self.conversations, self.min_turns = conversations, min_turns or self.generated_turns
        self.documents_per_turn = documents_per_turn
        self.questioner_options = {"doc_chars": view["questioner_doc_chars"],
                                   "history_answer_chars": view["questioner_history_chars"]}
        self.responder_options = {"answer_words": view["answer_words"], "max_tokens": answer_max_tokens,
                                  "history_answer_chars": view["responder_history_chars"]}
        check_spec("questioner", questioner)
        check_spec("responder", responder)
        self.questioner, self.responder, self.concurrency = questioner, responder, concurrency
        self.shard_size = shard_size
        #: set by the pipeline from the cluster stage, for dry-run estimates before clustering
        self.expected_cluster_size = 8

    def params(self) -> dict[str, Any]:
        return {"turns": self.turns, "layout": self.layout, "conversations": self.conversations,
                "min_turns": self.min_turns, "documents_per_turn": self.documents_per_turn,
                "questioner": spec_label(self.questioner), "responder": spec_label(self.responder),
                **{f"questioner_{k}": v for k, v in self.questioner_options.items()},
                **{f"responder_{k}": v for k, v in self.responder_options.items()}, "shard_size": self.shard_size,
                "max_history_tokens": self.max_history_tokens}

    #: options a folder of the previous version resumes with (named in the error when it is resumed without them)
    legacy_options: dict[str, Any] = {"max_history_tokens": 0}

    def legacy_params(self) -> dict[str, Any] | None:
        """Without a history budget, the parameters as versions before ``max_history_tokens`` wrote them (their
        prompts had no budget either)."""
        if self.max_history_tokens:
            return None
        return {k: v for k, v in self.params().items() if k != "max_history_tokens"}

    def models(self) -> dict[str, dict[str, Any]]:
        from convrag.llm import describe

        return {"questioner": describe(self.questioner).to_dict(), "responder": describe(self.responder).to_dict()}

    # -- input ----------------------------------------------------------------------------------------------
    def _clusters(self, out: Path) -> list[tuple[int, list[str]]]:
        from convrag.synthesis.mtr.cluster import read_clusters

        clusters = read_clusters(out)
        if self.conversations is not None and self.conversations < len(clusters):
            rng = random.Random(f"conversations:{self.conversations}")
            clusters = sorted(rng.sample(clusters, self.conversations))
        return clusters

    def records(self, ctx: StageContext) -> Iterable[dict[str, Any]]:
        ctx.stage_folder("cluster")
        for cluster_idx, doc_ids in self._clusters(ctx.out):
            yield {"id": f"c{cluster_idx:06d}", "cluster_idx": cluster_idx, "doc_ids": doc_ids}

    def total(self, ctx: StageContext) -> int | None:
        return len(self._clusters(ctx.out))

    # -- estimate -------------------------------------------------------------------------------------------
    def _expected_conversations(self, ctx: StageContext) -> tuple[int | None, str]:
        if (ctx.out / "cluster" / REPORT_FILE).is_file():
            return len(self._clusters(ctx.out)), ""
        if self.conversations is not None:
            return self.conversations, "at most"
        ref = CorpusRef(ctx.out, self.source, self.corpus_config)
        if ref.curated is None and self.source is None:
            return None, ""
        from convrag.core.corpus import corpus_files, count_documents
        from convrag.synthesis.engine.shards import count_rows

        docs = count_rows(ref.curated) if ref.curated else count_documents(corpus_files(self.source,
                                                                                        self.corpus_config))
        return max(1, docs // self.expected_cluster_size), "about (documents / cluster size, before curation)"

    def estimate(self, ctx: StageContext) -> Estimate:
        """Calls and tokens from a sample of rendered prompts and a per-turn growth model (synthesis.mtr.estimate)."""
        from convrag.synthesis.mtr.estimate import estimate_converse

        n, how = self._expected_conversations(ctx)
        if n is None:
            return Estimate(note="conversations known after clustering; --option conversations=N to estimate")
        return estimate_converse(self, ctx, n, how)

    # -- run ------------------------------------------------------------------------------------------------
    def run(self, ctx: StageContext) -> StageReport:
        from convrag.synthesis.mtr.agents import history_cut_figures

        self._ref = CorpusRef(ctx.out, self.source, self.corpus_config)
        budget = self.max_history_tokens or None
        self._questioner = Questioner(role_llm(self.questioner, ctx, self.concurrency), **self.questioner_options,
                                      max_history_tokens=budget)
        self._responder = Responder(role_llm(self.responder, ctx, self.concurrency), **self.responder_options,
                                    max_history_tokens=budget)
        report = super().run(ctx)
        records = list(read_records(ctx.folder))
        stopped = Counter(_reason(r["stop_reason"]) for r in records if not r["complete"])
        answers = [t["role_tokens"]["responder_completion"] for r in records for t in r["turns"]]
        report.figures = {"profile": self.profile, "conversations complete": sum(1 for r in records if r["complete"]),
                          **{f"conversations kept, stopped early: {k}": v for k, v in sorted(stopped.items())},
                          # the paper's MTR-Bench answers average 87.5 tokens (its Table 2)
                          "answer_tokens_mean": round(sum(answers) / len(answers), 1) if answers else 0.0,
                          **turn_figures(records, ("questioner", "responder")),
                          **history_cut_figures([[Exchange(t["question"], t["answer"]) for t in r["turns"]]
                                                 for r in records], self._questioner, self._responder)}
        return report

    def process_shards(self, shards: Iterator[list[dict[str, Any]]],
                       ctx: StageContext) -> Iterator[tuple[list[dict[str, Any]], Counter[str]]]:
        """Every conversation of ``shards`` written turn by turn, pipelined (module docstring)."""
        bar = tqdm(total=0, unit="turn", disable=not ctx.progress, leave=False, desc=label("generating turns"))
        lock = threading.Lock()
        opened = [0]

        def tick(turns: int) -> None:
            with lock:
                bar.update(turns)

        def start(batch: list[dict[str, Any]]) -> list[_Conversation]:
            convs = self._conversations(batch)
            opened[0] += len(convs)
            with lock:
                bar.total += len(convs) * self.generated_turns
                bar.set_description(label(f"generating turns of {opened[0]:,} conversations"))
            return convs

        try:
            for convs, _ in overlap_shards(map(start, shards), lambda conv: self._converse(conv, ctx.seed, tick),
                                           self.concurrency, catch=(), stop=ctx.stop):
                yield self._rows(convs)
        finally:
            bar.close()

    def process(self, batch: list[dict[str, Any]], ctx: StageContext) -> tuple[list[dict[str, Any]], Counter[str]]:
        [shard] = self.process_shards(iter([batch]), ctx)  # runs the generator to its end: its threads are joined
        return shard

    def _conversations(self, batch: list[dict[str, Any]]) -> list[_Conversation]:
        """The conversations of a batch of cluster records, with their documents."""
        docs = fetch_documents(self._ref, {d for rec in batch for d in rec["doc_ids"]})
        return [_Conversation(rec["id"], rec["cluster_idx"],
                              [Doc(d, docs[d]["title"], docs[d]["text"]) for d in rec["doc_ids"]]) for rec in batch]

    def _converse(self, conv: _Conversation, seed: int, tick: Callable[[int], None]) -> None:
        """Write ``conv`` turn after turn, each call as soon as the one before returned, until the failure rule
        stops it; ``tick`` counts each turn done or skipped."""
        for t in range(1, self.generated_turns + 1):
            key = f"{seed}:{conv.id}:{t}"
            drawn = draw_documents(conv.pool, self.documents_per_turn, key)
            role = "questioner"
            try:
                question = self._questioner.ask(drawn, conv.history, key)
                role = "responder"
                answer = self._responder.answer(conv.history, question.text, question.gold)
            except EndpointUnreachable:
                raise
            except LLMError as err:
                conv.reason = failure_reason(role, err)
                break
            conv.turns.append(turn_record(t, question, answer, drawn))
            tick(1)
        tick(self.generated_turns - len(conv.turns))

    def _rows(self, convs: list[_Conversation]) -> tuple[list[dict[str, Any]], Counter[str]]:
        """The records of finished conversations (in order) and the drops of the failure rule."""
        rows: list[dict[str, Any]] = []
        drops: Counter[str] = Counter()
        for c in convs:
            if c.reason and len(c.turns) < self.min_turns:
                drops[c.reason] += 1
                continue
            stop = f"{c.reason} at turn {len(c.turns) + 1}" if c.reason else ""
            rows.append({"id": c.id, "cluster_idx": c.cluster_idx, "doc_ids": [d.doc_id for d in c.pool],
                         "turns": c.turns, "complete": not c.reason, "stop_reason": stop})
        return rows, drops


def turn_record(t: int, question: Question, answer: Answer, drawn: list[Doc]) -> dict[str, Any]:
    """Turn ``t`` of a conversation record: the question asked about the drawn documents and its answer."""
    return {"turn": t, "question": question.text, "original_question": question.text, "answer": answer.text,
            "gold": question.gold.doc_id, "drawn": [d.doc_id for d in drawn],
            "prompt_tokens": question.prompt_tokens + answer.prompt_tokens,
            "completion_tokens": question.completion_tokens + answer.completion_tokens,
            "role_tokens": {"questioner_prompt": question.prompt_tokens,
                            "questioner_completion": question.completion_tokens,
                            "responder_prompt": answer.prompt_tokens,
                            "responder_completion": answer.completion_tokens,
                            "polisher_prompt": 0, "polisher_completion": 0},
            "polish": "not run"}


def _reason(stop: str) -> str:
    """A stop reason without its turn number (``"...: reply unparsable at turn 4"`` -> ``"...: reply unparsable"``),
    so that stops count by reason."""
    return stop.rsplit(" at turn ", 1)[0]


def turn_figures(records: Iterable[dict[str, Any]], roles: tuple[str, ...]) -> dict[str, Any]:
    """Mean and max prompt tokens per call of each role at each turn (the prompt budget), and turn counts."""
    sums: dict[str, list[int]] = {}
    for rec in records:
        for turn in rec["turns"]:
            tokens = turn.get("role_tokens") or {}
            for role in roles:
                value = tokens.get(f"{role}_prompt")
                if value:
                    sums.setdefault(f"{role}@{turn['turn']}", []).append(int(value))
    figures: dict[str, Any] = {}
    for key, values in sorted(sums.items(), key=lambda kv: (kv[0].split("@")[0], int(kv[0].split("@")[1]))):
        figures[f"prompt_tokens_{key.replace('@', '_turn_')}"] = (f"mean {sum(values) / len(values):,.0f}, "
                                                                  f"max {max(values):,}")
    return figures
