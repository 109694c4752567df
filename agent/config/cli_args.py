"""The ``--config FILE`` / ``--conf-d DIR`` / ``--no-conf-d`` options of every command that reads the
agent's configuration, defined once. By default the drop-ins of ``conf.d`` next to the file are
merged, as the systemd unit does, so every command sees the same rack as the service.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

from agent.config.errors import ConfigError
from agent.config.loader import DEFAULT_CONFIG_PATH, load_config
from agent.config.model import Config


def add_dropin_arguments(parser: argparse.ArgumentParser) -> None:
    """``--conf-d DIR`` and ``--no-conf-d``; ``load_from_args`` applies them."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--conf-d", type=Path, default=None, metavar="DIR", help=(
        "merge the *.toml drop-ins of DIR, in name order (default: conf.d next to the file, if it exists)"))
    group.add_argument("--no-conf-d", action="store_true", help="read the file alone, without drop-ins")


def load_from_args(path: Path, args: argparse.Namespace) -> Config:
    """``load_config(path)`` with the parsed drop-in options (absent ones: the defaults)."""
    return load_config(path, getattr(args, "conf_d", None), dropins=not getattr(args, "no_conf_d", False))


def load_or_report(path: Path, args: argparse.Namespace, say: Callable[[str], None]) -> Config | None:
    """The configuration, or None after ``say`` was given every problem (one line each); warnings
    are said too."""
    try:
        config = load_from_args(path, args)
    except ConfigError as exc:
        say(f"configuration {path} is not valid ({len(exc.issues)} problem(s)):")
        for line in issue_lines(exc.issues):
            say(f"  {line}")
        return None
    for warning in config.warnings:
        say(f"warning: {warning}")
    return config


def add_config_arguments(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    """``--config`` (default /etc/rackwatt/agent.toml unless ``required``), ``--conf-d``, ``--no-conf-d``."""
    note = "" if required else f" (default {DEFAULT_CONFIG_PATH})"  # a required --config is always given
    parser.add_argument("--config", type=Path, required=required, default=DEFAULT_CONFIG_PATH, metavar="FILE",
                        help=f"the agent's TOML configuration{note}")
    add_dropin_arguments(parser)


# A person reads the first screenful; a generated file with thousands of mistakes still gets its
# first ones listed and a count of the rest (the ConfigError keeps them all).
MAX_LISTED_ISSUES = 100


def issue_lines(issues: Sequence[object], limit: int = MAX_LISTED_ISSUES) -> list[str]:
    """One line per issue, the first ``limit`` of them, then ``... and N more``."""
    lines = [str(issue) for issue in issues[:limit]]
    if len(issues) > limit:
        lines.append(f"... and {len(issues) - limit} more")
    return lines
