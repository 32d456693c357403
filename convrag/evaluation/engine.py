"""The one retrieval evaluation path of every benchmark (``convrag evaluate``).

turns (history, gold documents, labels) -> query strategies -> retrievers over each subset's corpus (or each turn's
pool) -> per-turn scores -> the profile's aggregation -> the profile's tables, plots and runs. Nothing here knows a
benchmark by name: what differs is the :class:`~convrag.builders.profile.EvaluationProfile` the builder declared
(read from the folder's README).

Per-turn scores follow ``convrag.metrics.retrieval`` (trec_eval semantics). A turn whose subset has no relevant
document at all is left out and listed; a turn without a relevant document is excluded by the metric and listed.
Runs keep the best ``profile.top_k`` documents (all of the pool when ``None``), and never fewer than the deepest
cut-off asked for (``Recall@1000`` gets 1000 documents). External runs and submissions (:class:`External`) are
checked against the benchmark before any retriever runs (:func:`check_external`). Coverage (:func:`coverage`: queries
ranked of the split's queries; missing ones score 0 in every mean, trec_eval's ``-c``) is recorded for every system.
A rerank stage (``--rerank``, :mod:`convrag.evaluation.rerank`) adds each retriever's reranked runs as its own system
``<retriever>><name>``. A retriever's system is named by its spec with every model written by its name, never its path
(:func:`convrag.retrievers.model_record.system_names`: ``dense:../m/x`` is ``dense:x``); ``Scored.names`` maps a spec
to its system.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from convrag.builders.profile import EvaluationProfile
from convrag.core.errors import ConvragError, DataError, EmptyResult
from convrag.core.progress import scope as progress_scope
from convrag.evaluation.data import BenchmarkData, Corpora, load_benchmark
from convrag.evaluation.rerank import cut, load_stages, merge_notes, timed
from convrag.evaluation.rerank import llm_note as rerank_note
from convrag.metrics.retrieval.compute import score_run
from convrag.retrievers import get_retriever
from convrag.retrievers.model_record import system_names
from convrag.retrievers.strategies import format_queries, get_strategy

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
    coverage: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: retriever spec -> its system name (models by name, never by path); ``renamed``: system -> why it was renamed
    names: dict[str, str] = field(default_factory=dict)
    renamed: dict[str, str] = field(default_factory=dict)

    def system(self, spec: str) -> str:
        """The system name of retriever ``spec`` (``spec`` itself for a name no retriever spec has)."""
        return self.names.get(spec, spec)

    def display_name(self, system: str, strategy: str) -> str:
        """``system`` for a benchmark with one strategy (and for external runs), else ``system|strategy``."""
        single = len(self.strategies) == 1 and len(self.profile.strategies) == 1
        return system if single or strategy in ("run", "submission") else f"{system}|{strategy}"

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


def coverage(data: BenchmarkData, runs: Mapping[str, Run], examples: int = 5) -> dict[str, Any]:
    """How many of the split's queries a system ranked: ``queries``, ``ranked``, ``missing`` (no or an empty
    ranking), ``missing_judged`` (missing queries with a relevant document: they score 0) and example ids."""
    judged = {q for rels in data.qrels.values() for q, r in rels.items() if any(v > 0 for v in r.values())}
    missing = [t.qid for t in data.turns if not runs.get(t.domain, {}).get(t.qid)]
    return {"queries": len(data.turns), "ranked": len(data.turns) - len(missing), "missing": len(missing),
            "missing_judged": sum(1 for q in missing if q in judged),
            "missing_examples": missing[:examples]}  # fmt: skip


def score_runs(scored: Scored, system: str, strategy: str, runs: Mapping[str, Run]) -> None:
    """Score one system's runs ({subset: run}) into ``scored.per_turn[system][strategy]``; record its coverage."""
    data = scored.data
    scored.coverage[scored.display_name(system, strategy)] = coverage(data, runs)
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


@dataclass
class External:
    """A run or submission given on the command line: its ranking per query id as written in the file, where it
    came from, and how to find the file line of a query (``locate(qid, doc)``; ``None`` when unknown)."""

    name: str
    kind: str  # "run" or "submission"
    source: str
    run: Mapping[str, Mapping[str, float]]
    locate: Callable[[str, str | None], int | None] = lambda qid, doc: None
    warnings: list[str] = field(default_factory=list)

    def error(self, message: str, qid: str, doc: str | None = None) -> DataError:
        return DataError(message, self.source, self.locate(qid, doc))


def check_external(ext: External, data: BenchmarkData, complete: Mapping[str, bool],
                   normalize: Callable[[str], str] | None = None) -> dict[str, Run]:
    """Split ``ext`` by subset after checking it against the benchmark: an empty run, unknown query ids, a query
    given twice (two spellings of an MTRAG task id), a document of another subset's corpus, a document outside the
    query's pool (``search=pool``) and, over a complete corpus, an unknown document are errors naming the file and
    line. ``complete[subset]``: whether the evaluated corpus is the whole collection; over one that is only part of
    it (MTRAG's ``cited`` passages), unknown documents count as not relevant, as the official scorers do, and are
    counted."""
    if not ext.run:
        raise DataError(f"the {ext.kind} ranks no query: nothing to score", ext.source)
    subset_of = {t.qid: t.domain for t in data.turns}
    doc_ids = {s: data.doc_ids(s) for s in data.subsets}
    pools = {q: set(p) for q, p in data.pools.items()} if data.pools is not None else None
    out: dict[str, Run] = {s: {} for s in data.subsets}
    unknown: list[tuple[str, str]] = []
    for qid, ranking in ext.run.items():
        try:
            key = normalize(qid) if normalize else qid
        except DataError:
            key = qid
        if key not in subset_of:
            raise ext.error(f"unknown query id {qid!r} (not a query of split {data.split!r})", qid)
        s = subset_of[key]
        if key in out[s]:
            raise ext.error(f"query {key!r} appears twice (ids {qid!r} and another spelling of it)", qid)
        local: Run = {}
        missing: list[str] = []
        for doc, value in ranking.items():
            # ids qualified as <subset>:<id> (how runs over several subsets are written) map back to the subset's
            d = doc[len(s) + 1:] if s and doc.startswith(f"{s}:") and doc not in doc_ids[s] else doc
            if d not in doc_ids[s]:
                other = next((o for o in data.subsets if o != s and d in doc_ids[o]), None)
                if other is not None:
                    raise ext.error(f"document {doc!r} is in the {other!r} corpus, but query {qid!r} is a {s!r} "
                                    "query", qid, doc)  # fmt: skip
                missing.append(doc)
            elif pools is not None and d not in pools[key]:
                raise ext.error(f"document {doc!r} is not in the candidate pool of query {qid!r} (the benchmark is "
                                "evaluated with --search pool: rank each query's own pool)", qid, doc)  # fmt: skip
            local[d] = value
        if missing and complete.get(s, True):
            raise ext.error(f"query {qid!r} has unknown doc ids {missing[:5]} (not in the evaluated "
                            f"{data.corpus_kind[s]!r} corpus)", qid, missing[0])  # fmt: skip
        unknown += [(qid, doc) for doc in missing]
        out[s][key] = local
    if unknown:
        kinds = sorted({data.corpus_kind[s] for s in data.subsets})
        ext.warnings.append(f"{len(unknown)} ranked documents of {len({q for q, _ in unknown})} queries are not in "
                            f"the evaluated corpus ({', '.join(kinds)}: part of the collection); they count as not "
                            f"relevant. E.g. {', '.join(f'{q} {d}' for q, d in unknown[:3])}")  # fmt: skip
    return out


def llm_note(spec: str, strategies: Sequence[str]) -> dict[str, Any]:
    """The LLM of the LLM-based strategies, whether it is a placeholder, and the one-line note every table
    carries (a warning with what to do for a placeholder)."""
    from convrag.llm.identity import placeholder_llm  # the LLM layer only where an LLM is named

    placeholder = placeholder_llm(spec)
    names = ("query strategies " if len(strategies) > 1 else "query strategy ") + ", ".join(strategies)
    uses = "use" if len(strategies) > 1 else "uses"
    if placeholder is None:
        note = f"The {names} {uses} the LLM `{spec}`."
    else:
        note = (f"WARNING: the {names} {uses} the LLM `{spec}` ({placeholder}): these figures only show the "
                "plumbing, they measure nothing. Point --llm at a real model, e.g. --llm "
                "openai:MODEL@http://HOST:8000/v1 or --llm hf:PATH (or set CONVRAG_LLM).")  # fmt: skip
    return {"spec": spec, "strategies": list(strategies), "placeholder": placeholder, "note": note}


def run_benchmark(
    folder: str,
    profile: EvaluationProfile,
    retrievers: Sequence[str] | None = None,
    strategies: Sequence[str] | None = None,
    measures: Sequence[str] | None = None,
    split: str | None = None,
    corpus: str = "auto",
    search: str | None = None,
    llm: Any = None,
    on_rewrite_failure: str = "error",
    retriever_options: Mapping[str, Mapping[str, Any]] | None = None,
    top_k: int | None = None,
    progress: bool = True,
    data: BenchmarkData | None = None,
    rerank: Sequence[Any] | None = None,
    rerank_device: str | None = None,
) -> Scored:
    """Load ``folder`` (unless ``data`` is given), format every strategy's texts, run every retriever per subset
    and score every turn. ``llm``: an LLM or spec (``None``: ``$CONVRAG_LLM``, else the embedded default).
    ``rerank``: ``--rerank`` specs (:mod:`convrag.evaluation.rerank`), loaded before any other work; each
    retriever's reranked runs are scored as system ``<retriever>><name>`` right after it."""
    if data is None:
        data = load_benchmark(folder, profile, split=split, corpus=corpus, search=search)
    chosen = resolve_strategies(profile, data, strategies)
    specs = list(profile.retrievers if retrievers is None else retrievers)
    profile.check_measures(list(measures or profile.measures))
    stages = load_stages(rerank or [], llm=llm, device=rerank_device)
    scored = Scored(profile, data, list(measures or profile.measures), list(chosen))
    scored.names, scored.renamed = system_names(specs)
    texts, rewrite = {}, {}
    model = None
    for name, spec in chosen.items():
        if get_strategy(spec).needs_llm and model is None:
            from convrag.llm import LLM, get_llm

            model = llm if isinstance(llm, LLM) else get_llm(llm)
        with progress_scope(name):
            formatted = format_queries(spec, data.turns, llm=model, progress=progress, on_failure=on_rewrite_failure)
        texts[name] = formatted.texts
        if get_strategy(spec).needs_llm:
            rewrite[name] = {"llm": model.spec, **formatted.to_dict()}
    scored.info = {
        "rewrite": next(reversed(rewrite.values())) if rewrite else None, "rewrites": rewrite, "strategy_specs": chosen,
        "llm": llm_note(model.spec, list(rewrite)) if model is not None else None,
        "strategy_layouts": {n: (get_strategy(s).fn.__doc__ or "").strip().splitlines()[0] for n, s in chosen.items()},
        "search": "pool" if data.pools is not None else "corpus",
        "top_k": profile.top_k if top_k is None else top_k,
    }  # fmt: skip
    deepest = max((int(m.split("@")[1]) for m in scored.measures if "@" in m), default=0)
    k = scored.info["top_k"]
    if k is not None and deepest > k:
        k = scored.info["top_k"] = deepest
    if stages:
        scored.info["llm"] = merge_notes(scored.info["llm"], rerank_note(stages, specs))
    search_k = k if k is None or not stages else max(k, *(st.spec.depth for st in stages))
    for spec in specs:
        start, system = time.perf_counter(), scored.system(spec)
        retriever = get_retriever(spec, **dict((retriever_options or {}).get(spec, {})))
        runs: dict[str, dict[str, Run]] = {n: {} for n in chosen}
        fitting: dict[str, dict[str, int]] = {}
        for s in data.subsets:
            turns = data.subset_turns(s)
            with progress_scope(s, system):  # bars read "<benchmark> · <subset> · <retriever> · <strategy>: <stage>"
                # one subset's rows at a time, not held after indexing (Corpora.read)
                retriever.index(data.corpus.read(s) if isinstance(data.corpus, Corpora) else data.corpus[s],
                                show_progress=progress)  # fmt: skip
            pools = {t.qid: data.pools[t.qid] for t in turns} if data.pools is not None else None
            for name in chosen:
                queries = {t.qid: texts[name][t.qid] for t in turns}
                with progress_scope(s, system, name):
                    runs[name][s] = retriever.search(queries, top_k=search_k, pools=pools, show_progress=progress)
                for status, n in _fit_counts(retriever).items():
                    fitting.setdefault(name, {}).setdefault(status, 0)
                    fitting[name][status] += n
        for name in chosen:
            score_runs(scored, system, name, cut(runs[name], k) if search_k != k else runs[name])
        scored.configs[system] = {**retriever.describe(), **({"query_fitting_counts": fitting} if fitting else {})}
        scored.seconds[system] = time.perf_counter() - start
        for stage in stages:
            _add_reranked(scored, stage, system, runs, texts, k)
    return scored


def _delta(after: Any, before: Any) -> Any:
    """``after`` less ``before``, number by number (nested mappings too); anything else as in ``after``."""
    if isinstance(after, Mapping):
        return {k: _delta(v, before.get(k) if isinstance(before, Mapping) else None) for k, v in after.items()}
    if isinstance(after, (int, float)) and not isinstance(after, bool) and isinstance(before, (int, float)):
        return after - before
    return after


def _add_reranked(scored: Scored, stage: Any, spec: str, runs: Mapping[str, Mapping[str, Run]],
                  texts: Mapping[str, Mapping[str, str]], k: int | None) -> None:
    """Rerank the runs ({strategy: {subset: run}}) of the retriever whose system is ``spec`` with ``stage`` and score
    them as system ``<spec>><name>``: runs cut to ``k``, seconds = the first stage's plus the reranking's, and
    reranking windows that kept the first-stage order (failed LLM calls, unusable replies) as a coverage warning."""
    data = scored.data
    before = stage.describe()
    reranked, seconds = timed(stage, runs, texts,
                              lambda s: data.corpus.read(s) if isinstance(data.corpus, Corpora) else data.corpus[s])
    name = stage.spec.system(spec)
    for strategy in reranked:
        score_runs(scored, name, strategy, cut(reranked[strategy], k))
    after = stage.describe()
    for counts in ("cache", "report"):  # this retriever's share of the stage's running counts
        if counts in after:
            after[counts] = _delta(after[counts], before[counts])
    scored.configs[name] = {"first_stage": spec, "reranker": after}
    scored.seconds[name] = scored.seconds[spec] + seconds
    failed, windows = after.get("report", {}).get("failed", 0), after.get("report", {}).get("windows", 0)
    if windows and failed == windows:
        raise EmptyResult(f"reranker {stage.spec.name!r} on {spec}: all {windows} reranking windows failed "
                          f"({after['report'].get('failures')}), so every ranking kept the first-stage order and "
                          f"{name!r} would only repeat {spec!r}; nothing was written")  # fmt: skip
    if failed:
        for strategy in reranked:
            scored.coverage[scored.display_name(name, strategy)].setdefault("warnings", []).append(
                f"{failed} of {after['report'].get('windows', 0)} reranking windows kept the first-stage order "
                f"(failures: {after['report'].get('failures')})")  # fmt: skip


def add_external(scored: Scored, ext: External, runs: Mapping[str, Run]) -> None:
    """Score a checked external run ({subset: run}) as system ``ext.name``; its file and warnings go with its
    coverage."""
    if ext.name in scored.configs:
        raise ConvragError(f"external run name {ext.name!r} is already used by a retriever or another run")
    score_runs(scored, ext.name, ext.kind, runs)
    scored.configs[ext.name] = {"type": f"external {ext.kind}", "source": ext.source}
    scored.coverage[ext.name].update(source=ext.source, kind=ext.kind, warnings=list(ext.warnings))


def merged_run(scored: Scored, system: str, strategy: str) -> Run:
    """One run over every subset, document ids qualified where subsets share an id (``BenchmarkData.doc_keys``)."""
    keys = scored.data.doc_keys
    out: Run = {}
    for s, run in scored.runs[(system, strategy)].items():
        for q, ranking in run.items():
            out[q] = {keys.get((s, d), d): v for d, v in ranking.items()}
    return out
