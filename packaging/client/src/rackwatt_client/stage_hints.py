"""rackwatt stage client: tell the rack agent which training stage this process is in.

Standard library only, one file: ``pip install rackwatt-client`` (docs/client.md), import it from
the agent (``agent.stages.client`` is this module), or copy it into a training repository.
Usage::

    from rackwatt_client import stage, begin, end, report   # or a vendored copy: rackwatt_stage

    with stage("forward_backward"):
        loss = model(batch); loss.backward()
    with stage("grad_sync"):
        optimizer.step()
    report(work_rate=tokens_per_s)
    begin("checkpoint", job="llama-70b-r3"); save(); end("checkpoint")

Guarantees: never raises into the training loop (a bad label is logged once and ignored);
never blocks (non-blocking datagrams); costs about a microsecond per call, because a datagram
is sent only when the stage or work rate changes, at most ``RACKWATT_STAGE_MAX_HZ`` (default 20)
times a second; a background daemon thread sends what was held back and repeats the current
stage every ``keepalive_s`` so a restarted agent learns it again and a long stage does not
expire. Works the same whether the agent runs, is absent, or restarts.

Where it sends: the Unix datagram socket ``RACKWATT_STAGE_SOCKET`` (default
``/run/rackwatt/stage.sock``), falling back to UDP ``127.0.0.1:RACKWATT_STAGE_UDP`` when that
variable is set. Stages nest: ``end()`` of an inner stage returns to the enclosing one; after
the outermost ``end()`` the last stage holds until the next one (call ``idle()`` when done).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import re
import socket
import threading
import time
from types import TracebackType

__all__ = ["StageClient", "begin", "end", "get_client", "idle", "mark", "report", "stage"]

DEFAULT_SOCKET = "/run/rackwatt/stage.sock"
_FLUSH_POLL_S = 0.25  # how often the background thread looks for held-back changes
_MAX_DEPTH = 64  # nesting depth kept; deeper begin() calls forget the outermost
_JOB_UNSAFE = re.compile(r"[^A-Za-z0-9._:/@+=-]")
_LABEL = re.compile(r"[a-z][a-z0-9_]{0,63}\Z")
_log = logging.getLogger("rackwatt.stage")


class _StageBlock:
    """The context manager ``stage(name)`` returns; cached per name so ``with`` allocates nothing."""

    __slots__ = ("_client", "_name")

    def __init__(self, client: StageClient, name: str):
        self._client = client
        self._name = name

    def __enter__(self) -> _StageBlock:
        self._client.begin(self._name)
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._client.end(self._name)


class StageClient:
    """Sends stage hints to the local rackwatt agent; safe to call from a hot training loop."""

    def __init__(
        self,
        socket_path: str | None = None,
        udp_port: int | None = None,
        job: str | None = None,
        max_rate_hz: float | None = None,
        keepalive_s: float = 60.0,
    ):
        env = os.environ
        self.socket_path = (
            socket_path if socket_path is not None else env.get("RACKWATT_STAGE_SOCKET", DEFAULT_SOCKET)
        )
        if udp_port is None and env.get("RACKWATT_STAGE_UDP", "").strip().isdigit():
            udp_port = int(env["RACKWATT_STAGE_UDP"])
        self.udp_port = udp_port
        self.job: str | None = None
        initial_job = job if job is not None else (env.get("RACKWATT_JOB") or env.get("SLURM_JOB_ID"))
        if max_rate_hz is None:
            try:
                max_rate_hz = float(env.get("RACKWATT_STAGE_MAX_HZ", "20"))
            except ValueError:
                max_rate_hz = 20.0
        self.min_interval_s = 1.0 / max(0.1, max_rate_hz)
        self.keepalive_s = keepalive_s
        self.sent = 0
        self.failed = 0
        self._stack: list[str] = []
        self._stage = ""
        self._work_rate: float | None = None
        self._last_send = -1e9
        self._pending = False
        self._blocks: dict[str, _StageBlock] = {}
        self._warned: set[str] = set()
        self._valid: set[str] = set()
        if initial_job:
            self._set_job(initial_job)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._pid = -1
        self._unix: socket.socket | None = None
        self._udp: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    # ---------------------------------------------------------------- public API (never raises)
    def stage(self, name: str) -> _StageBlock:
        """``with client.stage("checkpoint"): ...`` marks the block as that stage."""
        block = self._blocks.get(name)
        if block is None:
            block = _StageBlock(self, name)
            if len(self._blocks) < 256 and self._check(name):
                self._blocks[name] = block
        return block

    def begin(self, name: str, job: str | None = None) -> None:
        """Enter a stage (stages nest)."""
        if name not in self._valid and not self._check(name):
            return
        stack = self._stack
        stack.append(name)
        if len(stack) > _MAX_DEPTH:  # begin() without end(): keep memory fixed
            del stack[0]
        new_job = job is not None and self._set_job(job)
        if name != self._stage or new_job:
            self._stage = name
            self._changed()

    def end(self, name: str | None = None) -> None:
        """Leave a stage: back to the enclosing one, or hold the last stage if none encloses it."""
        stack = self._stack
        if not stack or (name is not None and name not in self._valid):
            return
        if name is None or stack[-1] == name:
            stack.pop()
        else:
            try:
                idx = len(stack) - 1 - stack[::-1].index(name)
            except ValueError:
                self._warn_once(f"end({name!r}) without begin")
                return
            del stack[idx]
        if stack and stack[-1] != self._stage:
            self._stage = stack[-1]
            self._changed()

    def _set_job(self, job: object) -> bool:
        """Set the job id (made safe for the agent's rule); True if it changed."""
        text = _JOB_UNSAFE.sub("_", str(job))[:128].lstrip("._:/@+=-") or None
        if text != str(job):
            self._warn_once(f"job id {str(job)[:40]!r} sent as {text!r}")
        if text == self.job:
            return False
        self.job = text
        return True

    def mark(self, name: str, job: str | None = None) -> None:
        """Switch to a stage without nesting (for callback APIs that only say "now X")."""
        if name not in self._valid and not self._check(name):
            return
        self._stack.clear()
        self.begin(name, job)

    def idle(self) -> None:
        """The job is between stages or done: report ``idle``."""
        self.mark("idle")

    def report(self, work_rate: float) -> None:
        """Report training throughput (samples/s or tokens/s; one unit per job)."""
        try:
            rate = float(work_rate)
        except (TypeError, ValueError):
            self._warn_once("work_rate must be a number")
            return
        if not (rate >= 0.0 and rate < 1e12):
            self._warn_once("work_rate must be finite and >= 0")
            return
        if rate != self._work_rate:
            self._work_rate = rate
            if self._stage:
                self._changed()

    def flush(self) -> None:
        """Send the current state now (also done at exit)."""
        if self._stage:
            self._send(time.monotonic())

    def close(self) -> None:
        self.flush()
        self._closed = True
        self._wake.set()
        for sock in (self._unix, self._udp):
            if sock is not None:
                sock.close()
        self._unix = self._udp = None

    # ---------------------------------------------------------------- internals
    def _check(self, name: object) -> bool:
        if isinstance(name, str) and _LABEL.match(name):
            if len(self._valid) < 256:
                self._valid.add(name)
            return True
        self._warn_once(f"invalid stage label {name!r}: must match [a-z][a-z0-9_]* (<= 64 chars)")
        return False

    def _warn_once(self, message: str) -> None:
        if message not in self._warned and len(self._warned) < 64:
            self._warned.add(message)
            _log.warning("rackwatt stage client: %s", message)

    def _changed(self) -> None:
        now = time.monotonic()
        if now - self._last_send >= self.min_interval_s:
            self._send(now)
        else:  # too soon: a later change or the background thread sends it
            self._pending = True

    def _payload(self) -> bytes:
        obj: dict[str, object] = {"stage": self._stage}
        if self.job:
            obj["job"] = self.job
        if self._work_rate is not None:
            obj["work_rate"] = self._work_rate
        obj["ts"] = round(time.time(), 3)
        return json.dumps(obj, separators=(",", ":")).encode()

    def _send(self, now: float) -> None:
        """One datagram with the current state; any socket error is counted, never raised."""
        try:
            if self._pid != os.getpid():  # first use, or a forked child (whose lock may be held)
                self._reset_after_fork()
            with self._lock:
                self._pending = False
                self._last_send = now
                data = self._payload()
                if self._send_unix(data) or self._send_udp(data):
                    self.sent += 1
                else:
                    self.failed += 1
            self._ensure_thread()
        except Exception as exc:  # never into the training loop
            self.failed += 1
            self._warn_once(f"send failed: {type(exc).__name__}: {exc}")

    def _reset_after_fork(self) -> None:
        self._pid = os.getpid()
        self._unix = self._udp = None
        self._thread = None
        self._lock = threading.Lock()
        self._wake = threading.Event()

    def _send_unix(self, data: bytes) -> bool:
        if not self.socket_path:
            return False
        try:
            if self._unix is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                sock.setblocking(False)
                with contextlib.suppress(OSError):
                    sock.bind("")  # Linux autobind: gives the agent a per-process sender address
                self._unix = sock
            self._unix.sendto(data, self.socket_path)
            return True
        except OSError:
            return False

    def _send_udp(self, data: bytes) -> bool:
        if not self.udp_port:
            return False
        try:
            if self._udp is None:
                sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                sock.setblocking(False)
                self._udp = sock
            self._udp.sendto(data, ("127.0.0.1", self.udp_port))
            return True
        except OSError:
            return False

    def _ensure_thread(self) -> None:
        thread = self._thread
        if thread is not None and thread.is_alive():
            return
        thread = threading.Thread(target=self._run_flusher, name="rackwatt-stage", daemon=True)
        self._thread = thread
        thread.start()

    def _run_flusher(self) -> None:
        """Sends a held-back change once the training loop goes quiet, and repeats the stage as
        a keepalive. Wakes a few times a second only, so it hardly ever contends for the GIL."""
        while not self._closed:
            self._wake.wait(_FLUSH_POLL_S)
            if self._closed:
                return
            now = time.monotonic()
            since = now - self._last_send
            if (self._pending and since >= self.min_interval_s) or (
                self._stage and since >= self.keepalive_s
            ):
                self._send(now)


_default: StageClient | None = None


def get_client() -> StageClient:
    """The process-wide client the module-level functions use (created on first use)."""
    global _default
    if _default is None:
        _default = StageClient()
        atexit.register(_default.flush)
    return _default


def stage(name: str) -> _StageBlock:
    return get_client().stage(name)


def begin(name: str, job: str | None = None) -> None:
    get_client().begin(name, job)


def end(name: str | None = None) -> None:
    get_client().end(name)


def mark(name: str, job: str | None = None) -> None:
    get_client().mark(name, job)


def idle() -> None:
    get_client().idle()


def report(work_rate: float) -> None:
    get_client().report(work_rate)
