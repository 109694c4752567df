"""Facility energy by training job, with a bounded set of job ids as label values.

Every job id becomes a series per part, so only the ``max_jobs`` most recently seen are kept; a job
pushed out stops being exported and its total is *not* folded into another label (that jump would
show as energy never used). Energy with no job id is counted under ``NO_JOB``. The energy is the
delta of the engine's per-stage counters between two summaries, credited to the job the summary
names: a job change mid-window is off by at most one window (``[engine] window_s``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from agent.payload import number, section
from agent.trace.model import J_PER_KWH

NO_JOB = "none"
PARTS = ("it", "cooling")  # facility energy = IT + the rack's attributed cooling energy


def stage_energy_kwh(summary: Mapping[str, Any]) -> dict[tuple[str, str], float]:
    """(stage, part) → cumulative kWh from a summary payload's ``energy_kwh``."""
    out: dict[tuple[str, str], float] = {}
    for stage, parts in section(summary, "energy_kwh").items():
        if not isinstance(parts, Mapping):
            continue
        for part in PARTS:
            value = number(parts.get(part))
            if value is not None and value >= 0:
                out[(str(stage), part)] = value
    return out


class JobEnergyLedger:
    """Cumulative joules per (job id, part) for the ``max_jobs`` most recently seen jobs."""

    def __init__(self, max_jobs: int) -> None:
        if max_jobs < 1:
            raise ValueError(f"max_jobs must be >= 1, got {max_jobs}")
        self.max_jobs = max_jobs
        self._totals_j: OrderedDict[str, dict[str, float]] = OrderedDict()
        self._last_kwh: dict[tuple[str, str], float] | None = None

    def start_from(self, summary: Mapping[str, Any] | None) -> None:
        """The counters' reference at start: energy accounted before it belongs to no job here."""
        self._last_kwh = stage_energy_kwh(summary) if summary else {}

    def observe_summary(self, summary: Mapping[str, Any]) -> None:
        now = stage_energy_kwh(summary)
        last, self._last_kwh = self._last_kwh, now
        if last is None:
            return  # the first summary only sets the reference
        job = str(summary.get("job") or NO_JOB)
        added = {part: 0.0 for part in PARTS}
        for key, kwh in now.items():
            before = last.get(key, 0.0)
            # a counter below its last value was reset (the stage's slot was reused): all of it is new
            added[key[1]] += kwh - before if kwh >= before else kwh
        self._credit(job, added)

    def _credit(self, job: str, added_kwh: Mapping[str, float]) -> None:
        totals = self._totals_j.pop(job, None) or {part: 0.0 for part in PARTS}
        for part, kwh in added_kwh.items():
            totals[part] += kwh * J_PER_KWH
        self._totals_j[job] = totals  # most recently seen last
        while len(self._totals_j) > self.max_jobs:
            self._totals_j.popitem(last=False)

    def totals_j(self) -> dict[str, dict[str, float]]:
        """job id → part → joules (a copy), oldest first."""
        return {job: dict(parts) for job, parts in self._totals_j.items()}
