"""D&V stage ``load``: question-answer items with their supporting documents, read and checked, in one schema.

Input formats (``input_format``): ``jsonl`` (default, :func:`read_jsonl_items`), ``bright`` (a BRIGHT
examples file and its documents file, :func:`read_bright_items`) and ``mtrag`` (MTRAG ``conversations.json``,
:func:`read_mtrag_items`). An item's domain must be one of RECOR's eleven (the RECOR builder's configs); the
options (``negatives``, ``domain``, ``limit``): :class:`Load`. Every bad line is an error naming the file and
line; nothing is dropped without being counted.
"""

from __future__ import annotations

import ast
import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from convrag.builders.recor_source import DOMAINS
from convrag.core.errors import ConvragError, DataError
from convrag.core.jsonl import read_jsonl
from convrag.synthesis.engine.pipeline import Estimate, StageContext
from convrag.synthesis.engine.records import RecordStage

FORMATS = ("jsonl", "bright", "mtrag")
SKIP = "_skip"


def _text(obj: dict[str, Any], key: str, path: str, line: int, where: str = "") -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{where}{key!r} must be a non-empty string, got {value!r}"[:300], path, line)
    return value


def _docs(value: Any, key: str, path: str, line: int, required: bool) -> list[dict[str, str]]:
    if value is None and not required:
        return []
    if not isinstance(value, list) or (required and not value):
        raise DataError(f"{key!r} must be a {'non-empty ' if required else ''}list of {{doc_id, text}}", path, line)
    docs, seen = [], set()
    for i, d in enumerate(value):
        if not isinstance(d, dict):
            raise DataError(f"{key}[{i}] must be an object {{doc_id, text}}", path, line)
        doc_id = _text(d, "doc_id", path, line, f"{key}[{i}].")
        if doc_id in seen:
            raise DataError(f"{key}[{i}]: document id {doc_id!r} repeated in the item", path, line)
        seen.add(doc_id)
        docs.append({"doc_id": doc_id, "text": _text(d, "text", path, line, f"{key}[{i}].")})
    return docs


def _literal_list(value: Any, key: str, path: str, line: int) -> list[str]:
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise DataError(f"{key!r} is neither a list nor a list literal", path, line) from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DataError(f"{key!r} must be a list of strings", path, line)
    return value


def _domain(value: Any, path: str, line: int | None) -> str:
    key = str(value or "").strip().lower()
    if key not in DOMAINS:
        raise DataError(f"domain {value!r} is not one of RECOR's {', '.join(DOMAINS)} (the RECOR builder's configs); "
                        "set it with --option domain=NAME", path, line)
    return key


def read_jsonl_items(path: str, domain: str | None) -> Iterator[dict[str, Any]]:
    """Items of a ``jsonl`` input file: one item per line, ``{"id", "query", "answer", "documents": [{"doc_id",
    "text"}]}`` with optional ``reasoning`` (why the documents answer the query; BRIGHT's annotation), ``domain``
    and ``negatives`` (hard-negative documents, same shape as ``documents``)."""
    seen: dict[str, int] = {}
    for line, obj in read_jsonl(path):
        item_id = obj.get("id")
        if isinstance(item_id, int) and not isinstance(item_id, bool):
            item_id = str(item_id)
        if not isinstance(item_id, str) or not item_id.strip():
            raise DataError(f"'id' must be a non-empty string, got {item_id!r}", path, line)
        if item_id in seen:
            raise DataError(f"id {item_id!r} repeated (first at line {seen[item_id]})", path, line)
        seen[item_id] = line
        reasoning = obj.get("reasoning") or ""
        if not isinstance(reasoning, str):
            raise DataError("'reasoning' must be a string", path, line)
        yield {"id": item_id, "query": _text(obj, "query", path, line), "answer": _text(obj, "answer", path, line),
               "reasoning": reasoning, "domain": _domain(domain or obj.get("domain"), path, line),
               "documents": _docs(obj.get("documents"), "documents", path, line, True),
               "negatives": _docs(obj.get("negatives"), "negatives", path, line, False), "origin": f"{path}:{line}"}


def read_bright_items(path: str, documents: str | None, domain: str | None) -> Iterator[dict[str, Any]]:
    """Items of a BRIGHT examples file, with gold documents from a BRIGHT documents file.

    ``path``: a BRIGHT ``examples`` file (``query``, ``reasoning``, ``id``, ``gold_ids``, ``gold_answer``; list
    fields may be Python-literal strings, as in the released files); ``documents``: a BRIGHT ``documents`` file
    (JSONL ``{"id", "content"}``) that holds the gold documents. The domain is ``domain`` or the examples file's
    name (``biology.jsonl``). An example whose gold documents are not all in the documents file is skipped and
    counted (the documents file may be a subset of BRIGHT's corpus)."""
    if not documents:
        raise ConvragError("input_format=bright needs --option documents=PATH (a BRIGHT documents JSONL: id, content)")
    texts: dict[str, str] = {}
    for line, obj in read_jsonl(documents):
        doc_id = _text(obj, "id", documents, line)
        if doc_id in texts:
            raise DataError(f"document id {doc_id!r} repeated", documents, line)
        texts[doc_id] = _text(obj, "content", documents, line)
    name = domain or os.path.splitext(os.path.basename(path))[0]
    dom = _domain(name, path, None)
    for line, obj in read_jsonl(path):
        gold = _literal_list(obj.get("gold_ids"), "gold_ids", path, line)
        item_id = str(obj.get("id", "")).strip()
        if not item_id:
            raise DataError("'id' is empty", path, line)
        base = {"id": f"{dom}-{item_id}", "query": _text(obj, "query", path, line),
                "answer": _text(obj, "gold_answer", path, line), "reasoning": str(obj.get("reasoning") or ""),
                "domain": dom, "negatives": [], "origin": f"{path}:{line}"}
        if not gold:
            yield {**base, "documents": [], SKIP: "load: BRIGHT example without gold documents"}
        elif any(g not in texts for g in gold):
            yield {**base, "documents": [], SKIP: "load: gold documents not in the documents file"}
        else:
            yield {**base, "documents": [{"doc_id": g, "text": texts[g]} for g in gold]}


def read_mtrag_items(path: str, domain: str | None) -> Iterator[dict[str, Any]]:
    """Items of MTRAG ``conversations.json``: every answerable agent turn becomes an item (the user question, the
    reference answer, the passages it cites as documents); unanswerable, partial or conversational turns and turns
    without passages are skipped and counted. ``domain`` must be given (MTRAG's domains are not RECOR's)."""
    if not domain:
        raise ConvragError("input_format=mtrag needs --option domain=NAME (one of RECOR's domains: "
                           f"{', '.join(DOMAINS)})")
    dom = _domain(domain, path, None)
    try:
        with open(path, encoding="utf-8") as handle:
            conversations = json.load(handle)
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise DataError(f"cannot read MTRAG conversations: {err}", path) from None
    if not isinstance(conversations, list):
        raise DataError("expected a JSON list of conversations", path)
    for c, conv in enumerate(conversations):
        messages = conv.get("messages") if isinstance(conv, dict) else None
        if not isinstance(messages, list):
            raise DataError(f"conversation {c}: 'messages' must be a list", path)
        question, enrich = None, {}
        for m, msg in enumerate(messages):
            speaker, text = msg.get("speaker"), msg.get("text")
            if speaker == "user":
                question, enrich = text, _literal(msg.get("enrichments"), path, c, m) or {}
                continue
            item_id = f"mtrag-{c:04d}-{m:02d}"
            answerable = (enrich.get("Answerability") or [""])[0] if question else ""
            contexts = _literal(msg.get("contexts"), path, c, m) or []
            base = {"id": item_id, "query": str(question or ""), "answer": str(text or ""), "reasoning": "",
                    "domain": dom, "negatives": [], "origin": f"{path}:conversation {c}, message {m}"}
            docs = [{"doc_id": str(x.get("document_id")), "text": str(x.get("text"))} for x in contexts
                    if isinstance(x, dict) and x.get("document_id") and str(x.get("text") or "").strip()]
            docs = list({d["doc_id"]: d for d in docs}.values())
            if answerable != "ANSWERABLE":
                yield {**base, "documents": [], SKIP: "load: MTRAG turn not answerable (or partial)"}
            elif not docs or not base["query"].strip() or not base["answer"].strip():
                yield {**base, "documents": [], SKIP: "load: MTRAG turn without passages or text"}
            else:
                yield {**base, "documents": docs}


def _literal(value: Any, path: str, conv: int, msg: int) -> Any:
    if isinstance(value, str):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise DataError(f"conversation {conv}, message {msg}: unreadable field {value[:60]!r}", path) from None
    return value


def read_negatives(path: str) -> list[dict[str, str]]:
    """Hard negatives ``{doc_id, text, domain?}``; ids unique."""
    out, seen = [], set()
    for line, obj in read_jsonl(path):
        doc_id = _text(obj, "doc_id", path, line)
        if doc_id in seen:
            raise DataError(f"document id {doc_id!r} repeated", path, line)
        seen.add(doc_id)
        dom = _domain(obj["domain"], path, line) if obj.get("domain") else ""
        out.append({"doc_id": doc_id, "text": _text(obj, "text", path, line), "domain": dom})
    return out


class Load(RecordStage):
    """Reads the input items (see the module docstring) into the D&V item schema; no LLM.

    Options: ``negatives``, a JSONL of extra hard-negative documents ``{"doc_id", "text"}`` (optional ``domain``:
    only that domain's corpus gets it) that go to the corpus of every item's domain; ``domain``, the domain of
    every item; ``limit``, keep the first N usable items.
    """

    name = "load"
    unit = "items"
    shard_size = 256

    def __init__(self, source: str | None = None, *, input_format: str = "jsonl", documents: str | None = None,
                 negatives: str | None = None, domain: str | None = None, limit: int | None = None) -> None:
        if input_format not in FORMATS:
            raise ConvragError(f"input_format must be one of {', '.join(FORMATS)}, got {input_format!r}")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ConvragError(f"limit must be a whole number >= 1, got {limit!r}")
        for name, path in (("input", source), ("documents", documents), ("negatives", negatives)):
            if path is not None and not os.path.isfile(path):
                raise ConvragError(f"{name} {path}: no such file")
        if source is None:
            raise ConvragError("the load stage needs --input FILE")
        if domain is not None and str(domain).strip().lower() not in DOMAINS:
            raise ConvragError(f"domain must be one of RECOR's {', '.join(DOMAINS)}, got {domain!r}")
        self.source, self.input_format, self.documents = source, input_format, documents
        self.negatives, self.domain, self.limit = negatives, domain, limit

    def params(self) -> dict[str, Any]:
        return {"input": os.path.abspath(self.source or ""), "input_format": self.input_format,
                "documents": self.documents and os.path.abspath(self.documents),
                "negatives": self.negatives and os.path.abspath(self.negatives), "domain": self.domain,
                "limit": self.limit}

    def input_files(self) -> list[str]:
        return [p for p in (self.source, self.documents, self.negatives) if p is not None]

    def items(self) -> Iterator[dict[str, Any]]:
        """Every input item (skipped ones carry their reason), the first ``limit`` usable ones at most."""
        path = str(self.source)
        if self.input_format == "bright":
            found: Iterable[dict[str, Any]] = read_bright_items(path, self.documents, self.domain)
        elif self.input_format == "mtrag":
            found = read_mtrag_items(path, self.domain)
        else:
            found = read_jsonl_items(path, self.domain)
        extra = read_negatives(self.negatives) if self.negatives else []
        usable = 0
        for item in found:
            if SKIP not in item:
                if self.limit is not None and usable >= self.limit:
                    return
                usable += 1
                own = {d["doc_id"] for d in item["documents"]} | {d["doc_id"] for d in item["negatives"]}
                item["negatives"] = item["negatives"] + [
                    {"doc_id": d["doc_id"], "text": d["text"]} for d in extra
                    if d["doc_id"] not in own and d["domain"] in ("", item["domain"])]
            yield item

    def records(self, ctx: StageContext) -> Iterable[dict[str, Any]]:
        return self.items()

    def estimate(self, ctx: StageContext) -> Estimate:
        n = sum(1 for item in self.items() if SKIP not in item)
        return Estimate(records=n, note=f"{n:,} usable items in {self.source}")

    def process(self, batch: list[dict[str, Any]], ctx: StageContext) -> tuple[list[dict[str, Any]], Counter[str]]:
        drops: Counter[str] = Counter(item[SKIP] for item in batch if SKIP in item)
        return [item for item in batch if SKIP not in item], drops
