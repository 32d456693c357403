"""LLM judges of MTRAG generation scoring, all through ``convrag.llm``; replies are read by :mod:`.parsers`.

- IDK: does the reply say, fully or partly, that the information is missing? Official: the word the reply starts with
  (:func:`~.parsers.official_idk`); strict: its first alphabetic word (:func:`~.parsers.parse_idk`).
- Clarification (UNDERSPECIFIED tasks): does the reply ask for the missing information? JSON ``{decision,
  explanation}``; official: one call (0.5 when unreadable); strict: structured output, re-asked, else a parse failure.
- RB_llm: a 1-10 rating after RAD-Bench, divided by 10; official :func:`~.parsers.official_rating` (0.5 when
  unreadable or out of range), strict :func:`~.parsers.parse_rating`; several judges: the median of their values.
- RL_F: claims extracted from the answer (step 1; repeats count once) are checked against the passages in one call
  (step 2): supported / claims. No claims -> ``None`` (undefined: RAGAS returns NaN, the official mean skips it); no
  passages -> 0.0 without step 2. Official mode asks once per step, strict re-asks; unreadable -> ``None``, flagged.

``fallback``: a reply that could not be read (official mode uses the official default: 0.5, "unknown", undefined;
strict mode: None). ``call_failed``: the call failed after the client's retries (refused, timeout, HTTP error): None,
and the task must not be scored. :class:`~convrag.llm.EndpointUnreachable` (a dead endpoint) is not caught: it ends
the run. With several judges, IDK, clarification and RL_F use the first one; RB_llm asks all of them.
"""

from __future__ import annotations

import functools
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model, field_validator, model_validator

from convrag.llm import (
    LLM,
    EndpointUnreachable,
    LLMError,
    PromptError,
    PromptTemplate,
    UnparsableReply,
    get_llm,
    is_placeholder,
    load_prompt,
)
from convrag.llm.spec import REAL_MODEL_HINT, SPEC_ENV

from .parsers import (
    leading_word,
    official_clarification_read,
    official_idk,
    official_rating_read,
    official_rating_value,
    parse_idk,
    parse_rating,
    rating_value,
)

DEFAULT_PROMPTS = {
    "idk": "gen_idk", "clarification": "gen_clarification", "rb_llm": "gen_rb_llm",
    "faithfulness_claims": "gen_faithfulness_claims", "faithfulness_verdicts": "gen_faithfulness_verdicts",
}
# The fields each prompt may use; a replacement prompt must declare a subset of them.
PROMPT_FIELDS = {
    "idk": {"conversation", "response"}, "clarification": {"conversation", "response"},
    "rb_llm": {"previous_conversation", "question", "reference", "response", "passages"},
    "faithfulness_claims": {"question", "response"}, "faithfulness_verdicts": {"passages", "claims"},
}
DEFAULT_MAX_TOKENS = {"idk": 16, "clarification": 160, "rb_llm": 512, "faithfulness_claims": 384,
                      "faithfulness_verdicts": 512}
MAX_CLAIMS = 20

JudgeSpec = str | LLM


# --- prompts ----------------------------------------------------------------------------------------------------
def resolve_prompt(spec: str | PromptTemplate, role: str) -> PromptTemplate:
    """A prompt by name (on the ``load_prompt`` search path) or by path to a YAML file, checked for ``role``."""
    if isinstance(spec, PromptTemplate):
        template = spec
    elif spec.endswith((".yaml", ".yml")) or os.sep in spec or Path(spec).is_file():
        path = Path(spec).resolve()
        if not path.is_file():
            raise PromptError(f"{spec}: prompt file not found (for the {role} judge)")
        template = load_prompt(path.stem, dirs=[path.parent])
        if Path(template.source).resolve() != path:
            raise PromptError(f"{spec}: a file {template.source} of the same name shadows it; rename the prompt")
    else:
        template = load_prompt(spec)
    allowed = PROMPT_FIELDS[role]
    extra = set(template.fields) - allowed
    if extra:
        raise PromptError(f"prompt {template.name!r} ({template.source}) for the {role} judge declares fields "
                          f"{sorted(extra)}; it may use only {sorted(allowed)}")
    return template


def _render(template: PromptTemplate, values: Mapping[str, Any]) -> list[dict[str, str]]:
    used = set(template.fields) | set(template.optional)
    return template.render(**{k: v for k, v in values.items() if k in used})


def conversation_text(conversation: Sequence[Mapping[str, Any]]) -> str:
    """The conversation as ``speaker: text`` lines (how the official scripts show it to the judges)."""
    return "\n".join(f"{turn['speaker']}: {turn['text']}" for turn in conversation)


# --- outcomes ---------------------------------------------------------------------------------------------------
@dataclass
class IdkJudgement:
    """IDK judge: ``value`` 1 / 0.5 / 0 or None (unreadable or failed), the ``raw`` reply and the ``label`` read
    from it (official: the leading word, or ``"unknown"`` when the reply does not start with one)."""

    value: float | None
    raw: str | None
    label: str | None
    fallback: bool
    error: str | None = None
    call_failed: bool = False


@dataclass
class ClarificationJudgement:
    """Clarification judge: ``value`` 1 / 0 (official: 0.5 when unreadable; strict: None), decision, explanation."""

    value: float | None
    raw: str | None
    decision: str | None
    explanation: str | None
    fallback: bool
    error: str | None = None
    call_failed: bool = False


@dataclass
class RatingJudgement:
    """RB_llm: ``value`` = median of the judges' rating/10 (official: 0.5 for an unusable rating; None when a
    rating is unusable in strict mode or a call failed)."""

    value: float | None
    ratings: list[float | None]
    raw: list[str | None]
    judges: list[str]
    fallbacks: list[bool]
    errors: list[str | None] = field(default_factory=list)

    @property
    def fallback(self) -> bool:
        return any(self.fallbacks)

    @property
    def call_failed(self) -> bool:
        return any(self.errors)


@dataclass
class FaithfulnessJudgement:
    """RL_F: supported / total claims; ``value`` None when undefined (no claims), unreadable (``fallback``) or
    failed (``call_failed``)."""

    value: float | None
    claims: list[str]
    verdicts: list[bool]
    raw: dict[str, str | None]
    fallback: bool
    note: str | None = None
    error: str | None = None
    call_failed: bool = False

    @property
    def supported(self) -> int:
        return sum(self.verdicts)


def lower_keys(v: Any) -> Any:
    """A reply object with its keys lower-cased (``{"Decision": "Yes"}`` is read like ``{"decision": "Yes"}``)."""
    return {str(k).strip().lower(): x for k, x in v.items()} if isinstance(v, dict) else v


def _yes_no(v: Any) -> Any:
    """A yes / no label as models write it: any case, or a JSON boolean."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    return v.strip().lower() if isinstance(v, str) else v


class ClarificationReply(BaseModel):
    decision: Literal["yes", "no"]
    explanation: str = Field(default="", max_length=600)

    _keys = model_validator(mode="before")(lower_keys)
    _lower = field_validator("decision", mode="before")(_yes_no)


class ClaimVerdict(BaseModel):
    """RL_F's verdict on one claim."""

    reason: str = Field(default="", max_length=400)
    supported: Literal["yes", "no"]

    _keys = model_validator(mode="before")(lower_keys)
    _label = field_validator("supported", mode="before")(_yes_no)


_CLAIMS_SCHEMA = {"type": "object", "required": ["claims"], "properties": {
    "claims": {"type": "array", "maxItems": MAX_CLAIMS, "items": {"type": "string", "maxLength": 400}}}}


@functools.lru_cache(maxsize=64)
def _verdicts_schema(n: int) -> type[BaseModel]:
    """The verdicts reply for ``n`` claims: ``n`` :class:`ClaimVerdict` s in claim order (the schema says so; the
    count is checked by the caller, whose message is fed back on a re-ask)."""
    return create_model("ClaimVerdicts", verdicts=(list[ClaimVerdict], Field(
        json_schema_extra={"minItems": n, "maxItems": n})))


def unique_claims(items: Sequence[Any]) -> list[str]:
    """Non-empty claims in order, repeats (same words ignoring case and spacing) dropped."""
    seen: set[str] = set()
    out = []
    for item in items:
        text = " ".join(str(item).split())
        if text and text.lower() not in seen:
            seen.add(text.lower())
            out.append(text)
    return out


def _failure(exc: LLMError) -> tuple[str, bool]:
    """(error text, call_failed) of an LLM error: True for a failed call, False for replies that never parsed.
    A dead endpoint is re-raised: it ends the run."""
    if isinstance(exc, EndpointUnreachable):
        raise exc
    return f"{type(exc).__name__}: {exc}", not isinstance(exc, UnparsableReply)


# --- the judges ---------------------------------------------------------------------------------------------------
MODES = ("official", "strict")


NO_JUDGE = ("no judge chosen: judge-based scoring needs an explicit judge model; " + REAL_MODEL_HINT
            + "; or set $CONVRAG_LLM. 'default' selects the embedded SmolLM2-135M placeholder, which only shows that "
            "the plumbing works")


def resolve_judge(judge: JudgeSpec | Sequence[JudgeSpec] | None) -> JudgeSpec | Sequence[JudgeSpec]:
    """``judge`` itself, or ``$CONVRAG_LLM`` when None; an :class:`LLMError` saying how to choose one otherwise."""
    if judge is None:
        judge = os.environ.get(SPEC_ENV) or None
    if judge is None or (isinstance(judge, str) and not judge.strip()):
        raise LLMError(NO_JUDGE)
    return judge


def make_llms(judge: JudgeSpec | Sequence[JudgeSpec]) -> list[LLM]:
    """LLM objects for a spec string, an LLM, or a list of them (an ensemble)."""
    items = [judge] if isinstance(judge, (str, LLM)) else list(judge)
    if not items:
        raise LLMError("no judge given")
    return [j if isinstance(j, LLM) else get_llm(j) for j in items]


class GenerationJudges:
    """The four judges over one or several LLMs, with replaceable prompts (``prompts[role] = name or path``).

    ``mode``: ``official`` reads replies exactly as the official scripts do, one call per judgement and no
    re-ask; ``strict`` reads them our stricter way and re-asks structured judges (see :mod:`.parsers`).
    """

    def __init__(self, judge: JudgeSpec | Sequence[JudgeSpec],
                 prompts: Mapping[str, str | PromptTemplate] | None = None,
                 max_tokens: Mapping[str, int] | None = None, mode: str = "official") -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; use one of {MODES}")
        self.mode = mode
        self.llms = make_llms(judge)
        unknown = set(prompts or {}) - set(DEFAULT_PROMPTS)
        if unknown:
            raise PromptError(f"unknown judge prompt(s) {sorted(unknown)}; replaceable: {sorted(DEFAULT_PROMPTS)}")
        chosen = {**DEFAULT_PROMPTS, **(prompts or {})}
        self.prompts = {role: resolve_prompt(spec, role) for role, spec in chosen.items()}
        bad = set(max_tokens or {}) - set(DEFAULT_MAX_TOKENS)
        if bad:
            raise ValueError(f"unknown max_tokens key(s) {sorted(bad)}; use {sorted(DEFAULT_MAX_TOKENS)}")
        self.max_tokens = {**DEFAULT_MAX_TOKENS, **(max_tokens or {})}

    @property
    def primary(self) -> LLM:
        return self.llms[0]

    @property
    def attempts(self) -> int | None:
        """Replies per structured judgement: 1 in official mode (no re-ask), the client's setting in strict."""
        return 1 if self.mode == "official" else None

    def describe(self) -> dict[str, Any]:
        """Judge specs and models, whether they are the placeholder, prompt sources (stored with every result)."""
        return {"judges": [llm.spec for llm in self.llms],
                "models": [llm.backend.model for llm in self.llms],
                "placeholder": any(is_placeholder(llm) for llm in self.llms),
                "mode": self.mode,
                "prompts": {role: t.source for role, t in self.prompts.items()},
                "max_tokens": dict(self.max_tokens)}

    def idk(self, conversation: Sequence[Mapping[str, Any]], response: str) -> IdkJudgement:
        msgs = _render(self.prompts["idk"], {"conversation": conversation_text(conversation), "response": response})
        try:
            text = self.primary.chat(msgs, max_tokens=self.max_tokens["idk"]).text
        except LLMError as exc:
            return IdkJudgement(None, None, None, False, _failure(exc)[0], call_failed=True)
        if self.mode == "strict":
            value, label, failed = parse_idk(text)
            return IdkJudgement(value, text, label, failed)
        got, label = official_idk(text), leading_word(text)
        if got == "unknown":
            return IdkJudgement(None, text, "unknown", True)
        return IdkJudgement(float(got), text, label, label not in ("yes", "no", "partial"))

    def clarification(self, conversation: Sequence[Mapping[str, Any]], response: str) -> ClarificationJudgement:
        msgs = _render(self.prompts["clarification"],
                       {"conversation": conversation_text(conversation), "response": response})
        if self.mode == "official":
            try:
                text = self.primary.chat(msgs, max_tokens=self.max_tokens["clarification"]).text
            except LLMError as exc:
                return ClarificationJudgement(None, None, None, None, False, _failure(exc)[0], call_failed=True)
            value, parsed = official_clarification_read(text)
            decision = {1.0: "yes", 0.0: "no"}.get(value)
            explanation = parsed.get("explanation") if parsed else None
            return ClarificationJudgement(value, text, decision, explanation if isinstance(explanation, str) else None,
                                          decision is None)
        try:
            parsed = self.primary.structured(msgs, ClarificationReply, max_tokens=self.max_tokens["clarification"])
        except LLMError as exc:
            error, failed = _failure(exc)
            return ClarificationJudgement(None, getattr(exc, "last_text", None), None, None, not failed, error,
                                          call_failed=failed)
        reply = parsed.value
        return ClarificationJudgement(1.0 if reply.decision == "yes" else 0.0, parsed.text, reply.decision,
                                      reply.explanation, False)

    def rb_llm(self, conversation: Sequence[Mapping[str, Any]], reference: str, response: str,
               passages: Sequence[str]) -> RatingJudgement:
        values = {"previous_conversation": conversation_text(conversation[:-1]),
                  "question": str(conversation[-1]["text"]) if conversation else "",
                  "reference": reference, "response": response, "passages": list(passages)}
        msgs = _render(self.prompts["rb_llm"], values)
        out = RatingJudgement(None, [], [], [], [])
        scores: list[float | None] = []
        for llm in self.llms:
            out.judges.append(llm.spec)
            try:
                text: str | None = llm.chat(msgs, max_tokens=self.max_tokens["rb_llm"]).text
            except LLMError as exc:
                text, error = None, _failure(exc)[0]
            else:
                error = None
            if error is not None:
                rating, value, fallback = None, None, False
            elif self.mode == "strict":
                rating = parse_rating(text)
                value, fallback = rating_value(rating)
            else:
                rating = official_rating_read(text)
                value = official_rating_value(rating)
                fallback = rating is None or not 0 < rating / 10 <= 1
            out.ratings.append(rating)
            out.raw.append(text)
            out.fallbacks.append(fallback)
            out.errors.append(error)
            scores.append(value)
        if all(v is not None for v in scores):
            out.value = float(statistics.median(scores))
        return out

    def rl_f(self, conversation: Sequence[Mapping[str, Any]], response: str,
             passages: Sequence[str]) -> FaithfulnessJudgement:
        raw: dict[str, str | None] = {"claims": None, "verdicts": None}
        msgs = _render(self.prompts["faithfulness_claims"],
                       {"question": conversation_text(conversation), "response": response})
        try:
            parsed = self.primary.structured(msgs, _CLAIMS_SCHEMA, attempts=self.attempts,
                                             max_tokens=self.max_tokens["faithfulness_claims"])
        except LLMError as exc:
            raw["claims"] = getattr(exc, "last_text", None)
            error, failed = _failure(exc)
            return FaithfulnessJudgement(None, [], [], raw, not failed, "claim extraction failed", error,
                                         call_failed=failed)
        raw["claims"] = parsed.text
        if "truncated" in parsed.repairs:  # the last claim was cut off mid-sentence: not a claim to check
            self.primary.report.record_failure(f"{self.primary.spec}: claim list cut off at max_tokens")
            return FaithfulnessJudgement(None, [], [], raw, True, "claim extraction failed",
                                         "UnparsableReply: the claim list was cut off before it closed")
        claims = unique_claims(parsed.value["claims"])
        if not claims:
            return FaithfulnessJudgement(None, [], [], raw, False, "no claims")
        if not passages:
            return FaithfulnessJudgement(0.0, claims, [False] * len(claims), raw, False, "no passages")
        msgs = _render(self.prompts["faithfulness_verdicts"], {"passages": list(passages), "claims": claims})
        n = len(claims)

        def same_length(value: Any) -> str | None:
            got = len(value.verdicts)
            return None if got == n else f"give exactly {n} verdicts, one per claim in order (got {got})"

        try:
            parsed = self.primary.structured(msgs, _verdicts_schema(n), check=same_length, attempts=self.attempts,
                                             max_tokens=self.max_tokens["faithfulness_verdicts"])
        except LLMError as exc:
            raw["verdicts"] = getattr(exc, "last_text", None)
            error, failed = _failure(exc)
            return FaithfulnessJudgement(None, claims, [], raw, not failed, "claim verification failed", error,
                                         call_failed=failed)
        raw["verdicts"] = parsed.text
        verdicts = [v.supported == "yes" for v in parsed.value.verdicts]
        return FaithfulnessJudgement(sum(verdicts) / n, claims, verdicts, raw, False)
