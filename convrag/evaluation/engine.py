"""The one retrieval evaluation path of every benchmark (``convrag evaluate``).

turns (history, gold documents, labels) -> query strategies -> retrievers over each subset's corpus (or each
turn's pool) -> per-turn scores -> the profile's aggregation -> the profile's tables, plots and runs.
Nothing here knows a benchmark by name: what differs is the :class:`~convrag.evaluation.profile.EvaluationProfile`
the builder declared (read from the folder's README).

Per-turn scores follow ``convrag.metrics.retrieval`` (trec_eval semantics). A turn whose subset has no
relevant document at all is left out and listed; a turn without a relevant document is excluded by the
metric and listed. Runs keep the best ``profile.top_k`` documents (all of the pool when ``None``), and never
fewer than the deepest cut-off asked for (``Recall@1000`` gets 1000 documents).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from convrag.errors import ConvragError, DataError
from convrag.evaluation.data import BenchmarkData, load_benchmark
from convrag.evaluation.profile import EvaluationProfile
from convrag.metrics.retrieval.compute import score_run
from convrag.retrievers import get_retriever
from convrag.strategies import format_queries, get_strategy

Run = dict[str, dict[str, float]]
HISTORY_STRATEGIES = ("history", "history+reasoning", "dialogue", "dialogue+rewrite", "rewrite", "llm-rewrite")


@dataclass
class Scored:
    """Everything the aggregations need: per-turn scores and runs of each (system, strategy)."""

    profile: EvaluationProfile
    data: BenchmarkData
    measures: list[str]
    strategies: list[str]
    per_turn: dict[str, dict[str, dict[str, dict[str, float]]]] = field(default_factory=dict)
    runs: dict[tuple[str, str], dict[str, Run]] = field(default_factory=dict)
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    excluded: dict[str, list[str]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def turn_info(self) -> dict[str, dict[str, Any]]:
        """Query id -> {domain, conversation_id, turn, and every label field of the turn}."""
        out = {}
        for t in self.data.turns:
            labels = {k: v for k, v in t.fields.items() if isinstance(v, (str, int, float, bool)) or v is None}
            out[t.qid] = {**labels, "domain": t.domain, "conversation_id": t.conversation_id, "turn": t.position}
        return out


def resolve_strategies(profile: EvaluationProfile, data: BenchmarkData, names: Sequence[str] | None) -> dict[str, str]:
    """Display name -> strategy spec. Default: the profile's strategies whose data is present (a ``field:``
    strategy needs its field on the turns). A name the profile does not define is a strategy spec itself."""
    known = {**profile.strategies, **profile.extra_strategies}

    def present(spec: str, every: bool = False) -> bool:
        """A ``field:`` strategy's field is on some turn (or, ``every``, on all of them)."""
        column = spec.partition("field:")[2]
        return not column or (all if every else any)(t.fields.get(column) for t in data.turns)

    if names is None:
        chosen = {n: s for n, s in profile.strategies.items() if present(s, every=True)}
        if not chosen:
            raise DataError(f"none of the strategies {list(profile.strategies)} has its data in the folder")
        return chosen
    chosen = {}
    for name in names:
        spec = known.get(name, name)
        get_strategy(spec)  # raises on unknown names
        if not present(spec):
            raise DataError(f"query strategy {name!r} reads field {spec!r}, which the folder's turns do not have "
                            f"(available: {[n for n, s in known.items() if present(s)]})")  # fmt: skip
        if get_strategy(spec).name in HISTORY_STRATEGIES and not any(t.history_string() for t in data.turns):
            raise DataError(f"query strategy {name!r} needs conversation history, and no turn of the folder has any "
                            "(MTRAG: build the <domain>-tasks configs too)")  # fmt: skip
        chosen[name] = spec
    return chosen


def _fit_counts(retriever: Any) -> dict[str, int]:
    """Statuses of the last search's query fitting (dense retrievers, or a composite's dense component)."""
    for r in [retriever, *getattr(retriever, "components", [])]:
        if getattr(r, "fit_stats", None):
            return dict(r.fit_stats)
    return {}


def _judged(qrels: Mapping[str, Mapping[str, int]], qids: Sequence[str]) -> bool:
    return any(v > 0 for q in qids for v in qrels.get(q, {}).values())


def score_runs(scored: Scored, system: str, strategy: str, runs: Mapping[str, Run]) -> None:
    """Score one system's runs ({subset: run}) into ``scored.per_turn[system][strategy]``."""
    data = scored.data
    per_query = scored.per_turn.setdefault(system, {}).setdefault(strategy, {})
    for s in data.subsets:
        qids = [t.qid for t in data.subset_turns(s)]
        if not _judged(data.qrels[s], qids):
            scored.excluded[s] = qids  # no turn of the subset has a relevant document: nothing to score
            continue
        result = score_run(runs.get(s, {}), {q: data.qrels[s].get(q, {}) for q in qids}, measures=scored.measures)
        per_query.update(result.per_query)
        scored.excluded[s] = sorted(set(qids) - set(result.per_query))
    scored.runs[(system, strategy)] = dict(runs)


def check_external_run(run: Mapping[str, Mapping[str, float]], data: BenchmarkData, name: str,
                       normalize: Any = None) -> dict[str, Run]:
    """Split an external run by subset; unknown query or document ids are a ``DataError`` naming the run."""
    subset_of = {t.qid: t.domain for t in data.turns}
    doc_ids = {s: {r["_id"] for r in rows} for s, rows in data.corpus.items()}
    out: dict[str, Run] = {s: {} for s in data.subsets}
    for qid, ranking in run.items():
        key = normalize(qid) if normalize else qid
        if key not in subset_of:
            raise DataError(f"run has unknown query id {qid!r}", name)
        s = subset_of[key]
        # ids qualified as <subset>:<id> (how runs over several subsets are written) map back to the subset's ids
        local = {(d[len(s) + 1:] if s and d.startswith(f"{s}:") and d not in doc_ids[s] else d): v
                 for d, v in ranking.items()}  # fmt: skip
        unknown = [d for d in local if d not in doc_ids[s]]
        if unknown:
            raise DataError(f"run for query {qid!r} has unknown doc ids {unknown[:5]} (not in the evaluated "
                            f"{data.corpus_kind[s]!r} corpus)", name)  # fmt: skip
        out[s][key] = local
    return out


def run_benchmark(
    folder: str,
    profile: EvaluationProfile,
    retrievers: Sequence[str] | None = None,
    strategies: Sequence[str] | None = None,
    measures: Sequence[str] | None = None,
    split: str | None = None,
    corpus: str = "auto",
    search: str | None = None,
    llm: Any = "default",
    on_rewrite_failure: str = "error",
    retriever_options: Mapping[str, Mapping[str, Any]] | None = None,
    top_k: int | None = None,
    progress: bool = True,
) -> Scored:
    """Load ``folder``, format every strategy's texts, run every retriever per subset and score every turn."""
    data = load_benchmark(folder, profile, split=split, corpus=corpus, search=search)
    chosen = resolve_strategies(profile, data, strategies)
    specs = list(profile.retrievers if retrievers is None else retrievers)
    profile.check_measures(list(measures or profile.measures))
    scored = Scored(profile, data, list(measures or profile.measures), list(chosen))
    texts, rewrite = {}, {}
    model = None
    for name, spec in chosen.items():
        if get_strategy(spec).needs_llm and model is None:
            from convrag.llm import LLM, get_llm

            model = llm if isinstance(llm, LLM) else get_llm(llm)
        formatted = format_queries(spec, data.turns, llm=model, progress=progress, on_failure=on_rewrite_failure)
        texts[name] = formatted.texts
        if get_strategy(spec).needs_llm:
            rewrite[name] = {"llm": model.spec, **formatted.to_dict()}
    scored.info = {
        "rewrite": next(reversed(rewrite.values())) if rewrite else None, "rewrites": rewrite, "strategy_specs": chosen,
        "strategy_layouts": {n: (get_strategy(s).fn.__doc__ or "").strip().splitlines()[0] for n, s in chosen.items()},
        "search": "pool" if data.pools is not None else "corpus",
        "top_k": profile.top_k if top_k is None else top_k,
    }  # fmt: skip
    deepest = max((int(m.split("@")[1]) for m in scored.measures if "@" in m), default=0)
    k = scored.info["top_k"]
    if k is not None and deepest > k:
        k = scored.info["top_k"] = deepest
    for spec in specs:
        start = time.perf_counter()
        retriever = get_retriever(spec, **dict((retriever_options or {}).get(spec, {})))
        runs: dict[str, dict[str, Run]] = {n: {} for n in chosen}
        fitting: dict[str, dict[str, int]] = {}
        for s in data.subsets:
            turns = data.subset_turns(s)
            retriever.index(data.corpus[s], show_progress=progress)
            pools = {t.qid: data.pools[t.qid] for t in turns} if data.pools is not None else None
            for name in chosen:
                queries = {t.qid: texts[name][t.qid] for t in turns}
                runs[name][s] = retriever.search(queries, top_k=k, pools=pools, show_progress=progress)
                for status, n in _fit_counts(retriever).items():
                    fitting.setdefault(name, {}).setdefault(status, 0)
                    fitting[name][status] += n
        for name in chosen:
            score_runs(scored, spec, name, runs[name])
        scored.configs[spec] = {**retriever.describe(), **({"query_fitting_counts": fitting} if fitting else {})}
        scored.seconds[spec] = time.perf_counter() - start
    return scored


def add_external(scored: Scored, name: str, strategy: str, runs: Mapping[str, Run]) -> None:
    """Score an external run ({subset: run}) as system ``name`` under ``strategy`` (e.g. ``run``)."""
    if name in scored.configs:
        raise ConvragError(f"external run name {name!r} is already used by a retriever or another run")
    score_runs(scored, name, strategy, runs)
    scored.configs[name] = {"type": f"external {strategy}"}


def merged_run(scored: Scored, system: str, strategy: str) -> Run:
    """One run over every subset, document ids qualified where subsets share an id (``BenchmarkData.doc_keys``)."""
    keys = scored.data.doc_keys
    out: Run = {}
    for s, run in scored.runs[(system, strategy)].items():
        for q, ranking in run.items():
            out[q] = {keys.get((s, d), d): v for d, v in ranking.items()}
    return out
