"""``convrag evaluate`` for RECOR: retrievers x query strategies over a folder written by ``convrag build recor``.

As in the paper (section 4.1.1), every domain is retrieved over its own corpus (the ``<domain>-corpus``
configs, whose ids need no domain prefix), every turn is scored with nDCG@10 (primary), MAP@10,
Recall@10 and MRR@10 (trec_eval semantics via ``convrag.metrics.retrieval``; MRR is cut at 10, as the
paper's Table 18 reports "all @10"), then averaged within each domain and macro-averaged over domains.
Turns without any relevant document are left out and listed; qrels that name a document absent from the
domain's corpus are kept (the document counts as relevant but cannot be retrieved) and counted.
See :mod:`convrag.evaluation.recor_tables` for the tables' definitions.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets

from convrag.errors import ConvragError, DataError
from convrag.evaluation import recor_tables as rt
from convrag.evaluation.recor_tables import render_tables
from convrag.metrics.retrieval.compute import score_run
from convrag.retrievers import get_retriever
from convrag.strategies import PAPER_STRATEGIES, Turn, format_queries, get_strategy, recor_turns

MEASURES = ("nDCG@10", "MAP@10", "Recall@10", "MRR@10")
SPLIT = "test"
TOP_K = 100
ASPECT_KEYS = ("num_aspects", "aspect_count", "aspects")

__all__ = ["MEASURES", "DomainData", "analyse", "evaluate_recor", "load_recor", "render_tables", "write_outputs"]


@dataclass
class DomainData:
    """One domain of a built RECOR folder: corpus rows, turns, qrels and per-conversation aspect counts."""

    domain: str
    corpus: list[dict[str, Any]]
    turns: list[Turn]
    qrels: dict[str, dict[str, int]]
    aspects: dict[str, int | None]
    missing_docs: int = 0


def _load(folder: str, config: str) -> list[dict[str, Any]]:
    dd = datasets.load_dataset(folder, config)
    if SPLIT not in dd:
        raise DataError(f"config {config!r} has no split {SPLIT!r} (has {sorted(dd)})", folder)
    return dd[SPLIT].to_list()


def aspect_count(conversation: Mapping[str, Any]) -> int | None:
    """Number of semantic aspects of a conversation, if its row (or its metadata) carries one."""
    for where in (conversation, conversation.get("metadata") or {}):
        for key in ASPECT_KEYS:
            value = where.get(key) if isinstance(where, Mapping) else None
            if isinstance(value, (list, tuple)):
                return len(value)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def load_recor(folder: str | Path, domains: Sequence[str] | None = None) -> dict[str, DomainData]:
    """Read the ``<domain>-{queries,qrels,corpus,conversations}`` configs of every (or the given) domain."""
    folder = str(folder)
    names = set(datasets.get_dataset_config_names(folder))
    found = sorted({n.rsplit("-", 1)[0] for n in names if n.endswith("-queries")} - {"all"})
    if domains:
        unknown = sorted(set(domains) - set(found))
        if unknown:
            raise ConvragError(f"{folder} has no configs for domains {unknown}; it has {found}")
        found = [d for d in found if d in domains]
    if not found:
        raise ConvragError(f"{folder} holds no per-domain RECOR configs (<domain>-queries); build it with "
                           "`convrag build recor` (all configs)")  # fmt: skip
    out = {}
    for d in found:
        need = [f"{d}-{v}" for v in ("queries", "qrels", "corpus", "conversations")]
        if not set(need) <= names:
            raise ConvragError(f"{folder} lacks configs {sorted(set(need) - names)}")
        queries, qrels_rows, corpus, convs = (_load(folder, c) for c in need)
        turns = recor_turns(queries, convs)
        qids = {t.qid for t in turns}
        doc_ids = {row["_id"] for row in corpus}
        qrels: dict[str, dict[str, int]] = {}
        missing = 0
        for line, row in enumerate(qrels_rows, start=1):
            qid, did = str(row["query-id"]), str(row["corpus-id"])
            if qid not in qids:
                raise DataError(f"qrels row names unknown query {qid!r}", f"{folder}/{d}-qrels", line)
            if did in qrels.setdefault(qid, {}):
                raise DataError(f"duplicate qrels pair ({qid}, {did})", f"{folder}/{d}-qrels", line)
            qrels[qid][did] = int(row["score"])
            missing += did not in doc_ids
        aspects = {str(c["conversation_id"]): aspect_count(c) for c in convs}
        out[d] = DomainData(d, corpus, turns, qrels, aspects, missing)
    return out


def analyse(per_turn: Mapping[str, Mapping[str, Mapping[str, Mapping[str, float]]]],
            turns: Mapping[str, Mapping[str, Any]], measures: Sequence[str] = MEASURES,
            n_bootstrap: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Every aggregate and table from ``per_turn[retriever][strategy][qid][measure]`` and turn info."""
    retrievers = list(per_turn)
    strategies = list(next(iter(per_turn.values()))) if per_turn else []
    qids = sorted(next(iter(per_turn[retrievers[0]].values()))) if strategies else []
    for r in retrievers:
        for s in strategies:
            if sorted(per_turn[r].get(s, {})) != qids:
                raise ConvragError(f"{r} / {s} is not scored on the same turns as the others")
    n_turns: dict[str, int] = {}
    for q in qids:
        n_turns[str(turns[q]["domain"])] = n_turns.get(str(turns[q]["domain"]), 0) + 1
    systems = {r: {s: rt.system_summary(per_turn[r][s], turns, measures, n_bootstrap, seed) for s in strategies}
               for r in retrievers}  # fmt: skip
    average = {}
    for s in strategies:
        avg = rt.average_over_retrievers(per_turn, s, rt.PRIMARY)
        average[s] = rt.macro_bootstrap(rt._by_domain(avg, turns, rt.PRIMARY), n_bootstrap, seed).to_dict()
    failure = {}
    if "history+reasoning" in strategies:
        failure["paper"] = rt.failure_analysis(rt.best_scores(per_turn, ["history+reasoning"]), turns,
                                               "retrievers with History+Reasoning")  # fmt: skip
    failure["any"] = rt.failure_analysis(rt.best_scores(per_turn, strategies), turns,
                                         "every evaluated retriever x strategy")  # fmt: skip
    return {
        "measures": list(measures), "primary": rt.PRIMARY, "retrievers": retrievers, "strategies": strategies,
        "domains": sorted(n_turns), "n_turns": dict(sorted(n_turns.items())), "n_bootstrap": n_bootstrap,
        "seed": seed, "systems": systems, "average": average,
        "significance": rt.paired_rows(per_turn, turns, strategies, seed=seed),
        "turn_position": rt.turn_positions(per_turn, turns, strategies),
        "complexity": rt.complexity(per_turn, turns, strategies), "failure_analysis": failure,
    }  # fmt: skip


def _doc_key(data: Mapping[str, DomainData]) -> dict[tuple[str, str], str]:
    """(domain, doc id) -> id in TREC runs: ``<domain>:<id>`` where two domains share an id with other text
    (the ``all-corpus`` convention of the builder), else the id itself."""
    seen: dict[str, set[str]] = {}
    for d in data.values():
        for row in d.corpus:
            seen.setdefault(row["_id"], set()).add(hashlib.sha1(str(row["text"]).encode()).hexdigest())
    return {(d.domain, row["_id"]): (f"{d.domain}:{row['_id']}" if len(seen[row["_id"]]) > 1 else row["_id"])
            for d in data.values() for row in d.corpus}  # fmt: skip


def evaluate_recor(
    folder: str | Path,
    retrievers: Sequence[str] = ("bm25", "dense"),
    strategies: Sequence[str] = PAPER_STRATEGIES,
    domains: Sequence[str] | None = None,
    llm: Any = "default",
    n_bootstrap: int = 1000,
    seed: int = 0,
    retriever_options: Mapping[str, Mapping[str, Any]] | None = None,
    progress: bool = True,
    on_rewrite_failure: str = "error",
) -> dict[str, Any]:
    """Run every retriever with every strategy on every domain of ``folder``; JSON-ready results.

    ``llm``: spec or :class:`~convrag.llm.LLM` for the ``rewrite`` strategy. ``on_rewrite_failure``:
    ``"error"`` or ``"baseline"`` (see :func:`convrag.strategies.format_queries`). The TREC runs are kept
    under ``results["_runs"]`` for :func:`write_outputs` (not written to results.json).
    """
    strategies = [get_strategy(s).name for s in strategies]
    if not retrievers or not strategies:
        raise ConvragError("need at least one retriever and one strategy")
    data = load_recor(folder, domains)
    all_turns = [t for d in data.values() for t in d.turns]
    info = {t.qid: {"domain": t.domain, "conversation_id": t.conversation_id, "turn": t.position,
                    "aspects": data[t.domain].aspects.get(t.conversation_id)} for t in all_turns}  # fmt: skip
    texts, rewrite = {}, None
    for s in strategies:
        model = None
        if get_strategy(s).needs_llm:
            from convrag.llm import LLM, get_llm

            model = llm if isinstance(llm, LLM) else get_llm(llm)
        formatted = format_queries(s, all_turns, llm=model, progress=progress, on_failure=on_rewrite_failure)
        texts[s] = formatted.texts
        if model is not None:
            rewrite = {"llm": model.spec, **formatted.to_dict()}
    keys = _doc_key(data)
    per_turn: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    runs: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    configs, seconds, excluded = {}, {}, {}
    for spec in retrievers:
        start = time.perf_counter()
        retriever = get_retriever(spec, **dict((retriever_options or {}).get(spec, {})))
        per_turn[spec] = {s: {} for s in strategies}
        for d in data.values():
            retriever.index(d.corpus, show_progress=progress)
            qids = [t.qid for t in d.turns]
            if not any(v > 0 for q in qids for v in d.qrels.get(q, {}).values()):
                excluded[d.domain] = qids  # no turn of the domain has a relevant document: nothing to score
                continue
            for s in strategies:
                run = retriever.search({q: texts[s][q] for q in qids}, top_k=TOP_K, show_progress=progress)
                result = score_run(run, {q: d.qrels.get(q, {}) for q in qids}, measures=list(MEASURES))
                per_turn[spec][s].update(result.per_query)
                excluded[d.domain] = sorted(set(qids) - set(result.per_query))
                name = f"{spec}|{s}"
                runs.setdefault(name, {}).update(
                    {q: {keys[(d.domain, doc)]: score for doc, score in ranking.items()} for q, ranking in run.items()})
        configs[spec], seconds[spec] = retriever.describe(), time.perf_counter() - start
    results = analyse(per_turn, info, MEASURES, n_bootstrap, seed)
    results.update({
        "split": SPLIT, "top_k": TOP_K, "retriever_configs": configs, "seconds": seconds,
        "excluded_turns": excluded, "qrels_missing_documents": {d.domain: d.missing_docs for d in data.values()},
        "strategy_layouts": {s: (get_strategy(s).fn.__doc__ or "").strip().splitlines()[0] for s in strategies},
        "rewrite": rewrite, "turns": info, "per_turn": per_turn, "_runs": runs,
    })  # fmt: skip
    return results


def _strict(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Mapping):
        return {str(k): _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    return obj


def write_outputs(results: Mapping[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """Write results.json (strict JSON: NaN/inf as null), results.md, turn_position.png and
    runs/<retriever>__<strategy>.trec; returns the paths written."""
    from convrag.metrics.retrieval.trec import safe_token, write_run

    out = Path(out_dir)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "markdown": out / "results.md", "plot": out / "turn_position.png"}
    body = {k: v for k, v in results.items() if k != "_runs"}
    paths["json"].write_text(json.dumps(_strict(body), indent=1, allow_nan=False) + "\n", encoding="utf-8")
    paths["markdown"].write_text(render_tables(results), encoding="utf-8")
    rt.plot_turn_positions(results, str(paths["plot"]))
    for name, run in (results.get("_runs") or {}).items():
        spec, strategy = name.split("|", 1)
        file = safe_token(f"{spec}__{strategy}") + ".trec"
        write_run(run, out / "runs" / file, tag=safe_token(name))
        paths[f"run:{name}"] = out / "runs" / file
    return paths
