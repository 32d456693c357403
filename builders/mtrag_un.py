"""MTRAG-UN as used in SemEval-2026 Task 8 (MTRAGEval): 507 test tasks over the four MTRAG corpora.

Source files (``mtrag_source.mtrag_un_paths()``): ``mtragun-human/generation_tasks/reference.jsonl`` (one task
per line: prior turns + question, reference answer, reference passages, labels) and the qrels
``mtragun-human/retrieval_tasks/qrels/<domain>.tsv``. Configs ``<domain>-<view>`` (domain ``clapnq``,
``cloud``, ``fiqa``, ``govt`` or ``all``), split ``test``:

* ``tasks``: every task with answerability (ANSWERABLE, PARTIAL, UNANSWERABLE, UNDERSPECIFIED), multi-turn
  type, question types, collection, ``input``, ``targets``, ``contexts`` (reference passages) and
  ``relevant_passages`` (from the qrels; ``scored`` marks the tasks that have qrels);
* ``lastturn`` / ``questions``: query views of *all* tasks, written like MTRAG's released files
  (``|user|: <question>`` lines; the release has no query files for MTRAG-UN). Subtask A gave participants
  every task, and the official scorer weights domains by submitted tasks, so the views keep them all;
  tasks without qrels are not scored;
* ``qrels``; ``cited-corpus`` (the reference passages of all tasks) and ``corpus`` (official corpora).

Collection names are normalised to the short domain names (``ibmcloud`` and the long index names map to
``cloud``...) and task ids to ``<cid><::><turn>`` (``::`` accepted); both are counted in the build report.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from datasets import Features, List

from convrag.errors import DataError
from convrag.jsonl import read_jsonl

from . import mtrag_parse as mp
from .mtrag import MTRAGFamily, domains_of, make_configs
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
    qrels = {d: read_qrels(files[f"{d}-qrels"]) for d in DOMAINS if files.get(f"{d}-qrels")}
    by_id = {t["task_id"]: t for t in data.tasks}
    for d, rows in qrels.items():
        where = files[f"{d}-qrels"]
        data.qrels[d] = []
        for qid, did, score, line in rows:
            tid = normalize_task_id(qid, where, line)
            if tid != qid:
                data.events["qrels task ids normalised to '<::>'"] += 1
            task = by_id.get(tid)
            if task is None or task["domain"] != d:
                raise DataError(f"qrels name task {qid!r}, which is not a {d} task of reference.jsonl", where, line)
            data.qrels[d].append({"query-id": tid, "corpus-id": did, "score": score})
            if score > 0:
                ctx = {c["document_id"]: c for c in task["contexts"]}.get(did)
                if ctx is None:
                    data.events["relevant passages missing from the task's reference contexts"] += 1
                task["relevant_passages"].append({"document_id": did, "title": ctx["title"] if ctx else "",
                                                  "text": ctx["text"] if ctx else ""})  # fmt: skip
                task["scored"] = True
    for task in data.tasks:
        label = task["answerability"]
        data.events[f"tasks: {label}"] += 1
        if task["domain"] in qrels and task["scored"] != (label in ("ANSWERABLE", "PARTIAL")):
            data.events["tasks whose qrels disagree with answerability"] += 1
        users = [m["text"] for m in task["input"] if m["speaker"] == "user"]
        for view, text in zip(UN_VIEWS, user_prefix_texts(users), strict=True):
            data.queries.setdefault(view, []).append(
                {"_id": task["task_id"], "text": text, **{k: task[k] for k in mp.QUERY_EXTRA}})  # fmt: skip
    return data


def _task(obj: dict, path: str, line: int, seen: dict[str, int], data: UNData) -> dict[str, Any]:
    for name in REQUIRED:
        if name not in obj:
            raise DataError(f"missing field {name!r}", path, line)
    for name in ("input", "targets", "contexts"):
        if not isinstance(obj[name], list):
            raise DataError(f"field {name!r} must be a list", path, line)
    tid = normalize_task_id(obj["task_id"], path, line)
    if tid != obj["task_id"]:
        data.events["task ids normalised to '<::>'"] += 1
    cid, turn = split_task_id(tid)
    if cid != str(obj["conversation_id"]) or str(turn) != str(obj["turn"]).strip():
        raise DataError(f"task id {tid!r} disagrees with conversation_id/turn "
                        f"({obj['conversation_id']!r}, {obj['turn']!r})", path, line)  # fmt: skip
    if tid in seen:
        raise DataError(f"duplicate task id {tid!r} (first on line {seen[tid]})", path, line)
    seen[tid] = line
    domain = normalize_domain(obj["Collection"], path, line)
    if obj["Collection"] != domain:
        data.events[f"collection names normalised: {obj['Collection']} -> {domain}"] += 1
    messages = []
    for m in obj["input"]:
        if not isinstance(m, dict) or m.get("speaker") not in ("user", "agent") or not isinstance(m.get("text"), str):
            raise DataError(f"task {tid}: input messages need speaker 'user'/'agent' and a string text", path, line)
        messages.append({"speaker": m["speaker"], "text": m["text"]})
    if not messages or messages[-1]["speaker"] != "user":
        raise DataError(f"task {tid}: input must end with the user question", path, line)
    if sum(m["speaker"] == "user" for m in messages) != turn:
        raise DataError(f"task {tid}: turn {turn} but {sum(m['speaker'] == 'user' for m in messages)} user "
                        "messages in input", path, line)  # fmt: skip
    answerability = mp.first(obj["answerability"])
    if answerability not in ANSWERABILITY:
        raise DataError(f"task {tid}: unknown answerability {answerability!r}", path, line)
    contexts = []
    for c in obj["contexts"]:
        if not isinstance(c, dict) or not isinstance(c.get("document_id"), str):
            raise DataError(f"task {tid}: every context needs a string document_id", path, line)
        contexts.append({"document_id": c["document_id"], "title": str(c.get("title") or ""),
                         "text": str(c.get("text") or "")})  # fmt: skip
        known = data.cited.setdefault(domain, {})
        if c["document_id"] not in known:
            known[c["document_id"]] = {"_id": c["document_id"], "title": contexts[-1]["title"],
                                       "text": contexts[-1]["text"], "url": "", "domain": domain}  # fmt: skip
        elif known[c["document_id"]]["text"] != contexts[-1]["text"]:
            data.events["cited passages with differing texts (first kept)"] += 1
    return {
        "task_id": tid, "conversation_id": cid, "turn": turn, "domain": domain, "collection": COLLECTIONS[domain],
        "question": messages[-1]["text"], "input": messages,
        "targets": [{"speaker": str(t.get("speaker", "agent")), "text": str(t.get("text", ""))}
                    for t in obj["targets"] if isinstance(t, dict)],
        "answerability": answerability, "multi_turn": mp.first(obj.get("Multi-Turn")),
        "question_type": mp.enrichment(obj.get("Question Type")), "standalone": mp.first(obj.get("Standalone Type")),
        "scored": False, "relevant_passages": [], "contexts": contexts,
    }  # fmt: skip


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

