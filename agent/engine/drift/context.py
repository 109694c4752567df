"""Secondary evidence for attribution: slow references and fast levels of the rack's other signals.

Why: a residual tells *that* a component moved; what moved with it tells *why*. A cooling
residual with the setpoint lower than its reference is a setpoint change; an IT residual with
the inlet temperatures up is a hot spot driving the server fans; a GPU residual with the
work rate changed too is a new workload, not ageing. Each signal keeps a slow reference (frozen
while any component is held, so it remembers "before") and a fast level ("now"). Fixed size:
two floats per signal, per stage slot for the stage-dependent ones.
"""

from __future__ import annotations

import math

import numpy as np

from agent.engine.components import ComponentSample
from agent.trace.model import CANONICAL_STAGES

STAGE_SLOTS: tuple[str, ...] = (*CANONICAL_STAGES, "other")
SCALAR_SIGNALS: tuple[str, ...] = ("setpoint_c", "inlet_mean_c", "inlet_spread_c", "fan_pct")
REF_HALFLIFE_BINS = 720.0  # 12 h at 60 s bins
FAST_HALFLIFE_BINS = 20.0
WORK_RATE_FAST_HALFLIFE_BINS = 30.0  # work rate wobbles with stalls inside a bin: judge it over ~½ h
TYPICAL_RATE_BAND_FRAC = 0.03  # bins within 3 % of the typical work rate refine it; others do not
TYPICAL_RATE_HALFLIFE_BINS = 30.0
TYPICAL_RATE_REACQUIRE_FRAC = 0.6  # this share of recent bins out of band: a new rate (new job)
TYPICAL_RATE_FIRST_BINS = 5  # a fresh typical rate is the median of a stage's first bins (one bin
# may be cut short by a stall or a stage edge, or mixed with a faster stage)
MIX_SLOW_HALFLIFE_BINS = 1440.0
MIX_FAST_HALFLIFE_BINS = 180.0


def stage_slot(stage: str) -> int:
    """Index of a stage in the fixed slot table; unknown and custom labels share the last slot."""
    try:
        return CANONICAL_STAGES.index(stage)
    except ValueError:
        return len(CANONICAL_STAGES)


class _Level:
    """Slow reference + fast level of one signal (EW means with a count-based warm start)."""

    __slots__ = ("fast", "fast_halflife", "n", "ref")

    def __init__(self, fast_halflife: float = FAST_HALFLIFE_BINS) -> None:
        self.ref = math.nan
        self.fast = math.nan
        self.n = 0.0
        self.fast_halflife = fast_halflife

    def update(self, value: float, frozen: bool) -> None:
        if not math.isfinite(value):
            return
        a_fast = max(1.0 / (self.n + 1.0), math.log(2.0) / self.fast_halflife)
        self.fast = value if not math.isfinite(self.fast) else self.fast + a_fast * (value - self.fast)
        if not frozen or not math.isfinite(self.ref):
            a_ref = max(1.0 / (self.n + 1.0), math.log(2.0) / REF_HALFLIFE_BINS)
            self.ref = value if not math.isfinite(self.ref) else self.ref + a_ref * (value - self.ref)
            self.n += 1.0

    def moved(self) -> float:
        return self.fast - self.ref if math.isfinite(self.fast) and math.isfinite(self.ref) else math.nan

    def pack(self) -> list[float | None]:
        return [_num(self.ref), _num(self.fast), _num(self.n)]

    def unpack(self, values: object) -> None:
        if not isinstance(values, list) or len(values) != 3:
            raise ValueError("drift context: each level must be [ref, fast, n]")
        self.ref, self.fast, self.n = (math.nan if v is None else float(v) for v in values)


class SignalContext:
    """What the rack's non-residual signals did: references, fast levels, stage mix, job."""

    def __init__(self) -> None:
        self.levels = {name: _Level() for name in SCALAR_SIGNALS}
        self.work_rate = [_Level(WORK_RATE_FAST_HALFLIFE_BINS) for _ in STAGE_SLOTS]
        # Typical work rate per stage: the rate most bins run at, learned from in-band bins only,
        # so bins cut short by stalls or stage changes (lower rates) do not drag it down; when most
        # recent bins run elsewhere (a new job) it re-acquires from the fast level.
        self.rate_typical = np.full(len(STAGE_SLOTS), math.nan)
        self.rate_out = np.zeros(len(STAGE_SLOTS))  # EW share of recent bins outside the band
        self.rate_first = np.full((len(STAGE_SLOTS), TYPICAL_RATE_FIRST_BINS), math.nan)
        self.rate_first_n = np.zeros(len(STAGE_SLOTS))
        self.mix_slow = np.full(len(STAGE_SLOTS), 1.0 / len(STAGE_SLOTS))
        self.mix_fast = np.full(len(STAGE_SLOTS), 1.0 / len(STAGE_SLOTS))
        self.mix_n = 0.0
        self.rated = False  # the rack's jobs report a work rate (seen a positive one)
        self.job = ""  # last non-empty job id seen
        self.previous_job = ""  # the one before it (not saved: read at the job change only)
        self.workload_ts = math.nan  # start of the last workload change (set by the monitor)

    def update(self, sample: ComponentSample, frozen: bool) -> bool:
        """Absorb one bin; returns True when a new non-empty job id replaced a previous one."""
        for name, level in self.levels.items():
            level.update(float(getattr(sample, name)), frozen)
        slot = stage_slot(sample.stage)
        if math.isfinite(sample.work_rate) and sample.work_rate > 0:
            self.rated = True
        if sample.stage:
            self.work_rate[slot].update(sample.work_rate, frozen)
            self._update_typical(slot, float(sample.work_rate))
            onehot = np.zeros(len(STAGE_SLOTS))
            onehot[slot] = 1.0
            a_slow = max(1.0 / (self.mix_n + 1.0), math.log(2.0) / MIX_SLOW_HALFLIFE_BINS)
            a_fast = max(1.0 / (self.mix_n + 1.0), math.log(2.0) / MIX_FAST_HALFLIFE_BINS)
            self.mix_slow += a_slow * (onehot - self.mix_slow)
            self.mix_fast += a_fast * (onehot - self.mix_fast)
            self.mix_n += 1.0
        changed = False
        if sample.job and sample.job != self.job:
            changed = bool(self.job)
            self.previous_job = self.job
            self.job = sample.job
        return changed

    def _update_typical(self, slot: int, rate: float) -> None:
        if not math.isfinite(rate):
            return
        typical = float(self.rate_typical[slot])
        alpha = math.log(2.0) / TYPICAL_RATE_HALFLIFE_BINS
        i = int(self.rate_first_n[slot])
        if i < TYPICAL_RATE_FIRST_BINS:
            self.rate_first[slot, i] = rate
            self.rate_first_n[slot] = i + 1
            self.rate_typical[slot] = float(np.median(self.rate_first[slot, : i + 1]))
            return
        in_band = abs(rate - typical) <= TYPICAL_RATE_BAND_FRAC * max(abs(typical), 1e-9)
        self.rate_out[slot] += alpha * ((0.0 if in_band else 1.0) - self.rate_out[slot])
        if in_band:
            self.rate_typical[slot] = typical + alpha * (rate - typical)
        elif self.rate_out[slot] >= TYPICAL_RATE_REACQUIRE_FRAC:
            fast = self.work_rate[slot].fast
            self.rate_typical[slot] = fast if math.isfinite(fast) else rate
            self.rate_out[slot] = 0.0

    def restart_rates(self) -> None:
        """A new workload: the typical work rate per stage re-acquires from the new job's first bins
        (rather than after most bins left the old band, from a fast level still weighted by the old
        job), so GPU bins at the new job's usual rate count again within minutes."""
        self.rate_typical[:] = math.nan
        self.rate_out[:] = 0.0
        self.rate_first[:] = math.nan
        self.rate_first_n[:] = 0.0
        for level in self.work_rate:
            level.fast = math.nan

    def rebase_work_rates(self) -> None:
        """A restart of the same kind of job: its own typical rates become the reference, so "the
        work rate moved" means moved within this run (not "runs 8 % faster than the last one")."""
        for slot, level in enumerate(self.work_rate):
            typical = float(self.rate_typical[slot]) if self.rate_settled(slot) else math.nan
            level.ref = level.fast = typical

    def rate_settled(self, slot: int) -> bool:
        """The stage's typical rate is past its first bins (their median), so it can gate bins."""
        return bool(self.rate_first_n[slot] >= TYPICAL_RATE_FIRST_BINS)

    def typical_rate(self, slot: int) -> float:
        """The work rate this stage's bins usually run at (NaN until seen)."""
        return float(self.rate_typical[slot])

    def work_rate_moved_pct(self) -> float:
        """Relative change of the work rate against its reference, in %, in the stage that carries
        most of the time and reports a work rate (NaN if none does)."""
        order = np.argsort(-self.mix_slow)
        for slot in order:
            level = self.work_rate[int(slot)]
            if level.n < 60 or not math.isfinite(level.ref) or abs(level.ref) < 1e-9:
                continue
            return 100.0 * level.moved() / abs(level.ref)
        return math.nan

    def mix_distance(self) -> float:
        """Half the L1 distance between the recent and the long-run stage mix (0 … 1)."""
        return 0.5 * float(np.abs(self.mix_fast - self.mix_slow).sum()) if self.mix_n > 60 else 0.0

    def resync(self) -> None:
        """Adopt the current levels as the new reference (after a workload change or an accept)."""
        for level in (*self.levels.values(), *self.work_rate):
            if math.isfinite(level.fast):
                level.ref = level.fast
        self.mix_slow[:] = self.mix_fast

    def state(self) -> dict[str, object]:
        return {
            "levels": {name: level.pack() for name, level in self.levels.items()},
            "work_rate": [level.pack() for level in self.work_rate],
            "rate_typical": [_num(float(v)) for v in self.rate_typical],
            "rate_out": [float(v) for v in self.rate_out],
            "rate_first": [[_num(float(v)) for v in row] for row in self.rate_first],
            "rate_first_n": [float(v) for v in self.rate_first_n],
            "mix_slow": [float(v) for v in self.mix_slow],
            "mix_fast": [float(v) for v in self.mix_fast],
            "mix_n": self.mix_n,
            "rated": self.rated,
            "job": self.job[:200],
            "workload_ts": _num(self.workload_ts),
        }

    def restore(self, data: dict[str, object]) -> None:
        levels = data.get("levels")
        rates = data.get("work_rate")
        if not isinstance(levels, dict) or not isinstance(rates, list) or len(rates) != len(STAGE_SLOTS):
            raise ValueError("drift context: levels/work_rate missing or of the wrong size")
        for name, level in self.levels.items():
            level.unpack(levels.get(name))
        for level, packed in zip(self.work_rate, rates, strict=True):
            level.unpack(packed)
        for key, target in (("mix_slow", self.mix_slow), ("mix_fast", self.mix_fast)):
            values = data.get(key)
            if not isinstance(values, list) or len(values) != len(STAGE_SLOTS):
                raise ValueError(f"drift context: {key} must be a list of {len(STAGE_SLOTS)}")
            target[:] = [float(v) for v in values]
        typical, out = data.get("rate_typical"), data.get("rate_out")  # absent in older state: re-learned
        n_slots = len(STAGE_SLOTS)
        if isinstance(typical, list) and isinstance(out, list) and len(typical) == len(out) == n_slots:
            self.rate_typical[:] = [math.nan if v is None else float(v) for v in typical]
            self.rate_out[:] = [float(v) for v in out]
        first, first_n = data.get("rate_first"), data.get("rate_first_n")  # absent in older state
        if isinstance(first, list) and isinstance(first_n, list) and len(first) == len(first_n) == n_slots:
            self.rate_first[:] = [[math.nan if v is None else float(v) for v in row] for row in first]
            self.rate_first_n[:] = [float(v) for v in first_n]
        else:
            self.rate_first_n[:] = np.where(np.isfinite(self.rate_typical), TYPICAL_RATE_FIRST_BINS, 0.0)
        self.mix_n = float(data.get("mix_n") or 0.0)  # type: ignore[arg-type]
        rated = data.get("rated")  # absent in older state: any known positive rate says so
        self.rated = rated if isinstance(rated, bool) else bool(np.nansum(self.rate_typical) > 0)
        self.job = str(data.get("job") or "")
        last = data.get("workload_ts")
        self.workload_ts = float(last) if isinstance(last, (int, float)) else math.nan


def _num(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None
