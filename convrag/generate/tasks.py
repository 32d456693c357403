"""What ``convrag generate`` answers: the tasks / turns of a built folder with their question, history and passages.

Passages per mode:

* ``oracle``: the turn's gold passages. MTRAG (``generation: mtrag``): the task's reference passages
  (``relevant_passages`` of the tasks config, Subtask B); judge-scored benchmarks (RECOR, MTR-Bench): the
  documents the qrels mark relevant (grade > 0; highest grade first, then by id), text from the built corpus.
* ``retrieved``: the top ``k`` documents of a run, in trec_eval order (score descending, ties by id descending):
  a retriever searched through the evaluation engine (:func:`convrag.evaluation.engine.run_benchmark`, the one
  retrieval path) or a run file checked as ``convrag evaluate`` checks runs
  (:func:`convrag.evaluation.engine.check_external`): an unknown query or document is an error naming the file
  and line (a document must be in the built corpus: its text is what the model reads). A turn the run does not
  rank gets no passages and is counted (``notes``).
* ``none``: no passages.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from convrag.builders.profile import EvaluationProfile
from convrag.core.errors import ConvragError, DataError
from convrag.evaluation.data import BenchmarkData, Folder, load_benchmark

MODES = ("oracle", "retrieved", "none")
ROLES = {"user": "user", "agent": "assistant", "assistant": "assistant", "system": "system"}
Run = dict[str, dict[str, float]]


@dataclass(frozen=True)
class Passage:
    """One passage shown to the model: its document id, text, title and the score it carries in the output."""

    document_id: str
    text: str
    title: str = ""
    score: float = 1.0


@dataclass
class GenItem:
    """One task / turn to answer. ``task_id``: the id written in the output (MTRAG task id; the turn's query id of
    the built queries config otherwise); ``history``: earlier messages as (role, text), role user / assistant;
    ``note``: why the turn has no passages in a mode that should give some (counted in the report)."""

    task_id: str
    question: str
    history: list[tuple[str, str]] = field(default_factory=list)
    passages: list[Passage] = field(default_factory=list)
    conversation_id: str = ""
    turn: int = 1
    domain: str = ""
    note: str | None = None


@dataclass
class Collected:
    """The items of one ``generate`` run, the output scheme (``mtrag`` / ``judge``), the retriever's full run
    (merged over subsets, for ``FILE.run.trec``) when a retriever was searched, and what was used."""

    items: list[GenItem]
    scheme: str
    run: Run | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def notes(self) -> dict[str, list[str]]:
        """Note -> ids of the items that carry it."""
        out: dict[str, list[str]] = {}
        for item in self.items:
            if item.note:
                out.setdefault(item.note, []).append(item.task_id)
        return out


def collect_items(folder: str | os.PathLike, profile: EvaluationProfile, mode: str, *, k: int = 5,
                  retriever: str | None = None, strategy: str | None = None, run_file: str | None = None,
                  config: str = "all-tasks", split: str | None = None, max_turns: int | None = None,
                  corpus: str = "auto", llm: Any = None, progress: bool = False) -> Collected:
    """The items of ``folder`` in ``mode`` (see the module docstring); ``max_turns`` keeps the first N in file
    order. ``llm`` goes to query strategies that need one (``rewrite``)."""
    scheme = profile.generation
    if scheme is None:
        raise ConvragError("this benchmark declares no generation scheme (evaluation profile 'generation' is null): "
                           "it has no reference answers to generate against")  # fmt: skip
    if mode not in MODES:
        raise ConvragError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    if mode == "retrieved" and (retriever is None) == (run_file is None):
        raise ConvragError("--mode retrieved needs exactly one of --retriever SPEC or --run FILE")
    if mode != "retrieved" and (retriever or run_file or strategy):
        raise ConvragError(f"--retriever, --run and --strategy belong to --mode retrieved, not --mode {mode}")
    if k < 1:
        raise ConvragError(f"--k must be at least 1, got {k}")
    if max_turns is not None and max_turns < 1:
        raise ConvragError(f"--max-turns must be at least 1, got {max_turns}")
    info: dict[str, Any] = {"scheme": scheme, "mode": mode, "k": k if mode == "retrieved" else None}
    data: BenchmarkData | None = None
    if scheme == "mtrag":
        from convrag.benchmarks.mtrag.scoring import MAX_CONTEXTS

        if mode == "retrieved" and k > MAX_CONTEXTS:
            raise ConvragError(f"--k {k}: an MTRAG submission line holds at most {MAX_CONTEXTS} contexts")
        items, gold = mtrag_items(folder, config, split or "test")
        info.update(config=config, split=split or "test")
    else:
        data = load_benchmark(folder, profile, split=split, corpus=corpus)
        items, gold = judge_items(data)
        info.update(split=data.split, corpus=data.corpus_kind)
    items = items[:max_turns] if max_turns else items
    collected = Collected(items, scheme, info=info)
    if mode == "oracle":
        for item in items:
            item.passages = list(gold.get(item.task_id, []))
            if not item.passages:
                item.note = "no gold passage with text"
    elif mode == "retrieved":
        if data is None:
            data = load_benchmark(folder, profile, split=split, corpus=corpus)
            info.update(corpus=data.corpus_kind)
        _attach_rankings(collected, data, profile, k, retriever, strategy, run_file, llm, progress)
    return collected


def _turn_number(value: Any) -> int:
    try:
        return int(value) if value not in (None, "") else 1
    except (TypeError, ValueError):
        return 1


def mtrag_items(folder: str | os.PathLike, config: str, split: str) -> tuple[list[GenItem], dict[str, list[Passage]]]:
    """Items of an MTRAG / MTRAG-UN tasks config (``input`` = the conversation, its last message the question) and
    every task's reference passages with text (id -> passages)."""
    built = Folder(folder)
    if not built.has(config):
        tasks = sorted(c for c in built.files if c.endswith("tasks"))
        raise DataError(f"tasks config {config!r} was not built (tasks configs: {tasks or 'none'}); pass --config",
                        str(built.path))  # fmt: skip
    rows = built.checked_rows(config, split, {"task_id": str, "input": list})
    items, gold = [], {}
    for index, row in enumerate(rows, start=1):
        messages = [(ROLES.get(str(m.get("speaker")), "user"), str(m.get("text") or "")) for m in row["input"]
                    if isinstance(m, Mapping)]  # fmt: skip
        if not messages or messages[-1][0] != "user" or not messages[-1][1].strip():
            raise DataError(f"task {row['task_id']!r}: 'input' must end with a non-empty user message (the question)",
                            *built.locate(config, split, index))  # fmt: skip
        passages = [Passage(str(p.get("document_id") or ""), str(p["text"]), str(p.get("title") or ""))
                    for p in row.get("relevant_passages") or [] if isinstance(p, Mapping)
                    and isinstance(p.get("text"), str) and p["text"].strip()]  # fmt: skip
        gold[row["task_id"]] = passages
        items.append(GenItem(row["task_id"], messages[-1][1].strip(), messages[:-1],
                             conversation_id=str(row.get("conversation_id") or ""),
                             turn=_turn_number(row.get("turn")), domain=str(row.get("domain") or "")))  # fmt: skip
    return items, gold


def _corpus_index(data: BenchmarkData) -> dict[str, dict[str, Mapping[str, Any]]]:
    return {s: {r["_id"]: r for r in rows} for s, rows in data.corpus.items()}


def _passage(row: Mapping[str, Any], score: float) -> Passage:
    return Passage(str(row["_id"]), str(row["text"]), str(row.get("title") or ""), float(score))


def judge_items(data: BenchmarkData) -> tuple[list[GenItem], dict[str, list[Passage]]]:
    """Items of the turns of a judge-scored benchmark and each turn's gold passages (relevant documents found in
    the corpus, score 1.0)."""
    index = _corpus_index(data)
    items, gold = [], {}
    for t in data.turns:
        rels = data.qrels.get(t.domain, {}).get(t.qid, {})
        ordered = sorted((d for d, g in rels.items() if g > 0), key=lambda d: (-rels[d], d))
        gold[t.qid] = [_passage(index[t.domain][d], 1.0) for d in ordered if d in index[t.domain]]
        history = [(role if role in ("user", "assistant") else "user", text) for role, text in t.history_messages()]
        items.append(GenItem(t.qid, t.query, history, conversation_id=t.conversation_id, turn=t.position,
                             domain=t.domain))  # fmt: skip
    return items, gold


def _normalizer(profile: EvaluationProfile) -> Any:
    if profile.submission == "mtrag":
        from convrag.builders.mtrag_source import normalize_task_id

        return normalize_task_id
    return None


def _attach_rankings(collected: Collected, data: BenchmarkData, profile: EvaluationProfile, k: int,
                     retriever: str | None, strategy: str | None, run_file: str | None, llm: Any,
                     progress: bool) -> None:
    """Give every item the top ``k`` documents of its ranking (see the module docstring)."""
    normalize = _normalizer(profile) or (lambda q: q)
    wanted = {normalize(i.task_id) for i in collected.items}
    if retriever is not None:
        runs = _search(collected, data, profile, retriever, strategy, wanted, llm, progress)
    else:
        runs = read_run_file(run_file or "", data, profile)
        collected.info.update(run=str(run_file))
    subset_of = {normalize(t.qid): t.domain for t in data.turns}
    index = _corpus_index(data)
    from convrag.benchmarks.mtrag.scoring import ranked

    for item in collected.items:
        key = normalize(item.task_id)
        s = subset_of.get(key)
        ranking = runs.get(s, {}).get(key) if s is not None else None
        if not ranking:
            item.note = "not ranked by the run"
            continue
        item.passages = [_passage(index[s][d], ranking[d]) for d in ranked(ranking)[:k]]


def _search(collected: Collected, data: BenchmarkData, profile: EvaluationProfile, spec: str, strategy: str | None,
            wanted: set[str], llm: Any, progress: bool) -> dict[str, Run]:
    """Run retriever ``spec`` with ``strategy`` (default: the profile's last default strategy whose data is there)
    over the turns of ``wanted`` through the evaluation engine; keeps the merged run in ``collected.run``."""
    from convrag.evaluation.engine import merged_run, resolve_strategies, run_benchmark

    normalize = _normalizer(profile) or (lambda q: q)
    data.turns = [t for t in data.turns if normalize(t.qid) in wanted]
    if not data.turns:
        raise ConvragError("none of the tasks is a query of the built retrieval configs: nothing to search")
    name = strategy or list(resolve_strategies(profile, data, None))[-1]
    scored = run_benchmark("", profile, retrievers=[spec], strategies=[name], data=data, llm=llm, progress=progress)
    system = scored.system(spec)  # the spec with its models by name, never by path
    collected.run = merged_run(scored, system, name)
    collected.info.update(retriever=system, strategy=name,
                          strategy_spec=scored.info["strategy_specs"][name], top_k=scored.info["top_k"])  # fmt: skip
    return dict(scored.runs[(system, name)])


def read_run_file(path: str, data: BenchmarkData, profile: EvaluationProfile) -> dict[str, Run]:
    """A TREC run file, or (MTRAG) an official submission ``.jsonl`` such as ``convrag evaluate`` writes, checked
    against the benchmark: ``{subset: {query id: {document id: score}}}`` with subset-local document ids."""
    from convrag.benchmarks.runs import read_external
    from convrag.evaluation.engine import check_external

    if not Path(path).is_file():
        raise ConvragError(f"--run {path}: no such file")
    kind = "submission" if profile.submission and path.endswith(".jsonl") else "run"
    ext = read_external("run", kind, path, profile, data)
    # every ranked document must be in the built corpus: the model reads its text
    return check_external(ext, data, {s: True for s in data.subsets}, _normalizer(profile))
