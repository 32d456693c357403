"""``fit_query`` with simple counting tokenizers: which parts of a too-long query survive, and its statuses."""

from __future__ import annotations

import pickle
import random

from convrag.retrievers.query_text import FITS, TAIL_CUT, TRIMMED, QueryText, fit_query


def words(text: str) -> int:
    """A word-count tokenizer with two special tokens (like [CLS] ... [SEP])."""
    return len(text.split()) + 2


def line(i: int) -> str:
    return " ".join(f"h{i}w{j}" for j in range(5))  # 5 words, distinct per line


TAIL = ("User: current query here", "Reasoning: r1 r2")  # 4 + 3 words


def test_query_text_is_a_str_that_keeps_its_parts() -> None:
    q = QueryText([" old ", "", "recent"], ["User: now", "  "])
    assert q == "old\nrecent\nUser: now" and isinstance(q, str)
    assert q.history == ("old", "recent") and q.tail == ("User: now",)
    back = pickle.loads(pickle.dumps(q))
    assert back == q and back.history == q.history and back.tail == q.tail


def test_fitting_text_is_unchanged() -> None:
    q = QueryText([line(0)], TAIL)
    assert fit_query(q, words, 100) == (q, FITS)
    assert fit_query(q, words, words(q)) == (q, FITS)  # exactly at the limit
    assert fit_query("a plain query", words, 5) == ("a plain query", FITS)


def test_long_history_drops_oldest_lines_and_keeps_the_end_of_the_partial_one() -> None:
    q = QueryText([line(i) for i in range(10)], TAIL)
    limit = 2 + 7 + 2 * 5 + 3  # tail, two whole lines, three words of a third
    fitted, status = fit_query(q, words, limit)
    assert status == TRIMMED and words(fitted) == limit
    assert fitted == "\n".join(["h7w2 h7w3 h7w4", line(8), line(9), *TAIL])  # END of line 7 kept
    assert fitted.endswith("\n".join(TAIL))  # current query and reasoning intact, last
    assert "h6w" not in fitted and "h7w0" not in fitted and "h7w1" not in fitted
    # budget for whole lines only: no partial line is added
    whole, status = fit_query(q, words, 2 + 7 + 2 * 5)
    assert status == TRIMMED and whole == "\n".join([line(8), line(9), *TAIL])
    # budget for the tail alone: every history line dropped, the tail whole
    assert fit_query(q, words, 2 + 7) == ("\n".join(TAIL), TRIMMED)


def test_tail_too_long_is_cut_at_its_end_with_the_query_first() -> None:
    query = "User: " + " ".join(f"q{j}" for j in range(10))  # 11 words
    reasoning = "Reasoning: " + " ".join(f"r{j}" for j in range(30))
    q = QueryText([line(i) for i in range(3)], [query, reasoning])
    fitted, status = fit_query(q, words, 2 + 20)
    assert status == TAIL_CUT and words(fitted) <= 22
    assert fitted.startswith(query + "\n") and "h0w" not in fitted  # no history, the whole query first
    assert "\n".join(q.tail).startswith(fitted)  # a prefix: cut at the end


def test_plain_str_too_long_is_cut_at_its_end() -> None:
    text = " ".join(f"w{j}" for j in range(50))
    fitted, status = fit_query(text, words, 12)
    assert status == TAIL_CUT and fitted == " ".join(f"w{j}" for j in range(10))


def test_text_without_spaces_is_cut_by_characters_not_lost() -> None:
    """Bug fix: a too-long text with no space (URL, CJK) used to come back empty."""

    def chars(text: str) -> int:
        return len(text) + 2

    fitted, status = fit_query("x" * 50, chars, 12)
    assert status == TAIL_CUT and fitted == "x" * 10
    q = QueryText(["a" * 40], ["User: why"])  # the partial history line is cut by characters too, keeping its end
    fitted, status = fit_query(q, chars, 2 + 20)
    assert status == TRIMMED and fitted == "a" * 10 + "\nUser: why" and chars(fitted) == 22


def test_fitted_length_never_exceeds_the_limit_and_tail_survives_when_it_fits() -> None:
    rng = random.Random(0)
    for _ in range(200):
        hist = [" ".join(f"h{i}_{j}" for j in range(rng.randint(1, 12))) for i in range(rng.randint(0, 15))]
        tail = [" ".join(f"t{i}_{j}" for j in range(rng.randint(1, 8))) for i in range(rng.randint(1, 3))]
        q = QueryText(hist, tail)
        limit = rng.randint(3, 80)
        fitted, status = fit_query(q, words, limit)
        assert words(fitted) <= limit or fitted == ""
        if words("\n".join(q.tail)) <= limit:
            assert fitted.endswith("\n".join(q.tail)) and status in (FITS, TRIMMED)
            kept = fitted.split("\n")[: -len(q.tail)]
            # what is kept of the history is its end (the first kept line possibly cut from its start)
            assert "\n".join(q.history).endswith("\n".join(kept))
        else:
            assert status == TAIL_CUT and "\n".join(q.tail).startswith(fitted)


def test_a_conversation_text_keeps_its_separator_when_fitted_and_pickled() -> None:
    # the ``conversation`` strategy's text (mteb's ``role: content`` parts joined by "; "): oldest messages go first
    q = QueryText(["user: q1 about it", "assistant: a1 long answer here"], ["user: q2 now"], sep="; ")
    assert q == "user: q1 about it; assistant: a1 long answer here; user: q2 now" and q.sep == "; "
    back = pickle.loads(pickle.dumps(q))
    assert back == q and back.sep == "; " and back.history == q.history
    fitted, status = fit_query(q, words, words("answer here; user: q2 now"))
    assert (fitted, status) == ("answer here; user: q2 now", TRIMMED)
