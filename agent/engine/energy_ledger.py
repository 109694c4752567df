"""``EnergyLedger``: the energy the engine accounted, bin by bin, so any [t0, t1] can be answered
(``rackwatt_client``'s ``end_window``: "what did my epoch cost?").

It keeps, per recent bin, the sums the engine's energy accounting adds up (IT, cooling and GPU
energy with the seconds each was known) and the bin's job. A bin straddling a window's edge counts
in proportion to its overlap; a part known for less than ``MIN_KNOWN`` of the window is None with
the reason, never 0.0. Fixed memory: a ring of a day of bins (~0.4 MB); not persistent, so after a
restart windows before it say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agent.engine.signals import F
from agent.engine.stage_attribution import MIN_KNOWN

HORIZON_S = 86400.0  # one day: longer than any training epoch a job measures as one window
# columns of the ring: start, and per bin the sums the engine's energy accounting uses
_COLS = ("start", "pdu_s", "pdu_ws", "cool_s", "cool_ws", "gpu_s", "gpu_ws")
_C = {name: i for i, name in enumerate(_COLS)}


@dataclass(frozen=True)
class IntervalEnergy:
    """Energy accounted for one interval (J); a part is None when it is not known, with ``why``."""

    t0: float
    t1: float
    it_j: float | None
    cooling_j: float | None
    facility_j: float | None
    gpu_j: float | None
    job: str | None  # the job the figures are scoped to (None: the whole rack)
    why: dict[str, str] = field(default_factory=dict)  # part name → why it is None


class EnergyLedger:
    """A ring of the last ``capacity`` bins' energy sums; ``interval()`` answers a window."""

    def __init__(self, bin_s: float, capacity: int | None = None) -> None:
        if not bin_s > 0:
            raise ValueError(f"bin_s must be > 0, got {bin_s}")
        self.bin_s = float(bin_s)
        self.capacity = int(capacity if capacity is not None else max(1, round(HORIZON_S / self.bin_s)))
        self._rows = np.zeros((self.capacity, len(_COLS)))
        self._jobs = np.full(self.capacity, "", dtype=object)
        self._n = 0  # bins ever added; the newest is at (_n - 1) % capacity

    @property
    def accounted_until(self) -> float | None:
        """End of the newest bin accounted (None before the first)."""
        if not self._n:
            return None
        return float(self._rows[(self._n - 1) % self.capacity, _C["start"]]) + self.bin_s

    @property
    def accounted_from(self) -> float | None:
        """Start of the oldest bin still held."""
        if not self._n:
            return None
        first = 0 if self._n <= self.capacity else self._n % self.capacity
        return float(self._rows[first, _C["start"]])

    def add(self, start: np.ndarray, sums: np.ndarray, jobs: list[str]) -> None:
        """Record completed bins (time ordered), with the same sums the engine accounts."""
        for i in range(len(start)):
            k = self._n % self.capacity
            row = self._rows[k]
            row[_C["start"]] = start[i]
            for name in _COLS[1:]:
                row[_C[name]] = sums[i, F[name]]
            self._jobs[k] = str(jobs[i] or "")
            self._n += 1

    def _rows_touching(self, t0: float, t1: float) -> tuple[np.ndarray, np.ndarray]:
        """The held bins that may overlap [t0, t1], oldest first (only those are copied)."""
        held = min(self._n, self.capacity)
        first = 0 if self._n <= self.capacity else self._n % self.capacity  # the oldest bin's slot
        starts = np.roll(self._rows[:held, _C["start"]], -first)
        lo, hi = np.searchsorted(starts, [t0 - self.bin_s, t1])
        slots = (np.arange(lo, hi) + first) % self.capacity
        return self._rows[slots], self._jobs[slots]

    def interval(self, t0: float, t1: float, job: str | None = None,
                 cooling_measured: bool = True) -> IntervalEnergy:
        """What was accounted for [t0, t1] (for ``job`` only when given); ``cooling_measured`` False:
        the rack has no cooling-unit power telemetry, so cooling (and facility) energy is unknown, not 0."""
        parts = ("it_j", "cooling_j", "facility_j", "gpu_j")

        def unknown(reason: str) -> IntervalEnergy:  # every part None, for one reason
            return IntervalEnergy(t0, t1, None, None, None, None, job, dict.fromkeys(parts, reason))

        if not t1 - t0 > 0:
            return unknown(f"empty window: end {t1:.3f} is not after start {t0:.3f}")
        until, since = self.accounted_until, self.accounted_from
        if until is None or since is None:
            return unknown("the rack agent has accounted no energy since it started")
        if until < t1:
            return unknown(
                f"not yet accounted: the rack agent has accounted up to {t1 - until:.0f} s before "
                "the window's end (bins close after a short look-ahead; ask again shortly)"
            )
        if since > t0:
            return unknown(
                f"the rack agent's ledger starts {since - t0:.0f} s after the window's start "
                "(it restarted, or the window is older than its horizon)"
            )
        rows, jobs = self._rows_touching(t0, t1)
        start = rows[:, _C["start"]]
        overlap = np.clip(np.minimum(start + self.bin_s, t1) - np.maximum(start, t0), 0.0, None)
        weight = overlap / self.bin_s
        if job is not None:
            weight = weight * (jobs == job)
            if not weight.any():
                return unknown(f"the rack agent attributed no bin in this window to job {job!r}")
        need_s = MIN_KNOWN * float((overlap if job is None else weight * self.bin_s).sum())
        why: dict[str, str] = {}

        def part(ws: str, s: str, label: str) -> float | None:
            known_s = float(weight @ rows[:, _C[s]])
            if known_s < need_s or known_s <= 0:
                share = known_s / max(need_s / MIN_KNOWN, 1e-9)
                why[label] = f"known for {share:.0%} of the window (needs {MIN_KNOWN:.0%})"
                return None
            return float(weight @ rows[:, _C[ws]])

        it_j = part("pdu_ws", "pdu_s", "it_j")
        gpu_j = part("gpu_ws", "gpu_s", "gpu_j")
        if cooling_measured:
            cooling_j = part("cool_ws", "cool_s", "cooling_j")
        else:
            cooling_j = None
            why["cooling_j"] = "this rack has no cooling-unit power telemetry"
        facility_j = it_j + cooling_j if it_j is not None and cooling_j is not None else None
        if facility_j is None:
            why["facility_j"] = "needs IT and cooling energy: " + "; ".join(
                f"{k.removesuffix('_j')} {why[k]}" for k in ("it_j", "cooling_j") if k in why
            )
        return IntervalEnergy(t0, t1, it_j, cooling_j, facility_j, gpu_j, job, why)
