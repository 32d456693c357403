"""SEARA minimal retrieval facts: extraction with scripted LLM replies, offsets, dedupe across chunkings, the three
match rules, recall/precision, the ``facts`` config of metrics/pr_auc, and the memo's 6.7 item 6 on HotpotQA."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import evaluate
import pytest

from convrag.llm import LLM, DiskCache, RetryPolicy
from convrag.llm.backends.fake import FakeBackend
from convrag.llm.types import BackendError, Message
from convrag.seara.facts import (
    Chunk,
    Fact,
    Unit,
    dedupe_facts,
    extract_facts,
    fact_scores,
    llm_entailment,
    locate,
    match_chunks,
    normalize_text,
    pr_auc_inputs,
)
from tests.conftest import DATA, REPO

HOTPOT = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"

DOC = ("The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. "
       "It is named after the engineer Gustave Eiffel, whose company designed and built the tower.  "
       "Locally nicknamed \"La dame de fer\", it was constructed from 1887 to 1889 as the centerpiece of the "
       "1889 World's Fair. Although initially criticised by some of France's leading artists and intellectuals "
       "for its design, it has since become a global cultural icon of France. The tower is 330 metres tall, "
       "about the same height as an 81-storey building, and the tallest structure in Paris. "
       "It was the first structure in the world to surpass both the 200-metre and 300-metre mark in height. "
       "The tower has three levels for visitors, with restaurants on the first and second levels.")


def windows(doc_id: str, text: str, size: int, tag: str) -> list[Chunk]:
    return [Chunk(f"{doc_id}#{tag}{i}", doc_id, s, text[s:s + size]) for i, s in enumerate(range(0, len(text), size))]


def make_llm(backend: FakeBackend, tmp_path: Path, **kw) -> LLM:
    return LLM(backend, cache=DiskCache(tmp_path / "cache"), sleep=lambda s: None,
               retry=RetryPolicy(max_retries=0), **kw)


def passage_of(messages: list[Message]) -> str:
    user = [m["content"] for m in messages if m["role"] == "user"][0]
    return user.split("Passage:\n", 1)[1].split("\n\nList the shortest", 1)[0]


def test_locate_whitespace_normalisation_and_offsets() -> None:
    text = "Alpha  beta\n gamma. Delta"
    start, end = locate(" beta gamma. ", text)
    assert text[start:end] == "beta\n gamma."
    assert locate("Beta gamma", text) is None  # case is not normalised
    assert locate("   ", text) is None
    assert normalize_text("It's  the TOWER!") == "it s the tower"


def test_extract_with_scripted_llm_counts_and_cache(tmp_path: Path) -> None:
    chunks = windows("eiffel", DOC, 200, "w")
    by_text = {c.text: c for c in chunks}
    replies = {
        chunks[0].chunk_id: '{"quotes": ["It is named after the engineer Gustave Eiffel, whose company designed '
                            'and built the tower."]}',
        # a paraphrase (rejected) next to a quote whose whitespace differs from the chunk (kept)
        chunks[1].chunk_id: '```json\n{"quotes": ["It was built between 1887 and 1889.", "it was constructed '
                            'from 1887 to 1889 as the\\ncenterpiece of the 1889 World\'s Fair."]}\n```',
        chunks[2].chunk_id: "The tower was designed by Eiffel's company, see the second sentence.",  # no JSON
        chunks[3].chunk_id: '{"quotes": []}',
    }

    def responder(messages: list[Message]) -> str:
        return replies[by_text[passage_of(messages)].chunk_id]

    queries = {"q1": "Who designed the Eiffel Tower and when was it built?"}
    relevant = {"q1": [c.chunk_id for c in chunks[:4]] + ["nowhere"]}
    backend = FakeBackend(responder=responder)
    ex = extract_facts(queries, chunks, relevant, make_llm(backend, tmp_path, structured_attempts=1))
    assert ex.counts == Counter(pairs=4, quotes=3, accepted=2, rejected_not_verbatim=1, unparseable=1,
                                no_quotes=1, missing_chunk=1)
    assert ex.rejected == [{"query_id": "q1", "chunk_id": chunks[1].chunk_id,
                            "quote": "It was built between 1887 and 1889."}]
    assert {e["reason"] for e in ex.errors} == {"unparseable", "missing_chunk"}
    for unit in ex.units:  # offsets round-trip into the document
        assert DOC[unit.start:unit.end] == unit.text
    assert ex.units[0].text.startswith("It is named after") and ex.units[1].text.startswith("it was constructed")
    assert "as the centerpiece" in ex.units[1].text  # the chunk's text, not the quote's line break
    assert len(backend.calls) == 4
    # rerun: answered pairs come from the cache; only the unparseable one is asked again
    again = FakeBackend(responder=responder)
    ex2 = extract_facts(queries, chunks, relevant, make_llm(again, tmp_path, structured_attempts=1))
    assert ex2.units == ex.units and len(again.calls) == 1
    assert passage_of(again.calls[0]["messages"]) == chunks[2].text


def test_failed_call_is_counted_not_a_fact(tmp_path: Path) -> None:
    chunk = Chunk("c", "d", 0, "Paris is the capital of France.")
    backend = FakeBackend([BackendError("HTTP 400 bad request", retryable=False)])
    ex = extract_facts({"q": "Capital of France?"}, [chunk], {"q": ["c"]}, make_llm(backend, tmp_path))
    assert ex.units == [] and ex.counts["call_failed"] == 1 and ex.counts["accepted"] == 0


def oracle_for(sentences: list[str]):
    def extractor(query: str, chunk: Chunk) -> list[str]:
        return [s for s in sentences if s in chunk.text]
    return extractor


def test_dedupe_across_200_and_500_char_chunkings() -> None:
    gold = ["It is named after the engineer Gustave Eiffel, whose company designed and built the tower.",
            "The tower has three levels for visitors, with restaurants on the first and second levels."]
    small, large = windows("eiffel", DOC, 200, "s"), windows("eiffel", DOC, 500, "l")
    queries = {"q": "Who is the tower named after, and how tall is it?"}
    facts = {}
    for chunking in (small, large):
        ex = extract_facts(queries, chunking, {"q": [c.chunk_id for c in chunking]}, oracle_for(gold))
        assert ex.counts["accepted"] == 2
        facts[chunking[0].chunk_id] = dedupe_facts(ex.units)
    both = extract_facts(queries, small + large, {"q": [c.chunk_id for c in small + large]}, oracle_for(gold))
    merged = dedupe_facts(both.units)
    assert both.counts["accepted"] == 4 and len(merged.facts) == 2
    assert set(merged.facts) == set(facts[small[0].chunk_id].facts) == set(facts[large[0].chunk_id].facts)
    for fact in merged.facts.values():
        assert DOC[fact.start:fact.end] == fact.text and fact.text in gold and len(fact.chunk_ids) == 2


def test_dedupe_iou_rule_is_deterministic() -> None:
    units = [Unit("q1", "b", "d", 12, 50, "x"), Unit("q2", "a", "d", 10, 50, "y"), Unit("q1", "c", "d", 40, 90, "z"),
             Unit("q1", "e", "other", 10, 50, "w")]
    fs = dedupe_facts(units)
    assert sorted(fs.facts) == ["d:10-50", "d:40-90", "other:10-50"]  # 38/40 merges, 10/80 does not
    assert fs.facts["d:10-50"].query_ids == ("q1", "q2") and fs.facts["d:10-50"].chunk_ids == ("a", "b")
    assert fs.by_query == {"q1": ["d:10-50", "d:40-90", "other:10-50"], "q2": ["d:10-50"]}
    assert dedupe_facts(reversed(units)).facts == fs.facts


def test_three_match_rules_and_theta(tmp_path: Path) -> None:
    text = "Gustave Eiffel, whose company designed and built the tower"
    start = DOC.index(text)
    fact = Fact(f"eiffel:{start}-{start + len(text)}", "eiffel", start, start + len(text), text, ("q",), ())
    n = len(text)
    covering = Chunk("span", "eiffel", start - 5, DOC[start - 5:start + n])
    clipped = Chunk("clip", "eiffel", start + 3, DOC[start + 3:start + n + 10])  # 56/59 >= 0.9
    half = Chunk("half", "eiffel", start, DOC[start:start + n // 2])
    copy = Chunk("copy", "mirror", 0, "GUSTAVE EIFFEL -- whose company designed and built the tower!")
    para = Chunk("para", "mirror2", 0, "The structure was designed and erected by the firm of G. Eiffel.")
    unrelated = Chunk("none", "mirror3", 0, "Paris hosts many museums.")
    retrieved = [covering, clipped, half, copy, para, unrelated]
    assert [(m.chunk_id, m.rule) for m in match_chunks(retrieved, [fact])] == [
        ("span", "span"), ("clip", "span"), ("copy", "string")]
    backend = FakeBackend([
        '{"rationale": "The passage says only that Paris hosts many museums.", "entailed": false}',
        '{"rationale": "The passage says Eiffel\'s firm designed and built it.", "entailed": true}',
        '{"rationale": "Nothing about who built the tower.", "entailed": false}'])
    counts: Counter[str] = Counter()
    judge = llm_entailment(make_llm(backend, tmp_path), counts)
    found = match_chunks([half, para, unrelated], [fact], entail=judge)
    assert [(m.chunk_id, m.rule) for m in found] == [("para", "entail")]
    assert counts["entail_calls"] == 3 and len(backend.calls) == 3
    assert "Statement: " + text in backend.calls[1]["messages"][-1]["content"]
    # theta 0.5 lets the half chunk in by span
    assert [m.chunk_id for m in match_chunks([half], [fact], theta=0.5)] == ["half"]


def hand_example() -> tuple[dict, dict, object]:
    doc = "aaaaaaaaaa" + "FACT-ONE.." + "bbbbbbbbbb" + "FACT-TWO.." + "cccccccccc"
    units = [Unit("q", "x", "d", 10, 20, doc[10:20]), Unit("q", "y", "d", 30, 40, doc[30:40])]
    fs = dedupe_facts(units)
    chunks = {"c0": Chunk("c0", "d", 0, doc[0:10]), "c1": Chunk("c1", "d", 10, doc[10:30]),
              "c2": Chunk("c2", "d", 30, doc[30:50])}
    return {"q": ["c0", "c1", "c2"]}, chunks, fs


def test_fact_split_by_a_chunk_boundary_is_covered_by_the_union() -> None:
    doc = "x" * 10 + "A FACT THAT IS SPLIT" + "y" * 10
    fs = dedupe_facts([Unit("q", "whole", "d", 10, 30, doc[10:30])])
    chunks = {"a": Chunk("a", "d", 0, doc[:20]), "b": Chunk("b", "d", 20, doc[20:])}
    assert fact_scores({"q": ["a"]}, chunks, fs)["micro"]["fact_recall"] == 0.0
    both = fact_scores({"q": ["a", "b"]}, chunks, fs)
    assert both["micro"] == {"fact_recall": 1.0, "chunk_precision": 0.0, "char_precision": 0.5}


def test_scores_and_pr_auc_facts_config_hand_checked() -> None:
    run, chunks, fs = hand_example()
    scores = fact_scores(run, chunks, fs)
    # 2/2 facts; chunks c1, c2 hold a fact of 3; 20 fact characters of 50 retrieved
    assert scores["micro"] == {"fact_recall": 1.0, "chunk_precision": 2 / 3, "char_precision": 0.4}
    assert scores["rules"] == {"span": 2}
    metric = evaluate.load(str(REPO / "metrics" / "pr_auc"), "facts")
    # k=1: R 0, P 0; k=2: R 1/2, P 1/2; k=3: R 1, P 2/3 -> 1/2 * 1/2 + 1/2 * 2/3 = 7/12
    for coverage in ("spans", "mapping"):
        result = metric.compute(**pr_auc_inputs(run, chunks, fs, coverage=coverage))
        assert result["pr_auc"] == pytest.approx(7 / 12)
    # char precision at k: 0/10, 10/30, 20/50 -> 1/2 * 1/3 + 1/2 * 2/5 = 11/30
    result = metric.compute(**pr_auc_inputs(run, chunks, fs), precision_unit="char")
    assert result["pr_auc"] == pytest.approx(11 / 30)


@pytest.fixture(scope="module")
def hotpot() -> dict:
    """HotpotQA distractor records (StratRAG's source): paragraph = document ``qid/title``, text = the sentences
    joined as given; gold facts = the stripped supporting sentences with their document offsets."""
    records = json.loads(HOTPOT.read_text(encoding="utf-8"))
    docs: dict[str, str] = {}
    sentences: dict[str, list[tuple[int, str]]] = {}
    gold: dict[str, set[tuple[str, int, int]]] = {}
    queries: dict[str, str] = {}
    for rec in records:
        qid = rec["_id"]
        queries[qid] = rec["question"]
        for title, sents in rec["context"]:
            doc_id = f"{qid}/{title}"
            offsets, pos = [], 0
            for s in sents:
                offsets.append((pos, s))
                pos += len(s)
            docs[doc_id], sentences[doc_id] = "".join(sents), offsets
        gold[qid] = set()
        for title, idx in rec["supporting_facts"]:
            doc_id = f"{qid}/{title}"
            if doc_id in sentences and idx < len(sentences[doc_id]) and sentences[doc_id][idx][1].strip():
                pos, s = sentences[doc_id][idx]
                lead = len(s) - len(s.lstrip())
                gold[qid].add((doc_id, pos + lead, pos + len(s.rstrip())))
    return {"docs": docs, "sentences": sentences, "gold": gold, "queries": queries}


def chunkings(h: dict) -> dict[str, dict[str, Chunk]]:
    out: dict[str, dict[str, Chunk]] = {"paragraph": {}, "sentence": {}, "pair": {}}
    for doc_id, text in h["docs"].items():
        out["paragraph"][f"{doc_id}#p"] = Chunk(f"{doc_id}#p", doc_id, 0, text)
        sents = h["sentences"][doc_id]
        for i, (pos, s) in enumerate(sents):
            if s:
                out["sentence"][f"{doc_id}#s{i}"] = Chunk(f"{doc_id}#s{i}", doc_id, pos, s)
        for i in range(0, len(sents), 2):
            pos = sents[i][0]
            end = sents[i + 1][0] + len(sents[i + 1][1]) if i + 1 < len(sents) else pos + len(sents[i][1])
            if end > pos:
                out["pair"][f"{doc_id}#m{i}"] = Chunk(f"{doc_id}#m{i}", doc_id, pos, text[pos:end])
    return out


def oracle_facts(h: dict, chunks: dict[str, Chunk]):
    """Judge oracle (chunks holding a gold sentence are relevant) and extractor oracle (the gold sentences)."""
    gold_text = {q: [h["docs"][d][s:e] for d, s, e in spans] for q, spans in h["gold"].items()}
    relevant = {q: [c.chunk_id for c in chunks.values() for d, s, e in spans
                    if c.doc_id == d and c.start <= s and e <= c.end] for q, spans in h["gold"].items()}
    qid_of = {c.chunk_id: c.doc_id.split("/", 1)[0] for c in chunks.values()}
    queries = h["queries"]
    text_to_q = {queries[q]: q for q in queries}

    def extractor(query: str, chunk: Chunk) -> list[str]:
        assert qid_of[chunk.chunk_id] == text_to_q[query]
        return [t for t in gold_text[text_to_q[query]] if t in chunk.text]

    return extract_facts(queries, chunks, relevant, extractor, concurrency=1), relevant


def test_hotpot_minimal_facts_memo_6_7_item_6(hotpot: dict) -> None:
    ways = chunkings(hotpot)
    gold_ids = {q: sorted(f"{d}:{s}-{e}" for d, s, e in spans) for q, spans in hotpot["gold"].items()}
    factsets = {}
    for name, chunks in ways.items():
        ex, _ = oracle_facts(hotpot, chunks)
        assert ex.counts["rejected_not_verbatim"] == 0 and ex.counts["no_quotes"] == 0
        factsets[name] = fs = dedupe_facts(ex.units)
        for fact in fs.facts.values():
            assert hotpot["docs"][fact.doc_id][fact.start:fact.end] == fact.text
        assert fs.by_query == gold_ids  # every chunking yields exactly the gold sentences
    every = {k: v for chunks in ways.values() for k, v in chunks.items()}
    ex_all, relevant_all = oracle_facts(hotpot, every)
    pooled = dedupe_facts(ex_all.units)
    assert pooled.by_query == gold_ids and ex_all.counts["accepted"] > len(pooled.facts)  # dedupe across chunkings

    para = ways["paragraph"]
    gold_docs = {q: sorted({d for d, _, _ in spans}) for q, spans in hotpot["gold"].items()}
    distractors = {q: sorted(c.doc_id for c in para.values() if c.doc_id.startswith(q + "/")
                             and c.doc_id not in gold_docs[q])[:3] for q in gold_docs}
    all_gold = {q: [f"{d}#p" for d in distractors[q][:1] + gold_docs[q] + distractors[q][1:]] for q in gold_docs}
    scores = fact_scores(all_gold, every, pooled)
    assert scores["micro"]["fact_recall"] == 1.0 and not scores["excluded"]
    # (i) fact recall by span containment equals gold-sentence recall, here for a run with one gold paragraph
    one_gold = {q: [f"{d}#p" for d in gold_docs[q][:1] + distractors[q][:1]] for q in gold_docs}
    scores_one = fact_scores(one_gold, every, pooled)
    for q, row in scores_one["per_query"].items():
        expected = sum(d == gold_docs[q][0] for d, _, _ in hotpot["gold"][q]) / len(hotpot["gold"][q])
        assert row["fact_recall"] == expected and set(m.rule for m in row["matches"]) <= {"span"}
    # (ii) chunk-level pseudo-qrels pooled over chunkings count the same evidence several times: the paragraph run
    # that retrieves every gold paragraph "misses" the sentence and pair chunks, while its fact recall is 1.0
    chunk_recall = sum(len(set(all_gold[q]) & set(relevant_all[q])) for q in gold_docs) / sum(
        len(relevant_all[q]) for q in gold_docs)
    assert chunk_recall < 0.5
    # (iii) char precision is size-aware: the sentence run of the gold sentences beats whole gold paragraphs
    sentence_run = {q: sorted(c.chunk_id for c in ways["sentence"].values()
                              if any(c.doc_id == d and c.start <= s and e <= c.end for d, s, e in hotpot["gold"][q]))
                    for q in gold_docs}
    para_only = {q: [f"{d}#p" for d in gold_docs[q]] for q in gold_docs}
    sent_scores, para_scores = fact_scores(sentence_run, every, pooled), fact_scores(para_only, every, pooled)
    assert sent_scores["micro"]["fact_recall"] == para_scores["micro"]["fact_recall"] == 1.0
    assert sent_scores["micro"]["char_precision"] > 0.95 > para_scores["micro"]["char_precision"]
    # the metric agrees: fact recall 1.0 at K for the all-gold paragraph run
    metric = evaluate.load(str(REPO / "metrics" / "pr_auc"), "facts")
    result = metric.compute(**pr_auc_inputs(all_gold, every, pooled))
    assert result["recall_at_k"] == 1.0 and result["n_scored"] == len(gold_docs)


# --- the real local model (plumbing only: nothing here measures what a 135M model extracts) ---------------------------
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_extraction_and_entailment_through_the_default_local_model(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("llama_cpp", reason="the default backend needs llama-cpp-python")
    from convrag.llm import get_llm
    from convrag.seara.facts import llm_entailment, match_chunks

    monkeypatch.delenv("CONVRAG_LLM", raising=False)
    doc = ("The Danube is Europe's second-longest river. It rises in the Black Forest of Germany and flows "
           "east for about 2,850 km. It empties into the Black Sea through the Danube Delta in Romania.")
    chunks = [Chunk("d#0", "danube", 0, doc[:95]), Chunk("d#1", "danube", 95, doc[95:])]
    llm = get_llm("default", cache=tmp_path)
    queries = {"q1": "Where does the Danube end?"}
    got = extract_facts(queries, chunks, {"q1": ["d#0", "d#1"]}, llm)
    c = got.counts
    assert c["pairs"] == 2
    assert c["quotes"] == c["accepted"] + c["rejected_not_verbatim"]
    # every pair ends one way: quotes read (some may be rejected), an empty list, or counted as failed
    assert c["unparseable"] + c["call_failed"] + c["no_quotes"] <= 2
    for unit in got.units:  # accepted quotes are verbatim and their offsets point into the document
        assert doc[unit.start:unit.end] == unit.text
    assert len(got.rejected) == c["rejected_not_verbatim"]
    rerun = get_llm("default", cache=tmp_path)
    again = extract_facts(queries, chunks, {"q1": ["d#0", "d#1"]}, rerun)
    assert again.units == got.units  # answered pairs come from the cache; only unread replies are asked again
    if c["unparseable"] + c["call_failed"] == 0:
        assert rerun.report.calls == 0

    # entailment: a fact stated in other words, so neither span nor string matches and the judge is asked
    fact = dedupe_facts([Unit("q1", "x#0", "other", 0, 31, "The river ends in the Black Sea")]).facts
    counts: Counter[str] = Counter()
    matches = match_chunks([chunks[1]], fact.values(), entail=llm_entailment(llm, counts))
    assert counts["entail_calls"] == 1 and counts["entail_failed"] <= 1
    assert all(m.rule == "entail" for m in matches) and len(matches) <= 1
