"""Judging raw turns inside the metric: MTR-Eval's Q-E, A-E and Qual. on (query, gold documents, answer) lists.

The benchmark-wide audit (every dimension, hard negatives, RECOR's judges, missed-relevant estimates) is
``convrag audit``; this path serves ``evaluate.load("metrics/audit").compute(queries=..., judge=...)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from convrag.judging.items import AuditDoc, AuditItem
from convrag.judging.mtr_eval import judge_item
from convrag.judging.recor import DEPENDENCY, DEPENDENCY_LABELS, PATTERN, PATTERN_LABELS
from convrag.judging.verdict import Verdict
from convrag.llm import LLM, get_llm, run_batch
from convrag.metrics.audit.aggregate import judge_names

#: the label dimensions and their label sets (RECOR Tables 29-30)
LABEL_SETS: dict[str, tuple[str, ...]] = {DEPENDENCY: DEPENDENCY_LABELS, PATTERN: PATTERN_LABELS}
#: the dimensions that need nothing but the turn itself (completeness needs hard negatives: ``convrag audit``)
TEXT_DIMENSIONS = ("query_evidence", "answer_faithfulness", "answer_quality")


def judges_of(judge: Any) -> list[LLM]:
    """An LLM, a spec string or a list of them -> LLMs (an ensemble)."""
    items = judge if isinstance(judge, (list, tuple)) else [judge]
    names = iter(judge_names([j for j in items if not isinstance(j, LLM)]))  # options after ";" tell them apart
    llms = [j if isinstance(j, LLM) else get_llm(j) for j in items]
    for j, llm in zip(items, llms, strict=True):
        if not isinstance(j, LLM):
            llm.spec = next(names)
    specs = [j.spec for j in llms]
    if len(set(specs)) != len(specs):
        raise ValueError(f"two judges share a name ({', '.join(specs)}): give each its own spec (LLM(..., spec=...))")
    return llms


def judge_texts(queries: Sequence[str], documents: Sequence[Sequence[str]], *, judge: Any,
                answers: Sequence[str | None] | None = None,
                histories: Sequence[Sequence[Mapping[str, str]]] | None = None,
                dimensions: Sequence[str] | None = None, concurrency: int = 4) -> list[Verdict]:
    """Every verdict of every judge on every turn (item ids ``"0"``, ``"1"``, ...; documents ids ``"<i>:<j>"``)."""
    n = len(queries)
    for name, column in (("documents", documents), ("answers", answers), ("histories", histories)):
        if column is not None and len(column) != n:
            raise ValueError(f"{name} has {len(column)} entries for {n} queries")
    chosen = list(dimensions or TEXT_DIMENSIONS)
    unknown = [d for d in chosen if d not in TEXT_DIMENSIONS]
    if unknown:
        raise ValueError(f"judge_dimensions {unknown}: this path judges {list(TEXT_DIMENSIONS)}; hard-negative "
                         "completeness and RECOR's judges run with `convrag audit FOLDER`")
    items = [AuditItem(item_id=str(i), domain="", conversation_id=str(i), turn=len(histories[i]) // 2 + 1
                       if histories is not None else 1, query=queries[i],
                       history=tuple((m["role"], m["content"]) for m in (histories[i] if histories else [])),
                       gold=tuple(AuditDoc(f"{i}:{j}", "", text) for j, text in enumerate(documents[i])),
                       answer=answers[i] if answers is not None else None) for i in range(n)]
    work = [(llm, dim, item) for llm in judges_of(judge) for dim in chosen for item in items]
    done = run_batch(work, lambda w: judge_item(w[0], w[1], w[2], None), concurrency)  # type: ignore[arg-type]
    done.raise_on_failure()
    return [v for verdicts in done.results if verdicts for v in verdicts]
