"""D&V stage ``turns`` (RECOR section 3.2.2-3.2.3, appendices C.4-C.7 and F): one conversational turn per
verified aspect, each with its gold documents and retrieval reasoning, then the conversation-level checks.

``profile`` picks the readings where the paper leaves a rule open: ``authors`` (default; the authors'
``pipeline/generate_bright.py``) or ``convrag`` (our earlier readings, kept to reproduce earlier runs). For each
aspect, in the order the ``aspects`` stage fixed, until ``max_turns`` turns are made, :class:`Turns` runs its steps
(fact overlap, sub-question and answerability, retrieval reasoning, document scoring and gold selection, user query
and grounded answer, distinctness from the kept turns). Every call goes through
:func:`convrag.synthesis.recor.common.ask`: a failing check is fed back and re-asked, a reply that never passes
rejects the turn, counted by why; a reply of a writing step cut off at max_tokens is no reading.

Kept turns are numbered 1, 2, ...; fewer than ``min_turns`` drops the item, and so does no document diversity
across turns (``required = min(min_distinct_documents, candidates)`` >= 2 documents over all turns, and not every
turn the same gold set). A call that fails after the LLM layer's retries drops the item.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

from convrag.core.errors import ConvragError
from convrag.llm import LLM, UnparsableReply
from convrag.synthesis.recor.common import (
    Drop,
    DVStage,
    Outcome,
    Tokens,
    ask,
    check_profile,
    doc_labels,
    documents_field,
    sampling,
    whole,
)
from convrag.synthesis.recor.turn_agents import (
    AnswerReply,
    Checker,
    DiversityReply,
    GuidanceReply,
    QueryReply,
    ReasoningReply,
    SubQuestionReply,
    answer_check,
    guidance_check,
    opener,
    query_check,
    reasoning_check,
    scores_check,
    scores_schema,
    squash,
    subquestion_check,
)
from convrag.synthesis.recor.turn_checks import (
    DEFAULT_THRESHOLD,
    JUDGE_ABOVE,
    STAGE,
    AnswerabilityReply,
    FactOverlapReply,
    document_diversity,
    key_facts,
    lexical_distinctness,
    score_rows,
    select_gold,
    value_kind,
)

__all__ = ["Turns", "document_diversity", "key_facts", "parse_sentences", "value_kind"]

M = TypeVar("M", bound=BaseModel)
#: completion tokens allowed per rated document in the scoring reply (when more than ``max_tokens`` in all)
SCORE_TOKENS = 120
#: facts per side shown to the fact-overlap judge (the authors' cut)
OVERLAP_FACTS = 8


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
    """Sub-questions, document scoring, user queries, grounded answers, turn checks and retrieval reasoning per
    aspect, then the conversation-level checks (module docstring). The steps of one turn:

    0. **Fact overlap** (``authors``, from the second kept turn; ``dv_fact_overlap``): an LLM rates 0..1 how much
       the aspect's first 8 facts say what the first 8 facts of the kept turns said (the authors' method, not an
       embedding); ``> max_fact_overlap`` (0.80) rejects the turn.
    1. **Sub-question** (``dv_subquestion``): the item's query and reasoning, the aspect, its verified facts and the
       earlier sub-questions; empty or repeated -> re-ask. ``authors``: then **answerability**
       (``dv_answerability``): the sub-question, the facts and every candidate document; ``coverage_score <
       min_answerability`` (0.40) asks a new sub-question (the rejected ones shown), up to ``subquestion_attempts``
       (4) in all, else the turn is rejected.
    2. **Retrieval reasoning**. ``authors``: written now, before scoring (``dv_retrieval_guidance``), from the
       item's query and reasoning, the sub-question and the facts only, never a document's text; it is the turn's
       ``subquestion_reasoning`` and the scorer's guidance. ``convrag``: written last (step 6).
    3. **Document scoring** (``dv_doc_scores``): the sub-question, the guidance (``convrag``: the item's
       reasoning), the facts and the item's first ``max_candidates`` documents (``doc_chars`` characters each)
       rated 0..10 on four criteria; the score is ours (:func:`~convrag.synthesis.recor.turn_agents.document_score`).
       Gold documents: :func:`~convrag.synthesis.recor.turn_checks.select_gold` (``authors``: ``>= max(threshold,
       0.6 x best)``, threshold 4.0, none -> the best alone; ``convrag``: ``>= threshold``, 5.0, none -> turn
       rejected). Both give appendix C.4's worked selection.
    4. **User query** (``dv_query_first`` / ``dv_query_followup``) and **grounded answer** (``dv_answer``, only the
       gold documents' text), with the form checks (fewer than ``query_words`` words, a new opener;
       ``answer_sentences`` sentences, no meta reference).
    5. **Distinct from earlier turns**. ``authors``: the lexical rules of
       :func:`~convrag.synthesis.recor.turn_checks.lexical_distinctness` against every kept turn, then, from the
       third turn on and only when the word similarity exceeds 0.25, the LLM judge (``dv_turn_diversity``); a
       failure asks query and answer again with the reason appended to the sub-question, ``diversity_retries`` (1)
       times, then rejects the turn. ``convrag``: the LLM judge from the second turn on; ``adds_value`` false
       rejects the turn.
    6. ``convrag`` only: the **retrieval reasoning annotation** (``dv_retrieval_reasoning``), written with the
       selected and the other documents in view.

    ``enforce_form`` false keeps (and counts) replies that fail the form checks of the writing steps: for
    inspecting a weak model, never for a release.
    """

    name = STAGE
    upstream = "facts"

    def __init__(self, *, profile: str = "authors", threshold: float | None = None, max_turns: int = 12,
                 min_turns: int = 3, max_candidates: int = 10, doc_chars: int = 2000, query_words: int = 20,
                 history_turns: int = 3, min_distinct_documents: int = 2, enforce_form: bool = True,
                 answer_sentences: str | Sequence[int] = "2-4", min_answerability: float = 0.4,
                 subquestion_attempts: int = 4, max_fact_overlap: float = 0.8, diversity_retries: int = 1,
                 temperature: float = 0.7, judge_temperature: float = 0.0, max_tokens: int = 1024,
                 llm: str | None = None, concurrency: int = 8, shard_size: int = 32) -> None:
        super().__init__(llm=llm, concurrency=concurrency, shard_size=shard_size)
        self.profile = check_profile(profile)
        threshold = DEFAULT_THRESHOLD[self.profile] if threshold is None else threshold
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold <= 10:
            raise ConvragError(f"threshold must be a number from 0 to 10 (the score's scale), got {threshold!r}")
        for name, value, low in (("max_turns", max_turns, 1), ("min_turns", min_turns, 1),
                                 ("max_candidates", max_candidates, 1), ("doc_chars", doc_chars, 50),
                                 ("query_words", query_words, 2), ("history_turns", history_turns, 1),
                                 ("max_tokens", max_tokens, 16), ("min_distinct_documents", min_distinct_documents, 1),
                                 ("subquestion_attempts", subquestion_attempts, 1),
                                 ("diversity_retries", diversity_retries, 0)):
            _whole(name, value, low)
        if min_turns > max_turns:
            raise ConvragError(f"min_turns ({min_turns}) must not exceed max_turns ({max_turns})")
        for name, value, high in (("temperature", temperature, 2), ("judge_temperature", judge_temperature, 2),
                                  ("min_answerability", min_answerability, 1),
                                  ("max_fact_overlap", max_fact_overlap, 1)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= high:
                raise ConvragError(f"{name} must be a number from 0 to {high}, got {value!r}")
        self.threshold = float(threshold)
        self.max_turns, self.min_turns, self.max_candidates = max_turns, min_turns, max_candidates
        self.doc_chars, self.query_words, self.history_turns = doc_chars, query_words, history_turns
        self.answer_sentences = parse_sentences(answer_sentences)
        if not isinstance(enforce_form, bool):
            raise ConvragError(f"enforce_form must be true or false, got {enforce_form!r}")
        self.enforce_form = enforce_form
        self.min_answerability, self.max_fact_overlap = float(min_answerability), float(max_fact_overlap)
        self.subquestion_attempts, self.diversity_retries = subquestion_attempts, diversity_retries
        self.temperature, self.judge_temperature = float(temperature), float(judge_temperature)
        self.max_tokens, self.min_distinct_documents = max_tokens, min_distinct_documents

    @property
    def authors(self) -> bool:
        return self.profile == "authors"

    def params_extra(self) -> dict[str, Any]:
        low, high = self.answer_sentences
        params = {"profile": self.profile, "threshold": self.threshold, "max_turns": self.max_turns,
                  "min_turns": self.min_turns, "max_candidates": self.max_candidates, "doc_chars": self.doc_chars,
                  "query_words": self.query_words, "history_turns": self.history_turns,
                  "answer_sentences": f"{low}-{high}", "enforce_form": self.enforce_form,
                  "temperature": self.temperature, "judge_temperature": self.judge_temperature,
                  "max_tokens": self.max_tokens, "min_distinct_documents": self.min_distinct_documents}
        if self.authors:
            params.update(min_answerability=self.min_answerability, subquestion_attempts=self.subquestion_attempts,
                          max_fact_overlap=self.max_fact_overlap, diversity_retries=self.diversity_retries)
        return params

    def item_cost(self) -> tuple[int, int, int]:
        """About five turns of six to eight calls; three or four of them show documents (scoring: all)."""
        docs = min(self.doc_chars, 1500)
        calls, shown = (40, 5 * (4 + 4 + 2 + 1)) if self.authors else (30, 5 * (4 + 2 + 1))
        return calls, calls * 1500 + shown * docs, calls * 400

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
        checks: dict[str, Any] = {}
        if self.authors and turns:
            checks["fact_overlap"] = self._fact_overlap(facts, turns, llm, tokens)
        sub_question = self._sub_question(item, aspect, facts, shown, turns, llm, tokens, counts, checks)
        guidance = self._guidance(item, sub_question, facts, llm, tokens, counts) if self.authors else None
        checker = Checker()
        scored = self._ask("document scores", llm, "dv_doc_scores", {
            "sub_question": sub_question, "facts": facts, "documents": shown,
            "reasoning": squash(guidance.retrieval_guidance) if guidance else item.get("reasoning") or ""},
            scores_schema(len(documents)), tokens, scores_check(doc_labels(documents), checker), checker,
            judge=True, max_tokens=max(self.max_tokens, SCORE_TOKENS * len(documents)))
        doc_scores = score_rows(scored, documents, counts)
        gold, selection = select_gold(doc_scores, self.profile, self.threshold)
        if not gold:
            raise _Rejected("no document above threshold")
        if selection["fallback"]:
            counts[f"{STAGE}: gold fallback: best document alone (none reached the cut)"] += 1
        for row in doc_scores:
            row["selected"] = row["doc_id"] in gold
        text_of = {str(d["doc_id"]): s["text"] for d, s in zip(documents, shown, strict=True)}
        query, answer = self._exchange(item, sub_question, [text_of[g] for g in gold], turns, llm, tokens, counts)
        if guidance is None:
            label_of = {str(d["doc_id"]): s for d, s in zip(documents, shown, strict=True)}
            checker = Checker(self.enforce_form)
            annotation: ReasoningReply | GuidanceReply = self._ask("retrieval reasoning", llm,
                                                                   "dv_retrieval_reasoning", {
                "query": query, "sub_question": sub_question, "aspect_name": aspect["name"], "facts": facts,
                "selected": [label_of[g] for g in gold],
                "others": [s for d, s in zip(documents, shown, strict=True) if str(d["doc_id"]) not in gold]},
                ReasoningReply, tokens, reasoning_check(checker), checker)
            self._kept(checker, "retrieval reasoning", counts)
            reasoning = annotation.reasoning
        else:
            annotation, reasoning = guidance, guidance.retrieval_guidance
        return {"turn": len(turns) + 1, "aspect": aspect["name"], "sub_question": sub_question, "query": query,
                "answer": answer, "facts": facts, "gold_doc_ids": gold, "doc_scores": doc_scores,
                "gold_selection": selection, **checks,
                "subquestion_reasoning": squash(reasoning),
                "subquestion_reasoning_metadata": {
                    "target_information": squash(annotation.target_information),
                    "relevance_signals": [squash(s) for s in annotation.relevance_signals],
                    "irrelevance_signals": [squash(s) for s in annotation.irrelevance_signals]}}

    # -- the steps ----------------------------------------------------------------------------------------------
    def _fact_overlap(self, facts: list[str], turns: list[dict[str, Any]], llm: LLM, tokens: Tokens) -> float:
        """Step 0: the judged similarity of ``facts`` to the kept turns' facts; above the limit rejects the turn."""
        earlier = [f for t in turns for f in t.get("facts") or []]
        if not facts or not earlier:
            return 0.0
        reply = self._ask("fact overlap", llm, "dv_fact_overlap", {
            "facts": facts[:OVERLAP_FACTS], "earlier": earlier[:OVERLAP_FACTS]}, FactOverlapReply, tokens, judge=True)
        if reply.similarity > self.max_fact_overlap:
            raise _Rejected(f"facts overlap earlier turns (similarity > {self.max_fact_overlap:g})")
        return reply.similarity

    def _sub_question(self, item: dict[str, Any], aspect: dict[str, Any], facts: list[str],
                      shown: list[dict[str, str]], turns: list[dict[str, Any]], llm: LLM, tokens: Tokens,
                      counts: Counter[str], checks: dict[str, Any]) -> str:
        """Step 1: the sub-question (``authors``: one the documents can answer, or the turn is rejected)."""
        previous = [t["sub_question"] for t in turns]
        unanswerable: list[str] = []
        for _ in range(self.subquestion_attempts if self.authors else 1):
            checker = Checker()
            fields = {"query": item["query"], "reasoning": item.get("reasoning") or "", "aspect_name": aspect["name"],
                      "aspect_type": aspect.get("type") or "", "facts": facts, "previous": previous}
            reply = self._ask("sub-question", llm, "dv_subquestion", {**fields, "unanswerable": unanswerable},
                              SubQuestionReply, tokens, subquestion_check(previous + unanswerable, checker), checker)
            sub_question = squash(reply.sub_question)
            if not self.authors:
                return sub_question
            verdict = self._ask("answerability", llm, "dv_answerability", {
                "sub_question": sub_question, "facts": facts, "documents": shown}, AnswerabilityReply, tokens,
                judge=True)
            if verdict.coverage_score >= self.min_answerability:
                checks["answerability"] = verdict.coverage_score
                return sub_question
            counts[f"{STAGE}: sub-question asked again: documents cannot answer it"] += 1
            unanswerable.append(sub_question)
        raise _Rejected(f"no sub-question answerable from the documents in {self.subquestion_attempts} tries")

    def _guidance(self, item: dict[str, Any], sub_question: str, facts: list[str], llm: LLM, tokens: Tokens,
                  counts: Counter[str]) -> GuidanceReply:
        """Step 2 (``authors``): retrieval guidance from the query, reasoning, sub-question and facts only."""
        checker = Checker(self.enforce_form)
        reply = self._ask("retrieval reasoning", llm, "dv_retrieval_guidance", {
            "query": item["query"], "reasoning": item.get("reasoning") or "", "sub_question": sub_question,
            "facts": facts}, GuidanceReply, tokens, guidance_check(checker), checker)
        self._kept(checker, "retrieval reasoning", counts)
        return reply

    def _exchange(self, item: dict[str, Any], sub_question: str, gold_texts: list[str], turns: list[dict[str, Any]],
                  llm: LLM, tokens: Tokens, counts: Counter[str]) -> tuple[str, str]:
        """Steps 4-5: the user's query and the grounded answer, distinct from the kept turns."""
        history = [{"query": t["query"], "answer": t["answer"]} for t in turns[-self.history_turns:]]
        used = [opener(t["query"]) for t in turns]
        low, high = self.answer_sentences
        asked, problem = sub_question, ""
        for attempt in range(1 + (self.diversity_retries if self.authors else 0)):
            if attempt:
                counts[f"{STAGE}: exchange asked again: {problem}"] += 1
                asked = f"{sub_question} (Ask about a different angle: the previous wording was rejected, {problem}.)"
            checker = Checker(self.enforce_form)
            check = query_check(self.query_words, used, checker)
            if turns:
                fields = {"topic": item["query"], "history": history, "sub_question": asked, "openers": used,
                          "max_words": self.query_words}
                reply = self._ask("query", llm, "dv_query_followup", fields, QueryReply, tokens, check, checker)
            else:
                fields = {"topic": item["query"], "sub_question": asked, "max_words": self.query_words}
                reply = self._ask("query", llm, "dv_query_first", fields, QueryReply, tokens, check, checker)
            query = squash(reply.conversational_query)
            self._kept(checker, "query", counts)
            checker = Checker(self.enforce_form)
            answer = squash(self._ask("answer", llm, "dv_answer", {
                "history": history, "query": query, "documents": gold_texts, "min_sentences": low,
                "max_sentences": high}, AnswerReply, tokens, answer_check(low, high, checker), checker).answer)
            self._kept(checker, "answer", counts)
            problem = self._distinct(query, answer, gold_texts, turns, history, llm, tokens)
            if not problem:
                return query, answer
        raise _Rejected(problem)

    def _distinct(self, query: str, answer: str, gold_texts: list[str], turns: list[dict[str, Any]],
                  history: list[dict[str, str]], llm: LLM, tokens: Tokens) -> str:
        """Step 5: why the new exchange is not distinct from the kept turns (``""``: it is)."""
        if not turns:
            return ""
        similarity = 1.0
        if self.authors:
            problem, similarity = lexical_distinctness(query, answer, turns, " ".join(gold_texts))
            if problem:
                return f"not distinct: {problem}"
            if len(turns) < 2:
                return ""
        if similarity <= JUDGE_ABOVE:
            return ""
        verdict = self._ask("diversity", llm, "dv_turn_diversity", {"history": history, "answer": answer},
                            DiversityReply, tokens, judge=True)
        return "" if verdict.adds_value else f"adds no value ({value_kind(verdict.value_type)})"
