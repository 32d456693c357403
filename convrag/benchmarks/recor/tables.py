"""RECOR analyses over per-turn scores (pure functions) and their markdown / plot rendering.

Inputs: ``per_turn[retriever][strategy][query id][measure]`` and ``turns[query id]`` = {domain, conversation_id,
turn, aspects}. Definitions (RECOR paper, section 4.1 and appendix D): domain mean = mean over the domain's scored
turns; **macro** = mean of the domain means (every domain weighs the same); **micro** = mean over all scored turns
(labelled as such, never called macro); macro CI = stratified percentile bootstrap, turns resampled with replacement
within each domain. The paper's analyses: Table 17 (:func:`paired_rows`), Table 19 (:func:`turn_positions`), Table 6
(:func:`complexity`) and the failure analysis (:func:`failure_analysis`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from convrag.core.stats import Interval, paired_test
from convrag.evaluation.tables import SMALL_N, small_mark, small_n_note
from convrag.retrievers.strategies import LABELS

PRIMARY = "nDCG@10"
POSITIONS = ("T1", "T2", "T3", "T4", "T5+")
BANDS = (("≥ 0.8", 0.8, math.inf), ("0.5–0.8", 0.5, 0.8), ("0.3–0.5", 0.3, 0.5), ("< 0.3", -math.inf, 0.3))
FAILURE_BELOW = 0.3
BUCKETS = (("Low (≤4 aspects)", 0, 4), ("Medium (5–6 aspects)", 5, 6), ("High (7+ aspects)", 7, 10**9))
PerTurn = Mapping[str, Mapping[str, float]]


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def position_label(turn: int) -> str:
    """``T1`` .. ``T4``, then ``T5+``."""
    return f"T{turn}" if turn < 5 else "T5+"


def domain_means(scores: PerTurn, turns: Mapping[str, Mapping[str, Any]], measures: Sequence[str]) -> dict[str, dict]:
    """Domain -> measure -> mean over the domain's turns in ``scores``."""
    by_domain: dict[str, list[str]] = {}
    for qid in scores:
        by_domain.setdefault(str(turns[qid]["domain"]), []).append(qid)
    return {d: {m: _mean([scores[q][m] for q in qids]) for m in measures} for d, qids in sorted(by_domain.items())}


def macro_mean(means: Mapping[str, Mapping[str, float]], measures: Sequence[str]) -> dict[str, float]:
    """Measure -> mean of the domain means."""
    return {m: _mean([row[m] for row in means.values()]) for m in measures}


def micro_mean(scores: PerTurn, measures: Sequence[str]) -> dict[str, float]:
    """Measure -> mean over all turns."""
    return {m: _mean([row[m] for row in scores.values()]) for m in measures}


def macro_bootstrap(values: Mapping[str, Sequence[float]], n_resamples: int = 1000, seed: int = 0,
                    confidence: float = 0.95) -> Interval:
    """Macro mean of ``values`` (domain -> per-turn values) with a stratified percentile bootstrap CI."""
    groups = [np.asarray(v, dtype=float) for _, v in sorted(values.items()) if len(v)]
    n = sum(g.size for g in groups)
    if not groups:
        return Interval(float("nan"), float("nan"), float("nan"), 0)
    mean = float(np.mean([g.mean() for g in groups]))
    if n_resamples <= 0 or all(np.all(g == g[0]) for g in groups):
        return Interval(mean, mean, mean, n)
    rng = np.random.default_rng(seed)
    boot = np.mean([g[rng.integers(0, g.size, size=(n_resamples, g.size))].mean(axis=1) for g in groups], axis=0)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(boot, [alpha, 1 - alpha])
    return Interval(mean, float(low), float(high), n)


def _by_domain(scores: PerTurn, turns: Mapping[str, Mapping[str, Any]], measure: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for qid in sorted(scores):
        out.setdefault(str(turns[qid]["domain"]), []).append(scores[qid][measure])
    return out


def system_summary(scores: PerTurn, turns: Mapping[str, Mapping[str, Any]], measures: Sequence[str],
                   n_bootstrap: int, seed: int) -> dict[str, Any]:
    """Domain means, macro (with stratified bootstrap CI) and micro means of one retriever x strategy."""
    means = domain_means(scores, turns, measures)
    return {"domains": means, "macro": macro_mean(means, measures), "micro": micro_mean(scores, measures),
            "macro_ci": {m: macro_bootstrap(_by_domain(scores, turns, m), n_bootstrap, seed).to_dict()
                         for m in measures}}  # fmt: skip


def average_over_retrievers(per_turn: Mapping[str, Mapping[str, PerTurn]], strategy: str, measure: str) -> dict:
    """Query id -> the mean of ``measure`` over retrievers (for the "Average" rows)."""
    rets = [r for r in per_turn if strategy in per_turn[r]]
    qids = sorted(per_turn[rets[0]][strategy]) if rets else []
    return {q: {measure: _mean([per_turn[r][strategy][q][measure] for r in rets])} for q in qids}


def comparisons(strategies: Sequence[str]) -> list[tuple[str, str]]:
    """(A, B) pairs of Table 17: every strategy against baseline, then H+R against history and reasoning."""
    pairs = [(s, "baseline") for s in strategies if s != "baseline" and "baseline" in strategies]
    pairs += [("history+reasoning", b) for b in ("history", "reasoning") if {b, "history+reasoning"} <= set(strategies)]
    return pairs


def paired_rows(per_turn: Mapping[str, Mapping[str, PerTurn]], turns: Mapping[str, Mapping[str, Any]],
                strategies: Sequence[str], measure: str = PRIMARY, seed: int = 0) -> list[dict[str, Any]]:
    """Table 17 rows: pooled over retrievers ("all", as in the paper) and per retriever, for every pair of
    ``comparisons``: a paired t-test (``scipy.stats.ttest_rel``) of strategy A against B over (retriever, turn)
    pairs; Mean Δ is the macro-averaged difference, SE the standard error of the paired differences; the paired
    randomisation p comes from ``stats.paired_test``."""
    pairs = comparisons(strategies)
    if not pairs:
        return []
    from scipy import stats as sps  # imported only when there is a pair: a slow import

    rows = []
    for a, b in pairs:
        for scope in ["all", *per_turn]:
            rets = list(per_turn) if scope == "all" else [scope]
            keys = [(r, q) for r in rets for q in sorted(per_turn[r][a])]
            x = np.array([per_turn[r][a][q][measure] for r, q in keys])
            y = np.array([per_turn[r][b][q][measure] for r, q in keys])
            diffs = {q_r: float(d) for q_r, d in zip(keys, x - y, strict=True)}
            by_dom: dict[str, list[float]] = {}
            for (_, q), d in diffs.items():
                by_dom.setdefault(str(turns[q]["domain"]), []).append(d)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                t = float(sps.ttest_rel(x, y).statistic) if x.size > 1 else float("nan")
            res = paired_test(x, y, seed=seed)
            se = float(np.std(x - y, ddof=1) / math.sqrt(x.size)) if x.size > 1 else float("nan")
            rows.append({"a": a, "b": b, "retriever": scope, "measure": measure, "n": int(x.size),
                         "mean_diff_macro": _mean([_mean(v) for v in by_dom.values()]), "mean_diff": res.diff,
                         "se": se, "t": t, "p_ttest": res.p_ttest, "p_randomization": res.p_randomization})  # fmt: skip
    return rows


def turn_positions(per_turn: Mapping[str, Mapping[str, PerTurn]], turns: Mapping[str, Mapping[str, Any]],
                   strategies: Sequence[str], measure: str = PRIMARY) -> dict[str, Any]:
    """Table 19: strategy -> {"average": {pos: v}, "by_retriever": {ret: {pos: v}}, "trend": ...}, and n. Per turn
    position (T1 .. T4, T5+), the macro mean over the domains having turns there; the "all retrievers" average is the
    mean of the retrievers' values; Trend = (T4 - T2) / T2."""
    def by_position(scores: PerTurn) -> dict[str, float]:
        out = {}
        for pos in POSITIONS:
            sub = {q: s for q, s in scores.items() if position_label(int(turns[q]["turn"])) == pos}
            if sub:
                out[pos] = macro_mean(domain_means(sub, turns, [measure]), [measure])[measure]
        return out

    def trend(row: Mapping[str, float]) -> float | None:
        return (row["T4"] - row["T2"]) / row["T2"] if "T2" in row and "T4" in row and row["T2"] else None

    table: dict[str, Any] = {"n": {}, "strategies": {}}
    any_scores = next(iter(next(iter(per_turn.values())).values()), {}) if per_turn else {}
    for pos in POSITIONS:
        table["n"][pos] = sum(1 for q in any_scores if position_label(int(turns[q]["turn"])) == pos)
    for s in strategies:
        by_ret = {r: by_position(per_turn[r][s]) for r in per_turn}
        avg = {p: _mean([v[p] for v in by_ret.values()]) for p in POSITIONS if all(p in v for v in by_ret.values())}
        table["strategies"][s] = {"average": avg, "trend": trend(avg), "by_retriever": by_ret,
                                  "trend_by_retriever": {r: trend(v) for r, v in by_ret.items()}}  # fmt: skip
    return table


def best_scores(per_turn: Mapping[str, Mapping[str, PerTurn]], strategies: Sequence[str],
                measure: str = PRIMARY) -> dict[str, float]:
    """Query id -> max of ``measure`` over every retriever and the given strategies."""
    best: dict[str, float] = {}
    for r in per_turn:
        for s in strategies:
            for q, row in per_turn[r].get(s, {}).items():
                best[q] = max(best.get(q, -math.inf), row[measure])
    return best


def failure_analysis(best: Mapping[str, float], turns: Mapping[str, Mapping[str, Any]], basis: str) -> dict[str, Any]:
    """Shares of turns per band of ``best`` (per turn the best nDCG@10: over retrievers with History+Reasoning, the
    paper's basis, or over every evaluated retriever x strategy): bands >= 0.8, [0.5, 0.8), [0.3, 0.5), < 0.3;
    failure = best < 0.3; the turn-1 share among failures against the turn-1 share among all turns. Shares are over
    turns."""
    n = len(best)
    bands = []
    for label, low, high in BANDS:
        count = sum(1 for v in best.values() if low <= v < high)
        bands.append({"band": label, "count": count, "share": count / n if n else float("nan")})
    failures = sorted(q for q, v in best.items() if v < FAILURE_BELOW)
    first = [q for q in failures if int(turns[q]["turn"]) == 1]
    all_first = sum(1 for q in best if int(turns[q]["turn"]) == 1)
    return {"basis": basis, "n": n, "bands": bands, "failures": failures, "n_failures": len(failures),
            "turn1_failures": len(first), "turn1_share_of_failures": len(first) / len(failures) if failures else None,
            "turn1_share_of_all": all_first / n if n else None}  # fmt: skip


def complexity(per_turn: Mapping[str, Mapping[str, PerTurn]], turns: Mapping[str, Mapping[str, Any]],
               strategies: Sequence[str], measure: str = PRIMARY) -> dict[str, Any]:
    """Table 6: turns from position 2 on, per turn the best nDCG@10 over retrievers for Baseline and for
    History+Reasoning, mean per complexity bucket of the conversation's aspect count (Low <= 4, Medium 5-6, High 7+);
    "not available" when the data carries no aspect counts."""
    wanted = [s for s in ("baseline", "history+reasoning") if s in strategies]
    later = [q for q in best_scores(per_turn, wanted[:1], measure) if int(turns[q]["turn"]) >= 2]
    known = [q for q in later if turns[q].get("aspects") is not None]
    if not wanted or not known:
        why = "the data has no per-conversation aspect count" if wanted else "needs the baseline strategy"
        return {"available": False, "note": f"not available: {why}", "rows": []}
    best = {s: best_scores(per_turn, [s], measure) for s in wanted}
    rows = []
    for label, low, high in BUCKETS:
        members = [q for q in known if low <= int(turns[q]["aspects"]) <= high]
        row: dict[str, Any] = {"bucket": label, "turns": len(members)}
        for s in wanted:
            row[s] = _mean([best[s][q] for q in members])
        if len(wanted) == 2 and members and row["baseline"]:
            row["delta"] = (row["history+reasoning"] - row["baseline"]) / row["baseline"]
        rows.append(row)
    note = f"{len(later) - len(known)} later turns without an aspect count left out" if len(known) < len(later) else ""
    return {"available": True, "note": note, "rows": rows}


# ---------------------------------------------------------------- rendering


def _f(value: Any, digits: int) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value * 100:+.0f}%"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def table3(results: Mapping[str, Any], digits: int = 3) -> str:
    """Retriever x strategy, macro nDCG@10 [95% CI], plus the Average row (mean over retrievers)."""
    strategies, systems = results["strategies"], results["systems"]

    def cell(ci: Mapping[str, float]) -> str:
        return f"{_f(ci['mean'], digits)} [{_f(ci['low'], digits)}, {_f(ci['high'], digits)}]"

    rows = [[r] + [cell(systems[r][s]["macro_ci"][PRIMARY]) for s in strategies] for r in results["retrievers"]]
    rows.append(["Average"] + [cell(results["average"][s]) for s in strategies])
    return _table(["Retriever", *(LABELS.get(s, s) for s in strategies)], rows)


def measures_table(results: Mapping[str, Any], digits: int = 3) -> str:
    """Every retriever x strategy with every measure (macro), and micro nDCG@10 labelled as such."""
    ms = results["measures"]
    rows = [[r, s, *(_f(results["systems"][r][s]["macro"][m], digits) for m in ms),
             _f(results["systems"][r][s]["micro"][PRIMARY], digits)]
            for r in results["retrievers"] for s in results["strategies"]]  # fmt: skip
    return _table(["Retriever", "Strategy", *(f"{m} (macro)" for m in ms), f"{PRIMARY} (micro)"], rows)


def table5(results: Mapping[str, Any], retriever: str, digits: int = 3) -> str:
    """Domain x strategy nDCG@10 for one retriever, with turn counts and the macro row."""
    st, sy = results["strategies"], results["systems"][retriever]
    rows = [[d, str(results["n_turns"][d]), *(_f(sy[s]["domains"].get(d, {}).get(PRIMARY), digits) for s in st)]
            for d in results["domains"]]  # fmt: skip
    rows.append(["Macro", str(sum(results["n_turns"].values())), *(_f(sy[s]["macro"][PRIMARY], digits) for s in st)])
    return _table(["Domain", "Turns", *(LABELS.get(s, s) for s in st)], rows)


def table5_summary(results: Mapping[str, Any], digits: int = 3) -> str | None:
    """Paper shape: Base (strongest retriever's baseline), best H+R, relative Δ, best retriever per domain."""
    if not {"baseline", "history+reasoning"} <= set(results["strategies"]):
        return None
    sy = results["systems"]
    strongest = max(results["retrievers"], key=lambda r: sy[r]["baseline"]["macro"][PRIMARY])
    rows = []
    for d in results["domains"]:
        base = sy[strongest]["baseline"]["domains"][d][PRIMARY]
        best = max(results["retrievers"], key=lambda r: sy[r]["history+reasoning"]["domains"][d][PRIMARY])
        hr = sy[best]["history+reasoning"]["domains"][d][PRIMARY]
        rows.append([d, _f(base, digits), _f(hr, digits), _pct((hr - base) / base if base else None), best])
    return (f"Base: {strongest} (highest macro baseline nDCG@10) with Baseline; H+R: best retriever per domain with "
            "History+Reasoning; Δ relative.\n\n" + _table(["Domain", "Base", "H+R", "Δ", "Best"], rows))


def table6(results: Mapping[str, Any], digits: int = 3) -> str:
    cx = results["complexity"]
    if not cx["available"]:
        return cx["note"]
    rows = [[r["bucket"], str(r["turns"]), _f(r.get("baseline"), digits), _f(r.get("history+reasoning"), digits),
             _pct(r.get("delta"))] for r in cx["rows"]]  # fmt: skip
    return _table(["Complexity", "Turns", "Base", "H+R", "Δ"], rows) + (f"\n\n{cx['note']}" if cx["note"] else "")


def table17(results: Mapping[str, Any], digits: int = 3) -> str:
    rows = [[f"{LABELS.get(r['a'], r['a'])} vs. {LABELS.get(r['b'], r['b'])}", r["retriever"], str(r["n"]),
             f"{r['mean_diff_macro']:+.{digits}f}", _f(r["se"], 4), _f(r["t"], 2), f"{r['p_ttest']:.3g}",
             f"{r['p_randomization']:.3g}"] for r in results["significance"]]  # fmt: skip
    head = ["Comparison", "Retrievers", "n", "Mean Δ (macro)", "SE", "t", "p (t-test)", "p (randomisation)"]
    return _table(head, rows)


def table19(results: Mapping[str, Any], digits: int = 3) -> str:
    tp = results["turn_position"]
    rows = []
    for s, entry in tp["strategies"].items():
        rows.append([LABELS.get(s, s), "all (mean)", *(_f(entry["average"].get(p), digits) for p in POSITIONS),
                     _pct(entry["trend"])])  # fmt: skip
        for r, row in entry["by_retriever"].items():
            rows.append(["", r, *(_f(row.get(p), digits) for p in POSITIONS), _pct(entry["trend_by_retriever"][r])])
    rows.append(["Turns", "", *(f"{tp['n'][p]}{small_mark(tp['n'][p])}" for p in POSITIONS), ""])
    return _table(["Strategy", "Retriever", *POSITIONS, "Trend T2→T4"], rows)


def failure_table(fa: Mapping[str, Any]) -> str:
    rows = [[b["band"], str(b["count"]), f"{b['share'] * 100:.1f}%"] for b in fa["bands"]]
    t1 = fa["turn1_share_of_failures"]
    return (_table(["Best nDCG@10", "Turns", "Share"], rows)
            + f"\n\nFailures (best < {FAILURE_BELOW}): {fa['n_failures']} of {fa['n']}; turn 1 among them: "
            + (f"{fa['turn1_failures']} ({t1 * 100:.0f}%)" if t1 is not None else "–")
            + f" vs. {fa['turn1_share_of_all'] * 100:.0f}% of all turns.")  # fmt: skip


def render_tables(results: Mapping[str, Any], digits: int = 4) -> str:
    """The markdown report: Tables 3, 5, 6, 17, 19 (shapes of the RECOR paper) and the failure analysis."""
    n = sum(results["n_turns"].values())
    parts = [
        "# RECOR retrieval evaluation",
        f"{n} scored turns in {len(results['domains'])} domains; retrievers {', '.join(results['retrievers'])}. "
        f"Per turn {', '.join(results['measures'])} (trec_eval semantics; MRR cut at 10), mean within a domain, "
        "macro = mean of domain means. CIs: 95% stratified percentile bootstrap "
        f"({results['n_bootstrap']} resamples, seed {results['seed']}).",
        "## Table 3: nDCG@10 (macro over domains) by retriever and strategy", table3(results, digits),
        "## All measures (macro; micro nDCG@10 for comparison)", measures_table(results, digits),
    ]  # fmt: skip
    for r in results["retrievers"]:
        parts += [f"## Table 5: nDCG@10 by domain — {r}", table5(results, r, digits)]
    summary = table5_summary(results, digits)
    if summary:
        parts += ["## Table 5 (paper shape)", summary]
    parts += ["## Table 6: by conversation complexity (turns 2+, best over retrievers)", table6(results, digits),
              "## Table 17: paired t-tests on nDCG@10 over (retriever, turn) pairs", table17(results, digits),
              "## Table 19: nDCG@10 by turn position (macro over domains with turns there)", table19(results, digits)]
    note = small_n_note(results["turn_position"]["n"].values(), "turns")
    if note:
        parts.append(note)
    for key, fa in results["failure_analysis"].items():
        parts += [f"## Failure analysis: best nDCG@10 over {fa['basis']} ({key})", failure_table(fa)]
    rw = results.get("rewrite")
    if rw:
        parts += ["## Query rewriting", f"LLM `{rw['llm']}`: {rw['llm_calls']} turns sent (turn-1 queries used "
                  f"as is), {len(rw['failures'])} failed, {len(rw['fallbacks'])} fell back to the baseline text."]
    return "\n\n".join(parts) + "\n"


def plot_turn_positions(results: Mapping[str, Any], path: str) -> None:
    """PNG line plot of nDCG@10 by turn position per strategy (mean over retrievers); each position's tick says how
    many turns it rests on, and a footnote flags figures that rest on the placeholder LLM and names the results'
    other caveats (:func:`convrag.evaluation.turn_tables.plot_footnote`)."""
    from matplotlib.figure import Figure  # no pyplot: its import and global figure state are not needed

    from convrag.evaluation.turn_tables import plot_footnote

    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for s, entry in results["turn_position"]["strategies"].items():
        xs = [i for i, p in enumerate(POSITIONS) if p in entry["average"]]
        ax.plot(xs, [entry["average"][POSITIONS[i]] for i in xs], marker="o", label=LABELS.get(s, s))
    n = results["turn_position"]["n"]
    ax.set_xticks(range(len(POSITIONS)), [f"{p}\nn={n.get(p, 0)}{small_mark(n.get(p, 0))}" for p in POSITIONS])
    ax.set_xlabel(f"turn position (n = turns there; † fewer than {SMALL_N}: too few to compare)")
    footnote = plot_footnote(results)
    if footnote:
        fig.text(0.01, 0.01, footnote, fontsize=7, color="darkred")
    ax.set_ylabel("nDCG@10")
    ax.set_title("nDCG@10 by turn position (macro over domains, mean over retrievers)", fontsize=9)
    ax.set_ylim(0, 1.02)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout(rect=(0, 0.04 * (footnote.count("\n") + 1) if footnote else 0, 1, 1))
    fig.savefig(path, format="png", dpi=120, metadata={"Description": footnote} if footnote else None)
