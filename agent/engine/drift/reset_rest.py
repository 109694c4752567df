"""GPU power at rest before and after a driver reload, judged together (``RestAfterReset``, part of
the change-point judge).

Why: a driver update happens in a maintenance idle and the next job often starts minutes later. On
a rack whose jobs change every hour or two, every new job re-learns the per-stage GPU level, so the
4–6 % a bad driver adds is learned as each job's profile, and only the GPUs' power at rest, which no
job sets, still shows it: the ``gpu_idle`` channel found such a step 3 h after the reload
(development churn seed 18), one idle gap at a time. But the reload is *measured* (the energy
counters reset), as a setpoint move is: when rest power after the reload differs from its level
before by at least the channel's minimum effect and ``tuning.INPUT_Z`` standard errors of its own
noise, the cause is known and no false-alarm margin is needed. A saving is not a fault (the caller
adopts it); a reload whose rest power shows nothing within ``tuning.RESET_JUDGE_S`` is forgotten.
"""

from __future__ import annotations

import math

from agent.engine.drift import tuning as T
from agent.engine.drift.channel import NORMAL, SUSPECTED, WARMING, ResidualChannel
from agent.engine.drift.estimators import fields_state, load_fields
from agent.engine.drift.input_step import MeasuredShift, clear_step


class RestAfterReset:
    """Compares ``gpu_idle`` residuals after a counter reset with the channel's level before it."""

    def __init__(self, bin_s: float = 60.0) -> None:
        # In bins (not state): the evidence needed, and one independent sample per block of bins.
        self._evidence_bins = T.bins(T.MIN_EVIDENCE_S, bin_s)
        self._bins_per_sample = T.bins(T.INPUT_SAMPLE_S, bin_s)
        self.reload_ts = math.nan  # the reload being judged (NaN: none)
        self.before_pct = math.nan  # the channel's rest level just before it
        self.sigma_pct = math.nan  # a rest bin's noise then, inflated for its correlation
        self.sum_after = 0.0
        self.n_after = 0.0

    def on_reset(self, ts: float, channel: ResidualChannel) -> None:
        """A reload (its first counter reset): snapshot the rest level it is judged against (only a
        learned level, not one being held or re-centred, is worth comparing with)."""
        if math.isfinite(self.reload_ts) and ts - self.reload_ts <= T.RESET_GROUP_S:
            return  # the rest of the same reload
        self.reload_ts = math.nan
        if not channel.slot_ready(0) or channel.mode not in _JUDGING_MODES:
            return
        scale = channel.levels.scale(0)
        block = channel.block_noise
        self.reload_ts = ts
        self.before_pct = channel.location(0)
        bin_sigma = max(scale if scale is not None else 0.0, channel.params.min_bin_scale)
        self.sigma_pct = bin_sigma * max(block, 1.0)
        self.sum_after = self.n_after = 0.0

    def explanation(self, shift: MeasuredShift, counters: int) -> str:
        """An onset's text for a step of rest power at the reload."""
        more = "more" if shift.deviation_pct >= 0 else "less"
        return (f"GPUs draw {abs(shift.deviation_pct):.1f} % {more} power at rest since the GPU driver "
                f"reloaded ({counters} energy counters reset): check the driver/firmware version "
                "installed then.")

    def update(self, residual_pct: float, ts: float, min_effect: float) -> MeasuredShift | None:
        """One bin's rest residual (NaN unless the GPUs were at rest); a shift once it is clear."""
        if not math.isfinite(self.reload_ts):
            return None
        if ts - self.reload_ts > T.RESET_JUDGE_S:
            self.reload_ts = math.nan  # nothing clear showed: the reload changed nothing at rest
            return None
        if not math.isfinite(residual_pct):
            return None
        self.sum_after += residual_pct
        self.n_after += 1.0
        if self.n_after < self._evidence_bins:
            return None
        change = self.sum_after / self.n_after - self.before_pct
        if not clear_step(change, self.sigma_pct, self.n_after, self._bins_per_sample, min_effect):
            return None
        since = self.reload_ts
        self.reload_ts = math.nan
        return MeasuredShift(change, self.before_pct, since)

    def state(self) -> dict[str, object]:
        return fields_state(self, _FIELDS)

    def restore(self, data: dict[str, object]) -> None:
        load_fields(self, data, _FIELDS, "drift rest after reset")


_FIELDS = ("reload_ts", "before_pct", "sigma_pct", "sum_after", "n_after")
# A level that is the usual one: learned (``slot_ready``), not held or re-centring. The channel's own
# warm-up is for the block noise its CUSUM needs; the level and bin noise are known before that.
_JUDGING_MODES = frozenset({WARMING, NORMAL, SUSPECTED})
