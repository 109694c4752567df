"""The simulated job's stage hints, sent as a real job would: a datagram to the agent's hint socket
at every change of stage, job or work rate, repeated every ``keepalive_s`` so it never expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
from collections.abc import Callable
from pathlib import Path

from agent.stages.hints import encode_hint

StageFn = Callable[[], tuple[str, str, float]]  # (stage, job, work_rate)


class StageHinter:
    def __init__(
        self,
        socket_path: Path,
        stage_fn: StageFn,
        clock: Callable[[], float],
        keepalive_s: float = 60.0,
        check_real_s: float = 0.02,
    ) -> None:
        self.socket_path = socket_path
        self.stage_fn = stage_fn
        self.clock = clock
        self.keepalive_s = keepalive_s
        self.check_real_s = check_real_s
        self.sent = 0
        self.failed = 0
        self._last: tuple[str, str, float | None] | None = None
        self._last_ts = -math.inf
        self._sock: socket.socket | None = None

    def step(self) -> bool:
        """Send a hint if something changed or the keepalive is due; True if one was sent."""
        stage, job, work_rate = self.stage_fn()
        rate = round(work_rate, 1) if math.isfinite(work_rate) and work_rate >= 0 else None  # None: unknown
        now = self.clock()
        current = (stage, job, rate)
        if current == self._last and now - self._last_ts < self.keepalive_s:
            return False
        if self._sock is None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.setblocking(False)
        try:
            self._sock.sendto(encode_hint(stage, job=job or None, work_rate=rate), str(self.socket_path))
        except OSError:
            self.failed += 1  # the agent's socket is not there yet (or is restarting): try again
            return False
        self.sent += 1
        self._last, self._last_ts = current, now
        return True

    async def run(self) -> None:
        try:
            while True:
                self.step()
                await asyncio.sleep(self.check_real_s)
        finally:
            if self._sock is not None:
                with contextlib.suppress(OSError):
                    self._sock.close()
                self._sock = None
