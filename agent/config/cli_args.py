"""The ``--config FILE`` / ``--conf-d DIR`` options every command that reads the agent's
configuration takes, defined once so their defaults and help never drift apart."""

from __future__ import annotations

import argparse
from pathlib import Path

from agent.config.loader import DEFAULT_CONFIG_PATH

DEFAULT_CONF_D = Path("/etc/rackwatt/conf.d")


def add_config_arguments(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    """``--config`` (default /etc/rackwatt/agent.toml unless ``required``) and ``--conf-d``."""
    if required:
        parser.add_argument(
            "--config", type=Path, required=True, metavar="FILE", help="the agent's TOML configuration"
        )
    else:
        parser.add_argument(
            "--config",
            type=Path,
            default=DEFAULT_CONFIG_PATH,
            metavar="FILE",
            help=f"the agent's TOML configuration (default {DEFAULT_CONFIG_PATH})",
        )
    parser.add_argument(
        "--conf-d",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"also merge the *.toml drop-ins of DIR, in name order (the package uses {DEFAULT_CONF_D})",
    )
