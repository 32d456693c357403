"""A loopback stand-in for the Hugging Face Hub, for tests: the HTTP endpoints ``huggingface_hub`` (1.x) calls to
create a dataset repo and commit files to it, and those ``snapshot_download``, ``HfFileSystem`` and
``datasets.load_dataset("org/name", config)`` call to read it back.

Definitions kept by the server:

- a repo is a folder ``<root>/<kind>/<org>/<name>/files`` (kind ``datasets`` or ``spaces``) plus ``meta.json``
  (``sha``: the latest commit, ``private``, ``sdk`` of a Space);
- a commit writes its files over the previous ones and sets ``sha`` to a new 40-hex id; only the latest commit is
  served (``main`` and that sha name it);
- files are always committed inline ("regular" upload mode): no LFS or Xet storage;
- a file's ``oid`` / ``ETag`` is its git blob id (sha1 of ``blob <size>\\0<content>``);
- writes need ``Authorization: Bearer <token>``; a wrong token is refused (401) everywhere.

``python -m tests.hub_server --port 8765 --root DIR`` runs it in the foreground (token printed).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

TOKEN = "hf_convrag_test_token"
_REPO_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_REPO = "{kind:str}/{org:str}/{name:str}"
#: repo type in a create request -> its URL part
KINDS = {"dataset": "datasets", "space": "spaces"}


def git_blob_id(data: bytes) -> str:
    """The git object id of a blob holding ``data``."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _now() -> str:
    """The current UTC time as the Hub writes it (``2024-05-01T12:00:00.000Z``)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _error(status: int, code: str, message: str) -> Response:
    return JSONResponse({"error": message}, status, headers={"X-Error-Code": code, "X-Error-Message": message})


class HubState:
    """Repos stored under ``root`` (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.lock = threading.Lock()

    def repo(self, org: str, name: str) -> Path:
        return self.root / org / name

    def meta(self, org: str, name: str) -> dict[str, Any] | None:
        path = self.repo(org, name) / "meta.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def files(self, org: str, name: str) -> list[Path]:
        top = self.repo(org, name) / "files"
        return sorted(p for p in top.rglob("*") if p.is_file())


def _authorized(request: Request) -> bool | None:
    """True for the test token, False for another one, None when no token was sent."""
    header = request.headers.get("authorization", "")
    if not header:
        return None
    return header == f"Bearer {TOKEN}"


def _resolve(request: Request, state: HubState) -> tuple[str, str, dict[str, Any]] | Response:
    """The repo a read request names, or the error response the Hub would give."""
    params = request.path_params
    kind = params.get("kind", "datasets")
    if kind not in KINDS.values():
        return _error(404, "RepoNotFound", "only dataset and Space repos are served")
    org, name = f"{kind}/{params['org']}", params["name"]  # org: "<kind>/<org>", the repo's folder and URL prefix
    auth = _authorized(request)
    if auth is False:
        return _error(401, "InvalidCredentials", "Invalid credentials in Authorization header")
    meta = state.meta(org, name)
    if meta is None or (meta["private"] and not auth):
        return _error(404, "RepoNotFound", f"Repository not found: {org.split('/', 1)[1]}/{name}")
    revision = params.get("revision", "main")
    if revision not in ("main", meta["sha"]):
        return _error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
    return org, name, meta


def _entry(state: HubState, org: str, name: str, path: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """A tree / paths-info entry for a file or folder of the repo."""
    top = state.repo(org, name) / "files"
    last = {"id": meta["sha"], "title": meta["title"], "date": meta["date"]}
    rel = path.relative_to(top).as_posix()
    if path.is_dir():
        return {"type": "directory", "path": rel, "oid": hashlib.sha1(rel.encode()).hexdigest(), "lastCommit": last}
    data = path.read_bytes()
    return {"type": "file", "path": rel, "size": len(data), "oid": git_blob_id(data), "lastCommit": last}


def build_app(root: Path) -> Starlette:
    """The Starlette application serving repos under ``root``."""
    state = HubState(root)

    async def create_repo(request: Request) -> Response:
        if not _authorized(request):
            return _error(401, "InvalidCredentials", "Invalid credentials in Authorization header")
        body = await request.json()
        owner, name = body.get("organization") or "user", body.get("name", "")
        kind = KINDS.get(body.get("type"))
        if kind is None:
            return _error(400, "BadRequest", "this test Hub serves dataset and Space repos only")
        if not (_REPO_PART.match(owner) and _REPO_PART.match(name)):
            return _error(400, "BadRequest", f"invalid repo name {owner}/{name}")
        org = f"{kind}/{owner}"
        url = f"{request.base_url}{org}/{name}"
        with state.lock:
            if state.meta(org, name) is not None:  # the Hub names the existing repo in its refusal
                return JSONResponse({"error": f"You already created this {body['type']} repo", "url": url}, 409)
            (state.repo(org, name) / "files").mkdir(parents=True)
            meta = {"sha": "0" * 40, "private": body.get("visibility") == "private", "title": "initial commit",
                    "date": _now(), "sdk": body.get("sdk")}  # fmt: skip
            (state.repo(org, name) / "meta.json").write_text(json.dumps(meta))
        return JSONResponse({"url": url, "name": f"{owner}/{name}", "id": f"{owner}/{name}"})

    async def validate_yaml(request: Request) -> Response:
        return JSONResponse({"errors": [], "warnings": []})

    async def preupload(request: Request) -> Response:
        if not _authorized(request):
            return _error(401, "InvalidCredentials", "Invalid credentials in Authorization header")
        found = _resolve(request, state)
        if isinstance(found, Response):
            return found
        files = (await request.json())["files"]
        modes = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]
        return JSONResponse({"files": modes})

    async def commit(request: Request) -> Response:
        if not _authorized(request):
            return _error(401, "InvalidCredentials", "Invalid credentials in Authorization header")
        found = _resolve(request, state)
        if isinstance(found, Response):
            return found
        org, name, meta = found
        lines = [json.loads(line) for line in (await request.body()).splitlines() if line.strip()]
        header = next(item["value"] for item in lines if item["key"] == "header")
        top = state.repo(org, name) / "files"
        digest = hashlib.sha1(meta["sha"].encode())
        with state.lock:
            for item in lines:
                value = item["value"]
                target = top / value.get("path", "")
                if item["key"] == "file":
                    data = base64.b64decode(value["content"])
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data)
                    digest.update(value["path"].encode() + data)
                elif item["key"] == "deletedFile":
                    target.unlink(missing_ok=True)
                elif item["key"] == "deletedFolder":
                    shutil.rmtree(target, ignore_errors=True)
                elif item["key"] != "header":
                    return _error(400, "BadRequest", f"unsupported commit operation {item['key']!r}")
            sha = digest.hexdigest()
            meta.update(sha=sha, title=header["summary"], date=_now())
            (state.repo(org, name) / "meta.json").write_text(json.dumps(meta))
        url = f"{request.base_url}{org}/{name}/commit/{sha}"
        return JSONResponse({"commitUrl": url, "commitOid": sha, "pullRequestUrl": None})

    async def repo_info(request: Request) -> Response:
        found = _resolve(request, state)
        if isinstance(found, Response):
            return found
        org, name, meta = found
        top = state.repo(org, name) / "files"
        siblings = [{"rfilename": p.relative_to(top).as_posix(), "size": p.stat().st_size}
                    for p in state.files(org, name)]  # fmt: skip
        owner = org.split("/", 1)[1]
        return JSONResponse({"id": f"{owner}/{name}", "author": owner, "sha": meta["sha"], "private": meta["private"],
                             "lastModified": meta["date"], "createdAt": meta["date"], "disabled": False,
                             "gated": False, "tags": [], "downloads": 0, "likes": 0, "siblings": siblings})  # fmt: skip

    async def tree(request: Request) -> Response:
        found = _resolve(request, state)
        if isinstance(found, Response):
            return found
        org, name, meta = found
        top = state.repo(org, name) / "files"
        folder = top / request.path_params.get("path", "")
        if not folder.is_dir():
            return _error(404, "EntryNotFound", f"{request.path_params.get('path')} does not exist on main")
        recursive = request.query_params.get("recursive", "false").lower() == "true"
        paths = sorted(folder.rglob("*") if recursive else folder.iterdir())
        return JSONResponse([_entry(state, org, name, p, meta) for p in paths])

    async def paths_info(request: Request) -> Response:
        found = _resolve(request, state)
        if isinstance(found, Response):
            return found
        org, name, meta = found
        top = state.repo(org, name) / "files"
        form = parse_qs((await request.body()).decode())
        wanted = [top / p for p in form.get("paths", [])]
        return JSONResponse([_entry(state, org, name, p, meta) for p in wanted if p.exists() and p != top])

    async def resolve_file(request: Request) -> Response:
        found = _resolve(request, state)
        if isinstance(found, Response):
            return found
        org, name, meta = found
        path = state.repo(org, name) / "files" / request.path_params["path"]
        if not path.is_file():
            return _error(404, "EntryNotFound", f"{request.path_params['path']} does not exist on {meta['sha']}")
        headers = {"ETag": f'"{git_blob_id(path.read_bytes())}"', "X-Repo-Commit": meta["sha"],
                   "Accept-Ranges": "bytes"}  # fmt: skip
        return FileResponse(path, headers=headers, media_type="application/octet-stream")

    async def whoami(request: Request) -> Response:
        if not _authorized(request):
            return _error(401, "InvalidCredentials", "Invalid credentials in Authorization header")
        return JSONResponse({"type": "user", "name": "user", "auth": {"type": "access_token"}})

    routes = [
        Route("/api/whoami-v2", whoami),
        Route("/api/repos/create", create_repo, methods=["POST"]),
        Route("/api/validate-yaml", validate_yaml, methods=["POST"]),
        Route(f"/api/{_REPO}/preupload/{{revision:str}}", preupload, methods=["POST"]),
        Route(f"/api/{_REPO}/commit/{{revision:str}}", commit, methods=["POST"]),
        Route(f"/api/{_REPO}/paths-info/{{revision:str}}", paths_info, methods=["POST"]),
        Route(f"/api/{_REPO}/tree/{{revision:str}}", tree),
        Route(f"/api/{_REPO}/tree/{{revision:str}}/{{path:path}}", tree),
        Route(f"/api/{_REPO}/revision/{{revision:str}}", repo_info),
        Route(f"/api/{_REPO}", repo_info),
        Route(f"/{_REPO}/resolve/{{revision:str}}/{{path:path}}", resolve_file, methods=["GET", "HEAD"]),
    ]
    return Starlette(routes=routes)


@contextlib.contextmanager
def serve(root: Path, port: int = 0) -> Iterator[str]:
    """Run the test Hub on 127.0.0.1 (a free port unless ``port``) in a thread; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    server = uvicorn.Server(uvicorn.Config(build_app(root), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test Hub server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


if __name__ == "__main__":
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description="loopback test Hub (dataset repos only)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--root", help="state folder (default: a temporary one)")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        root = Path(args.root) if args.root else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        url = stack.enter_context(serve(root, args.port))
        print(f"HF_ENDPOINT={url} HF_TOKEN={TOKEN} (Ctrl-C stops)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
