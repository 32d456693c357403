"""Source handling of the RECOR builder: release layout, strict JSONL readers, parsing and quirk counting.

The public release (``RECOR-Benchmark/RECOR`` on the Hub) holds, per domain ``D`` (file names as released, e.g.
``Drones``), ``data/benchmark/D_benchmark.jsonl`` (one conversation per line) and ``data/corpus/D_documents.jsonl``
(one document per line: ``{doc_id, content}``). A local ``source`` folder may be in that layout, hold the
``D_*.jsonl`` files directly (or under ``benchmark/`` and ``corpus/``), or be a *flat* folder with one
``benchmark.jsonl`` and one ``documents.jsonl`` mixing domains (the curated pilot sample): there a conversation's
domain comes from its ``task`` field and a document's from the turns that cite it (or its ``<domain>_`` id prefix).

Every line is checked as it is read (errors name the file and line): missing fields, wrong types (e.g. a
``metadata.num_turns`` that is not an int), an empty conversation id, query or gold document id, a repeated
conversation id (both lines named), a benchmark file without conversations. Kept and counted in the build report:
turns with an empty answer (the answer is not scored) and documents with empty text (qrels may point at them).
A ``SourceCache`` shared by the configs of an export reads each file once; a corpus is streamed into an intermediate
file and only its ids (with a hash of each text) stay in memory, as compact ``DocTable`` arrays.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from convrag.builders.base import BuildReport, SourceCache
from convrag.core.errors import DataError
from convrag.core.jsonl import iter_jsonl, read_jsonl, text_lines
from convrag.core.jsonl import typed_field as check
from convrag.core.provenance import is_url

from .recor_ids import DocTable, digest, name_shared, shared_digests

#: file-name domain (as released) -> config / column domain name (lower case, as in ``task``)
FILE_DOMAINS = ("biology", "earth_science", "economics", "psychology", "robotics", "sustainable_living",
                "Drones", "hardware", "law", "medicalsciences", "politics")  # fmt: skip
DOMAINS = tuple(d.lower() for d in FILE_DOMAINS)
FILE_NAME = dict(zip(DOMAINS, FILE_DOMAINS, strict=True))
HUB_URL = "https://huggingface.co/datasets/RECOR-Benchmark/RECOR/resolve/main/"
FLAT = "flat"
MISSING_LIMIT = 100_000  # every missing gold document is listed in the report
EMPTY_ANSWER = "turns with an empty answer (kept)"
EMPTY_DOCUMENT = "documents with empty text (kept)"
_META = {"created_at": str, "gold_doc_count": int, "method": str, "num_turns": int, "source": str, "version": str}


def release_paths() -> dict[str, str]:
    """Source name (``<domain>-benchmark`` / ``<domain>-corpus``) -> path in the release."""
    paths = {}
    for d in DOMAINS:
        paths[f"{d}-benchmark"] = f"data/benchmark/{FILE_NAME[d]}_benchmark.jsonl"
        paths[f"{d}-corpus"] = f"data/corpus/{FILE_NAME[d]}_documents.jsonl"
    return paths


def _candidates(root: str, rel: str) -> list[str]:
    name = os.path.basename(rel)
    sub = os.path.basename(os.path.dirname(rel))
    return [os.path.join(root, rel), os.path.join(root, sub, name), os.path.join(root, name)]


def locate(source: Any) -> dict[str, str | None]:
    """Source name -> path or URL (None where a local folder lacks the file); ``flat`` names a flat folder."""
    paths = release_paths()
    if source is None or is_url(str(source)):
        prefix = str(source).rstrip("/") + "/" if source else HUB_URL
        return {name: prefix + rel for name, rel in paths.items()}
    root = os.path.expanduser(str(source))
    if not os.path.isdir(root):
        raise DataError("RECOR source must be a folder (release layout or flat sample) or a URL", root)
    located: dict[str, str | None] = {
        name: next((p for p in _candidates(root, rel) if os.path.isfile(p)), None) for name, rel in paths.items()
    }
    if not any(located.values()) and os.path.isfile(os.path.join(root, "benchmark.jsonl")):
        located[FLAT] = root
    return located


def missing_benchmark(root: str, domain: str | None = None) -> DataError:
    """The error of a local folder without the benchmark file of ``domain`` (None: of any domain): a flat
    sample's ``benchmark.jsonl`` is named where the folder has its ``documents.jsonl``, else the release path."""
    root = os.path.expanduser(root)
    if os.path.isfile(os.path.join(root, "documents.jsonl")):
        return DataError("not found (a flat RECOR folder needs it beside documents.jsonl)",
                         os.path.join(root, "benchmark.jsonl"))  # fmt: skip
    if domain is not None:
        return DataError(f"not found (the {domain} configs need it; also looked for it in benchmark/ and directly "
                         "in the folder)", os.path.join(root, release_paths()[f"{domain}-benchmark"]))  # fmt: skip
    return DataError("holds no RECOR benchmark file: looked for data/benchmark/<Domain>_benchmark.jsonl (also in "
                     "benchmark/ or directly in the folder, e.g. Law_benchmark.jsonl) and a flat benchmark.jsonl", root)


def available_domains(located: dict[str, str | None]) -> list[str]:
    """Domains whose benchmark file the source holds (for a flat folder: the domains found in it)."""
    if located.get(FLAT):
        path = os.path.join(str(located[FLAT]), "benchmark.jsonl")
        rows = read_jsonl(path)
        if not rows:
            raise DataError("the file holds no conversations", path)
        return sorted({domain_of_task(c.get("task"), path, n) for n, c in rows})
    return [d for d in DOMAINS if located.get(f"{d}-benchmark")]


def domain_of_task(task: Any, path: str, line: int) -> str:
    key = str(task or "").strip().lower()
    if key not in DOMAINS:
        raise DataError(f"unknown RECOR task {task!r}; expected one of {list(DOMAINS)}", path, line)
    return key


def _strings(value: Any, name: str, path: str, line: int, ids: bool = False) -> list[str]:
    """A list of strings (``ids``: of non-empty strings); None is an empty list."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and (v.strip() or not ids) for v in value):
        raise DataError(f"field {name!r} must be a list of {'non-empty ' if ids else ''}strings", path, line)
    return list(value)


def _no_rows() -> Iterator[tuple[str, str]]:
    return iter(())


@dataclass
class RecorData:
    """Parsed release: rows per domain, the corpus per domain and the build report.

    ``corpus``: domain -> its documents' ids and text hashes; ``documents``: domain -> a function streaming
    its (document id, text) pairs in file order; ``shared``: document ids held by several domains -> (those
    domains in domain order, whether their texts differ), in first-seen order.
    """

    conversations: dict[str, list[dict]] = field(default_factory=dict)
    queries: dict[str, list[dict]] = field(default_factory=dict)
    qrels: dict[str, list[dict]] = field(default_factory=dict)
    corpus: dict[str, DocTable] = field(default_factory=dict)
    documents: dict[str, Callable[[], Iterator[tuple[str, str]]]] = field(default_factory=dict)
    shared: dict[str, tuple[list[str], bool]] = field(default_factory=dict)
    report: BuildReport = field(default_factory=BuildReport)
    lines: dict[str, tuple[str, int]] = field(default_factory=dict)  # conversation id -> (file, line)


def parse_turn(turn: Any, index: int, path: str, line: int, report: BuildReport, gid: str) -> dict:
    """Turn ``index`` of conversation ``gid`` (a line of ``path``), checked."""
    at = f"turns[{index}]."

    def text(name: str, obj: Any = turn, where: str = at) -> str:
        return check(obj, name, str, path, line, where, default="")

    tid = check(turn, "turn_id", int, path, line, at)
    meta = check(turn, "subquestion_reasoning_metadata", dict, path, line, at, default={})
    target = meta.get("target_information") or ""
    answer = text("answer")
    if not answer.strip():
        report.add(EMPTY_ANSWER, f"{gid}:{tid}")
    return {
        "turn": tid,
        "speaker": "user",
        "text": check(turn, "query", str, path, line, at, empty=False),
        "answer": answer,
        "gold_doc_ids": _strings(turn.get("gold_doc_ids"), at + "gold_doc_ids", path, line, ids=True),
        "conversation_history": text("conversation_history"),
        "subquestion_reasoning": text("subquestion_reasoning"),
        "target_information": target if isinstance(target, str) else json.dumps(target),
        "relevance_signals": _strings(meta.get("relevance_signals"), "relevance_signals", path, line),
        "irrelevance_signals": _strings(meta.get("irrelevance_signals"), "irrelevance_signals", path, line),
    }


def parse_conversation(obj: dict, domain: str, path: str, line: int, data: RecorData) -> None:
    report = data.report
    raw_id = check(obj, "id", (str, int), path, line)
    cid = str(raw_id)
    if not cid.strip():
        raise DataError("field 'id' is empty", path, line)
    task = check(obj, "task", str, path, line)
    if task != domain:
        if task.lower() != domain:
            raise DataError(f"conversation {cid!r} has task {task!r} in the {domain!r} file", path, line)
        report.add("task names differing from the file's domain name only in case (e.g. Drones/drones)",
                   f"{domain}:{cid}")  # fmt: skip
    if FILE_NAME[domain] != domain:
        report.add("conversations of a domain whose file name differs from its task (Drones files, task "
                   "'drones'; configs named 'drones')", f"{domain}:{cid}")  # fmt: skip
    if not isinstance(raw_id, str) or cid.isdigit():
        report.add("numeric conversation ids (BRIGHT-sourced; qualified with the domain)", f"{domain}:{cid}")
    gid = f"{domain}:{cid}"
    if gid in data.lines:
        first, at = data.lines[gid]
        where = f"line {at}" if first == path else f"{first}:{at}"
        raise DataError(f"duplicate conversation id {cid!r} in domain {domain!r} (first on {where})", path, line)
    data.lines[gid] = (path, line)
    turns = [parse_turn(t, i, path, line, report, gid) for i, t in enumerate(check(obj, "turns", list, path, line))]
    ids = [t["turn"] for t in turns]
    if len(set(ids)) != len(ids):
        raise DataError(f"conversation {cid!r} has duplicate turn ids {ids}", path, line)
    if ids != sorted(ids):
        report.add("conversations with turns out of order (sorted by turn_id)", gid)
        turns.sort(key=lambda t: t["turn"])
    meta = check(obj, "metadata", dict, path, line, default={})
    values = {name: check(meta, name, kind, path, line, "metadata.", default=None) for name, kind in _META.items()}
    if values["num_turns"] is not None and values["num_turns"] != len(turns):
        report.add("conversations whose metadata.num_turns differs from their turns", gid)
    if not turns:
        report.add("conversations without turns", gid)
    data.conversations.setdefault(domain, []).append({
        "conversation_id": gid, "domain": domain, "turns": turns, "id": cid, "task": task,
        "original_query": check(obj, "original_query", str, path, line, default=""),
        "original_answer": check(obj, "original_answer", str, path, line, default=""),
        "metadata": {name: values[name] if values[name] is not None else kind()
                     for name, kind in _META.items()},
    })  # fmt: skip
    for t in turns:
        qid = f"{gid}:{t['turn']}"
        gold = list(dict.fromkeys(t["gold_doc_ids"]))
        if len(gold) != len(t["gold_doc_ids"]):
            report.add("turns listing a gold document twice (kept once)", qid)
        if not gold:
            report.add("turns without gold documents (no qrels)", qid)
        data.queries.setdefault(domain, []).append({
            "_id": qid, "text": t["text"], "domain": domain, "conversation_id": gid, "turn": t["turn"],
            "history": t["conversation_history"], "reasoning": t["subquestion_reasoning"],
        })  # fmt: skip
        for doc_id in gold:
            data.qrels.setdefault(domain, []).append({"query-id": qid, "corpus-id": doc_id, "score": 1})


def read_corpus(path: str, report: BuildReport) -> Iterator[tuple[str, str]]:
    """(doc_id, content) of a documents file, streamed; an id repeated with the same text is kept once."""
    seen: dict[bytes, int] = {}  # digest of the id -> hash of its text (the line is looked up only for an error)
    for line, obj in iter_jsonl(text_lines(path), path):
        doc_id = check(obj, "doc_id", str, path, line, empty=False)
        text = check(obj, "content", str, path, line)
        if not text.strip():
            report.add(EMPTY_DOCUMENT, doc_id)
        key = digest(doc_id)
        if key in seen:
            if seen[key] != hash(text):
                first = next(n for n, o in iter_jsonl(text_lines(path), path) if o.get("doc_id") == doc_id)
                raise DataError(f"document {doc_id!r} repeated with a different text (first on line {first})",
                                path, line)  # fmt: skip
            report.add("documents repeated in a corpus file (kept once)", doc_id)
            continue
        seen[key] = hash(text)
        yield doc_id, text


def _documents(path: str, sources: SourceCache, report: BuildReport) -> Callable[[], Iterator[tuple[str, str]]]:
    """The documents of a corpus file, read once per export (``sources``) and streamed from there."""
    return sources.spilled("recor-corpus", [path], lambda events: read_corpus(path, events), report)


def _table(path: str, sources: SourceCache, rows: Callable[[], Iterator[tuple[str, str]]]) -> DocTable:
    return sources.parsed("recor-corpus-table", [path], lambda _: DocTable((i, hash(text)) for i, text in rows()))


def _benchmark_lines(path: str, sources: SourceCache) -> Iterator[tuple[int, dict]]:
    """(line, object) of a benchmark file, read once per export and streamed from the spilled copy."""
    return sources.spilled("jsonl", [path], lambda _: iter_jsonl(text_lines(path), path))()


def parse_recor(files: dict[str, str | None], domains: list[str], sources: SourceCache | None = None) -> RecorData:
    """Parse the benchmark and corpus files of ``domains`` (a ``flat`` entry: one mixed folder); ``sources``
    holds files already read by other configs of the export."""
    data = RecorData()
    sources = sources if sources is not None else SourceCache()
    if files.get(FLAT):
        root = str(files[FLAT])
        path = os.path.join(root, "benchmark.jsonl")
        others: dict[str, str] = {}  # gold document id -> domain, for the conversations of domains not parsed here
        for line, obj in read_jsonl(path):  # a small sample, parsed once (cached) with available_domains
            domain = domain_of_task(obj.get("task"), path, line)
            if domain in domains:
                parse_conversation(obj, domain, path, line, data)
            else:
                for doc_id in _gold_ids(obj):
                    others.setdefault(doc_id, domain)
        _flat_corpus(os.path.join(root, "documents.jsonl"), domains, data, sources, others)
    else:
        for d in domains:
            path = files.get(f"{d}-benchmark")
            if path is None:
                data.report.add("domains skipped: the source lacks their benchmark file", d)
                continue
            before = len(data.conversations.get(d, []))
            for line, obj in _benchmark_lines(path, sources):
                parse_conversation(obj, d, path, line, data)
            if len(data.conversations.get(d, [])) == before:
                raise DataError("the file holds no conversations", path)
            cpath = files.get(f"{d}-corpus")
            if cpath is None:
                data.report.add("domains without a corpus file", d)
                data.corpus[d] = DocTable()
                data.documents[d] = _no_rows
                continue
            data.documents[d] = _documents(cpath, sources, data.report)
            data.corpus[d] = _table(cpath, sources, data.documents[d])
        paths = [files.get(f"{d}-corpus") for d in data.corpus]
        data.shared = sources.parsed("recor-shared:" + ",".join(data.corpus), paths, lambda _: name_shared(
            shared_digests(data.corpus), (data.documents[d]() for d in data.corpus)))
    _check_gold(data)
    return data


def _gold_ids(obj: Any) -> list[str]:
    """The gold document ids a conversation's turns list (read leniently: the conversation is checked in full when
    its own domain is parsed)."""
    turns = obj.get("turns") if isinstance(obj, dict) else None
    return [g for t in turns if isinstance(t, dict) for g in (t.get("gold_doc_ids") or []) if isinstance(g, str)] \
        if isinstance(turns, list) else []


def _flat_corpus(path: str, domains: list[str], data: RecorData, sources: SourceCache,
                 others: dict[str, str]) -> None:
    """A flat folder's documents, each in one domain (so no id is shared by domains): the domain whose turns cite
    it, else the domain its id starts with (``law_...``). A document of a domain not parsed here (``others``: gold
    id -> domain) belongs to that domain's configs; one that no conversation cites and no domain prefixes is
    counted as left out."""
    cited: dict[str, str] = {}
    for d in domains:
        for row in data.qrels.get(d, []):
            cited.setdefault(row["corpus-id"], d)
        data.corpus[d] = DocTable()
        data.documents[d] = _no_rows
    if not os.path.isfile(path):
        data.report.add("flat source without documents.jsonl", path)
        return
    rows = _documents(path, sources, data.report)
    found: dict[str, list[tuple[str, int]]] = {d: [] for d in domains}
    for doc_id, text in rows():
        domain = cited.get(doc_id) or next((d for d in DOMAINS if doc_id.lower().startswith(d + "_")), None) \
            or others.get(doc_id)
        if domain is None:
            data.report.add("flat-source documents that no conversation cites and no domain prefix names (left "
                            "out)", doc_id)  # fmt: skip
        elif domain in domains:
            found[domain].append((doc_id, hash(text)))
    for d in domains:
        ids = data.corpus[d] = DocTable(found[d])
        data.documents[d] = lambda ids=ids: ((doc_id, text) for doc_id, text in rows() if doc_id in ids)


def _check_gold(data: RecorData) -> None:
    report = data.report
    for d, rows in data.qrels.items():
        corpus = data.corpus.get(d, {})
        for doc_id in sorted({r["corpus-id"] for r in rows}):
            if doc_id in corpus:
                continue
            elsewhere = [o for o, docs in data.corpus.items() if o != d and doc_id in docs]
            event = ("gold documents found only in another domain's corpus (qrels kept)" if elsewhere
                     else "gold documents missing from every corpus (qrels kept)")  # fmt: skip
            report.add(event, f"{d}:{doc_id}", limit=MISSING_LIMIT)
    for doc_id, (_, differ) in data.shared.items():
        if differ:
            report.add("document ids shared by domains with different texts (qualified in all-*)", doc_id)
        else:
            report.add("document ids shared by domains with the same text (kept once in all-*)", doc_id)
    for d, convs in data.conversations.items():
        report.counts[f"conversations: {d}"] = len(convs)
        report.counts[f"turns: {d}"] = len(data.queries.get(d, []))
        report.counts[f"qrels: {d}"] = len(data.qrels.get(d, []))
        report.counts[f"corpus documents: {d}"] = len(data.corpus.get(d, {}))


def conflicting_ids(data: RecorData) -> set[str]:
    """Document ids used by several domains with different texts (qualified ``<domain>:<id>`` in all-*)."""
    return {doc_id for doc_id, (_, differ) in data.shared.items() if differ}
