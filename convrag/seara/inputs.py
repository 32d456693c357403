"""What a user has for ``convrag select``: a corpus and real queries, no qrels.

* Corpus: a JSONL / JSONL.gz / Parquet file or folder of them (``_id`` or ``id``, ``text``, optional ``title``),
  or a folder written by ``convrag build`` (its ``corpus`` config, or ``corpus_config``); read by
  :mod:`convrag.core.corpus`, which checks ids, types, empty texts and UTF-8 with file and line.
* Queries: a ``.txt`` file (one query per non-blank line, ids ``q1``, ``q2``, ... by line number), a JSONL file
  (``_id`` or ``id``, ``text``, optional ``history``: a string or a list of ``{role, content}`` messages), or a
  built benchmark folder (its query configs, read as ``convrag evaluate`` reads them; its qrels are not used).
  Multi-turn queries become text through a query strategy of :mod:`convrag.retrievers.strategies` (``baseline``: the
  current question; ``history``, ``rewrite``, ...).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from convrag.core.errors import ConvragError, DataError
from convrag.core.jsonl import iter_jsonl, text_lines
from convrag.retrievers.strategies import Turn, format_queries

Document = tuple[str, str, str]


def read_corpus(source: str | os.PathLike, config: str | None = None) -> list[Document]:
    """``[(doc_id, title, text), ...]`` of every document, in file order; ids unique across files."""
    from convrag.core.corpus import corpus_files, iter_file

    files = corpus_files(source, config)
    seen: dict[str, str] = {}
    docs: list[Document] = []
    for path in files.files:
        for line, doc_id, title, text in iter_file(path):
            if doc_id in seen:
                raise DataError(f"duplicate document id {doc_id!r} (also in {seen[doc_id]})", path, line)
            seen[doc_id] = path
            docs.append((doc_id, title, text))
    if not docs:
        raise DataError("the corpus holds no document", str(source))
    return docs


def _jsonl_turn(obj: dict[str, Any], path: str, line: int) -> Turn:
    key = "_id" if "_id" in obj else "id"
    qid, text = obj.get(key), obj.get("text", obj.get("query"))
    if not isinstance(qid, (str, int)) or isinstance(qid, bool) or not str(qid).strip():
        raise DataError("query id (_id or id) must be a non-empty string or an integer", path, line)
    if not isinstance(text, str) or not text.strip():
        raise DataError(f"query {qid}: field 'text' must be a non-empty string", path, line)
    history = obj.get("history")
    messages: tuple[tuple[str, str], ...] = ()
    if history is not None and not isinstance(history, (str, list)):
        raise DataError(f"query {qid}: 'history' must be a string or a list of {{role, content}}", path, line)
    if isinstance(history, list):
        for m in history:
            if not isinstance(m, dict) or not isinstance(m.get("content", m.get("text")), str):
                raise DataError(f"query {qid}: every history message needs a string 'content'", path, line)
        messages = tuple((str(m.get("role") or m.get("speaker") or "user"), str(m.get("content", m.get("text"))))
                         for m in history)  # fmt: skip
    return Turn(qid=str(qid), query=text, history=messages,
                history_text=history if isinstance(history, str) else None)  # fmt: skip


def read_turns(source: str | os.PathLike, split: str | None = None) -> list[Turn]:
    """The queries of ``source`` (module docstring) as :class:`~convrag.retrievers.strategies.Turn` objects."""
    path = Path(source)
    if not path.exists():
        raise ConvragError(f"{path}: no such queries file or folder (give .txt, .jsonl or a built folder)")
    if path.is_dir():
        from convrag.builders.profile import profile_of
        from convrag.core.manifest import read_manifest
        from convrag.evaluation.data import load_benchmark

        manifest = read_manifest(path)
        turns = load_benchmark(path, profile_of(manifest, source=str(path / "README.md")), split=split).turns
    elif path.name.endswith((".jsonl", ".jsonl.gz")):
        turns = [_jsonl_turn(obj, str(path), line) for line, obj in iter_jsonl(text_lines(str(path)), str(path))]
    elif path.suffix == ".txt":
        turns = [Turn(qid=f"q{line}", query=text.strip())
                 for line, text in enumerate(text_lines(str(path)), start=1) if text.strip()]  # fmt: skip
    else:
        raise ConvragError(f"{path}: queries must be a .txt or .jsonl file or a built benchmark folder")
    if not turns:
        raise DataError("no query in this file", str(path))
    dupes = sorted(q for q, n in Counter(t.qid for t in turns).items() if n > 1)
    if dupes:
        raise DataError(f"duplicate query ids {dupes[:5]}", str(path))
    return turns


def query_texts(turns: list[Turn], strategy: str = "baseline", llm: Any = None,
                progress: bool = False) -> dict[str, str]:
    """``{query_id: text}`` by a :mod:`convrag.retrievers.strategies` strategy; a failed LLM rewrite is an error
    (listed)."""
    return dict(format_queries(strategy, turns, llm=llm, progress=progress).texts)
