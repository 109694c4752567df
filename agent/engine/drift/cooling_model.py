"""The cooling unit's own efficiency model: its power for the heat it is removing right now.

Why the drift detector keeps one: the engine's cooling expectation is driven by this rack's heat
only (load side, as the report's window predictions must be), but a shared cooling unit's power
also follows the other racks' heat, which this rack cannot see; its residual swings by several %
for reasons that are not drift. "Cooling uses more power for the same heat" is a property of
the unit: power against the load the unit is carrying. That load is read from the unit itself —
its delivered cooling (``cooling_load_w``) when it reports one, else its fan speed (variable-speed
fans track the load). log power ≈ a + b·log load + daily terms (COP follows the outdoor cycle), fitted
by exponentially weighted recursive least squares, predicted before it learns each bin, and not
learning at all while the cooling component is held — so a setpoint change or a degraded coil
shows as a sustained residual instead of being absorbed. Fixed size: two 6-vectors and a 6×6
matrix.
"""

from __future__ import annotations

import math

import numpy as np

N_FEATURES = 6
HALFLIFE_BINS = 1440.0  # 1 day at 60 s bins
WARM_BINS = 1440  # a day of learning before residuals are produced: the daily cycle must be seen
# Ridge (in equivalent samples) per feature towards PRIOR_THETA; the intercept is free.
RIDGE = np.array([0.0, 20.0, 5.0, 5.0, 5.0, 5.0])
PRIOR_THETA = np.array([0.0, 1.0, 0.0, 0.0, 0.0, 0.0])


def _features(load: float, ts: float) -> np.ndarray:
    """log power ≈ a + b·log load + daily harmonics: COP is a product of a part-load factor and a
    weather factor, so their logs add; a power law extrapolates sanely outside the recent range."""
    phase = 2.0 * math.pi * (ts % 86400.0) / 86400.0
    c, s = math.cos(phase), math.sin(phase)
    c2, s2 = c * c - s * s, 2.0 * s * c
    return np.array([1.0, math.log(load), c, s, c2, s2])


class CoolingUnitModel:
    """Share-weighted cooling-unit power as a function of the unit's load and the time of day."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.theta = PRIOR_THETA.copy()
        self.gram = np.zeros((N_FEATURES, N_FEATURES))  # Σ λ^age x xᵀ
        self.moment = np.zeros(N_FEATURES)  # Σ λ^age x y
        self.n = 0.0
        self.power_scale = math.nan  # normalises the target
        self.load_scale = math.nan  # normalises cooling_load_w (fan % is used as a fraction)
        self.source = 0.0  # 1: cooling_load_w, 2: fan_pct (a change of source restarts the fit)

    def residual_pct(
        self, power_w: float, cooling_load_w: float, fan_pct: float, ts: float, learn: bool
    ) -> float:
        """Residual of this bin in % of the expectation (NaN while warming up or without inputs);
        learns from the bin afterwards when ``learn``."""
        if not math.isfinite(power_w) or power_w <= 0:
            return math.nan
        if math.isfinite(cooling_load_w) and cooling_load_w > 0:
            source = 1.0
            if not math.isfinite(self.load_scale):
                self.load_scale = cooling_load_w
            load = cooling_load_w / self.load_scale
        elif math.isfinite(fan_pct) and fan_pct > 0:
            source, load = 2.0, fan_pct / 100.0
        else:
            return math.nan
        if source != self.source:
            load_scale = self.load_scale
            self._reset()
            self.source, self.load_scale = source, load_scale
        if not math.isfinite(self.power_scale):
            self.power_scale = power_w
        x = _features(max(load, 1e-3), ts)
        y = math.log(power_w / self.power_scale)
        predicted = float(x @ self.theta)
        residual = math.nan
        if self.n >= WARM_BINS:
            residual = 100.0 * math.expm1(min(y - predicted, 5.0))
        if learn:
            self._learn(x, y)
        return residual

    def _learn(self, x: np.ndarray, y: float) -> None:
        """Exponentially weighted least squares with a fixed ridge towards the physical prior
        (power ∝ load, no daily swing): a load that barely moves cannot wind the fit up so far
        that a fault is absorbed within the hour."""
        lam = 0.5 ** (1.0 / HALFLIFE_BINS)
        self.gram = lam * self.gram + np.outer(x, x)
        self.moment = lam * self.moment + x * y
        ridge = np.diag(RIDGE)
        self.theta = np.linalg.solve(self.gram + ridge, self.moment + ridge @ PRIOR_THETA)
        self.n += 1.0

    def state(self) -> dict[str, object]:
        return {
            "theta": [float(v) for v in self.theta],
            "gram": [float(v) for v in self.gram.ravel()],
            "moment": [float(v) for v in self.moment],
            "n": self.n,
            "power_scale": _num(self.power_scale),
            "load_scale": _num(self.load_scale),
            "source": self.source,
        }

    def restore(self, data: dict[str, object]) -> None:
        theta, gram, moment = data.get("theta"), data.get("gram"), data.get("moment")
        if not isinstance(theta, list) or len(theta) != N_FEATURES:
            raise ValueError(f"drift cooling model: theta must be a list of {N_FEATURES}")
        if not isinstance(gram, list) or len(gram) != N_FEATURES * N_FEATURES:
            raise ValueError(f"drift cooling model: gram must be a list of {N_FEATURES * N_FEATURES}")
        if not isinstance(moment, list) or len(moment) != N_FEATURES:
            raise ValueError(f"drift cooling model: moment must be a list of {N_FEATURES}")
        self.theta = np.array(theta, dtype=float)
        self.gram = np.array(gram, dtype=float).reshape(N_FEATURES, N_FEATURES)
        self.moment = np.array(moment, dtype=float)
        self.n = float(data.get("n") or 0.0)  # type: ignore[arg-type]
        for key in ("power_scale", "load_scale"):
            value = data.get(key)
            setattr(self, key, float(value) if isinstance(value, (int, float)) else math.nan)
        self.source = float(data.get("source") or 0.0)  # type: ignore[arg-type]


def _num(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None
