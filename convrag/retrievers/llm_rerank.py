"""SEARA rerankers (the space's ``reranker`` dimension): an LLM listwise sliding-window reranker and a local
cross-encoder. Both take ``rerank(queries, rankings, texts, depth)`` and return new rankings.

A ranking's repeated ids keep their first occurrence; only its *head*, the first ``depth`` items (all when ``depth``
is None), is reordered, and the items below it follow in their previous order. ``cost_rank`` orders rerankers for a
cheaper-wins tie-break: no reranker 0 < cross-encoder 1 < LLM 2.

Listwise (:class:`ListwiseReranker`, RankGPT-style): windows slide from the bottom of the head to its top
(:func:`windows`); each window of two or more items asks the LLM (prompt ``seara_rerank_listwise``, passages numbered
from 1, whitespace collapsed and cut to ``doc_chars`` characters) for ``{"order": [...]}`` (or a RankGPT chain or
bare list, :func:`read_order`), read leniently (:func:`apply_order`). A reply naming no valid number, an unparseable
reply or a failed call keeps the window's order and is counted in ``failures``. A query's windows run in sequence,
each reading the order the one before left; queries run in parallel, none waiting for another's round.
Cross-encoder (:class:`CrossEncoderReranker`): ``sentence_transformers.CrossEncoder``, loaded offline from a local
folder, scores each (query, text) pair; the head is sorted by score descending, ties by previous rank.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from convrag.core.errors import ConvragError
from convrag.llm import LLM, load_prompt
from convrag.llm.types import EndpointUnreachable, LLMFailure
from convrag.retrievers.llm_rewrite import LLMTally, limit_of, list_reply

PROMPT = "seara_rerank_listwise"
COST_RANKS = {"none": 0, "cross_encoder": 1, "llm": 2}
_NUMBER = re.compile(r"\s*\[?\s*(\d+)\s*\]?\s*")
#: RankGPT's own reply form: bracketed numbers joined by ">" ("[2] > [4] > [1]")
_CHAIN = re.compile(r"\[\s*\d+\s*\](?:\s*>\s*\[\s*\d+\s*\])+")


class RerankError(ConvragError, ValueError):
    """Bad reranker settings or inputs, or a model that cannot be loaded."""


class WindowOrder(BaseModel):
    """Structured listwise reply."""

    order: list[int | str] = Field(description="passage numbers, most useful first")


def _heads(queries: Mapping[str, str], rankings: Mapping[str, Sequence[str]], texts: Mapping[str, str],
           depth: int | None) -> dict[str, tuple[list[str], list[str]]]:
    """{query id: (head, tail)} after dropping repeats; checks that every query and head text is known."""
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 1):
        raise RerankError(f"rerank: depth must be an integer >= 1 or None, got {depth!r}")
    out: dict[str, tuple[list[str], list[str]]] = {}
    for qid, ranking in rankings.items():
        if qid not in queries:
            raise RerankError(f"rerank: ranking for query {qid!r} has no query text")
        items = list(dict.fromkeys(ranking))
        cut = len(items) if depth is None else depth
        head = items[:cut]
        missing = [c for c in head if c not in texts]
        if missing:
            raise RerankError(f"rerank: query {qid!r}: {len(missing)} ranked id(s) have no text, first {missing[0]!r}")
        out[qid] = (head, items[cut:])
    return out


def read_order(text: str) -> dict[str, Any] | None:
    """A listwise reply that is not the asked JSON object, as ``{"order": [...]}``: a RankGPT chain
    ("[2] > [4] > [1]", its numbers in order) anywhere in the reply, else a bare JSON list; else None."""
    chain = _CHAIN.search(text)
    if chain is not None:
        return {"order": [int(n) for n in re.findall(r"\d+", chain.group())]}
    return list_reply("order")(text)


def windows(n: int, window: int, stride: int) -> list[tuple[int, int]]:
    """``[start, end)`` positions of the sliding windows over a head of ``n`` items, bottom first:
    ``[max(0, n - window), n)``, then both ends moved up by ``stride``, until a window starts at position 0 (so the
    top is reranked last); none when ``n`` < 2."""
    out: list[tuple[int, int]] = []
    end = n
    while n >= 2:
        start = max(0, end - window)
        out.append((start, end))
        if start == 0:
            break
        end -= stride
    return out


def apply_order(ids: Sequence[str], order: Sequence[Any]) -> tuple[list[str], str]:
    """``ids`` reordered by the 1-based ``order`` and what happened: ``complete``, ``incomplete_order`` or
    ``unusable_order`` (``ids`` unchanged). Read leniently: numbers outside 1..len(ids) and repeats are dropped,
    numbers written as ``"3"`` or ``"[3]"`` accepted, and the numbers left out follow in their previous order
    (``incomplete_order``); an order naming no valid number is ``unusable_order``."""
    picked: list[int] = []
    for item in order:
        if isinstance(item, bool):
            continue
        if isinstance(item, str):
            match = _NUMBER.fullmatch(item)
            item = int(match.group(1)) if match else None
        if isinstance(item, int) and 1 <= item <= len(ids) and item not in picked:
            picked.append(item)
    if not picked:
        return list(ids), "unusable_order"
    rest = [i for i in range(1, len(ids) + 1) if i not in picked]
    return [ids[i - 1] for i in picked + rest], "incomplete_order" if rest else "complete"


class ListwiseReranker:
    """LLM sliding-window listwise reranker (module docstring). ``concurrency``: queries reranked at once (None:
    the LLM's own ``max_concurrency``, :func:`~convrag.retrievers.llm_rewrite.limit_of`)."""

    cost_rank = COST_RANKS["llm"]

    def __init__(self, llm: LLM, window: int = 20, stride: int = 10, doc_chars: int = 500,
                 concurrency: int | None = None) -> None:
        for name, value in (("window", window), ("stride", stride), ("doc_chars", doc_chars)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise RerankError(f"ListwiseReranker: {name} must be an integer >= 1, got {value!r}")
        if window < 2 or stride > window:
            raise RerankError(f"ListwiseReranker: need window >= 2 and stride <= window (got {window}, {stride})")
        self.llm = llm
        self.window = window
        self.stride = stride
        self.doc_chars = doc_chars
        self.concurrency = limit_of(llm, concurrency)
        self.tally = LLMTally()
        self.counts: Counter[str] = Counter()

    @property
    def failures(self) -> Counter[str]:
        return self.tally.failures

    def report(self) -> dict[str, Any]:
        """Windows asked, ``incomplete_order`` replies, failures by reason and the LLM counters."""
        return {"windows": self.counts["windows"], "incomplete_order": self.counts["incomplete_order"],
                **self.tally.report()}

    def describe(self) -> dict[str, Any]:
        """Settings for the leaderboard."""
        return {"kind": "llm_window", "model": self.llm.spec, "window": self.window, "stride": self.stride,
                "doc_chars": self.doc_chars}

    def _passage(self, text: str) -> str:
        return " ".join(text.split())[:self.doc_chars]

    def rerank(self, queries: Mapping[str, str], rankings: Mapping[str, Sequence[str]], texts: Mapping[str, str],
               depth: int | None = None) -> dict[str, list[str]]:
        """New rankings (module docstring), for the queries of ``rankings`` in their order."""
        parts = _heads(queries, rankings, texts, depth)
        heads = {qid: head for qid, (head, _) in parts.items()}
        plans = {qid: windows(len(head), self.window, self.stride) for qid, head in heads.items()}
        qids = [qid for qid in plans if plans[qid]]

        def one(qid: str) -> list[tuple[str, BaseException | None]]:
            """Every window of one query in sequence; each window's outcome (or ``failed`` and the error)."""
            events: list[tuple[str, BaseException | None]] = []
            for start, end in plans[qid]:
                passages = [self._passage(texts[c]) for c in heads[qid][start:end]]
                messages = load_prompt(PROMPT).render(query=queries[qid], passages=passages)
                try:
                    order = list(self.llm.structured(messages, WindowOrder, fallback=read_order).value.order)
                except EndpointUnreachable:
                    raise
                except LLMFailure as err:
                    events.append(("failed", err))
                    continue
                heads[qid][start:end], outcome = apply_order(heads[qid][start:end], order)
                events.append((outcome, None))
            return events

        batch = self.tally.batch(self.llm, qids, one, self.concurrency, requests=sum(len(plans[q]) for q in qids))
        for events in batch.results:  # counted in query order, whatever order the calls returned in
            for outcome, err in events or []:
                self.counts["windows"] += 1
                if err is not None:
                    self.tally.failed(err)
                elif outcome == "unusable_order":
                    self.tally.failures[outcome] += 1
                elif outcome == "incomplete_order":
                    self.counts[outcome] += 1
        return {qid: heads[qid] + tail for qid, (_, tail) in parts.items()}


class CrossEncoderReranker:
    """Local cross-encoder reranker (module docstring); ``max_length`` in tokens (None: the model's)."""

    cost_rank = COST_RANKS["cross_encoder"]

    def __init__(self, path: str, batch_size: int = 32, max_length: int | None = None, device: str | None = None
                 ) -> None:
        if not Path(path).is_dir():
            raise RerankError(f"cross-encoder: no model folder at {path}")
        from sentence_transformers import CrossEncoder

        try:
            self.model = CrossEncoder(path, device=device, max_length=max_length, local_files_only=True)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RerankError(f"cross-encoder: cannot load the model in {path}: {reason}") from None
        self.path = path
        self.batch_size = batch_size
        self.max_length = max_length

    def describe(self) -> dict[str, Any]:
        """Settings for the leaderboard; the model by its record (name, version, weights digest), never its path."""
        from convrag.retrievers.model_record import model_record

        return {"kind": "cross_encoder", "model": model_record(self.path), "batch_size": self.batch_size,
                "max_length": self.max_length}

    def rerank(self, queries: Mapping[str, str], rankings: Mapping[str, Sequence[str]], texts: Mapping[str, str],
               depth: int | None = None) -> dict[str, list[str]]:
        """New rankings (module docstring): all pairs scored in one ``predict`` call."""
        parts = _heads(queries, rankings, texts, depth)
        pairs = [(queries[qid], texts[c]) for qid, (head, _) in parts.items() for c in head]
        scores = [float(s) for s in self.model.predict(pairs, batch_size=self.batch_size,
                                                                show_progress_bar=False)] if pairs else []
        out: dict[str, list[str]] = {}
        at = 0
        for qid, (head, tail) in parts.items():
            mine = scores[at:at + len(head)]
            at += len(head)
            order = sorted(range(len(head)), key=lambda i: (-mine[i], i))
            out[qid] = [head[i] for i in order] + tail
        return out
