"""The Hugging Face Hub side of built folders: push one to a dataset repo, and read one back by repo id.

A *Hub dataset repo id* is ``org/name`` (one slash; letters, digits, ``-``, ``_``, ``.``), optionally followed by
``@revision`` (a branch, tag or commit sha). The Hub is ``$HF_ENDPOINT`` (default https://huggingface.co); the token
is ``$HF_TOKEN`` or the stored login; downloads go to the Hugging Face cache (``$HF_HOME``), and with
``HF_HUB_OFFLINE=1`` only that cache is read. Every failure is a one-line :class:`ConvragError`. What commands
record of a folder they read (``results.json``, ``convrag-export.json``) is :func:`resolve_source`'s record: repo id,
commit sha and endpoint for a Hub repo, never the cache path.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import re
from pathlib import Path
from typing import Any

from convrag.core.errors import ConvragError
from convrag.core.manifest import read_manifest

REPO_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]*[A-Za-z0-9_])(?:@(?P<revision>[^\s@]+))?$")


@functools.cache
def _http_errors(*names: str) -> tuple[type[BaseException], ...]:
    """The exception classes ``names`` of every installed HTTP client package that huggingface_hub may use:
    httpx (1.x) or its fork httpx2 (2.x); imported on first use, not when a local folder is resolved."""
    modules = [importlib.import_module(n) for n in ("httpx", "httpx2") if importlib.util.find_spec(n) is not None]
    return tuple(getattr(module, name) for module in modules for name in names if hasattr(module, name))


def _failures() -> tuple[type[BaseException], ...]:
    """What the Hub client raises: HTTP refusals (HfHubHTTPError is an OSError), connection / protocol errors (the
    HTTP client's own, not OSErrors), a malformed endpoint URL, bad arguments (HFValidationError is a ValueError),
    local files, a server reply without a field the client reads."""
    return (OSError, ValueError, KeyError, *_http_errors("HTTPError", "InvalidURL"))


def _endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def _reason(err: BaseException) -> str:
    """The error's message on one line, with a hint where the cause is a common one."""
    from huggingface_hub.errors import HfHubHTTPError

    text = " ".join(str(err).split()) or type(err).__name__
    text = re.sub(r"\s*For more information check: \S+", "", text)  # httpx's pointer to the status code's page
    if isinstance(err, HfHubHTTPError) and err.response is not None and err.response.status_code == 401:
        return f"{text} (check HF_TOKEN)"
    if isinstance(err, _http_errors("ConnectError", "TimeoutException")):
        return f"cannot reach {_endpoint()}: {text}"
    if isinstance(err, KeyError):
        return f"unexpected reply from {_endpoint()} (no {err} field)"
    if isinstance(err, json.JSONDecodeError) or type(err).__name__ == "JSONDecodeError":
        return f"the reply from {_endpoint()} is not JSON (is HF_ENDPOINT a Hugging Face Hub?)"
    if isinstance(err, _http_errors("UnsupportedProtocol", "InvalidURL")):
        return f"HF_ENDPOINT {_endpoint()!r}: {text}"
    return text


def _check_repo_id(repo_id: str) -> None:
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except ValueError as err:
        raise ConvragError(f"{repo_id!r}: {' '.join(str(err).split())}") from None


def push_folder(folder: str | os.PathLike, repo_id: str, private: bool = False, token: str | None = None) -> str:
    """Upload a folder written by ``convrag build`` to the Hub as dataset ``repo_id`` (created when missing);
    returns the commit URL. Token: the argument, else HF_TOKEN or the stored login."""
    path = Path(folder)
    if not path.is_dir():
        raise ConvragError(f"{path}: no such folder" if not path.exists() else f"{path}: not a folder")
    read_manifest(path)
    return upload_folder(path, repo_id, "dataset", "Upload benchmark built with convrag", private=private,
                         token=token)  # fmt: skip


def upload_folder(path: Path, repo_id: str, repo_type: str, message: str, private: bool = False,
                  token: str | None = None, ignore: list[str] | None = None, **create: Any) -> str:
    """Upload ``path`` as one commit to repo ``repo_id`` of ``repo_type`` (created when missing, with the
    ``create`` arguments of ``HfApi.create_repo``); the commit URL. Every failure is one ``ConvragError`` line."""
    from huggingface_hub import HfApi, get_token

    _check_repo_id(repo_id)
    token = token or get_token()
    if not token:
        raise ConvragError(f"cannot push {path}: no Hugging Face token (set HF_TOKEN or run `hf auth login`)")
    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True, **create)
        commit = api.upload_folder(folder_path=str(path), repo_id=repo_id, repo_type=repo_type,
                                   ignore_patterns=ignore, commit_message=message)  # fmt: skip
    except _failures() as err:
        raise ConvragError(f"cannot push {path} to {repo_id}: {_reason(err)}") from None
    return str(commit)


def names_hub_repo(ref: str) -> bool:
    """Whether ``ref`` is read as a Hub dataset repo id: it has that form, is no local path, and its ``org`` part is
    no local folder either (``out/stratragg``, with a folder ``out`` here, is a mistyped local path)."""
    return bool(REPO_ID.match(ref)) and not Path(ref).exists() and not Path(ref.split("/", 1)[0]).is_dir()


def resolve_folder(ref: str, revision: str | None = None) -> Path:
    """The local folder ``ref`` names: ``ref`` itself when that path exists, else the snapshot of Hub dataset repo
    ``ref`` (``org/name[@revision]``) downloaded into (or, offline, found in) the Hugging Face cache."""
    return resolve_source(ref, revision)[0]


def resolve_source(ref: str, revision: str | None = None) -> tuple[Path, dict[str, str]]:
    """The folder :func:`resolve_folder` gives and where it came from, with no absolute local path: a local folder
    is ``{"folder": its path relative to the working directory}`` (:func:`convrag.core.provenance.local_path`); a Hub
    repo is ``{"repo_id", "revision": the commit sha of the snapshot read, "requested_revision": the branch, tag or sha
    asked for (default main), "endpoint": the Hub's URL ($HF_ENDPOINT)}``."""
    from huggingface_hub import constants

    from convrag.core.provenance import local_path

    if Path(ref).exists():
        return Path(ref), {"folder": local_path(ref)}
    match = REPO_ID.match(ref)
    if not match:
        raise ConvragError(f"{ref}: no such folder, and not a Hub dataset repo id (org/name[@revision])")
    if not names_hub_repo(ref):
        parent = ref.split("/", 1)[0]
        raise ConvragError(f"{ref}: no such folder (read as a local path, since {parent}/ is a folder here; "
                           f"to read a Hub repo of that name, run from another directory)")
    repo, pinned = match.group("repo"), match.group("revision")
    if pinned and revision and pinned != revision:
        raise ConvragError(f"{ref}: revision {pinned!r} differs from the revision {revision!r} also given")
    folder = _download(ref, repo, pinned or revision)  # .../snapshots/<commit sha>
    return folder, {"repo_id": repo, "revision": folder.name, "requested_revision": pinned or revision
                    or constants.DEFAULT_REVISION, "endpoint": _endpoint()}  # fmt: skip


def repo_snapshot(ref: str) -> Path | None:
    """The snapshot of Hub dataset repo ``ref`` (``org/name[@revision]``) downloaded as :func:`resolve_folder` does,
    or None when the Hub has no such repo yet (a command that writes to it creates it)."""
    from huggingface_hub import HfApi

    match = REPO_ID.match(ref)
    if not match:
        raise ConvragError(f"{ref}: not a Hub dataset repo id (org/name[@revision])")
    repo = match.group("repo")
    _check_repo_id(repo)
    try:
        exists = HfApi().repo_exists(repo, repo_type="dataset")
    except _failures() as err:
        raise ConvragError(f"cannot look up dataset repo {repo} on {_endpoint()}: {_reason(err)}") from None
    return _download(ref, repo, match.group("revision")) if exists else None


def source_label(folder: Path, source: dict[str, str]) -> str:
    """Where a benchmark read by :func:`resolve_source` came from, as results folders record it: ``repo_id@commit``
    for a Hub repo, else the folder's absolute path."""
    if "repo_id" in source:
        return f"{source['repo_id']}@{source['revision']}"
    return str(folder.resolve())


def _download(ref: str, repo: str, revision: str | None) -> Path:
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    _check_repo_id(repo)
    where = f"{repo}@{revision}" if revision else repo
    try:
        return Path(snapshot_download(repo, repo_type="dataset", revision=revision))
    except RevisionNotFoundError:
        raise ConvragError(f"{ref}: dataset repo {repo} has no revision {revision!r} on {_endpoint()}") from None
    except RepositoryNotFoundError:
        raise ConvragError(f"{ref}: no such folder, and no dataset repo {repo} on {_endpoint()} "
                           "(a private repo needs HF_TOKEN)") from None  # fmt: skip
    except LocalEntryNotFoundError as err:
        if constants.is_offline_mode():
            raise ConvragError(f"{ref}: no such folder, and dataset repo {where} is not in the Hugging Face cache "
                               f"({constants.HF_HUB_CACHE}); HF_HUB_OFFLINE is set, so nothing is downloaded: "
                               "unset it to download the repo once") from None  # fmt: skip
        first = (str(err).splitlines() or [""])[0].removeprefix("Got: ")  # the client names the network error there
        raise ConvragError(f"cannot download dataset repo {where}: cannot reach {_endpoint()}, and the repo is not "
                           f"in the Hugging Face cache ({first})") from None  # fmt: skip
    except _failures() as err:
        raise ConvragError(f"cannot download dataset repo {where} from {_endpoint()}: {_reason(err)}") from None
