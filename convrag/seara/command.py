"""The ``convrag select`` command: from a corpus, real queries and a strategy space to the chosen retriever.

Output folder (written beside it under a temporary name and swapped in when complete, by
:func:`convrag.out_folder.replacing`, so a failed run leaves nothing; --out may not be or hold an input)::

    leaderboard.md / .csv / .json   the final pool's table (PR-AUC micro [CI], macro, P@K, R'@K, cost)
    chosen.yaml                     the chosen configuration, its figures, pool signature and why it won
    pr_curves.png / .csv            micro PR curves of the final pool
    interaction.png                 mean PR-AUC by the factorial's first two varied dimensions (when there is one)
    pools/NN-LABEL/                 each judged pool (the final one last): leaderboard, pr_curves, pseudo-qrels
                                    (pseudo-qrels/ Parquet in the qrels layout, .json, .trec)
    report.json                     settings, queries, judge cost (calls, cache hits, tokens, cost), components'
                                    LLM reports, chunk counts, failed judgments, racing rounds
"""

from __future__ import annotations

import argparse
import math
import os
import re
from pathlib import Path
from typing import Any

from convrag.errors import ConvragError
from convrag.out_folder import check_out, replacing


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "pool"


def _check_out(out: Path) -> None:
    if out.is_dir() and any(out.iterdir()):
        raise ConvragError(f"{out}: --out must be a new or empty folder (this one has files; nothing was changed)")


def _curves(result: Any) -> dict[str, dict[str, Any]]:
    return {name: {"k": s["curve"]["k"], "recall": s["curve"]["recall_micro"],
                   "precision": s["curve"]["precision_micro"], "pr_auc": s["pr_auc"]}
            for name, s in result.scores.items()}  # fmt: skip


def write_pool(folder: Path, result: Any, space: Any, qrels: bool = True) -> None:
    """One pool's leaderboard, PR curves and (``qrels``) pseudo-qrels (Parquet, JSON, TREC) under ``folder``."""
    from convrag.seara.qrels import write_pseudo_qrels
    from convrag.seara.report import plot_pr_curves, write_leaderboard

    folder.mkdir(parents=True, exist_ok=True)
    costs = {c.name: space.cost(c) for c in result.configurations}
    write_leaderboard(folder, result.scores, bootstrap=result.boot, costs=costs, judge_calls=result.judge_calls())
    plot_pr_curves(folder / "pr_curves.png", _curves(result), f"SEARA {result.label}", result.pseudo.signature)
    if qrels:
        write_pseudo_qrels(result.pseudo, folder)


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


def run_command(args: argparse.Namespace) -> int:
    """``convrag select``: read, search, write (module docstring), print the leaderboard and the choice."""
    from convrag.llm import get_llm
    from convrag.llm.spec import PLACEHOLDER_MODEL, REAL_MODEL_HINT, SPEC_ENV, is_placeholder
    from convrag.progress import scope, wanted
    from convrag.seara.inputs import query_texts, read_corpus, read_turns
    from convrag.seara.report import leaderboard, plot_interaction, write_choice
    from convrag.seara.runner import Runner
    from convrag.seara.search import Searcher
    from convrag.seara.space import load_space
    from convrag.synthesis.engine import write_json_atomic

    out = Path(args.out)
    _check_out(out)
    check_out(out, {"queries": str(args.queries), **({"corpus": str(args.corpus)} if args.corpus else {})})
    if args.max_queries is not None and args.max_queries < 1:
        raise ConvragError(f"--max-queries must be at least 1, got {args.max_queries}")
    if args.max_judgments is not None and args.max_judgments < 1:
        raise ConvragError(f"--max-judgments must be at least 1, got {args.max_judgments}")
    space = load_space(args.space)
    if args.max_judgments is not None:
        space.judge["max_judgments"] = args.max_judgments
    judge_spec = args.judge or (space.judge["model"] if space.judge["model"] != "default" else None) \
        or os.environ.get(SPEC_ENV) or "default"
    component_spec = args.llm or judge_spec
    turns = read_turns(args.queries, split=args.split)[: args.max_queries]
    corpus = args.corpus or (args.queries if Path(args.queries).is_dir() else None)
    if corpus is None:
        raise ConvragError("--corpus is required unless --queries is a built benchmark folder")
    docs = read_corpus(corpus, args.corpus_config)
    if args.dry_run:
        print(f"{len(docs):,} documents, {len(turns):,} queries, judge {judge_spec}")
        _dry_run(space, len(turns), print)
        return 0

    def make_llm(spec: str) -> Any:
        spec = component_spec if spec == "default" else spec
        return get_llm(spec, cache=args.cache) if args.cache else get_llm(spec)

    progress = wanted(args.no_progress)
    if not progress:
        import datasets

        datasets.disable_progress_bars()
    strategy = args.query_strategy or space.queries["strategy"]
    with scope("select", Path(str(args.queries)).name):
        queries = query_texts(turns, strategy, llm=make_llm("default"), progress=progress)
    judge = get_llm(judge_spec, cache=args.cache) if args.cache else get_llm(judge_spec)
    runner = Runner(space, docs, queries, make_llm, progress=progress)
    with replacing(out, out.resolve(), overwrite=False, is_build=lambda _: False) as tmp:
        count = [0]

        def on_pool(result: Any) -> None:
            count[0] += 1
            write_pool(tmp / "pools" / f"{count[0]:02d}-{_slug(result.label)}", result, space)

        found = Searcher(space, runner, judge, on_pool=on_pool).run()
        final = found.final
        costs = {c.name: space.cost(c) for c in final.configurations}
        write_pool(tmp, final, space, qrels=False)
        chosen = found.chosen
        write_choice(tmp / "chosen.yaml", chosen.name, chosen.as_dict(),
                     {k: v for k, v in final.scores[chosen.name].items() if isinstance(v, (int, float))},
                     final.pseudo.signature or "", reason=final.pick.reason)  # fmt: skip
        factorial = found.factorial
        if factorial is not None:
            varied = list(factorial.effects["levels"])
            plot_interaction(tmp / "interaction.png", factorial.effects, varied[0], varied[1],
                             title=f"SEARA {factorial.label}: {varied[0]} x {varied[1]}",
                             pool_signature=factorial.pseudo.signature)  # fmt: skip
        totals = found.judge_totals()
        report = {
            "space": str(args.space), "strategy": found.strategy, "depth": space.depth, "seed": space.seed,
            "corpus": str(corpus), "documents": len(docs), "queries": len(queries), "query_strategy": strategy,
            "judge": judge_spec, "judge_llm": judge.report.to_dict(), "judge_totals": totals,
            "chosen": chosen.name, "reason": final.pick.reason, "pools": [
                {"label": p.label, "configurations": [c.name for c in p.configurations], "queries": len(p.query_ids),
                 "signature": p.pseudo.signature, "winner": p.pick.winner, "failed_queries": p.failed_queries,
                 "judgments": p.pseudo.summary()} for p in found.pools],
            "rounds": found.rounds, "runner": runner.report(),
            "factorial": None if factorial is None else {"pool": factorial.label, **factorial.effects},
        }  # fmt: skip
        write_json_atomic(tmp / "report.json", report)
    print(leaderboard(final.scores, bootstrap=final.boot, costs=costs, judge_calls=final.judge_calls()))
    print(f"\nChosen: {chosen.name} ({final.pick.reason})")
    print(f"Judge: {totals['pools']} pools, {totals['unique']:,} unique judgments, {judge.report.summary()}")
    print(f"Wrote {out}/leaderboard.md, chosen.yaml, pr_curves.png, pools/ and report.json")
    if is_placeholder(judge_spec):
        print(f"\nWarning: the judge is the embedded {PLACEHOLDER_MODEL} placeholder: this choice only shows that the "
              f"plumbing works, it is not a measurement. {REAL_MODEL_HINT.replace('point it', 'Point --judge')}.")
    return 0
