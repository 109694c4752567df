"""Broker options and login for the command-line MQTT clients (``rackwatt watch``, ``rackwatt sparkplug``).

One owner for the paho client they build and for ``--mqtt``, ``--topic-root``, ``--ca-file``,
``--username`` and ``--password-file``, so both commands spell them and name a failure the same way.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agent.config.model import MqttSection
from agent.config.secrets import SecretError, read_secret
from agent.live.cli_types import MqttTarget, host_port


def add_broker_options(parser: argparse.ArgumentParser) -> None:
    """The site broker and the agents' topic root, and how to log in to it."""
    parser.add_argument("--mqtt", type=host_port, metavar="HOST:PORT",
                        default=MqttTarget(MqttSection.host, MqttSection.port),
                        help=f"the site broker (default {MqttSection.host}:{MqttSection.port})")
    parser.add_argument("--topic-root", default=MqttSection.topic_root, help="the agents' [mqtt] topic_root")
    parser.add_argument("--ca-file", type=Path, help="TLS: check the broker's certificate against this CA")
    parser.add_argument("--username", help="broker user name")
    parser.add_argument("--password-file", type=Path, help="file holding the broker password")


def cli_client(args: argparse.Namespace, client_id: str = "") -> Any:
    """A paho client for a command-line tool: clean session, callbacks that never kill paho's
    thread, reconnects within 30 s, and the login given on the command line (OSError names a bad file)."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, client_id=client_id,
                         protocol=mqtt.MQTTv311, clean_session=True)
    client.suppress_exceptions = True
    client.reconnect_delay_set(min_delay=1, max_delay=30)
    if args.username:
        password = None
        if args.password_file:
            try:  # the agent's own reader: the same file gives the agent and the tools one password
                password = read_secret(args.password_file)
            except SecretError as exc:
                raise OSError(f"--password-file: {exc}") from None
        client.username_pw_set(args.username, password)
    if args.ca_file:
        client.tls_set(ca_certs=str(args.ca_file))
    return client
