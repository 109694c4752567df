"""GPU energy counters that reset are a known change point for the GPU channel (``CounterResetPoint``,
part of the change-point judge): the GPU stack restarted (a driver update or reload, a reboot).

Why: driver updates happen in maintenance windows, right around job restarts, exactly when the
GPU channel re-centres on the new job and would absorb a power step at the reload as "the new
job's profile". So a reload during a workload re-learn ends the re-centring and pins each stage's
level to what the GPU drew before the reload: the new job's own level for a stage it already ran
(≥ ``tuning.RESET_GROUP_S``), else the previous job's level if the new job looks like the same kind
(work rate within ``PINNED_RATE_FRAC``); a different kind of job stays a workload re-learn (the
reload named in its evidence). While the reload is judged the GPU baseline must not re-learn fast
(``blocks_relearn``), and a GPU onset is a ``gpu_hardware`` shift "since the GPU driver reloaded".
Without a job change nothing special is needed, but an onset within ``tuning.RESET_NAMED_S`` names
the reload too.
"""

from __future__ import annotations

import math
import time

import numpy as np

from agent.engine.components import ComponentSample
from agent.engine.drift import tuning as T
from agent.engine.drift.attribution import Attribution
from agent.engine.drift.channel import GRACE, ResidualChannel
from agent.engine.drift.context import STAGE_SLOTS, SignalContext, stage_slot
from agent.engine.drift.estimators import fields_state, load_fields

# Thresholds: tuning.py (RESET_*, PINNED_RATE_FRAC, STALL_FRAC, DECIDE_WITHIN_S, RATE_FIRST_BINS).

IDLE, DECIDING, JUDGING = 0, 1, 2


class CounterResetPoint:
    """Turns per-bin GPU counter resets into a change point for the GPU channel; ``update`` per bin."""

    def __init__(self, bin_s: float = 60.0) -> None:
        n = len(STAGE_SLOTS)
        # a stage the new job ran this long before the reset has its own level (10 min of bins)
        self.own_bins = T.whole_bins(T.RESET_GROUP_S, bin_s)
        self.phase = IDLE
        self.reload_ts = math.nan  # last reload (first reset bin of it)
        self.counters = 0.0  # counters that went backwards in that reload
        self.job_change_ts = math.nan
        self.pinned_from = ""  # "own" | "previous" | "" — what the pinned levels came from
        self.different_kind = False  # the reload fell in a job change to a different kind of job
        self.prev_level = np.full(n, math.nan)  # previous job's GPU level per stage slot
        self.prev_rate = np.full(n, math.nan)  # … and its typical work rate
        self.prev_noise = np.full(n, math.nan)  # … and the channel's bin noise per stage (a new
        # job's first bins re-learn it from transients; pinned stages get the settled value back)
        self.rate_sum = np.zeros(n)  # the new job's work rate per stage slot, since the job change,
        self.rate_n = np.zeros(n)  # from bins near its highest rate (stalls only cut a bin's rate)
        self.rate_max = np.zeros(n)
        self.own_level = np.full(n, math.nan)  # new job's level per slot just before the reload
        self.kind_slot = -1.0  # the old job's main stage with a work rate: where kinds are compared

    # ------------------------------------------------------------------------------ reading
    def recent(self, ts: float, within_s: float = T.RESET_NAMED_S) -> bool:
        """A reload happened within ``within_s`` before ``ts``."""
        return math.isfinite(self.reload_ts) and 0.0 <= ts - self.reload_ts <= within_s

    @property
    def blocks_relearn(self) -> bool:
        """The GPU baseline must not re-learn fast now: a step at the reload is being judged."""
        return self.phase in (DECIDING, JUDGING)

    def evidence(self, ts: float, within_s: float = T.RESET_NAMED_S) -> list[dict[str, object]]:
        """The reload as an evidence item (empty unless it happened within ``within_s`` before)."""
        if not self.recent(ts, within_s):
            return []
        return [{"signal": "gpu_counter_resets", "counters": int(self.counters),
                 "since": round(self.reload_ts, 1), "role": "context",
                 "meaning": "GPU energy counters went back to zero: the GPU driver reloaded"}]

    def revise(self, name: str, verdict: Attribution, deviation: float, ts: float) -> Attribution:
        """Name the reload in a ``gpu_hardware`` verdict; a GPU shift judged against a pinned level
        is ``gpu_hardware`` even while the job change is recent (that is what pinning is for)."""
        if not self.recent(ts):
            return verdict
        pinned = self.phase == JUDGING and name == "gpu"
        if verdict.cause != "gpu_hardware" and not (pinned and verdict.cause == "workload"):
            return verdict
        more = "more" if deviation >= 0 else "less"
        when = _clock(self.reload_ts)
        ago = (ts - self.reload_ts) / 3600.0
        text = (f"GPUs draw {abs(deviation):.1f} % {more} power for the same work rate and stage since "
                f"the GPU driver reloaded at {when} ({ago:.1f} h ago; {int(self.counters)} energy "
                "counters reset)")
        if pinned and self.pinned_from == "own":
            text += ", compared with the new job's own level just before the reload"
        elif pinned and self.pinned_from == "previous":
            text += ", compared with the previous job of the same kind"
        return Attribution("gpu_hardware", text + ": check the driver/firmware version installed then.")

    # ------------------------------------------------------------------------------ updating
    def on_workload_start(self, ts: float, channel: ResidualChannel, ctx: SignalContext) -> None:
        """A new workload is about to start re-learning: remember the old job's per-stage level and
        work rate (call before the channel's grace wipes its counts)."""
        if channel.mode != GRACE:  # inside a re-learn the levels are the half-learned new job's
            self.prev_noise[:] = channel.levels.scales()
            for slot in range(len(STAGE_SLOTS)):
                ready = channel.slot_ready(slot)
                self.prev_level[slot] = channel.location(slot) if ready else math.nan
                self.prev_rate[slot] = ctx.typical_rate(slot) if ready else math.nan
            rated = np.isfinite(self.prev_rate) & (np.nan_to_num(self.prev_rate) > 0)
            share = np.where(rated, ctx.mix.long_run, -1.0)
            self.kind_slot = float(np.argmax(share)) if rated.any() else -1.0
        self.rate_sum[:] = self.rate_n[:] = self.rate_max[:] = 0.0
        self.job_change_ts = ts
        self.different_kind = False
        if self.recent(ts, T.RESET_GROUP_S):
            self.phase = DECIDING  # the reload came just before the job change: judge it with it
            self.own_level[:] = math.nan
            self.pinned_from = ""

    def update(self, sample: ComponentSample, channel: ResidualChannel, in_workload: bool) -> None:
        """Absorb one bin (before the channels see its residuals)."""
        ts = float(sample.ts)
        slot = stage_slot(sample.stage)
        rate = float(sample.work_rate)
        if sample.stage and math.isfinite(rate) and rate > 0:
            if rate > self.rate_max[slot] / T.STALL_FRAC:  # the earlier bins were stall-shortened
                self.rate_sum[slot] = self.rate_n[slot] = 0.0
            self.rate_max[slot] = max(self.rate_max[slot], rate)
            if rate >= T.STALL_FRAC * self.rate_max[slot]:
                self.rate_sum[slot] += rate
                self.rate_n[slot] += 1.0
        if sample.gpu_counter_resets > 0:
            self._on_reset(ts, int(sample.gpu_counter_resets), channel, in_workload)
        if self.phase == DECIDING:
            self._decide(ts, channel, in_workload)
        elif self.phase == JUDGING and ts - self.reload_ts > T.RESET_JUDGE_S:
            self.phase = IDLE

    def _on_reset(self, ts: float, n: int, channel: ResidualChannel, in_workload: bool) -> None:
        if self.recent(ts, T.RESET_GROUP_S):
            self.counters += n  # the rest of the same reload
            return
        self.reload_ts = ts
        self.counters = float(n)
        self.pinned_from = ""
        self.different_kind = False
        if not (in_workload and channel.mode == GRACE):
            self.phase = IDLE  # no re-learn under way: the channel judges against its usual level
            return
        # The new job's own level per stage, learned since the job change, as it is before this bin.
        for s in range(len(STAGE_SLOTS)):
            own = channel.levels.count(s) >= self.own_bins
            self.own_level[s] = channel.location(s) if own else math.nan
        self.phase = DECIDING

    def _decide(self, ts: float, channel: ResidualChannel, in_workload: bool) -> None:
        """Pin the levels once they are known; a different kind of job stays a workload re-learn."""
        if not (in_workload and channel.mode == GRACE) or ts - self.reload_ts > T.DECIDE_WITHIN_S:
            self.phase = IDLE  # the re-learn ended (or nothing comparable came): nothing to pin
            return
        levels = {s: float(level) for s, level in enumerate(self.own_level) if math.isfinite(level)}
        same, known = self._same_kind()
        if levels:
            self.pinned_from = "own"  # judged within the new job: its kind does not matter
        elif not known:
            return  # wait for the new job's work rate to show what kind of job it is
        elif not same:
            self.different_kind = True  # a different kind of job: its profile is re-learned
            self.phase = IDLE
            return
        else:
            self.pinned_from = "previous"
        if same:
            levels |= {s: float(self.prev_level[s]) for s in range(len(STAGE_SLOTS))
                       if s not in levels and self._comparable(s)}
        channel.pin(levels, self.prev_noise)
        self.phase = JUDGING

    def _comparable(self, s: int) -> bool:
        """The previous job's level can stand for this stage: known, with a work rate, and the new
        job's rate here seen and within ``PINNED_RATE_FRAC`` of the old one."""
        rate = float(self.prev_rate[s])
        known = math.isfinite(self.prev_level[s]) and math.isfinite(rate) and rate > 0
        return known and self.rate_n[s] >= T.RATE_FIRST_BINS and self._rate_close(s)

    def _rate_close(self, s: int) -> bool:
        new = self.rate_sum[s] / self.rate_n[s]
        return bool(abs(new / self.prev_rate[s] - 1.0) <= T.PINNED_RATE_FRAC)

    def _same_kind(self) -> tuple[bool, bool]:
        """(same kind, known), judged in the old job's main stage with a work rate (other stages'
        rates say little: data loading and checkpoints run at whatever rate the storage allows)."""
        s = int(self.kind_slot)
        if s < 0 or not math.isfinite(self.prev_rate[s]) or self.rate_n[s] < T.RATE_FIRST_BINS:
            return False, False
        return self._rate_close(s), True

    # ------------------------------------------------------------------------------ state
    def state(self) -> dict[str, object]:
        return fields_state(self, _FIELDS)

    def restore(self, data: dict[str, object]) -> None:
        load_fields(self, data, _FIELDS, "drift counter resets")
        if self.phase not in (IDLE, DECIDING, JUDGING) or self.pinned_from not in ("", "own", "previous"):
            raise ValueError("drift counter resets: unknown phase or pinned level")


_FIELDS = ("phase", "reload_ts", "counters", "job_change_ts", "pinned_from", "different_kind", "prev_level",
           "prev_rate", "prev_noise", "rate_sum", "rate_n", "rate_max", "own_level", "kind_slot")


def _clock(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))

