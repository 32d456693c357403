"""The generator: one ``rag_answer`` prompt per item, sent through the LLM layer with bounded concurrency.

* Passages are cut to ``passage_chars`` characters each (at a word boundary where one is near, marked `` ...``).
* The history keeps the most recent messages whose texts fit in ``history_chars`` characters (older ones are
  dropped; a single newest message longer than the budget keeps its end). The current question is never cut.
* Sampling: greedy (temperature 0), ``max_tokens`` (default 300), seed 0. Reasoning before a ``</think>`` tag is
  removed from the reply (:func:`convrag.llm.replies.strip_reasoning`).
* An item gets no answer (listed in ``GenerationResult.failures`` with the reason, counted by kind, never filled in)
  when its call fails after the LLM layer's retries (``failed call``), its reply is empty or white space only
  (``empty reply``), or nothing is left after the reasoning (``reasoning-only reply``: a ``<think>`` block never
  closed, or nothing after ``</think>``; the reason says when the reply was cut at ``max_tokens``). No re-ask: at
  temperature 0 (and through the cache) the same prompt gives the same reply; a rerun needs another model or a
  larger ``max_tokens``. Output lines: :func:`mtrag_line` (MTRAG's official submission format), :func:`judge_line`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from convrag.generate.tasks import GenItem
from convrag.llm import LLM, Completion, LLMError, Message, RunReport, SamplingParams, load_prompt, run_batch

PROMPT = "rag_answer"
DEFAULT_MAX_TOKENS = 300
DEFAULT_PASSAGE_CHARS = 1500
DEFAULT_HISTORY_CHARS = 3000
CUT_MARK = " ..."


def cut(text: str, budget: int) -> str:
    """``text`` stripped, or its first ``budget`` characters (back to the last space in the final fifth, if any)
    followed by `` ...`` when it is longer."""
    text = text.strip()
    if len(text) <= budget:
        return text
    head = text[:budget]
    space = head.rfind(" ")
    if space >= budget * 0.8:
        head = head[:space]
    return head.rstrip() + CUT_MARK


def fit_history(history: Sequence[tuple[str, str]], budget: int) -> list[dict[str, str]]:
    """The most recent messages of ``history`` whose texts fit in ``budget`` characters, as ``{role, content}``;
    when even the newest one does not fit, its last ``budget`` characters (marked ``... ``)."""
    kept: list[dict[str, str]] = []
    used = 0
    for role, text in reversed([(r, t.strip()) for r, t in history if t.strip()]):
        if used + len(text) > budget:
            if not kept and budget > 0:
                kept.append({"role": role, "content": "... " + text[-budget:].lstrip()})
            break
        kept.append({"role": role, "content": text})
        used += len(text)
    return kept[::-1]


def render_prompt(item: GenItem, passage_chars: int = DEFAULT_PASSAGE_CHARS,
                  history_chars: int = DEFAULT_HISTORY_CHARS, prompt: str = PROMPT) -> list[Message]:
    """The chat messages for ``item``: the ``prompt`` template with its question, fitted history and cut passages."""
    passages = [{"number": n, "title": p.title.strip(), "text": cut(p.text, passage_chars)}
                for n, p in enumerate(item.passages, start=1)]  # fmt: skip
    return load_prompt(prompt).render(question=item.question.strip(), history=fit_history(item.history, history_chars),
                                      passages=passages)  # fmt: skip


#: kinds of item without an answer: (singular, plural) as counts are written
FAILED_CALL = ("failed call", "failed calls")
EMPTY_REPLY = ("empty reply", "empty replies")
REASONING_ONLY = ("reasoning-only reply", "reasoning-only replies")
KINDS = (FAILED_CALL, EMPTY_REPLY, REASONING_ONLY)


class NoAnswer(Exception):
    """A reply that holds no answer; ``kind`` is :data:`EMPTY_REPLY` or :data:`REASONING_ONLY`."""

    def __init__(self, kind: tuple[str, str], reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


@dataclass
class GenerationResult:
    """``answers``: task id -> answer text (never empty); ``failures``: task id -> why it has no answer;
    ``kinds``: task id -> the singular name of its kind (see :data:`KINDS`); ``report``: the LLM's run report."""

    answers: dict[str, str] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    report: RunReport | None = None

    def counts(self) -> dict[str, int]:
        """Singular kind name -> number of items without an answer of that kind (kinds with none left out)."""
        found = list(self.kinds.values())
        return {one: found.count(one) for one, _ in KINDS if one in found}

    def describe_counts(self) -> str:
        """The counts as words, e.g. ``12 empty replies, 1 failed call``."""
        plural = dict(KINDS)
        return ", ".join(f"{n} {kind if n == 1 else plural[kind]}" for kind, n in self.counts().items())


#: the prompt ends with "Answer:"; a model that echoes the label (optionally bold) starts its reply with it
_ANSWER_LABEL = re.compile(r"^\**\s*answer\s*\**\s*:\s*\**", re.I)


def answer_text(completion: Completion, max_tokens: int) -> str:
    """The answer in a reply: the text after the reasoning, a leading echoed "Answer:" label removed, stripped;
    :class:`NoAnswer` when nothing is left."""
    from convrag.llm.replies import strip_reasoning

    text = _ANSWER_LABEL.sub("", strip_reasoning(completion.text).strip(), count=1).strip()
    if text:
        return text
    if not completion.text.strip():
        raise NoAnswer(EMPTY_REPLY, "empty reply: the model returned no text" if not completion.text
                       else "empty reply: the model returned only white space")  # fmt: skip
    cut_off = completion.finish_reason == "length"
    raise NoAnswer(REASONING_ONLY, "reasoning-only reply: nothing after the reasoning (</think>)"
                   + (f"; the reply was cut at max_tokens {max_tokens} (raise --max-tokens)" if cut_off else ""))


def generate_answers(items: Sequence[GenItem], llm: LLM, *, max_tokens: int = DEFAULT_MAX_TOKENS,
                     temperature: float = 0.0, seed: int = 0, passage_chars: int = DEFAULT_PASSAGE_CHARS,
                     history_chars: int = DEFAULT_HISTORY_CHARS, concurrency: int = 8, progress: bool = False,
                     desc: str = "generate", prompt: str = PROMPT) -> GenerationResult:
    """Answer every item with ``llm`` (cached: a rerun repeats no call), ``concurrency`` calls in flight at once,
    each asked with the ``prompt`` template (default ``rag_answer``; RECOR's authors' profile: ``gen_recor_answer``)."""
    from tqdm.auto import tqdm

    params = SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed)
    prompts = [render_prompt(item, passage_chars, history_chars, prompt) for item in items]

    def answer(i: int) -> str:
        return answer_text(llm.chat(prompts[i], params), max_tokens)

    bar = tqdm(total=len(items), desc=desc, unit="call", disable=not progress)
    try:
        batch = run_batch(range(len(items)), answer, concurrency, catch=(LLMError, NoAnswer),
                          on_result=lambda i, res, err: bar.update(1))  # fmt: skip
    finally:
        bar.close()
    result = GenerationResult(report=llm.report)
    for i, item in enumerate(items):
        error = batch.errors.get(i)
        if isinstance(error, NoAnswer):
            result.failures[item.task_id], result.kinds[item.task_id] = str(error), error.kind[0]
        elif i in batch.failures:
            result.failures[item.task_id], result.kinds[item.task_id] = batch.failures[i], FAILED_CALL[0]
        else:
            result.answers[item.task_id] = str(batch.results[i])
    return result


def _contexts(item: GenItem) -> list[dict[str, Any]]:
    return [{"document_id": p.document_id, "score": p.score, "text": p.text} for p in item.passages]


def mtrag_line(item: GenItem, answer: str, mode: str) -> dict[str, Any]:
    """An official MTRAG submission line: ``task_id``, ``predictions``; ``contexts`` (<= 10, Subtask C) in
    ``retrieved`` mode, ``[]`` in ``none`` mode, absent in ``oracle`` mode (Subtask B: the reference passages)."""
    line: dict[str, Any] = {"task_id": item.task_id, "predictions": [{"text": answer}]}
    if mode == "retrieved":
        line["contexts"] = _contexts(item)
    elif mode == "none":
        line["contexts"] = []
    return line


def judge_line(item: GenItem, answer: str, mode: str, generator: str) -> dict[str, Any]:
    """One turn's line for the judge-scored benchmarks (RECOR, MTR-Bench): ids, position, subset, mode, generator,
    the passages shown (``contexts``; gold ones score 1.0) and the answer."""
    return {"task_id": item.task_id, "conversation_id": item.conversation_id, "turn": item.turn,
            "domain": item.domain, "mode": mode, "generator": generator,
            "contexts": _contexts(item) if mode != "none" else [], "predictions": [{"text": answer}]}  # fmt: skip
