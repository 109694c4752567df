"""``rackwatt reload --pid PID``: the unit's ``ExecReload=``; exit 0 only if the agent applied the reload.

Sends SIGHUP to the running agent and waits for its verdict (agent/live/reload_ack.py), so a
configuration the agent rejects makes ``systemctl reload rackwatt`` fail (and an Ansible handler
notice). Needs no ``/bin/kill``, which minimal images lack. Exit 1 when the agent rejected the
reload or gave no verdict in time, 2 when it cannot be asked (no such process, not under systemd).
"""

from __future__ import annotations

import argparse
import sys

from agent.live import reload_ack


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=int, required=True, help="the agent's process id (systemd's $MAINPID)")
    parser.add_argument("--wait-s", type=float, default=reload_ack.WAIT_S, metavar="S",
                        help=f"how long to wait for the agent's verdict (default {reload_ack.WAIT_S:.0f})")


def run(args: argparse.Namespace) -> int:
    path = reload_ack.status_path()
    if path is None:
        print("rackwatt reload: RUNTIME_DIRECTORY is not set; run `systemctl reload rackwatt`",
              file=sys.stderr)
        return 2
    if args.pid <= 0:
        print(f"rackwatt reload: --pid must be a process id, got {args.pid} (is the agent running?)",
              file=sys.stderr)
        return 2
    try:
        verdict = reload_ack.request(args.pid, path, args.wait_s)
    except ProcessLookupError:
        print(f"rackwatt reload: no process {args.pid} (is the agent running?)", file=sys.stderr)
        return 2
    except PermissionError:
        print(f"rackwatt reload: not allowed to signal process {args.pid}", file=sys.stderr)
        return 2
    except TimeoutError as exc:
        print(f"rackwatt reload: {exc}", file=sys.stderr)
        return 1
    if verdict.ok:
        print(f"rackwatt reload: {verdict.detail}")
        return 0
    print(f"rackwatt reload: rejected, still running the previous configuration: {verdict.detail}",
          file=sys.stderr)
    return 1
