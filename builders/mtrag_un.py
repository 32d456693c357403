"""MTRAG-UN as used in SemEval-2026 Task 8 (MTRAGEval): 507 test tasks over the four MTRAG corpora.

Source files (``mtrag_source.mtrag_un_paths()``): ``mtragun-human/generation_tasks/reference.jsonl`` (one task per
line: prior turns + question, reference answer, reference passages, labels) and the qrels
``mtragun-human/retrieval_tasks/qrels/<domain>.tsv``. Configs ``<domain>-<view>`` (domain ``clapnq``, ``cloud``,
``fiqa``, ``govt`` or ``all``), split ``test``:

* ``tasks``: every task with answerability (ANSWERABLE, PARTIAL, UNANSWERABLE, UNDERSPECIFIED), multi-turn type,
  question types, collection, ``input``, ``targets``, ``contexts`` (reference passages) and ``relevant_passages``
  (from the qrels; ``scored`` marks the tasks that have qrels);
* ``lastturn`` / ``questions``: query views of *all* tasks (tasks without qrels are kept but not scored), written like
  MTRAG's released files (``|user|: <question>`` lines; the release has no query files for MTRAG-UN);
* ``qrels``; ``cited-corpus`` (the reference passages of all tasks) and ``corpus`` (official corpora).

Collection names are normalised to short domain names and task ids to ``<cid><::><turn>`` (both counted in the build
report). Every task is checked as it is read (:func:`_task`). An empty file is an error; a domain without a qrels
file is counted.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from datasets import Features, List

from convrag.core.errors import DataError
from convrag.core.jsonl import read_jsonl

from . import mtrag_parse as mp
from .mtrag import MTRAGFamily, domains_of, make_configs
from .mtrag_check import NO_REFERENCE, SINGLE_LABELS, Checker, cite, count_empty_passages
from .mtrag_source import (
    COLLECTIONS,
    DOMAINS,
    mtrag_un_paths,
    normalize_domain,
    normalize_task_id,
    read_qrels,
    split_task_id,
    user_prefix_texts,
)

UN_VIEWS = ("lastturn", "questions")
VIEW_NAMES = ("tasks", *UN_VIEWS, "qrels", "cited-corpus", "corpus")
ANSWERABILITY = ("ANSWERABLE", "PARTIAL", "UNANSWERABLE", "UNDERSPECIFIED")
TASK_FEATURES = Features({**mp.TASK_FIELDS, "contexts": List(mp.PASSAGE)})
FEATURES: dict[str, Features] = {
    "tasks": TASK_FEATURES,
    **{v: mp.QUERY_FEATURES for v in UN_VIEWS},
    "qrels": mp.schema.QRELS,
    "cited-corpus": mp.CORPUS_FEATURES,
    "corpus": mp.CORPUS_FEATURES,
}
REQUIRED = ("conversation_id", "task_id", "turn", "Collection", "input", "targets", "contexts", "answerability")


@dataclass
class UNData:
    tasks: list[dict[str, Any]] = field(default_factory=list)
    queries: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # view -> rows
    qrels: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # domain -> rows
    cited: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)
    events: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, event: str, example: str | None = None) -> None:
        self.events[event] += 1
        if example is not None and len(self.examples.setdefault(event, [])) < 10:
            self.examples[event].append(example)


def parse_un(files: dict[str, str | None]) -> UNData:
    """Parse reference.jsonl and the qrels given (name -> local path or None); cached per file versions."""
    return _parse(tuple(sorted((k, v, os.path.getmtime(v) if v else 0.0) for k, v in files.items())))


@functools.lru_cache(maxsize=2)
def _parse(key: tuple) -> UNData:
    files = {name: path for name, path, _ in key}
    path = files.get("reference")
    if not path:
        raise DataError("MTRAG-UN needs mtragun-human/generation_tasks/reference.jsonl in the source")
    data = UNData()
    seen: dict[str, int] = {}
    for line, obj in read_jsonl(path):
        data.tasks.append(_task(obj, path, line, seen, data))
    if not data.tasks:
        raise DataError("the file holds no tasks", path)
    count_empty_passages(data.cited, data.add)
    qrels = {d: read_qrels(files[f"{d}-qrels"]) for d in DOMAINS if files.get(f"{d}-qrels")}
    for d in DOMAINS:
        if d not in qrels:
            data.add(mp.QRELS_MISSING, f"qrels/{d}.tsv")
    by_id = {t["task_id"]: t for t in data.tasks}
    for d, rows in qrels.items():
        where = files[f"{d}-qrels"]
        data.qrels[d] = []
        for qid, did, score, line in rows:
            tid = normalize_task_id(qid, where, line)
            if tid != qid:
                data.add("qrels task ids normalised to '<::>'", qid)
            task = by_id.get(tid)
            if task is None or task["domain"] != d:
                raise DataError(f"qrels name task {qid!r}, which is not a {d} task of {path}", where, line)
            data.qrels[d].append({"query-id": tid, "corpus-id": did, "score": score})
            if score > 0:
                ctx = {c["document_id"]: c for c in task["contexts"]}.get(did)
                if ctx is None:
                    data.add("relevant passages missing from the task's reference contexts", f"{tid}: {did}")
                task["relevant_passages"].append({"document_id": did, "title": ctx["title"] if ctx else "",
                                                  "text": ctx["text"] if ctx else ""})  # fmt: skip
                task["scored"] = True
    for task in data.tasks:
        label = task["answerability"]
        data.add(f"tasks: {label}")
        if task["domain"] in qrels and task["scored"] != (label in ("ANSWERABLE", "PARTIAL")):
            data.add("tasks whose qrels disagree with answerability", task["task_id"])
        users = [m["text"] for m in task["input"] if m["speaker"] == "user"]
        for view, text in zip(UN_VIEWS, user_prefix_texts(users), strict=True):
            data.queries.setdefault(view, []).append(
                {"_id": task["task_id"], "text": text, **{k: task[k] for k in mp.QUERY_EXTRA}})  # fmt: skip
    return data


def _task(obj: dict, path: str, line: int, seen: dict[str, int], data: UNData) -> dict[str, Any]:
    """One checked task of reference.jsonl; errors name reference.jsonl and the line.

    Errors: missing fields; wrong types (a target or context that is not an object, labels that are not strings or
    lists of strings, an answerability, Multi-Turn or Standalone Type listing two different labels, ``answerability``
    and ``Answerability`` fields that disagree); an empty user message or question. Counted in the build report and
    kept: targets with empty text (left out of ``targets``; a task left with none has no reference answer, and
    generation scoring refuses it), reference passages without text, empty agent messages in ``input``.
    """
    at = Checker(path, line, f"task on line {line}")
    missing = [name for name in REQUIRED if obj.get(name) is None]
    if missing:
        raise DataError(f"missing field {missing[0]!r}", path, line)
    raw_id = at.get(obj, "task_id", (str,), required=True, empty=False)
    tid = normalize_task_id(raw_id, path, line)
    if tid != raw_id:
        data.add("task ids normalised to '<::>'", raw_id)
    cid, turn = split_task_id(tid)
    at.what = f"task {tid}"
    given_turn = at.get(obj, "turn", (int, str), required=True)
    if cid != at.get(obj, "conversation_id", (str,), required=True) or str(turn) != str(given_turn).strip():
        raise DataError(f"task id {tid!r} disagrees with conversation_id/turn "
                        f"({obj['conversation_id']!r}, {obj['turn']!r})", path, line)  # fmt: skip
    if tid in seen:
        raise DataError(f"duplicate task id {tid!r} (first on line {seen[tid]})", path, line)
    seen[tid] = line
    collection = at.get(obj, "Collection", (str,), required=True)
    domain = normalize_domain(collection, path, line)
    if collection != domain:
        data.add(f"collection names normalised: {collection} -> {domain}", tid)
    messages = []
    for i, m in enumerate(at.get(obj, "input", (list,), required=True)):
        speaker = at.get(m, "speaker", (str,), f"input[{i}].", required=True)
        if speaker not in ("user", "agent"):
            at.fail(f"input[{i}].speaker must be 'user' or 'agent', got {speaker!r}")
        text = at.get(m, "text", (str,), f"input[{i}].", required=True, empty=speaker != "user")
        if not text.strip():
            data.add("input agent messages with empty text (kept)", tid)
        messages.append({"speaker": speaker, "text": text})
    if not messages or messages[-1]["speaker"] != "user":
        raise DataError(f"task {tid}: input must end with the user question", path, line)
    if sum(m["speaker"] == "user" for m in messages) != turn:
        raise DataError(f"task {tid}: turn {turn} but {sum(m['speaker'] == 'user' for m in messages)} user "
                        "messages in input", path, line)  # fmt: skip
    for name in ("answerability", "Answerability", "Multi-Turn", "Question Type", "Standalone Type"):
        at.label(obj, name, single=name in SINGLE_LABELS)
    if "Answerability" in obj and mp.enrichment(obj["Answerability"]) != mp.enrichment(obj["answerability"]):
        at.fail(f"fields 'answerability' {obj['answerability']!r} and 'Answerability' {obj['Answerability']!r} "
                "disagree")  # fmt: skip
    answerability = mp.first(obj["answerability"])
    if answerability not in ANSWERABILITY:
        raise DataError(f"task {tid}: unknown answerability {answerability!r}", path, line)
    targets = []
    for i, t in enumerate(at.get(obj, "targets", (list,), required=True)):
        text = at.get(t, "text", (str,), f"targets[{i}].", required=True)
        if text.strip():
            targets.append({"speaker": at.get(t, "speaker", (str,), f"targets[{i}].") or "agent", "text": text})
    if not targets:
        data.add(NO_REFERENCE, tid)
    contexts = [_context(at, c, f"contexts[{i}].", domain, tid, data)
                for i, c in enumerate(at.get(obj, "contexts", (list,), required=True))]  # fmt: skip
    return {
        "task_id": tid, "conversation_id": cid, "turn": turn, "domain": domain, "collection": COLLECTIONS[domain],
        "question": messages[-1]["text"], "input": messages, "targets": targets,
        "answerability": answerability, "multi_turn": mp.first(obj.get("Multi-Turn")),
        "question_type": mp.enrichment(obj.get("Question Type")), "standalone": mp.first(obj.get("Standalone Type")),
        "scored": False, "relevant_passages": [], "contexts": contexts,
    }  # fmt: skip


def _context(at: Checker, c: Any, prefix: str, domain: str, tid: str, data: UNData) -> dict[str, str]:
    """A reference passage of a task (also added to the domain's cited corpus)."""
    doc_id = at.get(c, "document_id", (str,), prefix, required=True, empty=False)
    row = {"document_id": doc_id, "title": at.get(c, "title", (str,), prefix) or "",
           "text": at.get(c, "text", (str,), prefix, required=True)}  # fmt: skip
    cite(data.cited, {"_id": doc_id, "title": row["title"], "text": row["text"], "url": "", "domain": domain}, tid,
         data.add)  # fmt: skip
    return row


def required_files(domain: str, view: str) -> list[str]:
    """Source names without which a config cannot be built."""
    if view == "corpus":
        return [f"{d}-corpus" for d in domains_of(domain)]
    if view == "qrels":
        return ["reference"] + [f"{d}-qrels" for d in domains_of(domain)]
    return ["reference"]


def needed_files(domain: str, view: str) -> list[str]:
    """Source names a config reads: every domain's qrels mark the scored tasks of any view."""
    return required_files(domain, view) if view == "corpus" else ["reference"] + [f"{d}-qrels" for d in DOMAINS]


class MTRAGUN(MTRAGFamily):
    """Builder of the MTRAGEval (SemEval-2026 Task 8) MTRAG-UN test tasks and retrieval views."""

    BENCHMARK = "mtrag-un"
    CARD = "mtrag-un.md"
    HUB_METADATA = {
        "pretty_name": "MTRAG-UN", "license": "apache-2.0", "language": ["en"],
        "task_categories": ["text-retrieval", "question-answering"],
        "task_ids": ["document-retrieval", "open-domain-qa"],
        "tags": ["conversational-retrieval", "multi-turn", "rag", "unanswerable", "underspecified", "semeval-2026",
                 "convrag"],
        "source_datasets": ["extended|other-mt-rag-benchmark"],
    }  # fmt: skip
    LABEL = "MTRAG-UN"
    DESCRIPTION = "MTRAG-UN test tasks of SemEval-2026 Task 8 (MTRAGEval) with retrieval views."
    DEFAULT_SOURCES = mtrag_un_paths()
    VIEW_NAMES = VIEW_NAMES
    FEATURES = FEATURES
    BUILDER_CONFIGS = make_configs(LABEL, VIEW_NAMES)
    layout = staticmethod(mtrag_un_paths)
    required_files = staticmethod(required_files)
    needed_files = staticmethod(needed_files)
    parse = staticmethod(parse_un)

    def view_rows(self, data: Any, view: str, wanted: tuple[str, ...]) -> Iterator[tuple[str, dict[str, Any]]]:
        """The ``lastturn`` / ``questions`` views written from the tasks."""
        yield from ((row["_id"], row) for row in data.queries.get(view, []) if row["domain"] in wanted)

