"""The ``build``, ``push``, ``export`` and ``list`` commands: a benchmark into a Hub-layout folder, the folder onto the
Hub, the folder as BEIR / TREC files, and the registered benchmarks and retrievers."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from convrag.core.errors import ConvragError
from convrag.core.options import NAME_EQ, name_value_pairs


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``build``, ``push`` and ``export`` on the subparsers ``sub``."""
    from convrag.builders.options import options_help

    p = sub.add_parser("build", help="build a benchmark into a Hub-layout folder (Parquet + README configs)",
                       epilog=options_help)
    p.add_argument("benchmark", help="registered benchmark name (see `convrag list`)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--source", action="append", metavar="PATH|NAME=PATH",
                   help="local file/folder or URL instead of the public download (repeatable as NAME=PATH)")
    p.add_argument("--config", action="append", help="build only these configs (repeatable; default: all)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="builder option (repeatable)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("push", help="upload a built folder to the Hugging Face Hub (token from HF_TOKEN)")
    p.add_argument("folder", help="folder written by `convrag build`")
    p.add_argument("--repo", required=True, metavar="ORG/NAME",
                   help="dataset repo id, created when missing (Hub: $HF_ENDPOINT, default https://huggingface.co)")
    p.add_argument("--private", action="store_true")
    p.set_defaults(func=cmd_push)

    from convrag.hub.formats import HELP as EXPORT_HELP

    p = sub.add_parser("export", help="write a built folder as BEIR or TREC files", description=EXPORT_HELP)
    p.add_argument("folder", help="folder written by `convrag build`, or Hub dataset repo id org/name[@revision]")
    p.add_argument("--format", required=True, metavar="beir|trec", help="beir or trec (see above)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (written whole, then renamed into place)")
    p.add_argument("--overwrite", action="store_true", help="replace DIR if it holds an earlier `convrag export`")
    p.set_defaults(func=cmd_export)


def add_list_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``list`` on the subparsers ``sub``."""
    p = sub.add_parser("list", help="list registered benchmarks and retrievers")
    p.set_defaults(func=cmd_list)


def _parse_sources(values: list[str] | None) -> str | dict[str, str] | None:
    """``--source PATH`` once, or ``--source name=PATH`` any number of times."""
    if not values:
        return None
    named = [NAME_EQ.match(v) for v in values]
    if all(named):
        return {m.group(1): m.group(2) for m in named if m}
    if len(values) == 1:
        return values[0]
    raise ConvragError("give one --source PATH, or several --source name=PATH")


def cmd_build(args: argparse.Namespace) -> int:
    """Build a benchmark; ``--option`` values go as text to the exporter, which types them per option.
    SIGTERM ends the build like Ctrl-C (its temporary folder is removed, ``--out`` left as it was); progress
    bars are shown only on a terminal (or with CONVRAG_PROGRESS=1)."""
    import signal
    import threading

    import datasets

    from convrag.core.progress import wanted
    from convrag.hub.export import export_benchmark

    options: dict[str, Any] = dict(name_value_pairs(args.option, "--option", "key=value"))
    source = _parse_sources(args.source)
    if source is not None:
        options["source"] = source
    trap = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum)) if trap else None
    quiet = not wanted() and datasets.is_progress_bar_enabled()  # no progress bars in logs
    if quiet:
        datasets.disable_progress_bars()
    try:
        summary = export_benchmark(args.benchmark, args.out, configs=args.config, options=options,
                                   overwrite=args.overwrite)  # fmt: skip
    finally:
        if trap:
            signal.signal(signal.SIGTERM, previous or signal.SIG_DFL)
        if quiet:
            datasets.enable_progress_bars()
    print(f"Wrote {summary.out_dir} ({args.benchmark})\n\n{summary.table()}")
    if summary.report.get("counts"):
        print("\nBuild report:")
        for event, count in summary.report["counts"].items():
            examples = [str(e)[:60] for e in summary.report.get("examples", {}).get(event, [])[:3]]
            more = ", ..." if count > len(examples) else ""
            print(f"  {event}: {count}" + (f" (e.g. {', '.join(examples)}{more})" if examples else ""))
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    """Upload a built folder to a Hub dataset repo (every failure is one line, exit 2)."""
    from convrag.hub.repo import push_folder

    url = push_folder(args.folder, args.repo, private=args.private)
    print(f"Pushed {args.folder} to {args.repo}: {url}\nRead it back with load_dataset({args.repo!r}, CONFIG), or "
          f"evaluate it with `convrag evaluate {args.repo}`")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Write a built folder (or Hub repo) as BEIR or TREC files; prints the files and their row counts."""
    from convrag.hub.formats import export_folder

    print("\n".join(export_folder(args.folder, args.format, args.out, overwrite=args.overwrite).lines()))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from convrag.builders import available
    from convrag.retrievers import available_retrievers

    print("benchmarks: " + ", ".join(available()))
    print("retrievers: " + ", ".join(available_retrievers()))
    return 0
