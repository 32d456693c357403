"""Query strategies: exact text layouts, the rewrite through the LLM layer (cache, failures), turn records."""

from __future__ import annotations

from pathlib import Path

import datasets
import pytest

from convrag.core.errors import ConvragError, DataError
from convrag.hub.export import export_benchmark
from convrag.llm import LLM, DiskCache, RetryPolicy
from convrag.llm.backends.fake import FakeBackend
from convrag.llm.types import BackendError
from convrag.retrievers.strategies import (
    PAPER_STRATEGIES,
    ReasoningMetadata,
    RewriteError,
    Turn,
    available_strategies,
    clean_rewrite,
    format_queries,
    get_strategy,
    mtrag_turns,
    parse_history,
    recor_turns,
    render_history,
)
from tests.conftest import DATA

TURN = Turn(
    qid="d:c:2", query="  Does it fly?  ", history=(("user", "What is a drone?"), ("assistant", "A flying robot.")),
    reasoning="Find documents on drone flight.", position=2, conversation_id="d:c", domain="d",
    metadata=ReasoningMetadata("Documents should explain lift.", ("rotor lift", "thrust"), ("batteries",)),
)  # fmt: skip
FIRST = Turn(qid="d:c:1", query="What is a drone?", history_text="No previous conversation.", reasoning="R1.")


def make_llm(backend: FakeBackend, tmp_path: Path) -> LLM:
    return LLM(backend, cache=DiskCache(tmp_path / "cache"), retry=RetryPolicy(max_retries=0), sleep=lambda s: None)


def test_registry() -> None:
    assert available_strategies()[:5] == list(PAPER_STRATEGIES)
    assert "reasoning-metadata" in available_strategies()
    assert get_strategy("History+Reasoning").name == "history+reasoning"
    with pytest.raises(ConvragError, match="unknown query strategy 'nope'"):
        get_strategy("nope")


def test_exact_layouts() -> None:
    history = "Q: What is a drone?\nA: A flying robot."
    expected = {
        "baseline": "Does it fly?",
        "reasoning": "Does it fly?\nFind documents on drone flight.",
        "history": f"{history}\nDoes it fly?",
        "history+reasoning": f"{history}\nDoes it fly?\nFind documents on drone flight.",
        "reasoning-metadata": "Does it fly?\nDocuments should explain lift.\nrotor lift; thrust",
    }
    for name, text in expected.items():
        assert get_strategy(name).format(TURN) == text, name
    # the release's own history string is used verbatim; "No previous conversation." means none
    verbatim = Turn(qid="x", query="q?", history_text="Q: a\nA: b\nmore b", reasoning="r")
    assert get_strategy("history+reasoning").format(verbatim) == "Q: a\nA: b\nmore b\nq?\nr"
    assert get_strategy("history").format(FIRST) == get_strategy("baseline").format(FIRST) == "What is a drone?"
    assert get_strategy("reasoning").format(FIRST) == "What is a drone?\nR1."
    assert get_strategy("reasoning-metadata").format(FIRST) == "What is a drone?"  # no metadata: query only


def test_history_render_and_parse_round_trip() -> None:
    text = render_history(TURN.history)
    assert text == "Q: What is a drone?\nA: A flying robot."
    assert parse_history(text) == list(TURN.history)
    assert parse_history("Q: a\nA: b\nsecond line\nQ: c") == [("user", "a"), ("assistant", "b\nsecond line"),
                                                              ("user", "c")]  # fmt: skip
    assert clean_rewrite('\n  Query: "drone lift"\nextra') == "drone lift"
    assert clean_rewrite("**Search query:** x y") == "x y"


def test_rewrite_through_fake_llm_is_cached(tmp_path: Path) -> None:
    backend = FakeBackend(responder=lambda m: "Search query: does a drone fly\nbecause ...")
    result = format_queries("rewrite", [FIRST, TURN], llm=make_llm(backend, tmp_path), progress=False)
    assert result.texts == {"d:c:1": "What is a drone?", "d:c:2": "does a drone fly"}
    assert result.llm_calls == 1 and len(backend.calls) == 1  # turn 1 has no history: not sent
    sent = backend.calls[0]["messages"][-1]["content"]
    assert "user: What is a drone?" in sent and "assistant: A flying robot." in sent and "Does it fly?" in sent
    again = FakeBackend(responder=lambda m: "other")
    second = format_queries("rewrite", [FIRST, TURN], llm=make_llm(again, tmp_path), progress=False)
    assert second.texts == result.texts and again.calls == []


def test_rewrite_failures_are_counted_and_explicit(tmp_path: Path) -> None:
    turns = [TURN, Turn(qid="d:c:3", query="And in rain?", history_text="Q: x\nA: y"),
             Turn(qid="d:c:4", query="Why?", history_text="Q: x\nA: z")]  # fmt: skip

    def responder(messages):
        content = messages[-1]["content"]
        if "Why?" in content:
            return "   \n  "  # an empty reply is a failure, not a query
        if "rain" in content:
            raise BackendError("bad request", kind="client_error")
        return "drone flight"

    with pytest.raises(RewriteError, match="failed for 2 of 3 turns"):
        format_queries("rewrite", turns, llm=make_llm(FakeBackend(responder=responder), tmp_path), progress=False)
    result = format_queries("rewrite", turns, llm=make_llm(FakeBackend(responder=responder), tmp_path),
                            progress=False, on_failure="baseline")  # fmt: skip
    assert sorted(result.failures) == ["d:c:3", "d:c:4"] and sorted(result.fallbacks) == ["d:c:3", "d:c:4"]
    assert result.texts == {"d:c:2": "drone flight", "d:c:3": "And in rain?", "d:c:4": "Why?"}
    assert result.to_dict()["failures"].keys() == {"d:c:3", "d:c:4"}
    with pytest.raises(ConvragError, match="needs an LLM"):
        get_strategy("rewrite").format(TURN)
    with pytest.raises(ConvragError, match="on_failure"):
        format_queries("rewrite", turns, llm="fake", on_failure="skip")
    with pytest.raises(DataError, match="duplicate turn ids"):
        format_queries("baseline", [TURN, TURN])


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("recor") / "out"
    export_benchmark("recor", out, options={"source": str(DATA / "recor" / "sample")})
    return out


def _rows(folder: Path, config: str) -> list[dict]:
    return datasets.load_dataset(str(folder), config, split="test").to_list()


def test_recor_turns_from_the_built_sample(sample: Path) -> None:
    queries, convs = _rows(sample, "all-queries"), _rows(sample, "all-conversations")
    turns = recor_turns(queries, convs)
    assert len(turns) == 13 and len({t.qid for t in turns}) == 13
    by_id = {t.qid: t for t in turns}
    t = by_id["drones:ex_3025:2"]
    assert t.position == 2 and t.domain == "drones" and t.conversation_id == "drones:ex_3025"
    assert t.query == "Is it really that easy for dirt to get in and mess things up if there's oil on those parts?"
    assert t.metadata.relevance_signals == ("lubricant attracting dust", "impact of contamination on motor performance")
    assert t.metadata.irrelevance_signals[0] == "lubrication of internal bearings only"
    assert t.history_string().startswith("Q: In FPV drone motors, why is lubrication only used inside the bearings")
    assert t.history_messages()[0][0] == "user" and t.history_messages()[1][0] == "assistant"
    first = by_id["drones:ex_3025:1"]
    assert first.history_string() == "" and get_strategy("history").format(first) == first.query
    assert get_strategy("reasoning").format(t) == t.query + "\n" + t.reasoning
    # without conversations there is no metadata; a query whose conversation turn is missing is an error
    assert recor_turns(queries)[0].metadata is None
    with pytest.raises(DataError, match="has no turn 9"):
        recor_turns([{**queries[0], "turn": 9}], convs)


def test_mtrag_task_rows() -> None:
    rows = [{"task_id": "t1", "conversation_id": "c", "turn": 2, "domain": "clapnq", "question": "And her age?",
             "input": [{"speaker": "user", "text": "Who is she?"}, {"speaker": "agent", "text": "A singer."},
                       {"speaker": "user", "text": "And her age?"}]}]  # fmt: skip
    (turn,) = mtrag_turns(rows)
    assert turn.history == (("user", "Who is she?"), ("assistant", "A singer."))
    assert get_strategy("history").format(turn) == "Q: Who is she?\nA: A singer.\nAnd her age?"
    assert get_strategy("reasoning").format(turn) == "And her age?"
    with pytest.raises(DataError, match="must end with a user message"):
        mtrag_turns([{"task_id": "t2", "input": [{"speaker": "agent", "text": "hi"}]}])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_rewrite_with_the_default_local_llm(sample: Path, tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="the default backend needs llama-cpp-python")
    from convrag.llm import get_llm

    turns = [t for t in recor_turns(_rows(sample, "law-queries")) if t.position > 1]
    llm = get_llm("default", cache=tmp_path)
    result = format_queries("rewrite", turns, llm=llm, progress=False)
    assert result.llm_calls == len(turns) == 2 and not result.failures
    assert all(text.strip() for text in result.texts.values())
