"""Secondary evidence for attribution: slow references and fast levels of the rack's other signals.

Why: a residual tells *that* a component moved; what moved with it tells *why* (a lower setpoint,
inlets up from a hot spot, a changed work rate). Each signal keeps a slow reference, frozen while
any component is held so it remembers "before", and a fast level ("now").
"""

from __future__ import annotations

import math

import numpy as np

from agent.engine.components import ComponentSample
from agent.engine.drift import tuning as T
from agent.engine.drift.estimators import ReferenceLevel, StageMix, TypicalRate, finite_or_none, number_or_nan
from agent.trace.model import CANONICAL_STAGES

STAGE_SLOTS: tuple[str, ...] = (*CANONICAL_STAGES, "other")
SCALAR_SIGNALS: tuple[str, ...] = ("setpoint_c", "inlet_mean_c", "inlet_spread_c", "fan_pct")
WHOLE_BIN = 1.0 - 1e-9  # a stage share this close to 1 filled the bin (its seconds are float sums)
# Stages in which the GPUs wait on storage: a bin's GPU power there is the waiting level plus however
# much training shares the bin, so it describes the stage only in a bin the stage fills.
WAITING_STAGES: tuple[str, ...] = ("data_load", "checkpoint")


def stage_slot(stage: str) -> int:
    """Index of a stage in the fixed slot table; unknown and custom labels share the last slot."""
    try:
        return CANONICAL_STAGES.index(stage)
    except ValueError:
        return len(CANONICAL_STAGES)


class SignalContext:
    """What the rack's non-residual signals did: references, fast levels, stage mix, job."""

    def __init__(self, bin_s: float = 60.0) -> None:
        ref, fast = T.bins(T.CONTEXT_REF_HALFLIFE_S, bin_s), T.bins(T.CONTEXT_FAST_HALFLIFE_S, bin_s)
        follow = T.bins(T.FOLLOW_HALFLIFE_S, bin_s)  # a work rate wobbles with stalls: judged over ~½ h
        self.warm_bins = T.whole_bins(T.STAGE_WARM_S, bin_s)
        self.levels = {name: ReferenceLevel(fast, ref) for name in SCALAR_SIGNALS}
        self.work_rate = [ReferenceLevel(follow, ref) for _ in STAGE_SLOTS]
        self.rates = TypicalRate(len(STAGE_SLOTS), follow, T.RATE_BAND_FRAC, T.RATE_REACQUIRE_FRAC,
                                 T.RATE_FIRST_BINS)
        self.mix = StageMix(len(STAGE_SLOTS), T.bins(T.LEVEL_HALFLIFE_S, bin_s),
                            T.bins(T.MIX_FAST_HALFLIFE_S, bin_s), self.warm_bins)
        self.rated = False  # the rack's jobs report a work rate (seen a positive one)
        self.job = ""  # last non-empty job id seen
        self.previous_job = ""  # the one before it (not saved: read at the job change only)
        self.workload_ts = math.nan  # start of the last workload change (set by the monitor)
        self.idle_bins = 0  # wholly idle bins in the rest just before this one
        self.anonymous_work = False  # work without a job id ran since the last id was seen
        self.resumed = False  # this bin: an unlabelled rack's GPUs resumed work after idling

    def moved(self, name: str) -> float:
        """How far a context signal's fast level is from its reference (NaN until both are known)."""
        moved = self.levels[name].moved
        return math.nan if moved is None else moved

    def update(self, sample: ComponentSample, frozen: bool) -> bool:
        """Absorb one bin; returns True when a new non-empty job id replaced a previous one."""
        for name, level in self.levels.items():
            level.update(float(getattr(sample, name)), hold=frozen)
        slot = stage_slot(sample.stage)
        if math.isfinite(sample.work_rate) and sample.work_rate > 0:
            self.rated = True
        if sample.stage:
            self.work_rate[slot].update(sample.work_rate, hold=frozen)
            self.rates.update(float(sample.work_rate), slot, fallback=self.work_rate[slot].fast)
            self.mix.update(slot)
        if sample.stage == "idle":
            # Only a bin at rest throughout is rest: a plurality of idle seconds inside running work
            # (a stall between steps) neither starts a rest nor ends one, so resuming from it is not
            # a possible job change.
            if sample.stage_share >= WHOLE_BIN:
                self.idle_bins += 1
            self.resumed = False
        elif sample.stage:
            unlabelled = not sample.job and sample.stage_source != "hint"
            self.resumed = unlabelled and self.idle_bins > 0
            self.idle_bins = 0
            self.anonymous_work = self.anonymous_work or not sample.job
        changed = False
        if sample.job and sample.job != self.job:
            # A new id replaces the last one, or work that reported none (a rack whose jobs label
            # themselves only sometimes: its first labelled job after unlabelled ones is a change too).
            changed = bool(self.job) or self.anonymous_work
            self.previous_job = self.job
            self.job = sample.job
        if sample.job:
            self.anonymous_work = False
        return changed

    def restart_rates(self) -> None:
        """A new workload: the typical work rate per stage re-acquires from the new job's first bins
        (rather than after most bins left the old band, from a fast level still weighted by the old
        job), so GPU bins at the new job's usual rate count again within minutes."""
        self.rates.restart()
        for level in self.work_rate:
            level.forget_fast()

    def rebase_work_rates(self) -> None:
        """A restart of the same kind of job: its own typical rates become the reference, so "the
        work rate moved" means moved within this run (not "runs 8 % faster than the last one")."""
        for slot, level in enumerate(self.work_rate):
            typical = self.typical_rate(slot) if self.rates.settled(slot) else math.nan
            level.set_levels(typical, typical)

    def typical_rate(self, slot: int) -> float:
        """The work rate this stage's bins usually run at (NaN until seen)."""
        value = self.rates.value(slot)
        return math.nan if value is None else value

    def work_rate_moved_pct(self) -> float:
        """Relative change of the work rate against its reference, in %, in the stage that carries
        most of the time and reports a work rate (NaN if none does)."""
        order = np.argsort(-self.mix.long_run)
        for slot in order:
            level = self.work_rate[int(slot)]
            ref, moved = level.ref, level.moved
            if level.n < self.warm_bins or ref is None or moved is None or abs(ref) < 1e-9:
                continue
            return 100.0 * moved / abs(ref)
        return math.nan

    def resync(self) -> None:
        """Adopt the current levels as the new reference (after a workload change or an accept)."""
        for level in (*self.levels.values(), *self.work_rate):
            level.adopt()
        self.mix.adopt()

    def state(self) -> dict[str, object]:
        return {
            "levels": {name: level.state() for name, level in self.levels.items()},
            "work_rate": [level.state() for level in self.work_rate],
            "rates": self.rates.state(),
            "mix": self.mix.state(),
            "rated": self.rated,
            "job": self.job[:200],
            "workload_ts": finite_or_none(self.workload_ts),
            "idle_bins": self.idle_bins,
            "anonymous_work": self.anonymous_work,
        }

    def restore(self, data: dict[str, object]) -> None:
        levels = data.get("levels")
        rates = data.get("work_rate")
        if not isinstance(levels, dict) or not isinstance(rates, list) or len(rates) != len(STAGE_SLOTS):
            raise ValueError("drift context: levels/work_rate missing or of the wrong size")
        for name, level in self.levels.items():
            level.load(levels.get(name))  # type: ignore[arg-type]
        for level, packed in zip(self.work_rate, rates, strict=True):
            level.load(packed)
        for key, part in (("rates", self.rates), ("mix", self.mix)):
            value = data.get(key)
            if not isinstance(value, dict):
                raise ValueError(f"drift context: {key} missing")
            part.load(value)
        rated = data.get("rated")
        self.rated = rated if isinstance(rated, bool) else self.rates.any_positive()
        self.job = str(data.get("job") or "")
        last = data.get("workload_ts")
        self.workload_ts = number_or_nan(last)
        idle = data.get("idle_bins")
        self.idle_bins = idle if isinstance(idle, int) and idle >= 0 else 0
        self.anonymous_work = data.get("anonymous_work") is True
