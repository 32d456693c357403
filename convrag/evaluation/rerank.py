"""The rerank stage of ``convrag evaluate`` (``--rerank SPEC``): each first-stage retriever's top-K reordered by a
second-stage model and reported as its own system ``<retriever>><name>`` (``bm25>ce``, ``dense>llm``).

Spec: ``[NAME=]KIND[:TARGET]@K`` (``NAME=`` renames the system suffix, needed when two ``--rerank`` share a kind).

* ``cross-encoder:PATH_OR_NAME@K`` (alias ``ce:``; suffix ``ce``): a sentence-transformers ``CrossEncoder`` loaded
  offline from a folder, or a Hub name already in the local Hugging Face cache (SEARA's
  :class:`~convrag.retrievers.llm_rerank.CrossEncoderReranker`: the top K sorted by score descending, ties by
  first-stage rank); pair scores are kept on disk (:class:`ScoreCache`).
* ``llm@K`` or ``llm:LLM_SPEC@K`` (suffix ``llm``): SEARA's sliding-window listwise reranker
  (:class:`~convrag.retrievers.llm_rerank.ListwiseReranker`, window 20, stride 10) through the LLM layer, whose cache
  keeps the replies; ``llm@K`` uses ``--llm`` (else ``$CONVRAG_LLM``, else the embedded placeholder). An LLM spec may
  itself hold ``@URL``: K is the number after the last ``@``.

How a ranking is reordered, scored and cut: :func:`rerank_runs`.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convrag.core.errors import ConvragError

Run = dict[str, dict[str, float]]
CACHE_ENV = "CONVRAG_RERANK_CACHE"
FORMAT_VERSION = 1
KINDS = {"cross-encoder": "ce", "ce": "ce", "llm": "llm"}
HELP = ("rerank each retriever's top K as its own system RETRIEVER>NAME (repeatable): cross-encoder:PATH_OR_NAME@K "
        "(sentence-transformers CrossEncoder, offline; system bm25>ce), llm@K (listwise through --llm) or "
        "llm:LLM_SPEC@K (system bm25>llm); NAME=SPEC renames the suffix. Documents below K keep their first-stage "
        "order; cross-encoder scores are cached in $CONVRAG_RERANK_CACHE, else $CONVRAG_CACHE_DIR/rerank, else "
        "~/.cache/convrag/rerank (none: off)")


@dataclass(frozen=True)
class RerankSpec:
    """One parsed ``--rerank``: ``kind`` (``cross-encoder`` or ``llm``), ``target`` (model folder, the resolved
    local folder of a Hub name, or an LLM spec; ``""``: the evaluation's LLM), ``depth`` K and system suffix."""

    kind: str
    target: str
    depth: int
    name: str

    def system(self, retriever: str) -> str:
        return f"{retriever}>{self.name}"


def _model_folder(target: str) -> Path | None:
    """A local folder, or a Hub name's snapshot in the local Hugging Face cache; None when neither."""
    if Path(target).expanduser().is_dir():
        return Path(target).expanduser()
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(target, local_files_only=True))
    except Exception:  # not a valid repo id, or not in the local cache
        return None


def parse_rerank(value: str) -> RerankSpec:
    """Read one ``--rerank`` value (module docstring); checks the depth, the kind, the model folder (or cached Hub
    name) and the LLM spec, without loading anything (``ConvragError`` naming the value)."""
    from convrag.core.options import NAME_EQ

    named = NAME_EQ.match(value.strip())
    name, body = (named.group(1), named.group(2)) if named else (None, value.strip())
    head, at, depth = body.rpartition("@")
    if not at or not depth.strip().isdigit() or int(depth) < 1:
        raise ConvragError(f"--rerank {value!r}: end the spec with @K, the number of documents reranked (K >= 1), "
                           "e.g. cross-encoder:/models/ms-marco-MiniLM-L6-v2@100 or llm@20")  # fmt: skip
    kind, _, target = head.partition(":")
    kind = kind.strip().lower()
    if kind not in KINDS:
        raise ConvragError(f"--rerank {value!r}: unknown reranker {kind!r}; use cross-encoder:PATH@K, llm@K or "
                           "llm:LLM_SPEC@K")  # fmt: skip
    target = target.strip()
    if KINDS[kind] == "ce":
        if not target:
            raise ConvragError(f"--rerank {value!r}: give the cross-encoder, e.g. cross-encoder:/models/CE@{depth}")
        folder = _model_folder(target)
        if folder is None:
            raise ConvragError(f"--rerank {value!r}: no model folder at {target} (and no model of that name in the "
                               "local Hugging Face cache)")  # fmt: skip
        target = str(folder)
    elif target:
        from convrag.llm.spec import parse_spec

        try:
            parse_spec(target)
        except ConvragError as err:
            raise ConvragError(f"--rerank {value!r}: {err}") from None
    return RerankSpec("cross-encoder" if KINDS[kind] == "ce" else "llm", target, int(depth), name or KINDS[kind])


def parse_reranks(values: Sequence[str] | None) -> list[RerankSpec]:
    """Every ``--rerank`` value read; two with the same system suffix are refused."""
    specs = [parse_rerank(v) for v in values or []]
    names = [s.name for s in specs]
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:
        raise ConvragError(f"two --rerank give systems the suffix {twice!r}: name them, e.g. --rerank ce2=SPEC")
    return specs


# ----------------------------------------------------------------- cross-encoder score cache
def default_cache_dir() -> Path | None:
    """The rerank cache root: ``$CONVRAG_RERANK_CACHE``, else ``$CONVRAG_CACHE_DIR/rerank``, else
    ``~/.cache/convrag/rerank``; ``None`` when turned off (``$CONVRAG_RERANK_CACHE`` set to ``none`` or ``off``)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return None if env.strip().lower() in ("none", "off") else Path(env)
    base = os.environ.get("CONVRAG_CACHE_DIR")
    return Path(base) / "rerank" if base else Path.home() / ".cache" / "convrag" / "rerank"


def pair_key(query: str, text: str) -> str:
    """sha256 (first 32 hex digits) over the length-prefixed UTF-8 query and document texts."""
    h = hashlib.sha256()
    for s in (query, text):
        b = s.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()[:32]


class ScoreCache:
    """Cross-encoder scores per (query text, document text) pair, of one model and setting, under
    ``root/<settings key>/scores-*.json``: the folder is keyed by the model's files
    (:func:`convrag.retrievers.embed.model_identity`, not its path) and ``max_length``, and only pairs not found
    there are scored. A file that cannot be read is ignored with a ``CacheWarning`` and its pairs scored again."""

    def __init__(self, root: Path | None, settings: Mapping[str, Any]) -> None:
        payload = json.dumps({"format": FORMAT_VERSION, **settings}, sort_keys=True, separators=(",", ":"))
        self.settings = dict(settings)
        self.folder = None if root is None else root / hashlib.sha256(payload.encode()).hexdigest()
        self._scores: dict[str, float] | None = None

    def scores(self) -> dict[str, float]:
        """Every stored pair score (read once)."""
        if self._scores is None:
            self._scores = {}
            for path in sorted(self.folder.glob("scores-*.json")) if self.folder and self.folder.is_dir() else []:
                try:
                    stored = json.loads(path.read_text(encoding="utf-8"))["scores"]
                    self._scores.update({str(k): float(v) for k, v in stored.items()})
                except (OSError, ValueError, TypeError, KeyError, AttributeError) as err:
                    from convrag.retrievers.embed import CacheWarning

                    warnings.warn(f"rerank cache file {path} is not used ({type(err).__name__}): its pairs are scored "
                                  "again", CacheWarning, stacklevel=2)  # fmt: skip
        return self._scores

    def add(self, new: Mapping[str, float]) -> None:
        """Keep ``new`` scores (one file written under a temporary name, then renamed)."""
        self.scores().update(new)
        if self.folder is None or not new:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        body = json.dumps({"settings": self.settings, "scores": dict(new)}, sort_keys=True)
        name = f"scores-{hashlib.sha256(body.encode()).hexdigest()[:24]}.json"
        fd, tmp = tempfile.mkstemp(prefix=".scores-", dir=self.folder)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(body)
        os.replace(tmp, self.folder / name)


class CachedPredictor:
    """Stands in for a CrossEncoder's ``predict``: pairs found in the cache are not scored again. Counts
    ``pairs`` asked, ``scored`` (distinct pairs computed now) and ``reused`` (the others: found in the cache, or
    repeating a pair of the same call, as placeholder pads of a pool do)."""

    def __init__(self, model: Any, cache: ScoreCache) -> None:
        self.model, self.cache = model, cache
        self.counts = {"pairs": 0, "scored": 0, "reused": 0}

    def predict(self, pairs: Sequence[tuple[str, str]], **options: Any) -> list[float]:
        keys = [pair_key(q, d) for q, d in pairs]
        known = self.cache.scores()
        todo = {k: i for i, k in enumerate(keys) if k not in known}
        if todo:
            fresh = self.model.predict([pairs[i] for i in todo.values()], **options)
            self.cache.add({k: float(s) for k, s in zip(todo, fresh, strict=True)})
        self.counts["pairs"] += len(keys)
        self.counts["scored"] += len(todo)
        self.counts["reused"] += len(keys) - len(todo)
        return [known[k] for k in keys]


# ----------------------------------------------------------------- the stage
@dataclass
class Stage:
    """A loaded reranker with its spec and what it did (``counts``, ``seconds`` per first-stage retriever)."""

    spec: RerankSpec
    reranker: Any
    predictor: CachedPredictor | None = None

    def describe(self) -> dict[str, Any]:
        """System suffix, depth, reranker settings, and the cache counts (cross-encoder) or LLM report (listwise)."""
        out = {"name": self.spec.name, "depth": self.spec.depth, **self.reranker.describe()}
        if self.predictor is not None:
            folder = self.predictor.cache.folder  # its settings hash only: no path of this machine in results
            out["cache"] = {"entry": folder.name if folder else None, **self.predictor.counts}
        else:
            out["report"] = self.reranker.report()
        return out


def load_stages(specs: Sequence[RerankSpec | str], llm: Any = None, device: str | None = None) -> list[Stage]:
    """Load every reranker (models, LLM clients) before any retrieval; ``llm``: the evaluation's LLM or spec, used
    by ``llm@K``."""
    from convrag.retrievers.embed import model_identity
    from convrag.retrievers.llm_rerank import CrossEncoderReranker, ListwiseReranker

    stages = []
    for spec in specs:
        spec = parse_rerank(spec) if isinstance(spec, str) else spec
        if spec.kind == "cross-encoder":
            reranker = CrossEncoderReranker(spec.target, device=device)
            settings = {"kind": spec.kind, "model": model_identity(spec.target), "max_length": reranker.max_length}
            predictor = CachedPredictor(reranker.model, ScoreCache(default_cache_dir(), settings))
            reranker.model = predictor  # the reranker's own ordering, with cached scores
            stages.append(Stage(spec, reranker, predictor))
        else:
            from convrag.llm import LLM, get_llm

            model = llm if isinstance(llm, LLM) and not spec.target else get_llm(spec.target or llm)
            stages.append(Stage(spec, ListwiseReranker(model)))
    return stages


def trec_order(ranking: Mapping[str, float]) -> list[str]:
    """Doc ids by score descending, then doc id descending (trec_eval's order)."""
    by_id = sorted(ranking.items(), key=lambda kv: kv[0], reverse=True)
    return [d for d, _ in sorted(by_id, key=lambda kv: -kv[1])]


def cut(runs: Mapping[str, Run], k: int | None) -> dict[str, Run]:
    """Every ranking of ``{subset: run}`` cut to its ``k`` best documents (trec_eval order; None: all)."""
    return {s: {q: {d: r[d] for d in trec_order(r)[:k]} for q, r in run.items()} for s, run in runs.items()}


def document_texts(rows: Iterable[Mapping[str, Any]], wanted: set[str]) -> dict[str, str]:
    """Doc id -> ``title + " " + text`` (``text`` when the title is empty) of the ``wanted`` documents."""
    out = {}
    for row in rows:
        doc = str(row["_id"])
        if doc in wanted:
            title, text = row.get("title") or "", row.get("text") or ""
            out[doc] = f"{title} {text}" if title else text
    return out


def rerank_runs(stage: Stage, runs: Mapping[str, Mapping[str, Run]], texts: Mapping[str, Mapping[str, str]],
                corpus: Any) -> dict[str, dict[str, Run]]:
    """``{strategy: {subset: run}}`` reranked by ``stage``; ``texts[strategy][qid]``: the query text searched with;
    ``corpus(subset)``: the subset's corpus rows. The first-stage ranking is the retriever's run in trec_eval order
    (:func:`trec_order`); its first K documents are reordered and the documents below K follow in first-stage order
    (so measures deeper than K see the first stage's documents there). The reranked run's score of the document at
    rank r (from 1) of a ranking of n documents is ``n - r + 1``. The reranker reads the query text the first stage
    searched with (the strategy's text) and :func:`document_texts`. The engine has the first stage search
    ``max(top_k, K)`` documents when reranking is asked, and cuts the reranked run to ``top_k`` like every run."""
    depth = stage.spec.depth
    orders = {n: {s: {q: trec_order(r) for q, r in run.items()} for s, run in by_s.items()} for n, by_s in runs.items()}
    subsets = list(dict.fromkeys(s for by_s in orders.values() for s in by_s))
    out: dict[str, dict[str, Run]] = {n: {} for n in runs}
    for s in subsets:
        wanted = {d for by_s in orders.values() for order in by_s.get(s, {}).values() for d in order[:depth]}
        docs = document_texts(corpus(s), wanted) if wanted else {}
        for n, by_s in orders.items():
            if s not in by_s:
                continue
            new = stage.reranker.rerank(texts[n], by_s[s], docs, depth=depth)
            out[n][s] = {q: {d: float(len(order) - i) for i, d in enumerate(order)} for q, order in new.items()}
    return out


def llm_note(stages: Sequence[Stage], retrievers: Sequence[str]) -> dict[str, Any] | None:
    """The LLM behind the listwise rerankers, as the engine's note for LLM strategies (a warning for a
    placeholder); None without an LLM reranker."""
    from convrag.llm.identity import placeholder_llm

    parts, placeholder = [], None
    for st in stages:
        if st.spec.kind != "llm":
            continue
        spec = st.reranker.llm.spec
        systems = ", ".join(st.spec.system(r) for r in retrievers)
        weak = placeholder_llm(spec)
        placeholder = placeholder or weak
        parts.append(f"The reranked systems {systems} use the LLM `{spec}`" + (f" ({weak})." if weak else "."))
    if not parts:
        return None
    note = " ".join(parts)
    if placeholder:
        note = (f"WARNING: {note} These figures only show the plumbing, they measure nothing. Point the reranker at "
                "a real model, e.g. --rerank llm:openai:MODEL@http://HOST:8000/v1@20.")  # fmt: skip
    return {"spec": ", ".join(st.reranker.llm.spec for st in stages if st.spec.kind == "llm"), "strategies": [],
            "placeholder": placeholder, "note": note}  # fmt: skip


def merge_notes(first: dict[str, Any] | None, second: dict[str, Any] | None) -> dict[str, Any] | None:
    """One LLM note from the strategies' and the rerankers' (either may be None)."""
    if first is None or second is None:
        return first or second
    warn = first["placeholder"] or second["placeholder"]
    text = " ".join(n["note"].removeprefix("WARNING: ") for n in (first, second))
    return {**first, "spec": f"{first['spec']}, {second['spec']}", "placeholder": warn,
            "note": f"WARNING: {text}" if warn else text}  # fmt: skip


def timed(stage: Stage, *args: Any) -> tuple[dict[str, dict[str, Run]], float]:
    """:func:`rerank_runs` and the seconds it took."""
    start = time.perf_counter()
    return rerank_runs(stage, *args), time.perf_counter() - start
