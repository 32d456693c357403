"""SEARA validation across chunkings (issue 30 item 3): convrag.seara.validation_chunkings and the ``--chunkings``
section of benchmarks/validate_seara.py, on real HotpotQA and MTRAG data, BM25 only (no dense model)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from convrag.seara.chunking import sentence_spans
from convrag.seara.validation import ValidationError, load_mtrag
from convrag.seara.validation_chunkings import (
    CHUNKINGS,
    EvidenceSet,
    best_sentence,
    flip,
    load_hotpotqa_evidence,
    load_mtrag_evidence,
    make_runs,
    noisy_evidence,
    oracle_qrels,
    validate_chunkings,
)
from tests.conftest import DATA, REPO

K = 10
SCRIPT = REPO / "benchmarks" / "validate_seara.py"


@pytest.fixture(scope="module")
def hotpot15() -> EvidenceSet:
    return load_hotpotqa_evidence(DATA / "hotpotqa", max_queries=15)


@pytest.fixture(scope="module")
def result(hotpot15: EvidenceSet) -> dict[str, Any]:
    return validate_chunkings(hotpot15, K, dense=False, seeds=2)


def test_hotpotqa_evidence_set_is_the_supporting_sentences(hotpot15: EvidenceSet) -> None:
    raw = json.loads((DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json").read_text(encoding="utf-8"))[:15]
    assert list(hotpot15.queries) == [r["_id"] for r in raw]  # dev questions first
    first = raw[0]
    context = dict((t, s) for t, s in first["context"])
    assert hotpot15.evidence[first["_id"]] == [context[t][i].strip() for t, i in first["supporting_facts"]]
    titles = [t for r in raw for t, _ in r["context"]]
    assert [d[1] for d in hotpot15.docs] == list(dict.fromkeys(titles))
    assert hotpot15.docs[0][2] == "".join(context[hotpot15.docs[0][1]])
    assert hotpot15.skipped == {"supporting facts naming no sentence": 0}


def test_truth_recall_prefers_paragraphs_over_single_sentences(result: dict[str, Any]) -> None:
    table = result["configurations"]
    assert sorted(table) == sorted(f"{c}/bm25" for c in CHUNKINGS)
    assert table["paragraphs/bm25"]["truth_recall"] > table["sent1/bm25"]["truth_recall"]
    assert table["paragraphs/bm25"]["mean_chunk_chars"] > table["sent1/bm25"]["mean_chunk_chars"]
    assert result["located"]["unfound_spans"] == 0 and result["queries"] == 15


def test_oracle_fact_level_chooses_paragraphs_and_its_recall_is_the_truth(result: dict[str, Any]) -> None:
    fact = next(r for r in result["rows"] if (r["judge"], r["measure"]) == ("oracle", "fact"))
    table = result["configurations"]
    # on 15 questions sent3 ties paragraphs on truth (33 of 39 spans each) and edges it on fact PR-AUC: still top-1
    assert table["sent3/bm25"]["truth_recall"] == table["paragraphs/bm25"]["truth_recall"] == 33 / 39
    assert fact["chosen"] == ["sent3/bm25"] and fact["top1_share"] == 1.0 and fact["regret_max"] == 0.0
    for name, row in table.items():
        assert row["fact_recall"] == row["truth_recall"], name  # the facts are the evidence: same count
    judges = [(r["judge"], r["measure"]) for r in result["rows"]]
    assert judges == [(j, m) for j in ("oracle", "noisy-0.05", "noisy-0.1", "noisy-0.2") for m in ("chunk", "fact")]
    assert [len(r["chosen"]) for r in result["rows"]] == [1, 1] + [2] * 6


def test_oracle_fact_level_puts_paragraphs_first_on_the_30_dev_questions() -> None:
    evset = load_hotpotqa_evidence(DATA / "hotpotqa", max_queries=30)
    got = validate_chunkings(evset, K, dense=False, seeds=1, rates=())
    truth = {n: r["truth_recall"] for n, r in got["configurations"].items()}
    assert max(truth, key=truth.__getitem__) == "paragraphs/bm25" and truth["paragraphs/bm25"] == 63 / 75
    chunk, fact = got["rows"]
    assert fact["chosen"] == ["paragraphs/bm25"] and fact["tau_b_min"] == 1.0
    assert chunk["chosen"] == ["sent3/bm25"] and chunk["regret_max"] > 0  # the unfair chunk-level choice


def test_noisy_judges_are_deterministic_per_seed(hotpot15: EvidenceSet) -> None:
    made = make_runs(hotpot15, K, dense=False)
    qrels = oracle_qrels(hotpot15, made.runs, made.chunks, K)
    pooled = {q: list(row) for q, row in qrels.items()}
    doc_of = {c: x.doc_id for c, x in made.chunks.items()}
    assert flip(qrels, 0.2, 3) == flip(qrels, 0.2, 3) != flip(qrels, 0.2, 4)
    assert flip(qrels, 0.0, 3) == qrels and flip(qrels, 0.2, 3) != qrels
    a, b = (noisy_evidence(hotpot15, pooled, doc_of, 0.2, 1) for _ in range(2))
    assert a == b != noisy_evidence(hotpot15, pooled, doc_of, 0.2, 2)
    assert noisy_evidence(hotpot15, pooled, doc_of, 0.0, 1) == hotpot15.evidence
    texts = {d: t for d, _, t in hotpot15.docs}
    added = [s for q, spans in a.items() for s in spans if s not in hotpot15.evidence[q]]
    assert added and all(any(s in t for t in texts.values()) for s in added)  # verbatim sentences of documents


def test_best_sentence_rule() -> None:
    text = "Paris is big. The capital of France is Paris. Lyon is not."
    assert best_sentence(text, "Paris is the capital of France.") == "The capital of France is Paris."
    assert best_sentence(text, "big Lyon") == "Paris is big."  # one shared token each: the earlier wins
    assert best_sentence(text, "nothing shared here") is None


def test_mtrag_derived_spans_are_verbatim_passage_sentences() -> None:
    evset = load_mtrag_evidence(DATA / "mtrag", max_queries=5)
    qrels = load_mtrag(DATA / "mtrag").head(5).qrels
    texts = {d: t for d, _, t in evset.docs}
    assert len(evset.docs) == 2021 and len(evset.queries) == 5
    for qid, spans in evset.evidence.items():
        sentences = {texts[d][s:e] for d in qrels[qid] for s, e in sentence_spans(texts[d])}
        assert spans and all(span in sentences for span in spans), qid
    assert evset.skipped["queries without evidence (dropped)"] == 0


def _digest(folder: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())).hexdigest()


def test_script_chunkings_only(tmp_path: Path) -> None:
    out, before = tmp_path / "v.json", _digest(DATA / "hotpotqa")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--chunkings", "--dataset", "hotpotqa", "--no-dense",
                           "--max-queries", "6", "--seeds", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "== hotpotqa across chunkings: 6 queries" in proc.stdout and "facts checks" not in proc.stdout
    rows = [line.split() for line in proc.stdout.splitlines()]
    assert rows[5][:3] == ["paragraphs/bm25", "0.8750", "0.1046"]  # 7 of 8 evidence spans; sorted by truth
    assert [r[:2] for r in rows if r and r[0].startswith(("oracle", "noisy"))][-1] == ["noisy-0.2", "fact"]
    data = json.loads(out.read_text())
    assert set(data) == {"hotpotqa"} and set(data["hotpotqa"]) == {"chunkings"}
    assert len(data["hotpotqa"]["chunkings"]["rows"]) == 8 and _digest(DATA / "hotpotqa") == before


def test_bad_data_folders(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=f"no HotpotQA \\*dev\\*.json or \\*train\\*.json file in {tmp_path}"):
        load_hotpotqa_evidence(tmp_path)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--chunkings", "--dataset", "mtrag", "--data", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 1 and proc.stdout == ""
    errors = [line for line in proc.stderr.splitlines() if line.startswith("validate_seara:")]
    assert errors == [f"validate_seara: mtrag: MTRAG folder not found: {tmp_path}/mtrag"]
    assert list(tmp_path.iterdir()) == []
