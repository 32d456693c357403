"""SEARA offline validation where the truth is known (memo section 6.7): pseudo vs true PR-AUC orderings.

    python benchmarks/validate_seara.py [--dataset hotpotqa|mtrag|all] [--k 10] [--seeds 5] [--max-queries N]
        [--pooled 2,4] [--no-dense] [--chunkings] [--data FOLDER] [--json PATH]

Per dataset (definitions in :mod:`convrag.seara.validation`): the configuration table (true micro step
PR-AUC@k per configuration), then the validation table: judge (oracle, noisy oracles 0.05 / 0.1 / 0.2,
length-correlated 0.1) x number of pooled configurations (``--pooled`` plus all) -> Kendall tau-b of the pseudo
vs the true ordering (mean, min over seeds), tau_AP (mean), top-1 agreement share, top-1 regret (true best
minus true value of the pseudo-chosen configuration, >= 0; mean, max). For hotpotqa, the facts checks of memo
6.7 item 6 follow. Then, per dataset, the validation across chunkings (definitions in
:mod:`convrag.seara.validation_chunkings`; ``--chunkings`` runs only it): the configuration table (chunkings x
bm25 / dense: true evidence recall@K, chunk- and fact-level PR-AUC under the evidence oracle) and the validation
table (oracle and noisy oracles x chunk / fact measure: tau-b, top-1 share, regret). ``--json`` writes every figure
(the chunkings validation under each dataset's ``chunkings`` key). Progress goes to stderr. ``--data``: the
shared data folder (default: ``$CONVRAG_SHARED_DATA`` or ``../shared/data`` beside the repository); nothing is
cached or written elsewhere.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from convrag.core.errors import ConvragError
from convrag.seara.validation import (
    default_configurations,
    load_hotpotqa,
    load_mtrag,
    make_runs,
    validate,
)
from convrag.seara.validation_chunkings import load_hotpotqa_evidence, load_mtrag_evidence, validate_chunkings
from convrag.seara.validation_facts import facts_checks

DATASETS = ("hotpotqa", "mtrag")
DEFAULT_DATA = Path(os.environ.get("CONVRAG_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments: one line on stderr, exit status 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"validate_seara: error: {message}\n")
        raise SystemExit(2)


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def counts(text: str) -> list[int]:
    return [positive(p) for p in text.split(",")]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog="validate_seara", description=__doc__.split("\n", 1)[0])
    p.add_argument("--dataset", choices=[*DATASETS, "all"], default="all")
    p.add_argument("--k", type=positive, default=10, help="ranking depth K (pool depth and metric cut-off)")
    p.add_argument("--seeds", type=positive, default=5, help="seeds per noisy judge and pooled subset")
    p.add_argument("--max-queries", type=positive, default=None, help="keep the first N queries of each dataset")
    p.add_argument("--pooled", type=counts, default=[2, 4], help="numbers of pooled configurations (all is added)")
    p.add_argument("--no-dense", action="store_true", help="the family without the dense model (fast)")
    p.add_argument("--chunkings", action="store_true", help="run only the validation across chunkings")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    p.add_argument("--json", type=Path, default=None, help="write every figure to this JSON file")
    args = p.parse_args(argv)
    if not args.data.is_dir():
        p.error(f"data folder not found: {args.data}")
    return args


def fmt(x: Any) -> str:
    return f"{x:.4f}" if isinstance(x, float) else str(x)


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [headers] + [[fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells)


def report(result: dict[str, Any]) -> str:
    lines = [f"== {result['dataset']}: {result['queries']} queries, K = {result['k']}, {result['seeds']} seeds",
             "", "configuration table (true micro step PR-AUC@K, complete labels)",
             table(["configuration", "true PR-AUC"], sorted(([n, v] for n, v in result["true"].items()),
                                                           key=lambda r: -r[1])), "",
             "validation table (pseudo vs true ordering; regret = true best - true of pseudo-chosen, >= 0)",
             table(["judge", "pooled", "tau_b mean", "tau_b min", "tau_AP mean", "top-1 share", "regret mean",
                    "regret max"],
                   [[r["judge"], r["pooled"], r["tau_b_mean"], r["tau_b_min"], r["tau_ap_mean"], r["top1_share"],
                     r["regret_mean"], r["regret_max"]] for r in result["rows"]])]
    facts = result.get("facts")
    if facts:
        lines += ["", f"facts checks (memo 6.7 item 6): BM25 top-{facts['k']} per chunking, {facts['facts']} gold "
                  f"sentences, {facts['pooled_relevant_chunks']} relevant chunks pooled over chunkings",
                  table(["chunking", "mean chars", "fact recall", "sentence recall", "chunk recall",
                         "ideal fact rec", "ideal chunk rec", "chunk prec", "char prec"],
                        [[h, r["mean_chunk_chars"], r["fact_recall"], r["sentence_recall"], r["chunk_recall"],
                          r["ideal_fact_recall"], r["ideal_chunk_recall"], r["chunk_precision"], r["char_precision"]]
                         for h, r in facts["chunkings"].items()]),
                  f"(i) fact recall == gold-sentence recall in every chunking: {facts['recall_equal']}",
                  f"(ii) ideal runs: fact recall 1.0 everywhere, chunk recall <= {facts['max_ideal_chunk_recall']:.4f}",
                  f"(iii) coarsest chunking {facts['coarsest']}; best chunk precision: {facts['best_chunk_precision']};"
                  f" best char precision: {facts['best_char_precision']}"]
    return "\n".join(lines)


def chunkings_report(result: dict[str, Any]) -> str:
    located, skipped = result["located"], ", ".join(f"{n} {w}" for w, n in result["skipped"].items())
    configs = sorted(result["configurations"].items(), key=lambda kv: (-kv[1]["truth_recall"], kv[0]))
    return "\n".join([
        f"== {result['dataset']} across chunkings: {result['queries']} queries, {result['documents']} documents, "
        f"{result['evidence_spans']} evidence spans (median {result['evidence_median_chars']:g} chars, "
        f"{result['evidence_over_256_chars']} over 256), K = {result['k']}, {result['seeds']} seeds",
        f"skipped: {skipped or 'nothing'}; spans found in no document: {located['unfound_spans']}, in several "
        f"(first used): {located['several_documents']}", "",
        "configuration table (truth = evidence recall@K; PR-AUC@K under the evidence oracle)",
        table(["configuration", "truth recall", "chunk PR-AUC", "fact PR-AUC", "fact recall", "chunks", "mean chars"],
              [[n, r["truth_recall"], r["chunk_pr_auc"], r["fact_pr_auc"], r["fact_recall"], r["chunks"],
                r["mean_chunk_chars"]] for n, r in configs]), "",
        "validation table (ranking vs truth ordering; regret = true best - true of the chosen, >= 0)",
        table(["judge", "measure", "tau_b mean", "tau_b min", "top-1 share", "regret mean", "regret max"],
              [[r["judge"], r["measure"], r["tau_b_mean"], r["tau_b_min"], r["top1_share"], r["regret_mean"],
                r["regret_max"]] for r in result["rows"]])])


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_chunkings(name: str, args: argparse.Namespace) -> dict[str, Any]:
    progress(f"{name}: loading the evidence set")
    load = load_hotpotqa_evidence if name == "hotpotqa" else load_mtrag_evidence
    evset = load(args.data / name, args.max_queries)
    return validate_chunkings(evset, args.k, dense=not args.no_dense, seeds=args.seeds, progress=progress)


def run_dataset(name: str, args: argparse.Namespace) -> dict[str, Any]:
    progress(f"{name}: loading")
    truth = load_hotpotqa(args.data / "hotpotqa") if name == "hotpotqa" else load_mtrag(args.data / "mtrag")
    truth = truth.head(args.max_queries)
    runs = make_runs(truth, default_configurations(dense=not args.no_dense), args.k, progress)
    result = validate(truth, runs, args.k, pooled=args.pooled, seeds=args.seeds, progress=progress)
    if name == "hotpotqa":
        progress("hotpotqa: facts checks")
        facts = facts_checks(truth, args.k)
        rows = facts["chunkings"].values()
        facts["recall_equal"] = all(r["fact_recall"] == r["sentence_recall"] for r in rows)
        facts["max_ideal_chunk_recall"] = max(r["ideal_chunk_recall"] for r in rows)
        result["facts"] = facts
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    names = DATASETS if args.dataset == "all" else (args.dataset,)
    results = {}
    for name in names:
        try:
            if not args.chunkings:
                results[name] = run_dataset(name, args)
                print(report(results[name]), end="\n\n", flush=True)
            results.setdefault(name, {})["chunkings"] = run_chunkings(name, args)
        except ConvragError as exc:
            print(f"validate_seara: {name}: {exc}", file=sys.stderr)
            return 1
        print(chunkings_report(results[name]["chunkings"]), end="\n\n", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1, sort_keys=True), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
