"""Hub round trip through the loopback test Hub (tests/hub_server.py): `convrag push` a built folder, read it back with
`datasets.load_dataset("org/name", config)` and `convrag evaluate org/name`, and one-line errors for the failures.

The client side runs in subprocesses: huggingface_hub and datasets read HF_ENDPOINT and HF_HUB_OFFLINE at import.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import datasets
import huggingface_hub
import pytest

from convrag.cli import main
from convrag.core.errors import ConvragError
from convrag.hub.repo import names_hub_repo, resolve_folder
from tests.conftest import REPO
from tests.hub_server import TOKEN, serve

REPO_ID = "convrag-test/stratrag-mini"
CONFIGS = ("all", "corpus", "qrels", "queries")


@pytest.fixture(scope="module")
def built(stratrag_first30: Path) -> Path:
    return stratrag_first30


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    with serve(tmp_path_factory.mktemp("hub")) as url:
        yield url


@pytest.fixture(scope="module")
def client_env(hub: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment of a client of the test Hub: online, its token, an empty Hugging Face cache of its own."""
    home = tmp_path_factory.mktemp("hf_home")
    return {**os.environ, "HF_ENDPOINT": hub, "HF_TOKEN": TOKEN, "HF_HOME": str(home), "HF_HUB_OFFLINE": "0",
            "HF_DATASETS_OFFLINE": "0", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}  # fmt: skip


def _convrag(env: dict[str, str], *args: str | os.PathLike, **changes: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "convrag.cli", *map(str, args)], env={**env, **changes},
                          cwd=REPO, capture_output=True, text=True, timeout=300)  # fmt: skip


def _one_line_error(done: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit 2 and a single stderr line, the error, naming every needle (no traceback)."""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "error:" in lines[0] and all(n in lines[0] for n in needles), lines[0]


@pytest.fixture(scope="module")
def pushed(built: Path, client_env: dict[str, str]) -> str:
    done = _convrag(client_env, "push", built, "--repo", REPO_ID)
    assert done.returncode == 0, done.stderr
    assert f"{client_env['HF_ENDPOINT']}/datasets/{REPO_ID}/commit/" in done.stdout
    again = _convrag(client_env, "push", built, "--repo", REPO_ID)  # the repo exists now: a new commit
    assert again.returncode == 0, again.stderr
    return REPO_ID


def _rows(folder: str | Path, cache: Path) -> dict[str, dict[str, list]]:
    """Every config's rows as ``load_dataset`` reads the local folder, through a cache of this test's own (the
    default cache keys a local folder by file names and sizes, so a build of the same sizes from another day could
    answer instead)."""
    return {c: {s: d.to_list() for s, d in datasets.load_dataset(str(folder), c, cache_dir=str(cache)).items()}
            for c in CONFIGS}


def test_load_dataset_by_repo_id_reads_the_pushed_rows(pushed, built, client_env, tmp_path):
    script = ("import datasets, json, sys\n"
              f"rows = {{c: {{s: d.to_list() for s, d in datasets.load_dataset({pushed!r}, c).items()}} "
              f"for c in {CONFIGS!r}}}\n"
              "json.dump(rows, open(sys.argv[1], 'w'), default=str)\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "rows.json")], env=client_env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    remote = json.loads((tmp_path / "rows.json").read_text())
    local = json.loads(json.dumps(_rows(built, tmp_path / "datasets-cache"), default=str))
    assert remote == local
    assert all(remote[c]["validation"] for c in CONFIGS)


def test_evaluate_by_repo_id_equals_the_local_folder(pushed, built, client_env, tmp_path):
    common = ["--retrievers", "bm25", "--bootstrap", "0", "--no-progress"]
    done = _convrag(client_env, "evaluate", pushed, *common, "--out", tmp_path / "hub")
    assert done.returncode == 0, done.stderr
    assert main(["evaluate", str(built), *common, "--out", str(tmp_path / "local")]) == 0
    hub, local = (json.loads((tmp_path / side / "results.json").read_text()) for side in ("hub", "local"))
    for results in (hub, local):
        for system in results["systems"].values():
            system.pop("seconds")
    assert hub["systems"] == local["systems"] and hub["per_query"] == local["per_query"]
    assert hub["systems"]["bm25"]["overall"]
    assert (tmp_path / "hub/runs/bm25.trec").read_bytes() == (tmp_path / "local/runs/bm25.trec").read_bytes()
    # the snapshot stays in the cache: offline, the same repo id is read from it; another one is a one-line error
    offline = _convrag(client_env, "evaluate", pushed, *common, "--out", tmp_path / "offline", HF_HUB_OFFLINE="1")
    assert offline.returncode == 0, offline.stderr
    assert json.loads((tmp_path / "offline/results.json").read_text())["per_query"] == local["per_query"]
    missing = _convrag(client_env, "evaluate", "convrag-test/never-pushed", *common, HF_HUB_OFFLINE="1")
    _one_line_error(missing, "not in the Hugging Face cache", "HF_HUB_OFFLINE")


def test_private_repo_needs_the_token(built, client_env, tmp_path):
    repo = "convrag-test/private-mini"
    assert _convrag(client_env, "push", built, "--repo", repo, "--private").returncode == 0
    anonymous = {k: v for k, v in client_env.items() if k != "HF_TOKEN"}
    done = _convrag(anonymous, "evaluate", repo, "--out", tmp_path / "r", HF_HOME=str(tmp_path / "home"))
    _one_line_error(done, f"no dataset repo {repo}", "a private repo needs HF_TOKEN")
    done = _convrag(client_env, "evaluate", repo, "--retrievers", "bm25", "--bootstrap", "0", "--out", tmp_path / "r")
    assert done.returncode == 0 and (tmp_path / "r/runs/bm25.trec").stat().st_size > 0, done.stderr


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("case, changes, needles", [
    ("bad token", {"HF_TOKEN": "hf_wrong"}, ["401", "check HF_TOKEN"]),
    ("no token", {"HF_TOKEN": ""}, ["no Hugging Face token"]),
    ("connection refused", {"HF_ENDPOINT": "closed"}, ["cannot reach http://127.0.0.1:", "Connection refused"]),
    ("endpoint without scheme", {"HF_ENDPOINT": "127.0.0.1:9"}, ["HF_ENDPOINT '127.0.0.1:9'"]),
    ("bad repo id", {}, ["Repo id must use alphanumeric chars"]),
    ("not a build", {}, ["convrag build"]),
])  # fmt: skip
def test_push_errors_are_one_line(built, client_env, tmp_path, case, changes, needles):
    if changes.get("HF_ENDPOINT") == "closed":
        changes = {"HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}"}
    folder = built / "corpus" if case == "not a build" else built
    repo = "bad repo!!" if case == "bad repo id" else "convrag-test/failing"
    done = _convrag({**client_env, "HF_HOME": str(tmp_path)}, "push", folder, "--repo", repo, **changes)
    _one_line_error(done, *needles)


@pytest.mark.parametrize("ref, needles", [
    ("convrag-test/never-pushed", ["no dataset repo convrag-test/never-pushed on http://127.0.0.1:"]),
    (f"{REPO_ID}@no-such-branch", ["has no revision 'no-such-branch'"]),
])  # fmt: skip
def test_evaluate_unknown_repo_or_revision_is_one_line(pushed, client_env, tmp_path, ref, needles):
    _one_line_error(_convrag(client_env, "evaluate", ref, "--out", tmp_path / "r"), *needles)


def test_resolve_folder_keeps_local_paths_and_rejects_other_names(built, tmp_path, monkeypatch):
    monkeypatch.chdir(built.parent)
    assert resolve_folder(str(built)) == built
    assert resolve_folder("stratrag") == Path("stratrag")  # a local folder wins over the Hub
    assert not names_hub_repo("stratrag/corpus") and names_hub_repo("org/name@v1.0")
    for ref in ("no-such-folder", str(tmp_path / "missing"), "a/b/c", "org/name@"):
        with pytest.raises(ConvragError, match="no such folder, and not a Hub dataset repo id"):
            resolve_folder(ref)
    with pytest.raises(ConvragError, match="differs from the revision 'v2'"):
        resolve_folder("org/name@v1", revision="v2")


@pytest.mark.parametrize("command", [
    ["evaluate", "{ref}", "--out", "{tmp}/r"],
    ["audit", "{ref}", "--out", "{tmp}/r", "--dry-run"],
    ["evaluate-generation", "{ref}", "--judge", "default", "--predictions", "{tmp}/p.jsonl", "--out", "{tmp}/r"],
    ["generate", "{ref}", "--mode", "none", "--out", "{tmp}/a.jsonl"],
])  # fmt: skip
def test_commands_taking_a_folder_take_a_repo_id(tmp_path, capsys, monkeypatch, command):
    """Offline with an empty cache, every command reads ``org/name`` as a Hub repo id and says it is not cached."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    args = [a.format(ref="convrag-test/not-cached", tmp=tmp_path) for a in command]
    assert main(args) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "convrag-test/not-cached is not in the Hugging Face cache" in lines[0], lines
    assert not (tmp_path / "r").exists() and not (tmp_path / "a.jsonl").exists()


def test_embed_by_repo_id_encodes_the_pushed_corpus(pushed, client_env, tmp_path):
    """`convrag embed org/name` downloads the snapshot and fills the cache; a second run reuses every vector."""
    cache = tmp_path / "vectors"
    first = _convrag(client_env, "embed", pushed, "--cache", cache, "--device", "cpu", "--no-progress")
    assert first.returncode == 0, first.stderr
    assert "encoded" in first.stdout and len(list(cache.glob("*/meta.json"))) == 1
    again = _convrag(client_env, "embed", pushed, "--cache", cache, "--device", "cpu", "--no-progress")
    assert again.returncode == 0 and "reused (disk)" in again.stdout and "(0 encoded" in again.stdout, again.stdout


def test_space_push_uploads_the_assembled_folder(hub, client_env, tmp_path, monkeypatch):
    """`convrag space retrieval --push` creates a gradio Space repo holding the assembled files (not the marker)."""
    out = tmp_path / "space"
    done = _convrag(client_env, "space", "retrieval", "--out", out, "--push", "convrag-test/retrieval-space")
    assert done.returncode == 0, done.stderr
    assert f"{hub}/spaces/convrag-test/retrieval-space/commit/" in done.stdout
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # this process lists the test Hub
    api = huggingface_hub.HfApi(endpoint=hub, token=TOKEN)
    files = set(api.list_repo_files("convrag-test/retrieval-space", repo_type="space"))
    assert {"app.py", "README.md", "requirements.txt"} <= files and ".convrag-space.json" not in files
    assert files == {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} - {".convrag-space.json"}
    no_token = _convrag(client_env, "space", "retrieval", "--out", tmp_path / "again", "--push", "convrag-test/x",
                        HF_TOKEN="", HF_HOME=str(tmp_path / "empty-home"))  # fmt: skip
    _one_line_error(no_token, "no Hugging Face token")


def test_a_reply_that_is_not_json_is_one_line(client_env, tmp_path):
    """An HF_ENDPOINT that answers HTML (a proxy's page, a wrong host) is named, not a raw decoder message."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    class Page(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            body = b"<html><body>Gateway page</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        done = _convrag({**client_env, "HF_HOME": str(tmp_path / "home")}, "evaluate", "someorg/somebench",
                        "--out", tmp_path / "r", HF_ENDPOINT=url)
    finally:
        server.shutdown()
    _one_line_error(done, f"the reply from {url} is not JSON (is HF_ENDPOINT a Hugging Face Hub?)")
    assert "Expecting value" not in done.stderr and not (tmp_path / "r").exists()
