"""The ``leaderboard`` command: ``add`` checks a ``convrag evaluate`` results folder and adds it to a collection
(a local folder or a Hub dataset repo); ``build`` writes the collection's board as static files."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from convrag.cli.arguments import OVERWRITE_HELP
from convrag.core.errors import ConvragError

COLLECTION_HELP = "the collection: a local folder, or a Hub dataset repo id org/name[@revision]"


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``leaderboard`` (``add``, ``build``) on the subparsers ``sub``."""
    p = sub.add_parser(
        "leaderboard",
        help="gather `convrag evaluate` results of many systems into a collection "
        "and build its board (tables with CIs, paired tests, turn positions)",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    a = actions.add_parser("add", help="check a results folder (it must re-score from its run files) and add it")
    a.add_argument("results", help="folder written by `convrag evaluate`")
    a.add_argument("--collection", required=True, help=COLLECTION_HELP + " (created by its first entry)")
    a.add_argument("--name", help="entry name (default: the results folder's name)")
    a.set_defaults(func=cmd_add)
    b = actions.add_parser("build", help="write the board of a collection: board.json, board.md, index.html")
    b.add_argument("--collection", required=True, help=COLLECTION_HELP)
    b.add_argument("--out", required=True, help="folder to write the board into")
    b.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    b.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for CIs (default 1000)")
    b.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and the randomisation tests")
    b.add_argument("--digits", type=int, default=4, help="decimals shown in board.md / index.html (JSON is unrounded)")
    b.add_argument(
        "--space",
        action="store_true",
        help="also write the Gradio Space files (app.py, README.md, "
        "sections.json, requirements.txt): --out is then a Space folder",
    )
    b.add_argument("--push", metavar="ORG/NAME", help="then upload --out as this Space repo (implies --space)")
    b.add_argument("--private", action="store_true", help="with --push: create the Space private")
    b.set_defaults(func=cmd_build)


def cmd_add(args: argparse.Namespace) -> int:
    """Add one results folder to the collection; for a Hub repo, upload the collection as one commit."""
    from convrag.leaderboard.collection import add_entry, opened, publish

    if not Path(args.results).is_dir():
        raise ConvragError(f"{args.results}: no such folder")
    with opened(args.collection, write=True) as (root, hub):
        name = add_entry(root, args.results, args.name)
        print(f"Added entry {name} to {args.collection}")
        if hub is not None:
            url = publish(root, hub["repo_id"], f"Add leaderboard entry {name}")
            print(f"Pushed to dataset repo {hub['repo_id']}: {url}")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    """Build the board of the collection into ``--out``."""
    from convrag.core.out_folder import claimed_out
    from convrag.leaderboard.board import build_board
    from convrag.leaderboard.collection import opened, read_entries, read_header
    from convrag.leaderboard.render import write_board

    for flag, value in (("--bootstrap", args.bootstrap), ("--digits", args.digits)):
        if value < 0:
            raise ConvragError(f"{flag} must be at least 0, got {value}")
    with opened(args.collection, write=False) as (root, hub):
        header = read_header(root)
        if header is None:
            raise ConvragError(f"{args.collection}: not a leaderboard collection (no collection.json)")
        board = build_board(header, read_entries(root), n_bootstrap=args.bootstrap, seed=args.seed)
        if hub is None:
            base = os.path.relpath(root.resolve(), Path(args.out).resolve()).replace(os.sep, "/") + "/"
        else:
            base = f"{hub['endpoint']}/datasets/{hub['repo_id']}/blob/{hub['revision']}/"
            board["collection"] = {k: hub[k] for k in ("repo_id", "revision")}
        inputs = [] if hub is not None else [root]
        with claimed_out(args.out, inputs, "leaderboard build", identity=f"collection {args.collection}",
                         overwrite=args.overwrite) as out:  # fmt: skip
            written = write_board(board, out, base, digits=args.digits, space=args.space or bool(args.push))
    top = board["rows"][0]
    print(
        f"Board of {len(board['rows'])} systems from {len(board['entries'])} entries; first on {board['primary']}: "
        f"{top['id']} ({top['scores'][board['primary']]['mean']:.{args.digits}f})"
    )
    print("Wrote " + ", ".join(str(p) for p in written))
    if args.push:
        from convrag.hub.repo import upload_folder

        url = upload_folder(Path(args.out), args.push, "space", "Upload leaderboard Space built by convrag",
                            private=args.private, ignore=[".convrag-*"], space_sdk="gradio")  # fmt: skip
        print(f"Pushed to Space {args.push}: {url}")
    return 0
