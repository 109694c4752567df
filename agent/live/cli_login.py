"""Broker options and login for the command-line MQTT clients (``rackwatt watch``, ``rackwatt sparkplug``).

One owner for ``--mqtt``, ``--topic-root``, ``--ca-file``, ``--username`` and ``--password-file``
and for how they reach a paho client, so both commands spell them and name a failure the same way.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agent.live.demo_cmd import _host_port


def add_broker_options(parser: argparse.ArgumentParser) -> None:
    """The site broker and the agents' topic root, and how to log in to it."""
    parser.add_argument(
        "--mqtt",
        type=_host_port,
        metavar="HOST:PORT",
        default=_host_port("localhost:1883"),
        help="the site broker (default localhost:1883)",
    )
    parser.add_argument("--topic-root", default="rackwatt/v1", help="[mqtt] topic_root of the agents")
    parser.add_argument("--ca-file", type=Path, help="TLS: check the broker's certificate against this CA")
    parser.add_argument("--username", help="broker user name")
    parser.add_argument("--password-file", type=Path, help="file holding the broker password")


def apply_cli_login(client: Any, args: argparse.Namespace) -> None:
    """Set the user/password and CA file given on the command line; OSError names the bad file."""
    if args.username:
        password = None
        if args.password_file:
            try:
                password = args.password_file.read_text().strip()
            except OSError as exc:
                raise OSError(f"cannot read --password-file {args.password_file}: {exc.strerror}") from None
        client.username_pw_set(args.username, password)
    if args.ca_file:
        client.tls_set(ca_certs=str(args.ca_file))
