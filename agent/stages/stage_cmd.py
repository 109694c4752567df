"""``rackwatt stage LABEL``: send one stage hint to the local agent, for shell hooks.

Meant for Slurm prolog/epilog scripts and launch wrappers: it must never fail the job, so it
exits 0 even when no agent is listening (with a warning on stderr). An invalid label or value is
a usage error (exit 2), so a typo in a hook shows up when the hook is written.
"""

from __future__ import annotations

import argparse
import os
import sys

from agent.stages.client import DEFAULT_SOCKET
from agent.stages.hints import HintError, encode_hint, parse_hint
from agent.stages.send import send_udp, send_unix
from agent.trace.model import STAGE_LABEL_RULE, is_stage_label


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("label", help="stage label, [a-z][a-z0-9_]* (e.g. checkpoint, idle)")
    parser.add_argument("--job", help="job id that reports the stage (default: $SLURM_JOB_ID)")
    parser.add_argument("--work-rate", type=float, help="training throughput (samples/s or tokens/s)")
    parser.add_argument("--node", help="the GPU node this stage is for (its [[node]]/[[dcgm]] id); "
                                       "default: the whole rack")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--socket",
        help=f"agent's Unix datagram socket (default: $RACKWATT_STAGE_SOCKET or {DEFAULT_SOCKET})",
    )
    where.add_argument("--udp", type=int, metavar="PORT", help="send to UDP 127.0.0.1:PORT instead")


def run(args: argparse.Namespace) -> int:
    if not is_stage_label(args.label):
        print(
            f"rackwatt stage: invalid label {args.label!r}: must {STAGE_LABEL_RULE}",
            file=sys.stderr,
        )
        return 2
    job = args.job if args.job is not None else (os.environ.get("SLURM_JOB_ID") or None)
    data = encode_hint(args.label, job=job, work_rate=args.work_rate, node=args.node)
    try:  # the agent's own checks (job, --work-rate, node), so a typo fails here, not silently there
        parse_hint(data, "cli")
    except HintError as exc:
        print(f"rackwatt stage: {exc}", file=sys.stderr)
        return 2
    target, error = _send(data, args)
    if error:
        print(
            f"rackwatt stage: warning: no agent reached at {target} ({error}); hint not delivered",
            file=sys.stderr,
        )
    return 0


def _send(data: bytes, args: argparse.Namespace) -> tuple[str, str]:
    """Send the datagram like the client does: the Unix socket, falling back to UDP loopback
    when ``$RACKWATT_STAGE_UDP`` is set; ``--udp`` sends over UDP only. Returns (where, error)."""
    if args.udp is not None:
        return f"udp 127.0.0.1:{args.udp}", send_udp(data, args.udp)
    path = args.socket or os.environ.get("RACKWATT_STAGE_SOCKET") or DEFAULT_SOCKET
    error = send_unix(data, path)
    env_port = os.environ.get("RACKWATT_STAGE_UDP", "").strip()
    if error and args.socket is None and env_port.isdigit():
        udp_target = f"udp 127.0.0.1:{env_port}"
        udp_error = send_udp(data, int(env_port))
        if not udp_error:
            return udp_target, ""
        return f"{path} or {udp_target}", f"{error}; {udp_error}"
    return path, error
