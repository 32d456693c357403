"""Shared source handling of the MTRAG and MTRAG-UN builders: names, ids, file layout and strict readers.

Layout of the IBM ``mt-rag-benchmark`` repository (paths relative to its root, or to a local checkout):

* ``mtrag-human/conversations/conversations.json``: the 110 MTRAG conversations;
* ``mtrag-human/retrieval_tasks/<domain>/<domain>_<view>.jsonl``: queries (``_id``, ``text``) per view;
* ``mtrag-human/retrieval_tasks/<domain>/qrels/dev.tsv``: MTRAG qrels (``query-id``, ``corpus-id``, ``score``);
* ``mtragun-human/generation_tasks/reference.jsonl``: the 507 MTRAG-UN tasks of MTRAGEval;
* ``mtragun-human/retrieval_tasks/qrels/<domain>.tsv``: MTRAG-UN qrels;
* ``corpora/passage_level/<domain>.jsonl.zip``: the passage-level corpora (JSONL ``_id, title, text, url``).

Task ids are ``<conversation id><::><turn>`` (:func:`normalize_task_id` also accepts the sample input files' ``::``).
Domain (collection) names come short (``clapnq``, ``cloud`` / ``ibmcloud``, ``fiqa``, ``govt``) or long (the
Elasticsearch index names, e.g. ``mt-rag-ibmcloud-elser-512-100-20240502``); :func:`normalize_domain` maps all of them
to the short form.
"""

from __future__ import annotations

import csv
import functools
import gzip
import os
import re
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

from convrag.builders.base import BuildReport
from convrag.core.errors import DataError
from convrag.core.jsonl import decoded_lines, handle_lines, iter_jsonl, open_binary, read_jsonl, text_lines, typed_field
from convrag.core.provenance import is_url

DOMAINS = ("clapnq", "cloud", "fiqa", "govt")
VIEWS = ("lastturn", "questions", "rewrite")
#: domain -> the long collection name used in conversations and submissions
COLLECTIONS = {
    "clapnq": "mt-rag-clapnq-elser-512-100-20240503",
    "cloud": "mt-rag-ibmcloud-elser-512-100-20240502",
    "fiqa": "mt-rag-fiqa-beir-elser-512-100-20240501",
    "govt": "mt-rag-govt-elser-512-100-20240611",
}
_ALIASES = {"clapnq": "clapnq", "cloud": "cloud", "ibmcloud": "cloud", "ibm-cloud": "cloud", "fiqa": "fiqa",
            "govt": "govt"}  # fmt: skip
_LONG = re.compile(r"^mt-rag-([a-z-]+?)(?:-beir)?-elser-")
REPO_URL = "https://github.com/IBM/mt-rag-benchmark/raw/main/"
SCORED_ANSWERABILITY = ("ANSWERABLE", "PARTIAL")
TASK_SEPARATOR = "<::>"


def normalize_domain(name: str, source: str | None = None, line: int | None = None) -> str:
    """Short domain name of a collection name in short or long form (``ibmcloud`` -> ``cloud``)."""
    key = str(name).strip().lower()
    match = _LONG.match(key)
    if match:
        key = match.group(1)
    if key not in _ALIASES:
        raise DataError(f"unknown MTRAG collection {name!r}; expected one of {sorted(COLLECTIONS.values())} "
                        f"or {sorted(_ALIASES)}", source, line)  # fmt: skip
    return _ALIASES[key]


def split_task_id(task_id: str, source: str | None = None, line: int | None = None) -> tuple[str, int]:
    """(conversation id, turn) of a task id written ``<cid><::><turn>`` or ``<cid>::<turn>``."""
    text = str(task_id).strip()
    sep = TASK_SEPARATOR if TASK_SEPARATOR in text else "::"
    parts = text.split(sep)
    if len(parts) != 2 or not parts[0] or not parts[1].strip().isdigit():
        raise DataError(f"malformed task id {task_id!r}: expected '<conversation id><::><turn>'", source, line)
    return parts[0], int(parts[1])


def normalize_task_id(task_id: str, source: str | None = None, line: int | None = None) -> str:
    """The canonical ``<cid><::><turn>`` form of a task id (``::`` separators are accepted)."""
    cid, turn = split_task_id(task_id, source, line)
    return f"{cid}{TASK_SEPARATOR}{turn}"


# ---------------------------------------------------------------- file layout


def mtrag_paths() -> dict[str, str]:
    """Source name -> path in the upstream layout, for the MTRAG builder."""
    paths = {"conversations": "mtrag-human/conversations/conversations.json"}
    for d in DOMAINS:
        for v in VIEWS:
            paths[f"{d}-{v}"] = f"mtrag-human/retrieval_tasks/{d}/{d}_{v}.jsonl"
        paths[f"{d}-qrels"] = f"mtrag-human/retrieval_tasks/{d}/qrels/dev.tsv"
    paths.update(corpus_paths())
    return paths


def mtrag_un_paths() -> dict[str, str]:
    """Source name -> path in the upstream layout, for the MTRAG-UN builder."""
    paths = {"reference": "mtragun-human/generation_tasks/reference.jsonl"}
    for d in DOMAINS:
        paths[f"{d}-qrels"] = f"mtragun-human/retrieval_tasks/qrels/{d}.tsv"
    paths.update(corpus_paths())
    return paths


def corpus_paths() -> dict[str, str]:
    return {f"{d}-corpus": f"corpora/passage_level/{d}.jsonl.zip" for d in DOMAINS}


def _local_candidates(root: str, rel: str) -> list[str]:
    """Where a file may be in a local folder: the upstream path; corpora also unzipped or one level up."""
    found = [os.path.join(root, rel)]
    if rel.startswith("corpora/"):
        name = os.path.basename(rel)
        found += [os.path.join(root, rel[: -len(".zip")]), os.path.join(root, "corpora", name),
                  os.path.join(root, "corpora", name[: -len(".zip")])]  # fmt: skip
    return found


def locate(source: Any, layout: dict[str, str]) -> dict[str, str | None]:
    """Source name -> local path or URL (None where a local folder lacks the file).

    ``source``: None (the upstream repository by URL), a URL prefix, a local folder in the upstream
    layout, or a mapping name -> path/URL (names not given are looked up in ``source['root']`` if given,
    else at the upstream URL).
    """
    overrides: dict[str, str] = {}
    root: str | None = None
    if isinstance(source, dict):
        overrides = {k: v for k, v in source.items() if k != "root"}
        unknown = sorted(set(overrides) - set(layout))
        if unknown:
            raise DataError(f"unknown source names {unknown}; expected some of {sorted(layout)} or 'root'")
        root = source.get("root")
    elif source is not None:
        root = str(source)
    if root is not None and not is_url(root):
        root = os.path.expanduser(root)
        if not os.path.isdir(root):
            raise DataError("source must be a folder in the mt-rag-benchmark layout (or a URL)", root)
    located: dict[str, str | None] = {}
    for name, rel in layout.items():
        if name in overrides:
            located[name] = overrides[name]
        elif root is None or is_url(root):
            located[name] = (root.rstrip("/") + "/" if root else REPO_URL) + rel
        else:
            located[name] = next((p for p in _local_candidates(root, rel) if os.path.exists(p)), None)
    return located


def expected_paths(source: Any, layout: dict[str, str], names: list[str]) -> list[str]:
    """Where each of ``names`` was looked for in a local ``source`` (its folder, or the ``root`` of a mapping):
    the upstream path (the first of ``_local_candidates``); the bare name without a local folder."""
    root = source.get("root") if isinstance(source, dict) else source
    if root is None or is_url(str(root)):
        return list(names)
    return [os.path.join(os.path.expanduser(str(root)), layout[n]) for n in names]


def fetch(located: dict[str, str | None], names: list[str], dl_manager: Any) -> dict[str, str | None]:
    """Local paths of ``names`` (URLs downloaded with ``dl_manager``; a missing local file stays None)."""
    out: dict[str, str | None] = {}
    for name in names:
        path = located.get(name)
        if path is None:
            out[name] = None
        elif is_url(path):
            out[name] = dl_manager.download(path)
        else:
            if not os.path.exists(path):
                raise DataError(f"source file for {name!r} does not exist", path)
            out[name] = path
    return out


# ---------------------------------------------------------------- readers (cached per file version)

#: build-report event of the ``corpus`` configs
EMPTY_CORPUS_TEXT = "corpus passages with empty text (kept)"


def read_queries(path: str) -> list[tuple[str, str, int]]:
    """(``_id``, ``text``, line) of a BEIR queries JSONL file, ids unique, in file order.

    An empty file, a missing or empty ``_id`` or ``text`` and a repeated id are errors naming the file and line.
    """
    seen: dict[str, int] = {}
    out = []
    for line, obj in read_jsonl(path):
        qid = typed_field(obj, "_id", str, path, line, empty=False)
        text = typed_field(obj, "text", str, path, line, empty=False)
        if qid in seen:
            raise DataError(f"duplicate query id {qid!r} (first on line {seen[qid]})", path, line)
        seen[qid] = line
        out.append((qid, text, line))
    if not out:
        raise DataError("the file holds no queries", path)
    return out


def read_qrels(path: str) -> list[tuple[str, str, int, int]]:
    """(query-id, corpus-id, score, line) rows of a BEIR qrels TSV with a header; pairs unique."""
    return list(_read_qrels(path, os.path.getmtime(path)))


@functools.lru_cache(maxsize=16)
def _read_qrels(path: str, mtime: float) -> tuple[tuple[str, str, int, int], ...]:
    rows = []
    seen: dict[tuple[str, str], int] = {}
    reader = csv.reader(text_lines(path), delimiter="\t")
    header = next(reader, None)
    if header is None or [h.strip() for h in header[:3]] != ["query-id", "corpus-id", "score"]:
        raise DataError(f"expected header 'query-id<TAB>corpus-id<TAB>score', got {header!r}", path, 1)
    for number, row in enumerate(reader, start=2):
        if not row or not any(c.strip() for c in row):
            continue
        if len(row) != 3:
            raise DataError(f"expected 3 tab-separated columns, got {len(row)}", path, number)
        qid, did, score = (c.strip() for c in row)
        if not qid or not did:
            raise DataError("empty query-id or corpus-id", path, number)
        try:
            value = int(score)
        except ValueError:
            raise DataError(f"score must be an integer, got {score!r}", path, number) from None
        if (qid, did) in seen:
            raise DataError(f"duplicate qrels pair ({qid}, {did}) (first on line {seen[qid, did]})", path, number)
        seen[qid, did] = number
        rows.append((qid, did, value, number))
    if not rows:
        raise DataError("the file holds no qrels rows", path)
    return tuple(rows)


def iter_corpus(path: str, report: BuildReport | None = None) -> Iterator[dict[str, str]]:
    """Passages of a corpus file (``.jsonl`` or a ``.zip`` holding one ``.jsonl``): ``_id, title, text, url``.

    A corrupt or truncated archive, non-UTF-8 bytes, a missing or repeated id are errors naming the file (and
    the line); passages with empty text are kept and counted in ``report``.
    """
    with open_binary(path) as handle:  # opened once: the zip test and the reading share the handle
        zipped = not isinstance(handle, gzip.GzipFile) and (path.endswith(".zip") or zipfile.is_zipfile(handle))
        handle.seek(0)
        if not zipped:
            yield from _corpus_lines(handle_lines(handle, path), path, report)
            return
        try:
            with zipfile.ZipFile(handle) as archive:
                members = [n for n in archive.namelist() if n.endswith(".jsonl") and not n.startswith("__MACOSX")]
                if len(members) != 1:
                    raise DataError(f"expected exactly one .jsonl file in the archive, found {members}", path)
                where = f"{path}!{members[0]}"
                with archive.open(members[0]) as raw:
                    yield from _corpus_lines(decoded_lines(raw, where), where, report)
        except (zipfile.BadZipFile, zlib.error, EOFError) as err:
            raise DataError(f"corrupt or truncated zip archive ({type(err).__name__}: {err})", path) from None
        except OSError as err:  # the archive cannot be read
            raise DataError(f"cannot read the zip archive ({err.strerror or err})", path) from None


def _corpus_lines(lines: Iterable[str], where: str, report: BuildReport | None) -> Iterator[dict[str, str]]:
    seen: dict[str, int] = {}
    for number, obj in iter_jsonl(lines, where):
        doc_id = obj.get("_id", obj.get("id"))
        if not isinstance(doc_id, str) or not doc_id.strip():
            raise DataError("passage without a string '_id'", where, number)
        text = typed_field(obj, "text", str, where, number)
        title = typed_field(obj, "title", str, where, number, default="")
        url = typed_field(obj, "url", str, where, number, default="")
        if doc_id in seen:
            raise DataError(f"duplicate passage id {doc_id!r} (first on line {seen[doc_id]})", where, number)
        seen[doc_id] = number
        if not text.strip() and report is not None:
            report.add(EMPTY_CORPUS_TEXT, doc_id)
        yield {"_id": doc_id, "title": title, "text": text, "url": url}


def user_prefix_texts(user_texts: list[str]) -> tuple[str, str]:
    """(lastturn, questions) query texts of a task in the format of the released files.

    ``lastturn`` is ``|user|: <current question>``; ``questions`` is every user question so far, one
    ``|user|: <question>`` line each, joined with newlines.
    """
    lines = [f"|user|: {t}" for t in user_texts]
    return lines[-1], "\n".join(lines)
