"""The ``space`` command: a metric folder assembled into a Hugging Face Space folder (convrag vendored), and its
upload."""

from __future__ import annotations

import argparse

from convrag.hub.spaces import METRICS, assemble, push_space


def cmd_space(args: argparse.Namespace) -> int:
    """Assemble (and optionally push) a metric's Space folder; print what went in."""
    report = assemble(args.metric, args.out, overwrite=args.overwrite)
    print(f"Space folder of metric {report.metric}: {report.out}")
    print(f"  copied from the metric folder ({len(report.copied)}): {', '.join(report.copied)}")
    if report.vendored:
        print(f"  vendored convrag modules ({len(report.vendored)}): {', '.join(report.vendored)}")
        print(f"  vendored data files: {len(report.data_files)}")
    print(f"  requirements.txt: {', '.join(report.requirements)}")
    if report.optional:
        print("  not listed (imported only inside functions; not installed here or a convrag extra): "
              + ", ".join(report.optional))
    from importlib.util import find_spec

    ready = "" if find_spec("gradio") else " (needs gradio: pip install 'convrag[spaces]')"
    print(f"Try it here{ready}: python {report.out / 'app.py'}")
    if args.push:
        print(f"Pushed to Space {args.push}: {push_space(report.out, args.push, private=args.private)}")
    else:
        print(f"Push it with `convrag space {report.metric} --out {report.out} --overwrite --push ORG/NAME`, or "
              "huggingface_hub.upload_folder(folder_path=..., repo_id=..., repo_type='space')")  # fmt: skip
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``space`` subcommand."""
    p = sub.add_parser("space", help="assemble a metric folder into a Hugging Face Space folder (convrag vendored)")
    p.add_argument("metric", help=f"one of {', '.join(METRICS)}")
    p.add_argument("--out", required=True, help="Space folder to write")
    p.add_argument("--overwrite", action="store_true", help="replace a previous `convrag space` output")
    p.add_argument("--push", metavar="ORG/NAME", help="then upload it as this Space repo (token from HF_TOKEN)")
    p.add_argument("--private", action="store_true", help="with --push: create the Space private")
    p.set_defaults(func=cmd_space)
