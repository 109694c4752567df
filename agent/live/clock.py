"""Clocks for the live loop: the wall clock, and accelerated ones for the demo, tests and benchmarks.

The loop takes its schedule from its clock, never from ``time.time()`` or ``asyncio.sleep``.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    speed: float  # simulated seconds per real second (1 for the wall clock)

    def time(self) -> float:
        """Unix seconds, possibly simulated."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` of this clock's time."""
        ...


async def sleep_unless(clock: Clock, seconds: float, event: asyncio.Event) -> None:
    """Sleep ``seconds`` on ``clock``, or less if ``event`` is set meanwhile (a stop, a reload)."""
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    waker = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleeper.cancel()
        waker.cancel()


class WallClock:
    speed = 1.0

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class ScaledClock:
    """Simulated time starting at ``start`` and running ``speed`` times faster than real time."""

    def __init__(self, speed: float, start: float | None = None) -> None:
        if speed <= 0:
            raise ValueError(f"clock speed must be > 0, got {speed}")
        self.speed = float(speed)
        self._start = time.time() if start is None else float(start)
        self._real0 = time.monotonic()

    def time(self) -> float:
        return self._start + (time.monotonic() - self._real0) * self.speed

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds) / self.speed)


class VirtualClock:
    """Simulated time that jumps to the next sleeper as soon as every task is waiting: days in minutes
    without skipping ticks. ``run()`` keeps time: start it as a task next to the code under test.
    Work in other threads (the MQTT client) does not hold time back.
    """

    speed = float("inf")

    def __init__(self, start: float | None = None, idle_spins: int = 3) -> None:
        self._now = time.time() if start is None else float(start)
        self._waiters: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self.idle_spins = idle_spins

    def time(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (self._now + max(0.0, seconds), next(self._order), fut))
        await fut

    async def run(self) -> None:
        while True:
            for _ in range(self.idle_spins):  # let every runnable task reach its next await
                await asyncio.sleep(0)
            while self._waiters and self._waiters[0][2].done():  # cancelled sleepers
                heapq.heappop(self._waiters)
            if not self._waiters:
                await asyncio.sleep(0.001)
                continue
            deadline = self._waiters[0][0]
            self._now = max(self._now, deadline)
            while self._waiters and self._waiters[0][0] <= deadline:
                fut = heapq.heappop(self._waiters)[2]
                if not fut.done():
                    fut.set_result(None)
