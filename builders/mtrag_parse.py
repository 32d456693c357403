"""Parse the MTRAG release (conversations + retrieval task files) into convrag rows.

* A *task* is one user message: turn ``k`` of a conversation is its k-th user message; the task's input is every
  message before it plus the question itself; its reference answer (``targets``) is the agent message that follows.
  Task id: ``<conversation id><::><k>``.
* ``conversations.json`` carries no conversation ids. A conversation's id is read from the released
  ``<domain>_questions.jsonl``, whose text for task ``<cid><::><k>`` is the conversation's first ``k`` user questions
  (``|user|: ...`` lines): a conversation takes the id whose question texts all equal its own prefixes. Ids are
  checked to be unambiguous; a conversation of a domain without a questions file gets a synthetic id
  ``mtrag-<domain>-<nnn>`` (counted in the build report).
* A task's relevant passages are its released qrels (authoritative); the report also counts how often they equal the
  passages whose latest relevance feedback in the conversation is "yes".
* Every conversation is type-checked before anything is built (``mtrag_check``). An empty query file or query text
  is an error naming the query file.
"""

from __future__ import annotations

import functools
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from datasets import Features, List, Value

from convrag.core import schema
from convrag.core.errors import DataError
from convrag.core.jsonl import read_json_records

from .mtrag_check import NO_REFERENCE, check_conversation, cite, count_empty_passages
from .mtrag_source import (
    COLLECTIONS,
    DOMAINS,
    SCORED_ANSWERABILITY,
    TASK_SEPARATOR,
    VIEWS,
    normalize_domain,
    read_qrels,
    read_queries,
    split_task_id,
)

MESSAGE = {"speaker": Value("string"), "text": Value("string")}
PASSAGE = {"document_id": Value("string"), "title": Value("string"), "text": Value("string")}
ENRICHMENT = {"name": Value("string"), "values": List(Value("string"))}
TASK_FIELDS = {
    "task_id": Value("string"),
    "conversation_id": Value("string"),
    "turn": Value("int32"),
    "domain": Value("string"),
    "collection": Value("string"),
    "question": Value("string"),
    "input": List(MESSAGE),
    "targets": List(MESSAGE),
    "answerability": Value("string"),
    "multi_turn": Value("string"),
    "question_type": List(Value("string")),
    "standalone": Value("string"),
    "scored": Value("bool"),
    "relevant_passages": List(PASSAGE),
}
TASK_FEATURES = Features(TASK_FIELDS)
QUERY_EXTRA = {
    "conversation_id": Value("string"),
    "turn": Value("int32"),
    "domain": Value("string"),
    "answerability": Value("string"),
    "multi_turn": Value("string"),
    "standalone": Value("string"),
}
QUERY_FEATURES = schema.with_extra(schema.QUERIES, QUERY_EXTRA)
CORPUS_FEATURES = schema.with_extra(schema.CORPUS, {"url": Value("string"), "domain": Value("string")})
CONTEXT = {
    **PASSAGE,
    "url": Value("string"),
    "score": Value("float64"),
    "relevant": Value("string"),
    "feedback": List({"annotator": Value("string"), "value": Value("string"), "timestamp": Value("int64")}),
    "query": Value("string"),
}
CONVERSATION_FEATURES = schema.conversation_features(
    turn_extra={
        "timestamp": Value("int64"),
        "original_text": Value("string"),
        "answerability": Value("string"),
        "multi_turn": Value("string"),
        "question_type": List(Value("string")),
        "standalone": Value("string"),
        "enrichments": List(ENRICHMENT),
        "alternatives": List({"text": Value("string"), "enrichments": List(ENRICHMENT)}),
        "contexts": List(CONTEXT),
    },
    extra={
        "collection": Value("string"),
        "n_turns": Value("int32"),
        "author": Value("string"),
        "editor": Value("string"),
        "reviewer": Value("string"),
        "status": Value("string"),
        "generator": Value("string"),
    },
)


#: build-report event: a domain's tasks without qrels are all written ``scored: false``
QRELS_MISSING = "qrels files missing from the source (their domain's tasks are not scored)"


@dataclass
class MtragData:
    """Everything the MTRAG configs are made of, for the domains whose files were given."""

    conversations: list[dict[str, Any]] = field(default_factory=list)
    tasks: list[dict[str, Any]] = field(default_factory=list)
    queries: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)  # domain -> view -> rows
    qrels: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # domain -> rows
    cited: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)  # domain -> doc id -> row
    events: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, event: str, example: str | None = None, n: int = 1) -> None:
        self.events[event] += n
        if example is not None and len(self.examples.setdefault(event, [])) < 10:
            self.examples[event].append(example)


def enrichment(values: Any) -> list[str]:
    """An enrichment value as a list of strings (the release stores lists; a scalar becomes a 1-list)."""
    if values is None:
        return []
    if isinstance(values, list):
        return [str(v) for v in values]
    return [str(values)]


def first(values: Any) -> str:
    got = enrichment(values)
    return got[0] if got else ""


def final_relevance(context: dict[str, Any]) -> str:
    """``yes`` / ``no`` of the latest relevance feedback on a cited passage ("" without feedback)."""
    votes = (context.get("feedback") or {}).get("relevant") or {}
    if not votes:
        return ""
    latest = max(votes.values(), key=lambda v: int(v.get("timestamp") or 0))
    return str(latest.get("value", ""))


def parse_mtrag(files: dict[str, str | None]) -> MtragData:
    """Parse the given MTRAG files (name -> local path or None); cached per file versions."""
    key = tuple(sorted((k, v, os.path.getmtime(v) if v else 0.0) for k, v in files.items()))
    return _parse(key)


@functools.lru_cache(maxsize=2)
def _parse(key: tuple) -> MtragData:
    files = {name: path for name, path, _ in key}
    data = MtragData()
    conv_path = files.get("conversations")
    if not conv_path:
        raise DataError("MTRAG needs mtrag-human/conversations/conversations.json in the source")
    records = read_json_records(conv_path, "conversations")
    if not records:
        raise DataError("the file holds no conversations", conv_path)
    for number, (line, conv) in enumerate(records, start=1):
        check_conversation(conv, conv_path, line, number)
    query_files = {(d, v): p for d in DOMAINS for v in VIEWS if (p := files.get(f"{d}-{v}"))}
    queries = {dv: read_queries(p) for dv, p in query_files.items()}
    for d in DOMAINS:
        for v in VIEWS:
            if (d, v) not in query_files:
                data.add("query files missing from the source", f"{d}_{v}.jsonl")
    ids = _conversation_ids(records, conv_path, queries, query_files, data)
    qrels = {d: read_qrels(files[f"{d}-qrels"]) for d in DOMAINS if files.get(f"{d}-qrels")}
    for d in DOMAINS:
        if d not in qrels:
            data.add(QRELS_MISSING, f"{d}/qrels/dev.tsv")
    rel_by_task: dict[str, list[str]] = {}
    for rows in qrels.values():
        for qid, did, score, _line in rows:
            if score > 0:
                rel_by_task.setdefault(qid, []).append(did)
    for (line, conv), cid in zip(records, ids, strict=True):
        data.conversations.append(_conversation_row(conv, cid, conv_path, line, data))
    count_empty_passages(data.cited, data.add)
    _tasks(data, rel_by_task, set(qrels))
    _views(data, queries, qrels, files)
    return data


def _conversation_ids(records: tuple, path: str, queries: dict, query_files: dict, data: MtragData) -> list[str]:
    """Conversation id of every (line, conversation) record, read from the questions files (module docstring)."""
    by_text: dict[tuple[str, int, str], set[str]] = {}
    turns_of: dict[str, dict[int, str]] = {}
    for (d, v), rows in queries.items():
        if v != "questions":
            continue
        for qid, text, line in rows:
            cid, turn = split_task_id(qid, query_files[d, v], line)
            by_text.setdefault((d, turn, text), set()).add(cid)
            turns_of.setdefault(cid, {})[turn] = text
    ids: list[str] = []
    matched: dict[str, int] = {}
    numbers: Counter = Counter()
    for number, (line, conv) in enumerate(records, start=1):
        d = normalize_domain(conv["domain"], path, line)
        users = [m["text"] for m in conv["messages"] if m["speaker"] == "user"]
        prefixes = {k: "\n".join(f"|user|: {u}" for u in users[:k]) for k in range(1, len(users) + 1)}
        candidates = set().union(*(by_text.get((d, k, t), set()) for k, t in prefixes.items()))
        # a candidate must match on every turn it has (conversations may share their first questions)
        found = {c for c in candidates if all(prefixes.get(k) == t for k, t in turns_of[c].items())}
        if len(found) > 1:
            raise DataError(f"conversation {number} matches several task ids {sorted(found)}", path, line)
        if found:
            cid = found.pop()
            if cid in matched:
                raise DataError(f"conversation {number} repeats conversation {cid!r} (the conversations "
                                f"starting on lines {matched[cid]} and {line} match the same questions)", path,
                                line)  # fmt: skip
            matched[cid] = line
        else:
            numbers[d] += 1
            cid = f"mtrag-{d}-{numbers[d]:03d}"
            data.add("conversation ids synthesised (no questions file matches)", cid)
        ids.append(cid)
    for (d, v), rows in queries.items():
        for qid, _text, line in rows:
            if split_task_id(qid)[0] not in matched:
                raise DataError(f"query {qid!r} names no conversation of {path}", query_files[d, v], line)
    return ids


def _conversation_row(conv: dict, cid: str, path: str, line: int, data: MtragData) -> dict[str, Any]:
    """The ``conversations`` row of a checked conversation (``mtrag_check``)."""
    d = normalize_domain(conv["domain"], path, line)
    turns = []
    turn = 0
    for m in conv["messages"]:
        if m["speaker"] == "user":
            turn += 1
        elif turn == 0:
            raise DataError(f"conversation {cid} starts with an agent message", path, line)
        enr = m.get("enrichments") or {}
        contexts = []
        for c in m.get("contexts") or []:
            votes = (c.get("feedback") or {}).get("relevant") or {}
            contexts.append({
                "document_id": c["document_id"], "title": c.get("title") or "", "text": c.get("text") or "",
                "url": c.get("url") or "", "score": float(c["score"]) if c.get("score") is not None else None,
                "relevant": final_relevance(c),
                "feedback": [{"annotator": a, "value": v["value"], "timestamp": v.get("timestamp")}
                             for a, v in votes.items()],
                "query": json.dumps(c["query"], sort_keys=True) if c.get("query") is not None else "",
            })  # fmt: skip
            cite(data.cited, {"_id": c["document_id"], "title": contexts[-1]["title"], "text": contexts[-1]["text"],
                              "url": contexts[-1]["url"], "domain": d}, cid, data.add)  # fmt: skip
        turns.append({
            "turn": turn, "speaker": m["speaker"], "text": m["text"], "timestamp": m.get("timestamp"),
            "original_text": m.get("original_text"),
            "answerability": first(enr.get("Answerability")), "multi_turn": first(enr.get("Multi-Turn")),
            "question_type": enrichment(enr.get("Question Type")), "standalone": first(enr.get("Standalone Type")),
            "enrichments": [{"name": k, "values": enrichment(v)} for k, v in enr.items()],
            "alternatives": [{"text": a["text"],
                              "enrichments": [{"name": k, "values": enrichment(v)}
                                              for k, v in (a.get("enrichments") or {}).items()]}
                             for a in m.get("alternatives") or []],
            "contexts": contexts,
        })  # fmt: skip
    return {
        "conversation_id": cid, "domain": d, "turns": turns, "collection": COLLECTIONS[d], "n_turns": turn,
        "author": conv.get("author") or "", "editor": conv.get("editor") or "",
        "reviewer": conv.get("reviewer") or "", "status": conv.get("status") or "",
        "generator": (conv.get("generator") or {}).get("id") or "",
    }  # fmt: skip


def _tasks(data: MtragData, rel_by_task: dict[str, list[str]], domains_with_qrels: set[str]) -> None:
    for conv in data.conversations:
        d, turns = conv["domain"], conv["turns"]
        for i, m in enumerate(turns):
            if m["speaker"] != "user":
                continue
            task_id = f"{conv['conversation_id']}{TASK_SEPARATOR}{m['turn']}"
            answer = turns[i + 1] if i + 1 < len(turns) and turns[i + 1]["speaker"] == "agent" else None
            if answer is None or not answer["text"].strip():
                data.add(NO_REFERENCE, task_id)
            cited = {c["document_id"]: c for c in (answer["contexts"] if answer else [])}
            relevant = rel_by_task.get(task_id, [])
            passages = []
            for did in relevant:
                doc = cited.get(did) or data.cited.get(d, {}).get(did)
                if doc is None:
                    data.add("relevant passages not cited in the conversation (no text)", f"{task_id}: {did}")
                passages.append({"document_id": did, "title": doc["title"] if doc else "",
                                 "text": doc["text"] if doc else ""})  # fmt: skip
            expected = m["answerability"] in SCORED_ANSWERABILITY
            if d in domains_with_qrels:
                if bool(relevant) != expected:
                    data.add("tasks whose qrels disagree with answerability", task_id)
                if relevant:
                    final_yes = {k for k, c in cited.items() if c["relevant"] == "yes"}
                    agree = final_yes == set(relevant)
                    data.add("scored tasks whose qrels equal the passages last judged relevant" if agree
                             else "scored tasks whose qrels differ from the passages last judged relevant",
                             None if agree else task_id)  # fmt: skip
            data.tasks.append({
                "task_id": task_id, "conversation_id": conv["conversation_id"], "turn": m["turn"], "domain": d,
                "collection": conv["collection"], "question": m["text"],
                "input": [{"speaker": t["speaker"], "text": t["text"]} for t in turns[: i + 1]],
                "targets": [{"speaker": "agent", "text": answer["text"]}] if answer and answer["text"].strip() else [],
                "answerability": m["answerability"], "multi_turn": m["multi_turn"],
                "question_type": m["question_type"], "standalone": m["standalone"],
                "scored": bool(relevant), "relevant_passages": passages,
            })  # fmt: skip
            data.add(f"tasks: {m['answerability'] or 'unlabelled'}")


def _views(data: MtragData, queries: dict, qrels: dict, files: dict[str, str | None]) -> None:
    tasks = {t["task_id"]: t for t in data.tasks}
    for (d, v), rows in queries.items():
        out = data.queries.setdefault(d, {}).setdefault(v, [])
        for qid, text, line in rows:
            task = tasks.get(qid)
            if task is None or task["domain"] != d:
                raise DataError(f"query {qid!r} is not a task of domain {d}", files[f"{d}-{v}"], line)
            if task["answerability"] not in SCORED_ANSWERABILITY:
                data.add("queries of tasks labelled neither ANSWERABLE nor PARTIAL", qid)
            out.append({"_id": qid, "text": text, **{k: task[k] for k in QUERY_EXTRA}})
    for d, rows in qrels.items():
        known = {q["_id"] for v in data.queries.get(d, {}).values() for q in v} or {
            t["task_id"] for t in data.tasks if t["domain"] == d}  # fmt: skip
        data.qrels[d] = []
        for qid, did, score, line in rows:
            if qid not in known:
                raise DataError(f"qrels name unknown query {qid!r}", files[f"{d}-qrels"], line)
            data.qrels[d].append({"query-id": qid, "corpus-id": did, "score": score})
            if did not in data.cited.get(d, {}):
                data.add("qrels passages not cited in any conversation", f"{qid}: {did}")
