"""Writing and reading pseudo-qrels: the built ``qrels`` layout (Parquet or JSONL) and TREC qrels.

* qrels layout: the columns of :data:`convrag.core.schema.QRELS`, ``query-id`` (string), ``corpus-id`` (string),
  ``score`` (int32, the judge's grade 0-3), then judge metadata ``judge`` and ``rationale`` (``metadata=False``
  leaves them out). One row per judged pair, grade 0 rows included; failed judgments are not written (they are
  in the summary). Parquet is written through ``datasets`` so the file carries the Features, as a built
  folder's ``qrels/<split>-00000-of-00001.parquet`` does; ``.jsonl`` writes the same rows as JSON Lines;
* TREC qrels: ``query_id 0 chunk_id grade`` (:func:`convrag.metrics.retrieval.trec.write_qrels`); binary
  measures with ``trec_eval -l 2``;
* :func:`write_pseudo_qrels` writes a folder: ``pseudo-qrels/<split>-00000-of-00001.parquet``,
  ``pseudo-qrels.trec`` and ``pseudo-qrels.json`` (:meth:`PseudoQrels.summary` with the failed pairs).

Every file is written to a temporary name in its folder, then renamed: a killed run never leaves a partial
file under the final name.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from convrag.core.errors import DataError
from convrag.core.jsonl import json_safe, read_jsonl
from convrag.core.schema import QRELS, with_extra
from convrag.metrics.retrieval.trec import write_qrels
from convrag.seara.judge import PseudoQrels

QRELS_CONFIG = "pseudo-qrels"
META_FEATURES = {"judge": "string", "rationale": "string"}


def _atomic(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Run ``write(tmp)`` on a temporary path next to ``path`` (ending in the same suffix, so ``.gz`` still
    compresses), then rename it to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp" + path.suffix, dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def qrels_rows(pseudo: PseudoQrels | Mapping[str, Mapping[str, int]], *, metadata: bool = True) -> list[dict]:
    """One row per judged pair in the qrels layout (metadata columns for :class:`PseudoQrels` when asked)."""
    if isinstance(pseudo, PseudoQrels):
        name = str(pseudo.judge.get("judge", ""))
        rows = [{"query-id": j.query_id, "corpus-id": j.chunk_id, "score": j.grade,
                 **({"judge": name, "rationale": j.rationale} if metadata else {})}
                for j in pseudo.judgments if j.grade is not None]  # fmt: skip
        return rows
    return [{"query-id": q, "corpus-id": c, "score": int(g)} for q, judged in pseudo.items() for c, g in judged.items()]


def write_qrels_table(pseudo: PseudoQrels | Mapping[str, Mapping[str, int]], path: str | os.PathLike, *,
                      metadata: bool = True) -> Path:
    """Write the qrels layout to ``path``: Parquet (``.parquet``) or JSON Lines (``.jsonl``)."""
    import datasets

    rows = qrels_rows(pseudo, metadata=metadata)
    suffix = Path(path).suffix
    if suffix == ".jsonl":
        def write_jsonl(tmp: str) -> None:
            with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
                for row in rows:
                    handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        return _atomic(path, write_jsonl)
    if suffix != ".parquet":
        raise ValueError(f"{path}: write .parquet or .jsonl")
    extra = {k: datasets.Value(v) for k, v in META_FEATURES.items()} if rows and len(rows[0]) > 3 else {}
    features = with_extra(QRELS, extra)
    columns = {name: [r[name] for r in rows] for name in features}
    return _atomic(path, lambda tmp: datasets.Dataset.from_dict(columns, features=features).to_parquet(tmp))


def read_qrels_table(path: str | os.PathLike) -> dict[str, dict[str, int]]:
    """``{query-id: {corpus-id: score}}`` from a qrels-layout Parquet or JSONL file (other columns ignored)."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows: list[dict[str, Any]] = pq.read_table(path, columns=list(QRELS)).to_pylist()
        numbered = list(enumerate(rows, start=1))
    else:
        numbered = list(read_jsonl(str(path)))
    out: dict[str, dict[str, int]] = {}
    for line, row in numbered:
        q, c, g = row.get("query-id"), row.get("corpus-id"), row.get("score")
        if not isinstance(q, str) or not isinstance(c, str) or isinstance(g, bool) or not isinstance(g, int):
            raise DataError(f"expected query-id, corpus-id (strings) and an integer score, got {row!r}", str(path),
                            line)
        if c in out.setdefault(q, {}):
            raise DataError(f"pair ({q!r}, {c!r}) appears twice", str(path), line)
        out[q][c] = g
    return out


def write_trec_qrels(pseudo: PseudoQrels | Mapping[str, Mapping[str, int]], path: str | os.PathLike) -> Path:
    """Write the judged pairs as a TREC qrels file (grades 0-3); returns the path."""
    qrels = pseudo.qrels if isinstance(pseudo, PseudoQrels) else pseudo
    return _atomic(path, lambda tmp: write_qrels(qrels, tmp))


def write_pseudo_qrels(pseudo: PseudoQrels, folder: str | os.PathLike, *, split: str = "test") -> dict[str, Path]:
    """Write the Parquet qrels config, the TREC file and the JSON summary (module docstring) under ``folder``."""
    folder = Path(folder)
    summary = {**pseudo.summary(), "failed": [{"query-id": j.query_id, "corpus-id": j.chunk_id, "error": j.error}
                                             for j in pseudo.failed]}  # fmt: skip
    return {
        "qrels": write_qrels_table(pseudo, folder / QRELS_CONFIG / f"{split}-00000-of-00001.parquet"),
        "trec": write_trec_qrels(pseudo, folder / f"{QRELS_CONFIG}.trec"),
        "summary": _atomic(folder / f"{QRELS_CONFIG}.json", lambda tmp: Path(tmp).write_text(
            json.dumps(json_safe(summary), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")),
    }
