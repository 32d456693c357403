"""Parsing, repair and validation of structured replies (no model needed)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from convrag.llm.structured import ParseError, extract_json, json_schema_for, parse_structured


class Verdict(BaseModel):
    label: str
    score: int = Field(ge=0, le=3)


@pytest.mark.parametrize(
    ("text", "repairs"),
    [
        ('{"label": "yes", "score": 2}', []),
        ('```json\n{"label": "yes", "score": 2}\n```', ["code_fence"]),
        ('Sure! Here it is: {"label": "yes", "score": 2} Hope that helps.', ["surrounding_text"]),
        ('{"label": "yes", "score": 2,}', ["trailing_comma"]),
        ("{'label': 'yes', 'score': 2}", ["single_quotes"]),
        ('{\u201clabel\u201d: \u201cyes\u201d, "score": 2}', ["smart_quotes"]),
        ('{"label": "yes", "score": 2', ["truncated"]),
    ],
)
def test_extract_and_repair(text: str, repairs: list[str]) -> None:
    obj, applied = extract_json(text)
    assert obj == {"label": "yes", "score": 2}
    for r in repairs:
        assert r in applied
    assert (applied == []) == (repairs == [])


def test_python_literals_and_strings_untouched() -> None:
    obj, applied = extract_json('{"a": True, "b": None, "c": "True, None,]"}')
    assert obj == {"a": True, "b": None, "c": "True, None,]"}
    assert "python_literals" in applied


def test_truncated_inside_string() -> None:
    obj, applied = extract_json('{"label": "yes", "reason": "because it is')
    assert obj == {"label": "yes", "reason": "because it is"}
    assert "truncated" in applied


def test_no_json_is_an_error() -> None:
    with pytest.raises(ParseError, match="no JSON"):
        extract_json("I cannot answer that.")
    with pytest.raises(ParseError, match="not valid JSON"):
        extract_json('{"label": yes please}')


def test_validation_errors_name_the_field() -> None:
    with pytest.raises(ParseError, match="score"):
        parse_structured('{"label": "x", "score": 9}', Verdict)
    with pytest.raises(ParseError, match="label"):
        parse_structured('{"score": 1}', Verdict)


def test_unwraps_single_key_wrapper() -> None:
    value, repairs = parse_structured('{"answer": {"label": "no", "score": 0}}', Verdict)
    assert value == Verdict(label="no", score=0)
    assert repairs == ["unwrapped"]


def test_dict_schema_validation() -> None:
    schema = {"type": "object", "required": ["ids"],
              "properties": {"ids": {"type": "array", "items": {"type": "integer"}},
                             "kind": {"enum": ["a", "b"]}}}
    assert parse_structured('{"ids": [1, 2], "kind": "a"}', schema)[0] == {"ids": [1, 2], "kind": "a"}
    with pytest.raises(ParseError, match=r"\$\.ids\[1\]"):
        parse_structured('{"ids": [1, "x"]}', schema)
    with pytest.raises(ParseError, match="not one of"):
        parse_structured('{"ids": [], "kind": "c"}', schema)
    with pytest.raises(ParseError, match="expected integer"):
        parse_structured('{"ids": [true]}', schema)


def test_json_schema_for() -> None:
    s = json_schema_for(Verdict)
    assert s["required"] == ["label", "score"]
    assert json_schema_for({"type": "object"}) == {"type": "object"}
    with pytest.raises(TypeError):
        json_schema_for(int)  # type: ignore[arg-type]


def test_a_line_break_typed_inside_a_string_is_repaired() -> None:
    reply = '{"answer": "Menthol binds TRPM8.\nThat receptor also senses cold.", "ok": true}'
    value, repairs = extract_json(reply)
    assert value == {"answer": "Menthol binds TRPM8.\nThat receptor also senses cold.", "ok": True}
    assert repairs == ["control_characters"]


def test_replies_with_a_draft_an_example_comments_or_mixed_quotes() -> None:
    """Shapes reasoning and chatty models write: a <think> draft, the prompt's example echoed before the answer,
    // comments, a Python dict whose double-quoted string holds an apostrophe, a nesting too deep to read."""
    from pydantic import BaseModel

    class Overlap(BaseModel):
        overlap: bool
        reason: str

    think = '<think>Maybe {"overlap": false, "reason": "draft"}? No: they share the cause.</think>\n' \
            '{"overlap": true, "reason": "both describe telomere shortening"}'
    assert parse_structured(think, Overlap)[0].overlap is True
    example = ('The format is {"overlap": <true|false>, "reason": "..."}. My answer:\n'
               '{"overlap": false, "reason": "different mechanisms"}')
    assert parse_structured(example, Overlap)[0].reason == "different mechanisms"
    echoed = ('For example: {"overlap": true, "reason": "the two aspects name the same process"}\n\n'
              'Here: {"overlap": false, "reason": "different mechanisms"}')
    value, repairs = parse_structured(echoed, Overlap)
    assert (value.overlap, value.reason) == (False, "different mechanisms") and "several_values" in repairs
    commented = '{\n  "overlap": true, // they share one cause\n  "reason": "same pathway: see http://x.org/a"\n}'
    value, repairs = parse_structured(commented, Overlap)
    assert value.reason == "same pathway: see http://x.org/a" and "comments" in repairs
    mixed = "{'overlap': False, 'reason': \"it doesn't share a mechanism\"}"
    assert parse_structured(mixed, Overlap)[0].reason == "it doesn't share a mechanism"
    with pytest.raises(ParseError, match="nested too deep"):
        extract_json("[" * 100_000 + "]" * 100_000)
    chatter = '{"document": 3} - candidate [3] fits best'
    assert extract_json(chatter)[0] == {"document": 3}
