"""Cautions that decide how an evaluation may be read, computed from the data it scored.

Each caveat is ``{"kind", "text"}``; results.json lists them under ``caveats``, results.md opens with them and the
plots carry them as a footnote. Kinds:

* ``saturated``: cut-off measures (``Recall@K``, ``nDCG@K``, ...) whose K is at or above the number of candidate
  documents (the turn's pool under ``search=pool``, else its subset's corpus) for at least
  :data:`SATURATED_SHARE` of the scored turns: every ranking reaches all the candidates there, so Recall@K (and
  Success@K) is 1.0 for any system and cannot tell systems apart, and nDCG@K, MAP@K, MRR@K score only the order of
  a handful of documents. One caveat lists them all.
* ``reduced-corpus``: a subset scored against another corpus kind than the benchmark's own (the first one its
  profile declares, e.g. MTRAG's cited passages instead of the full corpora): a far smaller search space, whose
  figures are not comparable to those over the benchmark's own corpus or to the papers'.
* ``small-groups``: subsets (domains) with fewer than :data:`convrag.evaluation.tables.SMALL_N` scored turns, whose
  means are too noisy to compare.
* ``placeholder``: the benchmark's queries or labels, or an LLM strategy's queries, came from the embedded placeholder
  model (the note of :func:`convrag.evaluate.report.synthesis_info` or of the strategy's LLM).
* ``renamed-systems``: two retrievers whose models are folders of the same name, so that their systems would share a
  name; what they are called instead (:func:`convrag.retrievers.model_record.system_names`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any

from convrag.evaluation.engine import Scored
from convrag.evaluation.tables import SMALL_N

#: share of scored turns at or under the cut-off that makes a measure saturated
SATURATED_SHARE = 0.10

_CUTOFF = re.compile(r"@(\d+)$")
#: measures that reach 1.0 for any ranking once every candidate is within the cut-off
_SET_MEASURES = {"recall", "r", "success", "hit", "hitrate", "hit_rate"}


def _candidates(scored: Scored, size: Callable[[str], int]) -> dict[str, int]:
    """Query id -> how many documents its search ranks (its pool, else its subset's corpus, ``size(subset)``)."""
    data = scored.data
    if data.pools is not None:
        return {t.qid: len(data.pools.get(t.qid, [])) for t in data.turns}
    return {t.qid: size(t.domain) for t in data.turns}


def _saturated(scored: Scored, size: Callable[[str], int]) -> list[dict[str, Any]]:
    candidates = _candidates(scored, size)
    if not candidates:
        return []
    where = "pool" if scored.data.pools is not None else "corpus"
    hit: dict[str, list[str]] = {}  # measure -> query ids with at most K candidates
    for measure in scored.measures:
        match = _CUTOFF.search(measure)
        if match is not None:
            within = [q for q, n in candidates.items() if n <= int(match.group(1))]
            if len(within) / len(candidates) >= SATURATED_SHARE:
                hit[measure] = within
    if not hit:
        return []
    queries = set().union(*hit.values())
    largest = max(candidates[q] for q in queries)
    share = "every query" if len(queries) == len(candidates) else f"{len(queries):,} of {len(candidates):,} queries"
    recall = [m for m in hit if m.split("@")[0].lower() in _SET_MEASURES]
    order = [m for m in hit if m not in recall]
    text = (f"For {share} the {where} searched holds at most {largest:,} documents, no more than the cut-off of "
            f"{', '.join(hit)}: every ranking reaches all of them")
    if recall:
        text += f", so {', '.join(recall)} is 1.0 there for any system (saturated: it cannot tell systems apart)"
    if order:
        text += f"; {', '.join(order)} score only the order of those few documents"
    return [{"kind": "saturated", "measures": list(hit), "saturated": recall, "queries": len(queries),
             "largest_search_space": largest, "text": text + "."}]


def _reduced(scored: Scored, size: Callable[[str], int]) -> list[dict[str, Any]]:
    own = next(iter(scored.profile.corpus))
    other: dict[str, list[str]] = {}
    for subset, kind in scored.data.corpus_kind.items():
        if kind != own:
            other.setdefault(kind, []).append(subset or "all")
    out = []
    for kind, subsets in other.items():
        sizes = sum(size(s if s != "all" else "") for s in subsets)
        out.append({"kind": "reduced-corpus",
                    "text": f"Scored against the {kind!r} corpus ({sizes:,} documents; {', '.join(sorted(subsets))}), "
                            f"not the benchmark's own {own!r} corpus: a far smaller search space, so these figures "
                            "are not comparable to those over its own corpus or to the papers'."})
    return out


def _small_groups(scored: Scored) -> list[dict[str, Any]]:
    if scored.data.subsets == [""]:
        return []
    counts = {s: len(scored.data.subset_turns(s)) for s in scored.data.subsets}
    small = {s: n for s, n in counts.items() if 0 < n < SMALL_N}
    if not small:
        return []
    listed = ", ".join(f"{s} (n={n})" for s, n in sorted(small.items()))
    return [{"kind": "small-groups",
             "text": f"{len(small)} of {len(counts)} subsets have fewer than {SMALL_N} queries: {listed}; their "
                     "means are too noisy to compare."}]


def caveats(results: Mapping[str, Any], scored: Scored) -> list[dict[str, Any]]:
    """The caveats of an evaluation (see the module docstring), in a fixed order: placeholder, renamed systems,
    reduced corpus, saturation, small groups."""
    out = [{"kind": "placeholder", "text": part["note"]} for part in (results.get("synthesis"), results.get("llm"))
           if part and part.get("placeholder")]
    size = functools.cache(lambda subset: len(scored.data.doc_ids(subset)))  # each corpus's ids read once, if at all
    renamed = [{"kind": "renamed-systems", "text": f"{why}."} for why in dict.fromkeys(scored.renamed.values())]
    return out + renamed + _reduced(scored, size) + _saturated(scored, size) + _small_groups(scored)


def caveat_block(items: list[Mapping[str, Any]]) -> str:
    """The block that opens results.md: a heading and one bullet per caveat ('' when there is none)."""
    if not items:
        return ""
    return "\n".join(["## Read with care", "", *(f"- {c['text']}" for c in items)]) + "\n\n"
