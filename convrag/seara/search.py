"""SEARA search over a strategy space: ``grid``, ``staged`` and ``racing`` (memo ``seara.md`` section 6.4).

Every comparison is made inside one pool (:meth:`Searcher.evaluate`): the configurations compared are run, pooled,
judged once per unique (query, chunk text) and scored against those pseudo-qrels (micro step PR-AUC at K); with a
fact source (:mod:`convrag.seara.fact_level`), also on the pool's minimal facts, made as the space's ``judge.facts``
says: ``auto`` in the pools whose configurations differ in chunking, ``always`` in every pool, ``never``. The
**headline** that chooses (``PoolResult.measure``) is fact-level when the pool's configurations do not all share one
chunking (chunk-level counts would reward finer chunkings for cutting the same evidence into more "relevant" units:
SEARA section 2.3), else chunk-level (same units: exact, no extraction needed); the other measure stays a column.
The pick: the headline's best point estimate, unless a cheaper configuration's paired-bootstrap CI of the difference
includes 0 (cheaper wins, as the paper chose its LLM reranker for cost; :func:`convrag.seara.stats.pick`).
Strategies: :meth:`Searcher.run`; main effects and the interaction plot: :attr:`SearchResult.factorial`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from convrag.llm import LLM
from convrag.metrics.pr_auc.compute import score_chunks
from convrag.seara import fact_level
from convrag.seara.fact_level import FactSource, LLMFacts, OracleFacts, PoolFacts
from convrag.seara.judge import PseudoQrels, judge_pool
from convrag.seara.pool import Pool, build_pool
from convrag.seara.runner import Runner
from convrag.seara.space import BEST, DIMENSIONS, Configuration, Space, SpaceError
from convrag.seara.stats import BootstrapResult, SelectionError, bootstrap, bootstrap_counts, factorial_effects, pick


class UnscorablePool(SelectionError):
    """A pool in which every query has a failed judgment, so nothing can be scored: ``pool`` (its label),
    ``pairs`` (failed (query, chunk) pairs) and ``failures`` (unique failed judgments by kind)."""

    def __init__(self, pool: str, pairs: int, failures: Mapping[str, int]) -> None:
        self.pool, self.pairs, self.failures = pool, pairs, dict(failures)
        super().__init__(f"[{pool}] every query has a failed judgment ({pairs} failed pairs, {self.failures}): "
                         "nothing can be scored; check the judge")


class UnscorableFacts(SelectionError):
    """A pool whose configurations differ in chunking, so facts choose, but where no query has a usable fact:
    ``pool`` (its label) and ``facts`` (:class:`PoolFacts`: counts, failed queries)."""

    def __init__(self, pool: str, facts: PoolFacts, result: Any = None) -> None:
        self.pool, self.facts, self.result = pool, facts, result
        counts = ", ".join(f"{n} {k}" for k, n in sorted(facts.counts.items()) if n)
        super().__init__(f"[{pool}] the configurations differ in chunking, so minimal facts choose, but no query has "
                         f"a usable fact ({counts or 'no relevant chunk'}; {len(facts.failed_queries)} queries with a "
                         "failed extraction)")


def default_fact_source(judge: Any, runner: Runner, concurrency: int) -> FactSource | None:
    """Where a pool's facts come from by default: an evidence oracle's spans, an LLM judge's extraction, or None
    (another judge: chunk-level only)."""
    if callable(getattr(judge, "facts", None)):
        return OracleFacts(judge, runner.docs)
    if isinstance(judge, LLM):
        return LLMFacts(judge, concurrency)
    return None


@dataclass
class PoolResult:
    """One judged pool and the scores of the configurations it compares: chunk-level (``scores``, ``boot``) and,
    with a fact source, fact-level (``fact_scores``, ``fact_boot``, ``facts``); ``measure`` is the headline that
    chose (``"chunks"`` or ``"facts"``) and ``measure_reason`` says why."""

    label: str
    configurations: list[Configuration]
    query_ids: list[str]
    pool: Pool
    pseudo: PseudoQrels
    scores: dict[str, dict[str, Any]]
    boot: Any
    pick: Any
    failed_queries: list[str] = field(default_factory=list)
    effects: dict[str, Any] | None = None
    measure: str = "chunks"
    measure_reason: str = ""
    facts: PoolFacts | None = None
    fact_scores: dict[str, dict[str, Any]] | None = None
    fact_boot: BootstrapResult | None = None

    @property
    def headline(self) -> BootstrapResult:
        """The bootstrap of the measure that chooses."""
        return self.fact_boot if self.measure == "facts" and self.fact_boot is not None else self.boot

    @property
    def headline_scores(self) -> dict[str, dict[str, Any]]:
        return self.fact_scores if self.measure == "facts" and self.fact_scores is not None else self.scores

    def judge_calls(self) -> dict[str, int]:
        """Per configuration, the unique judgments (judging keys) its own top-K lists need: what judging it
        alone would cost; the pool judges the union once."""
        key = {(j.query_id, j.chunk_id): j.key for j in self.pseudo.judgments}
        return {name: len({key[(q, c)] for q, ids in self.pool.runs[name].items() for c in ids})
                for name in self.scores}  # fmt: skip

    @property
    def winner(self) -> Configuration:
        return next(c for c in self.configurations if c.name == self.pick.winner)


@dataclass
class SearchResult:
    """All pools of a search, the final one last; ``chosen`` is the final pool's pick."""

    strategy: str
    pools: list[PoolResult]
    chosen: Configuration
    rounds: list[dict[str, Any]] = field(default_factory=list)

    @property
    def final(self) -> PoolResult:
        return self.pools[-1]

    @property
    def factorial(self) -> PoolResult | None:
        """The pool for main effects and the interaction plot: the last pool whose configurations form a full
        factorial of two or more varied dimensions over all queries (the final pool when it is one, else the latest
        stage that is; racing rounds on part of the queries never count), or None."""
        return next((p for p in reversed(self.pools) if p.effects is not None
                     and len(p.query_ids) == len(self.final.query_ids)), None)  # fmt: skip

    def judge_totals(self) -> dict[str, Any]:
        """Judge calls, cache hits, failures, tokens and cost summed over every pool of the search; ``pairs`` and
        ``failed_pairs`` summed per pool, ``unique`` the distinct judging keys over all pools."""
        total: dict[str, Any] = {"pools": len(self.pools), "pairs": 0, "failed_pairs": 0,
                                 "unique": len({j.key for p in self.pools for j in p.pseudo.judgments})}
        for p in self.pools:
            s = p.pseudo.summary()
            total["pairs"] += s["pairs"]
            total["failed_pairs"] += s["failed_pairs"]
            for key, value in (s.get("llm") or {}).items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    total[key] = total.get(key, 0) + value
        return total


class Searcher:
    """Runs a search of ``space`` with ``runner``; ``judge`` is the judging LLM (or any relevance judge)."""

    def __init__(self, space: Space, runner: Runner, judge: Any, *, echo: Callable[[str], None] | None = print,
                 on_pool: Callable[[PoolResult], None] | None = None, facts: FactSource | None | str = "default"
                 ) -> None:
        self.space, self.runner, self.judge, self.echo, self.on_pool = space, runner, judge, echo, on_pool
        self.facts = default_fact_source(judge, runner, int(space.judge["concurrency"])) if facts == "default" \
            else facts

    def _say(self, text: str) -> None:
        if self.echo is not None:
            self.echo(text)

    # ----------------------------------------------------------------------------------------- one pool
    def evaluate(self, label: str, configs: Sequence[Configuration], qids: Sequence[str]) -> PoolResult:
        """Run, pool, judge and score ``configs`` on ``qids``: their top-K lists pooled
        (:func:`convrag.seara.pool.build_pool`), each unique (query, chunk text) judged once through the cached LLM
        layer (:func:`convrag.seara.judge.judge_pool`), every configuration scored with ``metrics/pr_auc`` against
        those pseudo-qrels. A query with a failed judgment is left out of every score of the pool and listed (a
        failed call never becomes a grade)."""
        configs = list(dict.fromkeys(configs))
        k, level = self.space.depth, int(self.space.judge["level"])
        self._say(f"[{label}] {len(configs)} configurations x {len(qids)} queries, depth {k}")
        runs = {c.name: self.runner.run(c, qids) for c in configs}
        pool = build_pool(runs, k=k, query_ids=list(qids))
        pseudo = judge_pool(pool, self.runner.queries, self.runner.texts, self.judge,
                            max_calls=self.space.judge["max_judgments"], max_cost_usd=self.space.judge["max_cost_usd"],
                            concurrency=int(self.space.judge["concurrency"]), echo=self._say, cutoff=level)  # fmt: skip
        failed = sorted({j.query_id for j in pseudo.failed})
        scored = [q for q in qids if q not in failed]
        if not scored:
            raise UnscorablePool(label, len(pseudo.failed), pseudo.failures)
        qrels = {q: pseudo.qrels.get(q, {}) for q in scored}
        kept = {name: {q: run[q] for q in scored} for name, run in runs.items()}
        scores = {name: score_chunks(run, qrels, k=k, relevance_level=level, pool_signature=pseudo.signature)
                  for name, run in kept.items()}  # fmt: skip
        boot = bootstrap(kept, qrels, k, n_boot=self.space.bootstrap, seed=self.space.seed, level=level,
                         alpha=self.space.alpha, pool_signature=pseudo.signature)  # fmt: skip
        result = PoolResult(label, configs, list(qids), pool, pseudo, scores, boot, None, failed)
        if failed:
            self._say(f"[{label}] {len(failed)} queries have a failed judgment and are left out of every score: "
                      f"{', '.join(failed[:5])}{' ...' if len(failed) > 5 else ''}")
        chunkings = sorted({c.get("chunking") for c in configs})
        mode = self.space.judge.get("facts", "auto")
        if self.facts is not None and (mode == "always" or (mode == "auto" and len(chunkings) > 1)):
            self._fact_level(result, kept, scored)
        if len(chunkings) > 1 and result.facts is not None:
            result.measure = "facts"
            result.measure_reason = (f"fact-level: the configurations differ in chunking ({', '.join(chunkings)}), "
                                     "so chunk counts are not comparable across them")
            if result.fact_boot is None:
                raise UnscorableFacts(label, result.facts, result)  # type: ignore[arg-type]
        elif len(chunkings) > 1:
            why = "judge.facts is never" if mode == "never" else "there is no fact source"
            result.measure_reason = (f"chunk-level: the configurations differ in chunking ({', '.join(chunkings)}) "
                                     f"but {why}; finer chunkings are favoured")
        else:
            result.measure_reason = f"chunk-level: every configuration uses chunking {chunkings[0]}"
        result.pick = pick(result.headline, {c.name: self.space.cost(c) for c in configs}, alpha=self.space.alpha)
        varied = [d for d in DIMENSIONS if len({c.get(d) for c in configs}) > 1]
        if len(varied) >= 2:
            factors = {c.name: {d: c.get(d) for d in varied} for c in configs}
            try:
                result.effects = factorial_effects({n: s["pr_auc"] or 0.0 for n, s in result.headline_scores.items()},
                                                   factors)
            except SelectionError:
                result.effects = None  # not a full factorial (exclusions): no effects table
        self._say(f"[{label}] winner {result.pick.winner} by {result.measure_reason.split(':')[0]} "
                  f"({result.pick.reason})")
        if self.on_pool is not None:
            self.on_pool(result)
        return result

    def _fact_level(self, result: PoolResult, runs: Mapping[str, Mapping[str, list[str]]],
                    scored: Sequence[str]) -> None:
        """Facts of the pool and the fact-level scores of every configuration, each with its own paired bootstrap;
        a query with a failed extraction is left out of the fact-level scores and listed."""
        assert self.facts is not None
        k, label = self.space.depth, result.label
        relevant = {q: result.pseudo.relevant(q) for q in scored}
        queries = {q: self.runner.queries[q] for q in scored}
        table = self.runner.chunk_table
        pairs, calls = self.facts.estimate(queries, table, relevant)
        self._say(f"[{label}] minimal facts ({self.facts.source}): {pairs:,} judged-relevant (query, chunk) pairs "
                  f"-> {calls:,} extraction calls")
        facts = result.facts = self.facts(queries, table, relevant)
        if facts.failed_queries:
            self._say(f"[{label}] {len(facts.failed_queries)} queries have a failed fact extraction and are left out "
                      f"of the fact-level scores: {', '.join(facts.failed_queries[:5])}"
                      f"{' ...' if len(facts.failed_queries) > 5 else ''}")
        fact_qids = [q for q in scored if q not in facts.failed_queries]
        if not any(facts.factset.by_query.get(q) for q in fact_qids):
            return
        signature = result.pseudo.signature
        result.fact_scores, counts = fact_level.score_and_count(runs, table, facts.factset, k, fact_qids,
                                                                pool_signature=signature)
        try:
            result.fact_boot = bootstrap_counts(counts, k, n_boot=self.space.bootstrap, seed=self.space.seed,
                                                level=int(self.space.judge["level"]), alpha=self.space.alpha,
                                                pool_signature=signature)  # fmt: skip
        except SelectionError as err:  # facts, but none a query's lists can reach: the pool is unscorable by facts
            self._say(f"[{label}] no fact-level score: {err}")
            result.fact_scores = None

    # ----------------------------------------------------------------------------------------- strategies
    def run(self, query_ids: Sequence[str] | None = None) -> SearchResult:
        """The search the space asks for (``search.strategy``):

        * ``grid``: every configuration of the space in one pool.
        * ``staged`` (paper Table 2): each stage varies some dimensions over the running best and is judged in its
          own pool; its winner sets those dimensions for later stages. Stage scores are not comparable across pools,
          so the winners and runners-up of all stages, the baseline and ``baselines`` are re-scored in one final
          common pool, which chooses.
        * ``racing``: successive halving over queries: all configurations on a seeded ``start`` share of the
          queries, then those whose CI upper bound is below the leader's lower bound are dropped and the query set
          grows by ``factor``, until all queries are used; the last round (all queries, the survivors) chooses.
          Nothing is dropped in a round with fewer than ``min_scored`` scored queries (a bootstrap over a handful of
          queries has near-zero-width intervals) or with none at all (that round is skipped)."""
        qids = list(query_ids or self.runner.queries)
        return {"grid": self.grid, "staged": self.staged, "racing": self.racing}[self.space.strategy](qids)

    def grid(self, qids: Sequence[str]) -> SearchResult:
        final = self.evaluate("grid", self.space.full_grid(), qids)
        return SearchResult("grid", [final], final.winner)

    def _values(self, names: Sequence[str], dim: str, winners: Mapping[str, Configuration]) -> list[str]:
        return list(dict.fromkeys(winners[n[len(BEST):]].get(dim) if n.startswith(BEST) else n for n in names))

    def staged(self, qids: Sequence[str]) -> SearchResult:
        best = dict(self.space.baseline)
        winners: dict[str, Configuration] = {}
        pools: list[PoolResult] = []
        finalists: list[Configuration] = [self.space.configuration()]
        for stage in self.space.stages:
            vary = {d: self._values(names, d, winners) for d, names in stage.vary.items()}
            configs = self.space.grid(vary, best)
            if not configs:
                raise SpaceError(f"{self.space.source}: stage {stage.name!r}: every configuration is excluded by "
                                 "'exclude' (given the earlier stages' winners)")
            result = self.evaluate(f"stage {stage.name}", configs, qids)
            pools.append(result)
            winners[stage.name] = result.winner
            best.update({d: result.winner.get(d) for d in vary})
            by_point = sorted(result.headline.configurations, key=lambda n: (-result.headline.point[n], n))
            ranked = [result.pick.winner] + [n for n in by_point if n != result.pick.winner]
            finalists += [c for n in ranked[: self.space.keep_per_stage] for c in configs if c.name == n]
        finalists += [self.space.configuration(b) for b in self.space.baselines]
        final = self.evaluate("final common pool", [c for c in finalists if not self.space.excluded(c)], qids)
        return SearchResult("staged", [*pools, final], final.winner)

    def racing(self, qids: Sequence[str]) -> SearchResult:
        order = list(qids)
        random.Random(self.space.seed).shuffle(order)
        alive = self.space.full_grid()
        n = max(1, math.ceil(self.space.racing["start"] * len(order)))
        pools: list[PoolResult] = []
        rounds: list[dict[str, Any]] = []
        while True:
            label = f"racing round {len(rounds) + 1}"
            last = n >= len(order)
            try:
                result = self.evaluate(label, alive, order[:n])
            except SelectionError as err:  # no scorable query in this subset: keep everyone, grow the subset
                if last:
                    raise
                rounds.append({"round": len(rounds) + 1, "queries": n, "configurations": len(alive), "dropped": [],
                               "skipped": str(err)})  # fmt: skip
                n = min(len(order), math.ceil(n * self.space.racing["factor"]))
                continue
            pools.append(result)
            keep = alive
            if not last and len(result.headline.query_ids) >= self.space.racing["min_scored"]:
                bounds = {c.name: result.headline.ci(c.name) for c in alive}
                leader = max(bounds, key=lambda name: (bounds[name][0], name))
                keep = [c for c in alive if bounds[c.name][1] >= bounds[leader][0]]
            rounds.append({"round": len(rounds) + 1, "queries": n, "scored": len(result.headline.query_ids),
                           "configurations": len(alive), "dropped": [c.name for c in alive if c not in keep]})
            if last:
                break
            alive = keep
            n = min(len(order), math.ceil(n * self.space.racing["factor"]))
        return SearchResult("racing", pools, pools[-1].winner, rounds)
