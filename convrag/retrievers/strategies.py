"""Query strategies: named ways of turning one conversational turn into the text a retriever searches with.

They follow the RECOR paper (section 4.1.1) and work on any multi-turn benchmark whose turns fit a :class:`Turn`.
Each layout is one function below (``STRATEGIES`` maps names to them): ``baseline`` (the query as asked),
``rewrite`` (an LLM rewrite into a self-contained query), ``reasoning`` (query, then the turn's retrieval
reasoning), ``history`` (``Q: ...`` / ``A: ...`` history lines, then the query), ``history+reasoning``,
``reasoning-metadata`` (query, target information, relevance signals), ``dialogue`` and ``dialogue+rewrite``
(MTR-Suite's ``User:`` / ``Agent:`` serialisation), ``conversation`` (mteb's text of a conversational query,
:mod:`convrag.retrievers.conversation`: ``role: content`` parts joined by ``"; "``) and ``field:NAME`` (a turn's
field as shipped). Other parts are joined with a single newline (``SEP``) and carry no labels; empty parts (no
history at turn 1, no reasoning) are left out, so at turn 1 ``history`` equals ``baseline``. Every layout returns a
:class:`~convrag.retrievers.query_text.QueryText` (history lines oldest first, then the tail: the query and what
follows it), which encoders with a length limit fit with :func:`~convrag.retrievers.query_text.fit_query` (oldest
history first, the tail kept whole).

Rewrite failures (:class:`~convrag.llm.LLMFailure`, or a reply with no query in it: empty, reasoning only or a
refusal, see :func:`clean_rewrite`) are never hidden: :func:`format_queries` lists them, then raises
:class:`RewriteError` with ``on_failure="error"`` (the default), or with ``on_failure="baseline"`` uses the baseline
text for those turns and lists them in ``FormattedQueries.fallbacks``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from convrag.core.errors import ConvragError, DataError, EmptyResult
from convrag.retrievers.conversation import conversation_text
from convrag.retrievers.query_text import QueryText

SEP = "\n"
#: history strings that mean "no history" in the RECOR release (compared after strip + lower case)
NO_HISTORY = frozenset({"", "no previous conversation.", "no previous conversation"})
REWRITE_PROMPT = "query_rewrite"
REWRITE_MAX_TOKENS = 96
ROLE_LABELS = {"user": "Q", "assistant": "A", "agent": "A"}
DIALOGUE_LABELS = {"user": "User", "assistant": "Agent", "agent": "Agent"}
FIELD_PREFIX = "field:"


class RewriteError(ConvragError):
    """Query rewriting failed for some turns (and no fallback was asked for)."""


@dataclass(frozen=True)
class ReasoningMetadata:
    """RECOR's structured retrieval reasoning of a turn: what relevant documents hold, and signals."""

    target_information: str = ""
    relevance_signals: tuple[str, ...] = ()
    irrelevance_signals: tuple[str, ...] = ()


@dataclass(frozen=True)
class Turn:
    """One turn to retrieve for.

    ``history``: earlier messages as (role, text), role ``user`` or ``assistant``; ``history_text``: the
    release's own rendering of it (RECOR ``conversation_history``), used verbatim when given.
    """

    qid: str
    query: str
    history: tuple[tuple[str, str], ...] = ()
    history_text: str | None = None
    reasoning: str = ""
    metadata: ReasoningMetadata | None = None
    position: int = 1
    conversation_id: str = ""
    domain: str = ""
    fields: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def history_string(self) -> str:
        """The history as one string: ``history_text`` if given, else ``Q: ...`` / ``A: ...`` lines."""
        if self.history_text is not None:
            return "" if self.history_text.strip().lower() in NO_HISTORY else self.history_text.strip()
        return render_history(self.history)

    def history_messages(self) -> list[tuple[str, str]]:
        """The history as (role, text) messages (parsed from ``history_text`` when only that is given)."""
        if self.history or self.history_text is None:
            return list(self.history)
        return parse_history(self.history_string())


def render_history(messages: Sequence[tuple[str, str]]) -> str:
    """``Q: <user text>`` / ``A: <assistant text>`` lines, one per message (other roles: ``<role>: ``)."""
    return SEP.join(f"{ROLE_LABELS.get(role, role)}: {text.strip()}" for role, text in messages if text.strip())


def parse_history(text: str) -> list[tuple[str, str]]:
    """Inverse of :func:`render_history`: lines starting ``Q:`` / ``A:`` open user / assistant messages,
    other lines continue the previous message; text before any marker is one ``user`` message."""
    messages: list[list[str]] = []
    for line in text.splitlines():
        match = re.match(r"^(Q|A):\s?(.*)$", line)
        if match:
            messages.append(["user" if match.group(1) == "Q" else "assistant", match.group(2)])
        elif messages:
            messages[-1][1] += "\n" + line
        elif line.strip():
            messages.append(["user", line])
    return [(role, body.strip()) for role, body in messages if body.strip()]


def _parts(*parts: str) -> list[str]:
    return [p.strip() for p in parts if p and p.strip()]


def _history_lines(turn: Turn) -> list[str]:
    history = turn.history_string()
    return history.split(SEP) if history else []


def baseline_text(turn: Turn) -> QueryText:
    """``query``."""
    return QueryText([], _parts(turn.query))


def reasoning_text(turn: Turn) -> QueryText:
    """``query + SEP + reasoning`` (reasoning left out when empty).

    The reasoning is the turn's retrieval reasoning (RECOR ``subquestion_reasoning``)."""
    return QueryText([], _parts(turn.query, turn.reasoning))


def history_text(turn: Turn) -> QueryText:
    """``history + SEP + query`` (history as :meth:`Turn.history_string`; left out when empty)."""
    return QueryText(_history_lines(turn), _parts(turn.query))


def history_reasoning_text(turn: Turn) -> QueryText:
    """``history + SEP + query + SEP + reasoning`` (empty parts left out)."""
    return QueryText(_history_lines(turn), _parts(turn.query, turn.reasoning))


def metadata_text(turn: Turn) -> QueryText:
    """``query + SEP + target_information + SEP + "; ".join(relevance_signals)`` (no irrelevance signals).

    Irrelevance signals are left out on purpose: a retriever cannot negate terms, so adding them would pull in the
    documents they describe."""
    meta = turn.metadata or ReasoningMetadata()
    signals = "; ".join(s.strip() for s in meta.relevance_signals)
    return QueryText([], _parts(turn.query, meta.target_information, signals))


def _dialogue(turn: Turn, query: str) -> QueryText:
    lines = [f"{DIALOGUE_LABELS.get(role, role.capitalize())}: {text.strip()}"
             for role, text in turn.history_messages() if text.strip()]  # fmt: skip
    return QueryText(lines, [f"User: {query.strip()}"])


def dialogue_text(turn: Turn) -> QueryText:
    """``User: ...`` / ``Agent: ...`` lines of the history, then ``User: <query>`` (MTR-Suite's protocol).

    The history lines are every earlier message of the conversation, oldest first."""
    return _dialogue(turn, turn.query)


def field_text(turn: Turn, name: str) -> QueryText:
    """The turn's field ``name`` verbatim (a view shipped in the data); ``DataError`` if the turn lacks it.

    Example: MTRAG's human rewrite. A field of several lines is read as a conversation listed oldest first (MTRAG's
    ``questions`` view): its last line is the tail, the lines before it are history, trimmed first when the text
    must be shortened."""
    value = turn.fields.get(name)
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"turn {turn.qid!r} has no text in field {name!r}", f"strategy {FIELD_PREFIX}{name}")
    lines = value.strip().split(SEP)
    return QueryText(lines[:-1], lines[-1:])


_QUERY_LABEL = re.compile(r"^(?:#+\s*)?(?:\*\*)?(?:(?:rewritten|self-contained|standalone|final|search)\s+)*query"
                          r"(?:\s*:|\s*$)\s*(?:\*\*)?\s*", re.I)
_PREAMBLE = re.compile(r"^(?:sure|okay|ok|certainly|of course|here(?:'s|\u2019s| is))\b[^:\n]*:\s*(?:\*\*)?\s*", re.I)


def clean_rewrite(reply: str) -> str:
    """The query in an LLM reply: reasoning up to ``</think>`` dropped, then the first line left once a preamble
    ending in a colon ("Sure! Here is the rewritten query:"), a ``Query:`` label (also ``Rewritten query:``,
    ``**Search query:**`` or a ``### Query`` heading) and surrounding quotes, backticks or bold stars are removed;
    empty when the reply holds no such line or declines the task (:func:`~convrag.llm.replies.is_refusal`)."""
    from convrag.llm.replies import is_refusal, strip_reasoning

    text = strip_reasoning(reply).strip()
    if is_refusal(text):
        return ""
    for line in text.splitlines():
        line = _QUERY_LABEL.sub("", _PREAMBLE.sub("", line.strip()))
        line = line.strip().strip("\"'`*").strip()
        if line:
            return line
    return ""


def rewrite_messages(turn: Turn) -> list[dict[str, str]]:
    """The ``query_rewrite`` prompt rendered for ``turn`` (history as role/text messages)."""
    from convrag.llm import load_prompt

    history = [{"role": "user" if r == "user" else "assistant", "text": t} for r, t in turn.history_messages()]
    return load_prompt(REWRITE_PROMPT).render(history=history, question=turn.query.strip())


def _rewrite(turn: Turn, llm: Any) -> str:
    from convrag.llm import LLMFailure
    from convrag.llm.replies import is_non_answer

    if not turn.history_string():
        return turn.query.strip()
    reply = llm.chat(rewrite_messages(turn), max_tokens=REWRITE_MAX_TOKENS).text
    text = clean_rewrite(reply)
    if not text:
        raise LLMFailure(f"no query in the rewrite reply for {turn.qid!r} (reply: {reply[:80]!r})", attempts=1,
                         last_text=reply)
    if is_non_answer(text):
        raise LLMFailure(f"the rewrite reply for {turn.qid!r} declines or says nothing ({text[:80]!r})", attempts=1,
                         last_text=reply)
    return text


def rewrite_text(turn: Turn, llm: Any) -> QueryText:
    """LLM rewrite of ``turn`` into a self-contained query; turns without history return the query itself.

    Prompt ``query_rewrite``; replies are cached on disk by the LLM layer. Turns without history are not sent to the
    LLM: their query is already self-contained.

    Raises :class:`~convrag.llm.LLMFailure` when the LLM fails or replies with nothing usable: no query, or a
    refusal or non-answer (:func:`convrag.llm.replies.is_non_answer`, e.g. "Honestly I could not say.").
    """
    return QueryText([], [_rewrite(turn, llm)])


def dialogue_rewrite_text(turn: Turn, llm: Any) -> QueryText:
    """:func:`dialogue_text` with the LLM rewrite (:func:`rewrite_text`) as the current query.

    This is MTR-Suite's ``cqr_cdr`` input."""
    return _dialogue(turn, _rewrite(turn, llm))


@dataclass(frozen=True)
class Strategy:
    """A named query formatter; ``needs_llm`` strategies take the LLM as second argument."""

    name: str
    fn: Callable[..., QueryText]
    description: str
    needs_llm: bool = False
    argument: str | None = None

    def format(self, turn: Turn, llm: Any = None) -> QueryText:
        if self.argument is not None:
            return self.fn(turn, self.argument)
        if self.needs_llm:
            if llm is None:
                raise ConvragError(f"strategy {self.name!r} needs an LLM (pass llm=...)")
            return self.fn(turn, llm)
        return self.fn(turn)


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy("baseline", baseline_text, "current query"),
        Strategy("rewrite", rewrite_text, "LLM rewrite into a self-contained query", needs_llm=True),
        Strategy("reasoning", reasoning_text, "query + retrieval reasoning"),
        Strategy("history", history_text, "conversation history + query"),
        Strategy("history+reasoning", history_reasoning_text, "history + query + reasoning"),
        Strategy("reasoning-metadata", metadata_text, "query + target information + relevance signals"),
        Strategy("dialogue", dialogue_text, "User:/Agent: history lines + User: query (MTR-Suite)"),
        Strategy("dialogue+rewrite", dialogue_rewrite_text, "dialogue history + LLM rewrite", needs_llm=True),
        Strategy("conversation", conversation_text, "role: content messages, query last, joined by '; ' (mteb)"),
        Strategy("llm-rewrite", rewrite_text, "LLM rewrite (alias of rewrite)", needs_llm=True),
    )
}
PAPER_STRATEGIES = ("baseline", "rewrite", "reasoning", "history", "history+reasoning")
LABELS = {"baseline": "Base", "rewrite": "QR", "reasoning": "Reas", "history": "Hist", "history+reasoning": "H+R",
          "reasoning-metadata": "Meta", "dialogue": "Dialogue", "conversation": "Conv"}  # fmt: skip


def available_strategies() -> list[str]:
    """Registered strategy names (the paper's five first)."""
    return list(STRATEGIES)


def get_strategy(name: str) -> Strategy:
    """The strategy called ``name`` (or ``field:NAME``); raises ``ConvragError`` naming the known ones otherwise."""
    if name.strip().startswith(FIELD_PREFIX):
        column = name.strip()[len(FIELD_PREFIX):]
        if not column:
            raise ConvragError(f"strategy {name!r} names no field")
        return Strategy(f"{FIELD_PREFIX}{column}", field_text, f"the turn's {column!r} as shipped", argument=column)
    key = name.strip().lower()
    if key not in STRATEGIES:
        raise ConvragError(f"unknown query strategy {name!r}; known: {', '.join(STRATEGIES)}, field:NAME")
    return STRATEGIES[key]


@dataclass
class FormattedQueries:
    """Texts per query id, plus what went wrong: ``failures`` (qid -> reason), ``fallbacks`` (qids that use
    the baseline text instead), ``llm_calls`` (turns sent to the LLM, cached or not), ``in_flight`` (the LLM's
    requests in flight so far in the run, :meth:`convrag.llm.RunReport.in_flight`; None without an LLM)."""

    strategy: str
    texts: dict[str, QueryText]
    failures: dict[str, str] = field(default_factory=dict)
    fallbacks: list[str] = field(default_factory=list)
    llm_calls: int = 0
    in_flight: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "n": len(self.texts), "llm_calls": self.llm_calls,
                "failures": dict(self.failures), "fallbacks": list(self.fallbacks),
                **({"in_flight": self.in_flight} if self.in_flight is not None else {})}  # fmt: skip


def format_queries(
    name: str,
    turns: Iterable[Turn],
    llm: Any = None,
    progress: bool = True,
    on_failure: str = "error",
    concurrency: int | None = None,
) -> FormattedQueries:
    """Format every turn with strategy ``name``.

    ``llm``: an :class:`~convrag.llm.LLM` or spec string (only ``rewrite`` uses it). ``on_failure``:
    ``"error"`` raises :class:`RewriteError` listing the failed turns (successful rewrites stay cached);
    ``"baseline"`` uses the baseline text for them and lists them in ``fallbacks``; when every turn sent to the LLM
    failed, :class:`~convrag.core.errors.EmptyResult` is raised either way (the strategy would only repeat the
    baseline). ``concurrency``: turns
    rewritten at once (None: the LLM's own bound on requests in flight, its ``max_concurrency``).
    """
    if on_failure not in ("error", "baseline"):
        raise ConvragError(f"on_failure must be 'error' or 'baseline', got {on_failure!r}")
    strategy = get_strategy(name)
    items = list(turns)
    dupes = sorted(q for q, n in Counter(t.qid for t in items).items() if n > 1)
    if dupes:
        raise DataError(f"duplicate turn ids {dupes[:5]}", f"strategy {strategy.name}")
    if not strategy.needs_llm:
        return FormattedQueries(strategy.name, {t.qid: strategy.format(t) for t in items})
    from tqdm.auto import tqdm

    from convrag.core.progress import label
    from convrag.llm import LLM, LLMError, get_llm, run_batch

    model = llm if isinstance(llm, LLM) else get_llm(llm)
    pending = [t for t in items if t.history_string()]
    bar = tqdm(total=len(pending), desc=label("LLM rewriting", strategy.name), disable=not progress)
    limit = model.max_concurrency if concurrency is None else concurrency
    batch = run_batch(pending, lambda t: strategy.format(t, model), concurrency=limit,
                      catch=(LLMError,), on_result=lambda *_: bar.update(1))  # fmt: skip
    bar.close()
    done = {t.qid: text for t, text in zip(pending, batch.results, strict=True) if text is not None}
    failures = {pending[i].qid: reason for i, reason in sorted(batch.failures.items())}
    if pending and len(failures) == len(pending):
        first = next(iter(failures.items()))
        raise EmptyResult(f"query rewrite ({strategy.name}) failed for all {len(pending)} turns that needed it "
                          f"(first: {first[0]}: {first[1]}): the strategy would only repeat the baseline")
    if failures and on_failure == "error":
        first = next(iter(failures.items()))
        raise RewriteError(f"query rewrite failed for {len(failures)} of {len(pending)} turns "
                           f"(first: {first[0]}: {first[1]}); to use the plain query for them, pass "
                           "on_failure='baseline' (convrag evaluate --rewrite-fallback)")  # fmt: skip
    texts = {t.qid: done.get(t.qid) or (baseline_text(t) if strategy.name != "dialogue+rewrite" else dialogue_text(t))
             for t in items}  # fmt: skip
    return FormattedQueries(strategy.name, texts, failures, list(failures), llm_calls=len(pending),
                            in_flight=model.report.in_flight())


# ---------------------------------------------------------------- turn records from benchmark rows


def _signals(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value.strip() else ()
    return tuple(str(v) for v in value)


Where = Callable[[int], tuple[str, int | None]]


def recor_turns(queries: Iterable[Mapping[str, Any]], conversations: Iterable[Mapping[str, Any]] | None = None,
                where: Where | None = None) -> list[Turn]:
    """Turns from RECOR ``queries`` rows (``_id``, ``text``, ``domain``, ``conversation_id``, ``turn``,
    ``history``, ``reasoning``), with reasoning metadata joined from ``conversations`` rows by
    (conversation id, turn). A query whose conversation turn is missing raises ``DataError`` when
    conversations are given; without them, turns carry no metadata. ``where(n)`` names the file and line of
    the n-th query row in errors (default: ``queries:<n>``)."""
    where = where or (lambda line: ("queries", line))
    meta: dict[tuple[str, int], ReasoningMetadata] = {}
    if conversations is not None:
        for conv in conversations:
            for t in conv["turns"]:
                meta[(str(conv["conversation_id"]), int(t["turn"]))] = ReasoningMetadata(
                    str(t.get("target_information") or ""), _signals(t.get("relevance_signals")),
                    _signals(t.get("irrelevance_signals")))  # fmt: skip
    turns = []
    for line, row in enumerate(queries, start=1):
        missing = [k for k in ("_id", "text", "conversation_id", "turn") if k not in row]
        if missing:
            raise DataError(f"RECOR query row lacks {missing}", *where(line))
        key = (str(row["conversation_id"]), int(row["turn"]))
        if conversations is not None and key not in meta:
            raise DataError(f"query {row['_id']!r}: conversation {key[0]!r} has no turn {key[1]}", *where(line))
        turns.append(Turn(
            qid=str(row["_id"]), query=str(row["text"]), history_text=str(row.get("history") or ""),
            reasoning=str(row.get("reasoning") or ""), metadata=meta.get(key), position=key[1],
            conversation_id=key[0], domain=str(row.get("domain") or "")))  # fmt: skip
    return turns


def mtrag_turns(tasks: Iterable[Mapping[str, Any]], where: Where | None = None) -> list[Turn]:
    """Turns from MTRAG ``tasks`` rows: ``input`` (list of {speaker, text}) ends with the current user
    question (``question`` when present); earlier messages are the history (speaker ``agent`` ->
    assistant). MTRAG has no retrieval reasoning, so ``reasoning`` strategies equal their base ones.
    ``where(n)`` names the file and line of the n-th row in errors (default: ``tasks:<n>``)."""
    where = where or (lambda line: ("tasks", line))
    turns = []
    for line, row in enumerate(tasks, start=1):
        messages = [(str(m["speaker"]), str(m["text"])) for m in row.get("input") or []]
        if not messages or messages[-1][0] != "user":
            raise DataError(f"task {row.get('task_id')!r}: input must end with a user message", *where(line))
        question = str(row.get("question") or messages[-1][1])
        history = tuple(("assistant" if s == "agent" else s, t) for s, t in messages[:-1])
        turns.append(Turn(qid=str(row["task_id"]), query=question, history=history,
                          position=int(row.get("turn") or len(messages) // 2 + 1),
                          conversation_id=str(row.get("conversation_id") or ""),
                          domain=str(row.get("domain") or "")))  # fmt: skip
    return turns


def check_strategies(names: list[str], flag: str, profile: Any = None) -> None:
    """Refuse, before any work, a query strategy that neither ``profile`` (its views and strategies) nor the
    strategy registry knows."""
    from convrag.retrievers.strategies import available_strategies, get_strategy

    own = [*profile.strategies, *profile.extra_strategies] if profile is not None else []
    for name in names:
        if name in own:
            continue
        try:
            get_strategy(name)
        except ConvragError:
            known = list(dict.fromkeys([*own, *available_strategies(), "field:NAME"]))
            raise ConvragError(f"{flag}: unknown query strategy {name!r}; known: {', '.join(known)}") from None


def llm_defaults(profile: Any) -> list[str]:
    """Names of ``profile``'s default strategies that call an LLM (``rewrite``, ``dialogue+rewrite``: strategies whose
    registry entry ``needs_llm``); ``field:`` strategies such as MTRAG's human ``rewrite`` view are not LLM calls."""
    return [name for name, spec in profile.strategies.items()
            if not spec.startswith("field:") and get_strategy(spec).needs_llm]  # fmt: skip


def without_llm_defaults(profile: Any) -> Any:
    """``profile`` with its LLM-calling default strategies (:func:`llm_defaults`) moved from ``strategies`` to
    ``extra_strategies``, so that they run only when asked for by name. ``ConvragError`` when every default
    strategy calls an LLM (there would be nothing left to run)."""
    from dataclasses import replace

    skipped = llm_defaults(profile)
    if not skipped:
        return profile
    kept = {n: s for n, s in profile.strategies.items() if n not in skipped}
    if not kept:
        raise ConvragError(f"every default query strategy of this benchmark ({', '.join(skipped)}) calls an LLM: "
                           "pass --llm SPEC (or set $CONVRAG_LLM), or choose --strategies")  # fmt: skip
    moved = {n: profile.strategies[n] for n in skipped}
    return replace(profile, strategies=kept, extra_strategies={**profile.extra_strategies, **moved})
