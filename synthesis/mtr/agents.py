"""The three LLM agents of MTR-Pipeline (MTR-Suite): Questioner, Responder and Polisher, one item at a time.

The stages (``synthesis.mtr.converse``, ``synthesis.mtr.polish``) batch these calls; nothing here reads or writes
files. Per turn :func:`draw_documents` draws the documents; the :class:`Questioner` (user simulator) asks one
question that exactly one of them answers and names that document as the gold; the :class:`Responder` (RAG
simulator) answers from the gold document alone; the :class:`Polisher` (the authors' ``build_dataset`` humanize
step, turns 2..T) rewrites a question as a person would type it, judged by :func:`rejection`. Each class says what
its agent sees. A failed agent raises :class:`AgentError` or :class:`~convrag.llm.types.UnparsableReply`; nothing
failed is ever stored as a question or an answer.

History budget (``max_history_tokens``, ours; None or 0: no budget). The Questioner and the Responder count each
earlier turn as they show it (``turn_tokens``, with ``synthesis.engine.tokens.count_tokens``). When the turns
together pass the budget, the oldest are left out whole, from the question list and the conversation alike, until
the rest fits (``synthesis.engine.tokens.keep_recent``); the current question and the documents are never cut. A
prompt whose history fits is the one rendered without a budget, byte for byte.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from convrag.core.errors import ConvragError
from convrag.llm import LLM, Message, SamplingParams, load_prompt
from convrag.llm.replies import is_refusal, strip_reasoning
from convrag.synthesis.engine.roles import AgentError, cut
from convrag.synthesis.engine.tokens import count_tokens, history_cuts, keep_recent

#: what the authors' API wrapper stores when a generation call failed
FAILURE_MARKER = "[ERROR: generation failed]"
META_PHRASES = ("rewrite", "here is", "certainly", "sure,")

_MARKER = re.compile(r"[ \t]*\[\d+\]")
_QUESTION_PREFIX = re.compile(
    r"^(?:\s*(?:\[\d+\]|\**\s*(?:(?:rewritten|casual|polished|new|next)\s+)?question\s*\**\s*:\s*\**))+\s*", re.I)
_QUOTES = (('"', '"'), ("'", "'"), ("\u201c", "\u201d"), ("\u2018", "\u2019"), ("**", "**"), ("`", "`"))
_AUTHORS_QUESTION = re.compile(r"^(?:\**\s*question\s*\**\s*:\s*\**\s*)?\[(\d+)\]\s*(\S.*)$", re.I)
@dataclass(frozen=True)
class Doc:
    """One corpus document as the agents see it."""

    doc_id: str
    title: str
    text: str


@dataclass(frozen=True)
class Exchange:
    """One earlier turn: the user question and the assistant answer, as the models saw them."""

    question: str
    answer: str


@dataclass
class Question:
    """The Questioner's output: the question, the 1-based number of its document among the drawn, that gold
    document, and the tokens of the call (all re-asks included)."""

    text: str
    number: int
    gold: Doc
    prompt_tokens: int
    completion_tokens: int


@dataclass
class Answer:
    """The Responder's answer (reasoning removed) and the tokens of the call."""

    text: str
    prompt_tokens: int
    completion_tokens: int


@dataclass
class Rewrite:
    """The Polisher's result: the rewrite, or the original question when rejected; ``status`` is
    ``"rewritten"`` or the rejection reason."""

    text: str
    status: str
    prompt_tokens: int
    completion_tokens: int


class QuestionReply(BaseModel):
    """One new question for the conversation, and the number of the one document that answers it."""

    document: int = Field(description="the number of the one document that answers the question")
    question: str = Field(description="the question, as the user would ask it")


def strip_markers(text: str) -> str:
    """``text`` without ``[digits]`` citation markers (and the spaces before them)."""
    return _MARKER.sub("", text)


def authors_question(text: str) -> dict[str, Any] | None:
    """The authors' Questioner format, ``[N] question`` on one line (optionally after a ``Question:`` label), as
    ``{"document": N, "question": ...}``; None for anything else."""
    match = _AUTHORS_QUESTION.match(text.strip())
    return None if match is None else {"document": int(match.group(1)), "question": match.group(2).strip()}


def clean_question(text: str) -> str:
    """The question stripped, without a leading ``[N]`` or ``Question:`` label (also ``Rewritten question:``,
    ``Casual question:``...) the model put in it."""
    return _QUESTION_PREFIX.sub("", text.strip()).strip()


def _unquote(text: str) -> str:
    for left, right in _QUOTES:
        if len(text) >= 2 and text.startswith(left) and text.endswith(right):
            return text[len(left):-len(right)].strip()
    return text


def _squash(text: str) -> str:
    return " ".join(text.split())


def history_cut_figures(conversations: Iterable[Sequence[Exchange]],
                        *agents: Questioner | Responder) -> dict[str, str]:
    """Report figures ``history_cut_<role>``: of the prompts of these conversations (turn t showing the t-1 turns
    before it), how many left earlier turns out under the agent's ``max_history_tokens``, and how many turns."""
    figures = {}
    for agent in agents:
        role = type(agent).__name__.lower()
        if not agent.max_history_tokens:
            figures[f"history_cut_{role}"] = "no budget (max_history_tokens=0)"
            continue
        prompts = turns = 0
        for conv in conversations:
            cut_prompts, cut_turns = history_cuts([agent.turn_tokens(x) for x in conv], agent.max_history_tokens)
            prompts, turns = prompts + cut_prompts, turns + cut_turns
        figures[f"history_cut_{role}"] = (f"{prompts:,} prompts left {turns:,} earlier turns out "
                                          f"(max_history_tokens={agent.max_history_tokens:,})")
    return figures


def draw_documents(pool: Sequence[Doc], k: int, key: str) -> list[Doc]:
    """``min(k, len(pool))`` documents of ``pool`` without replacement, drawn with ``random.Random(key)``; the
    list order is the numbering [1]..[n] the Questioner sees. The authors draw 5 documents the same way but
    unseeded; the stage passes the key ``f"{seed}:{conversation_id}:{turn}"``, so a run can be repeated exactly."""
    return random.Random(key).sample(list(pool), min(k, len(pool)))


def rejection(original: str, rewrite: str, *, max_ratio: float = 1.3, min_chars: int = 3,
              meta_phrases: Sequence[str] = META_PHRASES) -> str | None:
    """None when ``rewrite`` may replace ``original``, else the reason: the first rule that applies of

    * ``"too short"``: the stripped rewrite has at most ``min_chars`` characters (the authors reject < 3 characters
      and apply a rewrite only above 3; that is one rule: length <= 3 is rejected);
    * ``"meta phrase: P"``: it contains P of ``meta_phrases`` (case-insensitive, the first listed that occurs);
    * ``"refusal"``: it declines the task (:func:`is_refusal`; ours);
    * ``"several lines"``: it has more than one non-empty line (ours: the model wrote more than the rewrite);
    * ``"too long"``: it is longer than ``max_ratio`` times the original;
    * ``"unchanged"``: it equals the original once whitespace runs are collapsed (ours).
    """
    text = rewrite.strip()
    if len(text) <= min_chars:
        return "too short"
    low = text.lower()
    for phrase in meta_phrases:
        if phrase.lower() in low:
            return f"meta phrase: {phrase}"
    if is_refusal(text):
        return "refusal"
    if sum(1 for line in text.splitlines() if line.strip()) > 1:
        return "several lines"
    if len(text) > max_ratio * len(original.strip()):
        return "too long"
    if _squash(text) == _squash(original):
        return "unchanged"
    return None


def _params(temperature: float, top_p: float, max_tokens: int) -> SamplingParams:
    return SamplingParams(temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=0)


class Questioner:
    """Asks the next user question about one of the drawn documents.

    What it sees: the drawn documents, numbered, each with its title and its text with ``[digits]`` citation markers
    removed, whole as the authors show them (``doc_chars``: cut to that many characters at a word boundary, ``...``
    marking the cut); one few-shot example drawn with ``random.Random("example:" + key)`` from the examples in the
    prompt file; from turn 2 on also a numbered list of all earlier questions and the conversation as ``User:`` /
    ``Assistant:`` lines, answers whole as the authors show them (``history_answer_chars``: cut). Under the history
    budget an earlier turn counts its question twice (list and conversation) and its answer as shown.

    It must ask one natural question that exactly one document answers, without mentioning the documents; from
    turn 2 on about a topic, aspect or fact no earlier question covered, preferably from a document not used yet.
    It returns a :class:`Question`. The authors prefill ``**Question:**\\n[`` and parse ``N] question`` with a
    regex, dropping the conversation when that fails; here the LLM layer's structured output (``{"document": N,
    "question": "..."}``) records the number exactly, a number outside 1..n or a blank question is fed back and
    re-asked, and a reply that never validates raises :class:`~convrag.llm.types.UnparsableReply` (the stage stops
    the conversation there). A reply without JSON in the authors' form ``[N] question`` is read as that number and
    question; a reply cut off inside its JSON (closed by the LLM layer's repair) raises :class:`AgentError`, since
    its question may be cut too.
    """

    def __init__(self, llm: LLM, *, doc_chars: int | None = None, history_answer_chars: int | None = None,
                 max_history_tokens: int | None = None, max_tokens: int = 256, temperature: float = 0.8,
                 top_p: float = 0.95) -> None:
        self.llm = llm
        self.doc_chars = doc_chars
        self.history_answer_chars = history_answer_chars
        self.max_history_tokens = max_history_tokens
        self.params = _params(temperature, top_p, max_tokens)

    def turn_tokens(self, turn: Exchange) -> int:
        """Tokens of one earlier turn as shown (the question twice, the answer as cut), for the history budget."""
        return 2 * count_tokens(turn.question) + count_tokens(cut(turn.answer, self.history_answer_chars))

    def shown_history(self, history: list[Exchange]) -> list[Exchange]:
        """The earlier turns the prompt shows: the latest ones within ``max_history_tokens`` (all when None / 0)."""
        if not self.max_history_tokens:
            return history
        return history[len(history) - keep_recent([self.turn_tokens(h) for h in history], self.max_history_tokens):]

    def messages(self, drawn: list[Doc], history: list[Exchange], key: str) -> list[Message]:
        """The prompt: ``mtr_questioner_first`` for an empty history, else ``mtr_questioner_next`` (with the turns
        that fit the history budget; the next-turn prompt even when none fits)."""
        if not drawn:
            raise ConvragError("questioner: no documents were drawn; the cluster is empty")
        prompt = load_prompt("mtr_questioner_next" if history else "mtr_questioner_first")
        example = random.Random(f"example:{key}").choice(prompt.optional["examples"])
        documents = [{"number": i, "title": d.title, "text": cut(strip_markers(d.text), self.doc_chars)}
                     for i, d in enumerate(drawn, 1)]
        fields: dict[str, Any] = {"documents": documents, "example": example}
        if history:
            fields["history"] = [{"question": h.question, "answer": cut(h.answer, self.history_answer_chars)}
                                 for h in self.shown_history(history)]
        return prompt.render(**fields)

    def ask(self, drawn: list[Doc], history: list[Exchange], key: str) -> Question:
        """One question; raises UnparsableReply when no reply names a shown document and a non-blank question,
        AgentError when the reply was cut off (its JSON closed by repair)."""
        n = len(drawn)

        def check(reply: QuestionReply) -> str | None:
            if not 1 <= reply.document <= n:
                return (f"document must be the number of one of the {n} documents shown (1 to {n}); "
                        f"got {reply.document}")
            if not clean_question(reply.question):
                return "question is empty: write the question itself in the question field"
            return None

        parsed = self.llm.structured(self.messages(drawn, history, key), QuestionReply, self.params, check=check,
                                     fallback=authors_question)
        if "truncated" in parsed.repairs:
            raise AgentError("questioner: the reply was cut off before its JSON closed; the question may be cut",
                             "cut-off reply")
        reply = parsed.value
        return Question(text=clean_question(reply.question), number=reply.document, gold=drawn[reply.document - 1],
                        prompt_tokens=parsed.usage.prompt_tokens, completion_tokens=parsed.usage.completion_tokens)


class Responder:
    """Answers the question from the gold document alone, as an ideal RAG assistant would.

    What it sees: the earlier turns as real chat messages (answers whole, as the authors keep them;
    ``history_answer_chars``: cut), then one user message holding only the gold document (title and marker-free
    full text) and the question. It is asked for a complete, detailed answer built from the document, without
    naming documents or sources, with no length target, as in the authors' prompt and the paper (``answer_words``
    adds "about N words"); unlike the authors' prompt, not to reason step by step. Reasoning up to a ``</think>``
    tag is dropped. A blank reply, a refusal (:func:`is_refusal`) or the authors' failure marker
    ``[ERROR: generation failed]`` raises :class:`AgentError`: it is never stored as an answer.
    """

    def __init__(self, llm: LLM, *, answer_words: int | None = None, max_tokens: int = 512,
                 history_answer_chars: int | None = None, max_history_tokens: int | None = None,
                 temperature: float = 0.8, top_p: float = 0.95) -> None:
        self.llm = llm
        self.answer_words = answer_words
        self.history_answer_chars = history_answer_chars
        self.max_history_tokens = max_history_tokens
        self.params = _params(temperature, top_p, max_tokens)

    def turn_tokens(self, turn: Exchange) -> int:
        """Tokens of one earlier turn as shown (the question, the answer as cut), for the history budget."""
        return count_tokens(turn.question) + count_tokens(cut(turn.answer, self.history_answer_chars))

    def shown_history(self, history: list[Exchange]) -> list[Exchange]:
        """The earlier turns the prompt shows: the latest ones within ``max_history_tokens`` (all when None / 0)."""
        if not self.max_history_tokens:
            return history
        return history[len(history) - keep_recent([self.turn_tokens(h) for h in history], self.max_history_tokens):]

    def messages(self, history: list[Exchange], question: str, gold: Doc) -> list[Message]:
        """System instructions, the earlier turns that fit the history budget as chat messages, then the gold
        document and the question."""
        system, user = load_prompt("mtr_responder").render(
            answer_words=self.answer_words, title=gold.title, text=strip_markers(gold.text), question=question)
        turns: list[Message] = []
        for h in self.shown_history(history):
            turns.append({"role": "user", "content": h.question})
            turns.append({"role": "assistant", "content": cut(h.answer, self.history_answer_chars)})
        return [system, *turns, user]

    def answer(self, history: list[Exchange], question: str, gold: Doc) -> Answer:
        """The answer; raises AgentError for a blank reply, a refusal or the failure marker."""
        comp = self.llm.chat(self.messages(history, question, gold), self.params)
        text = strip_reasoning(comp.text).strip()
        if not text:
            raise AgentError(f"responder: blank answer to {question[:80]!r}", "blank answer")
        if is_refusal(text):
            raise AgentError(f"responder: refused to answer {question[:80]!r}: {text[:80]!r}", "refusal")
        if FAILURE_MARKER in text:
            raise AgentError(f"responder: the reply is the failure marker {FAILURE_MARKER!r}", "failure marker")
        return Answer(text=text, prompt_tokens=comp.usage.prompt_tokens,
                      completion_tokens=comp.usage.completion_tokens)


class Polisher:
    """Rewrites a question the way a person would type it; a rejected rewrite keeps the original.

    What it sees: the conversation before the turn as ``[User]:`` / ``[Assistant]:`` lines (assistant messages
    longer than ``context_answer_chars`` hard-cut there plus ``...``; an empty one reads ``(Start of
    conversation)``) and the original question. The reply is cleaned (whitespace, reasoning before ``</think>``, a
    leading ``Question:`` label as :func:`clean_question` removes it, one pair of wrapping quotes or bold stars) and
    judged by :func:`rejection`; a rejected rewrite keeps the original question, with the reason as the status.
    """

    def __init__(self, llm: LLM, *, context_answer_chars: int = 300, max_tokens: int = 100,
                 temperature: float = 0.8, top_p: float = 0.9, max_ratio: float = 1.3, min_chars: int = 3,
                 meta_phrases: Sequence[str] = META_PHRASES) -> None:
        self.llm = llm
        self.context_answer_chars = context_answer_chars
        self.max_ratio = max_ratio
        self.min_chars = min_chars
        self.meta_phrases = tuple(meta_phrases)
        self.params = _params(temperature, top_p, max_tokens)

    def messages(self, history: list[Exchange], question: str) -> list[Message]:
        """The ``mtr_polisher`` prompt for ``question`` asked after ``history``."""
        context = [{"question": h.question, "answer": cut(h.answer, self.context_answer_chars, at_word=False)}
                   for h in history]
        return load_prompt("mtr_polisher").render(history=context, question=question)

    def polish(self, history: list[Exchange], question: str) -> Rewrite:
        """The judged rewrite; LLMFailure propagates (the caller keeps the original)."""
        comp = self.llm.chat(self.messages(history, question), self.params)
        text = _unquote(clean_question(strip_reasoning(comp.text)))
        reason = rejection(question, text, max_ratio=self.max_ratio, min_chars=self.min_chars,
                           meta_phrases=self.meta_phrases)
        return Rewrite(text=question if reason else text, status=reason or "rewritten",
                       prompt_tokens=comp.usage.prompt_tokens, completion_tokens=comp.usage.completion_tokens)
