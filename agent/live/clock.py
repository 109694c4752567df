"""Clocks for the live loop: the wall clock, and an accelerated one for the demo and benchmarks.

The loop never calls ``time.time()`` or ``asyncio.sleep`` directly for its schedule: it asks its
clock, so ``rackwatt demo`` (and bench/footprint.py's 30-day run) can run the very same loop with
simulated time going ``speed`` times faster than real time.
"""

from __future__ import annotations

import asyncio
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
