"""``rackwatt run --config FILE``: the agent as a long-running service (systemd ``Type=notify``).

SIGTERM/SIGINT → state saved, ``offline`` published, exit 0. SIGHUP → the configuration is
re-read and validated; if invalid the agent keeps running on the old one and logs why.
Exit 2 when the configuration cannot be used at start (every problem printed, one per line).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import Protocol

from agent.config.cli_args import add_config_arguments, load_from_args, load_or_report
from agent.config.model import Config
from agent.live.logsetup import setup_logging
from agent.live.loop import LiveAgent
from agent.live.publisher import MqttConfigError

log = logging.getLogger("rackwatt.run")


def configure(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--save-interval", type=float, default=300.0, metavar="S",
                        help="save the learned state every S seconds (and always on exit; default 300)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def skip_unused_imports() -> None:
    """Keep pysnmp from loading its MIB compiler (pysmi, and with it jinja2, lark, requests).

    The SNMP driver works with numeric OIDs (``lookupMib=False``), so the compiler is never used;
    pysnmp imports it optionally (``except ImportError``), and blocking it saves ~10 MB of RSS.
    """
    sys.modules.setdefault("pysmi", None)  # type: ignore[arg-type]


def report_to_log(line: str) -> None:
    """How a service command says a configuration problem: the journal, at error priority."""
    (log.warning if line.startswith("warning: ") else log.error)("%s", line)


class Servable(Protocol):
    """What ``serve`` runs: the rack agent (``LiveAgent``) or a node agent (``agent.node.sender``)."""

    def request_stop(self) -> None: ...

    def request_reload(self) -> None: ...

    async def run(self) -> int: ...


async def serve(agent: Servable) -> int:
    """Run ``agent`` with SIGTERM/SIGINT (stop; a second one exits at once) and SIGHUP (reload)."""
    loop = asyncio.get_running_loop()
    stops = 0

    def on_stop_signal() -> None:
        nonlocal stops
        stops += 1
        if stops > 1:
            log.error("second stop signal: exiting without finishing the shutdown")
            os._exit(1)
        agent.request_stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_stop_signal)
    loop.add_signal_handler(signal.SIGHUP, agent.request_reload)
    try:
        return await agent.run()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)


PRIVATE_UMASK = 0o077  # state, spool and their directories: the agent's user only (0600 / 0700)


def run(args: argparse.Namespace) -> int:
    # Set here, not only in the unit, so a run outside systemd is as private; a stricter umask
    # the operator chose is kept (the bits are or-ed).
    os.umask(os.umask(PRIVATE_UMASK) | PRIVATE_UMASK)
    skip_unused_imports()
    setup_logging(args.verbose)
    config = load_or_report(args.config, args, report_to_log)
    if config is None:
        return 2
    if config.agent.role == "node":
        return _run_node(config, args)
    agent = LiveAgent(config, config_path=args.config, save_interval_s=args.save_interval,
                      config_loader=lambda p: load_from_args(p, args))
    try:
        return asyncio.run(serve(agent))
    except MqttConfigError as exc:
        log.error("%s", exc)
        return 2


def _run_node(config: Config, args: argparse.Namespace) -> int:
    """``role = "node"``: the uplink to the rack agent (agent/node/sender.py); exit 2 if it cannot start."""
    from agent.node.sender import NodeAgent, NodeSetupError

    try:
        node = NodeAgent(config, config_loader=lambda p: load_from_args(p, args))
    except NodeSetupError as exc:
        log.error("%s", exc)
        return 2
    return asyncio.run(serve(node))
