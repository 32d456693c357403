"""Issue 29, class 6 leftovers, each through the CLI: a cut or damaged Parquet corpus, a task with two
answerability labels, a source missing one file, a README naming an unknown benchmark (the dense embeddings
cache after a corpus text change is tested in test_embedding_cache.py). Every refusal: exit 2, one stderr line
naming the file, the inputs byte-identical afterwards, no output written."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from convrag.cli import main
from tests.conftest import DATA

DEV = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"
MTRAG = DATA / "mtrag"
RECOR = DATA / "recor" / "sample"
SPACE = "dimensions:\n  retrieval:\n    bm25: {retriever: bm25}\n"


@pytest.fixture(scope="module")
def strat(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """StratRAG's first 5 dev records (75 pool documents of real HotpotQA text), built."""
    out = tmp_path_factory.mktemp("leftovers") / "stratrag"
    assert main(["build", "stratrag", "--source", f"validation={DEV}", "--option", "max_validation=5",
                 "--out", str(out)]) == 0  # fmt: skip
    return out


def fingerprint(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``root`` (``root`` itself when it is a file)."""
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p.relative_to(root) if p != root else p.name): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in files}  # fmt: skip


def refused(capsys: pytest.CaptureFixture, args: list[str], inputs: list[Path], named: str, *expected: str) -> str:
    """Run ``convrag ARGS``: exit 2, one stderr line naming ``named`` with every ``expected`` text, ``inputs``
    unchanged; returns the line."""
    before = {str(p): fingerprint(p) for p in inputs}
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert named in err[0] and "Traceback" not in err[0], err[0]
    for text in expected:
        assert text in err[0], err[0]
    assert {str(p): fingerprint(p) for p in inputs} == before
    return err[0]


def cut(path: Path) -> Path:
    """``path`` cut in half (its footer gone)."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def damaged(path: Path) -> Path:
    """``path`` with its data pages overwritten (footer intact: it opens, its rows cannot be read)."""
    data = bytearray(path.read_bytes())
    data[200 : len(data) // 2] = b"\xff" * (len(data) // 2 - 200)
    path.write_bytes(bytes(data))
    return path


def corpus_file(folder: Path) -> Path:
    return next((folder / "corpus").glob("*.parquet"))


# ------------------------------------------------------------------------------------------ truncated Parquet
@pytest.mark.parametrize(("command", "damage"), [
    ("select", cut), ("select", damaged), ("synthesize", cut), ("synthesize", damaged),
    # the dry run reads every document (short ones are counted before work): a damaged data page is one line too
    ("synthesize-dry-run", cut), ("synthesize-dry-run", damaged),
])  # fmt: skip
def test_unreadable_parquet_corpus_file(strat, tmp_path, capsys, command, damage) -> None:
    corpus = damage(Path(shutil.copy(corpus_file(strat), tmp_path / "corpus.parquet")))
    out = tmp_path / "out"
    if command == "select":
        (tmp_path / "space.yaml").write_text(SPACE)
        (tmp_path / "q.txt").write_text("Which magazine was started first?\n")
        args = ["select", "--space", str(tmp_path / "space.yaml"), "--corpus", str(corpus), "--queries",
                str(tmp_path / "q.txt"), "--out", str(out), "--dry-run", "--no-progress"]  # fmt: skip
    else:
        args = ["synthesize", "mtr", "--corpus", str(corpus), "--out", str(out), "--stages", "curate",
                "--no-progress", *(["--dry-run"] if command.endswith("dry-run") else [])]  # fmt: skip
    refused(capsys, args, [corpus], str(corpus), "not a readable Parquet file (")
    assert not (out / "curate" / "corpus").exists() or not any((out / "curate" / "corpus").iterdir())


@pytest.mark.parametrize("config", ["corpus", "qrels", "queries"])
def test_built_folder_with_a_cut_parquet_file(strat, tmp_path, capsys, config) -> None:
    folder = Path(shutil.copytree(strat, tmp_path / "stratrag"))
    bad = cut(next((folder / config).glob("*.parquet")))
    out = tmp_path / "res"
    refused(capsys, ["evaluate", str(folder), "--retrievers", "bm25", "--bootstrap", "0", "--no-progress", "--out",
                     str(out)], [folder], str(bad), "cannot read Parquet file: Parquet magic bytes")  # fmt: skip
    assert not (out / "results.json").exists()
    if config == "corpus":  # the same folder as a corpus source of `convrag select` and `synthesize mtr`
        (tmp_path / "space.yaml").write_text(SPACE)
        (tmp_path / "q.txt").write_text("Which magazine was started first?\n")
        refused(capsys, ["select", "--space", str(tmp_path / "space.yaml"), "--corpus", str(folder), "--queries",
                         str(tmp_path / "q.txt"), "--out", str(tmp_path / "sel"), "--dry-run"], [folder], str(bad),
                "not a readable Parquet file (Parquet magic bytes")  # fmt: skip
        refused(capsys, ["synthesize", "mtr", "--corpus", str(folder), "--out", str(tmp_path / "syn"), "--dry-run"],
                [folder], str(bad), "not a readable Parquet file (Parquet magic bytes")  # fmt: skip


# ------------------------------------------------------------------------------------ answerability labels
def linked(tmp_path: Path, changed: dict[str, Callable[[str], str]]) -> Path:
    """The MTRAG release as a folder of symlinks to ../shared/data, but for the files in ``changed`` (relative
    path -> edit of its text), written edited."""
    root = tmp_path / "mtrag"
    for path in MTRAG.rglob("*"):
        if path.is_file():
            rel = str(path.relative_to(MTRAG))
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if rel in changed:
                target.write_text(changed[rel](path.read_text(encoding="utf-8")), encoding="utf-8")
            else:
                target.symlink_to(path)
    return root


CONVERSATIONS = "mtrag-human/conversations/conversations.json"
REFERENCE = "mtragun-human/generation_tasks/reference.jsonl"


def _conversation_label(name: str, values: list[str]) -> Callable[[str], str]:
    def edit(text: str) -> str:
        conversations = json.loads(text)
        user = [m for m in conversations[2]["messages"] if m["speaker"] == "user"][1]
        user["enrichments"][name] = values
        return json.dumps(conversations)

    return edit


def _task_label(change: dict) -> Callable[[str], str]:
    def edit(text: str) -> str:
        lines = text.splitlines()
        lines[4] = json.dumps({**json.loads(lines[4]), **change})
        return "\n".join(lines) + "\n"

    return edit


LABEL_CASES = {  # name -> (benchmark, edited file, edit, where, expected text)
    "mtrag answerability": ("mtrag", CONVERSATIONS,
                            _conversation_label("Answerability", ["ANSWERABLE", "UNANSWERABLE"]),
                            ":1: conversation 3: messages[2].enrichments.Answerability",
                            "holds 2 different labels ['ANSWERABLE', 'UNANSWERABLE']"),
    "mtrag multi-turn": ("mtrag", CONVERSATIONS, _conversation_label("Multi-Turn", ["Follow-up", "Clarification"]),
                         ":1: conversation 3: messages[2].enrichments.Multi-Turn", "holds 2 different labels"),
    "mtrag-un answerability": ("mtrag-un", REFERENCE, _task_label({"answerability": ["UNANSWERABLE", "ANSWERABLE"]}),
                               ":5: task ", "answerability holds 2 different labels ['UNANSWERABLE', 'ANSWERABLE']"),
    "mtrag-un conflicting fields": ("mtrag-un", REFERENCE, _task_label({"Answerability": ["PARTIAL"]}), ":5: task ",
                                    "fields 'answerability' ['ANSWERABLE'] and 'Answerability' ['PARTIAL'] disagree"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(LABEL_CASES))
def test_a_second_answerability_label_is_an_error(tmp_path, capsys, case) -> None:
    benchmark, rel, edit, where, expected = LABEL_CASES[case]
    root = linked(tmp_path, {rel: edit})
    out = tmp_path / "out"
    refused(capsys, ["build", benchmark, "--source", str(root), "--config", "all-tasks", "--out", str(out)],
            [root / rel], f"{root / rel}{where}", expected)  # fmt: skip
    assert not out.exists()


def test_a_repeated_label_is_one_label(tmp_path) -> None:
    root = linked(tmp_path, {REFERENCE: _task_label({"answerability": ["ANSWERABLE", "ANSWERABLE"]})})
    out = tmp_path / "out"
    assert main(["build", "mtrag-un", "--source", str(root), "--config", "all-tasks", "--out", str(out)]) == 0
    task_id = json.loads((root / REFERENCE).read_text().splitlines()[4])["task_id"]
    rows = pq.read_table(next((out / "all-tasks").glob("*.parquet")), columns=["task_id", "answerability"])
    assert dict(zip(*rows.to_pydict().values(), strict=True))[task_id] == "ANSWERABLE"


# ---------------------------------------------------------------------------------- a missing source file
def _without(rel: str) -> Callable[[Path], tuple[Path, Path]]:
    """A linked MTRAG release without ``rel``: (source, the missing file)."""

    def make(tmp_path: Path) -> tuple[Path, Path]:
        root = linked(tmp_path, {})
        (root / rel).unlink()
        return root, root / rel

    return make


def _recor_without(name: str) -> Callable[[Path], tuple[Path, Path]]:
    def make(tmp_path: Path) -> tuple[Path, Path]:
        root = tmp_path / "recor"
        root.mkdir()
        for path in RECOR.iterdir():
            if path.name != name:
                (root / path.name).symlink_to(path)
        return root, root / name

    return make


def _recor_release_without_corpus(tmp_path: Path) -> tuple[Path, Path]:
    """The sample's law conversations in the release layout, without data/corpus/law_documents.jsonl."""
    root = tmp_path / "release"
    (root / "data" / "benchmark").mkdir(parents=True)
    lines = [ln for ln in (RECOR / "benchmark.jsonl").read_text().splitlines() if json.loads(ln)["task"] == "law"]
    (root / "data" / "benchmark" / "law_benchmark.jsonl").write_text("\n".join(lines) + "\n")
    return root, root / "data" / "corpus" / "law_documents.jsonl"


def _empty(rel: str) -> Callable[[Path], tuple[Path, Path]]:
    def make(tmp_path: Path) -> tuple[Path, Path]:
        (tmp_path / "empty").mkdir()
        return tmp_path / "empty", tmp_path / "empty" / rel

    return make


MISSING_CASES = {  # name -> (benchmark, extra arguments, how the source is made, expected text)
    "mtrag questions file (ids of the other files)": (
        "mtrag", [], _without("mtrag-human/retrieval_tasks/clapnq/clapnq_questions.jsonl"),
        "clapnq's conversation ids are read from it"),
    "mtrag conversations": ("mtrag", [], _without(CONVERSATIONS), "every MTRAG config but *-corpus needs"),
    "mtrag conversations, cited corpus": ("mtrag", ["--config", "all-cited-corpus"], _without(CONVERSATIONS),
                                          "config all-cited-corpus needs conversations"),
    "mtrag query view": ("mtrag", ["--config", "fiqa-rewrite"],
                         _without("mtrag-human/retrieval_tasks/fiqa/fiqa_rewrite.jsonl"), "needs fiqa-rewrite"),
    "mtrag corpus": ("mtrag", ["--config", "govt-corpus"],
                     lambda t: (MTRAG, MTRAG / "corpora/passage_level/govt.jsonl.zip"),
                     "the corpora are separate downloads"),
    "mtrag-un reference": ("mtrag-un", [], _without(REFERENCE), "every MTRAG-UN config but *-corpus needs reference"),
    "mtrag-un qrels": ("mtrag-un", ["--config", "all-qrels"],
                       _without("mtragun-human/retrieval_tasks/qrels/govt.tsv"), "needs govt-qrels"),
    "recor flat benchmark": ("recor", [], _recor_without("benchmark.jsonl"), "beside documents.jsonl"),
    "recor release corpus": ("recor", ["--config", "law-corpus"], _recor_release_without_corpus,
                             "config law-corpus needs law-corpus"),
    "recor release benchmark": ("recor", ["--config", "law-queries"], _empty("data/benchmark/law_benchmark.jsonl"),
                                "the law configs need it"),
    "mtr-bench test split": ("mtr-bench", [], _empty("test.parquet"), "no MTR-Bench file found"),
    "stratrag named file": ("stratrag", [], lambda t: ({"validation": t / "dev.json"}, t / "dev.json"),
                            "does not exist (for 'validation')"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(MISSING_CASES))
def test_a_missing_source_file_is_the_one_named(tmp_path, capsys, case) -> None:
    benchmark, extra, make, expected = MISSING_CASES[case]
    source, missing = make(tmp_path)
    if isinstance(source, dict):
        sources = [f"--source={k}={v}" for k, v in source.items()]
        inputs = [tmp_path]
    else:
        sources, inputs = ["--source", str(source)], [source]
    out = tmp_path / "out"
    line = refused(capsys, ["build", benchmark, *sources, *extra, "--out", str(out)], inputs, str(missing), expected)
    assert line.count(str(missing)) == 1 and not out.exists()


def test_a_missing_qrels_file_is_reported_not_silent(tmp_path, capsys) -> None:
    root, missing = _without("mtragun-human/retrieval_tasks/qrels/govt.tsv")(tmp_path)
    assert main(["build", "mtrag-un", "--source", str(root), "--config", "govt-tasks", "--out",
                 str(tmp_path / "out")]) == 0  # fmt: skip
    assert "qrels files missing from the source (their domain's tasks are not scored): 1 (e.g. qrels/govt.tsv)" in \
        capsys.readouterr().out  # fmt: skip


# ------------------------------------------------------------------------------ README with an unknown name
def _readme(folder: Path, edit: Callable[[str], str]) -> Path:
    readme = folder / "README.md"
    readme.write_text(edit(readme.read_text(encoding="utf-8")), encoding="utf-8")
    return readme


def _unknown(text: str) -> str:
    return text.replace("  benchmark: stratrag\n", "  benchmark: something-unknown\n", 1)


def _without_key(key: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        lines = text.splitlines(keepends=True)
        start = lines.index("  evaluation:\n")
        end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("    ")), len(lines))
        if key == "evaluation":
            return "".join(lines[:start] + lines[end:])
        kept = [ln for ln in lines[start:end] if not ln.startswith(f"    {key}:")]
        return "".join(lines[:start] + kept + lines[end:])

    return edit


@pytest.mark.parametrize(("edit", "expected"), [
    (_without_key("evaluation"), "the README has no convrag.evaluation block"),
    (_without_key("report"), "its convrag.evaluation block lacks ['report']"),
    (_without_key("measures"), "its convrag.evaluation block lacks ['measures']"),
])  # fmt: skip
def test_unknown_benchmark_without_its_own_profile_is_refused(strat, tmp_path, capsys, edit, expected) -> None:
    folder = Path(shutil.copytree(strat, tmp_path / "stratrag"))
    readme = _readme(folder, lambda t: edit(_unknown(t)))
    out = tmp_path / "res"
    refused(capsys, ["evaluate", str(folder), "--retrievers", "bm25", "--bootstrap", "0", "--out", str(out)],
            [folder], str(readme), "unknown benchmark 'something-unknown' (known: mtr-bench, mtrag, mtrag-un, recor, "
            "stratrag)", expected)  # fmt: skip
    assert not out.exists()


def test_a_complete_declared_profile_is_used(strat, tmp_path) -> None:
    """An unknown name with a complete profile, and a known one with a partial profile (completed by its
    builder's), score as the original folder does."""
    runs = {}
    for name, edit in [("original", lambda t: t), ("unknown", _unknown), ("partial", _without_key("measures"))]:
        folder = Path(shutil.copytree(strat, tmp_path / name))
        _readme(folder, edit)
        out = tmp_path / f"res-{name}"
        assert main(["evaluate", str(folder), "--retrievers", "bm25", "--bootstrap", "0", "--no-progress", "--out",
                     str(out)]) == 0  # fmt: skip
        results = json.loads((out / "results.json").read_text())
        runs[name] = ((out / "runs" / "bm25.trec").read_bytes(), results["systems"]["bm25"]["overall"])
    assert runs["unknown"] == runs["original"] == runs["partial"]


# -- issue 40's leftover sweep cases: one line naming the option or path, exit 2, before any model is loaded or
# document encoded, and nothing written ---------------------------------------------------------------------------
def _sweep_line(capsys: pytest.CaptureFixture[str], code: int, command: str, *parts: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "Traceback" not in err[0], err
    assert err[0].startswith(f"convrag {command}: error: "), err[0]
    for part in parts:
        assert part in err[0], (part, err[0])
    return err[0]


@pytest.mark.parametrize("command", ["evaluate", "embed"])
def test_an_unknown_dense_option_key_is_sweep_line(strat, tmp_path, capsys, command) -> None:
    argv = [command, str(strat), "--dense-option", "poolling=mean", "--no-progress"]
    argv += ["--retrievers", "dense", "--out", str(tmp_path / "o")] if command == "evaluate" else \
        ["--cache", str(tmp_path / "cache")]
    _sweep_line(capsys, main(argv), command, "--dense-option: unknown key 'poolling'", "pooling", "max_seq_length")
    assert not (tmp_path / "o").exists() and not (tmp_path / "cache").exists()


def test_embed_cache_that_is_a_file_is_refused_before_encoding(strat, tmp_path, capsys) -> None:
    cache = tmp_path / "cache.bin"
    cache.write_bytes(b"mine")
    _sweep_line(capsys, main(["embed", str(strat), "--cache", str(cache), "--no-progress"]), "embed",
              f"--cache {cache}: is a file, not a folder")
    assert cache.read_bytes() == b"mine"


def test_a_mistyped_local_folder_is_no_such_folder(strat, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(strat.parent)
    _sweep_line(capsys, main(["evaluate", f"{strat.name}g", "--retrievers", "bm25", "--out", str(tmp_path / "o")]),
              "evaluate", f"{strat.name}g: no such folder")
    (strat.parent / "out").mkdir(exist_ok=True)
    line = _sweep_line(capsys, main(["evaluate", "out/stratragg", "--out", str(tmp_path / "o")]), "evaluate",
                     "out/stratragg: no such folder (read as a local path, since out/ is a folder here")
    assert "Hub" in line and not (tmp_path / "o").exists()


@pytest.mark.parametrize("pipeline", ["mtr", "recor"])
def test_an_empty_input_file_is_named(tmp_path, capsys, pipeline) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n", encoding="utf-8")
    given = ["--corpus", str(empty), "--questioner", "fake", "--responder", "fake", "--polisher", "fake"] \
        if pipeline == "mtr" else ["--input", str(empty), "--llm", "fake"]
    code = main(["synthesize", pipeline, *given, "--out", str(tmp_path / "o"), "--no-progress"])
    _sweep_line(capsys, code, "synthesize", f"{empty}: the file is empty (no record in it)")
    assert not (tmp_path / "o").exists()


def test_a_later_stage_alone_on_a_fresh_folder_says_which_stage_to_run(tmp_path, capsys) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "title": "A", "text": "' + "word " * 300 + '"}\n', encoding="utf-8")
    code = main(["synthesize", "mtr", "--corpus", str(corpus), "--out", str(tmp_path / "o"), "--stages", "converse",
                 "--questioner", "fake", "--responder", "fake", "--no-progress"])
    _sweep_line(capsys, code, "synthesize", "stage 'cluster' has not finished in this run folder",
              "run the earlier stages first")


def test_a_deleted_queries_file_is_named_not_the_qrels(tmp_path, capsys) -> None:
    import shutil

    built = tmp_path / "recor"
    assert main(["build", "recor", "--source", str(DATA / "recor" / "sample"), "--out", str(built)]) == 0
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    for path in (copy / "law-queries").glob("*.parquet"):
        path.unlink()
    capsys.readouterr()
    line = _sweep_line(capsys, main(["evaluate", str(copy), "--retrievers", "bm25", "--out", str(tmp_path / "o")]),
                     "evaluate", "config 'law-queries'", "no data file matches law-queries/test-*")
    assert "qrels" not in line and not (tmp_path / "o").exists()
