"""The stage timeline: which stage the job last reported, as of a given time, with expiry.

Every hint source ends in ``apply``; a hint holds until the next one or until it is older than
``ttl_s``, then the stage is unknown (``""``) and the engine infers it. A hint naming a ``node`` goes
to that node's own ring (``NodeTimelines``) and wins there over a rack-wide one. Fixed memory: a
ring of the last ``capacity`` hints per timeline, kept in time order so a late hint (MQTT, a busy
sender) still lands at its own time.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

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

    def current(self, ts: float) -> StageNow:
        """The stage at ts: the last hint at or before ts if younger than ttl_s, else unknown."""
        i = bisect.bisect_right(self._ts, ts)
        if not i:
            return StageNow(UNKNOWN, None, math.nan, "none")
        hint = self._hints[i - 1]
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

    def labels_at(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(stage, job) per time of ``ts`` (object arrays, "" where no fresh hint): ``current``
        for many rows at once, without touching the expiry counter."""
        stage, job = no_labels(ts.shape[0])
        if not self._ts or not ts.size:
            return stage, job
        hint_ts = np.asarray(self._ts)
        i = np.searchsorted(hint_ts, ts, side="right") - 1
        fresh = (i >= 0) & (ts - hint_ts[i] <= self.ttl_s)  # i == -1: before every hint
        stage[fresh] = np.array([h.stage for h in self._hints], dtype=object)[i[fresh]]
        job[fresh] = np.array([h.job or "" for h in self._hints], dtype=object)[i[fresh]]
        return stage, job


def no_labels(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(stage, job) object arrays of ``n`` rows with no hint."""
    return np.full(n, UNKNOWN, dtype=object), np.full(n, "", dtype=object)


class NodeTimelines:
    """The rack-wide timeline (``rack``: rack-wide hints only) plus one per known node."""

    def __init__(self, rack: StageTimeline, nodes: Iterable[str] = ()) -> None:
        self.rack = rack
        self.nodes: dict[str, StageTimeline] = {
            n: StageTimeline(rack.ttl_s, rack.capacity) for n in dict.fromkeys(nodes)
        }

    def for_nodes(self, nodes: Iterable[str]) -> NodeTimelines:
        """After a reload: the same rack timeline and the rings of nodes still listed; new nodes
        start empty, nodes no longer listed are dropped (their hints would now be refused)."""
        out = NodeTimelines(self.rack, nodes)
        for node in out.nodes.keys() & self.nodes.keys():
            out.nodes[node] = self.nodes[node]
            out.nodes[node].ttl_s = self.rack.ttl_s  # the rack's may have changed with the reload
        return out

    def knows(self, node: str) -> bool:
        return node in self.nodes

    def apply(self, hint: Hint) -> None:
        """A node hint to its node's ring, any other to the rack's (callers check ``knows`` first)."""
        (self.nodes[hint.node] if hint.node is not None else self.rack).apply(hint)

    def labels_at(self, node: str, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(stage, job) per row from ``node``'s own fresh hints ("" where it has none: the rack-wide
        hint, which the rows already carry, or inference decides there)."""
        own = self.nodes.get(node)
        return own.labels_at(ts) if own is not None else no_labels(ts.shape[0])
