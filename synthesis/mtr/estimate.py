"""Dry-run estimates of the MTR agents' stages (``converse``, ``polish``) from a seeded sample of rendered prompts
and a per-turn growth model (:class:`TurnModel`), so that a paper-scale estimate takes seconds whatever the number
of conversations. One call per agent and turn (re-asks and early stops not foreseen).

**Sample** (:func:`sample_conversations`): ``SAMPLE_CONVERSATIONS`` (8) document pools drawn with
``random.Random(f"estimate:{seed}")``: the run's own clusters when the ``cluster`` stage has finished; else pools of
the expected cluster size from the first ``SCAN_DOCUMENTS`` (5,000) documents of the curated corpus, or of
``--corpus`` before curation (a document longer than curation's default chunk size, 2,048 characters, is split as
the default chunker splits it and one of its kept chunks stands for it); else stand-in documents of
``ESTIMATE_DOC_CHARS`` characters of prose (:data:`STAND_IN_TEXT` repeated). The earlier turns are stand-ins, since
no agent has written yet: the questions of :data:`STAND_IN_QUESTIONS` and, as answers, consecutive pieces of the
pool's documents of ``answer_words`` words, or without it of ``ESTIMATE_ANSWER_TOKENS`` (88) tokens, the paper's
mean answer (87.5 tokens). Once ``converse`` has finished, the Polisher's sample is its real conversations.
Completion tokens: the Questioner's JSON reply around a stand-in question, the Responder's stand-in answer, the
Polisher's stand-in rewrite (:func:`stand_in_rewrite`).

The Polisher's per-call model (:func:`polish_model`) renders its real prompts as a run sends them: turn t shows turn
1 as written and turns 2..t-1 as rewritten (each rewrite goes into the later turns' history), so the earlier
questions it shows are stand-in rewrites, not the Questioner's questions (counting those made the estimate grow too
fast with the turns: 25% high where the Questioner writes long questions and the rewrites are short).
"""

from __future__ import annotations

import json
import random
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from convrag.llm import load_prompt
from convrag.llm.structured import compact_schema, json_schema_for
from convrag.synthesis.engine.pipeline import REPORT_FILE, Estimate, StageContext
from convrag.synthesis.engine.records import read_records
from convrag.synthesis.engine.tokens import count_tokens, head_tokens, prompt_tokens
from convrag.synthesis.mtr.agents import Doc, Exchange, Polisher, Questioner, QuestionReply, Responder, draw_documents
from convrag.synthesis.mtr.documents import CorpusRef, fetch_documents, iter_documents

if TYPE_CHECKING:
    from convrag.synthesis.curation.chunking import Chunker
    from convrag.synthesis.mtr.converse import Converse
    from convrag.synthesis.mtr.polish import Polish

SAMPLE_CONVERSATIONS = 8
SCAN_DOCUMENTS = 5000
GROWTH_TURNS = 4
#: documents drawn per sampled conversation for the Questioner's prompts (turns 1..DRAWS' keys)
DRAWS = 3
#: stand-in document size when no corpus can be read: curation's default chunk size (the longest chunk)
ESTIMATE_DOC_CHARS = 2048
#: stand-in answer length without ``answer_words``: the paper's mean answer (87.5 tokens)
ESTIMATE_ANSWER_TOKENS = 88
#: stand-in rewrite length: MTR-Bench's mean question after polishing (15.33 tokens, the paper's Table 2; 7 of its 8
#: turns are rewrites), which also keeps to the Polisher's "fewer than 12 words"
ESTIMATE_REWRITE_TOKENS = 15
STAND_IN_QUESTIONS = (
    "What did the first settlers grow on the river plain, and why did they choose that crop?",
    "how long did the construction take in the end?",
    "Which materials were used for the roof, and did they hold up in the storms?",
    "so what happened to the company after the merger?",
    "Why is the northern population declining faster than the southern one?",
    "did anyone ever try to repeat the experiment?",
)
STAND_IN_TEXT = (
    "The bridge was completed in 1932 after four years of work, during which the crews sank eight caissons into the "
    "riverbed and raised a steel arch that spans 503 metres between its abutments. Engineers at the time disagreed "
    "about the foundations: one group argued for granite piers, another for reinforced concrete, and the compromise "
    "used both. Maintenance crews still repaint the arch in sections, a cycle that takes about ten years. ")


@dataclass(frozen=True)
class TurnModel:
    """Prompt tokens of one agent per turn: ``first`` at turn 1, ``second`` at turn 2, ``growth`` per further
    earlier turn shown; ``turn_tokens`` is one earlier turn as the history budget counts it.

    Fitted per role on the real prompt templates, counted with :func:`~convrag.synthesis.engine.tokens.
    prompt_tokens` (the Questioner's structured-output instruction included). The whole history is re-sent each
    turn, so a prompt grows linearly with the earlier turns it shows: ``first`` = the mean prompt at turn 1,
    ``second`` = at turn 2 (one earlier turn), ``growth`` = the mean tokens one more earlier turn adds (prompts
    with 1 and ``GROWTH_TURNS`` (4) earlier turns over the same documents). At turn t >= 2 the prompt is ``second +
    (shown(t) - 1) x growth`` with ``shown(t) = t - 1``, or under ``max_history_tokens`` at most ``budget //
    turn_tokens`` (the mean tokens of one earlier turn as the budget counts it). A conversation costs the sum over
    its turns; the stage, that sum times the conversations (polish: over turns 2..T, or over the real
    conversations' lengths once converse ran).
    """

    first: float
    second: float
    growth: float
    turn_tokens: float = 0.0
    budget: int | None = None
    completion: float = 0.0

    def shown(self, turn: int) -> int:
        """Earlier turns the prompt of ``turn`` shows: all t-1, or as many as the budget holds on average."""
        if not self.budget or self.turn_tokens <= 0:
            return turn - 1
        return min(turn - 1, int(self.budget // self.turn_tokens))

    def prompt(self, turn: int) -> float:
        """Prompt tokens of one call at ``turn`` (1-based); a later turn whose budget holds no earlier turn shows
        none, as turn 1 does, but with the later turns' instructions (``second - growth``, never below ``first``)."""
        if turn == 1:
            return self.first
        shown = self.shown(turn)
        return self.second + (shown - 1) * self.growth if shown else max(self.first, self.second - self.growth)

    def total(self, first_turn: int, last_turn: int) -> float:
        """Prompt tokens of the calls at turns ``first_turn``..``last_turn`` of one conversation."""
        return sum(self.prompt(t) for t in range(first_turn, last_turn + 1))


@dataclass
class ConversationSample:
    """Sampled conversations: their ids, document pools and stand-in earlier turns; ``source`` says where from."""

    ids: list[str]
    pools: list[list[Doc]]
    turns: list[list[Exchange]]
    source: str


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _chunked(text: str, chunker: Chunker) -> list[str]:
    """``text`` as curation's default chunker keeps it (whole when no longer than one chunk)."""
    if len(text) <= ESTIMATE_DOC_CHARS:
        return [text]
    return [c for _, c in chunker.split(text) if c is not None] or [text[:ESTIMATE_DOC_CHARS]]


def _scanned_documents(converse: Converse, ctx: StageContext, rng: random.Random) -> tuple[list[Doc], str]:
    """Documents of the first ``SCAN_DOCUMENTS`` of the curated corpus (or of the source), as the agents see them."""
    ref = CorpusRef(ctx.out, converse.source, converse.corpus_config)
    curated = ref.curated is not None
    if not curated and converse.source is None:
        return [], ""
    from convrag.synthesis.curation.chunking import Chunker

    chunker = Chunker(ESTIMATE_DOC_CHARS)
    docs: list[Doc] = []
    for row in iter_documents(ref):
        if row["document_idx"] >= SCAN_DOCUMENTS:
            break
        texts = [row["text"]] if curated else _chunked(row["text"], chunker)
        docs.append(Doc(row["id"], row["title"], rng.choice(texts)))
    where = "curated corpus" if curated else "--corpus, chunked as curation's defaults would"
    return docs, f"{len(docs):,} documents of the {where}"


def sample_conversations(converse: Converse, ctx: StageContext) -> ConversationSample:
    """The seeded sample of conversations the estimates render (see the module docstring)."""
    rng = random.Random(f"estimate:{ctx.seed}")
    size = max(1, converse.expected_cluster_size)
    ids: list[str] = []
    pools: list[list[Doc]] = []
    source = ""
    ref = CorpusRef(ctx.out, converse.source, converse.corpus_config)
    if (ctx.out / "cluster" / REPORT_FILE).is_file() and (ref.curated is not None or ref.source is not None):
        clusters = converse._clusters(ctx.out)
        picked = sorted(rng.sample(clusters, min(SAMPLE_CONVERSATIONS, len(clusters))))
        found = fetch_documents(ref, {d for _, doc_ids in picked for d in doc_ids})
        ids = [f"c{idx:06d}" for idx, _ in picked]
        pools = [[Doc(d, found[d]["title"], found[d]["text"]) for d in doc_ids] for _, doc_ids in picked]
        source = f"{len(pools)} of the run's clusters"
    if not pools:
        docs, source = _scanned_documents(converse, ctx, rng)
        if docs:
            pools = [rng.sample(docs, min(size, len(docs))) for _ in range(SAMPLE_CONVERSATIONS)]
    if not pools:
        text = (STAND_IN_TEXT * (ESTIMATE_DOC_CHARS // len(STAND_IN_TEXT) + 1))[:ESTIMATE_DOC_CHARS]
        pools = [[Doc(f"d{i}", "A document title", text) for i in range(size)]] * SAMPLE_CONVERSATIONS
        source = f"stand-in documents of {ESTIMATE_DOC_CHARS:,} characters"
    ids = ids or [f"c{i:06d}" for i in range(len(pools))]
    words = converse.responder_options["answer_words"]
    turns = []
    for pool in pools:
        rest = " ".join(" ".join(d.text for d in pool).split())
        answers = []
        for _ in range(GROWTH_TURNS):
            while len(rest.split()) < 2 * (words or ESTIMATE_ANSWER_TOKENS):
                rest += " " + STAND_IN_TEXT.strip()
            answer = " ".join(rest.split()[:words]) if words else head_tokens(rest, ESTIMATE_ANSWER_TOKENS)
            answers.append(answer)
            rest = rest[len(answer):].strip()
        turns.append([Exchange(STAND_IN_QUESTIONS[i % len(STAND_IN_QUESTIONS)], a) for i, a in enumerate(answers)])
    return ConversationSample(ids, pools, turns, source)


def _structured_instruction_tokens() -> int:
    """Tokens of the structured-output instruction the LLM layer appends to the Questioner's prompt."""
    schema = json.dumps(compact_schema(json_schema_for(QuestionReply)), ensure_ascii=False)
    return count_tokens(load_prompt("structured_output").render(schema_json=schema)[0]["content"])


def converse_models(converse: Converse, sample: ConversationSample, seed: int) -> tuple[TurnModel, TurnModel]:
    """The growth models of the Questioner and the Responder, fitted on ``sample``."""
    options = converse.questioner_options
    budget = converse.max_history_tokens or None
    questioner = Questioner(None, doc_chars=options["doc_chars"],  # type: ignore[arg-type]
                            history_answer_chars=options["history_answer_chars"])
    responder = Responder(None, answer_words=converse.responder_options["answer_words"],  # type: ignore[arg-type]
                          history_answer_chars=converse.responder_options["history_answer_chars"])
    instruction = _structured_instruction_tokens()
    k, h = converse.documents_per_turn, GROWTH_TURNS
    q: dict[str, list[float]] = {"first": [], "second": [], "growth": []}
    r: dict[str, list[float]] = {"first": [], "step": [], "growth": []}
    for conv_id, pool, turns in zip(sample.ids, sample.pools, sample.turns, strict=True):
        for key in (f"{seed}:{conv_id}:{t}" for t in range(1, DRAWS + 1)):
            drawn = draw_documents(pool, k, key)
            none, one, more = (prompt_tokens(questioner.messages(drawn, turns[:n], key)) + instruction
                               for n in (0, 1, h))
            q["first"].append(none)
            q["second"].append(one)
            q["growth"].append((more - one) / (h - 1))
        question = turns[-1].question
        r["first"] += [prompt_tokens(responder.messages([], question, gold)) for gold in pool]
        none, one = (prompt_tokens(responder.messages(turns[:n], question, pool[0])) for n in (0, 1))
        r["step"].append(one - none)
        r["growth"].append((prompt_tokens(responder.messages(turns[:h], question, pool[0])) - one) / (h - 1))
    fitted_r = {"first": _mean(r["first"]), "second": _mean(r["first"]) + _mean(r["step"]),
                "growth": _mean(r["growth"])}
    exchanges = [x for turns in sample.turns for x in turns]
    asked = _mean([count_tokens(json.dumps({"document": 1, "question": x.question})) for x in exchanges])
    models = []
    for fitted, agent, completion in (({key: _mean(values) for key, values in q.items()}, questioner, asked),
                                      (fitted_r, responder, _mean([count_tokens(x.answer) for x in exchanges]))):
        models.append(TurnModel(**fitted,
                                turn_tokens=_mean([agent.turn_tokens(x) for x in exchanges]), budget=budget,
                                completion=completion))
    return models[0], models[1]


def stand_in_rewrite(question: str) -> str:
    """The Polisher's rewrite of ``question`` as the estimate counts it: its first :data:`ESTIMATE_REWRITE_TOKENS`
    (15) tokens, or all of it when shorter (a rewrite is never much longer than the question: ``max_ratio``)."""
    return head_tokens(question, ESTIMATE_REWRITE_TOKENS)


def polish_model(polish: Polish, turns: Sequence[Sequence[Exchange]]) -> TurnModel:
    """The Polisher's per-call model, fitted on ``turns`` (conversations of at least two turns) with the prompts a
    run renders: turn t shows turn 1 as written and turns 2..t-1 as their stand-in rewrites (:func:`stand_in_rewrite`,
    as the stage propagates each rewrite into the later turns' history). ``second``: the mean prompt with one
    earlier turn; ``growth``: the mean tokens one more earlier (rewritten) turn adds, from prompts showing 1 and up to
    ``GROWTH_TURNS`` earlier turns; ``completion``: the mean stand-in rewrite of turns 2..T."""
    polisher = Polisher(None, context_answer_chars=polish.context_chars)  # type: ignore[arg-type]
    second, growth, completion = [], [], []
    for conv in turns:
        if len(conv) < 2:
            continue
        rewritten = [conv[0], *(Exchange(stand_in_rewrite(x.question), x.answer) for x in conv[1:])]
        h = min(GROWTH_TURNS, len(conv) - 1)
        question = conv[h].question
        one = prompt_tokens(polisher.messages(rewritten[:1], question))
        second.append(one)
        completion += [count_tokens(x.question) for x in rewritten[1:]]
        if h > 1:
            growth.append((prompt_tokens(polisher.messages(rewritten[:h], question)) - one) / (h - 1))
    return TurnModel(first=0.0, second=_mean(second), growth=_mean(growth), completion=_mean(completion))


def estimate_converse(converse: Converse, ctx: StageContext, n: int, how: str) -> Estimate:
    """The converse stage's estimate for ``n`` conversations (``how``: "at most", "about ..." or "")."""
    from convrag.synthesis.engine.roles import token_estimate

    sample = sample_conversations(converse, ctx)
    questioner, responder = converse_models(converse, sample, ctx.seed)
    turns = converse.generated_turns
    calls = n * turns
    parts = [token_estimate(spec, calls, round(n * model.total(1, turns)), round(calls * model.completion))
             for spec, model in ((converse.questioner, questioner), (converse.responder, responder))]
    budget = questioner.budget
    cut = f", history budget {budget:,} tokens" if budget else ""
    note = (f"{how + ' ' if how else ''}{n:,} conversations x {turns} turns; tokens from {len(sample.pools)} "
            f"sampled conversations ({sample.source}){cut}")
    return Estimate(records=n, llm_calls=2 * calls, prompt_tokens=sum(p.prompt_tokens for p in parts),
                    completion_tokens=sum(p.completion_tokens for p in parts), note=note, parts=parts)


def estimate_polish(polish: Polish, ctx: StageContext) -> Estimate:
    """The polish stage's estimate: from the converse stage's conversations once it finished, else from the converse
    stage of the same run (``polish.upstream``); a note when neither is known."""
    from convrag.synthesis.engine.roles import token_estimate

    converse = ctx.out / "converse"
    if (converse / REPORT_FILE).is_file():
        records = [[Exchange(t["question"], t["answer"]) for t in r["turns"]]
                   for r in read_records(converse, columns=["turns"])]
        lengths = [len(r) for r in records]
        rng = random.Random(f"estimate:{ctx.seed}")
        sampled = rng.sample(records, min(SAMPLE_CONVERSATIONS, len(records)))
        how, source = "", f"{len(sampled)} of the converse stage's conversations"
    elif polish.upstream is not None and polish.upstream._expected_conversations(ctx)[0] is not None:
        n, how = polish.upstream._expected_conversations(ctx)
        lengths = [polish.upstream.generated_turns] * (n or 0)
        sample = sample_conversations(polish.upstream, ctx)
        sampled, source = sample.turns, f"stand-in turns over {sample.source}"
    else:
        return Estimate(note="one call per user turn after the first; known after the converse stage")
    model = polish_model(polish, sampled)
    calls = sum(max(0, t - 1) for t in lengths)
    prompt = sum(model.total(2, t) * count for t, count in Counter(lengths).items())
    part = token_estimate(polish.polisher, calls, round(prompt), round(calls * model.completion))
    return Estimate(records=len(lengths), llm_calls=calls, prompt_tokens=part.prompt_tokens,
                    completion_tokens=part.completion_tokens, parts=[part],
                    note=f"{how + ' ' if how else ''}{len(lengths):,} conversations; tokens from {source}")

