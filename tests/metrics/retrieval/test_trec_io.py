"""TREC run / qrels and BEIR qrels files: round trips, agreement with pytrec_eval's readers, file:line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytrec_eval

import convrag.metrics.retrieval.trec as trec
from convrag.metrics.retrieval.compute import RetrievalInputError, score_run
from convrag.metrics.retrieval.trec import (
    TrecFormatError,
    read_beir_qrels,
    read_qrels,
    read_run,
    safe_token,
    write_beir_qrels,
    write_qrels,
    write_run,
)

RUN = {
    "q1": {"d1": 0.5, "d2": 1.5, "d3": 1.5, "D4": 1.5, "d5": -3.25, "d6": 1e-300, "d7": 0.1 + 0.2},
    "q2": {"x": 7, "y": 2.0},
    "q10": {},
}
QRELS = {"q1": {"d2": 2, "d5": 0, "d9": -1, "d7": 1}, "q2": ["x"], "q3": {"z": 3}}


@pytest.mark.parametrize("name", ["run.trec", "run.trec.gz"])
def test_run_round_trip(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    write_run(RUN, path, tag="sys-1")
    back = read_run(path)
    assert back == {q: {d: float(s) for d, s in r.items()} for q, r in RUN.items() if r}
    assert list(back["q1"]) == ["d3", "d2", "D4", "d1", "d7", "d6", "d5"]  # trec_eval order, ties by id desc
    assert score_run(back, QRELS).values.tolist() == score_run(RUN, QRELS).values.tolist()


def test_run_file_layout_and_pytrec_eval_reader(tmp_path: Path) -> None:
    path = tmp_path / "run.txt"
    write_run(RUN, path)
    lines = path.read_text().splitlines()
    assert lines[0] == "q1 Q0 d3 1 1.5 convrag"
    assert lines[-1] == "q2 Q0 y 2 2.0 convrag"
    assert [line.split()[3] for line in lines[:7]] == [str(i) for i in range(1, 8)]
    with open(path) as handle:
        assert pytrec_eval.parse_run(handle) == read_run(path)


def test_ranked_lists_and_depth(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    write_run({"q": ["c", "a", "b"]}, path, depth=2)
    assert read_run(path) == {"q": {"c": 3.0, "a": 2.0}}
    assert score_run(read_run(path), {"q": ["a"]}, measures=["MRR"])["MRR"] == 0.5


@pytest.mark.parametrize("name", ["qrels.txt", "qrels.txt.gz"])
def test_qrels_round_trip(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    write_qrels(QRELS, path)
    expected = {"q1": QRELS["q1"], "q2": {"x": 1}, "q3": {"z": 3}}
    assert read_qrels(path) == expected
    if not name.endswith(".gz"):
        assert path.read_text().splitlines()[0] == "q1 0 d2 2"
        with open(path) as handle:
            assert pytrec_eval.parse_qrel(handle) == expected


def test_beir_qrels(tmp_path: Path) -> None:
    path = tmp_path / "test.tsv"
    write_beir_qrels(QRELS, path)
    assert path.read_text().splitlines()[:2] == ["query-id\tcorpus-id\tscore", "q1\td2\t2"]
    assert read_beir_qrels(path) == {"q1": QRELS["q1"], "q2": {"x": 1}, "q3": {"z": 3}}
    bare = tmp_path / "bare.tsv"
    bare.write_text("\nq 1\tdoc a\t1\r\nq 1\tdoc b\t0.0\n")  # no header, ids with spaces, CRLF, "0.0"
    assert read_beir_qrels(bare) == {"q 1": {"doc a": 1, "doc b": 0}}


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "run"
    path.write_text("\nq1 Q0 d1 1 2 t\n   \nq1 Q0 d2 2 1e-3 t\n")
    assert read_run(path) == {"q1": {"d1": 2.0, "d2": 0.001}}


@pytest.mark.parametrize(
    ("reader", "text", "line", "match"),
    [
        (read_run, "q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 1.0\n", 2, "expected 6 fields"),
        (read_run, "q1 Q0 d1 1 2.0 t\n\nq1 Q0 d2 2 high t\n", 3, "score is not a number: 'high'"),
        (read_run, "q1 Q0 d1 1 nan t\n", 1, "NaN"),
        (read_run, "q1 Q0 d1 first 2.0 t\n", 1, "rank is not a number"),
        (read_run, "q1 Q0 d1 1.5 2.0 t\n", 1, "rank is not an integer"),
        (read_run, "q1 Q0 d1 1 2.0 t\nq2 Q0 d1 1 2.0 t\nq1 Q0 d1 3 1.0 t\n", 3, "'d1' appears twice for query 'q1'"),
        (read_qrels, "q1 0 d1 1\nq1 0 d2\n", 2, "expected 4 fields"),
        (read_qrels, "q1 0 d1 relevant\n", 1, "grade is not a number"),
        (read_qrels, "q1 0 d1 1.5\n", 1, "grade is not an integer"),
        (read_qrels, "q1 0 d1 1\nq1 0 d1 2\n", 2, "appears twice"),
        (read_beir_qrels, "query-id\tcorpus-id\tscore\nq1\td1\n", 2, "expected 3 fields"),
        (read_beir_qrels, "query-id\tcorpus-id\tscore\nq1\td1\tyes\n", 2, "score is not a number"),
        (read_beir_qrels, "q1\td1\t1\nquery-id\tcorpus-id\tscore\n", 2, "score is not a number"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path: Path, reader, text: str, line: int, match: str) -> None:
    path = tmp_path / "input.txt"
    path.write_text(text)
    with pytest.raises(TrecFormatError, match=match) as info:
        reader(path)
    assert str(info.value).startswith(f"{path}:{line}: ")
    assert (info.value.path, info.value.line) == (str(path), line)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("writer", "data", "kwargs", "match"),
    [
        (write_run, {"q": {"a b": 1.0}}, {}, "doc id"),
        (write_run, {"q 1": {"a": 1.0}}, {}, "query id"),
        (write_run, {"q": {"a": 1.0}}, {"tag": "my tag"}, "tag"),
        (write_run, {"q": {"a": float("nan")}}, {}, "'q'.*number"),
        (write_run, {"q": {"a": "1"}}, {}, "'q'.*number"),
        (write_run, {"q": ["a", "a"]}, {}, "'q'.*duplicate"),
        (write_qrels, {"q": {"a": 1.5}}, {}, "'q'.*integer"),
        (write_qrels, {"q": {"a\tb": 1}}, {}, "doc id"),
        (write_beir_qrels, {"q": {"a\tb": 1}}, {}, "doc id"),
    ],
)
def test_write_errors(tmp_path: Path, writer, data, kwargs, match: str) -> None:
    with pytest.raises(RetrievalInputError, match=match):
        writer(data, tmp_path / "out", **kwargs)


def test_safe_token_gives_a_tag_and_file_name_write_run_accepts(tmp_path: Path) -> None:
    assert safe_token("dense:/models/x y|history+reasoning") == "dense__models_x_y_history+reasoning"
    assert safe_token("bm25__lastturn.v2-a") == "bm25__lastturn.v2-a"
    tag = safe_token("hybrid|rewrite (0.5)")
    write_run({"q1": {"d1": 1.0}}, tmp_path / f"{tag}.trec", tag=tag)
    assert (tmp_path / f"{tag}.trec").read_text().split()[-1] == tag


def test_column_reader_equals_the_line_reader_and_pytrec_eval(tmp_path: Path) -> None:
    """Queries interleaved, ids pandas would read as missing or quoted, tabs and runs of spaces, CRLF, a BOM: the
    column-wise reader gives what the line reader and pytrec_eval's parser give, in the same order."""
    lines = ["\ufeffq2 Q0 NA 1 1.5 t", "q1 Q0 null 1 2 t", "q2\tQ0  \"x 2 -1e-3 t\r", "", "q1 Q0 # 2 0.1 t",
             "q10 Q0 d1 1 3.0000000000000004 t", "q2 Q0 N/A 3 1e-310 t"]  # fmt: skip
    path = tmp_path / "run.trec"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert trec._run_columns(path) is not None  # the fast path, not the fallback
    expected = {"q2": {"NA": 1.5, '"x': -1e-3, "N/A": 1e-310}, "q1": {"null": 2.0, "#": 0.1},
                "q10": {"d1": 3.0000000000000004}}  # fmt: skip
    assert read_run(path) == trec._read_run_lines(path) == expected
    assert [list(r) for r in read_run(path).values()] == [list(r) for r in expected.values()]
    assert list(read_run(path)) == list(expected)


@pytest.mark.parametrize("text", ["q1 Q0 d1 1 inf t\n", "q1 Q0 d1 1.0 2 t\n", "q1 Q0 d1 1 -inf t\nq1 Q0 d2 2 1 t\n"])
def test_rare_fields_are_read_like_the_line_reader(tmp_path: Path, text: str) -> None:
    """Infinite scores (left to the line reader) and a rank written 1.0 (an integer) are read as before."""
    path = tmp_path / "run"
    path.write_text(text)
    assert (trec._run_columns(path) is None) == ("inf" in text)
    assert read_run(path) == trec._read_run_lines(path)


def test_empty_run_file(tmp_path: Path) -> None:
    path = tmp_path / "run"
    path.write_text("\n\n")
    assert read_run(path) == {}
