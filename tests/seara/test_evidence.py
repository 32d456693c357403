"""The evidence oracle of ``convrag select --judge oracle:EVIDENCE.jsonl``: reading evidence files strictly (file and
line in every error), span location under whitespace / case folding, grades and minimal facts on real HotpotQA."""

from __future__ import annotations

import gzip
import json
import re
import time
from pathlib import Path

import pytest

from convrag.core.errors import ConvragError, DataError
from convrag.judging.items import AuditDoc, AuditItem
from convrag.seara.evidence import (
    EvidenceOracle,
    is_oracle_spec,
    load_oracle,
    locate_span,
    normalize_span,
    read_evidence,
)
from convrag.seara.judge import judge_pairs
from tests.conftest import DATA

HOTPOT = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"
GOOD = '{"query_id": 7, "evidence": ["Alpha  beta"], "note": "ignored"}\n\n{"query_id": "q2", "evidence": ["x", "y"]}\n'


@pytest.fixture(scope="module")
def hotpot() -> dict:
    """Documents (one per context paragraph title, ids d1, d2, ... in first-seen order), evidence (each question's
    supporting sentences, stripped), the gold document ids and the questions."""
    records = json.loads(HOTPOT.read_text(encoding="utf-8"))
    docs: list[tuple[str, str, str]] = []
    ids: dict[str, str] = {}
    for rec in records:
        for title, sentences in rec["context"]:
            if title not in ids:
                ids[title] = f"d{len(ids) + 1}"
                docs.append((ids[title], title, "".join(sentences)))
    evidence, gold = {}, {}
    for rec in records:
        context = dict((t, s) for t, s in rec["context"])
        evidence[rec["_id"]] = [context[t][i].strip() for t, i in rec["supporting_facts"]]
        gold[rec["_id"]] = [(ids[t], context[t][i].strip()) for t, i in rec["supporting_facts"]]
    return {"records": records, "docs": docs, "by_title": ids, "evidence": evidence, "gold": gold}


def item(qid: str) -> AuditItem:
    return AuditItem(item_id=qid, domain="", conversation_id=qid, turn=1, query="?", history=(), gold=())


def chunk(text: str, cid: str = "c") -> AuditDoc:
    return AuditDoc(doc_id=cid, title="", text=text)


# ---------------------------------------------------------------- reading evidence files


def test_read_evidence_good_file_plain_and_gzip(tmp_path: Path) -> None:
    plain = tmp_path / "ev.jsonl"
    plain.write_text(GOOD, encoding="utf-8")
    packed = tmp_path / "ev.jsonl.gz"
    packed.write_bytes(gzip.compress(GOOD.encode()))
    for path in (plain, packed):
        assert read_evidence(path) == {"7": ["Alpha  beta"], "q2": ["x", "y"]}


BAD = [
    ("malformed_json", '{"query_id": "a", "evidence": ["x"]}\n{"query_id": "b", "evidence": [\n', 2, "invalid JSON"),
    ("list_not_object", '["a", ["x"]]\n', 1, "expected a JSON object, got list"),
    ("missing_query_id", '{"evidence": ["x"]}\n', 1, "missing field 'query_id'"),
    ("bool_query_id", '{"query_id": true, "evidence": ["x"]}\n', 1, "field 'query_id' must be string/int, got bool"),
    ("empty_query_id", '\n{"query_id": " ", "evidence": ["x"]}\n', 2, "field 'query_id' is empty"),
    ("missing_evidence", '{"query_id": "a"}\n', 1, "missing field 'evidence'"),
    ("evidence_string", '{"query_id": "a", "evidence": ""}\n', 1, "field 'evidence' must be list, got string"),
    ("evidence_empty_list", '{"query_id": "a", "evidence": []}\n', 1, "'evidence' is an empty list"),
    ("empty_span", '{"query_id": "a", "evidence": ["x", ""]}\n', 1, "query 'a': evidence[1] is empty"),
    ("blank_span", '{"query_id": "a", "evidence": ["  \\n"]}\n', 1, "query 'a': evidence[0] is empty"),
    ("number_span", '{"query_id": "a", "evidence": [3]}\n', 1, "query 'a': evidence[0] must be a string, got int"),
    ("duplicate_id", '{"query_id": 1, "evidence": ["x"]}\n{"query_id": "b", "evidence": ["y"]}\n'
                     '{"query_id": "1", "evidence": ["z"]}\n', 3, "duplicate query_id '1' (first on line 1)"),
]


@pytest.mark.parametrize(("content", "line", "fragment"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_read_evidence_bad_lines_name_file_and_line(tmp_path: Path, content: str, line: int, fragment: str) -> None:
    path = tmp_path / "evidence.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_evidence(path)
    message = str(err.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert fragment in message and "\n" not in message
    assert path.read_text(encoding="utf-8") == content  # input untouched
    with pytest.raises(DataError, match=re.escape(f"{path}:{line}: ")):
        load_oracle(f"oracle:{path}")


def test_read_evidence_non_utf8_names_line(tmp_path: Path) -> None:
    path = tmp_path / "evidence.jsonl"
    data = b'{"query_id": "a", "evidence": ["x"]}\n{"query_id": "b", "evidence": ["caf\xff\xfe"]}\n'
    path.write_bytes(data)
    with pytest.raises(DataError) as err:
        read_evidence(path)
    assert str(err.value).startswith(f"{path}:2: not UTF-8: byte 0xff"), str(err.value)
    assert path.read_bytes() == data


@pytest.mark.parametrize("content", ["", "\n  \n"], ids=["empty", "blank_lines"])
def test_read_evidence_empty_file_names_file(tmp_path: Path, content: str) -> None:
    path = tmp_path / "evidence.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=re.escape(f"{path}: the evidence file holds no line")):
        read_evidence(path)


def test_load_oracle_spec_missing_file_and_name(tmp_path: Path) -> None:
    assert is_oracle_spec("oracle:x.jsonl") and not is_oracle_spec("openai:gpt-4o") and not is_oracle_spec(None)
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(ConvragError, match=re.escape(f"{missing}: no such evidence file")):
        load_oracle(f"oracle:{missing}")
    with pytest.raises(ConvragError, match="names no evidence file"):
        load_oracle("oracle:")
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(GOOD, encoding="utf-8")
    b.write_text(GOOD.replace('"y"', '"z"'), encoding="utf-8")
    oa, ob = load_oracle(f"oracle:{a}"), load_oracle(f"oracle:{b}")
    assert re.fullmatch(r"evidence-oracle\(a\.jsonl, [0-9a-f]{12}\)", oa.name), oa.name
    assert oa.name.split(", ")[1] != ob.name.split(", ")[1]  # different evidence, different name
    assert EvidenceOracle(read_evidence(a), str(a)).name == oa.name  # same evidence, same name


# ---------------------------------------------------------------- normalisation and location


def test_locate_span_whitespace_case_and_casefold_expansion() -> None:
    text = "  Die  Straße\n ist LANG.  Mehr Text."
    assert normalize_span(" Die\tSTRASSE \n") == "die strasse"
    start, end = locate_span("strasse   IST", text)
    assert text[start:end] == "Straße\n ist"
    start, end = locate_span("DIE straße", text)
    assert text[start:end] == "Die  Straße"
    start, end = locate_span("lang.", text)
    assert text[start:end] == "LANG."
    assert locate_span("ß", "Fuss") == (2, 4)  # "ß" folds to "ss": found over two source characters
    assert locate_span("s", "ß") is None  # half of a folded character is no whole match
    assert locate_span("Strasse isst", text) is None
    assert locate_span("   ", text) is None


# ---------------------------------------------------------------- grades


def test_verdict_grades_chunks_on_real_hotpotqa(hotpot: dict) -> None:
    oracle = EvidenceOracle(hotpot["evidence"], "hotpot-evidence.jsonl")
    docs = {doc_id: text for doc_id, _, text in hotpot["docs"]}
    rec = hotpot["records"][0]
    qid, (gold_doc, sentence) = rec["_id"], hotpot["gold"][rec["_id"]][0]
    whole = oracle.verdict(item(qid), chunk(docs[gold_doc]))
    assert (whole.score, whole.label, whole.error) == (3.0, "answers", None)
    assert sentence[:40] in whole.rationale and whole.extra["doc_id"] == "c"
    assert oracle.verdict(item(qid), chunk(sentence.upper().replace(" ", "\n  "))).score == 3.0
    assert oracle.verdict(item(qid), chunk(sentence[: len(sentence) // 2])).score == 0.0
    gold_ids = {d for d, _ in hotpot["gold"][qid]}
    distractor = next(hotpot["by_title"][t] for t, _ in rec["context"] if hotpot["by_title"][t] not in gold_ids)
    miss = oracle.verdict(item(qid), chunk(docs[distractor]))
    assert (miss.score, miss.label) == (0.0, "unrelated") and "none of the 2 evidence spans" in miss.rationale
    unknown = oracle.verdict(item("not-a-query"), chunk(docs[gold_doc]))
    assert unknown.score is None and unknown.label is None and oracle.grade(item("not-a-query"), chunk("x")) is None
    assert unknown.error == "no evidence for query 'not-a-query' in hotpot-evidence.jsonl"


def test_judge_pairs_counts_query_without_evidence_as_failure(hotpot: dict) -> None:
    qid = hotpot["records"][0]["_id"]
    oracle = EvidenceOracle({qid: hotpot["evidence"][qid]}, "ev.jsonl")
    chunks = {doc_id: text for doc_id, _, text in hotpot["docs"]}
    gold = hotpot["gold"][qid][0][0]
    pseudo = judge_pairs([(qid, gold), (qid, "d3"), ("other", gold)], {qid: "q", "other": "q"}, chunks, oracle,
                         echo=None)
    assert pseudo.qrels == {qid: {gold: 3, "d3": 0}}  # the failed pair has no grade, not a 0
    assert [(j.query_id, j.error) for j in pseudo.failed] == [("other", "no evidence for query 'other' in ev.jsonl")]


def test_check_queries_names_file_count_and_first_ids(hotpot: dict) -> None:
    oracle = EvidenceOracle(hotpot["evidence"], "/data/hotpot-evidence.jsonl")
    oracle.check_queries(list(hotpot["evidence"]))
    extra = [f"m{i}" for i in range(7)]
    with pytest.raises(ConvragError) as err:
        oracle.check_queries([*hotpot["evidence"], *extra, "m0"])
    assert str(err.value) == ("/data/hotpot-evidence.jsonl: no evidence line for 7 of 37 queries "
                              "('m0', 'm1', 'm2', 'm3', 'm4', ...)")
    with pytest.raises(ConvragError, match="no evidence line for 1 of 1 queries"):
        oracle.facts(hotpot["docs"], ["m0"])


# ---------------------------------------------------------------- facts


def test_facts_locate_every_supporting_sentence(hotpot: dict) -> None:
    evidence = dict(hotpot["evidence"])
    first, second = list(evidence)[:2]
    shared = evidence[first][0]
    evidence["shared"] = [shared.upper(), "a sentence that is in no paragraph"]
    oracle = EvidenceOracle(evidence, "ev.jsonl")
    out = oracle.facts(hotpot["docs"], list(evidence))
    assert (out.spans, out.found) == (75 + 2, 75 + 1)
    assert out.unfound == {"shared": ["a sentence that is in no paragraph"]}
    assert out.several_documents == 0
    texts = {doc_id: text for doc_id, _, text in hotpot["docs"]}
    for qid, pairs in hotpot["gold"].items():
        facts = out.factset.for_query(qid)
        assert sorted((f.doc_id, f.text) for f in facts) == sorted(pairs)  # in the gold paragraph, verbatim
        for f in facts:
            assert f.fact_id == f"{f.doc_id}:{f.start}-{f.end}" and texts[f.doc_id][f.start:f.end] == f.text
            assert f.chunk_ids == ()
    one = out.factset.for_query("shared")
    assert len(one) == 1 and one[0].query_ids == tuple(sorted([first, "shared"]))  # one fact, both queries
    assert one[0].fact_id in out.factset.by_query[first] and len(out.factset.facts) == 75
    again = oracle.facts(hotpot["docs"], list(reversed(list(evidence))))
    assert again.factset.by_query == out.factset.by_query and list(again.factset.facts) == list(out.factset.facts)
    only = oracle.facts(hotpot["docs"], [second])
    assert list(only.factset.by_query) == [second] and only.spans == len(evidence[second])
    assert out.to_dict()["unfound_spans"] == 1


def test_facts_first_document_wins_and_several_counted() -> None:
    docs = [("a", "Title holds the span", "Nothing here."), ("b", "", "x The  Span. y"), ("c", "", "the span. z")]
    out = EvidenceOracle({"q": ["the span."]}).facts(docs, ["q"])
    assert list(out.factset.facts) == ["b:2-12"] and out.factset.facts["b:2-12"].text == "The  Span."
    assert (out.found, out.several_documents, out.unfound) == (1, 1, {})


def test_facts_scale_to_a_two_thousand_document_corpus(hotpot: dict) -> None:
    docs = [(f"{doc_id}-{k}", title, f"Copy {k}. {text}") for k in range(7) for doc_id, title, text in hotpot["docs"]]
    assert len(docs) >= 2000
    texts = {doc_id: text for doc_id, _, text in hotpot["docs"]}
    evidence = {f"{q}-{k}": [f"Copy {k}. {texts[hotpot['gold'][q][0][0]][:40]}", *spans]
                for k in range(4) for q, spans in hotpot["evidence"].items()}  # fmt: skip
    oracle = EvidenceOracle(evidence, "ev.jsonl")
    began = time.perf_counter()
    out = oracle.facts(docs, list(evidence))
    elapsed = time.perf_counter() - began
    assert out.found == out.spans == 4 * (30 + 75)
    assert out.several_documents == 4 * 75  # each plain sentence is in all seven copies
    assert elapsed < 5.0, f"facts() took {elapsed:.1f} s"
