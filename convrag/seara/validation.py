"""SEARA offline validation where the truth is known (memo ``shared/reference/seara.md`` section 6.7).

A *truth set* (:class:`TruthSet`) has complete labels, every relevant item of every query known: ``hotpotqa``
(:func:`load_hotpotqa`: StratRAG pools from HotpotQA, each question searched within its pool) or ``mtrag``
(:func:`load_mtrag`: the passages MTRAG conversations cite). Metrics of a configuration's run cut at ``k``
(``metrics/pr_auc`` ``score_chunks``, micro step PR-AUC; otherwise the metric's defaults: a query with no (pooled)
relevant item is excluded, its retrieved items left out of the micro precision):

* **true**: against the complete labels (recall denominator R_q = every true relevant item);
* **pseudo**: against the judged pool of ``n`` pooled configurations (R'_q = pooled items the judge calls relevant);
  a ranked item outside the pool reads as non-relevant (``unjudged="nonrelevant"``).
With an oracle judge and every configuration pooled, pseudo = true x sum_q R_q / sum_{q: R'_q > 0} R'_q x n_all /
n_scored, one constant (each configuration returning equally many items for every query, as these families do), so
tau-b = 1 and regret = 0 exactly. Verdicts being deterministic per (query, item), each judge judges the pool of all
configurations once (:func:`convrag.seara.judge.judge_pool`); every smaller pool reuses them, restricted to its pairs.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from statistics import fmean, median
from typing import Any

from scipy.stats import kendalltau

from convrag.builders import stratrag_rules as rules
from convrag.builders.base import BuildReport
from convrag.builders.mtrag import MTRAG
from convrag.builders.mtrag_source import locate
from convrag.builders.stratrag import read_hotpot
from convrag.core.errors import ConvragError
from convrag.judging.items import AuditDoc, AuditItem
from convrag.judging.pooling import POOLED, NoisyOracleJudge, OracleJudge, RelevanceJudge, relevance_verdict
from convrag.judging.verdict import Verdict
from convrag.metrics.pr_auc.compute import score_chunks
from convrag.retrievers import get_retriever
from convrag.seara.judge import judge_pool
from convrag.seara.pool import build_pool

#: decimals kept before ranking configurations (ties within float noise stay ties)
DECIMALS = 12
NOISE_RATES = (0.05, 0.1, 0.2)
LENGTH_RATE = 0.1
Run = dict[str, list[str]]


class ValidationError(ConvragError):
    """Bad input to the SEARA validation (unknown configuration, empty truth set, bad counts)."""


@dataclass
class TruthSet:
    """Queries, corpus texts and complete labels ``qrels`` (``{qid: {doc_id: 3}}``, relevant items only).

    ``pools``: each query's candidate pool (None: the whole corpus); ``facts``: gold fact spans
    ``{qid: [(doc_id, start, end)]}`` (hotpotqa only); ``sentences``: ``{doc_id: [(start, end)]}`` sentence spans."""

    name: str
    queries: dict[str, str]
    corpus: dict[str, str]
    qrels: dict[str, dict[str, int]]
    pools: dict[str, list[str]] | None = None
    facts: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)
    sentences: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def head(self, n: int | None) -> TruthSet:
        """The first ``n`` queries (in query order; None = all); the corpus is kept whole."""
        if n is None:
            return self
        keep = list(self.queries)[:n]
        pick = {q: self.queries[q] for q in keep}
        return replace(self, queries=pick, qrels={q: self.qrels[q] for q in keep},
                       pools=None if self.pools is None else {q: self.pools[q] for q in keep},
                       facts={q: self.facts[q] for q in keep if q in self.facts})


def load_hotpotqa(path: str | Path, *, pool_size: int = rules.POOL_SIZE, seed: int = 42) -> TruthSet:
    """The ``hotpotqa`` truth set from a HotpotQA file, or a folder of them (its ``*train*.json`` files, then its
    ``*dev*.json`` files, rows numbered on across files as StratRAG does): StratRAG pools built from the distractor
    records by the StratRAG rules (:mod:`convrag.builders.stratrag_rules`, ``fill="borrow"``: ``pool_size`` = 15
    paragraphs per question, the 2 gold ones and distractors, topped up with other questions' distractors). A
    question is searched within its pool, where labels are complete (gold relevant, the rest not). Gold minimal
    facts: the ``supporting_facts`` sentences, whitespace-stripped, as character spans of the paragraph text
    (``title + " " + sentences``). Doc ids as StratRAG's (``doc_<row>_<paragraph>``), query ids the HotpotQA
    ``_id``; records the StratRAG rules exclude are skipped."""
    path = Path(path)
    files = sorted(path.glob("*train*.json")) + sorted(path.glob("*dev*.json")) if path.is_dir() else [path]
    if not files or not files[0].is_file():
        raise ValidationError(f"no HotpotQA file at {path}")
    raws = [raw for f in files for raw in read_hotpot(str(f))]
    valid = [(row, raw, *parts) for row, raw in enumerate(raws)
             if (parts := rules.gold_and_distractors(raw, BuildReport())) is not None]
    borrow = [{"doc_id": f"doc_{row:08d}_{i:02d}", "text": rules.paragraph_text(*raw["context"][i]),
               "source": raw["context"][i][0]} for row, raw, _, distractors in valid for i in distractors]
    options = rules.PoolOptions(pool_size=pool_size, seed=seed, fill="borrow")
    truth = TruthSet("hotpotqa", {}, {}, {}, {})
    for row, raw, gold, distractors in valid:
        qid = raw["_id"]
        pool = rules.build_pool(raw, row, gold, distractors, options, borrow)
        truth.queries[qid] = raw["question"]
        truth.pools[qid] = [d["doc_id"] for d in pool]  # type: ignore[index]
        truth.qrels[qid] = {pool[i]["doc_id"]: 3 for i in range(rules.N_GOLD)}
        for d in pool:
            truth.corpus[d["doc_id"]] = d["text"]
        wanted = {(rules.nfc(t), i) for t, i in raw["supporting_facts"]}
        truth.facts[qid] = []
        for p, (title, sents) in enumerate(raw["context"]):
            doc_id, pos, spans = f"doc_{row:08d}_{p:02d}", len(title) + 1, []
            for i, s in enumerate(sents):
                lead, body = len(s) - len(s.lstrip()), s.strip()
                if body:
                    spans.append((pos + lead, pos + lead + len(body)))
                    if (rules.nfc(title), i) in wanted:
                        truth.facts[qid].append((doc_id, pos + lead, pos + lead + len(body)))
                pos += len(s)
            truth.sentences.setdefault(doc_id, spans)
    if not truth.queries:
        raise ValidationError(f"no usable HotpotQA record in {path}")
    return truth


def load_mtrag(folder: str | Path, view: str = "rewrite") -> TruthSet:
    """The ``mtrag`` truth set from an MTRAG checkout: the passages cited in MTRAG conversations, all four domains
    in one corpus (retrieval over all of it); queries = the released ``view`` (``rewrite``: the standalone rewrite
    of the last turn), restricted to the tasks with qrels; labels = the released qrels (score > 0 relevant); doc
    ids ``<domain>:<passage id>``."""
    if not Path(folder).is_dir():
        raise ValidationError(f"MTRAG folder not found: {folder}")
    data = MTRAG.parse(locate(str(folder), MTRAG.layout()))
    truth = TruthSet("mtrag", {}, {}, {})
    for domain in sorted(data.cited):
        for pid, row in sorted(data.cited[domain].items()):
            truth.corpus[f"{domain}:{pid}"] = " ".join(p for p in (row.get("title"), row.get("text")) if p)
        relevant: dict[str, dict[str, int]] = {}
        for r in data.qrels.get(domain, []):
            if r["score"] > 0 and f"{domain}:{r['corpus-id']}" in truth.corpus:
                relevant.setdefault(r["query-id"], {})[f"{domain}:{r['corpus-id']}"] = 3
        for q in data.queries.get(domain, {}).get(view, []):
            if q["_id"] in relevant:
                truth.queries[q["_id"]], truth.qrels[q["_id"]] = q["text"], relevant[q["_id"]]
    if not truth.queries:
        raise ValidationError(f"no MTRAG query with qrels in {folder} (view {view!r})")
    return truth


# --- configurations ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Configuration:
    """A ranking system: retriever ``spec`` with ``options``, its list cut at ``depth`` (None = the run's k)."""

    name: str
    spec: str
    options: tuple[tuple[str, Any], ...] = ()
    depth: int | None = None


def default_configurations(dense: bool = True) -> list[Configuration]:
    """The family compared: 9 configurations with the dense model, 8 without (lexical, fusion, random, depths)."""
    family = [Configuration("bm25", "bm25"), Configuration("bm25-k0.9-b0.4", "bm25", (("k1", 0.9), ("b", 0.4))),
              Configuration("bm25s", "bm25s"), Configuration("random", "random:0")]
    if dense:
        return family + [Configuration("dense", "dense"), Configuration("hybrid", "hybrid"),
                         Configuration("rrf-bm25-dense", "rrf"), Configuration("bm25@5", "bm25", depth=5),
                         Configuration("dense@3", "dense", depth=3)]
    return family + [Configuration("random-1", "random:1"),
                     Configuration("rrf-bm25-random", "rrf", (("retrievers", ("bm25", "random:0")),)),
                     Configuration("bm25@5", "bm25", depth=5), Configuration("bm25s@3", "bm25s", depth=3)]


def make_runs(truth: TruthSet, configurations: Sequence[Configuration], k: int,
              progress: Callable[[str], None] | None = None) -> dict[str, Run]:
    """Each configuration's run ``{qid: [doc ids]}``: top-``k`` (or top-``depth``) of its retriever, restricted to
    the query's pool when the truth set has pools; one search per distinct (spec, options)."""
    searched: dict[tuple[str, tuple[tuple[str, Any], ...]], dict[str, dict[str, float]]] = {}
    runs: dict[str, Run] = {}
    for c in configurations:
        key = (c.spec, c.options)
        if key not in searched:
            if progress:
                progress(f"{truth.name}: searching with {c.spec} {dict(c.options) or ''}".rstrip())
            retriever = get_retriever(c.spec, show_progress=False, **dict(c.options))
            retriever.index(truth.corpus, show_progress=False)
            searched[key] = retriever.search(truth.queries, top_k=k, pools=truth.pools)
        depth = min(k, c.depth or k)
        runs[c.name] = {q: list(searched[key][q])[:depth] for q in truth.queries}
    return runs


# --- metrics -------------------------------------------------------------------------------------------------------
def micro_pr_auc(runs: Mapping[str, Run], qrels: Mapping[str, Mapping[str, int]], k: int) -> dict[str, float]:
    """Micro step PR-AUC@k of every run against ``qrels`` (``score_chunks`` defaults, unjudged = non-relevant);
    0.0 when no query has a relevant item."""
    out = {}
    for name, run in runs.items():
        res = score_chunks(run, qrels, k=k, unjudged="nonrelevant")
        out[name] = 0.0 if res["pr_auc"] is None else float(res["pr_auc"])
    return out


def tau_ap(true: Sequence[float], pseudo: Sequence[float]) -> float:
    """tau_AP (Yilmaz, Aslam & Robertson 2008) of the pseudo ordering against the true one: items sorted by pseudo
    value descending (ties: input order); tau_AP = 2 / (N - 1) * sum_{i=2..N} C(i) / (i - 1) - 1, where C(i)
    counts the items above position i that the truth also puts above it (a pair tied in both counts 1, a pair
    tied in only one of them 1/2)."""
    order = sorted(range(len(pseudo)), key=lambda i: -pseudo[i])
    total = 0.0
    for pos in range(1, len(order)):
        i = order[pos]
        total += sum(0.5 if (true[j] == true[i]) != (pseudo[j] == pseudo[i]) else
                     float(true[j] >= true[i]) for j in order[:pos]) / pos
    return 2 * total / (len(order) - 1) - 1


def compare(true: Mapping[str, float], pseudo: Mapping[str, float]) -> dict[str, Any]:
    """Kendall tau-b (``scipy.stats.kendalltau``, variant b; NaN when one side is constant) and :func:`tau_ap`
    between the pseudo and the true orderings of the configurations, top-1 agreement and regret. Values are
    rounded to :data:`DECIMALS` first. The pseudo-chosen configuration has the best pseudo value (ties: the first
    in ``pseudo``'s order); it agrees when its true value is the true maximum; regret = true maximum - its true
    value (>= 0; 0 = no loss; the memo's "selected minus best" with the sign flipped)."""
    names = list(pseudo)
    t = [round(true[n], DECIMALS) for n in names]
    p = [round(pseudo[n], DECIMALS) for n in names]
    tau = round(float(kendalltau(p, t, variant="b").statistic), DECIMALS)
    chosen = names[p.index(max(p))]
    regret = max(t) - round(true[chosen], DECIMALS)
    return {"tau_b": tau, "tau_ap": round(tau_ap(t, p), DECIMALS), "top1": regret == 0, "regret": regret,
            "chosen": chosen}


# --- judges --------------------------------------------------------------------------------------------------------
class LengthBiasedOracleJudge(OracleJudge):
    """The oracle with length-correlated errors. For a pair with uniform draw u (``random.Random`` keyed by
    (seed, query id, item id), so a pair always gets the same verdict): a relevant item is flipped to 0 when
    u < ``rate``; a non-relevant item with text length L (characters) is flipped to 3 when
    u < min(1, ``rate`` * L / ``reference_length``). A non-relevant text of the reference length (the
    validation uses the corpus median) has false-positive rate ``rate``, one twice as long twice that."""

    def __init__(self, qrels: Mapping[str, Mapping[str, int]], rate: float, reference_length: float,
                 seed: int = 0) -> None:
        if not 0.0 <= rate <= 1.0 or reference_length <= 0:
            raise ValidationError(f"rate must be in [0, 1] and reference_length > 0, got {rate}, {reference_length}")
        super().__init__(qrels, name=f"length-oracle(rate={rate:g},ref={reference_length:g},seed={seed})")
        self.rate, self.reference_length, self.seed = rate, reference_length, seed

    def verdict(self, item: AuditItem, doc: AuditDoc, dimension: str = POOLED) -> Verdict:
        u = random.Random(f"length-oracle:{self.seed}:{item.item_id}:{doc.doc_id}").random()
        truth = self.truth(item, doc)
        p = self.rate if truth else min(1.0, self.rate * len(doc.text) / self.reference_length)
        flipped = u < p
        return relevance_verdict(item, doc, self.name, dimension, 3 if truth != flipped else 0,
                                 "flipped" if flipped else "as labelled", "", None, flipped=flipped)


def make_judge(kind: str, truth: TruthSet, seed: int) -> RelevanceJudge:
    """``oracle``, ``noisy-<rate>`` (:class:`NoisyOracleJudge`: false-positive = false-negative rate) or
    ``length-<rate>`` (:class:`LengthBiasedOracleJudge`, reference = the median corpus text length)."""
    if kind == "oracle":
        return OracleJudge(truth.qrels)
    name, _, rate = kind.partition("-")
    try:
        value = float(rate)
    except ValueError:
        raise ValidationError(f"unknown judge {kind!r}: oracle, noisy-<rate> or length-<rate>") from None
    if not 0.0 <= value <= 1.0:
        raise ValidationError(f"judge {kind!r}: the rate must be in [0, 1]")
    if name == "noisy":
        return NoisyOracleJudge(truth.qrels, value, seed)
    if name == "length":
        return LengthBiasedOracleJudge(truth.qrels, value, median(map(len, truth.corpus.values())), seed)
    raise ValidationError(f"unknown judge {kind!r}: oracle, noisy-<rate> or length-<rate>")


def default_judges() -> list[str]:
    """oracle, noisy at :data:`NOISE_RATES`, length-correlated at :data:`LENGTH_RATE`."""
    return ["oracle", *(f"noisy-{r:g}" for r in NOISE_RATES), f"length-{LENGTH_RATE:g}"]


def judged_qrels(truth: TruthSet, runs: Mapping[str, Run], k: int, judge: RelevanceJudge) -> dict[str, dict[str, int]]:
    """Grades of every pair of the pool of all ``runs`` by ``judge``, through :func:`judge_pool`."""
    pool = build_pool(runs, k, list(truth.queries))
    pseudo = judge_pool(pool, truth.queries, truth.corpus, judge, echo=None, concurrency=1)
    if pseudo.failed:
        raise ValidationError(f"{len(pseudo.failed)} judgments failed: an oracle never fails")
    return pseudo.qrels


def restrict(qrels: Mapping[str, Mapping[str, int]], runs: Mapping[str, Run], k: int,
             queries: Sequence[str]) -> dict[str, dict[str, int]]:
    """``qrels`` restricted to the depth-``k`` pool of ``runs`` (every query present, possibly empty)."""
    out: dict[str, dict[str, int]] = {q: {} for q in queries}
    for run in runs.values():
        for q in queries:
            for d in run.get(q, [])[:k]:
                out[q][d] = qrels[q][d]
    return out


def pooled_subsets(names: Sequence[str], n: int, seed: int) -> list[str]:
    """The ``n`` pooled configurations for ``seed``: all when ``n >= len(names)``, else a sample drawn by
    ``random.Random(f"pool:{seed}:{n}")``, kept in family order."""
    if n < 1:
        raise ValidationError(f"the number of pooled configurations must be >= 1, got {n}")
    if n >= len(names):
        return list(names)
    pick = set(random.Random(f"pool:{seed}:{n}").sample(list(names), n))
    return [x for x in names if x in pick]


def validate(truth: TruthSet, runs: Mapping[str, Run], k: int, *, judges: Sequence[str] | None = None,
             pooled: Sequence[int] = (2, 4), seeds: int = 5,
             progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``true`` (metric per configuration) and ``rows``: per judge (:func:`make_judge` kinds, default
    :func:`default_judges`) x number of pooled configurations (``pooled`` plus all), :func:`compare` over seeds
    0..``seeds``-1 (seed s draws the pooled subset, :func:`pooled_subsets`, and the judge's noise): ``tau_b_mean``,
    ``tau_b_min``, ``tau_ap_mean``, ``top1_share``, ``regret_mean``, ``regret_max`` and the chosen ones."""
    if seeds < 1 or len(runs) < 2:
        raise ValidationError(f"need seeds >= 1 and >= 2 configurations, got {seeds} and {len(runs)}")
    qids, names = list(truth.queries), list(runs)
    true = micro_pr_auc(runs, truth.qrels, k)
    counts = sorted({min(n, len(names)) for n in pooled} | {len(names)})
    rows, judged = [], {}  # judged: full-pool grades by judge name (the oracle's do not depend on the seed)
    for kind in judges or default_judges():
        per_n: dict[int, list[dict[str, Any]]] = {n: [] for n in counts}
        for s in range(seeds):
            judge = make_judge(kind, truth, s)
            if judge.name not in judged:
                if progress:
                    progress(f"{truth.name}: judging the pool with {judge.name}")
                judged[judge.name] = judged_qrels(truth, runs, k, judge)
            full = judged[judge.name]
            for n in counts:
                chosen = pooled_subsets(names, n, s)
                qrels = restrict(full, {c: runs[c] for c in chosen}, k, qids)
                per_n[n].append(compare(true, micro_pr_auc(runs, qrels, k)))
        for n, cmp in per_n.items():
            taus = [c["tau_b"] for c in cmp]
            rows.append({"judge": kind, "pooled": n, "tau_b_mean": fmean(taus), "tau_b_min": min(taus),
                         "tau_ap_mean": fmean([c["tau_ap"] for c in cmp]),
                         "top1_share": sum(c["top1"] for c in cmp) / len(cmp),
                         "regret_mean": fmean([c["regret"] for c in cmp]), "regret_max": max(c["regret"] for c in cmp),
                         "chosen": [c["chosen"] for c in cmp]})
    return {"dataset": truth.name, "k": k, "queries": len(qids), "seeds": seeds, "true": true, "rows": rows}
