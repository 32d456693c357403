"""LLM judges of MTRAG generation scoring, all through ``convrag.llm``.

- IDK: does the reply say, fully or partly, that the information is missing? The first alphabetic token of the
  judge's reply decides: yes -> 1, no -> 0, partial -> 0.5, anything else -> 0.5 with ``fallback=True``.
- Clarification (UNDERSPECIFIED tasks): does the reply ask the user for the missing information? JSON
  ``{decision, explanation}``: yes -> 1, no -> 0; no valid reply after the LLM layer's re-asks -> 0.5, fallback.
- RB_llm: a 1-10 rating after RAD-Bench, divided by 10. The rating is read from ``[[N]]`` (last one), else
  ``Rating: N``, else ``N/10`` or ``N out of 10``; as in the official parser a value outside (0, 10] or no value
  gives 0.5 with ``fallback=True``. Several judges: the median of their values (each judge's fallback included).
- RL_F: claims are extracted from the answer (step 1; repeated claims count once) and checked against the
  passages in one call (step 2); score = supported / claims. No claims -> ``None`` (undefined: RAGAS returns
  NaN and the official mean skips it); no passages -> every claim unsupported (0.0) without the step-2 call;
  an LLM failure -> ``None`` with ``fallback=True``.

Every LLM failure (after the client's retries and re-asks) is caught here, recorded in the outcome's ``error``
and flagged ``fallback``; nothing is turned into a score silently. With several judges, IDK, clarification and
RL_F use the first one; RB_llm asks all of them.
"""

from __future__ import annotations

import os
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from convrag.llm import LLM, LLMError, PromptError, PromptTemplate, get_llm, load_prompt

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
    """IDK judge: ``value`` 1 / 0.5 / 0, the judge's ``raw`` reply and the ``label`` read from it."""

    value: float
    raw: str | None
    label: str | None
    fallback: bool
    error: str | None = None


@dataclass
class ClarificationJudgement:
    """Clarification judge: ``value`` 1 / 0 (0.5 on fallback), decision and explanation."""

    value: float
    raw: str | None
    decision: str | None
    explanation: str | None
    fallback: bool
    error: str | None = None


@dataclass
class RatingJudgement:
    """RB_llm: ``value`` = median of the judges' rating/10 (0.5 for a judge whose rating is unusable)."""

    value: float
    ratings: list[float | None]
    raw: list[str | None]
    judges: list[str]
    fallbacks: list[bool]
    errors: list[str | None] = field(default_factory=list)

    @property
    def fallback(self) -> bool:
        return any(self.fallbacks)


@dataclass
class FaithfulnessJudgement:
    """RL_F: supported / total claims; ``value`` None when undefined (no claims) or failed (``fallback``)."""

    value: float | None
    claims: list[str]
    verdicts: list[bool]
    raw: dict[str, str | None]
    fallback: bool
    note: str | None = None
    error: str | None = None

    @property
    def supported(self) -> int:
        return sum(self.verdicts)


# --- parsing ----------------------------------------------------------------------------------------------------
_FIRST_WORD = re.compile(r"[A-Za-z]+")


def parse_idk(text: str | None) -> tuple[float, str | None, bool]:
    """(value, label, fallback) from the IDK judge's reply: its first alphabetic token decides."""
    match = _FIRST_WORD.search(text or "")
    token = match.group(0).lower() if match else None
    if token == "yes":
        return 1.0, "yes", False
    if token == "no":
        return 0.0, "no", False
    if token == "partial":
        return 0.5, "partial", False
    return 0.5, None, True


_NUMBER = r"([-+]?\d+(?:\.\d+)?)"
_RATING_PATTERNS = [re.compile(r"\[\[\s*" + _NUMBER + r"\s*(?:/\s*10\s*)?\]\]"),
                    re.compile(r"rating\s*[:=]?\s*\**\s*" + _NUMBER, re.IGNORECASE),
                    re.compile(_NUMBER + r"\s*(?:/\s*10|out of 10)\b", re.IGNORECASE)]
_EXAMPLE_LINE = re.compile(r"for (?:example|instance)\b.*$", re.IGNORECASE | re.MULTILINE)


def parse_rating(text: str | None) -> float | None:
    """The 1-10 rating in a judge reply (last ``[[N]]``, else last ``Rating: N``, else ``N/10``), or None."""
    if not text:
        return None
    text = _EXAMPLE_LINE.sub("", text)
    for pattern in _RATING_PATTERNS:
        found = pattern.findall(text)
        if found:
            return float(found[-1])
    return None


def rating_value(rating: float | None) -> tuple[float, bool]:
    """(rating / 10, fallback): a missing rating or one outside (0, 10] becomes 0.5 (official fallback)."""
    if rating is None or not 0 < rating <= 10:
        return 0.5, True
    return rating / 10.0, False


class ClarificationReply(BaseModel):
    decision: Literal["yes", "no"]
    explanation: str = Field(default="", max_length=600)

    @field_validator("decision", mode="before")
    @classmethod
    def _lower(cls, v: Any) -> Any:
        return v.strip().lower() if isinstance(v, str) else v


_CLAIMS_SCHEMA = {"type": "object", "required": ["claims"], "properties": {
    "claims": {"type": "array", "maxItems": MAX_CLAIMS, "items": {"type": "string", "maxLength": 400}}}}


def _verdicts_schema(n: int) -> dict[str, Any]:
    item = {"type": "object", "required": ["reason", "supported"],
            "properties": {"reason": {"type": "string", "maxLength": 200},
                           "supported": {"type": "string", "enum": ["yes", "no"]}}}
    return {"type": "object", "required": ["verdicts"],
            "properties": {"verdicts": {"type": "array", "items": item, "minItems": n, "maxItems": n}}}


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


# --- the judges ---------------------------------------------------------------------------------------------------
def make_llms(judge: JudgeSpec | Sequence[JudgeSpec]) -> list[LLM]:
    """LLM objects for a spec string, an LLM, or a list of them (an ensemble)."""
    items = [judge] if isinstance(judge, (str, LLM)) else list(judge)
    if not items:
        raise LLMError("no judge given")
    return [j if isinstance(j, LLM) else get_llm(j) for j in items]


class GenerationJudges:
    """The four judges over one or several LLMs, with replaceable prompts (``prompts[role] = name or path``)."""

    def __init__(self, judge: JudgeSpec | Sequence[JudgeSpec] = "default",
                 prompts: Mapping[str, str | PromptTemplate] | None = None,
                 max_tokens: Mapping[str, int] | None = None) -> None:
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

    def describe(self) -> dict[str, Any]:
        """Judge specs and prompt sources (stored with every result)."""
        return {"judges": [llm.spec for llm in self.llms],
                "prompts": {role: t.source for role, t in self.prompts.items()},
                "max_tokens": dict(self.max_tokens)}

    def idk(self, conversation: Sequence[Mapping[str, Any]], response: str) -> IdkJudgement:
        msgs = _render(self.prompts["idk"], {"conversation": conversation_text(conversation), "response": response})
        try:
            text = self.primary.chat(msgs, max_tokens=self.max_tokens["idk"]).text
        except LLMError as exc:
            return IdkJudgement(0.5, None, None, True, f"{type(exc).__name__}: {exc}")
        value, label, fallback = parse_idk(text)
        return IdkJudgement(value, text, label, fallback)

    def clarification(self, conversation: Sequence[Mapping[str, Any]], response: str) -> ClarificationJudgement:
        msgs = _render(self.prompts["clarification"],
                       {"conversation": conversation_text(conversation), "response": response})
        try:
            parsed = self.primary.structured(msgs, ClarificationReply, max_tokens=self.max_tokens["clarification"])
        except LLMError as exc:
            return ClarificationJudgement(0.5, getattr(exc, "last_text", None), None, None, True,
                                          f"{type(exc).__name__}: {exc}")
        reply = parsed.value
        return ClarificationJudgement(1.0 if reply.decision == "yes" else 0.0, parsed.text, reply.decision,
                                      reply.explanation, False)

    def rb_llm(self, conversation: Sequence[Mapping[str, Any]], reference: str, response: str,
               passages: Sequence[str]) -> RatingJudgement:
        values = {"previous_conversation": conversation_text(conversation[:-1]),
                  "question": str(conversation[-1]["text"]) if conversation else "",
                  "reference": reference, "response": response, "passages": list(passages)}
        msgs = _render(self.prompts["rb_llm"], values)
        out = RatingJudgement(0.5, [], [], [], [])
        scores = []
        for llm in self.llms:
            out.judges.append(llm.spec)
            try:
                text = llm.chat(msgs, max_tokens=self.max_tokens["rb_llm"]).text
            except LLMError as exc:
                text, error = None, f"{type(exc).__name__}: {exc}"
            else:
                error = None
            rating = parse_rating(text)
            value, fallback = rating_value(rating)
            out.ratings.append(rating)
            out.raw.append(text)
            out.fallbacks.append(fallback)
            out.errors.append(error)
            scores.append(value)
        out.value = float(statistics.median(scores))
        return out

    def rl_f(self, conversation: Sequence[Mapping[str, Any]], response: str,
             passages: Sequence[str]) -> FaithfulnessJudgement:
        raw: dict[str, str | None] = {"claims": None, "verdicts": None}
        msgs = _render(self.prompts["faithfulness_claims"],
                       {"question": conversation_text(conversation), "response": response})
        try:
            parsed = self.primary.structured(msgs, _CLAIMS_SCHEMA, max_tokens=self.max_tokens["faithfulness_claims"])
        except LLMError as exc:
            raw["claims"] = getattr(exc, "last_text", None)
            return FaithfulnessJudgement(None, [], [], raw, True, "claim extraction failed",
                                         f"{type(exc).__name__}: {exc}")
        raw["claims"] = parsed.text
        claims = unique_claims(parsed.value["claims"])
        if not claims:
            return FaithfulnessJudgement(None, [], [], raw, False, "no claims")
        if not passages:
            return FaithfulnessJudgement(0.0, claims, [False] * len(claims), raw, False, "no passages")
        msgs = _render(self.prompts["faithfulness_verdicts"], {"passages": list(passages), "claims": claims})
        n = len(claims)

        def same_length(value: Any) -> str | None:
            got = len(value["verdicts"])
            return None if got == n else f"give exactly {n} verdicts, one per claim in order (got {got})"

        try:
            parsed = self.primary.structured(msgs, _verdicts_schema(n), check=same_length,
                                             max_tokens=self.max_tokens["faithfulness_verdicts"])
        except LLMError as exc:
            raw["verdicts"] = getattr(exc, "last_text", None)
            return FaithfulnessJudgement(None, claims, [], raw, True, "claim verification failed",
                                         f"{type(exc).__name__}: {exc}")
        raw["verdicts"] = parsed.text
        verdicts = [v["supported"] == "yes" for v in parsed.value["verdicts"]]
        return FaithfulnessJudgement(sum(verdicts) / n, claims, verdicts, raw, False)
