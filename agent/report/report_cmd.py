"""``rackwatt report REPORT.jsonl [--trace TRACE.csv] --html OUT.html``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("report", type=Path, help="replay report (JSON Lines) from `rackwatt replay`")
    add("--trace", type=Path,
        help="the trace it was made from: adds the power envelope and the static-PUE reference")
    add("--html", type=Path, required=True, help="where to write the self-contained HTML page")
    add("--title", help="page title")


def run(args: argparse.Namespace) -> int:
    from agent.report import ReportInputError, render_html
    from agent.trace.reader import TraceFormatError

    for path in (args.report, args.trace):
        if path is not None and not path.is_file():
            print(f"rackwatt report: {path}: no such file", file=sys.stderr)
            return 1
    try:
        out = render_html(args.report, args.trace, args.html, args.title)
    except (ReportInputError, TraceFormatError) as exc:
        print(f"rackwatt report: {exc}", file=sys.stderr)
        return 1
    print(out)
    return 0
