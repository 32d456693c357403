"""Issue 12 for `convrag evaluate` and the retrieval metric: every bad run, submission, folder or argument is one
error line naming the file (and line), exit code 2 and no results folder; partial runs, unknown documents of a
partial corpus and placeholder LLMs are scored but reported; results follow the files on disk.

Bad inputs are derived in tmp_path from folders built from the real files in ../shared/data.
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from convrag.benchmarks.mtrag.scoring import check_submission
from convrag.cli import main
from convrag.core.provenance import local_path
from convrag.hub.export import export_benchmark
from convrag.llm.identity import placeholder_llm
from tests.conftest import DATA, REPO

DEV = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"
MTRAG = DATA / "mtrag"
MTRAG_DOMAINS = ("clapnq", "govt")
FAST = ["--bootstrap", "10", "--no-progress"]


# ---------------------------------------------------------------- fixtures: folders built from the real files


@pytest.fixture(scope="module")
def strat(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("trust-eval") / "stratrag"
    export_benchmark("stratrag", out, options={"source": str(DEV)})
    return out


def _table(folder: Path, config: str) -> tuple[Path, list[dict]]:
    path = next((folder / config).glob("*.parquet"))
    return path, pq.read_table(path).to_pylist()


@pytest.fixture(scope="module")
def strat_run(strat, tmp_path_factory) -> Path:
    """A valid run over the StratRAG build: every query ranks its own 15-document pool."""
    _, queries = _table(strat, "queries")
    path = tmp_path_factory.mktemp("runs") / "pool.trec"
    lines = [f"{q['_id']} Q0 {doc} {rank} {16 - rank}.5 mine" for q in queries for rank, doc in
             enumerate(q["pool"], start=1)]  # fmt: skip
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def mtrag(tmp_path_factory) -> tuple[Path, Path]:
    """An MTRAG build of two domains (cited corpus) and the official-format submission evaluate wrote for BM25."""
    root = tmp_path_factory.mktemp("trust-mtrag")
    configs = [f"{d}-{v}" for d in MTRAG_DOMAINS for v in ("lastturn", "qrels", "cited-corpus")]
    export_benchmark("mtrag", root / "mtrag", configs=configs, options={"source": str(MTRAG)})
    assert main(["evaluate", str(root / "mtrag"), "--retrievers", "bm25", *FAST, "--out", str(root / "res")]) == 0
    return root / "mtrag", root / "res" / "runs" / "bm25__lastturn.jsonl"


def _evaluate(capsys, folder: Path, out: Path, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["evaluate", str(folder), *args, *FAST, "--out", str(out)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _assert_one_line_error(code: int, err: str, out: Path, *expected: str) -> None:
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("convrag evaluate: error: ")
    for text in expected:
        assert text in err, (text, err)
    assert not out.exists()  # nothing written on an error


# ---------------------------------------------------------------- class 3: results follow the files on disk


def test_replaced_qrels_change_the_next_evaluation_and_deleted_ones_are_an_error(strat, tmp_path, capsys):
    folder = tmp_path / "stratrag"
    shutil.copytree(strat, folder)
    code, _, _ = _evaluate(capsys, folder, tmp_path / "r1", "--retrievers", "bm25")
    assert code == 0
    before = json.loads((tmp_path / "r1" / "results.json").read_text())["systems"]["bm25"]["overall"]
    # other valid qrels, README untouched: each query's gold documents become two of its distractors
    path, rows = _table(folder, "qrels")
    _, queries = _table(folder, "queries")
    pools = {q["_id"]: q["pool"] for q in queries}
    schema = pq.read_schema(path)
    swapped = [{**r, "corpus-id": pools[r["query-id"]][2 + pools[r["query-id"]].index(r["corpus-id"])]} for r in rows]
    pq.write_table(pa.Table.from_pylist(swapped, schema=schema), path)
    code, _, _ = _evaluate(capsys, folder, tmp_path / "r2", "--retrievers", "bm25")
    assert code == 0
    after = json.loads((tmp_path / "r2" / "results.json").read_text())["systems"]["bm25"]["overall"]
    assert after["MRR"]["mean"] != before["MRR"]["mean"] and after["Recall@5"]["mean"] != before["Recall@5"]["mean"]
    path.unlink()
    code, _, err = _evaluate(capsys, folder, tmp_path / "r3", "--retrievers", "bm25")
    _assert_one_line_error(code, err, tmp_path / "r3", str(folder), "'qrels'", "no data file matches qrels/valid")


def test_a_second_evaluation_into_the_same_folder_leaves_no_stale_run(strat, tmp_path, capsys):
    out = tmp_path / "res"
    assert _evaluate(capsys, strat, out, "--retrievers", "random,bm25")[0] == 0
    assert (out / "runs" / "random.trec").exists()
    (out / "notes.txt").write_text("mine")  # not ours: kept
    assert _evaluate(capsys, strat, out, "--retrievers", "bm25")[0] == 0
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["bm25.trec", "qrels.trec"]
    assert (out / "notes.txt").read_text() == "mine" and not list(out.glob(".convrag-tmp-*"))
    assert json.loads((out / "results.json").read_text())["files"] == ["results.json", "results.md", "runs/bm25.trec",
                                                                      "runs/qrels.trec"]


# ---------------------------------------------------------------- classes 4, 6, 7: run files


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _edit(line_no: int, edit: Callable[[str], str]) -> Callable[[Path, Path], None]:
    def make(good: Path, bad: Path) -> None:
        lines = _lines(good)
        lines[line_no - 1] = edit(lines[line_no - 1])
        bad.write_text("\n".join(lines) + "\n", encoding="utf-8")

    return make


def _field(index: int, value: str) -> Callable[[str], str]:
    return lambda line: " ".join(value if i == index else f for i, f in enumerate(line.split()))


def _non_utf8(good: Path, bad: Path) -> None:
    data = good.read_bytes().split(b"\n")
    data[6] = data[6].replace(b" Q0 ", b" Q\xff0 ")
    bad.write_bytes(b"\n".join(data))


def _truncated_gz(good: Path, bad: Path) -> None:
    bad.write_bytes(gzip.compress(good.read_bytes())[:300])


RUN_CASES = {  # name -> (file name, how it is made from the good run, expected text, line or None)
    "non-UTF-8 byte": ("run.trec", _non_utf8, "not UTF-8 text", 7),
    "5 columns": ("run.trec", _edit(4, lambda line: line.replace(" Q0", "")), "expected 6 fields", 4),
    "non-numeric score": ("run.trec", _edit(5, _field(4, "high")), "score is not a number: 'high'", 5),
    "NaN score": ("run.trec", _edit(6, _field(4, "nan")), "score is NaN", 6),
    "non-numeric rank": ("run.trec", _edit(7, _field(3, "seven")), "rank is not a number", 7),
    "duplicate pair": ("run.trec", lambda g, b: b.write_text(g.read_text() + _lines(g)[0] + "\n"), "appears twice",
                       451),
    "unknown query id": ("run.trec", _edit(16, _field(0, "val_999999")), "unknown query id 'val_999999'", 16),
    "unknown document": ("run.trec", _edit(3, _field(2, "doc_99999999_00")), "unknown doc ids ['doc_99999999_00']", 3),
    "document of another query's pool": ("run.trec", _edit(17, _field(2, "doc_00002000_03")),
                                         "is not in the candidate pool of query 'val_000001'", 17),
    "empty run": ("run.trec", lambda g, b: b.write_text(""), "ranks no query", None),
    "truncated gzip": ("run.trec.gz", _truncated_gz, "gzip data is truncated or corrupt", None),
    "not gzip": ("run.trec.gz", lambda g, b: b.write_bytes(g.read_bytes()), "gzip data is truncated or corrupt", None),
    "missing file": ("nope.trec", lambda g, b: None, "no such file", None),
    "a folder": ("adir", lambda g, b: b.mkdir(), "is a folder, not a file", None),
}  # fmt: skip


@pytest.mark.parametrize("case", list(RUN_CASES))
def test_bad_run_files_are_one_line_naming_file_and_line(case, strat, strat_run, tmp_path, capsys):
    name, make, expected, line = RUN_CASES[case]
    bad = tmp_path / name
    make(strat_run, bad)
    out = tmp_path / "res"
    code, _, err = _evaluate(capsys, strat, out, "--retrievers", "bm25", "--run", f"mine={bad}")
    where = f"{bad}:{line}: " if line else f"{bad}: "
    _assert_one_line_error(code, err, out, where, expected)


# ---------------------------------------------------------------- classes 4, 6, 7: MTRAG submissions


def _items(path: Path) -> list[dict]:
    return [json.loads(line) for line in _lines(path)]


def _write(path: Path, items: list) -> None:
    path.write_text("".join((i if isinstance(i, str) else json.dumps(i)) + "\n" for i in items), encoding="utf-8")


def _changed(index: int, change: Callable[[dict], object]) -> Callable[[list[dict]], list]:
    def make(items: list[dict]) -> list:
        change(items[index])
        return items

    return make


def _other_domain_doc(items: list[dict]) -> list[dict]:
    govt = next(i for i in items if "govt" in i["Collection"])
    items[0]["contexts"][0]["document_id"] = govt["contexts"][0]["document_id"]
    return items


GOVT = "mt-rag-govt-elser-512-100-20240611"
SUBMISSION_CASES = {  # name -> (make the items from the good ones, expected text, line or None)
    "task under another collection": (_changed(0, lambda i: i.update(Collection=GOVT)), "is filed under collection",
                                      1),
    "document of another domain": (_other_domain_doc, "is in the 'govt' corpus", 1),
    "11 contexts": (_changed(2, lambda i: i["contexts"].append({"document_id": "x", "score": 0.0})),
                    "too many contexts (11)", 3),
    "no contexts field": (_changed(3, lambda i: i.pop("contexts")), "missing required field 'contexts'", 4),
    "context without score": (_changed(3, lambda i: i["contexts"][1].pop("score")), "contexts[1] missing 'score'", 4),
    "string score": (_changed(4, lambda i: i["contexts"][0].update(score="1")), "score must be a finite number", 5),
    "boolean score": (_changed(4, lambda i: i["contexts"][0].update(score=True)), "got True", 5),
    "repeated document": (_changed(5, lambda i: i["contexts"][1].update(document_id=i["contexts"][0]["document_id"])),
                          "repeats document", 6),
    "invalid JSON": (lambda items: items[:4] + ["{broken"] + items[5:], "invalid JSON", 5),
    "array line": (lambda items: items[:4] + [json.dumps([items[4]])] + items[5:], "expected a JSON object", 5),
    "unknown collection": (_changed(1, lambda i: i.update(Collection="banking")), "unknown MTRAG collection", 2),
    "unknown task": (_changed(6, lambda i: i.update(task_id="f" * 32 + "<::>3")), "is not in the input", 7),
    "task submitted twice": (lambda items: items + items[:1], "already submitted on line 1", None),
    "one task of all": (lambda items: items[:1], "1 tasks submitted, the input has", None),
    "empty file": (lambda items: [], "0 tasks submitted", None),
}  # fmt: skip


@pytest.mark.parametrize("case", list(SUBMISSION_CASES))
def test_bad_submissions_are_one_line_naming_file_and_line(case, mtrag, tmp_path, capsys):
    folder, good = mtrag
    make, expected, line = SUBMISSION_CASES[case]
    bad = tmp_path / "sub.jsonl"
    items = make(_items(good))
    _write(bad, items)
    if case == "task submitted twice":
        line = len(items)
    out = tmp_path / "res"
    code, _, err = _evaluate(capsys, folder, out, "--retrievers", "", "--submission", f"sub={bad}")
    _assert_one_line_error(code, err, out, f"{bad}:{line}: " if line else f"{bad}: ", expected)


def _trec_from_submission(good: Path, bad: Path, edit: Callable[[list[str], list[dict]], list[str]]) -> None:
    items = _items(good)
    lines = [f"{i['task_id']} Q0 {c['document_id']} {r} {c['score']} bm25" for i in items
             for r, c in enumerate(i["contexts"], start=1)]  # fmt: skip
    bad.write_text("\n".join(edit(lines, items)) + "\n", encoding="utf-8")


def _govt_doc_first(lines: list[str], items: list[dict]) -> list[str]:
    """The first line (a clapnq task) ranks a document of the govt corpus."""
    doc = next(i for i in items if "govt" in i["Collection"])["contexts"][0]["document_id"]
    assert "clapnq" in items[0]["Collection"]
    lines[0] = " ".join(doc if i == 2 else f for i, f in enumerate(lines[0].split()))
    return lines


MTRAG_RUN_CASES = {  # name -> (edit of the run lines, expected text, line)
    "document of another domain": (_govt_doc_first, "is in the 'govt' corpus", 1),
    "task in two spellings": (lambda lines, _: [*lines, lines[0].replace("<::>", "::", 1)], "appears twice", -1),
    "unknown task": (lambda lines, _: [lines[0].replace(lines[0].split()[0], "f" * 32 + "<::>9"), *lines[1:]],
                     "unknown query id", 1),
}  # fmt: skip


@pytest.mark.parametrize("case", list(MTRAG_RUN_CASES))
def test_bad_mtrag_runs(case, mtrag, tmp_path, capsys):
    folder, good = mtrag
    edit, expected, line = MTRAG_RUN_CASES[case]
    bad = tmp_path / "run.trec"
    _trec_from_submission(good, bad, edit)
    line = len(_lines(bad)) if line == -1 else line
    out = tmp_path / "res"
    code, _, err = _evaluate(capsys, folder, out, "--retrievers", "", "--run", f"r={bad}")
    _assert_one_line_error(code, err, out, f"{bad}:{line}: ", expected)


def test_unknown_documents_of_the_cited_corpus_are_counted(mtrag, tmp_path, capsys):
    folder, good = mtrag
    run = tmp_path / "run.trec"
    _trec_from_submission(good, run, lambda ls, _: [ls[0].replace(ls[0].split()[2], "elsewhere-1"), *ls[1:]])
    out = tmp_path / "res"
    code, printed, err = _evaluate(capsys, folder, out, "--retrievers", "", "--run", f"r={run}")
    assert code == 0, err
    assert "1 ranked documents of 1 queries are not in the evaluated corpus (cited" in printed and "elsewhere-1" in err


@pytest.mark.parametrize("case", ["non-UTF-8 byte", "missing file", "a folder"])
def test_unreadable_submissions(case, mtrag, tmp_path, capsys):
    folder, good = mtrag
    bad = tmp_path / "sub.jsonl"
    if case == "non-UTF-8 byte":
        data = good.read_bytes().split(b"\n")
        data[2] = data[2].replace(b'"task_id"', b'"task\xe9id"')
        bad.write_bytes(b"\n".join(data))
    elif case == "a folder":
        bad.mkdir()
    out = tmp_path / "res"
    code, _, err = _evaluate(capsys, folder, out, "--retrievers", "", "--submission", f"sub={bad}")
    expected = {"non-UTF-8 byte": f"{bad}:3: not UTF-8", "missing file": f"{bad}: no such file",
                "a folder": f"{bad}: is a folder"}[case]  # fmt: skip
    _assert_one_line_error(code, err, out, expected)


# ---------------------------------------------------------------- class 6: folders and arguments


def _edit_readme(edit: Callable[[str], str]) -> Callable[[Path], None]:
    return lambda folder: (folder / "README.md").write_text(edit((folder / "README.md").read_text()))


def _without_block(text: str) -> str:
    start = text.index("convrag:")
    return text[:start] + text[text.index("\n---", start) + 1 :]


def _rewrite(config: str, change: Callable[[pa.Table], pa.Table]) -> Callable[[Path], None]:
    def make(folder: Path) -> None:
        path = next((folder / config).glob("*.parquet"))
        pq.write_table(change(pq.read_table(path)), path)

    return make


def _set_row(column: str, row: int, value: object) -> Callable[[pa.Table], pa.Table]:
    def change(table: pa.Table) -> pa.Table:
        rows = table.to_pylist()
        rows[row - 1][column] = value
        return pa.Table.from_pylist(rows, schema=table.schema)

    return change


#: the README line right after ``configs:`` (where an unclosed ``configs: [`` is reported)
AFTER_CONFIGS = -1
FOLDER_CASES = {  # name -> (how the copied folder is damaged, file named relative to the folder, line, text)
    "README without convrag block": (_edit_readme(_without_block), "README.md", None, "no 'convrag' block"),
    "README with bad YAML": (_edit_readme(lambda t: t.replace("configs:", "configs: [", 1)), "README.md",
                             AFTER_CONFIGS, "invalid YAML header"),
    "profile key of the wrong type": (_edit_readme(lambda t: t.replace("    top_k: null", "    top_k: many")),
                                      "README.md", None, "'top_k' must be a positive integer or null"),
    "README header not a mapping": (_edit_readme(lambda t: "---\n- a\n---\n" + t), "README.md", None,
                                    "invalid YAML header"),
    "no README": (lambda f: (f / "README.md").unlink(), "README.md", None, "not found"),
    "qrels file deleted": (lambda f: next((f / "qrels").glob("*.parquet")).unlink(), "", None, "no data file matches"),
    "qrels file not Parquet": (lambda f: next((f / "qrels").glob("*.parquet")).write_bytes(b"PAR1 no"),
                               "qrels/validation-00000-of-00001.parquet", None, "cannot read Parquet file"),
    "qrels without score": (_rewrite("qrels", lambda t: t.drop(["score"])), "qrels/validation-00000-of-00001.parquet",
                            1, "no column 'score'"),
    "qrels score not a number": (_rewrite("qrels", lambda t: t.set_column(2, "score", pa.array(["x"] * t.num_rows))),
                                 "qrels/validation-00000-of-00001.parquet", 1, "column 'score'"),
    "corpus text null": (_rewrite("corpus", _set_row("text", 4, None)), "corpus/validation-00000-of-00001.parquet", 4,
                         "column 'text'"),
    "query id null": (_rewrite("queries", _set_row("_id", 3, None)), "queries/validation-00000-of-00001.parquet", 3,
                      "query row needs a string '_id'"),
    "pool null": (_rewrite("queries", _set_row("pool", 2, None)), "queries", None, "must be a list of document ids"),
    "no relevant document": (_rewrite("qrels", lambda t: t.slice(0, 0)), "", None, "nothing to score"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(FOLDER_CASES))
def test_bad_folders_are_one_line_naming_the_file(case, strat, tmp_path, capsys):
    damage, name, line, expected = FOLDER_CASES[case]
    if line == AFTER_CONFIGS:
        line = (strat / "README.md").read_text(encoding="utf-8").splitlines().index("configs:") + 2
    folder = tmp_path / "stratrag"
    shutil.copytree(strat, folder)
    damage(folder)
    out = tmp_path / "res"
    code, _, err = _evaluate(capsys, folder, out, "--retrievers", "bm25")
    named = f"{folder / name}:{line}: " if line else str(folder / name) if name else str(folder)
    _assert_one_line_error(code, err, out, named, expected)


@pytest.mark.parametrize("args, expected", [
    (["--retrievers", "bm25", "--top-k", "0"], "--top-k must be at least 1"),
    (["--retrievers", "bm25", "--digits", "-1"], "--digits must be at least 0"),
    (["--retrievers", "bm25", "--strategies", "baseline", "--views", "baseline"], "alias of --strategies"),
    (["--retrievers", "bm25", "--run", "x=RUN", "--run", "x=RUN"], "NAME 'x' is given twice"),
    (["--retrievers", "bm25", "--run", "bm25=RUN"], "'bm25' is already used by a retriever"),
    (["--retrievers", "bm25", "--submission", "x=RUN"], "no official submission format"),
    (["--retrievers", "bm25", "--run", "RUN"], "--run expects NAME=FILE"),
])  # fmt: skip
def test_bad_arguments_are_one_line(args, expected, strat, strat_run, tmp_path, capsys):
    out = tmp_path / "res"
    code, _, err = _evaluate(capsys, strat, out, *(a.replace("RUN", str(strat_run)) for a in args))
    _assert_one_line_error(code, err, out, expected)


@pytest.mark.parametrize("target", ["missing", "file", "empty folder"])
def test_folder_argument_that_is_not_a_build(target, strat_run, tmp_path, capsys):
    folder = {"missing": tmp_path / "nope", "file": strat_run, "empty folder": tmp_path / "empty"}[target]
    if target == "empty folder":
        folder.mkdir()
    out = tmp_path / "res"
    code, _, err = _evaluate(capsys, folder, out, "--retrievers", "bm25")
    _assert_one_line_error(code, err, out, str(folder))


def test_out_naming_a_file_is_an_error_before_any_work(strat, strat_run, tmp_path, capsys):
    target = tmp_path / "results.txt"
    target.write_text("keep")
    code, _, err = _evaluate(capsys, strat, target, "--retrievers", "bm25")
    assert code == 2 and len(err.strip().splitlines()) == 1 and f"{target}: --out names a file" in err
    assert target.read_text() == "keep"


# ---------------------------------------------------------------- class 4: counted, reported events


def test_partial_run_is_scored_as_trec_eval_c_and_its_coverage_reported(strat, strat_run, tmp_path, capsys):
    one = tmp_path / "one.trec"
    one.write_text("\n".join(_lines(strat_run)[:15]) + "\n")  # val_000000 only
    out = tmp_path / "res"
    code, printed, err = _evaluate(capsys, strat, out, "--retrievers", "bm25", "--run", f"one={one}",
                                   "--run", f"all={strat_run}")  # fmt: skip
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    coverage = results["coverage"]
    assert coverage["one"] == {"queries": 30, "ranked": 1, "missing": 29, "missing_judged": 29,
                               "missing_examples": ["val_000001", "val_000002", "val_000003", "val_000004",
                                                    "val_000005"], "source": local_path(one), "kind": "run",
                               "warnings": []}  # fmt: skip
    assert coverage["bm25"]["ranked"] == coverage["all"]["ranked"] == 30
    # missing queries score 0 and count in the mean (trec_eval -c): the mean is the one query's value / 30
    per_query = results["per_query"]["one"]
    assert len(per_query) == 30 and all(v["MRR"] == 0.0 for q, v in per_query.items() if q != "val_000000")
    assert results["systems"]["one"]["overall"]["MRR"]["mean"] == pytest.approx(per_query["val_000000"]["MRR"] / 30)
    assert f"- one (run {local_path(one)}): 1 / 30; 29 missing" in printed and "- bm25: 30 / 30" in printed
    assert "## Coverage" in (out / "results.md").read_text()
    assert "warning: one ranks 1 of 30 queries" in err


def test_submission_events_are_counted_and_shown(mtrag, tmp_path, capsys):
    folder, good = mtrag
    items = _items(good)
    items[1]["contexts"][0]["document_id"] = "not-in-the-cited-corpus"
    items[2]["contexts"] = []
    for item in items:
        item["task_id"] = item["task_id"].replace("<::>", "::")
    items[3]["Collection"] = "clapnq" if "clapnq" in items[3]["Collection"] else "govt"
    sub = tmp_path / "sub.json"
    _write(sub, items)
    out = tmp_path / "res"
    code, printed, err = _evaluate(capsys, folder, out, "--retrievers", "", "--submission", f"s={sub}")
    assert code == 0, err
    entry = json.loads((out / "results.json").read_text())["coverage"]["s"]
    assert entry["missing"] == 1 and entry["ranked"] == entry["queries"] - 1
    warnings = "\n".join(entry["warnings"])
    for text in ("1 ranked documents of 1 queries are not in the evaluated corpus", "'contexts' is empty on 1 line",
                 "written with '::'", "short name", "does not end in .jsonl"):  # fmt: skip
        assert text in warnings and text in printed and text in err


def test_written_submissions_pass_ibm_checks_against_ibm_task_files(mtrag):
    """Our runs/*.jsonl satisfy every rule of IBM's format checker (retrieval mode), checked here from its facts
    against the task ids of IBM's own retrieval task files, and re-read cleanly by our reader."""
    _, written = mtrag
    input_ids = [
        json.loads(line)["_id"]
        for d in MTRAG_DOMAINS
        for line in (MTRAG / "mtrag-human" / "retrieval_tasks" / d / f"{d}_lastturn.jsonl").read_text().splitlines()
    ]
    assert written.name.endswith(".jsonl")
    assert written.stat().st_size < 20 * 2**20
    ids = []
    for line in _lines(written):
        item = json.loads(line)
        assert isinstance(item["task_id"], str) and isinstance(item["Collection"], str)
        assert item["Collection"].startswith("mt-rag-") and "-elser-" in item["Collection"]
        assert isinstance(item["contexts"], list) and 0 < len(item["contexts"]) <= 10
        for ctx in item["contexts"]:
            assert isinstance(ctx["document_id"], str) and isinstance(ctx["score"], (int, float))
        ids.append(item["task_id"])
    assert len(ids) == len(input_ids) and set(ids) == set(input_ids)  # raw strings, as IBM compares them
    report, submission = check_submission(written, input_ids)
    assert report.ok and report.warnings == [] and len(submission.task_ids) == len(input_ids)


# ---------------------------------------------------------------- class 4: evaluate.load("metrics/retrieval")


@pytest.fixture(scope="module")
def metric():
    import evaluate

    return evaluate.load(str(REPO / "metrics" / "retrieval"))


SCORED = [{"id": "d4", "score": 1.0}]
MIXED = {  # name -> (predictions, references, error class, position)
    "ids then scored objects": ([["d1", "d2"], SCORED], [["d1"], ["d4"]], "RunError", "predictions[1][0]"),
    "scored objects then ids": ([[{"id": "d1", "score": 1.0}], ["d4"]], [["d1"], ["d4"]], "RunError",
                                "predictions[1][0]"),
    "both forms in one query": ([["d1", {"id": "d2", "score": 1.0}]], [["d1"]], "RunError", "predictions[0][1]"),
    "float document ids": ([["d1"], [4.0, 5.0]], [["d1"], ["4"]], "RunError", "predictions[1][0]"),
    "string score": ([[{"id": "d1", "score": "0.5"}]], [["d1"]], "RunError", "predictions[0][0]"),
    "object without score": ([[{"id": "d1"}]], [["d1"]], "RunError", "predictions[0][0]"),
    "prediction not a list": (["d1"], [["d1"]], "RunError", "predictions[0]"),
    "ids then graded references": ([["d1"], ["d4"]], [["d1"], [{"id": "d4", "grade": 1}]], "QrelsError",
                                   "references[1][0]"),
    "boolean reference ids": ([["1"]], [[True]], "QrelsError", "references[0][0]"),
    "fractional grade": ([["d1"]], [[{"id": "d1", "grade": 0.5}]], "QrelsError", "references[0][0]"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(MIXED))
def test_metric_rejects_mixed_or_wrong_item_types_naming_the_position(case, metric):
    predictions, references, error, position = MIXED[case]
    with pytest.raises(ValueError) as info:  # the module's own copy of RunError / QrelsError (ValueErrors)
        metric.compute(predictions=predictions, references=references, measures=["Recall@2", "MRR"])
    assert type(info.value).__name__ == error and str(info.value).startswith(position)


def test_metric_form_comes_from_the_first_non_empty_query(metric):
    result = metric.compute(predictions=[[], SCORED], references=[["d1"], ["d4"]], measures=["MRR"])
    assert result["MRR"] == 0.5  # was 0.0: the objects were cast to strings after an empty first query
    result = metric.compute(predictions=[["d1"], ["d4"]], references=[[], [{"id": "d4", "grade": 2}]], measures=["MRR"])
    assert result["MRR"] == 1.0 and result["excluded_queries"] == ["0"]


# ---------------------------------------------------------------- class 9: LLM query strategies name their model


@pytest.fixture(scope="module")
def recor(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("trust-recor") / "recor"
    export_benchmark("recor", out, options={"source": str(DATA / "recor" / "sample")})
    return out


def _fake_llm(spec: str):
    from convrag.llm import LLM
    from convrag.llm.backends.fake import FakeBackend

    return LLM(FakeBackend(), spec=spec, cache=False)


@pytest.mark.parametrize("spec, placeholder", [
    ("default", True), ("fake", True), ("llamacpp:/models/SmolLM2-135M-Instruct.Q4_1.gguf", True),
    ("openai:gpt-4o@http://localhost:8000/v1", False), ("hf:/models/qwen2.5-7b", False),
])  # fmt: skip
def test_every_table_names_the_llm_and_warns_for_a_placeholder(spec, placeholder, recor, tmp_path, capsys,
                                                                monkeypatch):  # fmt: skip
    import convrag.llm

    monkeypatch.setattr(convrag.llm, "get_llm", lambda given=None, **kw: _fake_llm(given or "default"))
    out = tmp_path / "res"
    code, printed, err = _evaluate(capsys, recor, out, "--retrievers", "bm25", "--strategies", "baseline,rewrite",
                                   "--llm", spec)  # fmt: skip
    assert code == 0, err
    results = json.loads((out / "results.json").read_text())
    assert results["llm"]["spec"] == spec and bool(results["llm"]["placeholder"]) is placeholder
    note = results["llm"]["note"]
    assert f"`{spec}`" in note and ("WARNING" in note and "--llm openai:MODEL@http" in note) is placeholder
    for text in (printed, (out / "results.md").read_text()):
        lines = text.splitlines()
        starts = [i for i, line in enumerate(lines) if line.startswith("|") and not lines[i - 1].startswith("|")]
        assert starts and all(lines[i - 2] == note for i in starts)  # the note stands before every table
    assert ("warning: the query strategy rewrite uses the LLM" in err) is placeholder


def test_llm_spec_defaults_to_convrag_llm_then_the_placeholder(recor, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CONVRAG_LLM", "fake;cache=false")
    out = tmp_path / "res"
    code, _, err = _evaluate(capsys, recor, out, "--retrievers", "bm25", "--strategies", "baseline,rewrite")
    assert code == 0, err
    assert json.loads((out / "results.json").read_text())["llm"]["spec"] == "fake"
    assert placeholder_llm("default") and placeholder_llm("fake;cache=false")
    assert placeholder_llm("openai:deepseek-chat@https://api.deepseek.com;timeout=120") is None
