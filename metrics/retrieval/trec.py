"""Read and write TREC run and qrels files, and read BEIR qrels TSV files.

- TREC run: one line per retrieved document, ``query_id Q0 doc_id rank score tag`` (whitespace separated). Reading
  keeps the scores (``{query_id: {doc_id: score}}``); like trec_eval, it checks that the rank column is an integer but
  takes the order from the scores.
- TREC qrels: ``query_id iteration doc_id grade`` (the iteration column, usually ``0``, is ignored).
- BEIR qrels: tab-separated ``query-id``, ``corpus-id``, ``score`` with a header line.

Blank lines are skipped; ``.gz`` files are read and written compressed. Malformed lines, non-numeric fields, repeated
(query, doc) pairs and bytes that are not UTF-8 raise ``TrecFormatError`` naming ``file:line``; a missing file, a
folder and truncated or corrupt gzip data raise it naming the file.

>>> import os, tempfile
>>> folder = tempfile.mkdtemp()
>>> path = os.path.join(folder, "run.trec")
>>> write_run({"q1": {"d1": 0.5, "d2": 1.5}}, path, tag="bm25")
>>> print(open(path).read(), end="")
q1 Q0 d2 1 1.5 bm25
q1 Q0 d1 2 0.5 bm25
>>> read_run(path)
{'q1': {'d2': 1.5, 'd1': 0.5}}
"""

from __future__ import annotations

import csv
import gzip
import math
import numbers
import os
import re
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import IO

import numpy as np
import pandas as pd

from .compute import RetrievalInputError, as_trec_scores

_UNSAFE = re.compile(r"[^A-Za-z0-9_.+-]")

PathLike = str | os.PathLike
BEIR_HEADER = ("query-id", "corpus-id", "score")
_RUN_COLUMNS = ["query", "q0", "doc", "rank", "score", "tag"]
_RUN_DTYPES = {"query": "category", "doc": object, "rank": np.int64, "score": np.float64, "tag": "category"}


class TrecFormatError(RetrievalInputError):
    """A malformed line in a run or qrels file; ``path`` and ``line`` (1-based) say where."""

    def __init__(self, message: str, path: PathLike, line: int | None = None) -> None:
        self.path = os.fspath(path)
        self.line = line
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {message}")


def _create(path: PathLike) -> IO[str]:
    """``path`` opened for writing UTF-8 text with ``\\n`` line ends (gzipped for ``.gz``)."""
    if os.fspath(path).endswith(".gz"):
        return gzip.open(path, "wt", encoding="utf-8")  # type: ignore[return-value]
    return open(path, "w", encoding="utf-8", newline="\n")


def _open_binary(path: PathLike) -> IO[bytes]:
    """``path`` opened for reading bytes (gunzipped for ``.gz``); a missing file or a folder is a TrecFormatError."""
    name = os.fspath(path)
    if os.path.isdir(name):
        raise TrecFormatError("is a folder, not a file", path)
    if not os.path.exists(name):
        raise TrecFormatError("no such file", path)
    try:
        return gzip.open(name, "rb") if name.endswith(".gz") else open(name, "rb")  # type: ignore[return-value]
    except OSError as err:
        raise TrecFormatError(f"cannot read the file: {err.strerror or err}", path) from None


def text_lines(path: PathLike) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of every line of a UTF-8 file (``.gz``: gunzipped; a leading BOM is dropped).

    Bytes that are not UTF-8 raise ``TrecFormatError`` naming the line; truncated or corrupt gzip data, the file.
    """
    number = 0
    with _open_binary(path) as handle:
        try:
            for number, raw in enumerate(handle, start=1):
                try:
                    text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as err:
                    raise TrecFormatError(f"not UTF-8 text (byte 0x{raw[err.start]:02x} at byte {err.start + 1} of "
                                          "the line)", path, number) from None  # fmt: skip
                yield number, text
        except (EOFError, OSError, zlib.error) as err:
            where = f"after line {number}" if number else "from its start"
            raise TrecFormatError(f"the gzip data is truncated or corrupt {where} ({err})", path) from None


def _lines(path: PathLike, width: int, layout: str, sep: str | None = None) -> Iterator[tuple[int, list[str]]]:
    """Yield (line number, fields) of the non-blank lines, checking the number of fields."""
    for number, line in text_lines(path):
        if not line.strip():
            continue
        fields = line.rstrip("\r\n").split(sep) if sep else line.split()
        if len(fields) != width:
            raise TrecFormatError(f"expected {width} fields ({layout}), found {len(fields)}: {line.strip()!r}",
                                  path, number)  # fmt: skip
        yield number, fields


def find_line(path: PathLike, qid: str, doc: str | None = None) -> int | None:
    """Number of the first line of a TREC run whose query (and document, if given) is ``qid`` (``doc``)."""
    for number, line in text_lines(path):
        fields = line.split()
        if len(fields) > 2 and fields[0] == qid and (doc is None or fields[2] == doc):
            return number
    return None


def _number(text: str, what: str, path: PathLike, line: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TrecFormatError(f"{what} is not a number: {text!r}", path, line) from None
    if math.isnan(value):
        raise TrecFormatError(f"{what} is NaN", path, line)
    return value


def _integer(text: str, what: str, path: PathLike, line: int) -> int:
    try:
        return int(text)
    except ValueError:
        value = _number(text, what, path, line)
        if not value.is_integer():
            raise TrecFormatError(f"{what} is not an integer: {text!r}", path, line) from None
        return int(value)


def _store(table: dict[str, dict], qid: str, doc: str, value: float | int, path: PathLike, line: int) -> None:
    judged = table.setdefault(qid, {})
    if doc in judged:
        raise TrecFormatError(f"document {doc!r} appears twice for query {qid!r}", path, line)
    judged[doc] = value


def read_run(path: PathLike) -> dict[str, dict[str, float]]:
    """Read a TREC run file into ``{query_id: {doc_id: score}}`` (queries in the order they first appear, each
    query's documents in file order).

    The file is parsed column-wise by pandas' C reader (:func:`_run_columns`) and the columns are checked in bulk;
    when a check fails (or a field is rare, such as ``nan``, ``inf`` or a rank written ``1.0``) the file is read
    again line by line, which gives the same result or the error naming ``file:line``."""
    columns = _run_columns(path)
    if columns is None:
        return _read_run_lines(path)
    codes, query_ids, docs, scores = columns
    order = np.argsort(codes, kind="stable")  # rows grouped by query, file order kept within a query
    bounds = np.searchsorted(codes[order], np.arange(len(query_ids) + 1)).tolist()
    first_row = order[bounds[:-1]]  # each query's first line
    docs_list, score_list = docs[order].tolist(), scores[order].tolist()
    run: dict[str, dict[str, float]] = {}
    for q in np.argsort(first_row, kind="stable").tolist():  # queries in the order they first appear
        lo, hi = bounds[q], bounds[q + 1]
        run[query_ids[q]] = dict(zip(docs_list[lo:hi], score_list[lo:hi], strict=True))
    if sum(map(len, run.values())) != len(docs_list):  # a (query, doc) pair repeated: name its line
        return _read_run_lines(path)
    return run


def _run_columns(path: PathLike) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray] | None:
    """(query code per line, query ids, doc ids, scores) of a TREC run file read column-wise, or None when a
    column fails its check: six whitespace-separated fields on every non-blank line, an integer rank, a finite
    decimal score (parsed exactly as ``float()`` does). A missing file or a folder is a TrecFormatError."""
    with _open_binary(path) as handle:
        try:
            frame = pd.read_csv(handle, sep=r"\s+", header=None, names=_RUN_COLUMNS, usecols=[0, 2, 3, 4, 5],
                                dtype=_RUN_DTYPES, na_filter=False, quoting=csv.QUOTE_NONE, encoding="utf-8-sig",
                                engine="c")  # fmt: skip
        except (ValueError, EOFError, OSError, zlib.error):  # pandas' parse errors are ValueErrors
            return None
    if "" in frame["tag"].cat.categories or not np.isfinite(frame["score"].to_numpy()).all():
        return None  # a line with fewer than six fields leaves its last ones empty
    query = frame["query"]
    return (query.cat.codes.to_numpy().astype(np.int64), query.cat.categories.tolist(), frame["doc"].to_numpy(),
            frame["score"].to_numpy())  # fmt: skip


def _read_run_lines(path: PathLike) -> dict[str, dict[str, float]]:
    """:func:`read_run` line by line: the same result, and an error naming ``file:line`` for a bad line."""
    run: dict[str, dict[str, float]] = {}
    for line, (qid, _, doc, rank, score, _tag) in _lines(path, 6, "query_id Q0 doc_id rank score tag"):
        _integer(rank, "rank", path, line)
        _store(run, qid, doc, _number(score, "score", path, line), path, line)
    return run


def read_qrels(path: PathLike) -> dict[str, dict[str, int]]:
    """Read a TREC qrels file into ``{query_id: {doc_id: grade}}``."""
    qrels: dict[str, dict[str, int]] = {}
    for line, (qid, _, doc, grade) in _lines(path, 4, "query_id iteration doc_id grade"):
        _store(qrels, qid, doc, _integer(grade, "grade", path, line), path, line)
    return qrels


def read_beir_qrels(path: PathLike) -> dict[str, dict[str, int]]:
    """Read a BEIR qrels TSV (``query-id<TAB>corpus-id<TAB>score``, header line first) into qrels."""
    qrels: dict[str, dict[str, int]] = {}
    first = True
    for line, fields in _lines(path, 3, "query-id, corpus-id, score", sep="\t"):
        qid, doc, grade = (field.strip() for field in fields)
        if first and (qid, doc, grade) == BEIR_HEADER:
            first = False
            continue
        first = False
        _store(qrels, qid, doc, _integer(grade, "score", path, line), path, line)
    return qrels


def _check_token(value: object, what: str, qid: object = None) -> str:
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        where = "" if qid is None else f"query {qid!r}: "
        raise RetrievalInputError(f"{where}{what} must be a non-empty string without whitespace, got {value!r}")
    return value


def _ordered(qid: str, ranking: Mapping[str, float] | Sequence[str]) -> list[tuple[str, float]]:
    """(doc, score) in trec_eval order; a ranked list gets scores n, n-1, ..., 1."""
    if isinstance(ranking, Mapping):
        pairs = []
        for doc, score in ranking.items():
            if isinstance(score, bool) or not isinstance(score, numbers.Real) or math.isnan(score):
                raise RetrievalInputError(f"query {qid!r}: score of {doc!r} must be a number, got {score!r}")
            pairs.append((float(score), doc))
        keys = as_trec_scores([score for score, _ in pairs]).tolist()  # trec_eval's 32-bit comparison
        ranked = sorted(((key, doc, score) for key, (score, doc) in zip(keys, pairs, strict=True)), reverse=True)
        return [(doc, score) for _, doc, score in ranked]
    if len(set(ranking)) != len(ranking):
        raise RetrievalInputError(f"query {qid!r}: the ranked list has duplicate doc ids")
    return [(doc, float(len(ranking) - i)) for i, doc in enumerate(ranking)]


def _judgments(qrels: Mapping[str, Mapping[str, int] | Sequence[str]]) -> Iterator[tuple[str, str, int]]:
    """(query, doc, grade) triples; a list of doc ids means grade 1."""
    for qid, judged in qrels.items():
        _check_token(qid, "query id")
        items = judged.items() if isinstance(judged, Mapping) else ((doc, 1) for doc in judged)
        for doc, grade in items:
            _check_token(doc, "doc id", qid)
            if isinstance(grade, bool) or not isinstance(grade, numbers.Real) or not float(grade).is_integer():
                raise RetrievalInputError(f"query {qid!r}: grade of {doc!r} must be an integer, got {grade!r}")
            yield qid, doc, int(grade)


def safe_token(text: str) -> str:
    """``text`` with every character outside ``A-Za-z0-9_.+-`` replaced by ``_``: usable as a TREC run tag and as
    a file name (retriever specs such as ``dense:/models/x`` become ``dense__models_x``)."""
    return _UNSAFE.sub("_", text)


def write_run(run: Mapping[str, Mapping[str, float] | Sequence[str]], path: PathLike, tag: str = "convrag",
              depth: int | None = None) -> None:
    """Write a run as a TREC run file, each query in trec_eval order with ranks 1, 2, ...

    Scores are written with ``repr`` so that reading the file back gives the same floats. ``depth`` keeps
    only the top documents of each query.
    """
    _check_token(tag, "tag")
    with _create(path) as handle:
        for qid, ranking in run.items():
            _check_token(qid, "query id")
            for rank, (doc, score) in enumerate(_ordered(qid, ranking)[:depth], start=1):
                handle.write(f"{qid} Q0 {_check_token(doc, 'doc id', qid)} {rank} {score!r} {tag}\n")


def write_qrels(qrels: Mapping[str, Mapping[str, int] | Sequence[str]], path: PathLike) -> None:
    """Write qrels as a TREC qrels file (``query_id 0 doc_id grade``); a list of doc ids means grade 1."""
    with _create(path) as handle:
        for qid, doc, grade in _judgments(qrels):
            handle.write(f"{qid} 0 {doc} {grade}\n")


def write_beir_qrels(qrels: Mapping[str, Mapping[str, int] | Sequence[str]], path: PathLike) -> None:
    """Write qrels as a BEIR TSV with its ``query-id corpus-id score`` header."""
    with _create(path) as handle:
        handle.write("\t".join(BEIR_HEADER) + "\n")
        for qid, doc, grade in _judgments(qrels):
            handle.write(f"{qid}\t{doc}\t{grade}\n")
