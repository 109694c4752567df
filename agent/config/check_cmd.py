"""``rackwatt check-config FILE [--conf-d DIR]``: print ``OK`` or every error; exit 0 or 1.

Made for config management, e.g. Ansible ``template: ... validate: rackwatt check-config %s``.
Warnings (a secret file others can read) are printed but do not fail the check.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agent.config.cli_args import DEFAULT_CONF_D
from agent.config.errors import ConfigError
from agent.config.loader import load_config


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE", help="the TOML configuration to check")
    parser.add_argument("--conf-d", type=Path, metavar="DIR", default=None,
                        help=f"also merge the *.toml drop-ins of DIR, in name order (the package uses "
                        f"{DEFAULT_CONF_D})")


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.file, args.conf_d)
    except ConfigError as exc:
        for issue in exc.issues:
            print(issue)
        for warning in exc.warnings:
            print(f"warning: {warning}")
        return 1
    for text in config.warnings:
        print(f"warning: {text}")
    print("OK")
    return 0
