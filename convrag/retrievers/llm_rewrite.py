"""SEARA multi-query rewriter (the space's ``rewriter`` dimension): an LLM proposes alternative search queries,
each is retrieved, and the lists are fused with reciprocal rank fusion.

- *Variants* (:meth:`QueryRewriter.variants`): the original query first, then up to ``n_queries`` LLM queries
  (prompt ``seara_query_variants``, structured reply ``{"queries": [...]}``, a bare JSON list read as that list) in
  reply order, each stripped; blanks, non-strings, refusals and non-answers (:func:`convrag.llm.replies.is_non_answer`)
  and repeats (of the original or of an earlier variant, compared casefolded with whitespace collapsed) dropped,
  then the first ``n_queries`` kept. A failed or unparseable call gives the original query alone and is counted in
  ``failures`` by reason (``call_failed``, ``unparseable``), and so is a reply with no usable variant
  (``no_usable_variant``); none gives a ranking of its own. A dead endpoint (:class:`EndpointUnreachable`) propagates.
- *Retrieval* (:meth:`QueryRewriter.retrieve`): every variant ``i`` of query ``q`` is searched as query id
  ``f"{q}\\u241f{i}"`` (``i`` = 0 is the original) to depth ``depth_each``; the lists of ``q`` are fused with
  :func:`~convrag.metrics.pr_auc.inputs.fuse_rankings` (RRF: score = sum of 1 / (``rrf_k`` + rank) over the
  lists holding the item, score descending, ties by id descending) and cut to the top ``k``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, Field

from convrag.llm import LLM, BatchResult, ParseError, extract_json, load_prompt, run_batch
from convrag.llm.replies import is_non_answer
from convrag.llm.types import EndpointUnreachable, LLMFailure, UnparsableReply
from convrag.metrics.pr_auc.inputs import fuse_rankings

PROMPT = "seara_query_variants"
SEPARATOR = "\u241f"
REPORT_KEYS = ("calls", "cache_hits", "cache_misses", "retries", "structured_retries", "prompt_tokens",
               "completion_tokens", "cost_usd")
T = TypeVar("T")
R = TypeVar("R")


class QueryVariants(BaseModel):
    """Structured rewriter reply."""

    queries: list[str] = Field(description="alternative search queries for the same request")


def limit_of(llm: Any, concurrency: int | None) -> int:
    """Calls a component runs at once: ``concurrency`` when given, else the LLM's own bound on requests in flight
    (its ``max_concurrency``, which ``judge.concurrency`` / ``--concurrency`` set; 4 for an object without one)."""
    return int(concurrency if concurrency is not None else getattr(llm, "max_concurrency", 4))


class LLMTally:
    """One component's LLM accounting: ``requests`` it made, ``failures`` by reason, and ``llm``: the increase of
    the LLM's :class:`~convrag.llm.RunReport` counters (``REPORT_KEYS``) over this component's batches (exact when
    nothing else uses that LLM meanwhile); ``in_flight``: that LLM's requests in flight over the whole run
    (:meth:`~convrag.llm.RunReport.in_flight`, shared with whatever else uses that LLM)."""

    def __init__(self) -> None:
        self.requests = 0
        self.failures: Counter[str] = Counter()
        self.llm: dict[str, float] = dict.fromkeys(REPORT_KEYS, 0)
        self._report: Any = None

    def batch(self, llm: LLM, items: Iterable[T], fn: Callable[[T], R], concurrency: int,
              requests: int | None = None) -> BatchResult[R]:
        """``run_batch`` over ``items`` catching :class:`LLMFailure`, with the report counters added up;
        ``requests``: the prompts the items ask in all (None: one per item)."""
        seq = list(items)
        self._report = llm.report
        before = llm.report.to_dict()
        try:
            return run_batch(seq, fn, concurrency, catch=(LLMFailure,))
        finally:
            after = llm.report.to_dict()
            self.requests += len(seq) if requests is None else requests
            for key in REPORT_KEYS:
                self.llm[key] += after[key] - before[key]

    def failed(self, error: BaseException) -> str:
        """Count a failed item by reason (``unparseable`` or ``call_failed``); a dead endpoint is re-raised."""
        if isinstance(error, EndpointUnreachable):
            raise error
        reason = "unparseable" if isinstance(error, UnparsableReply) else "call_failed"
        self.failures[reason] += 1
        return reason

    def report(self) -> dict[str, Any]:
        """``requests``, ``failures`` (by reason), ``failed`` (their sum), the LLM counters and ``in_flight`` (None
        before any batch)."""
        llm = {k: round(v, 6) if k == "cost_usd" else int(v) for k, v in self.llm.items()}
        flight = self._report.in_flight() if self._report is not None else None
        return {"requests": self.requests, "failures": dict(self.failures), "failed": sum(self.failures.values()),
                **llm, "in_flight": flight}


def list_reply(field: str) -> Callable[[str], dict[str, Any] | None]:
    """A ``fallback`` for :meth:`LLM.structured` whose schema is the one list ``field``: a reply that is a whole
    bare JSON list (alone or in a code fence, nothing around it, not cut off) is read as ``{field: list}``;
    anything else as None."""

    def read(text: str) -> dict[str, Any] | None:
        try:
            value, repairs = extract_json(text)
        except ParseError:
            return None
        whole = not {"surrounding_text", "truncated"} & set(repairs)
        return {field: value} if isinstance(value, list) and whole else None

    return read


def _key(text: str) -> str:
    return " ".join(text.split()).casefold()


def clean_variants(original: str, proposed: Iterable[Any], n: int) -> list[str]:
    """The original, then at most ``n`` cleaned variants (rule in the module docstring)."""
    out = [original]
    seen = {_key(original)}
    for item in proposed:
        if len(out) > n:
            break
        if not isinstance(item, str) or not item.strip() or _key(item) in seen:
            continue
        seen.add(_key(item))
        out.append(item.strip())
    return out


class QueryRewriter:
    """LLM multi-query rewriter fused by RRF (module docstring). ``concurrency``: calls at once, all queries in one
    batch (None: the LLM's own ``max_concurrency``, :func:`limit_of`)."""

    def __init__(self, llm: LLM, n_queries: int = 4, depth_each: int = 10, rrf_k: int = 60,
                 concurrency: int | None = None) -> None:
        for name, value in (("n_queries", n_queries), ("depth_each", depth_each)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"QueryRewriter: {name} must be an integer >= 1, got {value!r}")
        self.llm = llm
        self.n_queries = n_queries
        self.depth_each = depth_each
        self.rrf_k = rrf_k
        self.concurrency = limit_of(llm, concurrency)
        self.tally = LLMTally()

    @property
    def failures(self) -> Counter[str]:
        return self.tally.failures

    def report(self) -> dict[str, Any]:
        """Requests, failures by reason and the LLM counters (see :class:`LLMTally`)."""
        return self.tally.report()

    def describe(self) -> dict[str, Any]:
        """Settings for the leaderboard."""
        return {"kind": "llm_multi_query", "model": self.llm.spec, "n_queries": self.n_queries,
                "depth_each": self.depth_each, "fusion": "rrf", "rrf_k": self.rrf_k}

    def _ask(self, query: str) -> list[str]:
        messages = load_prompt(PROMPT).render(query=query, n=self.n_queries)
        return list(self.llm.structured(messages, QueryVariants, fallback=list_reply("queries")).value.queries)

    def variants(self, queries: Mapping[str, str]) -> dict[str, list[str]]:
        """{query id: [original, variant 1, ...]} (module docstring), in the order of ``queries``."""
        qids = list(queries)
        batch = self.tally.batch(self.llm, [queries[q] for q in qids], self._ask, self.concurrency)
        out: dict[str, list[str]] = {}
        for i, qid in enumerate(qids):
            err = batch.errors.get(i)
            if err is not None:
                self.tally.failed(err)
                out[qid] = [queries[qid]]
            else:
                proposed = [v for v in batch.results[i] or [] if not (isinstance(v, str) and is_non_answer(v))]
                out[qid] = clean_variants(queries[qid], proposed, self.n_queries)
                if len(out[qid]) == 1:  # nothing usable: refusals, non-answers or only repeats of the query
                    self.tally.failures["no_usable_variant"] += 1
        return out

    def retrieve(self, search: Callable[[Mapping[str, str], int], Mapping[str, Sequence[str]]],
                 queries: Mapping[str, str], k: int) -> dict[str, list[str]]:
        """Top ``k`` of the RRF fusion of the variants' lists, per query (module docstring). ``search(queries,
        depth)`` is called once with every variant; a variant missing from its answer counts as an empty list."""
        variants = self.variants(queries)
        sub = {f"{qid}{SEPARATOR}{i}": text for qid, texts in variants.items() for i, text in enumerate(texts)}
        hits = search(sub, self.depth_each)
        out: dict[str, list[str]] = {}
        for qid, texts in variants.items():
            lists = [list(hits.get(f"{qid}{SEPARATOR}{i}", []))[:self.depth_each] for i in range(len(texts))]
            out[qid] = fuse_rankings(lists, rrf_k=self.rrf_k)[:k]
        return out
