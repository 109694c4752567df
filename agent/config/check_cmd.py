"""``rackwatt check-config FILE [--conf-d DIR | --no-conf-d]``: print ``OK`` or every error; exit 0 or 2.

Made for config management (Ansible ``validate: rackwatt check-config %s``); reads FILE plus the
drop-ins of ``conf.d`` next to it, as the systemd unit does. Warnings do not fail the check.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agent.config.cli_args import add_dropin_arguments, issue_lines, load_from_args
from agent.config.errors import ConfigError

EXIT_INVALID = 2


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE", help="the TOML configuration to check")
    add_dropin_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        config = load_from_args(args.file, args)
    except ConfigError as exc:
        for line in issue_lines(exc.issues):
            print(line)
        for line in issue_lines(exc.warnings):
            print(f"warning: {line}")
        return EXIT_INVALID
    for text in config.warnings:
        print(f"warning: {text}")
    print("OK")
    return 0
