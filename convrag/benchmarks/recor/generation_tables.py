"""Aggregation and paper-shaped tables of RECOR-style generation scores (see
:mod:`convrag.benchmarks.recor.generation`).

Every mean is a *domain macro*: the mean of the scored turns within each domain, then the mean over the domains
that have a value (RECOR section 4.1.1, used again in 4.2); turns whose judge call failed are left out of every
mean (judge, dimensions, lexical, nDCG), and so are values that are None (an empty reference, say). Turn
positions are T1..T4 and T5+. Correlations are Pearson's r (``scipy.stats.pearsonr``): across domains
(domain nDCG@10 vs domain judge average, over the turns that have both; needs >= 3 domains) and across turns.

Table 26 (model size by family): generators are grouped into families by the leading letters of their model name
(the spec's part before ``@``, after the last ``/`` or ``:``, a leading ``Meta-`` dropped; ``Qwen2.5-72B-Instruct``
-> ``Qwen``, case ignored),
families with at least two generators are shown, each sorted by the size in its name (``72B``) from largest;
RAG delta = (Retrieved - NoRetrieval judge average) x 100, where the generator has both modes.
"""

from __future__ import annotations

import json
import os
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from convrag.core.errors import DataError
from convrag.core.jsonl import json_safe
from convrag.llm.spec import PLACEHOLDER_WARNING, REAL_MODEL_HINT

DIMENSIONS = ("correctness", "completeness", "relevance", "coherence", "faithfulness")
SHORT = {"correctness": "Corr", "completeness": "Comp", "relevance": "Rel", "coherence": "Coh",
         "faithfulness": "Faith"}  # fmt: skip
MODE_LABELS = {"oracle": "Oracle", "retrieved": "Retrieved", "none": "NoRetrieval"}
MODE_TABLE = {"retrieved": "7", "oracle": "21", "none": "22"}
LEXICAL_LABELS = {"rouge-l": "ROUGE-L", "meteor": "METEOR", "bertscore": "BERT-F1"}
BUCKETS = ("T1", "T2", "T3", "T4", "T5+")
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*[bB](?![a-zA-Z])")
_FAMILY = re.compile(r"[A-Za-z]+")


def macro(rows: Sequence[Mapping[str, Any]], value: Callable[[Mapping[str, Any]], float | None],
          domains: Sequence[str]) -> dict[str, Any]:
    """``{"macro", "by_domain", "n"}``: per-domain means of the non-None values, then their mean."""
    by: dict[str, list[float]] = {}
    for r in rows:
        v = value(r)
        if v is not None:
            by.setdefault(r["domain"], []).append(float(v))
    order = [d for d in domains if d in by] + sorted(d for d in by if d not in domains)
    means = {d: statistics.fmean(by[d]) for d in order}
    return {"macro": statistics.fmean(means.values()) if means else None, "by_domain": means,
            "n": sum(len(v) for v in by.values())}  # fmt: skip


def pearson(xs: Sequence[float], ys: Sequence[float], what: str) -> dict[str, Any]:
    """Pearson r and its two-sided p (scipy); ``r`` None with a ``note`` for < 3 pairs or a constant series."""
    n = len(xs)
    if n < 3:
        return {"r": None, "p": None, "n": n, "note": f"n/a (needs >= 3 {what})"}
    if len(set(xs)) < 2 or len(set(ys)) < 2:
        return {"r": None, "p": None, "n": n, "note": "n/a (a constant series has no correlation)"}
    from scipy.stats import pearsonr

    res = pearsonr(xs, ys)
    return {"r": float(res.statistic), "p": float(res.pvalue), "n": n, "note": None}


def correlation(rows: Sequence[Mapping[str, Any]], domains: Sequence[str]) -> dict[str, Any]:
    """Retrieval-generation link of one file: per-domain nDCG@10 and judge average over the scored turns that
    have an nDCG@10, Pearson r across those domains and across the turns."""
    both = [r for r in rows if r.get("ndcg@10") is not None and r["judge_average"] is not None]
    ndcg = macro(both, lambda r: r["ndcg@10"], domains)
    judge = macro(both, lambda r: r["judge_average"], domains)
    names = list(ndcg["by_domain"])
    return {"domains": {d: {"ndcg@10": ndcg["by_domain"][d], "judge_average": judge["by_domain"][d]} for d in names},
            "ndcg@10": ndcg["macro"], "judge_average": judge["macro"],
            "pearson_domains": pearson([ndcg["by_domain"][d] for d in names],
                                       [judge["by_domain"][d] for d in names], "domains"),
            "pearson_turns": pearson([r["ndcg@10"] for r in both], [r["judge_average"] for r in both], "turns")}


def run_ndcg(path: str, bench: Any, qids: Sequence[str]) -> dict[str, float | None]:
    """nDCG@10 (convrag.metrics.retrieval) of a TREC run for ``qids``; a ``<subset>:`` prefix on a document id
    (written where two subsets share an id) is dropped. Turns without a relevant document get None."""
    from convrag.metrics.retrieval.compute import score_run
    from convrag.metrics.retrieval.trec import TrecFormatError, read_run

    try:
        raw = read_run(path)
    except TrecFormatError as err:
        raise DataError(str(err)) from None
    run: dict[str, dict[str, float]] = {}
    for q in qids:
        domain = bench.references[q].domain
        prefix = f"{domain}:" if domain else None
        run[q] = {(d[len(prefix):] if prefix and d.startswith(prefix) else d): s for d, s in raw.get(q, {}).items()}
    judged = {q: bench.qrels.get(q, {}) for q in qids}
    if not any(v > 0 for j in judged.values() for v in j.values()):
        return dict.fromkeys(qids)
    per = score_run(run, judged, measures=["nDCG@10"]).per_query
    return {q: per[q]["nDCG@10"] if q in per else None for q in qids}


def model_name(generator: str) -> str:
    """The model part of a generator label: before ``@``, after the last ``/`` or ``:``."""
    return re.split(r"[/:]", generator.split("@", 1)[0])[-1].strip()


def family_of(generator: str) -> tuple[str, float | None]:
    """(family, size in billions or None) of a generator label, e.g. ``openai:Qwen/Qwen2.5-7B@http://h/v1`` ->
    ``("qwen", 7.0)``: the family is the model name's leading letters, lower-cased."""
    name = model_name(generator)
    found = _FAMILY.match(re.sub(r"^meta-", "", name, flags=re.I))
    size = _SIZE.search(name)
    return (found.group(0).lower() if found else name.lower()), (float(size.group(1)) if size else None)


def size_families(generators: Sequence[str]) -> dict[str, list[str]]:
    """Families of Table 26 (two or more generators), each sorted from the largest size (unknown sizes last)."""
    by: dict[str, list[str]] = {}
    for g in generators:
        by.setdefault(family_of(g)[0], []).append(g)
    return {f: sorted(gs, key=lambda g: (-(family_of(g)[1] or -1.0), g)) for f, gs in by.items() if len(gs) > 1}


def summarise(rows: Sequence[Mapping[str, Any]], files: Sequence[Any], bench: Any, judge: Mapping[str, Any],
              lexical: Mapping[str, Any] | None, runs: Mapping[str, str], scoring: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON summary: one entry per predictions file (generator x mode) with judge, dimension, lexical and
    turn-position means, failures and missing turns, and the correlation where a run was given. ``scoring``: the
    profile, its normalisation in words and the comparability with RECOR's tables."""
    domains = list(bench.domains)
    systems = []
    for f in files:
        frows = [r for r in rows if r["file"] == f.path]
        scored = [r for r in frows if r["judged"]]
        dims = [d for d in DIMENSIONS if d != "faithfulness" or f.mode != "none"]
        entry: dict[str, Any] = {
            "file": f.path, "generator": f.generator, "mode": f.mode, "turns": len(frows), "judged": len(scored),
            "failed": {r["task_id"]: r["failure"] for r in frows if not r["judged"]},
            "missing": list(f.missing),
            "judge_average": macro(scored, lambda r: r["judge_average"], domains),
            "dimensions": {d: macro(scored, lambda r, d=d: r["normalised"].get(d), domains) for d in dims},
            "by_turn": {b: macro([r for r in scored if r["position"] == b], lambda r: r["judge_average"], domains)
                        for b in BUCKETS if any(r["position"] == b for r in scored)},
        }  # fmt: skip
        if lexical is not None:
            entry["lexical"] = {m: macro(scored, lambda r, m=m: r["lexical"].get(m), domains)
                                for m in lexical["metrics"]}  # fmt: skip
        if f.path in runs:
            entry["run"] = runs[f.path]
            entry["correlation"] = correlation(scored, domains)
        systems.append(entry)
    from convrag.core.provenance import local_path, relative_paths

    return relative_paths({
        "benchmark": bench.name, "folder": local_path(bench.folder), "split": bench.split, "domains": domains,
        "profile": scoring["profile"], "comparability": dict(scoring["comparability"]),
        "judge": dict(judge), "normalisation": scoring["normalisation"], "lexical": lexical, "systems": systems,
        "counts": {"turns": len(rows), "judged": sum(r["judged"] for r in rows),
                   "judge_failures": sum(not r["judged"] for r in rows),
                   "missing_predictions": sum(len(f.missing) for f in files)},
    })  # fmt: skip


# -- markdown -------------------------------------------------------------------------------------------------
def _n(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _table(head: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in body), ""]


def cautions(s: Mapping[str, Any]) -> list[str]:
    """One sentence per degenerate answer file and per judge dimension whose verdicts do not vary."""
    found = [f"{label}: degenerate answers: {flag}." for label, checks in (s.get("degenerate") or {}).items()
             for flag in checks["flags"]]
    return found + [f"Judge dimension {d}: {line}." for d, line in (s.get("constant_verdicts") or {}).items()]


def caution_lines(s: Mapping[str, Any]) -> list[str]:
    """The "Read with care" block that opens results.md: the :func:`cautions` (nothing when there is none)."""
    found = cautions(s)
    return ["## Read with care", "", *(f"- {line}" for line in found), ""] if found else []


def _notes(s: Mapping[str, Any], settings_line: bool) -> list[str]:
    judge, counts = s["judge"], s["counts"]
    lines = [f"Judge: {', '.join(judge['judges'])} ({judge['combine']}), prompt {judge['prompt']}.",
             f"Scores: {s['normalisation']}."]
    if settings_line:
        lines.append(s["comparability"]["line"])
    if judge.get("placeholder"):
        lines.append(f"**Warning: {PLACEHOLDER_WARNING}.**")
    if counts["judge_failures"]:
        lines.append(f"**Left out of every mean: {counts['judge_failures']} of {counts['turns']} answers whose judge "
                     "call failed (listed under Counts).**")
    if counts["missing_predictions"]:
        lines.append(f"Turns without a prediction (not scored): {counts['missing_predictions']}.")
    return [*(f"> {line}  " for line in lines), ""]


def _by_mode(s: Mapping[str, Any]) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for mode in ("retrieved", "oracle", "none"):
        found = [e for e in s["systems"] if e["mode"] == mode]
        if found:
            out[mode] = found
    return out


def _table_26(generators: Sequence[str], cell: Mapping[tuple[str, str], float | None], digits: int) -> list[str]:
    lines = ["### Table 26: model size by family (macro over domains; RAG delta = (Retrieved - NoRetrieval) x 100)",
             ""]
    families = size_families(generators)
    if not families:
        return [*lines, "No family with two or more generators (family: the model name's leading letters).", ""]
    body = []
    for family, members in families.items():
        body.append([f"*{family} family*", "", "", "", ""])
        for g in members:
            ret, none = cell.get((g, "retrieved")), cell.get((g, "none"))
            delta = "-" if ret is None or none is None else f"{(ret - none) * 100:+.1f}"
            body.append([model_name(g), *[_n(cell.get((g, m)), digits) for m in ("oracle", "retrieved", "none")],
                         delta])
    return lines + _table(["Model", "Oracle", "Retr.", "No.Retr.", "RAG delta"], body)


def render_tables(result: Mapping[str, Any], digits: int = 3, settings_line: bool = True) -> str:
    """Markdown in the shape of RECOR's Tables 7/21/22, 8, 23, 24, 25, 26, 9 and Figure 3 (as a table);
    ``settings_line``: put the scale / comparability line among the notes (the command prints it last instead)."""
    s = result["summary"]
    modes = _by_mode(s)
    lines = [*caution_lines(s), f"## Generation scores: {s['benchmark'] or s['folder']} ({s['split']})", "",
             *_notes(s, settings_line)]
    for mode, systems in modes.items():
        lines += [f"### Table {MODE_TABLE[mode]}: LLM-judge average by domain ({MODE_LABELS[mode]} mode)", ""]
        body = [[d, *[_n(e["judge_average"]["by_domain"].get(d), digits) for e in systems]] for d in s["domains"]]
        body.append(["Average", *[_n(e["judge_average"]["macro"], digits) for e in systems]])
        lines += _table(["Domain", *[e["generator"] for e in systems]], body)
    generators = list(dict.fromkeys(e["generator"] for e in s["systems"]))
    cell = {(e["generator"], e["mode"]): e["judge_average"]["macro"] for e in s["systems"]}
    lines += ["### Table 8: LLM-judge average by mode (macro over domains; NoRetrieval excludes Faithfulness)", ""]
    order = [m for m in MODE_LABELS if m in modes]  # the paper's column order: Oracle, Retrieved, NoRetrieval
    body = [[g, *[_n(cell.get((g, m)), digits) for m in order]] for g in generators]
    avg = [[v for g in generators if (v := cell.get((g, m))) is not None] for m in order]
    body.append(["Average", *[_n(statistics.fmean(v) if v else None, digits) for v in avg]])
    lines += _table(["Model", *[MODE_LABELS[m] for m in order]], body)
    for mode, systems in modes.items():
        dims = [d for d in DIMENSIONS if d != "faithfulness" or mode != "none"]
        lines += [f"### Table 23: dimensions ({MODE_LABELS[mode]} mode, macro over domains)", ""]
        body = [[e["generator"], *[_n(e["dimensions"][d]["macro"], digits) for d in dims],
                 _n(e["judge_average"]["macro"], digits)] for e in systems]  # fmt: skip
        lines += _table(["Model", *[SHORT[d] for d in dims], "Avg"], body)
    for e in s["systems"]:
        dims = list(e["dimensions"])
        lines += [f"### Table 24: dimensions by domain ({e['generator']}, {MODE_LABELS[e['mode']]})", ""]
        body = [[d, *[_n(e["dimensions"][k]["by_domain"].get(d), digits) for k in dims]] for d in s["domains"]]
        body.append(["Average", *[_n(e["dimensions"][k]["macro"], digits) for k in dims]])
        lines += _table(["Domain", *[SHORT[k] for k in dims]], body)
    if s.get("lexical"):
        metrics, unavailable = s["lexical"]["metrics"], s["lexical"]["unavailable"]
        for mode, systems in modes.items():
            lines += [f"### Table 25: lexical metrics vs the reference answer ({MODE_LABELS[mode]} mode, macro over "
                      "domains)", ""]  # fmt: skip
            body = [[e["generator"], *["n/a" if m in unavailable else _n(e["lexical"][m]["macro"], digits)
                                       for m in metrics]] for e in systems]  # fmt: skip
            lines += _table(["Model", *[LEXICAL_LABELS[m] for m in metrics]], body)
        if "bertscore" in s["lexical"]:
            b = s["lexical"]["bertscore"]
            lines.append(f"BERTScore F1 model: {b['model']}, layer {b['num_layers']}, "
                         f"{'rescaled' if b['rescale_with_baseline'] else 'not rescaled'}.")
        lines += [f"METEOR: {why}" for m, why in unavailable.items() if m == "meteor"]
        lines.append("")
    lines += _table_26(generators, cell, digits)
    for e in s["systems"]:
        if "correlation" not in e:
            continue
        c = e["correlation"]
        lines += [f"### Table 9: retrieval vs generation by domain ({e['generator']}, {MODE_LABELS[e['mode']]}; "
                  f"run {e['run']})", ""]  # fmt: skip
        body = [[d, _n(v["ndcg@10"], digits), _n(v["judge_average"], digits)] for d, v in c["domains"].items()]
        body.append(["Average", _n(c["ndcg@10"], digits), _n(c["judge_average"], digits)])
        lines += _table(["Domain", "nDCG@10", "LLM-Judge"], body)
        for key, what in (("pearson_domains", "across domains"), ("pearson_turns", "across turns")):
            p = c[key]
            lines.append(f"- Pearson r {what}: " + (p["note"] if p["r"] is None else
                                                    f"{p['r']:.{digits}f} (p = {p['p']:.3g}, n = {p['n']})"))
        lines.append("")
    lines += ["### Figure 3: LLM-judge average by turn position (macro over domains)", ""]
    buckets = [b for b in BUCKETS if any(b in e["by_turn"] for e in s["systems"])]
    body = [[e["generator"], MODE_LABELS[e["mode"]], *[_n(e["by_turn"].get(b, {}).get("macro"), digits)
                                                        for b in buckets]] for e in s["systems"]]  # fmt: skip
    lines += _table(["Model", "Mode", *buckets], body)
    lines += ["### Counts", ""]
    for e in s["systems"]:
        failed = list(e["failed"])
        listed = f" ({', '.join(failed[:10])}{' ...' if len(failed) > 10 else ''})" if failed else ""
        lines.append(f"- {e['file']} ({e['generator']}, {e['mode']}): {e['turns']} answers, {e['judged']} judged, "
                     f"{len(failed)} judge failures{listed}, {len(e['missing'])} benchmark turns without a prediction")
    for spec, rep in (s.get("llm_report") or {}).items():
        lines.append(f"- judge {spec}: {rep['calls']} calls, {rep['cache_hits']} cache hits, {rep['failures']} "
                     f"failures, tokens {rep['prompt_tokens']} in / {rep['completion_tokens']} out, est. cost "
                     f"${rep['cost_usd']:.4f}")  # fmt: skip
    if s["judge"].get("placeholder"):
        lines += ["", f"To measure, {REAL_MODEL_HINT.replace('point it', 'point --judge')}."]
    return "\n".join(lines) + "\n"


def write_outputs(result: Mapping[str, Any], out_dir: str | Path, digits: int = 3) -> None:
    """``per_turn.jsonl``, ``results.json`` (summary), ``results.md`` and ``llm_report.json`` in ``out_dir``;
    each written beside its final name and renamed into place."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    texts = {"per_turn.jsonl": "".join(json.dumps(json_safe(r), ensure_ascii=False) + "\n" for r in result["per_turn"]),
             "results.json": json.dumps(json_safe(result["summary"]), indent=2) + "\n",
             "results.md": render_tables(result, digits=digits),
             "llm_report.json": json.dumps(json_safe(result["summary"].get("llm_report", {})), indent=2) + "\n"}
    for name, text in texts.items():
        tmp = out / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out / name)
