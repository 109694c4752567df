"""``rackwatt accept CAUSE|all``: accept an active deviation as the rack's new normal.

A running agent gets one JSON datagram on its local stage-hint Unix socket (``[stages]
socket_path``; never UDP, which carries no sender identity), from a uid or group ``[stages]
command_uids``/``command_groups`` permit; its hint listener hands it to ``DriftMonitor.accept``.
With nobody listening, or with ``--state``, the drift section of the state file is rewritten
atomically and the events are reported when the agent starts. The MQTT route
(``<root>/<site>/<rack>/cmd/accept``) is the live agent's own.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from agent.config.cli_args import add_config_arguments, load_or_report
from agent.engine.drift.attribution import CAUSES
from agent.engine.drift.offline import StateFileError, accept_in_state_file, find_state_file
from agent.stages.send import send_unix


def configure(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("cause", help=f"the deviation to accept: all, or one of {', '.join(CAUSES)}")
    add_config_arguments(parser)  # --config, --conf-d, --no-conf-d: the same rack as the service
    add("--state", type=Path,
        help="write into this state file instead of messaging the running agent (agent stopped)")


def command_datagram(cause: str, ts: float) -> bytes:
    """The datagram the live agent's hint listener accepts (documented in docs/drift-playbook.md)."""
    message: dict[str, Any] = {"command": "accept", "ts": round(ts, 3)}
    if cause != "all":
        message["cause"] = cause
    return json.dumps(message, separators=(",", ":")).encode()


def run(args: argparse.Namespace) -> int:
    cause = str(args.cause).strip().lower()
    if cause != "all" and cause not in CAUSES:
        print(f"rackwatt accept: unknown cause {args.cause!r}; expected all or one of {', '.join(CAUSES)}",
              file=sys.stderr)
        return 2
    ts = time.time()
    if args.state is not None:
        return _offline(args.state, cause, ts)
    def say(line: str) -> None:
        print(f"rackwatt accept: {line}", file=sys.stderr)

    config = load_or_report(args.config, args, say)
    if config is None:
        return 2  # like every command whose configuration cannot be used
    stages = config.stages
    configured = str(stages.socket_path) if stages.socket_path else ""
    socket_path = os.environ.get("RACKWATT_STAGE_SOCKET") or configured
    data = command_datagram(cause, ts)
    if socket_path:
        error = send_unix(data, socket_path)
        if not error:
            print(f"accept {cause}: sent to the running agent ({socket_path})")
            return 0
        reason = f"no agent listening on {socket_path} ({error})"
    else:  # UDP carries no sender identity, so the agent takes commands only on the Unix socket
        reason = "no stage-hint Unix socket configured (UDP carries hints only)"
    try:
        state_file = find_state_file(config.agent.state_dir)
    except StateFileError as exc:
        print(f"rackwatt accept: {reason}, and {exc}", file=sys.stderr)
        return 1
    print(f"accept {cause}: {reason}; writing into the state file instead")
    return _offline(state_file, cause, ts)


def _offline(path: Path, cause: str, ts: float) -> int:
    try:
        events = accept_in_state_file(path, cause, ts)
    except StateFileError as exc:
        print(f"rackwatt accept: {exc}", file=sys.stderr)
        return 1
    if not events:
        print(f"accept {cause}: no active deviation of that cause in {path}; nothing changed")
        return 0
    for event in events:
        detail = event.get("detail")
        onset = detail.get("onset_ts") if isinstance(detail, dict) else None
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(onset)) if isinstance(onset, float) else "?"
        print(f"accepted {event['cause']} (onset {when}) in {path}; reported when the agent starts")
    return 0

