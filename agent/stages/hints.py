"""Parsing of stage-hint and command datagrams: one small JSON object each (docs/stage-hints.md).

These bytes come from any local process, so everything is checked strictly and cheaply (size,
then JSON, then fields). A bad datagram raises ``HintError`` whose ``reason`` is a counter key
(``DROP_REASONS``) and whose message says what was wrong. No I/O, no state: see ``intake``.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

from agent.node.config import NODE_ID
from agent.node.wire import MAX_ID_BYTES
from agent.payload import number
from agent.trace.model import STAGE_LABEL_MAX_CHARS, is_stage_label

MAX_DATAGRAM_BYTES = 1024
MAX_LABEL_CHARS = STAGE_LABEL_MAX_CHARS  # the one stage-label rule: agent.trace.model
MAX_JOB_CHARS = 128
MAX_WORK_RATE = 1e12
MIN_TS = 946684800.0  # 2000-01-01: anything earlier is a clock that was never set
MAX_FUTURE_S = 60.0  # a ts further ahead of the agent's clock than this is rejected

JOB_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+=-]*\Z")

HINT_FIELDS = frozenset({"stage", "job", "work_rate", "ts", "node"})
COMMAND_FIELDS = frozenset({"command", "cause", "stage", "ts"})
COMMANDS = frozenset({"accept"})
CAUSES = frozenset({"cooling", "power_chain", "thermal", "gpu_hardware", "workload", "unknown"})

DROP_REASONS: tuple[str, ...] = (
    "too_large", "malformed", "unknown_field", "bad_label", "bad_value", "bad_ts", "stale", "flood",
    "unauthorized",  # a command from a transport or sender that may not give commands
    "unknown_node",  # a hint for a node the rack's configuration does not list
)


class HintError(ValueError):
    """A datagram that is not a valid hint or command; ``reason`` is one of DROP_REASONS."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Hint:
    """One stage report from a job. ``ts`` is the agent's receive time when the job sent none."""

    stage: str
    ts: float
    source: str
    job: str | None = None
    work_rate: float | None = None
    node: str | None = None  # the GPU node it is for; None: the whole rack


@dataclass(frozen=True)
class Command:
    """An operator command that arrived on the hint channel, for the live loop to dispatch."""

    name: str
    source: str
    ts: float
    cause: str | None = None
    stage: str | None = None


def check_label(label: object, what: str = "stage") -> str:
    if not isinstance(label, str):
        raise HintError("bad_label", f"{what}: expected a string, got {type(label).__name__}")
    if len(label) > MAX_LABEL_CHARS:
        raise HintError("bad_label", f"{what}: longer than {MAX_LABEL_CHARS} characters")
    if not is_stage_label(label):
        raise HintError("bad_label", f"{what}: {label[:MAX_LABEL_CHARS]!r} does not match [a-z][a-z0-9_]*")
    return label


def check_job(job: object) -> str | None:
    """A hint's or query's ``job`` (None: not given); raises HintError unless it is a job id."""
    if job is not None and (
        not isinstance(job, str) or not job or len(job) > MAX_JOB_CHARS or not JOB_RE.match(job)
    ):
        raise HintError(
            "bad_value", f"job: expected an id of up to {MAX_JOB_CHARS} characters [A-Za-z0-9._:/@+=-]"
        )
    return job


def parse_hint(data: bytes, source: str, now: float | None = None) -> Hint:
    """Parse one hint datagram; raises HintError (a command datagram is an error here)."""
    message = parse_datagram(data, source, now)
    if isinstance(message, Command):
        raise HintError("unknown_field", f"expected a stage hint, got command {message.name!r}")
    return message


def parse_datagram(data: bytes, source: str, now: float | None = None) -> Hint | Command:
    """Parse a hint or a command datagram; raises HintError naming what was wrong."""
    if len(data) > MAX_DATAGRAM_BYTES:
        raise HintError("too_large", f"datagram of {len(data)} bytes exceeds {MAX_DATAGRAM_BYTES}")
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HintError("malformed", f"not JSON: {exc}") from None
    except RecursionError:
        raise HintError("malformed", "not JSON: nested too deeply") from None
    if not isinstance(obj, dict):
        raise HintError("malformed", f"expected a JSON object, got {type(obj).__name__}")
    clock = time.time() if now is None else now
    if "command" in obj:
        return _parse_command(obj, source, clock)
    return _parse_hint_object(obj, source, clock)


def _parse_hint_object(obj: dict[str, Any], source: str, now: float) -> Hint:
    unknown = set(obj) - HINT_FIELDS
    if unknown:
        raise HintError("unknown_field", f"unknown field(s): {', '.join(sorted(unknown))[:120]}")
    if "stage" not in obj:
        raise HintError("malformed", "missing field: stage")
    stage = check_label(obj["stage"])
    job = check_job(obj.get("job"))
    work_rate = obj.get("work_rate")
    rate = number(work_rate)
    if work_rate is not None and (rate is None or not 0.0 <= rate <= MAX_WORK_RATE):
        raise HintError("bad_value",
                        f"work_rate: expected a number in [0, {MAX_WORK_RATE:g}], got {work_rate!r:.40}")
    ts = _timestamp(obj.get("ts"), now)
    node = obj.get("node")
    if node is not None and (not isinstance(node, str) or NODE_ID(node) is not None):
        shown = str(node)[:40]
        raise HintError("bad_value", f"node: expected a node id of 1–{MAX_ID_BYTES} characters [a-z0-9_], "
                                     f"got {shown!r}")
    return Hint(stage=stage, ts=ts, source=source, job=job, work_rate=rate, node=node)


def _parse_command(obj: dict[str, Any], source: str, now: float) -> Command:
    unknown = set(obj) - COMMAND_FIELDS
    if unknown:
        raise HintError("unknown_field", f"unknown field(s) in command: {', '.join(sorted(unknown))[:120]}")
    name = obj["command"]
    if not isinstance(name, str) or name not in COMMANDS:  # a list or object is not hashable
        raise HintError("unknown_field", f"unknown command {str(name)[:40]!r}; known: {sorted(COMMANDS)}")
    cause = obj.get("cause")
    if cause is not None and (not isinstance(cause, str) or cause not in CAUSES):
        raise HintError("bad_value", f"cause: {str(cause)[:40]!r} is not one of {sorted(CAUSES)}")
    stage = obj.get("stage")
    if stage is not None:
        stage = check_label(stage)
    ts = _timestamp(obj.get("ts"), now)
    return Command(name=str(name), source=source, ts=ts, cause=cause, stage=stage)


def check_ts(value: object, what: str) -> float | None:
    """A hint's or query's Unix time (None: not given); raises HintError ``bad_ts`` unless it is one."""
    if value is None:
        return None
    ts = number(value)
    if ts is None:
        raise HintError("bad_ts", f"{what}: expected Unix seconds, got {value!r:.40}")
    if ts < MIN_TS:
        raise HintError("bad_ts", f"{what}: {ts} is before 2000 (clock not set, or not Unix seconds)")
    return ts


def _timestamp(value: object, now: float) -> float:
    ts = check_ts(value, "ts")
    if ts is None:
        return now
    if ts > now + MAX_FUTURE_S:
        raise HintError("bad_ts", f"ts: {ts - now:.0f} s ahead of the agent's clock")
    return ts


def encode_hint(
    stage: str,
    job: str | None = None,
    work_rate: float | None = None,
    ts: float | None = None,
    node: str | None = None,
) -> bytes:
    """The datagram for a hint (what the client and ``rackwatt stage`` send)."""
    obj = {"stage": stage, "node": node, "job": job, "work_rate": work_rate, "ts": ts}
    return json.dumps({k: v for k, v in obj.items() if v is not None}, separators=(",", ":")).encode()
