"""The ``convrag select`` command: from a corpus, real queries and a strategy space to the chosen retriever.

The output folder (files: :func:`run_command`) is written beside it under a temporary name and swapped in when
complete (:func:`convrag.core.out_folder.replacing`), so a failed run leaves nothing. ``--out`` is claimed by
:func:`convrag.core.out_folder.claim_out` once the inputs are read: never an input or a folder holding one, never a
user's non-empty folder; a folder an earlier ``convrag select`` wrote is replaced whole.

``--judge oracle:EVIDENCE.jsonl`` (or ``judge: {model: "oracle:..."}`` in the space, a relative path read from the
space file's folder) judges with :class:`convrag.seara.evidence.EvidenceOracle`: no LLM call, the evidence spans are
the facts; every query needs a line in the file (else exit 2, nothing written); spans found in no document are
counted and reported. When a pool cannot be scored (every query has a failed judgment, or its configurations differ
in chunking and no query has a usable fact), the pools judged so far and ``report.json`` (``"complete": false`` and
the reason) are written, no leaderboard or choice, and :class:`~convrag.core.errors.EmptyResult` names the pool and
the counts (exit 1).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

from convrag.core.errors import ConvragError, EmptyResult
from convrag.core.out_folder import check_results_out, claim_out, claimed_out, replacing

COMMAND = "select"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "pool"


def _read_whole(args: Any) -> list[Any]:
    """The input folders whose every file select reads: a corpus folder (its outputs would be read back)."""
    return [f for f in (args.corpus, args.queries) if f is not None and Path(f).is_dir()]


def _curves(result: Any) -> dict[str, dict[str, Any]]:
    return {name: {"k": s["curve"]["k"], "recall": s["curve"]["recall_micro"],
                   "precision": s["curve"]["precision_micro"], "pr_auc": s["pr_auc"]}
            for name, s in result.scores.items()}  # fmt: skip


def write_pool(folder: Path, result: Any, space: Any, qrels: bool = True, judge: dict[str, Any] | None = None) -> None:
    """One pool's leaderboard, PR curves and (``qrels``) pseudo-qrels (Parquet, JSON, TREC) under ``folder``; the
    ``judge`` (:func:`convrag.seara.report.judge_identity`) is named in each."""
    from convrag.seara.qrels import write_pseudo_qrels
    from convrag.seara.report import plot_pr_curves, write_leaderboard

    folder.mkdir(parents=True, exist_ok=True)
    costs = {c.name: space.cost(c) for c in result.configurations}
    write_leaderboard(folder, result.scores, bootstrap=result.boot, costs=costs, judge_calls=result.judge_calls(),
                      facts=result.fact_scores, fact_bootstrap=result.fact_boot,
                      headline=result.measure if result.fact_scores is not None else "chunks",
                      notes=_fact_notes(result), judge=judge)  # fmt: skip
    note = ("chunk-level curves; this pool chooses by fact-level PR-AUC (leaderboard.md)"
            if result.fact_scores is not None and result.measure == "facts" else None)
    plot_pr_curves(folder / "pr_curves.png", _curves(result), f"SEARA {result.label}", result.pseudo.signature,
                   judge=judge, note=note)
    if qrels:
        write_pseudo_qrels(result.pseudo, folder)


def _fact_notes(result: Any) -> list[str]:
    """Leaderboard notes on a pool's facts: where they came from, failed extractions, unfound evidence."""
    facts = result.facts
    if facts is None:
        return [f"Measure: {result.measure_reason}. No fact column in this pool: facts are made where chunkings "
                "differ (or in every pool with judge.facts: always), when the judge can give them."]
    counts = facts.counts
    where = (f"{counts.get('found', 0):,} of {counts.get('spans', 0):,} evidence spans located in the corpus"
             if facts.source == "evidence" else
             f"{counts.get('accepted', 0):,} verbatim quotes accepted from {counts.get('pairs', 0):,} judged-relevant "
             f"pairs ({counts.get('rejected_not_verbatim', 0):,} not verbatim, {counts.get('no_quotes', 0):,} "
             "without a quote)")  # fmt: skip
    notes = [f"Measure: {result.measure_reason}.",
             f"Minimal facts: {len(facts.factset.facts):,} over {len(facts.factset.by_query):,} queries; {where}.",
             "The PR curves (pr_curves.png) are the chunk-level ones."]
    if facts.failed_queries:
        notes.append(f"Failed fact extraction ({', '.join(facts.failed_queries)}): left out of the fact-level "
                     "scores, nothing filled in.")
    return notes


def _dry_run(space: Any, n_queries: int, echo: Any) -> None:
    """Configurations per pool and upper bounds of judge calls (|Q| x configurations x K per pool)."""
    k = space.depth
    if space.strategy == "grid":
        pools = [("grid", len(space.full_grid()), n_queries)]
    elif space.strategy == "staged":
        pools = [(f"stage {s.name}", math.prod(len(v) for v in s.vary.values()), n_queries) for s in space.stages]
        final = 1 + space.keep_per_stage * len(space.stages) + len(space.baselines)
        pools.append(("final common pool", final, n_queries))
    else:
        pools, n = [], max(1, math.ceil(space.racing["start"] * n_queries))
        while True:
            pools.append((f"racing round {len(pools) + 1}", len(space.full_grid()), n))
            if n >= n_queries:
                break
            n = min(n_queries, math.ceil(n * space.racing["factor"]))
    echo(f"Dry run: {space.strategy} search, depth {k}; nothing is called or written.")
    echo(f"{'pool':<28} {'configurations':>14} {'queries':>8} {'judgments at most':>18}")
    for label, configs, queries in pools:
        echo(f"{label:<28} {configs:>14} {queries:>8} {configs * queries * k:>18,}")
    echo("Judgments at most = configurations x queries x depth; identical (query, chunk text) pairs are judged once "
         "across pools (cache), so the real count is lower; each pool prints its exact count and cost before judging."
         + (" Racing counts every configuration in every round (an upper bound)." if space.strategy == "racing"
            else "") + (" Staged pool sizes count every listed option (best@ references are one)."
                         if space.strategy == "staged" else ""))  # fmt: skip
    echo("Fact extraction (fact-level scores; they choose in a pool whose configurations differ in chunking): at most "
         "one LLM call per judged-relevant (query, chunk) pair, so at most the judgments above and usually far fewer; "
         "each pool prints its exact count before extracting; none with an oracle:EVIDENCE judge.")
    llm_options = [(d, o) for d in ("rewriter", "reranker") for o in space.options[d].values() if o.kind == "llm"]
    for dim, option in llm_options:
        if dim == "rewriter":
            echo(f"rewriter {option.name}: at most {n_queries:,} LLM calls (one per query)")
        else:
            window, stride = int(option.params.get("window", 20)), int(option.params.get("stride", 10))
            depth = max(k, int(option.params.get("depth", max(k, window))))
            windows = 1 + max(0, math.ceil((depth - window) / stride))
            echo(f"reranker {option.name}: at most {windows} LLM calls per query and retrieval setting "
                 f"(window {window}, stride {stride}, depth {depth})")


def _pool_entry(p: Any) -> dict[str, Any]:
    """One judged pool in report.json."""
    return {"label": p.label, "configurations": [c.name for c in p.configurations], "queries": len(p.query_ids),
            "signature": p.pseudo.signature, "winner": None if p.pick is None else p.pick.winner, "measure": p.measure,
            "measure_reason": p.measure_reason, "failed_queries": p.failed_queries, "judgments": p.pseudo.summary(),
            "facts": None if p.facts is None else p.facts.summary()}


def _fact_totals(pools: list[Any]) -> dict[str, Any]:
    """Fact extraction summed over pools: outcome counts and the extractor's LLM figures (calls, tokens, cost); for
    an evidence oracle, the last pool's span counts."""
    total: dict[str, Any] = {"pools": sum(p.facts is not None for p in pools), "failed_queries": 0}
    for p in pools:
        if p.facts is None:
            continue
        total["failed_queries"] += len(p.facts.failed_queries)
        if p.facts.source == "evidence":  # the same spans in every pool: the last pool's counts, not a sum
            total.update(p.facts.counts)
            continue
        for source in (p.facts.counts, p.facts.llm or {}):
            for key, value in source.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    total[key] = total.get(key, 0) + value
    return total


def _write_result(tmp: Path, found: Any, space: Any, settings: dict[str, Any], runner: Any) -> None:
    """A finished search into ``tmp``: the final pool's leaderboard and curves, chosen.yaml, the interaction plot
    and report.json (``settings`` first)."""
    from convrag.seara.report import plot_interaction, write_choice
    from convrag.synthesis.engine.pipeline import write_json_atomic

    final, chosen = found.final, found.chosen
    judge = settings.get("judge_model")
    write_pool(tmp, final, space, qrels=False, judge=judge)
    figures = {k: v for k, v in final.scores[chosen.name].items() if isinstance(v, (int, float))}
    if final.fact_scores is not None:
        figures.update({f"fact_{k}": v for k, v in final.fact_scores[chosen.name].items()
                        if isinstance(v, (int, float))})
    write_choice(tmp / "chosen.yaml", chosen.name, chosen.as_dict(), figures, final.pseudo.signature or "",
                 reason=final.pick.reason, measure=final.measure, measure_reason=final.measure_reason, judge=judge)
    factorial = found.factorial
    if factorial is not None:
        varied = list(factorial.effects["levels"])
        plot_interaction(tmp / "interaction.png", factorial.effects, varied[0], varied[1],
                         title=f"SEARA {factorial.label}: {varied[0]} x {varied[1]} ({factorial.measure}-level)",
                         pool_signature=factorial.pseudo.signature)  # fmt: skip
    write_json_atomic(tmp / "report.json", {
        "complete": True, **settings, "judge_totals": found.judge_totals(), "fact_totals": _fact_totals(found.pools),
        "chosen": chosen.name, "measure": final.measure, "measure_reason": final.measure_reason,
        "reason": final.pick.reason, "pools": [_pool_entry(p) for p in found.pools], "rounds": found.rounds,
        "runner": runner.report(),
        "factorial": None if factorial is None else {"pool": factorial.label, "measure": factorial.measure,
                                                     **factorial.effects}})  # fmt: skip


def _space_judge(space: Any) -> str | None:
    """The space's judge model, an ``oracle:`` path read from the space file's folder when relative."""
    model = space.judge["model"]
    if model == "default":
        return None
    prefix = "oracle:"
    if isinstance(model, str) and model.startswith(prefix):
        path = Path(model[len(prefix):]).expanduser()
        return prefix + str(path if path.is_absolute() else Path(space.source).parent / path)
    return model


def _llm_report(judge: Any) -> dict[str, Any] | None:
    """The judge LLM's report, None for a judge without an LLM (an evidence oracle)."""
    report = getattr(judge, "report", None)
    return report.to_dict() if report is not None else None


def run_command(args: argparse.Namespace) -> int:
    """``convrag select``: read, search, write, print the leaderboard and the choice. The output folder::

        leaderboard.md / .csv / .json   the final pool's table (PR-AUC micro [CI], macro, P@K, R'@K, fact PR-AUC [CI],
                                        fact R@K, cost); the headline that chose is marked
        chosen.yaml                     the chosen configuration, its figures, pool signature, the measure that chose
                                        (chunk- or fact-level, :mod:`convrag.seara.search`) and why it won
        pr_curves.png / .csv            micro PR curves of the final pool
        interaction.png                 mean PR-AUC by the factorial's first two varied dimensions (when there is one)
        pools/NN-LABEL/                 each judged pool (the final one last): leaderboard, pr_curves, pseudo-qrels
                                        (pseudo-qrels/ Parquet in the qrels layout, .json, .trec)
        report.json                     ``complete``, settings, queries, judge cost (calls, cache hits, tokens, cost),
                                        fact extraction per pool (counts, failed queries, LLM report) and in total,
                                        components' LLM reports, chunk counts, failed judgments, racing rounds
    """
    from convrag.core.progress import scope, wanted
    from convrag.llm import get_llm
    from convrag.llm.spec import PLACEHOLDER_MODEL, REAL_MODEL_HINT, SPEC_ENV, is_placeholder
    from convrag.seara.evidence import ORACLE_PREFIX, is_oracle_spec, load_oracle
    from convrag.seara.inputs import query_texts, read_corpus, read_turns
    from convrag.seara.report import judge_identity, leaderboard
    from convrag.seara.runner import Runner
    from convrag.seara.search import Searcher, UnscorableFacts, UnscorablePool
    from convrag.seara.space import load_space
    from convrag.synthesis.engine.pipeline import write_json_atomic

    out = Path(args.out)
    judge_arg = args.judge if args.judge and is_oracle_spec(args.judge) else None
    inputs = [args.space, args.queries, args.corpus, judge_arg and judge_arg[len(ORACLE_PREFIX):] or None]
    corpus = args.corpus or (args.queries if Path(args.queries).is_dir() else None)
    identity = f"queries {Path(args.queries).resolve()} over corpus {Path(corpus).resolve() if corpus else '-'}"
    owned = {"identity": identity, "overwrite": args.overwrite}
    check_results_out(out, inputs, COMMAND, read_whole=_read_whole(args), **owned)  # before anything is read
    if args.max_queries is not None and args.max_queries < 1:
        raise ConvragError(f"--max-queries must be at least 1, got {args.max_queries}")
    if args.max_judgments is not None and args.max_judgments < 1:
        raise ConvragError(f"--max-judgments must be at least 1, got {args.max_judgments}")
    space = load_space(args.space)
    if args.max_judgments is not None:
        space.judge["max_judgments"] = args.max_judgments
    judge_spec = args.judge or _space_judge(space) or os.environ.get(SPEC_ENV) or "default"
    oracle = None
    if is_oracle_spec(judge_spec):
        oracle = load_oracle(judge_spec)
        inputs[3] = oracle.source
        check_results_out(out, inputs, COMMAND, read_whole=_read_whole(args), **owned)
    component_spec = args.llm or (os.environ.get(SPEC_ENV) or "default" if oracle else judge_spec)
    turns = read_turns(args.queries, split=args.split)
    if oracle is not None:
        oracle.check_known(t.qid for t in turns)
    turns = turns[: args.max_queries]
    if oracle is not None:
        oracle.check_queries(t.qid for t in turns)
    if corpus is None:
        raise ConvragError("--corpus is required unless --queries is a built benchmark folder")
    docs = read_corpus(corpus, args.corpus_config)
    if args.dry_run:
        ident = judge_identity(judge_spec, oracle.source if oracle is not None else None)
        print(f"{len(docs):,} documents, {len(turns):,} queries, judge {ident['label']}")
        _dry_run(space, len(turns), print)
        return 0

    limit = int(space.judge["concurrency"])  # requests in flight per LLM (a spec's max_concurrency wins)

    def make_llm(spec: str) -> Any:
        spec = component_spec if spec == "default" else spec
        return get_llm(spec, max_concurrency=limit, **({"cache": args.cache} if args.cache else {}))

    # a run that fails before writing leaves no folder
    with claimed_out(out, inputs, COMMAND, read_whole=_read_whole(args), **owned) as target:
        progress = wanted(args.no_progress)
        if not progress:
            import datasets

            datasets.disable_progress_bars()
        strategy = args.query_strategy or space.queries["strategy"]
        with scope("select", Path(str(args.queries)).name):
            queries = query_texts(turns, strategy, llm=make_llm("default"), progress=progress)
        judge = oracle if oracle is not None else \
            get_llm(judge_spec, max_concurrency=limit, **({"cache": args.cache} if args.cache else {}))
        runner = Runner(space, docs, queries, make_llm, progress=progress)
        settings = {"space": str(args.space), "strategy": space.strategy, "depth": space.depth, "seed": space.seed,
                    "corpus": str(corpus), "documents": len(docs), "queries": len(queries),
                    "query_strategy": strategy, "judge": judge_spec,
                    "judge_model": judge_identity(judge_spec, oracle.source if oracle is not None else None)}
        settings["judge_model"]["components"] = component_models(space, strategy, component_spec)
        empty = None
        with replacing(out, target, overwrite=True, is_build=lambda _: True) as tmp:  # claim_out accepted target
            claim_out(tmp, (), COMMAND, identity=identity)  # the folder swapped in carries the marker
            pools: list[Any] = []

            def on_pool(result: Any) -> None:
                pools.append(result)
                write_pool(tmp / "pools" / f"{len(pools):02d}-{_slug(result.label)}", result, space,
                           judge=settings["judge_model"])

            try:
                found = Searcher(space, runner, judge, on_pool=on_pool).run()
            except UnscorablePool as err:
                kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(err.failures.items()))
                empty = (f"pool {err.pool!r}: every query has a failed judgment, nothing can be scored "
                         f"({err.pairs} failed pairs; unique judgments failed: {kinds})")
            except UnscorableFacts as err:
                empty = f"{err}; failed extractions are listed in report.json"
                pools.append(err.result)
            else:
                _write_result(tmp, found, space, {**settings, "judge_llm": _llm_report(judge)}, runner)
            if empty is not None:
                write_json_atomic(tmp / "report.json", {
                    "complete": False, "incomplete": empty, **settings, "judge_llm": _llm_report(judge),
                    "pools": [_pool_entry(p) for p in pools], "fact_totals": _fact_totals(pools),
                    "runner": runner.report()})  # fmt: skip
        if empty is not None:
            raise EmptyResult(f"{empty}; no leaderboard or choice was written, {out}/report.json is marked "
                              "incomplete")
    final, chosen, totals = found.final, found.chosen, found.judge_totals()
    costs = {c.name: space.cost(c) for c in final.configurations}
    print(leaderboard(final.scores, bootstrap=final.boot, costs=costs, judge_calls=final.judge_calls(),
                      facts=final.fact_scores, fact_bootstrap=final.fact_boot,
                      headline=final.measure if final.fact_scores is not None else "chunks",
                      judge=settings["judge_model"]))
    if final.fact_scores is not None:
        print("\n".join(_fact_notes(final)))
    print(f"\nChosen: {chosen.name} by {final.measure_reason} ({final.pick.reason})")
    print(f"Judge: {totals['pools']} pools, {totals['unique']:,} unique judgments; "
          + (f"judge LLM (judging and fact extraction): {judge.report.summary()}" if oracle is None
             else "evidence oracle, no LLM call"))
    facts = _fact_totals(found.pools)
    if oracle is None and facts["pools"]:
        print(f"Fact extraction: {facts.get('pairs', 0):,} pairs, {facts.get('calls', 0):,} LLM calls, "
              f"{facts['failed_queries']} queries with a failed extraction (per pool in report.json)")
    unfound = sum(len(v) for v in (final.facts.unfound if final.facts is not None else {}).values())
    if unfound:
        print(f"Warning: {unfound} evidence spans were found in no document of the corpus (listed in report.json); "
              "no chunk can state them, so they are not facts of their queries")
    print(f"Wrote {out}/leaderboard.md, chosen.yaml, pr_curves.png, pools/ and report.json")
    for line in dead_components(runner.report(), chosen):
        print(f"convrag select: warning: {line}", file=sys.stderr)
    flat = judge_constant(final.pseudo.qrels)
    if flat and oracle is None:
        print(f"convrag select: warning: the judge's grades over the final pool: {flat}; the PR-AUC ranking rests "
              "on no distinction between the lists", file=sys.stderr)
    if is_placeholder(judge_spec):
        print(f"\nWarning: the judge is the embedded {PLACEHOLDER_MODEL} placeholder: this choice only shows that the "
              f"plumbing works, it is not a measurement. {REAL_MODEL_HINT.replace('point it', 'Point --judge')}.")
    return 0


def judge_constant(qrels: dict[str, dict[str, int]]) -> str | None:
    """:func:`convrag.llm.replies.constant_verdicts` over every graded (query, chunk) pair of a pool."""
    from convrag.llm.replies import constant_verdicts

    return constant_verdicts([g for grades in qrels.values() for g in grades.values()])


def dead_components(report: dict[str, Any], chosen: Any) -> list[str]:
    """One line per LLM rewriter or reranker (``report["components"]`` of the runner) whose every call failed or
    gave nothing usable: its configurations ranked as if it were absent, so their rows are not its measurement; the
    line says so, louder when the ``chosen`` configuration is one of them."""
    lines = []
    for key, rep in (report.get("components") or {}).items():
        asked = rep.get("windows", rep.get("requests", 0))
        if asked and rep.get("failed", 0) >= asked:
            dimension, name = key.split(":", 1)
            line = (f"{dimension} {name!r}: all {asked} LLM calls failed or gave nothing usable "
                    f"({rep.get('failures')}); its configurations ranked as without it, so their rows measure "
                    f"nothing of the {dimension}")
            if chosen.get(dimension) == name:
                line += f"; the chosen configuration {chosen.name!r} is one of them"
            lines.append(line)
    return lines


def component_models(space: Any, strategy: str, default_spec: str) -> dict[str, str]:
    """What each LLM-calling part of a selection ran on, as outputs name it: the query strategy's LLM (when the
    strategy calls one) and every LLM rewriter or reranker option of the space (its own ``model``, else
    ``default_spec``: ``--llm``, else the judge's, or with an oracle judge ``$CONVRAG_LLM`` / the placeholder)."""
    from convrag.llm.identity import describe
    from convrag.retrievers.strategies import get_strategy

    out: dict[str, str] = {}
    if get_strategy(strategy).needs_llm:
        out[f"query strategy {strategy}"] = describe(default_spec).label
    for dimension in ("rewriter", "reranker"):
        for name, option in space.options.get(dimension, {}).items():
            if dimension == "rewriter" and option.kind == "none" and "model" not in option.params:
                continue
            if dimension == "reranker" and option.kind != "llm":
                continue
            spec = str(option.params.get("model") or "default")
            out[f"{dimension} {name}"] = describe(default_spec if spec == "default" else spec).label
    return out
