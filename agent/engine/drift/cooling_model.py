"""The cooling unit's own efficiency model: its power for the heat it is removing right now.

Why: the engine's cooling expectation follows this rack's heat only, but a shared unit's power
also follows other racks' heat, swinging its residual by several % without drift. "More power for
the same heat" is judged against the load the unit reports (``cooling_load_w``, else its fan
speed). With the outdoor air (``outdoor_c``), log power ≈ a + b·log load + c·(log load)² +
d·log(T + 10 K) (Carnot: the lift follows the outdoor air), so the weather is explained and a
creeping coil or COP loss stands out; without it daily harmonics stand in and the cooling channel
follows the day-to-day weather. EW recursive least squares, predicted before it learns each bin,
not learning while the cooling component is held (so a fault is not absorbed).

A unit's power is not log-linear in its load: its fans stop at a floor and its compressor stages
down, so an idle gap between jobs takes it to the bend of its curve, 5–12 % above the log-linear
fit on the twin. The fit's mean residual is kept per 10 % band of load (``OperatingBands``) and the
two form an additive model: the band's level is subtracted from the residual, and (once warm) the
fit learns each bin less its band's level. A load below or above every band with an hour of data
is not judged and does not teach the fit (one idle gap would tilt it at the usual load); a load
between two such bands is judged against their interpolated level.
"""

from __future__ import annotations

import math

import numpy as np

from agent.engine.drift import tuning as T
from agent.engine.drift.estimators import OperatingBands, finite_or_none, number_or_nan

N_FEATURES = 6
# Time constants (fit half-lives, warm-up, learning delay): tuning.py UNIT_*, in seconds.
LIFT_OFFSET_K = 10.0  # temperature lift ≈ outdoor + this (condenser approach − evaporator margin)
WEATHER = 10.0  # added to ``source`` when the outdoor temperature is a regressor
# With the weather explained, each bin is learned UNIT_LEARN_DELAY_S later, and only if the channel
# was calm then and still is, so a fault creeping in over hours meets a model that has not seen it.
# Warming up (nothing judged) it learns at once: the delay made warm-up 6 h longer, hiding day-1 faults.
RESTART_WARM_S = T.UNIT_WARM_S  # from a restart to the first residual
# Ridge (in equivalent samples) per feature towards PRIOR_THETA; the intercept is free. The load slope's
# prior (power ∝ load) weighs one sample, deciding only while the load has not moved: real units are not
# proportional (the twin's churn racks fit 1.4), and a 20-sample prior raised the unit's 30-min residual
# P95 on dev seeds 0–29 from 1.7 to 2.2 % (weather measured) and 6.6 to 7.5 % (weather-blind), noise
# that hid 20 % COP steps (bench/drift.py --randomized, dev churn seeds 19 and 27).
RIDGE = np.array([0.0, 1.0, 5.0, 5.0, 5.0, 5.0])
PRIOR_THETA = np.array([0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
# With the outdoor temperature: power ∝ lift (Carnot) is the prior for the lift term.
# A light ridge on the lift (it varies little, and a heavy one pinned it off its true slope); the
# load curvature stays near 0 (its feature is ~1e-2: freed, it extrapolated new loads badly).
WEATHER_RIDGE = np.array([0.0, 1.0, 1.0, 1.0, 5.0, 5.0])
WEATHER_PRIOR_THETA = np.array([0.0, 1.0, 1.0, 0.0, 0.0, 0.0])
# Load bands: 10 % wide (T.SAME_LOAD_FRAC), covering loads from 1/LOAD_RANGE to LOAD_RANGE times the
# first one seen (a unit's load stays within its capacity and its fans' floor, far inside that).
LOAD_RANGE = 20.0
LOAD_BAND_LOG = math.log1p(T.SAME_LOAD_FRAC)
N_LOAD_BANDS = 2 * math.ceil(math.log(LOAD_RANGE) / LOAD_BAND_LOG)


def _features(load: float, ts: float, outdoor_c: float = math.nan) -> np.ndarray:
    """log power ≈ a + b·log load + weather terms (COP = part-load × weather factor, so logs add): the
    log temperature lift and a part-load curvature with the outdoor temperature (a free quadratic
    extrapolated hotter days badly), else daily harmonics; unused slots stay at the ridge prior."""
    if math.isfinite(outdoor_c):
        log_load = math.log(load)
        lift = math.log(max(outdoor_c + LIFT_OFFSET_K, 2.0) / (20.0 + LIFT_OFFSET_K))
        return np.array([1.0, log_load, lift, log_load * log_load, 0.0, 0.0])
    phase = 2.0 * math.pi * (ts % 86400.0) / 86400.0
    c, s = math.cos(phase), math.sin(phase)
    c2, s2 = c * c - s * s, 2.0 * s * c
    return np.array([1.0, math.log(load), c, s, c2, s2])


class CoolingUnitModel:
    """Share-weighted cooling-unit power as a function of the unit's load and the time of day."""

    def __init__(self, bin_s: float = 60.0) -> None:
        self.halflife_bins = T.bins(T.LEVEL_HALFLIFE_S, bin_s)  # weather-blind: the intercept follows it
        self.weather_halflife_bins = T.bins(T.UNIT_WEATHER_HALFLIFE_S, bin_s)
        self.warm_bins = T.bins(T.UNIT_WARM_S, bin_s)
        self.outdoor_lost_bins = T.bins(T.UNIT_OUTDOOR_LOST_S, bin_s)
        self.learn_delay = T.whole_bins(T.UNIT_LEARN_DELAY_S, bin_s)
        self.band_warm = T.bins(T.STAGE_WARM_S, bin_s)
        self._reset()

    def _reset(self) -> None:
        self.theta = PRIOR_THETA.copy()
        self.gram = np.zeros((N_FEATURES, N_FEATURES))  # Σ λ^age x xᵀ
        self.moment = np.zeros(N_FEATURES)  # Σ λ^age x y
        self.n = 0.0
        self.power_scale = math.nan  # normalises the target
        self.load_scale = math.nan  # normalises cooling_load_w (fan % is used as a fraction)
        self.source = 0.0  # 1: cooling_load_w, 2: fan_pct; + WEATHER with the outdoor temperature
        # (a change of source restarts the fit)
        self.outdoor_missing = 0.0  # consecutive bins without the outdoor temperature
        self._queue = np.zeros((self.learn_delay, N_FEATURES + 2))  # features, target, calm flag
        self.queue_i = 0.0
        self.queue_n = 0.0
        self.bands = self._new_bands()

    def _new_bands(self) -> OperatingBands:
        """Empty load bands with the fit's own memory (it differs with and without the weather)."""
        halflife = self.weather_halflife_bins if self.weather_known else self.halflife_bins
        return OperatingBands(N_LOAD_BANDS, LOAD_BAND_LOG, halflife, self.band_warm)

    @property
    def weather_known(self) -> bool:
        """True when the outdoor temperature is a regressor (the weather is explained)."""
        return self.source >= WEATHER

    def residual_pct(
        self, power_w: float, cooling_load_w: float, fan_pct: float, ts: float, learn: bool,
        outdoor_c: float = math.nan,
    ) -> float:
        """Residual of this bin in % of the expectation (NaN while warming up or without inputs);
        learns from the bin afterwards when ``learn``."""
        if not math.isfinite(power_w) or power_w <= 0:
            return math.nan
        outdoor_ok = math.isfinite(outdoor_c) and -60.0 < outdoor_c < 70.0
        self.outdoor_missing = 0.0 if outdoor_ok else self.outdoor_missing + 1.0
        if self.weather_known and not outdoor_ok and self.outdoor_missing < self.outdoor_lost_bins:
            return math.nan  # a probe gap: wait for it rather than restart the fit
        weather = WEATHER if outdoor_ok else 0.0
        if math.isfinite(cooling_load_w) and cooling_load_w > 0:
            source = 1.0 + weather
            if not math.isfinite(self.load_scale):
                self.load_scale = cooling_load_w
            load = cooling_load_w / self.load_scale
        elif math.isfinite(fan_pct) and fan_pct > 0:
            source, load = 2.0 + weather, fan_pct / 100.0
        else:
            return math.nan
        if source != self.source:
            load_scale = self.load_scale
            self._reset()
            self.source, self.load_scale = source, load_scale
            if self.weather_known:
                self.theta = WEATHER_PRIOR_THETA.copy()
            self.bands = self._new_bands()
        if not math.isfinite(self.power_scale):
            self.power_scale = power_w
        x = _features(max(load, 1e-3), ts, outdoor_c if outdoor_ok else math.nan)
        y = math.log(power_w / self.power_scale)
        predicted = float(x @ self.theta)
        warm = self.n >= self.warm_bins
        band = self.bands.level(float(x[1]))  # None: beyond the loads learned an hour of
        residual = math.nan
        if warm and band is not None:
            residual = 100.0 * math.expm1(min(y - predicted - band, 5.0))
        if self.weather_known and warm:
            self._learn_delayed(x, y, learn)
        elif learn:  # (warming up, nothing is judged yet: no reason to learn late)
            self._learn(x, y)
        return residual

    def _learn_delayed(self, x: np.ndarray, y: float, calm: bool) -> None:
        """Queue this bin; learn the one leaving the queue if it was calm then and is calm now."""
        i = int(self.queue_i) % self.learn_delay
        if self.queue_n >= self.learn_delay:
            old = self._queue[i]
            if calm and old[-1] > 0:
                self._learn(old[:N_FEATURES], float(old[N_FEATURES]))
        self._queue[i, :N_FEATURES] = x
        self._queue[i, N_FEATURES] = y
        self._queue[i, -1] = 1.0 if calm else 0.0
        self.queue_i = float((i + 1) % self.learn_delay)
        self.queue_n = min(self.queue_n + 1.0, float(self.learn_delay))

    def _learn(self, x: np.ndarray, y: float) -> None:
        """Learn one bin. Warming up, the fit learns every bin and the bin's residual after that
        teaches its load band. Once warm, the load bands and the fit share the work (an additive
        model): the bin's residual against the fit teaches its band, and the fit learns the bin less
        its band's level, only where the band has an hour of data, so a load seldom seen does not
        tilt the fit (one idle gap pivoted a blind unit's fit by 12 % at its usual load, development
        seed 19)."""
        log_load = float(x[1])
        if self.n < self.warm_bins:
            self._fit(x, y)
            self.bands.update(log_load, y - float(x @ self.theta))
            return
        level = self.bands.level(log_load)
        self.bands.update(log_load, y - float(x @ self.theta))
        if level is not None:
            self._fit(x, y - level)

    def _fit(self, x: np.ndarray, y: float) -> None:
        """Exponentially weighted least squares with a fixed ridge towards the physical prior
        (power ∝ load, no daily swing): a load that barely moves cannot wind the fit up so far
        that a fault is absorbed within the hour."""
        lam = 0.5 ** (1.0 / (self.weather_halflife_bins if self.weather_known else self.halflife_bins))
        self.gram = lam * self.gram + np.outer(x, x)
        self.moment = lam * self.moment + x * y
        ridge, prior = (WEATHER_RIDGE, WEATHER_PRIOR_THETA) if self.weather_known else (RIDGE, PRIOR_THETA)
        self.theta = np.linalg.solve(self.gram + np.diag(ridge), self.moment + ridge * prior)
        self.n += 1.0

    def state(self) -> dict[str, object]:
        return {
            "theta": [float(v) for v in self.theta],
            "gram": [float(v) for v in self.gram.ravel()],
            "moment": [float(v) for v in self.moment],
            "n": self.n,
            "power_scale": finite_or_none(self.power_scale),
            "load_scale": finite_or_none(self.load_scale),
            "source": self.source,
            "outdoor_missing": self.outdoor_missing,
            "queue": [float(v) for v in self._queue[: int(self.queue_n)].ravel()],
            "queue_i": self.queue_i,
            "queue_n": self.queue_n,
            "bands": self.bands.state(),
        }

    def restore(self, data: dict[str, object]) -> None:
        for key, size in (("theta", N_FEATURES), ("gram", N_FEATURES * N_FEATURES), ("moment", N_FEATURES)):
            value = data.get(key)
            if not isinstance(value, list) or len(value) != size:
                raise ValueError(f"drift cooling model: {key} must be a list of {size}")
        self.theta = np.array(data["theta"], dtype=float)
        self.gram = np.array(data["gram"], dtype=float).reshape(N_FEATURES, N_FEATURES)
        self.moment = np.array(data["moment"], dtype=float)
        self.n = float(data.get("n") or 0.0)  # type: ignore[arg-type]
        for key in ("power_scale", "load_scale"):
            value = data.get(key)
            setattr(self, key, number_or_nan(value))
        self.source = float(data.get("source") or 0.0)  # type: ignore[arg-type]
        self.outdoor_missing = float(data.get("outdoor_missing") or 0.0)  # type: ignore[arg-type]
        queue, n = data.get("queue") or [], int(data.get("queue_n") or 0)  # type: ignore[call-overload]
        width = N_FEATURES + 2
        if not isinstance(queue, list) or not 0 <= n <= self.learn_delay or len(queue) != n * width:
            raise ValueError(f"drift cooling model: queue must hold queue_n × {width} numbers")
        self._queue[:] = 0.0
        self._queue[:n] = np.array(queue, dtype=float).reshape(n, width)
        self.queue_n = float(n)
        self.queue_i = float(data.get("queue_i") or 0.0) % self.learn_delay  # type: ignore[arg-type]
        bands = data.get("bands")  # (a state saved before the bands: they learn afresh, about an hour)
        self.bands = OperatingBands.from_state(bands) if isinstance(bands, dict) else self._new_bands()
