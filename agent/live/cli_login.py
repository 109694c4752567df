"""Broker login for the command-line MQTT clients (``rackwatt watch``, ``rackwatt sparkplug``).

One owner for how ``--username``, ``--password-file`` and ``--ca-file`` reach a paho client, so
both commands read the password file and name a failure the same way.
"""

from __future__ import annotations

import argparse
from typing import Any


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
