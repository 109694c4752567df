"""One residual stream's sustained-deviation detector (robust location/scale + two-sided CUSUM).

Why this shape: a component residual (measured − expected, in % of expected, or °C for the inlet
spread) is noisy, autocorrelated over minutes and slightly biased per stage. So each bin's
residual is first centred on a slow, robust, per-stage location; bins are averaged into blocks of
a few minutes; each block mean is standardised by a robust block scale inflated for the blocks'
own autocorrelation; a two-sided CUSUM on those z-scores confirms a sustained shift. While a shift
is suspected or active the location and scale stop learning, so the detector never adapts to the
fault it is watching. The state is a fixed set of floats plus one small array per stage slot.

This module knows nothing about causes or events: ``DriftMonitor`` maps transitions to events.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Modes of a channel.
WARMING, NORMAL, SUSPECTED, ACTIVE, GRACE = 0, 1, 2, 3, 4
MODE_NAMES = ("warming", "normal", "suspected", "active", "grace")


@dataclass(frozen=True)
class ChannelParams:
    """Tuning of one channel; defaults suit residuals in % of a power."""

    n_slots: int
    threshold_h: float  # CUSUM decision threshold (from the false-alarm target)
    k: float = 1.0  # CUSUM reference value in sigma (detects shifts of ≳ 2k sigma fastest)
    z_clip: float = 6.0  # one block can add at most z_clip − k to a CUSUM
    bin_z_clip: float = 6.0  # one bin's standardised deviation is clipped to this
    block_bins: int = 3  # bins averaged per block
    warm_blocks: int = 36  # blocks of learning before detection starts
    slot_warm_bins: int = 60  # bins a stage slot needs before its residuals count
    loc_halflife_bins: float = 1440.0  # slow per-stage location (24 h at 60 s bins)
    bin_scale_halflife_bins: float = 2880.0  # per-stage bin noise (48 h at 60 s bins)
    scale_halflife_blocks: float = 960.0  # block z scale (48 h at 3 min blocks)
    min_bin_scale: float = 0.15  # floor on a stage's bin noise (unit of the residual)
    min_block_scale: float = 0.2  # floor on the block z scale
    min_effect: float = 1.0  # a confirmed shift must be at least this large (unit of the residual)
    min_evidence_s: float = 900.0  # … and its evidence must span at least this long (no blips)
    suspect_frac: float = 0.4  # CUSUM ≥ this × h → suspected (learning held)
    calm_frac: float = 0.15  # noise scales learn only while the CUSUM is below this × h
    release_frac: float = 0.1  # suspected and CUSUM < this × h → back to normal
    max_suspect_s: float = 3 * 3600.0  # suspicion that never confirms is dropped after this
    clear_frac: float = 0.6  # a reverse CUSUM past this × h, testing "back below half the onset
    # deviation" against "still at the onset deviation", clears an active shift
    grace_loc_halflife_bins: float = 30.0  # fast re-centring while in grace
    trend_halflife_bins: float = 0.0  # > 0: the location also follows a local trend (Holt), for
    # residuals that wander with unmeasured slow factors (weather on a cooling unit's efficiency)
    frozen_trend_halflife_bins: float = 360.0  # while held, the extrapolated trend fades out
    reference_delay_bins: int = 0  # > 0 (trend mode): judge each bin against the level as it was
    # this many bins ago, extrapolated, so a fast-following level cannot absorb a step unseen


@dataclass(frozen=True)
class Transition:
    """What a completed block changed: ``kind`` is suspect | release | onset | cleared | ready."""

    kind: str
    ts: float
    deviation: float  # estimated shift (unit of the residual), signed
    z: float  # standardised size of the shift
    since_ts: float  # when the evidence started accumulating


_SCALARS = (
    "mode", "n_blocks", "scale", "scale_n", "acf_num", "acf_den", "z_prev",
    "block_sum", "block_z", "block_n", "s_up", "s_dn", "since_up", "since_dn",
    "sum_up", "zsum_up", "n_up", "sum_dn", "zsum_dn", "n_dn", "suspect_ts", "onset_ts", "onset_dev",
    "onset_z", "dev_fast", "clear_count", "grace_until", "last_since", "last_ts", "trend", "ring_i",
)  # fmt: skip


class ResidualChannel:
    """Sustained-shift detector for one residual; ``add(...)`` per bin, read ``mode``/``held``."""

    def __init__(self, name: str, params: ChannelParams) -> None:
        self.name = name
        self.params = params
        self._reset()

    def _reset(self) -> None:
        p = self.params
        self._loc = np.zeros(p.n_slots)
        self._loc_n = np.zeros(p.n_slots)
        self._bin_scale = np.full(p.n_slots, math.nan)
        self.mode = WARMING
        self.n_blocks = 0.0
        self.scale = math.nan
        self.scale_n = 0.0
        self.acf_num = 0.0
        self.acf_den = 0.0
        self.z_prev = 0.0
        self.block_sum = 0.0
        self.block_z = 0.0
        self.block_n = 0.0
        self.s_up = self.s_dn = 0.0
        self.since_up = self.since_dn = math.nan
        self.sum_up = self.zsum_up = self.n_up = self.sum_dn = self.zsum_dn = self.n_dn = 0.0
        self.suspect_ts = math.nan
        self.onset_ts = math.nan
        self.onset_dev = 0.0
        self.onset_z = 0.0
        self.dev_fast = 0.0
        self.clear_count = 0.0
        self.grace_until = math.nan
        self.last_since = math.nan
        self.last_ts = math.nan
        self.trend = 0.0  # per bin, unit of the residual (Holt trend; 0 unless enabled)
        self._ring = np.full(max(1, self.params.reference_delay_bins), math.nan)  # past levels
        self.ring_i = 0.0

    # ----------------------------------------------------------------------------- reading
    @property
    def held(self) -> bool:
        """True while the component must not learn (a shift is suspected or confirmed)."""
        return self.mode in (SUSPECTED, ACTIVE)

    @property
    def learning(self) -> bool:
        return self.mode in (WARMING, NORMAL, GRACE)

    @property
    def cusum(self) -> float:
        return max(self.s_up, self.s_dn)

    @property
    def vif(self) -> float:
        """Variance inflation of a sum of correlated block z-scores: (1 + ρ) / (1 − ρ)."""
        rho = self.acf_num / self.acf_den if self.acf_den > 0 else 0.0
        rho = min(max(rho, 0.0), 0.6)
        return (1.0 + rho) / (1.0 - rho)

    def recent_deviation(self) -> float:
        """Mean block deviation since the larger CUSUM side last left zero (signed; 0 when calm)."""
        if self.s_up == 0.0 and self.s_dn == 0.0:
            return 0.0
        if self.s_up >= self.s_dn:
            return self.sum_up / self.n_up if self.n_up else 0.0
        return -(self.sum_dn / self.n_dn) if self.n_dn else 0.0

    @property
    def active_deviation(self) -> float:
        """The confirmed shift as it is now (a ramp keeps growing after its onset); 0 unless active."""
        return self.dev_fast if self.mode == ACTIVE else 0.0

    def location(self, slot: int) -> float:
        return float(self._loc[slot])

    def slot_ready(self, slot: int) -> bool:
        return bool(self._loc_n[slot] >= self.params.slot_warm_bins)

    # ----------------------------------------------------------------------------- updating
    def add(self, residual: float, slot: int, ts: float) -> Transition | None:
        """Feed one bin's residual; returns a transition when the completed block changed mode."""
        if not math.isfinite(residual):
            return None
        p = self.params
        self.last_ts = ts
        n = float(self._loc_n[slot])
        loc = float(self._loc[slot])
        bin_scale = float(self._bin_scale[slot])
        if self.mode == GRACE and math.isfinite(self.grace_until) and ts >= self.grace_until:
            self.mode = NORMAL if self.n_blocks >= p.warm_blocks else WARMING
        if p.trend_halflife_bins > 0:
            loc += self.trend  # the level this bin is predicted at
        if self.learning:
            self._learn_location(residual, slot, n, loc, bin_scale)
        elif p.trend_halflife_bins > 0:  # held: extrapolate the level with a fading trend
            self._loc[slot] = loc
            self.trend *= 0.5 ** (1.0 / p.frozen_trend_halflife_bins)
        reference = loc
        if p.reference_delay_bins > 0 and p.trend_halflife_bins > 0:
            i = int(self.ring_i) % p.reference_delay_bins
            past = float(self._ring[i])
            if math.isfinite(past) and self.mode != GRACE:
                reference = past + self.trend * p.reference_delay_bins
            self._ring[i] = float(self._loc[slot])
            self.ring_i = float((i + 1) % p.reference_delay_bins)
        if n < p.slot_warm_bins or not math.isfinite(bin_scale):
            return None  # this stage's location is not known yet: its residual says nothing
        dev = residual - reference
        bin_z = dev / max(bin_scale, p.min_bin_scale)
        self.block_sum += dev
        self.block_z += min(max(bin_z, -p.bin_z_clip), p.bin_z_clip)
        self.block_n += 1.0
        if self.block_n < p.block_bins:
            return None
        mean_dev, mean_z = self.block_sum / self.block_n, self.block_z / self.block_n
        self.block_sum = self.block_z = self.block_n = 0.0
        return self._block(mean_dev, mean_z, ts)

    def _learn_location(self, residual: float, slot: int, n: float, loc: float, bin_scale: float) -> None:
        """Per-stage robust level and noise of the residual (Huber-clipped EW mean and mean |dev|)."""
        p = self.params
        halflife = p.grace_loc_halflife_bins if self.mode == GRACE else p.loc_halflife_bins
        alpha = max(1.0 / (n + 1.0), math.log(2.0) / halflife)
        err = residual - loc
        if math.isfinite(bin_scale) and n >= p.slot_warm_bins:
            limit = 3.0 * max(bin_scale, p.min_bin_scale)
            err = min(max(err, -limit), limit)  # Huber step: one glitch moves it little
        self._loc[slot] = loc + alpha * err
        if p.trend_halflife_bins > 0 and n >= p.slot_warm_bins:
            beta = math.log(2.0) / p.trend_halflife_bins
            self.trend += beta * (alpha * err)
        if n > 0 and (self.mode != NORMAL or self.cusum < p.calm_frac * p.threshold_h):
            abs_err = abs(residual - loc)
            if not math.isfinite(bin_scale):
                self._bin_scale[slot] = abs_err * 1.2533
            else:
                a_s = max(1.0 / (n + 1.0), math.log(2.0) / p.bin_scale_halflife_bins)
                clipped = min(abs_err, 4.0 * max(bin_scale, p.min_bin_scale))
                self._bin_scale[slot] = bin_scale + a_s * (clipped * 1.2533 - bin_scale)
        self._loc_n[slot] = n + 1.0

    def _block(self, dev: float, mean_z: float, ts: float) -> Transition | None:
        p = self.params
        self.n_blocks += 1.0
        if self.mode == GRACE:
            return None
        if self.learning and (self.mode != NORMAL or self.cusum < p.calm_frac * p.threshold_h):
            self._learn_scale(mean_z)  # noise is learned from calm data only, never from a shift
        if self.mode == WARMING:
            if self.n_blocks >= p.warm_blocks:
                self.mode = NORMAL
                return Transition("ready", ts, 0.0, 0.0, ts)
            return None
        z = mean_z / (max(self.scale, p.min_block_scale) * math.sqrt(self.vif))
        zc = min(max(z, -p.z_clip), p.z_clip)
        self._cusum(dev, zc, ts)
        if self.mode == ACTIVE:
            return self._active_block(dev, zc, ts)
        self.dev_fast += 0.3 * (dev - self.dev_fast)  # the shift as it is now (a ramp keeps growing)
        return self._watch_block(ts)

    def _learn_scale(self, mean_z: float) -> None:
        """Robust scale of block-mean z-scores and their lag-1 autocorrelation."""
        p = self.params
        alpha = max(1.0 / (self.scale_n + 1.0), math.log(2.0) / p.scale_halflife_blocks)
        if math.isfinite(self.scale) and self.scale_n >= 8:
            target = min(abs(mean_z), 4.0 * max(self.scale, p.min_block_scale)) * 1.2533
        else:
            target = abs(mean_z) * 1.2533
        self.scale = target if not math.isfinite(self.scale) else self.scale + alpha * (target - self.scale)
        self.scale_n += 1.0
        z = mean_z / max(self.scale, p.min_block_scale)
        z = min(max(z, -p.z_clip), p.z_clip)
        self.acf_num += alpha * (z * self.z_prev - self.acf_num)
        self.acf_den += alpha * (z * z - self.acf_den)
        self.z_prev = z

    def _cusum(self, dev: float, zc: float, ts: float) -> None:
        k = self.params.k
        up = max(0.0, self.s_up + zc - k)
        dn = max(0.0, self.s_dn - zc - k)
        if up > 0.0:
            if self.s_up == 0.0:
                self.since_up, self.sum_up, self.zsum_up, self.n_up = ts, 0.0, 0.0, 0.0
            self.sum_up += dev
            self.zsum_up += zc
            self.n_up += 1.0
        if dn > 0.0:
            if self.s_dn == 0.0:
                self.since_dn, self.sum_dn, self.zsum_dn, self.n_dn = ts, 0.0, 0.0, 0.0
            self.sum_dn -= dev
            self.zsum_dn -= zc
            self.n_dn += 1.0
        self.s_up, self.s_dn = up, dn

    def recent_z(self) -> float:
        """Mean standardised block deviation since the larger CUSUM side last left zero (signed)."""
        if self.s_up == 0.0 and self.s_dn == 0.0:
            return 0.0
        if self.s_up >= self.s_dn:
            return self.zsum_up / self.n_up if self.n_up else 0.0
        return -(self.zsum_dn / self.n_dn) if self.n_dn else 0.0

    def _watch_block(self, ts: float) -> Transition | None:
        p = self.params
        h = p.threshold_h
        s = self.cusum
        since = self.since_up if self.s_up >= self.s_dn else self.since_dn
        dev = self.recent_deviation()
        if p.trend_halflife_bins <= 0 and dev * self.dev_fast > 0 and abs(self.dev_fast) > abs(dev):
            dev = self.dev_fast  # a ramp: judge its size now, not its average since it began
            # (not for a trend-following level: there a creeping shift is weather until it is fast)
        z = self.recent_z()
        if self.mode == NORMAL and s >= p.suspect_frac * h:
            self.mode = SUSPECTED
            self.suspect_ts = ts
            return Transition("suspect", ts, dev, z, since)
        if self.mode != SUSPECTED:
            return None
        if s >= h and abs(dev) >= p.min_effect and ts - since >= p.min_evidence_s:
            self.mode = ACTIVE
            self.onset_ts = ts
            self.onset_dev = dev
            self.onset_z = z
            self.dev_fast = dev
            self.clear_count = 0.0
            self.last_since = since
            return Transition("onset", ts, dev, z, since)
        if s < p.release_frac * h:
            self.mode = NORMAL
            self.s_up = self.s_dn = 0.0
            return Transition("release", ts, dev, z, since)
        if ts - self.suspect_ts > p.max_suspect_s:
            # Sustained but smaller than min_effect: not worth an alarm, so it becomes the normal
            # (the location re-centres quickly) instead of holding learning forever.
            self.start_grace(ts + p.max_suspect_s / 3.0)
            return Transition("release", ts, dev, z, since)
        return None

    def _active_block(self, dev: float, zc: float, ts: float) -> Transition | None:
        p = self.params
        self.dev_fast += 0.3 * (dev - self.dev_fast)
        sign = 1.0 if self.onset_z >= 0 else -1.0
        # Reverse CUSUM ("clear_count"): evidence that the deviation fell below half its onset size.
        z_back = 0.5 * min(abs(self.onset_z), p.z_clip) - sign * zc
        z_back = min(max(z_back, -p.z_clip), p.z_clip)
        self.clear_count = max(0.0, self.clear_count + z_back - p.k)
        if self.clear_count >= p.clear_frac * p.threshold_h:
            return self.clear(ts, reason="cleared")
        return None

    def force_onset(
        self, ts: float, deviation: float, since_ts: float, level: float, slot: int
    ) -> Transition:
        """Confirm a shift that other evidence established (a measured setpoint move): ACTIVE from
        now, judged against ``level`` (the residual's level before the shift), held as usual."""
        p = self.params
        bin_scale = float(self._bin_scale[slot])
        bin_scale = max(bin_scale if math.isfinite(bin_scale) else p.min_bin_scale, p.min_bin_scale)
        z = deviation / bin_scale / (max(self.scale if math.isfinite(self.scale) else 1.0,
                                         p.min_block_scale) * math.sqrt(self.vif))
        self._loc[slot] = level
        self._ring[:] = level
        self.trend = 0.0
        self.mode = ACTIVE
        self.onset_ts, self.onset_dev, self.onset_z = ts, deviation, z
        self.dev_fast = deviation
        self.clear_count = 0.0
        self.last_since = since_ts
        return Transition("onset", ts, deviation, z, since_ts)

    def clear(self, ts: float, reason: str = "cleared") -> Transition:
        """Leave ACTIVE/SUSPECTED: learning resumes from the current location."""
        dev = self.dev_fast
        since = self.last_since
        self.mode = NORMAL if self.n_blocks >= self.params.warm_blocks else WARMING
        self.s_up = self.s_dn = 0.0
        self.clear_count = 0.0
        return Transition(reason, ts, dev, 0.0, since)

    def start_grace(self, until_ts: float) -> None:
        """Stop detecting and re-centre until ``until_ts`` (accepted new normal, new workload): every
        stage slot re-warms from its next residuals, so stages not seen in the grace period are
        not judged against their old location either."""
        self.mode = GRACE
        self._loc_n[:] = 0.0
        self._ring[:] = math.nan
        self.grace_until = until_ts
        self.s_up = self.s_dn = 0.0
        self.block_sum = self.block_z = self.block_n = 0.0
        self.clear_count = 0.0

    # ----------------------------------------------------------------------------- persistence
    def state(self) -> dict[str, object]:
        """Fixed-size, JSON-safe snapshot."""
        out: dict[str, object] = {name: _num(getattr(self, name)) for name in _SCALARS}
        out["loc"] = [_num(v) for v in self._loc]
        out["loc_n"] = [_num(v) for v in self._loc_n]
        out["bin_scale"] = [_num(v) for v in self._bin_scale]
        out["ring"] = [_num(v) for v in self._ring]
        return out

    def restore(self, data: dict[str, object]) -> None:
        self._reset()
        for name in _SCALARS:
            value = data.get(name)
            if value is not None and not isinstance(value, (int, float)):
                raise ValueError(f"drift channel {self.name!r}: {name} must be a number")
            setattr(self, name, math.nan if value is None else float(value))
        self.mode = int(self.mode) if math.isfinite(self.mode) else WARMING
        for key, target in (("loc", self._loc), ("loc_n", self._loc_n), ("bin_scale", self._bin_scale)):
            values = data.get(key)
            if not isinstance(values, list) or len(values) != self.params.n_slots:
                size = self.params.n_slots
                raise ValueError(f"drift channel {self.name!r}: {key} must be a list of {size}")
            target[:] = [math.nan if v is None else float(v) for v in values]
        ring = data.get("ring")
        if not isinstance(ring, list) or len(ring) != self._ring.size:
            raise ValueError(f"drift channel {self.name!r}: ring must be a list of {self._ring.size}")
        self._ring[:] = [math.nan if v is None else float(v) for v in ring]


def _num(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None
