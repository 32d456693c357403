"""Issue 12 (trust), builder half: every bad input to `convrag build` is one line naming the file (and line), exit 2,
nothing written; empty questions, answers and documents are errors or reported counts, never silent.

Bad inputs are derived in tmp_path from the real files in ../shared/data (MTR-Bench from tests/mtr_bench_fixture).
For a JSON document the line is where the offending record starts: the tests write every record on its own lines
and compute that line independently of the reader.
"""

from __future__ import annotations

import copy
import functools
import gzip
import io
import json
import os
import zipfile
from collections.abc import Callable
from pathlib import Path

import datasets
import pytest

from convrag.cli import main
from convrag.core.errors import DataError
from convrag.core.jsonl import read_json_records, read_text
from convrag.hub.export import read_manifest
from tests.conftest import DATA
from tests.mtr_bench_fixture import CORPUS_SCHEMA, SCHEMA_12, write_fixture, write_table

HOT_DEV = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"
HOT_TRAIN = DATA / "hotpotqa" / "hotpot_train_v1.1.first10.indent4.json"
MT = DATA / "mtrag"
CONV_REL = "mtrag-human/conversations/conversations.json"
REF_REL = "mtragun-human/generation_tasks/reference.jsonl"
RT = "mtrag-human/retrieval_tasks"
ZIP_REL = "corpora/passage_level/clapnq.jsonl.zip"
REC = DATA / "recor" / "sample"


@pytest.fixture(autouse=True)
def _quiet_datasets():
    """No progress bars or warnings on stderr: the tests count its lines."""
    was = datasets.utils.logging.get_verbosity()
    datasets.disable_progress_bars()
    datasets.utils.logging.set_verbosity_error()
    yield
    datasets.enable_progress_bars()
    datasets.utils.logging.set_verbosity(was)


def _build(capsys, bench: str, sources: list[str], out: Path, extra: tuple[str, ...] = ()) -> tuple[int, str, str]:
    capsys.readouterr()
    argv = ["build", bench, *[a for s in sources for a in ("--source", s)], "--out", str(out), *extra]
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _assert_error(capsys, bench, sources, out, extra, path, line, fragment) -> str:
    """Exit 2, one stderr line ``convrag build: error: PATH[:LINE]: ...fragment...``, nothing left in ``out``."""
    code, _, err = _build(capsys, bench, sources, out, extra)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    where = f"{path}:{line}: " if line is not None else f"{path}: "
    assert err.startswith(f"convrag build: error: {where}"), err
    assert fragment in err, err
    assert not out.exists() or not any(out.iterdir())
    return err


# ---------------------------------------------------------------- sources derived from the real files


def _records_text(records: list) -> tuple[str, list[int]]:
    """A JSON array with every record on its own lines, and the line where each record starts."""
    parts = [json.dumps(r, indent=1) for r in records]
    starts, line = [], 2
    for part in parts:
        starts.append(line)
        line += part.count("\n") + 1
    return "[\n" + ",\n".join(parts) + "\n]\n", starts


@functools.lru_cache(maxsize=4)
def _json(path: Path) -> list:
    return json.loads(path.read_text(encoding="utf-8"))


def _hotpot(tmp: Path, edit: Callable[[list], object], name: str = "hotpot_dev_distractor_v1.json"):
    """A HotpotQA file edited by ``edit(records)``; returns (path, record start lines)."""
    records = copy.deepcopy(_json(HOT_DEV))
    edit(records)
    text, starts = _records_text(records)
    path = tmp / name
    path.write_text(text, encoding="utf-8")
    return path, starts


def _mirror(tmp: Path, skip: str) -> Path:
    """The MTRAG checkout as symlinks (files replaced by edited copies where a case needs it)."""
    root = tmp / "mtrag"
    for folder, _, names in os.walk(MT):
        rel = Path(folder).relative_to(MT)
        if str(rel).startswith(("scripts", skip)):
            continue
        (root / rel).mkdir(parents=True, exist_ok=True)
        for name in names:
            (root / rel / name).symlink_to(Path(folder) / name)
    return root


def _put(root: Path, rel: str, data: bytes | str) -> Path:
    path = root / rel
    path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def _mtrag(tmp: Path, edit: Callable[[list], object] | None = None, files: dict[str, bytes | str] | None = None):
    """An MTRAG source with conversations.json edited by ``edit`` (one record per line block); returns
    (root, conversations path, conversation start lines)."""
    root = _mirror(tmp, "mtragun-human")
    starts: list[int] = []
    if edit is not None:
        convs = copy.deepcopy(_json(MT / CONV_REL))
        edit(convs)
        text, starts = _records_text(convs)
        _put(root, CONV_REL, text)
    for rel, data in (files or {}).items():
        _put(root, rel, data)
    return root, root / CONV_REL, starts


def _un(tmp: Path, index: int | None = None, edit: Callable[[dict], object] | None = None, raw: bytes | None = None):
    """An MTRAG-UN source with line ``index + 1`` of reference.jsonl edited (or the file replaced by ``raw``)."""
    root = _mirror(tmp, "mtrag-human")
    if raw is None:
        lines = (MT / REF_REL).read_text(encoding="utf-8").splitlines()
        obj = json.loads(lines[index])
        edit(obj)
        lines[index] = json.dumps(obj)
        raw = ("\n".join(lines) + "\n").encode()
    return root, _put(root, REF_REL, raw)


def _recor(tmp: Path, bench: bytes | None = None, docs: bytes | None = None) -> Path:
    root = tmp / "recor"
    root.mkdir()
    for name, data in (("benchmark.jsonl", bench), ("documents.jsonl", docs)):
        if data is None:
            (root / name).symlink_to(REC / name)
        else:
            (root / name).write_bytes(data)
    return root


def _edit_jsonl(path: Path, index: int, edit: Callable[[dict], object]) -> bytes:
    lines = path.read_text(encoding="utf-8").splitlines()
    obj = json.loads(lines[index])
    edit(obj)
    lines[index] = json.dumps(obj)
    return ("\n".join(lines) + "\n").encode()


def _mtr(tmp: Path, edit: Callable[[list], object] | None = None, corpus_edit=None) -> Path:
    fx = write_fixture(tmp / "mtr", fmt="jsonl")
    if edit is not None:
        rows = json.loads(json.dumps(fx["rows"]["test"]))  # no shared dicts between rows
        edit(rows)
        write_table(fx["files"]["test"], rows, SCHEMA_12, "jsonl")
    if corpus_edit is not None:
        rows = json.loads(json.dumps(fx["corpus"]))
        corpus_edit(rows)
        write_table(fx["files"]["corpus"], rows, CORPUS_SCHEMA, "jsonl")
    return fx["folder"]


def _clapnq_corpus(edit: Callable[[list[bytes]], object] | None = None) -> bytes:
    """A small passage-level corpus zip made of clapnq passages cited in the conversations."""
    seen: dict[str, dict] = {}
    for conv in _json(MT / CONV_REL):
        for m in conv["messages"] if "clapnq" in conv["domain"] else []:
            for c in m.get("contexts") or []:
                seen.setdefault(c["document_id"], {"_id": c["document_id"], "title": c.get("title", ""),
                                                   "text": c["text"], "url": c.get("url", "")})  # fmt: skip
    lines = [json.dumps(d).encode() for d in list(seen.values())[:20]]
    if edit is not None:
        edit(lines)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("clapnq.jsonl", b"\n".join(lines) + b"\n")
    return buffer.getvalue()


def _first_context(convs: list) -> dict:
    return next(c for m in convs[0]["messages"] for c in m.get("contexts") or [])


def _bad_byte(data: bytes, line: int, old: bytes, new: bytes) -> bytes:
    lines = data.split(b"\n")
    assert old in lines[line - 1]
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    return b"\n".join(lines)


# ---------------------------------------------------------------- class 6: unreadable files


def _train_non_utf8(tmp):
    path = tmp / "hotpot_train_v1.1.json"
    path.write_bytes(_bad_byte(HOT_TRAIN.read_bytes(), 14, b"Magazine", b"Mag\xe9zine"))
    return "stratrag", [str(path)], path, 14, "not UTF-8: byte 0xe9"


def _dev_truncated_gzip(tmp):
    data = gzip.compress(HOT_DEV.read_bytes())
    path = tmp / "hotpot_dev_distractor_v1.json.gz"
    path.write_bytes(data[: len(data) // 2])
    return "stratrag", [str(path)], path, None, "truncated or corrupt gzip file"


def _dev_folder(tmp):
    path = tmp / "dev_records"
    path.mkdir()
    return "stratrag", [str(path)], path, None, "is a folder, expected a file"


def _dev_missing(tmp):
    return "stratrag", [f"validation={tmp / 'nope.json'}"], tmp / "nope.json", None, "does not exist"


def _conversations_non_utf8(tmp):
    raw = (MT / CONV_REL).read_bytes().replace(b"arizona cardinals", b"arizona c\xffrdinals", 1)
    root, path, _ = _mtrag(tmp, files={CONV_REL: raw})
    return "mtrag", [str(root)], path, 1, "not UTF-8: byte 0xff"


def _questions_non_utf8(tmp):
    rel = f"{RT}/clapnq/clapnq_questions.jsonl"
    root, _, _ = _mtrag(tmp, files={rel: _bad_byte((MT / rel).read_bytes(), 3, b"|user|", b"|us\xe9r|")})
    return "mtrag", [str(root)], root / rel, 3, "not UTF-8: byte 0xe9"


def _qrels_non_utf8(tmp):
    rel = f"{RT}/govt/qrels/dev.tsv"
    root, _, _ = _mtrag(tmp, files={rel: _bad_byte((MT / rel).read_bytes(), 4, b"\t1", b"\t1\xff")})
    return "mtrag", [str(root)], root / rel, 4, "not UTF-8: byte 0xff"


def _corpus_zip_garbage(tmp):
    root, _, _ = _mtrag(tmp, files={ZIP_REL: b"not a zip archive" * 8})
    return "mtrag", [str(root)], root / ZIP_REL, None, "corrupt or truncated zip archive"


def _corpus_zip_truncated(tmp):
    data = _clapnq_corpus()
    root, _, _ = _mtrag(tmp, files={ZIP_REL: data[: len(data) * 2 // 3]})
    return "mtrag", [str(root)], root / ZIP_REL, None, "corrupt or truncated zip archive"


def _corpus_zip_non_utf8(tmp):
    def edit(lines):
        lines[6] = lines[6].replace(b'"text": "', b'"text": "\xff', 1)

    root, _, _ = _mtrag(tmp, files={ZIP_REL: _clapnq_corpus(edit)})
    return "mtrag", [str(root)], f"{root / ZIP_REL}!clapnq.jsonl", 7, "not UTF-8: byte 0xff"


def _reference_non_utf8(tmp):
    root, path = _un(tmp, raw=_bad_byte((MT / REF_REL).read_bytes(), 4, b'"task_id"', b'"task_\xffid"'))
    return "mtrag-un", [str(root)], path, 4, "not UTF-8: byte 0xff"


def _recor_benchmark_non_utf8(tmp):
    root = _recor(tmp, bench=_bad_byte((REC / "benchmark.jsonl").read_bytes(), 2, b'"task"', b'"t\xffsk"'))
    return "recor", [str(root)], root / "benchmark.jsonl", 2, "not UTF-8: byte 0xff"


def _recor_documents_non_utf8(tmp):
    root = _recor(tmp, docs=_bad_byte((REC / "documents.jsonl").read_bytes(), 5, b'"content": "', b'"content": "\xc3'))
    return "recor", [str(root)], root / "documents.jsonl", 5, "not UTF-8: byte 0xc3"


def _mtr_corrupt_parquet_page(tmp):
    fx = write_fixture(tmp / "mtr", fmt="parquet")
    path = fx["files"]["test"]
    raw = bytearray(path.read_bytes())
    middle = len(raw) // 3
    raw[middle : middle + 200] = bytes(b ^ 0xFF for b in raw[middle : middle + 200])
    path.write_bytes(bytes(raw))
    return "mtr-bench", [str(fx["folder"])], path, None, "corrupt Parquet data"


UNREADABLE = [_train_non_utf8, _dev_truncated_gzip, _dev_folder, _dev_missing, _conversations_non_utf8,
              _questions_non_utf8, _qrels_non_utf8, _corpus_zip_garbage, _corpus_zip_truncated,
              _corpus_zip_non_utf8, _reference_non_utf8, _recor_benchmark_non_utf8, _recor_documents_non_utf8,
              _mtr_corrupt_parquet_page]  # fmt: skip


@pytest.mark.parametrize("make", UNREADABLE, ids=lambda f: f.__name__.strip("_"))
def test_unreadable_files_are_one_line_errors(tmp_path, capsys, make):
    bench, sources, path, line, fragment = make(tmp_path)
    extra = ("--config", "clapnq-corpus") if "corpus_zip" in make.__name__ else ()
    _assert_error(capsys, bench, sources, tmp_path / "out", extra, path, line, fragment)


# ---------------------------------------------------------------- class 6: wrongly typed fields


def _conv_case(conv: int, edit: Callable[[list], object], fragment: str):
    def make(tmp):
        root, path, starts = _mtrag(tmp, edit)
        return "mtrag", [str(root)], path, starts[conv], fragment

    return make


def _set_vote_timestamp(convs):
    votes = _first_context(convs)["feedback"]["relevant"]
    votes[next(iter(votes))]["timestamp"] = "1724708654"


def _hotpot_case(edit: Callable[[list], object], record: int, fragment: str, train: bool = False):
    def make(tmp):
        if train:
            records = copy.deepcopy(_json(HOT_TRAIN))
            edit(records)
            text, starts = _records_text(records)
            path = tmp / "hotpot_train_v1.1.json"
            path.write_text(text, encoding="utf-8")
        else:
            path, starts = _hotpot(tmp, edit)
        return "stratrag", [str(path)], path, starts[record], fragment

    return make


def _un_case(index: int, edit: Callable[[dict], object], fragment: str):
    def make(tmp):
        root, path = _un(tmp, index, edit)
        return "mtrag-un", [str(root)], path, index + 1, fragment

    return make


def _recor_case(index: int, edit: Callable[[dict], object], fragment: str):
    def make(tmp):
        root = _recor(tmp, bench=_edit_jsonl(REC / "benchmark.jsonl", index, edit))
        return "recor", [str(root)], root / "benchmark.jsonl", index + 1, fragment

    return make


def _mtr_turn_string(tmp):
    folder = _mtr(tmp, lambda rows: rows[1].update(turn="2"))
    return "mtr-bench", [str(folder)], folder / "test.jsonl", 2, "field 'turn' must be int, got string"


WRONG_TYPES = {
    "mtrag feedback.relevant a list": _conv_case(
        0, lambda c: _first_context(c)["feedback"].update(relevant=[{"value": "yes"}]),
        "conversation 1: field 'messages[1].contexts[0].feedback.relevant' must be object, got list"),
    "mtrag enrichments a list": _conv_case(
        4, lambda c: c[4]["messages"][0].update(enrichments=["Factoid"]),
        "conversation 5: field 'messages[0].enrichments' must be object, got list"),
    "mtrag context score not a number": _conv_case(
        0, lambda c: _first_context(c).update(score="abc"), "contexts[0].score' must be int/number, got string"),
    "mtrag timestamp a string": _conv_case(
        2, lambda c: c[2]["messages"][1].update(timestamp="1724708469"),
        "conversation 3: field 'messages[1].timestamp' must be int, got string"),
    "mtrag vote timestamp a string": _conv_case(0, _set_vote_timestamp, ".timestamp' must be int, got string"),
    "mtrag generator a string": _conv_case(
        1, lambda c: c[1].update(generator="mixtral"), "conversation 2: field 'generator' must be object"),
    "mtrag enrichment value an object": _conv_case(
        0, lambda c: c[0]["messages"][0]["enrichments"].update(Answerability={"v": 1}),
        "enrichments.Answerability' must be string/list, got object"),
    "mtrag conversation a string": _conv_case(
        3, lambda c: c.__setitem__(3, "x"), "conversation 4: expected an object, got string"),
    "hotpot supporting fact index a string": _hotpot_case(
        lambda r: r[2]["supporting_facts"][0].__setitem__(1, "0"), 2, "supporting_facts must be", train=True),
    "hotpot type a list": _hotpot_case(
        lambda r: r[6].update(type=["comparison"]), 6, "field 'type' must be a string, got list"),
    "hotpot context sentence an int": _hotpot_case(
        lambda r: r[6]["context"][1][1].__setitem__(0, 3), 6, "context must be [[title, [sentences]]]", train=True),
    "recor num_turns 'three'": _recor_case(
        0, lambda o: o["metadata"].update(num_turns="three"), "field 'metadata.num_turns' must be int, got string"),
    "recor gold_doc_count 'x'": _recor_case(
        1, lambda o: o["metadata"].update(gold_doc_count="x"), "'metadata.gold_doc_count' must be int"),
    "recor answer an object": _recor_case(
        0, lambda o: o["turns"][1].update(answer={"a": 1}), "field 'turns[1].answer' must be string, got object"),
    "mtrag-un Question Type an object": _un_case(
        2, lambda o: o.update({"Question Type": {"a": 1}}), "field 'Question Type' must be string/list, got object"),
    "mtrag-un context title an int": _un_case(
        3, lambda o: o["contexts"][0].update(title=9), "field 'contexts[0].title' must be string, got int"),
    "mtrag-un target text an int": _un_case(
        7, lambda o: o["targets"][0].update(text=3), "field 'targets[0].text' must be string, got int"),
    "mtr-bench turn a string": _mtr_turn_string,
}  # fmt: skip


@pytest.mark.parametrize("make", WRONG_TYPES.values(), ids=WRONG_TYPES.keys())
def test_wrong_types_name_the_file_and_the_record_start_line(tmp_path, capsys, make):
    bench, sources, path, line, fragment = make(tmp_path)
    configs = {"mtrag": "all-tasks", "mtrag-un": "all-tasks", "stratrag": "all"}
    extra = ("--config", configs[bench]) if bench in configs else ()
    _assert_error(capsys, bench, sources, tmp_path / "out", extra, path, line, fragment)


def test_a_string_timestamp_fails_before_any_config_is_written(tmp_path, capsys):
    """The issue's example: it used to fail only after 14 Parquet files were written."""
    root, path, starts = _mtrag(tmp_path, lambda c: c[2]["messages"][1].update(timestamp="1724708469"))
    _assert_error(capsys, "mtrag", [str(root)], tmp_path / "out", (), path, starts[2], "must be int, got string")


# ---------------------------------------------------------------- class 4: empty questions, duplicates, empty files


def _dup_conversation(tmp):
    root, path, starts = _mtrag(tmp, lambda c: c.append(copy.deepcopy(c[0])))
    return "mtrag", [str(root)], path, starts[-1], f"starting on lines {starts[0]} and {starts[-1]}"


def _dup_hotpot(tmp):
    path, starts = _hotpot(tmp, lambda r: r[5].update(_id=r[1]["_id"]))
    return "stratrag", [str(path)], path, starts[5], f"records starting on lines {starts[1]} and {starts[5]}"


def _dup_recor(tmp):
    lines = (REC / "benchmark.jsonl").read_text(encoding="utf-8").splitlines()
    root = _recor(tmp, bench=("\n".join([*lines, lines[0]]) + "\n").encode())
    return "recor", [str(root)], root / "benchmark.jsonl", 5, "duplicate conversation id 'ex_111149' in domain 'law' " \
        "(first on line 1)"  # fmt: skip


def _dup_corpus_passage(tmp):
    def edit(lines):
        lines[8] = lines[1]

    root, _, _ = _mtrag(tmp, files={ZIP_REL: _clapnq_corpus(edit)})
    return "mtrag", [str(root)], f"{root / ZIP_REL}!clapnq.jsonl", 9, "(first on line 2)"


def _dup_mtr_conversation(tmp):
    def edit(rows):
        for i, r in enumerate(rows):
            r["conversation_id"] = "c0" if 12 <= i < 24 else f"c{i // 12}"

    folder = _mtr(tmp, edit)
    return "mtr-bench", [str(folder)], folder / "test.jsonl", 13, f"(first in {folder / 'test.jsonl'} row 1)"


def _empty_user_question(tmp):
    root, path, starts = _mtrag(tmp, lambda c: c[1]["messages"][2].update(text=" "))
    return "mtrag", [str(root)], path, starts[1], "conversation 2: field 'messages[2].text' is empty"


def _empty_hotpot_question(tmp):
    path, starts = _hotpot(tmp, lambda r: r[2].update(question=""))
    return "stratrag", [str(path)], path, starts[2], "empty question"


def _empty_un_question(tmp):
    root, path = _un(tmp, 5, lambda o: o["input"][-1].update(text=""))
    return "mtrag-un", [str(root)], path, 6, "text' is empty"


def _empty_recor_query(tmp):
    root = _recor(tmp, bench=_edit_jsonl(REC / "benchmark.jsonl", 1, lambda o: o["turns"][0].update(query="")))
    return "recor", [str(root)], root / "benchmark.jsonl", 2, "field 'turns[0].query' is empty"


def _empty_query_view_text(tmp):
    rel = f"{RT}/cloud/cloud_lastturn.jsonl"
    root, _, _ = _mtrag(tmp, files={rel: _edit_jsonl(MT / rel, 0, lambda o: o.update(text=""))})
    return "mtrag", [str(root)], root / rel, 1, "field 'text' is empty"


def _empty_hotpot_list(tmp):
    path = tmp / "hotpot_dev_distractor_v1.json"
    path.write_text("[]", encoding="utf-8")
    return "stratrag", [str(path)], path, None, "holds no HotpotQA records"


def _empty_mtr_split(tmp):
    folder = _mtr(tmp)
    (folder / "test.jsonl").write_text("", encoding="utf-8")
    return "mtr-bench", [str(folder)], folder / "test.jsonl", None, "the test split holds no rows"


def _un_non_object_target(tmp):
    root, path = _un(tmp, 4, lambda o: o.update(targets=["just text"]))
    return "mtrag-un", [str(root)], path, 5, "targets[0] must be an object, got string"


NOT_SILENT = [_dup_conversation, _dup_hotpot, _dup_recor, _dup_corpus_passage, _dup_mtr_conversation,
              _empty_user_question, _empty_hotpot_question, _empty_un_question, _empty_recor_query,
              _empty_query_view_text, _empty_hotpot_list, _empty_mtr_split, _un_non_object_target]  # fmt: skip


@pytest.mark.parametrize("make", NOT_SILENT, ids=lambda f: f.__name__.strip("_"))
def test_empty_questions_duplicates_and_non_object_targets_are_errors(tmp_path, capsys, make):
    bench, sources, path, line, fragment = make(tmp_path)
    extra = ("--config", "clapnq-corpus") if "corpus" in make.__name__ else ()
    _assert_error(capsys, bench, sources, tmp_path / "out", extra, path, line, fragment)


def _reported_hotpot_answer(tmp):
    path, _ = _hotpot(tmp, lambda r: r[3].update(answer=""))
    return "stratrag", [str(path)], "all", "records with an empty reference answer", _json(HOT_DEV)[3]["_id"]


def _reported_agent_answer(tmp):
    root, _, _ = _mtrag(tmp, lambda c: c[1]["messages"][1].update(text=""))
    return "mtrag", [str(root)], "all-tasks", "tasks without a reference answer", "<::>1"


def _reported_cited_passage(tmp):
    """Every citation of one passage without text (one citation with text would give it its text)."""
    doc_id = _first_context(_json(MT / CONV_REL))["document_id"]

    def edit(convs):
        for conv in convs:
            for m in conv["messages"]:
                for c in m.get("contexts") or []:
                    if c["document_id"] == doc_id:
                        c["text"] = ""

    root, _, _ = _mtrag(tmp, edit)
    return "mtrag", [str(root)], "all-cited-corpus", "cited passages without text", doc_id


def _reported_corpus_passage(tmp):
    def edit(lines):
        obj = json.loads(lines[2])
        lines[2] = json.dumps({**obj, "text": ""}).encode()

    root, _, _ = _mtrag(tmp, files={ZIP_REL: _clapnq_corpus(edit)})
    return "mtrag", [str(root)], "clapnq-corpus", "corpus passages with empty text", None


def _reported_un_target(tmp):
    root, _ = _un(tmp, 4, lambda o: o["targets"][0].update(text=""))
    return "mtrag-un", [str(root)], "all-tasks", "tasks without a reference answer", "<::>"


def _reported_recor_answer(tmp):
    root = _recor(tmp, bench=_edit_jsonl(REC / "benchmark.jsonl", 1, lambda o: o["turns"][1].update(answer="")))
    return "recor", [str(root)], "all-queries", "turns with an empty answer", "drones:ex_3025:"


def _reported_recor_document(tmp):
    docs = _edit_jsonl(REC / "documents.jsonl", 2, lambda o: o.update(content=" "))
    root = _recor(tmp, docs=docs)
    doc_id = json.loads((REC / "documents.jsonl").read_text(encoding="utf-8").splitlines()[2])["doc_id"]
    return "recor", [str(root)], "all-corpus", "documents with empty text", doc_id


def _reported_mtr_document(tmp):
    folder = _mtr(tmp, corpus_edit=lambda rows: rows[5].update(text=""))
    return "mtr-bench", [str(folder)], "corpus", "documents with empty text", "5"


REPORTED = [_reported_hotpot_answer, _reported_agent_answer, _reported_cited_passage, _reported_corpus_passage,
            _reported_un_target, _reported_recor_answer, _reported_recor_document, _reported_mtr_document]  # fmt: skip


@pytest.mark.parametrize("make", REPORTED, ids=lambda f: f.__name__.strip("_"))
def test_empty_answers_and_documents_are_kept_and_reported(tmp_path, capsys, make):
    bench, sources, config, event, example = make(tmp_path)
    out = tmp_path / "out"
    code, printed, err = _build(capsys, bench, sources, out, ("--config", config))
    assert code == 0, err
    report = read_manifest(out)["report"]
    (name,) = [e for e in report["counts"] if e.startswith(event)]
    assert report["counts"][name] == 1
    assert f"{name}: 1" in printed
    if example is not None:
        assert any(example in e for e in report["examples"][name]), report["examples"][name]


# ---------------------------------------------------------------- class 7: the error names the file of the bad value


def _user_text_not_string(tmp):
    root, path, starts = _mtrag(tmp, lambda c: c[1]["messages"][2].update(text=12))
    return "mtrag", root, path, starts[1], "must be string, got int"


def _no_conversations(tmp):
    root, path, _ = _mtrag(tmp, lambda c: c.clear())
    return "mtrag", root, path, None, "the file holds no conversations"


def _empty_questions_file(tmp):
    rel = f"{RT}/clapnq/clapnq_questions.jsonl"
    root, _, _ = _mtrag(tmp, files={rel: ""})
    return "mtrag", root, root / rel, None, "the file holds no queries"


def _empty_reference(tmp):
    root, path = _un(tmp, raw=b"\n")
    return "mtrag-un", root, path, None, "the file holds no tasks"


def _empty_recor_benchmark(tmp):
    root = _recor(tmp, bench=b"")
    return "recor", root, root / "benchmark.jsonl", None, "the file holds no conversations"


WRONG_PLACE = [_user_text_not_string, _no_conversations, _empty_questions_file, _empty_reference,
               _empty_recor_benchmark]  # fmt: skip


@pytest.mark.parametrize("make", WRONG_PLACE, ids=lambda f: f.__name__.strip("_"))
def test_errors_name_the_file_holding_the_bad_value(tmp_path, capsys, make):
    """Not the queries file for a bad conversation, not a qrels file for an empty reference.jsonl."""
    bench, root, path, line, fragment = make(tmp_path)
    err = _assert_error(capsys, bench, [str(root)], tmp_path / "out", (), path, line, fragment)
    assert "qrels" not in err and "lastturn" not in err


# ---------------------------------------------------------------- the shared readers


def test_json_records_start_lines_and_gzip(tmp_path):
    records = [{"a": '[{"x": ]', "b": [1, {"c": "}\n"}]}, [], "s", {"d": {"e": [[]]}}]
    text, starts = _records_text(records)
    path = tmp_path / "r.json"
    path.write_text("  \n" + text, encoding="utf-8")
    got = read_json_records(str(path))
    assert [r for _, r in got] == records and [line for line, _ in got] == [s + 1 for s in starts]
    packed = tmp_path / "r.json.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    assert read_json_records(str(packed)) == got and read_text(str(packed)) == read_text(str(path))
    path.write_text(text + "x", encoding="utf-8")
    with pytest.raises(DataError, match="invalid JSON: Extra data"):
        read_json_records(str(path))
    path.write_text('[{"a": 1},\n {"a": 2} {"a": 3}]', encoding="utf-8")
    with pytest.raises(DataError, match=r"r\.json:2: invalid JSON: Expecting ',' delimiter"):
        read_json_records(str(path))


def test_a_passage_cited_once_without_text_takes_the_text_of_another_citation(tmp_path, capsys):
    first = _first_context(_json(MT / CONV_REL))
    root, _, _ = _mtrag(tmp_path, lambda c: _first_context(c).update(text=""))
    out = tmp_path / "out"
    code, _, err = _build(capsys, "mtrag", [str(root)], out, ("--config", "all-cited-corpus"))
    assert code == 0, err
    rows = datasets.load_dataset(str(out), "all-cited-corpus", split="test").to_list()
    assert next(r for r in rows if r["_id"] == first["document_id"])["text"] == first["text"]
    assert not [e for e in read_manifest(out)["report"]["counts"] if "without text" in e or "differing" in e]


@pytest.mark.parametrize("option", ["pool_size=1", "max_validation=-1", "validation_row_offset=-5"])
def test_stratrag_option_values_out_of_range_are_errors(tmp_path, capsys, option):
    code, _, err = _build(capsys, "stratrag", [str(HOT_DEV)], tmp_path / "out", ("--option", option))
    assert code == 2 and len(err.strip().splitlines()) == 1 and f"option {option.split('=')[0]} must" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
