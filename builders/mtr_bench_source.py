"""Source handling of the MTR-Bench builder: where the files are, streaming readers, conversation parsing.

Sources (public Hub dataset repos, fetched with ``huggingface_hub.snapshot_download``, Parquet files only):

* ``12turn`` (current release): ``OkayestProgrammer/mtr-qwen35-fp8-12turn``, splits ``test`` (the benchmark) and
  ``train``; one row per turn with ``turn`` (1-based) and ``switch_turn`` (K, or -1: no hard switch).
* ``8turn`` (the paper's legacy release): ``OkayestProgrammer/MTR-BENCH`` (its Hub split ``train`` is the benchmark,
  our ``test``) and ``OkayestProgrammer/MTR-train`` (our ``train``); no ``turn`` / ``switch_turn`` columns: a
  conversation is 8 consecutive rows, turn = len(messages) // 2, hard switch after turn 4.
* corpus: ``CORPUS_REPO``, ``OkayestProgrammer/MTR-DOCUMENT`` (1,041,047 passages; row index = ``document_idx``),
  as the authors' README (rangehow/mtr-suite) names it.

A local folder holds ``test*``, ``train*`` and ``corpus*`` files (``.parquet`` / ``.jsonl``) directly, under ``data/``
or in snapshot sub-folders named after the repos (``MTR-BENCH/``, ``MTR-train/``, ``MTR-DOCUMENT/``...). Sources
``{name: path}`` map ``test`` / ``train`` / ``corpus`` to a file, a folder or an ``hf://datasets/<owner>/<repo>`` URL.
Row numbers in errors are 1-based records (lines for JSONL).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from huggingface_hub import snapshot_download

from convrag.builders.base import BuildReport
from convrag.core.errors import DataError
from convrag.core.jsonl import iter_jsonl, text_lines, typed_field

CORPUS_REPO = "OkayestProgrammer/MTR-DOCUMENT"  # named in the authors' README (rangehow/mtr-suite)
RELEASES: dict[str, dict[str, tuple[str, str]]] = {
    "12turn": {"test": ("OkayestProgrammer/mtr-qwen35-fp8-12turn", "test"),
               "train": ("OkayestProgrammer/mtr-qwen35-fp8-12turn", "train"), "corpus": (CORPUS_REPO, "train")},
    "8turn": {"test": ("OkayestProgrammer/MTR-BENCH", "train"), "train": ("OkayestProgrammer/MTR-train", "train"),
              "corpus": (CORPUS_REPO, "train")},
}  # fmt: skip
NAMES = ("test", "train", "corpus")
HF = "hf://datasets/"
EXTENSIONS = (".parquet", ".jsonl")
LEGACY_TURNS, LEGACY_SWITCH = 8, 4
COLUMNS = ["messages", "ctxs", "ground_truth_document_idx", "ground_truth_ctx", "cluster_idx", "turn", "switch_turn",
           "conversation_id"]  # fmt: skip
DOC_TYPES = {"document_idx": (int,), "edu_quality": (float, int), "id": (str,), "naive_quality": (int,),
             "text": (str,), "title": (str,), "url": (str,)}  # fmt: skip
FAILED_ANSWER = "[ERROR: generation failed]"
EMPTY_DOCUMENT = "documents with empty text (kept)"

#: A source entry: ("files", paths) for local files, ("hub", repo, file prefixes) for a Hub snapshot to fetch.
Spec = tuple


def _data_files(folder: str, prefix: str = "", deep: bool = False) -> list[str]:
    """Files ``prefix*.parquet|jsonl`` directly in ``folder``, else in ``folder/data``, else (``deep``, for Hub
    snapshots) anywhere below it; sorted, which is shard order."""
    for d in (folder, os.path.join(folder, "data")):
        if os.path.isdir(d):
            found = sorted(os.path.join(d, f) for f in os.listdir(d)
                           if f.startswith(prefix) and f.endswith(EXTENSIONS) and os.path.isfile(os.path.join(d, f)))
            if found:
                return found
    if not deep:
        return []
    return sorted(os.path.join(root, f) for root, _, names in os.walk(folder) for f in names
                  if f.startswith(prefix) and f.endswith(EXTENSIONS))  # fmt: skip


def _split_files(folder: str, prefixes: tuple[str, ...], deep: bool = False) -> list[str]:
    """The files of the first of ``prefixes`` (split names; "" = any data file) that ``folder`` holds."""
    for prefix in prefixes:
        found = _data_files(folder, prefix, deep)
        if found:
            return found
    return []


def _prefixes(name: str, split: str | None = None) -> tuple[str, ...]:
    """File prefixes for a source name: the release's ``split``, or (user-given) the name, then ``train`` for
    single-split legacy repos; a corpus also takes any data file."""
    first = (split,) if split else (name, "train")
    return (*dict.fromkeys(first), "") if name == "corpus" else tuple(dict.fromkeys(first))


def _hub(url: str) -> str | None:
    return url[len(HF):].strip("/") if url.startswith(HF) else None


def specs(source: Any, release: str) -> dict[str, Spec]:
    """Source name -> where its files are (no download yet); names the source lacks are left out."""
    if release not in RELEASES:
        raise DataError(f"unknown MTR-Bench release {release!r}; expected one of {sorted(RELEASES)}")
    if source is None:
        return {name: ("hub", repo, _prefixes(name, split)) for name, (repo, split) in RELEASES[release].items()}
    if isinstance(source, dict):
        unknown = sorted(set(source) - set(NAMES))
        if unknown:
            raise DataError(f"unknown source names {unknown}; expected some of {list(NAMES)}")
        return {name: _entry(str(path), name) for name, path in source.items() if path is not None}
    text = str(source)
    if _hub(text):
        return {name: ("hub", _hub(text), (name,)) for name in ("test", "train")}
    root = os.path.expanduser(text)
    if not os.path.isdir(root):
        raise DataError("MTR-Bench source folder does not exist (give a folder, or test=/train=/corpus= paths)", root)
    out: dict[str, Spec] = {}
    for name in NAMES:
        repo, split = RELEASES[release][name]
        sub = os.path.join(root, repo.split("/")[1])
        files = _data_files(root, name) or (_split_files(sub, _prefixes(name, split)) if os.path.isdir(sub) else [])
        if files:
            out[name] = ("files", tuple(files))
    return out


def _entry(path: str, name: str) -> Spec:
    if _hub(path):
        return ("hub", _hub(path), _prefixes(name))
    local = os.path.expanduser(path)
    if os.path.isfile(local):
        return ("files", (local,))
    if os.path.isdir(local):
        files = _split_files(local, (*_prefixes(name), ""))
        if not files:
            raise DataError(f"no .parquet / .jsonl files for {name!r} in this folder", local)
        return ("files", tuple(files))
    raise DataError(f"source file or folder does not exist (for {name!r})", local)


def fetch(spec: Spec | None, name: str, local_only: bool = False) -> list[str]:
    """The local files of one source entry (downloads a Hub snapshot; [] when absent)."""
    if spec is None:
        return []
    if spec[0] == "files":
        files = list(spec[1])
    else:
        _, repo, prefixes = spec
        try:
            root = snapshot_download(repo, repo_type="dataset", allow_patterns=["*.parquet"],
                                     local_files_only=local_only)  # fmt: skip
        except Exception as err:  # network, auth, missing repo: one clear line
            raise DataError(f"cannot fetch Hub dataset {repo!r} ({type(err).__name__}: {err})", HF + repo) from err
        files = _split_files(root, prefixes, deep=True)
    formats = {os.path.splitext(f)[1] for f in files}
    if len(formats) > 1:
        raise DataError(f"{name!r} mixes Parquet and JSONL files; keep one format", os.path.dirname(files[0]))
    for f in files:
        if not f.endswith(EXTENSIONS):
            raise DataError("expected a .parquet or .jsonl file", f)
    return files


def open_parquet(path: str) -> pq.ParquetFile:
    """Open a Parquet file for streaming: ``pre_buffer=False``, else pyarrow buffers the whole file."""
    try:
        return pq.ParquetFile(path, pre_buffer=False)
    except (pa.ArrowException, OSError) as err:
        raise DataError(f"not a readable Parquet file ({' '.join(str(err).split())})", path) from err


def parquet_batches(
    path: str, columns: list[str], batch_size: int, pf: pq.ParquetFile | None = None
) -> Iterator[pa.RecordBatch]:
    """Record batches of ``columns`` of a Parquet file (``pf``: the file already opened); corrupt data is a
    DataError naming the file."""
    pf = pf if pf is not None else open_parquet(path)
    try:
        yield from pf.iter_batches(batch_size=batch_size, columns=columns)
    except (pa.ArrowException, OSError) as err:
        raise DataError(f"corrupt Parquet data ({type(err).__name__}: {' '.join(str(err).split())})", path) from err


def iter_records(files: Iterable[str], columns: list[str], batch_size: int = 256) -> Iterator[tuple[str, int, dict]]:
    """(file, 1-based row or line, record) of every row, streamed: Parquet by batches (only ``columns`` that
    exist), JSONL line by line."""
    for path in files:
        if path.endswith(".jsonl"):
            for line, obj in iter_jsonl(text_lines(path), path):
                yield path, line, obj
            continue
        pf = open_parquet(path)
        names = pf.schema_arrow.names
        row = 0
        for batch in parquet_batches(path, [c for c in columns if c in names], batch_size, pf):
            for obj in batch.to_pylist():
                row += 1
                yield path, row, obj


def _doc(obj: Any, path: str, row: int, where: str) -> dict:
    for name, types in DOC_TYPES.items():
        typed_field(obj, name, types, path, row, where)
    if obj["document_idx"] < 0:
        raise DataError(f"negative {where}document_idx {obj['document_idx']}", path, row)
    return obj


@dataclass
class Turn:
    """One parsed row: the turn's query, answer, history, gold and candidate pool, with its location."""

    turn: int
    query: str
    answer: str
    history: list[dict[str, str]]
    messages: list[dict[str, str]]
    gold: int
    cluster_idx: int
    candidates: list[int]
    switch_turn: int
    conversation_id: str | None
    path: str
    row: int


@dataclass
class Conversation:
    conversation_id: str
    switch_turn: int
    turns: list[Turn]


def switch_phase(turn: int, k: int) -> str:
    """``no switch`` (k = -1), ``before switch`` (turn <= k), ``first turn after switch`` (k+1), ``after switch``."""
    if k == -1:
        return "no switch"
    return "before switch" if turn <= k else "first turn after switch" if turn == k + 1 else "after switch"


@dataclass
class Parser:
    """Streams one split's rows into validated conversations; counted quirks go to ``report``.

    ``corpus_rows``: the corpus size, to count gold ids beyond it; ``keep_docs``: collect every ``ctxs``
    document (``docs``: document_idx -> (title, text, url)) for the cluster-corpus view.
    """

    split: str
    release: str
    report: BuildReport
    corpus_rows: int | None = None
    keep_docs: bool = False
    docs: dict[int, tuple[str, str, str]] = field(default_factory=dict)
    _seen_docs: dict[int, tuple[int, str, int]] = field(default_factory=dict)
    _seen_ids: dict[str, tuple[str, int]] = field(default_factory=dict)
    _explicit: bool | None = None

    @property
    def legacy(self) -> bool:
        return self.release == "8turn"

    def conversations(self, files: list[str]) -> Iterator[Conversation]:
        """Validated conversations in file order (``<split>-<n:05d>`` ids unless a conversation_id column)."""
        current: list[Turn] = []
        n = turns = 0
        for path, row, obj in iter_records(files, COLUMNS):
            t = self._row(obj, path, row)
            if current and self._starts_new(current, t):
                yield self._close(current, n)
                n, current = n + 1, []
            if not current:
                self._open(t)
            elif self.legacy and t.turn != len(current) + 1:
                raise DataError(f"row {len(current) + 1} of an 8-row conversation block holds turn {t.turn} "
                                f"({len(t.messages)} messages)", path, row)  # fmt: skip
            elif t.conversation_id != current[0].conversation_id:
                raise DataError(f"conversation_id changes inside an 8-row block ({current[0].conversation_id!r} "
                                f"-> {t.conversation_id!r})", path, row)  # fmt: skip
            current.append(t)
            turns += 1
        if current:
            yield self._close(current, n)
            n += 1
        if not turns:
            where = files[0] if len(files) == 1 else os.path.dirname(files[0])
            raise DataError(f"the {self.split} split holds no rows", where)
        self.report.counts[f"conversations: {self.split}"] = n
        self.report.counts[f"turns: {self.split}"] = turns

    def _starts_new(self, current: list[Turn], t: Turn) -> bool:
        last = current[-1]
        if self.legacy:
            return len(current) == LEGACY_TURNS
        if t.turn == 1:
            return True
        if t.conversation_id != last.conversation_id:
            raise DataError(f"conversation {t.conversation_id!r} starts at turn {t.turn}, not 1", t.path, t.row)
        if t.turn != last.turn + 1:
            raise DataError(f"turn gap: turn {t.turn} follows turn {last.turn} (turns must run 1..T)", t.path, t.row)
        return False

    def _open(self, t: Turn) -> None:
        if t.turn != 1:
            raise DataError(f"a conversation starts at turn {t.turn}, not 1", t.path, t.row)
        if t.conversation_id is not None:
            if t.conversation_id in self._seen_ids:
                path, row = self._seen_ids[t.conversation_id]
                raise DataError(f"duplicate conversation_id {t.conversation_id!r} (first in {path} row {row})",
                                t.path, t.row)  # fmt: skip
            self._seen_ids[t.conversation_id] = (t.path, t.row)

    def _row(self, obj: dict, path: str, row: int) -> Turn:
        messages = typed_field(obj, "messages", (list,), path, row)
        for i, m in enumerate(messages):
            role = typed_field(m, "role", (str,), path, row, f"messages[{i}].")
            typed_field(m, "content", (str,), path, row, f"messages[{i}].")
            if role != ("user" if i % 2 == 0 else "assistant"):
                raise DataError(f"messages must alternate user/assistant from a user message: message {i} has "
                                f"role {role!r}", path, row)  # fmt: skip
        if len(messages) < 2 or len(messages) % 2:
            raise DataError(f"messages must hold 2*turn messages ending with the answer, got {len(messages)}",
                            path, row)  # fmt: skip
        if not self.legacy and obj.get("turn") is None:
            raise DataError("no 'turn' field: a legacy 8-turn file? build it with release=8turn", path, row)
        turn = len(messages) // 2 if self.legacy else typed_field(obj, "turn", (int,), path, row)
        if not self.legacy and len(messages) != 2 * turn:
            raise DataError(f"turn {turn} needs {2 * turn} messages, got {len(messages)}", path, row)
        query, answer = messages[-2]["content"], messages[-1]["content"]
        if not query.strip():
            raise DataError("empty query text (messages[-2])", path, row)
        ctxs = [_doc(c, path, row, f"ctxs[{i}].") for i, c in enumerate(typed_field(obj, "ctxs", (list,), path, row))]
        gold = typed_field(obj, "ground_truth_document_idx", (int,), path, row)
        gctx = _doc(typed_field(obj, "ground_truth_ctx", (dict,), path, row), path, row, "ground_truth_ctx.")
        if gctx["document_idx"] != gold:
            raise DataError(f"ground_truth_ctx.document_idx {gctx['document_idx']} != ground_truth_document_idx "
                            f"{gold}", path, row)  # fmt: skip
        candidates = list(dict.fromkeys(c["document_idx"] for c in ctxs))
        if len(candidates) != len(ctxs):
            self.report.add("turns whose ctxs list a document twice (kept once)", f"{path}:{row}")
        if gold not in candidates:
            raise DataError(f"ground_truth_document_idx {gold} is not among the turn's ctxs", path, row)
        for doc in (*ctxs, gctx):
            self._check_doc(doc, path, row)
        return Turn(turn=turn, query=query, answer=answer, history=messages[:-2], messages=messages, gold=gold,
                    cluster_idx=typed_field(obj, "cluster_idx", (int,), path, row), candidates=candidates,
                    switch_turn=self._switch(obj, path, row), conversation_id=self._cid(obj, path, row),
                    path=path, row=row)  # fmt: skip

    def _switch(self, obj: dict, path: str, row: int) -> int:
        if self.legacy:
            return LEGACY_SWITCH
        if obj.get("switch_turn") is None:
            self.report.add("turns without switch_turn (taken as -1: no hard switch)", f"{path}:{row}")
            return -1
        return typed_field(obj, "switch_turn", (int,), path, row)

    def _cid(self, obj: dict, path: str, row: int) -> str | None:
        given = obj.get("conversation_id") is not None
        if self._explicit is None:
            self._explicit = given
        if given != self._explicit:
            raise DataError("conversation_id is given for some rows only", path, row)
        return str(typed_field(obj, "conversation_id", (str, int), path, row, empty=False)) if given else None

    def _check_doc(self, doc: dict, path: str, row: int) -> None:
        idx, key = doc["document_idx"], (doc["title"], doc["text"], doc["url"])
        seen = self._seen_docs.get(idx)
        if seen is None:
            self._seen_docs[idx] = (hash(key), path, row)
            if not doc["text"].strip():
                self.report.add(EMPTY_DOCUMENT, str(idx))
            if self.keep_docs:
                self.docs[idx] = key
        elif seen[0] != hash(key):
            raise DataError(f"document_idx {idx} has a different title/text/url than in {seen[1]} row {seen[2]}",
                            path, row)  # fmt: skip

    def _close(self, turns: list[Turn], n: int) -> Conversation:
        first = turns[0]
        cid = first.conversation_id if first.conversation_id is not None else f"{self.split}-{n:05d}"
        if self.legacy and len(turns) != LEGACY_TURNS:
            last = turns[-1]
            raise DataError(f"incomplete conversation: {len(turns)} rows, legacy conversations have 8", last.path,
                            last.row)  # fmt: skip
        k = first.switch_turn
        for t in turns:
            if t.switch_turn != k:
                raise DataError(f"switch_turn changes within conversation {cid!r} ({k} -> {t.switch_turn})",
                                t.path, t.row)  # fmt: skip
        if k != -1 and not 1 <= k < len(turns):
            raise DataError(f"switch_turn {k} out of range for a {len(turns)}-turn conversation", first.path,
                            first.row)  # fmt: skip
        self.report.add(f"{self.split}: conversations of {len(turns)} turns", None)
        if k != -1:
            self.report.add(f"{self.split}: conversations with a hard topic switch", cid)
        for prev, t in zip(turns, turns[1:], strict=False):
            qid = f"{cid}:{t.turn}"
            if t.history != prev.messages:
                self.report.add("turns whose history differs from the previous turn's messages (kept as given)", qid)
            if t.turn == k + 1 and t.cluster_idx == prev.cluster_idx:
                self.report.add("first turns after a switch with the same cluster_idx as the turn before", qid)
            elif t.turn != k + 1 and t.cluster_idx != prev.cluster_idx:
                self.report.add("turns whose cluster_idx changes within a conversation outside the switch", qid)
        for t in turns:
            qid = f"{cid}:{t.turn}"
            if t.answer.strip() == FAILED_ANSWER:
                self.report.add(f"answers that are the generator's failure marker {FAILED_ANSWER}", qid)
            elif not t.answer.strip():
                self.report.add("empty answers", qid)
            if self.corpus_rows is not None and t.gold >= self.corpus_rows:
                self.report.add("gold document_idx beyond the corpus's last row (qrels kept)", qid, limit=100)
        return Conversation(conversation_id=cid, switch_turn=k, turns=turns)

