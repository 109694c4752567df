"""Runs every driver on its own interval and keeps what came back since the last frame.

One asyncio task per driver: a random start offset (devices configured alike do not poll in
lock-step), ``poll()`` under a whole-poll deadline, a sleep to the next slot with a little jitter.
A driver that raises or overruns becomes a failed ``PollResult``: its signals are missing, never zero.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.live.clock import Clock
from agent.live.logsetup import worth_logging
from drivers.base import Driver, PollResult

log = logging.getLogger("rackwatt.poll")

JITTER_FRAC = 0.02  # ± of the interval, per cycle


@dataclass
class DeviceHealth:
    device: str
    interval_s: float
    polls: int = 0
    failures: int = 0
    consecutive_failures: int = 0
    last_ok_ts: float | None = None
    last_error: str | None = None
    elapsed_ms: float | None = None
    profile: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.polls > 0 and self.consecutive_failures == 0,
            "polls": self.polls,
            "failures": self.failures,
            "last_ok": self.last_ok_ts,
            "error": self.last_error,
            "elapsed_ms": None if self.elapsed_ms is None else round(self.elapsed_ms, 1),
            "profile": self.profile,
            "interval_s": self.interval_s,
        }


class Poller:
    """Owns the driver tasks; ``take_new()`` hands the signals sampled since the previous call."""

    def __init__(self, drivers: list[Driver], clock: Clock, rng: random.Random | None = None) -> None:
        self.drivers = list(drivers)
        self.clock = clock
        self._rng = rng or random.Random()
        self._new: dict[str, float] = {}
        self.health: dict[str, DeviceHealth] = {
            d.device: DeviceHealth(d.device, float(d.interval_s)) for d in self.drivers
        }
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    def start(self) -> None:
        for driver in self.drivers:
            self._tasks.append(asyncio.create_task(self._run(driver), name=f"poll-{driver.device}"))

    async def stop(self) -> None:
        """Cancel the poll tasks and close every driver (errors logged, never raised)."""
        self._stopping = True
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=5)
            for task in pending:
                log.warning("%s: poll task did not stop", task.get_name())
        for driver in self.drivers:
            try:
                await asyncio.wait_for(driver.close(), timeout=5)
            except Exception as exc:
                log.warning("closing %s failed: %s", driver.device, exc)

    def take_new(self) -> dict[str, float]:
        new, self._new = self._new, {}
        return new

    def health_dict(self) -> dict[str, dict[str, Any]]:
        return {name: h.as_dict() for name, h in self.health.items()}

    async def poll_once(self, driver: Driver) -> PollResult:
        """One poll under the driver's ``deadline_s`` (else 0.8 × its interval); never raises."""
        deadline_s = getattr(driver, "deadline_s", None) or 0.8 * float(driver.interval_s)
        result = await guarded_poll(driver, float(deadline_s), self.clock.time)
        self._record(result)
        return result

    def _record(self, result: PollResult) -> None:
        health = self.health.setdefault(result.device, DeviceHealth(result.device, 0.0))
        health.polls += 1
        health.elapsed_ms = result.elapsed_ms
        if result.profile:
            health.profile = result.profile
        if result.ok:
            if health.consecutive_failures:
                log.info("%s: answering again after %d failed poll(s)", result.device,
                         health.consecutive_failures)
            health.consecutive_failures = 0
            health.last_ok_ts = result.ts
            health.last_error = None
        else:
            health.failures += 1
            health.consecutive_failures += 1
            health.last_error = result.error
            if worth_logging(health.consecutive_failures):
                log.warning("%s (failed %d time(s) in a row)",
                            result.error or f"{result.device}: poll failed", health.consecutive_failures)
        self._new.update(result.signals)  # a failed poll may still carry the signals it did read

    async def _run(self, driver: Driver) -> None:
        interval_s = float(driver.interval_s)
        await self.clock.sleep(self._rng.uniform(0, min(interval_s, 2.0) * 0.5))
        next_at = self.clock.time()
        while not self._stopping:
            await self.poll_once(driver)
            next_at += interval_s * (1 + self._rng.uniform(-JITTER_FRAC, JITTER_FRAC))
            now = self.clock.time()
            if next_at < now:  # overran: skip the missed slots (never a burst, never a busy loop)
                next_at = now + interval_s * 0.5
            await self.clock.sleep(next_at - now)


async def guarded_poll(driver: Driver, deadline_s: float, now: Callable[[], float]) -> PollResult:
    """``driver.poll()`` within ``deadline_s``; never raises: a driver that overruns or raises
    gives a failed result (no signals: missing, never zero) saying why and which device."""
    start_ts, started = now(), time.monotonic()
    try:
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
        # arrives as the poll completes, and the task would then outlive stop().
        async with asyncio.timeout(deadline_s):
            return await driver.poll()
    except TimeoutError:
        why = f"poll exceeded its deadline of {deadline_s:g} s"
    except Exception as exc:  # a driver bug must not stop the agent
        why = f"driver raised {type(exc).__name__}: {exc}"
    elapsed_ms = (time.monotonic() - started) * 1000
    # drivers of network devices name themselves with host:port (``where``): say which device it was
    where = getattr(driver, "where", None) or driver.device
    return PollResult(driver.device, start_ts, {}, False, elapsed_ms, error=f"{where}: {why}")
