"""Trust (issue 12) for `convrag build` and `convrag push`: no build destroys data, empty configs are reported
instead of crashing, push failures and unknown options end in one line with exit code 2."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import datasets
import huggingface_hub
import pytest
import yaml
from huggingface_hub.errors import HfHubHTTPError, HTTPError

from convrag.cli import main
from convrag.core import out_folder
from convrag.hub import export
from convrag.hub.export import EMPTY_CONFIGS, EMPTY_SPLITS, read_manifest
from tests.conftest import DATA, REPO

DEV = DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"
TRAIN10 = DATA / "hotpotqa" / "hotpot_train_v1.1.first10.indent4.json"
RECOR = DATA / "recor" / "sample"
MTRAG = DATA / "mtrag"


# ---------------------------------------------------------------- helpers


def _copy(src: Path, dst: Path) -> Path:
    """A writable copy of a real file or folder (the shared data is read-only)."""
    if src.is_dir():
        shutil.copytree(src, dst)
        for root, _, files in os.walk(dst):
            os.chmod(root, 0o755)
            for name in files:
                os.chmod(os.path.join(root, name), 0o644)
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    return dst


def _hashes(path: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``path`` (folders as "dir"), or of ``path`` itself."""
    if path.is_file():
        return {"": hashlib.sha256(path.read_bytes()).hexdigest()}
    out = {}
    for p in sorted(path.rglob("*")):
        out[str(p.relative_to(path))] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _leftovers(parent: Path) -> list[str]:
    """Our own work files beside an output folder (temporary builds, moved-aside builds, locks)."""
    return sorted(p.name for p in parent.iterdir() if ".convrag-" in p.name)


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str, *needles: str) -> None:
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, (needle, err)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A small good StratRAG build (queries + qrels of the 30 dev records), copied by each test that needs one."""
    out = tmp_path_factory.mktemp("pristine") / "build"
    assert main(["build", "stratrag", "--source", str(DEV), "--config", "queries", "--config", "qrels",
                 "--out", str(out)]) == 0  # fmt: skip
    return out


@pytest.fixture
def previous(pristine, tmp_path) -> Path:
    """A previous good build at ``tmp_path/out/build``."""
    out = tmp_path / "out" / "build"
    shutil.copytree(pristine, out)
    return out


def _good_build(out: Path) -> list[str]:
    return ["build", "stratrag", "--source", str(DEV), "--config", "queries", "--out", str(out), "--overwrite"]


# ---------------------------------------------------------------- 1. data loss


def _src_recor(tmp: Path) -> tuple[list[str], Path]:
    src = _copy(RECOR, tmp / "src")
    return ["recor", "--source", str(src), "--out", str(src)], src


def _src_contained(tmp: Path) -> tuple[list[str], Path]:
    src = _copy(RECOR, tmp / "box" / "src")
    return ["recor", "--source", str(src), "--out", str(tmp / "box")], tmp / "box"


def _src_file_inside(tmp: Path) -> tuple[list[str], Path]:
    src = _copy(DEV, tmp / "data" / "hotpot_dev.json")
    return ["stratrag", "--source", str(src), "--out", str(tmp / "data")], tmp / "data"


def _src_named_file_inside(tmp: Path) -> tuple[list[str], Path]:
    src = _copy(DEV, tmp / "data" / "dev.json")
    return ["stratrag", "--source", f"validation={src}", "--out", str(tmp / "data")], tmp / "data"


def _src_mtrag_root(tmp: Path) -> tuple[list[str], Path]:
    src = _copy(MTRAG / "mtrag-human", tmp / "mt" / "mtrag-human").parent
    return ["mtrag", "--source", f"root={src}", "--out", str(src)], src


def _src_unnormalised(tmp: Path) -> tuple[list[str], Path]:
    src = _copy(RECOR, tmp / "src")
    return ["recor", "--source", str(src), "--out", f"{tmp}/src/../src/."], src


def _src_symlink(tmp: Path) -> tuple[list[str], Path]:
    src = _copy(RECOR, tmp / "src")
    (tmp / "link").symlink_to(src, target_is_directory=True)
    return ["recor", "--source", str(src), "--out", str(tmp / "link")], src


@pytest.mark.parametrize("make", [_src_recor, _src_contained, _src_file_inside, _src_named_file_inside,
                                  _src_mtrag_root, _src_unnormalised, _src_symlink])  # fmt: skip
def test_out_equal_to_or_containing_the_source_is_refused(tmp_path, capsys, make):
    args, keep = make(tmp_path)
    before = _hashes(keep)
    code, _, err = _run(capsys, "build", *args, "--overwrite")
    assert code == 2
    _one_line(err, "--out", "source")
    assert _hashes(keep) == before
    assert not _leftovers(keep.parent)


def _bad_missing(tmp: Path) -> list[str]:
    return ["--source", str(tmp / "nosuch.json")]


def _bad_truncated(tmp: Path) -> list[str]:
    bad = tmp / "hotpot_dev_truncated.json"
    bad.write_bytes(DEV.read_bytes()[:5000])
    return ["--source", str(bad)]


def _bad_field(tmp: Path) -> list[str]:
    records = json.loads(DEV.read_text())
    records[4]["question"] = 5
    bad = tmp / "hotpot_dev_badfield.json"
    bad.write_text(json.dumps(records, indent=1))
    return ["--source", str(bad)]


def _bad_non_utf8(tmp: Path) -> list[str]:
    bad = tmp / "hotpot_dev_latin1.json"
    bad.write_bytes(DEV.read_bytes().replace(b"the", b"th\xe9", 1))
    return ["--source", str(bad)]


def _bad_fill(tmp: Path) -> list[str]:
    return ["--source", str(DEV), "--option", "fill=bogus"]


def _bad_all_empty(tmp: Path) -> list[str]:
    return ["--source", str(DEV), "--option", "max_validation=0"]


def _bad_config(tmp: Path) -> list[str]:
    return ["--source", str(DEV), "--config", "nosuch"]


@pytest.mark.parametrize("bad", [_bad_missing, _bad_truncated, _bad_field, _bad_non_utf8, _bad_fill, _bad_all_empty,
                                 _bad_config])  # fmt: skip
def test_failing_build_leaves_the_previous_out_byte_identical(previous, tmp_path, capsys, bad):
    before = _hashes(previous)
    code, _, err = _run(capsys, "build", "stratrag", *bad(tmp_path), "--out", previous, "--overwrite")
    assert code == 2
    _one_line(err)
    assert _hashes(previous) == before
    assert not _leftovers(previous.parent)


def test_failing_build_into_a_new_folder_leaves_nothing(tmp_path, capsys):
    out = tmp_path / "new" / "deeper" / "build"
    code, _, err = _run(capsys, "build", "stratrag", *_bad_truncated(tmp_path), "--out", out)
    assert code == 2
    _one_line(err, "hotpot_dev_truncated.json")
    assert not (tmp_path / "new").exists()


def _raise_on_second_call(monkeypatch, name: str, exc: type[BaseException]) -> None:
    real = getattr(export, name)
    calls = []

    def patched(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2 or name == "write_readme":
            raise exc()
        return real(*args, **kwargs)

    monkeypatch.setattr(export, name, patched)


@pytest.mark.parametrize("where", ["build_config", "write_arrow_shards", "write_readme"])
@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit, MemoryError])
def test_interrupted_build_leaves_the_previous_out_and_the_next_build_succeeds(previous, capsys, monkeypatch,
                                                                               where, exc):  # fmt: skip
    before = _hashes(previous)
    _raise_on_second_call(monkeypatch, where, exc)
    argv = ["build", "stratrag", "--source", str(DEV), "--out", str(previous), "--overwrite"]
    if exc is KeyboardInterrupt:  # Ctrl-C: one line saying nothing was replaced, exit 130 (the CLI's own handling)
        capsys.readouterr()
        assert main(argv) == 130
        assert "convrag build: interrupted; nothing was replaced" in capsys.readouterr().err
    else:
        with pytest.raises(exc):
            main(argv)
    assert _hashes(previous) == before
    assert not _leftovers(previous.parent)
    monkeypatch.undo()
    assert main(_good_build(previous)) == 0
    assert datasets.load_dataset(str(previous), "queries", split="validation").num_rows == 30
    assert not (previous / "qrels").exists()  # replaced by the new build, not merged into the old one
    assert not _leftovers(previous.parent)


def test_failed_swap_puts_the_previous_out_back(previous, capsys, monkeypatch):
    before = _hashes(previous)
    real = os.rename

    def rename(src, dst):
        if ".convrag-tmp-" in os.fspath(src) and os.fspath(dst) == str(previous):
            raise PermissionError(13, "Permission denied", os.fspath(dst))
        real(src, dst)

    monkeypatch.setattr(out_folder.os, "rename", rename)
    code, _, err = _run(capsys, *_good_build(previous))
    assert code == 2
    _one_line(err, str(previous))
    assert _hashes(previous) == before
    assert not _leftovers(previous.parent)


HELPER = """
import os, sys, time
from convrag.hub import export
from convrag.cli import main

marker, stage = sys.argv[1], sys.argv[2]

def pause():
    open(marker, "w").close()
    time.sleep(300)

if stage == "write":
    real = export.write_arrow_shards
    def slow(*args, **kwargs):
        paths = real(*args, **kwargs)
        pause()
        return paths
    export.write_arrow_shards = slow
else:
    real_rename = os.rename
    def rename(src, dst):
        real_rename(src, dst)
        if ".convrag-old-" in os.fspath(dst):
            pause()
    os.rename = rename
sys.exit(main(sys.argv[3:]))
"""


def _start_and_stop(tmp_path: Path, previous: Path, stage: str, sig: int) -> int:
    """Run a build into ``previous`` in a subprocess, paused at ``stage``; send ``sig``; return its exit code."""
    script, marker = tmp_path / "helper.py", tmp_path / "paused"
    script.write_text(HELPER)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, str(script), str(marker), stage, *_good_build(previous)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the helper build never reached its pause"
        proc.send_signal(sig)
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigkill_while_writing_leaves_the_previous_out_and_the_next_build_cleans_up(previous, tmp_path):
    before = _hashes(previous)
    assert _start_and_stop(tmp_path, previous, "write", signal.SIGKILL) == -signal.SIGKILL
    assert _hashes(previous) == before
    assert any(".convrag-tmp-" in name for name in _leftovers(previous.parent))  # a killed build cannot clean up
    assert main(_good_build(previous)) == 0
    assert not _leftovers(previous.parent)
    assert datasets.load_dataset(str(previous), "queries", split="validation").num_rows == 30


def test_sigkill_mid_swap_is_repaired_by_the_next_build_even_a_failing_one(previous, tmp_path, capsys):
    before = _hashes(previous)
    assert _start_and_stop(tmp_path, previous, "swap", signal.SIGKILL) == -signal.SIGKILL
    assert not previous.exists() and any(".convrag-old-" in n for n in _leftovers(previous.parent))
    code, _, err = _run(capsys, "build", "stratrag", *_bad_truncated(tmp_path), "--out", previous, "--overwrite")
    assert code == 2
    _one_line(err, "hotpot_dev_truncated.json")
    assert _hashes(previous) == before  # the previous build was put back
    assert not _leftovers(previous.parent)
    assert main(_good_build(previous)) == 0


def test_sigterm_removes_the_temporary_folder(previous, tmp_path):
    before = _hashes(previous)
    assert _start_and_stop(tmp_path, previous, "write", signal.SIGTERM) == 128 + signal.SIGTERM
    assert _hashes(previous) == before
    assert not _leftovers(previous.parent)


def test_stale_leftovers_are_cleaned_and_foreign_files_kept(previous, capsys):
    parent = previous.parent
    (parent / ".build.convrag-tmp-deadbeef" / "queries").mkdir(parents=True)
    (parent / ".build.convrag-old-0badcafe").mkdir()
    (parent / ".build.convrag-lock").write_text("")
    (parent / ".build.convrag-notes").mkdir()  # not one of our names: kept
    (parent / ".other.convrag-tmp-deadbeef").mkdir()  # another output folder's: kept
    code, _, _ = _run(capsys, *_good_build(previous))
    assert code == 0
    assert _leftovers(parent) == [".build.convrag-notes", ".other.convrag-tmp-deadbeef"]


def test_a_second_build_into_the_same_folder_is_refused(previous, capsys):
    before = _hashes(previous)
    with out_folder.locked(previous):
        code, _, err = _run(capsys, *_good_build(previous))
    assert code == 2
    _one_line(err, "another `convrag build`")
    assert _hashes(previous) == before


def _file_plain(tmp: Path) -> tuple[Path, Path]:
    f = tmp / "results.txt"
    f.write_text("keep me\n")
    return f, f


def _file_symlink(tmp: Path) -> tuple[Path, Path]:
    f = tmp / "results.txt"
    f.write_text("keep me\n")
    (tmp / "link").symlink_to(f)
    return tmp / "link", f


def _file_parent(tmp: Path) -> tuple[Path, Path]:
    f = tmp / "results.txt"
    f.write_text("keep me\n")
    return f / "sub" / "build", f


@pytest.mark.parametrize("make", [_file_plain, _file_symlink, _file_parent])
@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_out_naming_an_existing_file(tmp_path, capsys, make, overwrite):
    out, keep = make(tmp_path)
    code, _, err = _run(capsys, "build", "stratrag", "--source", DEV, "--out", out, *overwrite)
    assert code == 2
    _one_line(err, "is a file" if make is _file_parent else "existing file")
    assert keep.read_text() == "keep me\n"
    assert not _leftovers(tmp_path)


def _user_notes(folder: Path) -> None:
    (folder / "notes.txt").write_text("my notes\n")


def _user_readme(folder: Path) -> None:
    (folder / "README.md").write_text("---\nlicense: mit\n---\n# My project\n")


def _user_bad_yaml(folder: Path) -> None:
    (folder / "README.md").write_text("---\nfoo: [unclosed\n---\n")


def _user_latin1(folder: Path) -> None:
    (folder / "README.md").write_bytes(b"---\nconvrag: {benchmark: caf\xe9}\n---\n")


def _user_old_half_build(folder: Path) -> None:
    shutil.copytree(DATA / "recor" / "sample", folder / "all-queries")  # a build that died before its README


@pytest.mark.parametrize("fill", [_user_notes, _user_readme, _user_bad_yaml, _user_latin1, _user_old_half_build])
def test_a_non_empty_folder_that_is_not_a_build_is_never_replaced(tmp_path, capsys, fill):
    out = tmp_path / "mine"
    out.mkdir()
    fill(out)
    before = _hashes(out)
    code, _, err = _run(capsys, "build", "stratrag", "--source", DEV, "--out", out)
    assert code == 2
    _one_line(err, "not empty", "--overwrite")
    code, _, err = _run(capsys, "build", "stratrag", "--source", DEV, "--out", out, "--overwrite")
    assert code == 2
    _one_line(err, "not a folder written by `convrag build`")
    assert _hashes(out) == before
    assert not _leftovers(tmp_path)


def test_overwrite_through_a_symlink_keeps_the_link(previous, tmp_path, capsys):
    link = tmp_path / "link"
    link.symlink_to(previous, target_is_directory=True)
    code, _, _ = _run(capsys, *_good_build(link))
    assert code == 0
    assert link.is_symlink() and (previous / "queries").is_dir() and not (previous / "qrels").exists()
    assert oct(previous.stat().st_mode & 0o777) == oct(0o777 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------- 2. empty configs


def _mtrag_one_domain(tmp: Path) -> list[str]:
    root = tmp / "mtrag1" / "mtrag-human"
    shutil.copytree(MTRAG / "mtrag-human" / "retrieval_tasks" / "clapnq", root / "retrieval_tasks" / "clapnq")
    conversations = json.loads((MTRAG / "mtrag-human" / "conversations" / "conversations.json").read_text())
    (root / "conversations").mkdir()
    (root / "conversations" / "conversations.json").write_text(
        json.dumps([c for c in conversations if "clapnq" in c["domain"]])
    )
    return ["mtrag", "--source", str(root.parent)]


def _mtrag_un_one_domain(tmp: Path) -> list[str]:
    root = tmp / "un1" / "mtragun-human"
    (root / "generation_tasks").mkdir(parents=True)
    (root / "retrieval_tasks" / "qrels").mkdir(parents=True)
    shutil.copyfile(MTRAG / "mtragun-human" / "retrieval_tasks" / "qrels" / "govt.tsv",
                    root / "retrieval_tasks" / "qrels" / "govt.tsv")  # fmt: skip
    lines = (MTRAG / "mtragun-human" / "generation_tasks" / "reference.jsonl").read_text().splitlines()
    kept = [line for line in lines if "govt" in json.loads(line)["Collection"].lower()]
    (root / "generation_tasks" / "reference.jsonl").write_text("\n".join(kept) + "\n")
    return ["mtrag-un", "--source", str(root.parent)]


def _recor_without_documents(tmp: Path) -> list[str]:
    src = _copy(RECOR, tmp / "recor")
    (src / "documents.jsonl").unlink()
    return ["recor", "--source", str(src)]


EMPTY_CASES = {
    # StratRAG train first10: no yes/no question among the 10 records
    "stratrag-train10": (lambda tmp: ["stratrag", "--source", str(TRAIN10)], EMPTY_CONFIGS, ["yes-no"]),
    # both splits: yes-no has validation rows only
    "stratrag-train10+dev": (
        lambda tmp: ["stratrag", "--source", f"train={TRAIN10}", "--source", f"validation={DEV}"],
        EMPTY_SPLITS, ["yes-no:train"],
    ),
    "stratrag-type-only": (
        lambda tmp: ["stratrag", "--source", str(TRAIN10), "--config", "yes-no", "--config", "all"],
        EMPTY_CONFIGS, ["yes-no"],
    ),
    "mtrag-one-domain": (_mtrag_one_domain, EMPTY_CONFIGS,
                         [f"{d}-{v}" for d in ("cloud", "fiqa", "govt") for v in ("conversations", "tasks",
                                                                                 "cited-corpus")]),
    "mtrag-un-one-domain": (_mtrag_un_one_domain, EMPTY_CONFIGS,
                            [f"{d}-{v}" for d in ("clapnq", "cloud", "fiqa") for v in ("tasks", "lastturn",
                                                                                       "questions", "cited-corpus")]),
    "recor-without-documents": (_recor_without_documents, EMPTY_CONFIGS,
                                ["all-corpus", "biology-corpus", "earth_science-corpus", "drones-corpus",
                                 "law-corpus"]),
}  # fmt: skip


@pytest.mark.parametrize("case", list(EMPTY_CASES))
def test_empty_configs_are_skipped_and_reported(tmp_path, capsys, case):
    make, event, expected = EMPTY_CASES[case]
    out = tmp_path / "out"
    code, stdout, err = _run(capsys, "build", *make(tmp_path), "--out", out)
    assert code == 0, err
    assert "Traceback" not in err
    assert f"{event}: {len(expected)}" in stdout
    report = read_manifest(out)["report"]
    assert report["counts"][event] == len(expected)
    assert sorted(report["examples"][event]) == sorted(expected)
    card = yaml.safe_load((out / "README.md").read_text().split("---")[1])
    built = {c["config_name"]: [f["split"] for f in c["data_files"]] for c in card["configs"]}
    infos = card["dataset_info"] if isinstance(card["dataset_info"], list) else [card["dataset_info"]]
    info_splits = {i["config_name"]: [s["name"] for s in i["splits"]] for i in infos}
    for name in expected:
        config, _, split = name.partition(":")
        if split:
            assert split not in built[config] and split not in info_splits[config] and (out / config).is_dir()
        else:
            assert config not in built and not (out / config).exists()
            with pytest.raises(ValueError, match=config):
                datasets.load_dataset(str(out), config)
    for config, splits in built.items():
        for split in splits:
            assert datasets.load_dataset(str(out), config, split=split).num_rows > 0, (config, split)
    assert not _leftovers(tmp_path)


def test_evaluate_on_a_build_with_empty_configs(tmp_path, capsys):
    """StratRAG train first10 (yes-no empty) evaluates; RECOR without documents has no corpus: one line, exit 2."""
    out = tmp_path / "s"
    assert _run(capsys, "build", "stratrag", "--source", TRAIN10, "--out", out)[0] == 0
    code, _, err = _run(capsys, "evaluate", out, "--retrievers", "random,bm25", "--out", tmp_path / "r1",
                        "--bootstrap", "20", "--no-progress")  # fmt: skip
    assert code == 0, err
    out = tmp_path / "r"
    assert _run(capsys, "build", *_recor_without_documents(tmp_path), "--out", out)[0] == 0
    code, _, err = _run(capsys, "evaluate", out, "--retrievers", "bm25", "--out", tmp_path / "r2", "--no-progress")
    assert code == 2
    _one_line(err, "corpus")


@pytest.mark.parametrize("args", [
    ["--source", str(DEV), "--option", "max_validation=0"],
    ["--source", str(TRAIN10), "--config", "yes-no"],
    ["--source", str(TRAIN10), "--option", "max_train=0", "--config", "queries", "--config", "corpus"],
])  # fmt: skip
def test_a_build_where_every_config_is_empty_is_an_error(tmp_path, capsys, args):
    code, _, err = _run(capsys, "build", "stratrag", *args, "--out", tmp_path / "out")
    assert code == 2
    _one_line(err, "0 rows", "nothing to write")
    assert not (tmp_path / "out").exists() and not _leftovers(tmp_path)


# ---------------------------------------------------------------- 3. push


def _http_module():
    return importlib.import_module(HTTPError.__module__)  # the HTTP client huggingface_hub raises from


def _unauthorized(*args, **kwargs):
    http = _http_module()
    response = http.Response(401, request=http.Request("POST", "https://huggingface.co/api/repos/create"))
    raise HfHubHTTPError("401 Client Error: Unauthorized\n\nInvalid credentials in Authorization header",
                         response=response)  # fmt: skip


def _unreachable(*args, **kwargs):
    raise _http_module().ConnectError("[Errno -2] Name or service not known")


PUSH_FAILURES = {
    "missing folder": (lambda f: f.parent / "nosuch", None, None, "no such folder"),
    "a file": (lambda f: f / "README.md", None, None, "not a folder"),
    "not a build": (lambda f: f / "queries", None, None, "convrag build"),
    "README without block": (lambda f: _user_readme(f) or f, None, None, "no 'convrag' block"),
    "README bad YAML": (lambda f: _user_bad_yaml(f) or f, None, None, "invalid YAML header"),
    "README not UTF-8": (lambda f: _user_latin1(f) or f, None, None, "not UTF-8"),
    "no token": (lambda f: f, None, None, "no Hugging Face token"),
    "offline": (lambda f: f, "hf_fake", None, "offline mode"),
    "bad repo id": (lambda f: f, "hf_fake", None, "Repo id"),
    "unauthorized": (lambda f: f, "hf_fake", _unauthorized, "401 Client Error"),
    "no network": (lambda f: f, "hf_fake", _unreachable, "Name or service not known"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(PUSH_FAILURES))
def test_push_failures_are_one_line(previous, capsys, monkeypatch, case):
    prepare, token, create_repo, needle = PUSH_FAILURES[case]
    folder = prepare(previous)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: token)
    if create_repo is not None:
        monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    repo = "bad repo!!" if case == "bad repo id" else "me/bench"
    code, _, err = _run(capsys, "push", folder, "--repo", repo)
    assert code == 2
    _one_line(err, needle)


# ---------------------------------------------------------------- 6. --option


@pytest.mark.parametrize("benchmark, option, known", [
    ("stratrag", "bogus=1", "pool_size"),
    ("stratrag", "view=corpus", "max_train"),
    ("stratrag", "name=all", "seed"),
    ("stratrag", "data_dir=/tmp", "source"),
    ("mtrag", "domain=clapnq", "source"),
    ("mtrag-un", "release=8turn", "source"),
    ("recor", "seed=3", "source"),
    ("mtr-bench", "view=corpus", "release"),
])  # fmt: skip
def test_unknown_option_names_the_key_and_the_known_ones(tmp_path, capsys, benchmark, option, known):
    code, _, err = _run(capsys, "build", benchmark, "--option", option, "--out", tmp_path / "out")
    assert code == 2
    _one_line(err, f"option {option.split('=')[0]!r}", known)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("option, expects", [
    ("seed=abc", "int"), ("max_train=1.5", "int | None"), ("pool_size=true", "int"), ("max_validation=[3]", "int"),
])  # fmt: skip
def test_option_of_the_wrong_type(tmp_path, capsys, option, expects):
    code, _, err = _run(capsys, "build", "stratrag", "--option", option, "--out", tmp_path / "out")
    assert code == 2
    _one_line(err, f"expects {expects}")
    assert not (tmp_path / "out").exists()


def test_option_values_are_typed_per_option(tmp_path, capsys):
    out = tmp_path / "out"
    code, _, err = _run(capsys, "build", "stratrag", "--source", DEV, "--config", "all", "--out", out,
                        "--option", "created_at=2024-01-01", "--option", "max_validation=4",
                        "--option", "sample_seed=null")  # fmt: skip
    assert code == 0, err
    rows = datasets.load_dataset(str(out), "all", split="validation")
    assert rows.num_rows == 4 and set(rows["created_at"]) == {"2024-01-01"}
    assert read_manifest(out)["options"]["max_validation"] == 4


@pytest.mark.parametrize("name", ["null", "123", "true", "yes", "{a: b}"])
def test_source_paths_are_taken_verbatim(tmp_path, capsys, monkeypatch, name):
    """A source folder whose name YAML would read as null / a number / a boolean is still that folder."""
    _copy(RECOR, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(capsys, "build", "recor", "--source", name, "--config", "law-queries", "--out", "out")
    assert code == 0, err
    assert datasets.load_dataset(str(tmp_path / "out"), "law-queries", split="test").num_rows == 3
