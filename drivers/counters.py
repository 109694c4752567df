"""Cumulative energy counters as resettable gauges: a counter that goes backwards is a reset (reboot,
driver reload) or a wrap at its register width, never negative energy.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CounterDelta:
    """Turns successive readings of one counter into non-negative increments.

    ``wrap_at``: the counter's modulus (e.g. 2**32 raw units) if it wraps, else None. A backwards
    step by more than half the modulus is a wrap; any other backwards step is a reset, after which
    the counter's new value is the energy since the reset only if ``count_after_reset``.
    """

    wrap_at: float | None = None
    count_after_reset: bool = False
    last: float | None = None
    resets: int = 0
    wraps: int = 0

    def update(self, value: float) -> float | None:
        """The increment since the previous reading, or None for the first reading."""
        previous, self.last = self.last, value
        if previous is None:
            return None
        if value >= previous:
            return value - previous
        if self.wrap_at is not None and previous - value > self.wrap_at / 2:
            self.wraps += 1
            return value + self.wrap_at - previous
        self.resets += 1
        return value if self.count_after_reset else 0.0


@dataclass
class EnergyTotal:
    """A GPU's energy counter as a total that never steps back: it starts at the device's own
    count and adds each increment, so a driver reload (``delta.resets``) loses nothing."""

    delta: CounterDelta = field(default_factory=lambda: CounterDelta(count_after_reset=True))
    total: float | None = None

    def update(self, raw: float) -> tuple[float, bool]:
        """The total after reading ``raw``, and whether the counter was reset since the last reading."""
        resets = self.delta.resets
        increment = self.delta.update(raw)
        self.total = raw if self.total is None else self.total + (increment or 0.0)
        return self.total, self.delta.resets > resets


@dataclass
class PowerIntegral:
    """Energy (J) as trapezoids of power over time, for devices without an energy counter (an
    estimate); a gap over ``max_gap_s``, or one after ``restart()``, is not bridged."""

    max_gap_s: float
    total_j: float | None = None
    last: tuple[float, float] | None = None  # (s, W) of the previous reading

    def add(self, ts: float, power_w: float) -> float:
        if self.total_j is None:
            self.total_j = 0.0
        elif self.last is not None and 0 < ts - self.last[0] <= self.max_gap_s:
            self.total_j += (self.last[1] + power_w) / 2.0 * (ts - self.last[0])
        self.last = (ts, power_w)
        return self.total_j

    def restart(self) -> None:
        self.last = None
