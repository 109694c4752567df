"""The stage timeline: which stage the job last reported, as of a given time, with expiry.

Every hint source (Unix socket, UDP, MQTT, ``rackwatt stage``, the client) ends in
``StageTimeline.apply``; the live loop asks ``current(ts)`` once per tick. A hint holds until the
next one or until it is older than ``ttl_s``; then the stage is unknown (``stage == ""``, source
``"expired"``) and the engine infers it from telemetry. When hints return, they win.

Fixed memory: a ring of the last ``capacity`` hints, kept in time order so a hint that arrives
slightly late (MQTT, a busy sender) still lands at its own time.
"""

from __future__ import annotations

import bisect
import math
from typing import NamedTuple

from agent.stages.hints import Hint

UNKNOWN = ""  # the trace's "no label": the engine infers the stage for such rows


class StageNow(NamedTuple):
    """What the timeline says at one instant. ``stage == ""`` means unknown (infer it)."""

    stage: str
    job: str | None
    work_rate: float
    source: str  # "unix" | "udp" | "mqtt" | ... for a fresh hint; "expired" or "none" otherwise


class StageTimeline:
    """Recent hints in time order; answers "which stage at ts" with expiry after ttl_s."""

    def __init__(self, ttl_s: float = 600.0, capacity: int = 64):
        if ttl_s <= 0:
            raise ValueError(f"stages.hint_ttl_s must be > 0, got {ttl_s}")
        self.ttl_s = ttl_s
        self.capacity = max(2, capacity)
        self._ts: list[float] = []
        self._hints: list[Hint] = []
        self.applied = 0
        self.expired = 0  # times current() found the latest hint too old
        self._last_answer_expired = False

    def apply(self, hint: Hint) -> None:
        """Insert a hint at its own time; the oldest falls off when the ring is full."""
        i = bisect.bisect_right(self._ts, hint.ts)
        self._ts.insert(i, hint.ts)
        self._hints.insert(i, hint)
        if len(self._ts) > self.capacity:
            del self._ts[0]
            del self._hints[0]
        self.applied += 1

    def latest(self, ts: float) -> Hint | None:
        """The last hint at or before ts (fresh or not)."""
        i = bisect.bisect_right(self._ts, ts)
        return self._hints[i - 1] if i else None

    def current(self, ts: float) -> StageNow:
        """The stage at ts: the last hint at or before ts if younger than ttl_s, else unknown."""
        hint = self.latest(ts)
        if hint is None:
            return StageNow(UNKNOWN, None, math.nan, "none")
        if ts - hint.ts > self.ttl_s:
            if not self._last_answer_expired:
                self.expired += 1
            self._last_answer_expired = True
            return StageNow(UNKNOWN, None, math.nan, "expired")
        self._last_answer_expired = False
        rate = hint.work_rate if hint.work_rate is not None else math.nan
        return StageNow(hint.stage, hint.job, rate, hint.source)

    def __len__(self) -> int:
        return len(self._hints)
