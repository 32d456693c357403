"""Prompt files: loading by name, rendering with named fields, errors, overrides, shipped prompts."""

from __future__ import annotations

from pathlib import Path

import pytest

from convrag.llm import PromptError, list_prompts, load_prompt

SAMPLE_FIELDS = {
    "structured_output": {"schema_json": "{}"},
    "structured_retry": {"error": "bad"},
    "query_rewrite": {"history": [{"role": "user", "text": "Who wrote Dune?"}], "question": "When was he born?"},
    "relevance_judge": {"query": "q", "passage": "p"},
    "pairwise_judge": {"question": "q", "candidates": ["a", "b"]},
    "gen_idk": {"conversation": "user: q", "response": "r"},
    "gen_clarification": {"conversation": "user: q", "response": "r"},
    "gen_rb_llm": {"previous_conversation": "", "question": "q", "reference": "a", "response": "r",
                   "passages": ["p1", "p2"]},
    "gen_faithfulness_claims": {"question": "user: q", "response": "r"},
    "gen_faithfulness_verdicts": {"passages": ["p"], "claims": ["c1", "c2"]},
}
_DOC = {"number": 1, "title": "Danube", "text": "The Danube flows into the Black Sea."}
_EXCHANGE = {"question": "Where does the Danube start?", "answer": "In the Black Forest."}
_EXAMPLE = {"documents": [_DOC], "document": 1, "question": "Where does it end?", "history": [_EXCHANGE]}
_HISTORY = [{"role": "user", "text": "Where does the Danube start?"}, {"role": "assistant", "text": "In Germany."}]
SAMPLE_FIELDS.update({
    "mtr_questioner_first": {"documents": [_DOC], "example": _EXAMPLE},
    "mtr_questioner_next": {"documents": [_DOC], "history": [_EXCHANGE], "example": _EXAMPLE},
    "mtr_responder": {"answer_words": 150, "title": "Danube", "text": "It flows east.", "question": "Where to?"},
    "mtr_polisher": {"history": [_EXCHANGE], "question": "Where does the Danube end?"},
    "audit_query_evidence": {"query": "q", "document": "d", "history": _HISTORY},
    "audit_discriminability": {"query": "q", "documents": ["d1", "d2"], "history": _HISTORY},
    "audit_faithfulness": {"query": "q", "documents": ["d"], "answer": "a"},
    "audit_answer_quality": {"query": "q", "documents": ["d"], "answer": "a"},
    "audit_conversation_quality": {"turns": [{"number": 1, "query": "q", "answer": "a", "documents": ["D1"]}],
                                   "dimensions": ["naturalness", "groundedness"],
                                   "documents": [{"key": "D1", "title": "t", "text": "x"}]},
    "audit_turn_dependency": {"history": [("user", "q"), ("assistant", "a")], "query": "and then?"},
    "audit_question_pattern": {"query": "why?"},
    "audit_relevance_graded": {"query": "q", "document": "d"},
    "seara_fact_extract": {"query": "Where does the Danube end?", "chunk": "It flows east into the Black Sea."},
    "seara_fact_entail": {"fact": "The Danube ends in the Black Sea.", "chunk": "It flows east into the Black Sea."},
    "seara_query_variants": {"query": "Where does the Danube end?", "n": 4},
    "seara_rerank_listwise": {"query": "Where does the Danube end?",
                              "passages": ["It flows east.", "It ends in the Black Sea."]},
})
_DV_DOCS = [{"label": "doc_0", "text": "The Danube flows into the Black Sea."}]
_DV_HISTORY = [{"query": "Where does the Danube start?", "answer": "In the Black Forest."}]
_DV_ASPECT = {"name": "Danube mouth", "type": "detail", "excerpt": "It ends in the Black Sea."}
SAMPLE_FIELDS.update({
    "gen_recor_judge": {"question": "q", "answer": "a", "reference": "r", "history": "Q: x\nA: y",
                        "passages": ["p1", "p2"]},
    "gen_recor_answer": {"question": "Where does it end?", "history": [], "passages": []},
    "rag_answer": {"question": "Where does it end?",
                   "history": [{"role": "user", "content": "Where does the Danube start?"},
                               {"role": "assistant", "content": "In Germany."}],
                   "passages": [{"number": 1, "title": "Danube", "text": "The Danube flows into the Black Sea."}]},
    "dv_alignment": {"answer": "The Danube ends in the Black Sea.", "documents": _DV_DOCS},
    "dv_aspect_extract": {"query": "Where does the Danube end?", "reasoning": "Needs its course.",
                          "answer": "It ends in the Black Sea.", "num_aspects": 3, "existing": [_DV_ASPECT]},
    "dv_aspect_overlap": {**_DV_ASPECT, "existing": [_DV_ASPECT]},
    "dv_aspect_suitability": _DV_ASPECT,
    "dv_aspect_coverage": {"name": "Danube mouth", "excerpt": "It ends in the Black Sea.", "documents": _DV_DOCS},
    "dv_answerability": {"sub_question": "Where is the Danube's mouth?",
                         "facts": ["The Danube ends in the Black Sea."], "documents": _DV_DOCS},
    "dv_fact_overlap": {"facts": ["The Danube ends in the Black Sea."], "earlier": ["The Danube starts in Germany."]},
    "dv_retrieval_guidance": {"query": "Where does the Danube end?", "reasoning": "Needs its course.",
                              "sub_question": "Where is the Danube's mouth?",
                              "facts": ["The Danube ends in the Black Sea."]},
    "dv_aspect_order": {"conversation_strategy": "From basics to details.",
                        "aspects": [{"index": 0, "type": "detail", "name": "Danube mouth"}]},
    "dv_subquestion": {"query": "Where does the Danube end?", "reasoning": "Needs its course.", "aspect_name": "Mouth",
                       "aspect_type": "detail", "facts": ["The Danube ends in the Black Sea."], "previous": []},
    "dv_doc_scores": {"sub_question": "Where is the Danube's mouth?", "reasoning": "Needs its course.",
                      "facts": ["The Danube ends in the Black Sea."], "documents": _DV_DOCS},
    "dv_query_first": {"topic": "Where does the Danube end?", "sub_question": "Where is the Danube's mouth?",
                       "max_words": 20},
    "dv_query_followup": {"topic": "Where does the Danube end?", "history": _DV_HISTORY,
                          "sub_question": "Where is the Danube's mouth?", "openers": ["where does"], "max_words": 20},
    "dv_answer": {"history": _DV_HISTORY, "query": "And where does it end?",
                  "documents": ["The Danube flows into the Black Sea."], "min_sentences": 2, "max_sentences": 4},
    "dv_turn_diversity": {"history": _DV_HISTORY, "answer": "It ends in the Black Sea."},
    "dv_retrieval_reasoning": {"query": "And where does it end?", "sub_question": "Where is the Danube's mouth?",
                               "aspect_name": "Mouth", "facts": ["The Danube ends in the Black Sea."],
                               "selected": _DV_DOCS, "others": []},
    "dv_fact_verify": {"name": "Danube mouth", "excerpt": "It ends in the Black Sea.", "documents": _DV_DOCS,
                       "max_facts": 5},
})


def test_every_shipped_prompt_renders() -> None:
    names = list_prompts()
    assert set(SAMPLE_FIELDS) <= set(names)
    for name in names:
        msgs = load_prompt(name).render(**SAMPLE_FIELDS[name])
        assert msgs and all(m["role"] in ("system", "user", "assistant") and m["content"] for m in msgs)


def test_render_fills_fields() -> None:
    msgs = load_prompt("query_rewrite").render(**SAMPLE_FIELDS["query_rewrite"])
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert "user: Who wrote Dune?" in msgs[1]["content"] and "When was he born?" in msgs[1]["content"]
    judge = load_prompt("relevance_judge")
    assert "0 to 2" in judge.render(query="q", passage="p")[1]["content"]
    assert "0 to 3" in judge.render(query="q", passage="p", max_grade=3)[1]["content"]


def test_missing_and_unknown_fields() -> None:
    with pytest.raises(PromptError, match=r"missing fields \['passage'\]"):
        load_prompt("relevance_judge").render(query="q")
    with pytest.raises(PromptError, match=r"unknown \['pasage'\]"):
        load_prompt("relevance_judge").render(query="q", passage="p", pasage="typo")
    with pytest.raises(PromptError, match="no prompt named"):
        load_prompt("does_not_exist")


def test_user_dir_overrides_and_validation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "relevance_judge.yaml").write_text("fields: [query, passage]\nuser: 'Q={{ query }} P={{ passage }}'\n")
    monkeypatch.setenv("CONVRAG_PROMPTS_PATH", str(tmp_path))
    assert load_prompt("relevance_judge").render(query="x", passage="y") == [{"role": "user", "content": "Q=x P=y"}]
    (tmp_path / "multi.yaml").write_text(
        "fields: [a]\nmessages:\n  - {role: system, content: sys}\n  - {role: user, content: '{{ a }}'}\n"
        "  - {role: assistant, content: ok}\n")
    assert [m["role"] for m in load_prompt("multi").render(a=1)] == ["system", "user", "assistant"]
    (tmp_path / "undeclared.yaml").write_text("fields: [a]\nuser: '{{ a }} {{ b }}'\n")
    with pytest.raises(PromptError, match=r"undeclared fields \['b'\]"):
        load_prompt("undeclared")
    (tmp_path / "broken.yaml").write_text("fields: [a]\nuser: '{{ a '\n")
    with pytest.raises(PromptError, match="syntax error"):
        load_prompt("broken")
    (tmp_path / "badrole.yaml").write_text("messages:\n  - {role: tool, content: x}\n")
    with pytest.raises(PromptError, match="role"):
        load_prompt("badrole")
