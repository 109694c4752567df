"""One residual stream's sustained-deviation detector (robust location/scale + two-sided CUSUM).

Why this shape: a residual (% of expected, or °C for the inlet spread) is noisy, autocorrelated
over minutes and biased per stage. So each bin is centred on a slow robust per-stage location,
averaged into blocks of a few minutes, standardised by a robust block scale inflated for the
blocks' autocorrelation, and a two-sided CUSUM confirms a sustained shift. While a shift is
suspected or active, location and scale stop learning, so the detector never adapts to the fault
it watches. No causes or events here: ``DriftMonitor`` maps transitions to events.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from agent.engine.drift import tuning as T
from agent.engine.drift.estimators import (
    LN2,
    CorrelatedScale,
    DelayedReference,
    StageLocation,
    TwoSidedCusum,
    fields_state,
    load_fields,
)

# Modes of a channel.
WARMING, NORMAL, SUSPECTED, ACTIVE, GRACE = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class ChannelParams:
    """Tuning of one channel in the estimators' own counts (bins, blocks): built from the
    seconds and noise units of ``tuning.py`` by ``params_for``. What every channel shares (the
    CUSUM's k, clip and fractions of h, the evidence span) is read from ``tuning.py`` directly."""

    n_slots: int
    threshold_h: float  # CUSUM decision threshold (from the false-alarm target)
    block_bins: int  # bins averaged per block
    warm_blocks: int  # blocks of learning before detection starts
    slot_warm_bins: int  # bins a stage slot needs before its residuals count
    loc_halflife_bins: float  # slow per-stage location
    bin_scale_halflife_bins: float  # per-stage bin noise
    scale_halflife_blocks: float  # block z scale
    min_bin_scale: float  # floor on a stage's bin noise (unit of the residual)
    min_block_scale: float  # floor on the block z scale
    min_effect: float  # a confirmed shift must be at least this large (unit of the residual)
    max_suspect_s: float  # suspicion that never confirms is dropped after this
    grace_loc_halflife_bins: float  # fast re-centring while in grace
    frozen_trend_halflife_bins: float  # while held, the extrapolated trend fades out
    trend_halflife_bins: float = 0.0  # > 0: the location also follows a local trend (Holt), for
    # residuals that wander with unmeasured slow factors (weather on a cooling unit's efficiency)
    reference_delay_bins: int = 0  # > 0 (trend mode): judge each bin against the level as it was
    # this many bins ago, extrapolated, so a fast-following level cannot absorb a step unseen


def params_for(name: str, threshold_h: float, bin_s: float, n_slots: int, drivers_measured: bool = True
               ) -> ChannelParams:
    """``name``'s tuning at drift bins of ``bin_s`` s; cooling without an outdoor temperature
    (``drivers_measured`` False) follows a local trend, judged against its level an hour before."""
    block_bins = T.block_bins(bin_s)
    block_s = block_bins * bin_s
    params = ChannelParams(
        n_slots=n_slots, threshold_h=threshold_h, block_bins=block_bins,
        warm_blocks=max(1, round(T.DETECT_AFTER_S / block_s)),
        slot_warm_bins=T.whole_bins(T.STAGE_WARM_S, bin_s),
        loc_halflife_bins=T.bins(T.LEVEL_HALFLIFE_S, bin_s),
        bin_scale_halflife_bins=T.bins(T.NOISE_HALFLIFE_S, bin_s),
        scale_halflife_blocks=T.NOISE_HALFLIFE_S / block_s,
        min_bin_scale=T.MIN_BIN_NOISE[name], min_block_scale=T.MIN_BLOCK_SCALE,
        min_effect=T.MIN_EFFECT[name], max_suspect_s=T.MAX_SUSPECT_S,
        grace_loc_halflife_bins=T.bins(T.FOLLOW_HALFLIFE_S, bin_s),
        frozen_trend_halflife_bins=T.bins(T.HELD_TREND_HALFLIFE_S, bin_s),
    )
    if name != "cooling":
        return params
    # Both cooling tunings carry the same delay: without a trend the delayed reference is never
    # read, but its ring is sized when the channel is built and restored, and the channel switches
    # tuning with the unit model's inputs (the ring and its saved state must keep one size).
    delay_bins = T.whole_bins(T.BLIND_COOLING_REFERENCE_DELAY_S, bin_s)
    if drivers_measured:
        return replace(params, min_effect=T.WEATHER_COOLING_MIN_EFFECT_PCT,
                       max_suspect_s=T.WEATHER_COOLING_MAX_SUSPECT_S, reference_delay_bins=delay_bins)
    return replace(params, loc_halflife_bins=T.bins(T.BLIND_COOLING_LEVEL_HALFLIFE_S, bin_s),
                   trend_halflife_bins=T.bins(T.BLIND_COOLING_TREND_HALFLIFE_S, bin_s),
                   reference_delay_bins=delay_bins, max_suspect_s=T.BLIND_COOLING_MAX_SUSPECT_S)


@dataclass(frozen=True)
class Transition:
    """What a completed block changed: ``kind`` is suspect | release | onset | cleared | ready."""

    kind: str
    ts: float
    deviation: float  # estimated shift (unit of the residual), signed
    z: float  # standardised size of the shift
    since_ts: float  # when the evidence started accumulating


_SCALARS = (
    "mode", "n_blocks", "block_sum", "block_z", "block_n", "suspect_ts", "onset_ts", "onset_dev",
    "onset_z", "dev_fast", "clear_count", "grace_until", "last_since", "last_ts", "trend", "absorbed",
)  # fmt: skip
_PARTS = ("levels", "noise", "detector", "reference")  # its estimators, each with its own state


class ResidualChannel:
    """Sustained-shift detector for one residual; ``add(...)`` per bin, read ``mode``/``held``.
    Its estimators: per-stage ``levels``, block z ``noise``, a two-sided CUSUM ``detector`` and, for
    a trend-following level, a delayed ``reference``."""

    def __init__(self, name: str, params: ChannelParams) -> None:
        self.name = name
        self._params = params
        self._reset()

    @property
    def params(self) -> ChannelParams:
        return self._params

    @params.setter
    def params(self, params: ChannelParams) -> None:
        """New tuning (the cooling unit model gained the weather): the estimators keep their data."""
        self._params = params
        self.levels.halflife = params.loc_halflife_bins
        self.levels.scale_halflife = params.bin_scale_halflife_bins
        self.levels.min_scale, self.levels.warm = params.min_bin_scale, params.slot_warm_bins
        self.noise.halflife, self.noise.min_scale = params.scale_halflife_blocks, params.min_block_scale

    def _reset(self) -> None:
        p = self._params
        self.levels = StageLocation(p.n_slots, p.loc_halflife_bins, p.bin_scale_halflife_bins,
                                    p.min_bin_scale, p.slot_warm_bins)
        self.noise = CorrelatedScale(p.scale_halflife_blocks, p.min_block_scale, T.Z_CLIP, T.MAX_RHO)
        self.detector = TwoSidedCusum(T.CUSUM_K)
        self.reference = DelayedReference(p.reference_delay_bins)
        self.mode = WARMING
        self.n_blocks = 0.0
        self.block_sum = 0.0
        self.block_z = 0.0
        self.block_n = 0.0
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
        self.absorbed = 0.0  # shifts adopted by lapsed suspicions, fading at the level's own pace

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
        return self.detector.value

    @property
    def since(self) -> float:
        """When the larger CUSUM side's evidence began (NaN before)."""
        return self.detector.since

    @property
    def scale(self) -> float:
        value = self.noise.value
        return math.nan if value is None else value

    def recent_deviation(self) -> float:
        """Mean block deviation since the larger CUSUM side last left zero (signed; 0 when calm)."""
        return self.detector.deviation

    @property
    def block_noise(self) -> float:
        """A block's noise in bin σ, inflated for the blocks' autocorrelation: what a block's mean z
        is divided by before it reaches the CUSUM."""
        return self.noise.floored * math.sqrt(self.noise.vif)

    @property
    def active_deviation(self) -> float:
        """The confirmed shift as it is now (a ramp keeps growing after its onset); 0 unless active."""
        return self.dev_fast if self.mode == ACTIVE else 0.0

    def location(self, slot: int) -> float:
        return self.levels.raw_level(slot)

    def slot_ready(self, slot: int) -> bool:
        return self.levels.count(slot) >= self._params.slot_warm_bins

    def _calm(self) -> bool:
        """Noise may learn: not normal yet, or normal with the CUSUM well below its threshold."""
        p = self._params
        return self.mode != NORMAL or self.cusum < T.CALM_FRAC * p.threshold_h

    # ----------------------------------------------------------------------------- updating
    def add(self, residual: float, slot: int, ts: float) -> Transition | None:
        """Feed one bin's residual; returns a transition when the completed block changed mode."""
        if not math.isfinite(residual):
            return None
        p = self._params
        self.last_ts = ts
        ready = self.levels.ready(slot)  # judged only once this stage's level and noise are known
        scale = self.levels.scale(slot)  # (both as they were before this bin)
        loc = self.levels.raw_level(slot)
        if self.mode == GRACE and math.isfinite(self.grace_until) and ts >= self.grace_until:
            self.mode = NORMAL if self.n_blocks >= p.warm_blocks else WARMING
        trending = p.trend_halflife_bins > 0
        if trending:
            loc += self.trend  # the level this bin is predicted at
        if self.learning:
            n = self.levels.count(slot)
            halflife = p.grace_loc_halflife_bins if self.mode == GRACE else p.loc_halflife_bins
            step = self.levels.step(residual, slot, predicted=loc, halflife=halflife,
                                    learn_scale=self._calm())
            if trending and n >= p.slot_warm_bins:
                self.trend += LN2 / p.trend_halflife_bins * step
        elif trending:  # held: extrapolate the level with a fading trend
            self.levels.set_level(slot, loc)
            self.trend *= 0.5 ** (1.0 / p.frozen_trend_halflife_bins)
        reference = loc
        if p.reference_delay_bins > 0 and trending:
            past = self.reference.update(self.levels.raw_level(slot)).value
            if past is not None and self.mode != GRACE:
                reference = past + self.trend * p.reference_delay_bins
        if not ready:
            return None  # this stage's location is not known yet: its residual says nothing
        dev = residual - reference
        bin_z = dev / max(scale if scale is not None else p.min_bin_scale, p.min_bin_scale)
        # Clipped in units of the noise the block is judged against, never tighter than a bin's own:
        # where slow wander makes a block's mean noisier than its bins (a weather-blind cooling
        # unit: 4.5 bin σ), a bin clip of Z_CLIP capped every block's z at 6 / 4.5 = 1.3 σ, and no
        # shift, however large, could confirm before its suspicion lapsed (development churn seed
        # 19: a 25 % COP step missed).
        clip = T.Z_CLIP * max(1.0, self.block_noise)
        self.block_sum += dev
        self.block_z += min(max(bin_z, -clip), clip)
        self.block_n += 1.0
        if self.block_n < p.block_bins:
            return None
        mean_dev, mean_z = self.block_sum / self.block_n, self.block_z / self.block_n
        self.block_sum = self.block_z = self.block_n = 0.0
        return self._block(mean_dev, mean_z, ts)

    def _block(self, dev: float, mean_z: float, ts: float) -> Transition | None:
        p = self._params
        self.n_blocks += 1.0
        self.absorbed *= 0.5 ** (p.block_bins / p.loc_halflife_bins)
        if self.mode == GRACE:
            return None
        if self.learning and self._calm():
            self.noise.update(mean_z)  # noise is learned from calm data only, never from a shift
        if self.mode == WARMING:
            if self.n_blocks >= p.warm_blocks:
                self.mode = NORMAL
                return Transition("ready", ts, 0.0, 0.0, ts)
            return None
        z = mean_z / self.block_noise
        zc = min(max(z, -T.Z_CLIP), T.Z_CLIP)
        self.detector.update(zc, dev, ts)
        if self.mode == ACTIVE:
            return self._active_block(dev, zc, ts)
        self.dev_fast += T.SHIFT_NOW_WEIGHT * (dev - self.dev_fast)  # the shift as it is now (a ramp grows)
        return self._watch_block(ts)

    def _watch_block(self, ts: float) -> Transition | None:
        p = self._params
        h = p.threshold_h
        s = self.cusum
        since = self.detector.since
        dev = self.recent_deviation()
        if p.trend_halflife_bins <= 0 and dev * self.dev_fast > 0 and abs(self.dev_fast) > abs(dev):
            dev = self.dev_fast  # a ramp: judge its size now, not its average since it began
            # (not for a trend-following level: there a creeping shift is weather until it is fast)
        z = self.detector.z
        if self.mode == NORMAL and s >= T.SUSPECT_FRAC * h:
            self.mode = SUSPECTED
            self.suspect_ts = ts
            return Transition("suspect", ts, dev, z, since)
        if self.mode != SUSPECTED:
            return None
        if dev * self.absorbed > 0:
            dev += self.absorbed  # the same way as what lapsed suspicions adopted: one creeping shift
        if s >= h and abs(dev) >= p.min_effect and ts - since >= T.MIN_EVIDENCE_S:
            return self._confirm(ts, dev, z, since)
        if s < T.RELEASE_FRAC * h:
            self.mode = NORMAL
            self.detector.clear()
            return Transition("release", ts, dev, z, since)
        if ts - self.suspect_ts > p.max_suspect_s:
            # Sustained but below min_effect: it becomes the normal instead of holding learning
            # forever. What it adopts is remembered (``absorbed``, fading at the slow level's pace), so
            # a creeping ramp is judged on all it moved, not adopted in sub-threshold pieces (not for a
            # trend-following level: there a lapse is the weather's).
            carried = self.dev_fast if p.trend_halflife_bins <= 0 else 0.0
            self.start_grace(ts + p.max_suspect_s / 3.0)
            self.absorbed = self.absorbed + carried if carried * self.absorbed >= 0 else carried
            return Transition("release", ts, dev, z, since)
        return None

    def _active_block(self, dev: float, zc: float, ts: float) -> Transition | None:
        p = self._params
        self.dev_fast += T.SHIFT_NOW_WEIGHT * (dev - self.dev_fast)
        sign = 1.0 if self.onset_z >= 0 else -1.0
        # Reverse CUSUM ("clear_count"): evidence that the deviation fell below half its onset size.
        z_back = 0.5 * min(abs(self.onset_z), T.Z_CLIP) - sign * zc
        z_back = min(max(z_back, -T.Z_CLIP), T.Z_CLIP)
        self.clear_count = max(0.0, self.clear_count + z_back - T.CUSUM_K)
        if self.clear_count >= T.CLEAR_FRAC * p.threshold_h:
            return self.clear(ts)
        return None

    def force_onset(
        self, ts: float, deviation: float, since_ts: float, level: float, slot: int
    ) -> Transition:
        """Confirm a shift that other evidence established (a measured change point): ACTIVE from
        now, judged against ``level`` (the residual's level before the shift), held as usual."""
        p = self._params
        bin_scale = self.levels.scale(slot)
        bin_scale = max(bin_scale if bin_scale is not None else p.min_bin_scale, p.min_bin_scale)
        block_scale = self.noise.value
        z = deviation / bin_scale / (max(block_scale if block_scale is not None else 1.0,
                                         p.min_block_scale) * math.sqrt(self.noise.vif))
        self.levels.set_level(slot, level)
        self.reference.forget(level)
        self.trend = 0.0
        return self._confirm(ts, deviation, z, since_ts)

    def _confirm(self, ts: float, dev: float, z: float, since: float) -> Transition:
        """ACTIVE from ``ts`` with a shift of ``dev`` (``z``) whose evidence began at ``since``."""
        self.mode = ACTIVE
        self.absorbed = 0.0
        self.onset_ts, self.onset_dev, self.onset_z = ts, dev, z
        self.dev_fast = dev
        self.clear_count = 0.0
        self.last_since = since
        return Transition("onset", ts, dev, z, since)

    def pin(self, levels: dict[int, float], scales: np.ndarray) -> None:
        """End a grace and judge against known levels (a change point whose "before" is known): slots
        in ``levels`` are pinned with a half-life's weight and their settled noise; others re-warm."""
        p = self._params
        weight = max(p.loc_halflife_bins / LN2, float(p.slot_warm_bins))
        for s in range(p.n_slots):
            if s in levels:
                known = float(scales[s])
                self.levels.pin(s, levels[s], weight, known if math.isfinite(known) else None)
            else:
                self.levels.forget(s)
        self.mode = NORMAL if self.n_blocks >= p.warm_blocks else WARMING
        self.grace_until = math.nan
        self.trend = 0.0
        self._restart_judging()

    def clear(self, ts: float) -> Transition:
        """Leave ACTIVE/SUSPECTED: learning resumes from the current location."""
        dev = self.dev_fast
        since = self.last_since
        self.mode = NORMAL if self.n_blocks >= self._params.warm_blocks else WARMING
        self.detector.clear()
        self.clear_count = 0.0
        return Transition("cleared", ts, dev, 0.0, since)

    def start_grace(self, until_ts: float) -> None:
        """Stop detecting and re-centre until ``until_ts`` (accepted new normal, new workload): every
        stage slot re-warms from its next residuals, so stages not seen in the grace period are
        not judged against their old location either."""
        self.mode = GRACE
        self.levels.forget()
        self.grace_until = until_ts
        self._restart_judging()

    def _restart_judging(self) -> None:
        """A known change point: no evidence, partial block, past reference or creeping shift carried."""
        self.reference.forget()
        self.absorbed = 0.0
        self.detector.clear()
        self.block_sum = self.block_z = self.block_n = 0.0
        self.clear_count = 0.0

    # ----------------------------------------------------------------------------- persistence
    def state(self) -> dict[str, object]:
        """Fixed-size, JSON-safe snapshot."""
        parts = {key: getattr(self, key).state() for key in _PARTS}
        return {**fields_state(self, _SCALARS), **parts}

    def restore(self, data: dict[str, object]) -> None:
        self._reset()
        load_fields(self, data, _SCALARS, f"drift channel {self.name!r}")
        if not math.isfinite(self.absorbed):
            self.absorbed = 0.0  # a state saved before lapses were remembered
        for key in _PARTS:
            part = data.get(key)
            if not isinstance(part, dict):
                raise ValueError(f"drift channel {self.name!r}: {key} missing")
            try:
                getattr(self, key).load(part)
            except ValueError as exc:
                raise ValueError(f"drift channel {self.name!r}: {exc}") from exc
