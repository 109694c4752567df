"""A measured control input that stepped (the cooling unit's setpoint) and the residual step it
caused, judged together (``InputStep``, part of the change-point judge).

Why: half a degree lower supply setpoint costs only ~1–3 % more unit power, below the cooling
channel's minimum effect (high, since efficiency wanders with the weather). But the setpoint is
*measured*: when it steps or ramps and the residual moves the matching way (lower setpoint → more
power) by ≥ ``tuning.INPUT_MIN_EFFECT_PCT`` and beyond its noise, the cause is known, so a smaller
effect suffices. The level before is frozen when the setpoint leaves its resting value, and the
cooling model does not learn while a move is ``pending``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agent.engine.drift import tuning as T
from agent.engine.drift.estimators import MAD_TO_SIGMA, ew_alpha, fields_state, load_fields


def clear_step(change: float, sigma: float, n_bins: float, bins_per_sample: float, min_effect: float) -> bool:
    """A step measured at a known change point is clear: at least ``min_effect`` and ``INPUT_Z``
    standard errors of the mean of its ``n_bins`` bins of noise ``sigma``. Bins are correlated over
    minutes: one independent sample per ``bins_per_sample``. (A measured cause needs no false-alarm
    margin.)"""
    z = change / (sigma / math.sqrt(max(n_bins / bins_per_sample, 1.0)))
    return abs(change) >= min_effect and abs(z) >= T.INPUT_Z


@dataclass(frozen=True)
class MeasuredShift:
    """A confirmed step at a measured change point (a setpoint move, a driver reload): the residual's
    change since it began, its level before, and when it began."""

    deviation_pct: float
    before_pct: float
    since_ts: float


class InputStep:
    """Watches ``setpoint_c`` and the cooling-unit residual; ``update`` per bin."""

    def __init__(self, bin_s: float = 60.0) -> None:
        # In bins (not state): the resting level's half-life, the evidence needed after the move,
        # the longest wait, and one independent sample per block of correlated bins.
        self._rest_halflife = T.bins(T.STAGE_WARM_S, bin_s)
        self._after_bins = T.bins(T.INPUT_AFTER_S, bin_s)
        self._max_bins = T.bins(T.INPUT_MAX_PENDING_S, bin_s)
        self._bins_per_sample = T.bins(T.INPUT_SAMPLE_S, bin_s)
        self.base_c = math.nan  # resting setpoint
        self.before_pct = math.nan  # residual level before the move
        self.noise_pct = math.nan  # EW mean |bin − level| of the residual (×1.25 ≈ σ)
        self.n_base = 0.0
        self.start_ts = math.nan  # when the setpoint started to leave base_c
        self.sum_after = 0.0
        self.n_after = 0.0
        self.n_pending = 0.0  # bins since the setpoint last stepped further away from base_c
        self.farthest_c = 0.0  # |setpoint − base_c| at its farthest so far in this move
        self.moved = False  # reached SETPOINT_MOVED_C
        self.done = False  # reported; wait for the setpoint to rest again
        self.last_c = math.nan  # the latest setpoint reading

    @property
    def pending(self) -> bool:
        """A setpoint move is being judged: the cooling model must not learn now."""
        return math.isfinite(self.start_ts) and not self.done

    @property
    def moving(self) -> bool:
        """The setpoint has left its resting value by a reading-visible step and has not come to
        rest again: any cooling shift now is judged with it (the move is its named cause)."""
        return math.isfinite(self.start_ts) and self.moved

    def explanation(self, deviation_pct: float, ts: float = math.nan) -> str:
        """An onset's text for a cooling shift during the move (with ``ts``: how long ago it began)."""
        more = "more" if deviation_pct >= 0 else "less"
        ago = f" {(ts - self.start_ts) / 3600.0:.1f} h ago" if math.isfinite(ts) else ""
        return (f"Cooling uses {abs(deviation_pct):.1f} % {more} power for the same heat since the "
                f"cooling-unit setpoint moved from {self.base_c:.1f} °C to {self.last_c:.1f} °C{ago}.")

    def move_evidence(self) -> dict[str, object]:
        """The move as an onset's evidence item (call when ``moving``)."""
        return {"signal": "setpoint_c", "from": round(self.base_c, 2), "to": round(self.last_c, 2),
                "moved": round(self.last_c - self.base_c, 2), "unit": "°C", "since": round(self.start_ts, 1),
                "role": "context"}

    def update(self, setpoint_c: float, residual_pct: float, ts: float) -> MeasuredShift | None:
        if not math.isfinite(setpoint_c):
            return None
        self.last_c = setpoint_c
        if not math.isfinite(self.base_c):
            self.base_c = setpoint_c
            return None
        away = setpoint_c - self.base_c
        if not math.isfinite(self.start_ts):
            if abs(away) < T.INPUT_START_C:
                self._rest(setpoint_c, residual_pct)
                return None
            self.start_ts = ts
            self.sum_after = self.n_after = self.n_pending = self.farthest_c = 0.0
            self.moved = False
        if self.done or abs(away) < T.INPUT_START_C:
            if abs(away) < T.INPUT_START_C or (self.done and self.n_pending > self._max_bins):
                self._restart(setpoint_c)
            self.n_pending += 1.0
            return None
        self.n_pending += 1.0
        if abs(away) >= self.farthest_c + T.INPUT_START_C:  # a ramp still going: its wait restarts
            self.farthest_c = abs(away)
            self.n_pending = 0.0
        if self.n_pending > self._max_bins:
            self.done = True  # the move showed no effect worth reporting: it is the new normal
            return None
        if abs(away) >= T.SETPOINT_MOVED_C:
            self.moved = True
        if not self.moved or not math.isfinite(residual_pct) or not math.isfinite(self.before_pct):
            return None
        self.sum_after += residual_pct
        self.n_after += 1.0
        if self.n_after < self._after_bins:
            return None
        change = self.sum_after / self.n_after - self.before_pct
        floor = T.MIN_BIN_NOISE["it"]  # (a unit's power reads as finely as a PDU's)
        sigma = max(MAD_TO_SIGMA * self.noise_pct, floor) if math.isfinite(self.noise_pct) else 1.0
        expected_sign = -1.0 if away < 0 else 1.0  # lower setpoint → more power
        clear = clear_step(change, sigma, self.n_after, self._bins_per_sample, T.INPUT_MIN_EFFECT_PCT)
        if change * expected_sign >= 0 or not clear:
            return None
        self.done = True
        return MeasuredShift(change, self.before_pct, self.start_ts)

    def _rest(self, setpoint_c: float, residual_pct: float) -> None:
        alpha = ew_alpha(self.n_base, self._rest_halflife)
        self.base_c += alpha * (setpoint_c - self.base_c)
        if math.isfinite(residual_pct):
            if not math.isfinite(self.before_pct):
                self.before_pct = residual_pct
            else:
                err = abs(residual_pct - self.before_pct)
                self.noise_pct = err if not math.isfinite(self.noise_pct) else (
                    self.noise_pct + alpha * (err - self.noise_pct))
                self.before_pct += alpha * (residual_pct - self.before_pct)
            self.n_base += 1.0

    def _restart(self, setpoint_c: float) -> None:
        """The setpoint rests (again): it is the new base; the residual level re-learns."""
        self.base_c = setpoint_c
        self.start_ts = math.nan
        self.done = False
        self.moved = False
        self.before_pct = math.nan
        self.n_base = 0.0

    def state(self) -> dict[str, object]:
        return fields_state(self, _FIELDS)

    def restore(self, data: dict[str, object]) -> None:
        load_fields(self, data, _FIELDS, "drift input step")


_FIELDS = ("base_c", "before_pct", "noise_pct", "n_base", "start_ts", "sum_after", "n_after", "n_pending",
           "farthest_c", "moved", "done", "last_c")
