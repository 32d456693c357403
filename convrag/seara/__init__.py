"""SEARA (arXiv "SPEAR", 2507.06554): choose a retriever configuration against pooled, LLM-judged pseudo-qrels.

    from convrag.seara import build_pool, judge_pool, write_pseudo_qrels
    pool = build_pool({"bm25": bm25_run, "dense": dense_run}, k=10)      # {config: {query_id: ranking}}
    pseudo = judge_pool(pool, queries, chunks, get_llm(), max_calls=5000)  # prints the cost first
    write_pseudo_qrels(pseudo, "out/")
    evaluate.load("metrics/pr_auc", "chunks").compute(predictions=pool.predictions("bm25"),
        references=pseudo.references(pool.query_ids), query_ids=list(pool.query_ids),
        pool_signature=pseudo.signature)

Submodules: ``pool`` pools and signs; ``judge`` judges (cost bound, cap, cache, failures, calibration); ``qrels``
writes the qrels layout and TREC files; ``facts`` extracts and matches minimal facts. ``convrag select``
(``command``) chains them over a strategy space (``space``): ``runner.Runner`` builds and runs configurations,
``search.Searcher`` searches (grid, staged, racing), ``stats`` bootstraps and picks, ``report`` writes tables and
plots; ``validation`` checks it all where the truth is known.
"""

from convrag.seara.judge import (
    JudgeBudgetError,
    JudgeEstimate,
    Judgment,
    PseudoQrels,
    calibrate,
    estimate_judging,
    judge_pairs,
    judge_pool,
    judging_key,
)
from convrag.seara.pool import Pool, PoolMismatchError, build_pool, pool_signature, same_pool, score_table
from convrag.seara.qrels import read_qrels_table, write_pseudo_qrels, write_qrels_table, write_trec_qrels
from convrag.seara.space import Configuration, Space, SpaceError, load_space, parse_space
from convrag.seara.stats import BootstrapResult, Pick, SelectionError, bootstrap, factorial_effects, pick

__all__ = [
    "JudgeBudgetError", "JudgeEstimate", "Judgment", "Pool", "PoolMismatchError", "PseudoQrels", "build_pool",
    "calibrate", "estimate_judging", "judge_pairs", "judge_pool", "judging_key", "pool_signature",
    "read_qrels_table", "same_pool", "score_table", "write_pseudo_qrels", "write_qrels_table", "write_trec_qrels",
    "Configuration", "Space", "SpaceError", "load_space", "parse_space", "BootstrapResult", "Pick", "SelectionError",
    "bootstrap", "factorial_effects", "pick",
]
