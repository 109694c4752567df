"""The energy query: ask the rack agent, over its Unix stage socket, what it accounted for a window.

The wire format (one JSON object per datagram, both ways; the agent's side is
``agent/live/energy_query.py``, which takes its names from here):

request ``{"query": "energy", "id": 7, "t0": 1764400000.0, "t1": 1764400600.0, "job": "run-3"}``
  ``t0`` omitted: only the agent's clock is asked for (``now``); ``t1`` omitted: the window ends
  now on the agent's clock; ``job`` omitted: the whole rack.
reply ``{"v": 1, "id": 7, "now": …, "accounted_until": …, "energy": {"t0", "t1", "job", "it_j", "cooling_j",
  "facility_j", "gpu_j", "why": {part: reason}, "pending": bool}}`` or ``{"v": 1, "id": 7,
  "error": "…"}``.

Why the agent's clock: the window is the agent's accounting period, so its ends are taken on the
clock that stamps the bins (the same as the job's on the gateway, but not in ``rackwatt demo``,
whose clock runs faster). Why the stage socket: training users can already write to it (mode 0660,
the agent's group), and the kernel tells the agent who asks (SCM_CREDENTIALS). The reply comes
back to this socket's autobound address, so a query needs no second path or open port.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import time
from typing import Any

QUERY = "energy"
VERSION = 1
FIELDS = frozenset({"query", "id", "t0", "t1", "job"})
PARTS = ("it_j", "cooling_j", "facility_j", "gpu_j")
MAX_REPLY_BYTES = 4096  # a reply holds four numbers and their reasons: far below this
# How long to wait for a reply: the agent answers from its event loop, which at worst is busy
# with one engine batch (tens of ms on a gateway); a quarter second keeps a training step's
# begin/end cheap even when the agent is slow or gone. RACKWATT_QUERY_TIMEOUT_S overrides it.
DEFAULT_TIMEOUT_S = 0.25


class RackUnavailable(Exception):
    """The rack agent did not answer (absent, restarting, or not reachable); says why."""


def default_timeout_s() -> float:
    try:
        value = float(os.environ.get("RACKWATT_QUERY_TIMEOUT_S", DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return value if 0 < value <= 60 else DEFAULT_TIMEOUT_S


def encode_query(qid: int, t0: float | None = None, t1: float | None = None, job: str | None = None) -> bytes:
    obj: dict[str, Any] = {"query": QUERY, "id": qid}
    if t0 is not None:
        obj["t0"] = t0
    if t1 is not None:
        obj["t1"] = t1
    if job:
        obj["job"] = job
    return json.dumps(obj, separators=(",", ":")).encode()


class RackQuery:
    """One autobound Unix datagram socket for asking the rack agent; never raises but RackUnavailable."""

    def __init__(self, socket_path: str, timeout_s: float | None = None) -> None:
        self.socket_path = socket_path
        self.timeout_s = default_timeout_s() if timeout_s is None else timeout_s
        self._ids = itertools.count(1)
        self._sock: socket.socket | None = None
        self._pid = -1

    def ask(self, t0: float | None = None, t1: float | None = None, job: str | None = None) -> dict[str, Any]:
        """The agent's reply (a dict with ``now`` and, for a window, ``energy``)."""
        if not self.socket_path:
            raise RackUnavailable("no rack agent socket configured (RACKWATT_STAGE_SOCKET is empty)")
        qid = next(self._ids)
        try:
            sock = self._socket()
            sock.sendto(encode_query(qid, t0, t1, job), self.socket_path)
        except OSError as exc:
            self.close()
            raise RackUnavailable(
                f"the rack agent's socket {self.socket_path} is not answering ({exc})"
            ) from None
        deadline = time.monotonic() + self.timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RackUnavailable(
                    f"the rack agent did not answer within {self.timeout_s:g} s on {self.socket_path} "
                    "(an agent without the energy query, or a busy one)"
                )
            sock.settimeout(remaining)
            try:
                data = sock.recv(MAX_REPLY_BYTES)
            except TimeoutError:
                continue
            except OSError as exc:
                self.close()
                raise RackUnavailable(f"reading the rack agent's reply failed ({exc})") from None
            reply = _decode(data)
            if reply is None or reply.get("id") != qid:
                continue  # a late reply to an earlier query that timed out, or noise
            if "error" in reply:
                raise RackUnavailable(f"the rack agent refused the query: {str(reply['error'])[:200]}")
            if not isinstance(reply.get("now"), int | float):
                raise RackUnavailable("the rack agent's reply has no clock reading")
            return reply

    def _socket(self) -> socket.socket:
        if self._sock is None or self._pid != os.getpid():  # first use, or a forked child
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind("")  # Linux autobind: the address the agent sends its reply to
            self._sock, self._pid = sock, os.getpid()
        return self._sock

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = None


def _decode(data: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None
