"""D&V stage ``turns`` (RECOR section 3.2.2-3.2.3, appendices C.4-C.7 and F): one conversational turn per
verified aspect, each with its gold documents and retrieval reasoning, then the conversation-level checks.

For each aspect of the item, in the conversation order the ``aspects`` stage fixed, until ``max_turns`` turns
are made (every LLM call goes through :func:`convrag.synthesis.dv_common.ask`; a check that fails is fed back
and the model re-asked, and a reply that never passes rejects the turn, counted by why; a reply of steps 1, 3, 4
or 6 cut off at max_tokens is no reading, as its text would be kept cut):

1. **Sub-question** (prompt ``dv_subquestion``): the item's query and reasoning, the aspect's name and type,
   its verified facts and the sub-questions of the turns kept so far. Empty or repeated -> re-ask.
2. **Document scoring** (``dv_doc_scores``): the sub-question, the item's reasoning (the prompt's retrieval
   reasoning), the key facts and the item's first ``max_candidates`` documents (never its hard negatives) as
   ``doc_0``, ``doc_1``, ... (each cut to ``doc_chars`` characters) rated 0..10 on support, completeness,
   clarity and misleading content; the reply holds at most one entry per candidate and may use
   ``max(max_tokens, 120 x candidates)`` tokens; an out-of-range or non-integer rating, more entries than
   candidates, or none naming a candidate -> re-ask. The score is always ours,
   :func:`~convrag.synthesis.dv_turn_agents.document_score` (the reply's ``final_score`` is ignored). A
   candidate the reply leaves out scores nothing and is counted; an unknown or repeated label is ignored and
   counted. The turn's gold documents are those scoring ``>= threshold``, best first (ties in document order);
   none -> the turn is rejected. ``threshold`` defaults to 5.0: the midpoint of the 0..10 scale, so a gold
   document must on balance support the sub-question; it reproduces appendix C.4, where 7.15 and 5.40 are
   selected and 3.65 is not (the paper does not state its threshold).
3. **User query**: with no turn kept yet ``dv_query_first`` (a self-contained opening that names the topic),
   else ``dv_query_followup`` (the last ``history_turns`` exchanges and the openers used so far). Rejected and
   re-asked when empty, of ``query_words`` words or more, or opening with the first two words of an earlier
   query (:func:`~convrag.synthesis.dv_turn_agents.opener`).
4. **Grounded answer** (``dv_answer``): the recent history, the query and only the gold documents' text.
   Re-asked unless it has ``answer_sentences`` sentences and no meta reference ("document", "source",
   "according to", ...).
5. **Turn diversity** (``dv_turn_diversity``, from the second kept turn on): the recent exchanges against the
   new answer; ``adds_value`` false rejects the turn, counted with the reply's ``value_type``.
6. **Retrieval reasoning** (``dv_retrieval_reasoning``, our prompt for appendix C.7's annotation): one
   sentence on which documents to retrieve and which to avoid, plus ``{target_information, relevance_signals
   (2-4 phrases), irrelevance_signals (1-3 phrases)}``.

``enforce_form`` (default true): the form checks of steps 3, 4 and 6 (length, opener, sentence count, meta
reference, signal lists) re-ask and reject. Set false, a reply that fails them is kept and counted
(``turns: kept with <step> <problem> (enforce_form off)``): for inspecting what a weak model writes, never
for a release.

A rejected turn leaves no gap: kept turns are numbered 1, 2, ... Conversation level: fewer than ``min_turns``
turns -> the item is dropped. Document diversity across turns (section 3.2.3): with ``required =
min(min_distinct_documents, candidates)`` >= 2, the turns' gold documents must together cover at least
``required`` documents, and when there are two or more turns not every turn may have the same gold set, else
the item is dropped (``min_distinct_documents=1`` turns the check off; an item with one candidate cannot
vary). A call that fails after the LLM layer's retries drops the item.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

from convrag.errors import ConvragError
from convrag.llm import LLM, UnparsableReply
from convrag.synthesis.dv_common import (
    Drop,
    DVStage,
    Outcome,
    Tokens,
    ask,
    doc_labels,
    documents_field,
    label_to_id,
    sampling,
    whole,
)
from convrag.synthesis.dv_turn_agents import (
    VALUE_TYPES,
    AnswerReply,
    Checker,
    DiversityReply,
    DocScoresReply,
    QueryReply,
    ReasoningReply,
    SubQuestionReply,
    answer_check,
    document_score,
    opener,
    query_check,
    reasoning_check,
    scores_check,
    scores_schema,
    select,
    squash,
    subquestion_check,
)

M = TypeVar("M", bound=BaseModel)
STAGE = "turns"
#: completion tokens allowed per rated document in the scoring reply (when more than ``max_tokens`` in all)
SCORE_TOKENS = 120


class _Rejected(Exception):  # noqa: N818 - control flow inside one item
    """The turn in progress is rejected for ``reason`` (counted as ``turns: turn rejected: <reason>``)."""


def parse_sentences(value: str | Sequence[int]) -> tuple[int, int]:
    """``"2-4"`` or ``(2, 4)`` -> ``(2, 4)``; a clear error for anything else."""
    try:
        parts = [int(p) for p in value.split("-")] if isinstance(value, str) else [int(p) for p in value]
    except (TypeError, ValueError):
        parts = []
    if len(parts) != 2 or not 1 <= parts[0] <= parts[1]:
        raise ConvragError(f"answer_sentences must be 'LOW-HIGH' or two whole numbers with 1 <= LOW <= HIGH, "
                           f"got {value!r}")
    return parts[0], parts[1]


def _whole(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConvragError(f"{name} must be a whole number >= {low}, got {value!r}")


class Turns(DVStage):
    """Sub-questions, document scoring, user queries, grounded answers, diversity checks and retrieval reasoning
    per aspect, then the conversation-level checks (module docstring)."""

    name = STAGE
    upstream = "facts"

    def __init__(self, *, threshold: float = 5.0, max_turns: int = 12, min_turns: int = 3, max_candidates: int = 10,
                 doc_chars: int = 2000, query_words: int = 20, history_turns: int = 3, min_distinct_documents: int = 2,
                 enforce_form: bool = True,
                 answer_sentences: str | Sequence[int] = "2-4", temperature: float = 0.7,
                 judge_temperature: float = 0.0, max_tokens: int = 1024, llm: str | None = None,
                 concurrency: int = 8, shard_size: int = 32) -> None:
        super().__init__(llm=llm, concurrency=concurrency, shard_size=shard_size)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold <= 10:
            raise ConvragError(f"threshold must be a number from 0 to 10 (the score's scale), got {threshold!r}")
        for name, value, low in (("max_turns", max_turns, 1), ("min_turns", min_turns, 1),
                                 ("max_candidates", max_candidates, 1), ("doc_chars", doc_chars, 50),
                                 ("query_words", query_words, 2), ("history_turns", history_turns, 1),
                                 ("max_tokens", max_tokens, 16), ("min_distinct_documents", min_distinct_documents, 1)):
            _whole(name, value, low)
        if min_turns > max_turns:
            raise ConvragError(f"min_turns ({min_turns}) must not exceed max_turns ({max_turns})")
        for name, value in (("temperature", temperature), ("judge_temperature", judge_temperature)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 2:
                raise ConvragError(f"{name} must be a number from 0 to 2, got {value!r}")
        self.threshold = float(threshold)
        self.max_turns, self.min_turns, self.max_candidates = max_turns, min_turns, max_candidates
        self.doc_chars, self.query_words, self.history_turns = doc_chars, query_words, history_turns
        self.answer_sentences = parse_sentences(answer_sentences)
        if not isinstance(enforce_form, bool):
            raise ConvragError(f"enforce_form must be true or false, got {enforce_form!r}")
        self.enforce_form = enforce_form
        self.temperature, self.judge_temperature = float(temperature), float(judge_temperature)
        self.max_tokens, self.min_distinct_documents = max_tokens, min_distinct_documents

    def params_extra(self) -> dict[str, Any]:
        low, high = self.answer_sentences
        return {"threshold": self.threshold, "max_turns": self.max_turns, "min_turns": self.min_turns,
                "max_candidates": self.max_candidates, "doc_chars": self.doc_chars, "query_words": self.query_words,
                "history_turns": self.history_turns, "answer_sentences": f"{low}-{high}",
                "enforce_form": self.enforce_form,
                "temperature": self.temperature, "judge_temperature": self.judge_temperature,
                "max_tokens": self.max_tokens, "min_distinct_documents": self.min_distinct_documents}

    def item_cost(self) -> tuple[int, int, int]:
        """About five turns of six calls; three of them show documents (scoring: all candidates)."""
        docs = min(self.doc_chars, 1500)
        return 30, 30 * 1500 + 5 * (4 + 2 + 1) * docs, 30 * 400

    # -- one item ---------------------------------------------------------------------------------------------
    def handle(self, item: dict[str, Any], llm: LLM, tokens: Tokens) -> Outcome:
        counts: Counter[str] = Counter()
        documents = list(item["documents"])[: self.max_candidates]
        shown = documents_field(documents, self.doc_chars)
        turns: list[dict[str, Any]] = []
        for aspect in item.get("aspects") or []:
            if len(turns) >= self.max_turns:
                break
            try:
                turns.append(self._turn(item, aspect, documents, shown, turns, llm, tokens, counts))
            except _Rejected as rejected:
                counts[f"{STAGE}: turn rejected: {rejected}"] += 1
        if len(turns) < self.min_turns:
            raise Drop(f"{STAGE}: fewer than {self.min_turns} turns", counts)
        if not document_diversity(turns, min(self.min_distinct_documents, len(documents))):
            raise Drop(f"{STAGE}: no document diversity across turns", counts)
        return Outcome({**item, "turns": turns}, counts=counts, tokens=tokens)

    def _ask(self, step: str, llm: LLM, prompt: str, fields: dict[str, Any], schema: type[M], tokens: Tokens,
             check: Callable[[M], str | None] | None = None, checker: Checker | None = None, *,
             judge: bool = False, max_tokens: int | None = None) -> M:
        params = sampling(self.judge_temperature if judge else self.temperature, max_tokens or self.max_tokens)
        try:
            return ask(llm, prompt, fields, schema, params, tokens, check=check, cut=None if judge else whole)
        except UnparsableReply:
            kind = (checker.last if checker is not None else "") or "unparsable"
            raise _Rejected(f"{step} {kind} after re-asks") from None

    @staticmethod
    def _kept(checker: Checker, step: str, counts: Counter[str]) -> None:
        """Count a reply kept although it failed its form check (only with ``enforce_form`` off)."""
        if checker.last and not checker.enforce:
            counts[f"turns: kept with {step} {checker.last} (enforce_form off)"] += 1

    def _turn(self, item: dict[str, Any], aspect: dict[str, Any], documents: list[dict[str, Any]],
              shown: list[dict[str, str]], turns: list[dict[str, Any]], llm: LLM, tokens: Tokens,
              counts: Counter[str]) -> dict[str, Any]:
        facts = key_facts(aspect)
        history = [{"query": t["query"], "answer": t["answer"]} for t in turns[-self.history_turns:]]
        # 1. sub-question
        checker = Checker()
        previous = [t["sub_question"] for t in turns]
        reply = self._ask("sub-question", llm, "dv_subquestion", {
            "query": item["query"], "reasoning": item.get("reasoning") or "", "aspect_name": aspect["name"],
            "aspect_type": aspect.get("type") or "", "facts": facts, "previous": previous},
            SubQuestionReply, tokens, subquestion_check(previous, checker), checker)
        sub_question = squash(reply.sub_question)
        # 2. document scoring and selection
        checker = Checker()
        labels = doc_labels(documents)
        scored = self._ask("document scores", llm, "dv_doc_scores", {
            "sub_question": sub_question, "reasoning": item.get("reasoning") or "", "facts": facts,
            "documents": shown}, scores_schema(len(documents)), tokens, scores_check(labels, checker), checker,
            judge=True,
            max_tokens=max(self.max_tokens, SCORE_TOKENS * len(documents)))
        doc_scores = score_rows(scored, documents, self.threshold, counts)
        gold = select(doc_scores, self.threshold)
        if not gold:
            raise _Rejected("no document above threshold")
        # 3. the user's query
        checker = Checker(self.enforce_form)
        used = [opener(t["query"]) for t in turns]
        check = query_check(self.query_words, used, checker)
        if turns:
            query_reply = self._ask("query", llm, "dv_query_followup", {
                "topic": item["query"], "history": history, "sub_question": sub_question, "openers": used,
                "max_words": self.query_words}, QueryReply, tokens, check, checker)
        else:
            query_reply = self._ask("query", llm, "dv_query_first", {
                "topic": item["query"], "sub_question": sub_question, "max_words": self.query_words},
                QueryReply, tokens, check, checker)
        query = squash(query_reply.conversational_query)
        self._kept(checker, "query", counts)
        # 4. grounded answer from the gold documents only
        checker = Checker(self.enforce_form)
        text_of = {str(d["doc_id"]): s["text"] for d, s in zip(documents, shown, strict=True)}
        low, high = self.answer_sentences
        answer = squash(self._ask("answer", llm, "dv_answer", {
            "history": history, "query": query, "documents": [text_of[g] for g in gold], "min_sentences": low,
            "max_sentences": high}, AnswerReply, tokens, answer_check(low, high, checker), checker).answer)
        self._kept(checker, "answer", counts)
        # 5. turn diversity (from the second kept turn on)
        if turns:
            verdict = self._ask("diversity", llm, "dv_turn_diversity", {"history": history, "answer": answer},
                                DiversityReply, tokens, judge=True)
            if not verdict.adds_value:
                raise _Rejected(f"adds no value ({value_kind(verdict.value_type)})")
        # 6. retrieval reasoning annotation
        checker = Checker(self.enforce_form)
        label_of = {str(d["doc_id"]): s for d, s in zip(documents, shown, strict=True)}
        reasoning = self._ask("retrieval reasoning", llm, "dv_retrieval_reasoning", {
            "query": query, "sub_question": sub_question, "aspect_name": aspect["name"], "facts": facts,
            "selected": [label_of[g] for g in gold],
            "others": [s for d, s in zip(documents, shown, strict=True) if str(d["doc_id"]) not in gold]},
            ReasoningReply, tokens, reasoning_check(checker), checker)
        self._kept(checker, "retrieval reasoning", counts)
        return {"turn": len(turns) + 1, "aspect": aspect["name"], "sub_question": sub_question, "query": query,
                "answer": answer, "gold_doc_ids": gold, "doc_scores": doc_scores,
                "subquestion_reasoning": squash(reasoning.reasoning),
                "subquestion_reasoning_metadata": {
                    "target_information": squash(reasoning.target_information),
                    "relevance_signals": [squash(s) for s in reasoning.relevance_signals],
                    "irrelevance_signals": [squash(s) for s in reasoning.irrelevance_signals]}}


def value_kind(value_type: str) -> str:
    """The diversity reply's ``value_type`` as counted: one of the prompt's types, else ``"other type"`` (``"no
    type"`` when blank)."""
    kind = squash(value_type).lower().replace(" ", "_")
    return kind if kind in VALUE_TYPES else ("other type" if kind else "no type")


def key_facts(aspect: dict[str, Any]) -> list[str]:
    """The aspect's verified facts (``supported`` true; all of them when none is marked)."""
    facts = [f for f in aspect.get("facts") or [] if str(f.get("fact") or "").strip()]
    verified = [f for f in facts if f.get("supported", True)]
    return [squash(f["fact"]) for f in (verified or facts)]


def score_rows(reply: DocScoresReply, documents: Sequence[dict[str, Any]], threshold: float,
               counts: Counter[str]) -> list[dict[str, Any]]:
    """One row per scored candidate, in document order: ``{doc_id, support, completeness, clarity, misleading,
    score, selected}``; unknown and repeated labels, and candidates the reply left out, are counted."""
    by_id: dict[str, Any] = {}
    for entry in reply.document_scores:
        doc_id = label_to_id(entry.doc_id, documents)
        if doc_id is None:
            counts[f"{STAGE}: unknown document label ignored"] += 1
        elif doc_id in by_id:
            counts[f"{STAGE}: repeated document score ignored"] += 1
        else:
            by_id[doc_id] = entry
    rows = []
    for doc in documents:
        entry = by_id.get(str(doc["doc_id"]))
        if entry is None:
            counts[f"{STAGE}: document not scored"] += 1
            continue
        score = document_score(entry.support_score, entry.completeness_score, entry.clarity_score,
                               entry.misleading_score)
        rows.append({"doc_id": str(doc["doc_id"]), "support": entry.support_score,
                     "completeness": entry.completeness_score, "clarity": entry.clarity_score,
                     "misleading": entry.misleading_score, "score": score, "selected": score >= threshold})
    return rows


def document_diversity(turns: Sequence[dict[str, Any]], required: int = 2) -> bool:
    """Section 3.2.3's document diversity across turns: true when ``required`` < 2 (nothing to vary), else when
    the turns' gold documents together cover at least ``required`` documents and, with two or more turns, not
    every turn has the same gold set."""
    if required < 2:
        return True
    distinct = {d for t in turns for d in t["gold_doc_ids"]}
    sets = {frozenset(t["gold_doc_ids"]) for t in turns}
    return len(distinct) >= required and (len(turns) < 2 or len(sets) >= 2)
