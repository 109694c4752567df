"""The facility response model's pieces: regressions, features and the lag bank.

IT: PDU power ≈ a cubic in the GPU power and in the GPU power through the server-fan lag (the PSU
efficiency curve, fan power ∝ speed³) plus per-stage offsets (node base power); a stage-only model
(stages and work rate) beside it. Cooling: rack share of cooling power ≈ a(t) + b(t)·hl(t), hl the
heat through a dead time and a first-order lag, a and b with a daily harmonic (the COP cycle); a
bank of (τ, d) candidates runs side by side. Each is an exponentially weighted least squares on
sufficient statistics, solved with a ridge toward the last estimate, so a direction the data did
not excite keeps its value. Fixed arrays, no per-sample loop. docs/engine.md explains the model.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

DAY_S = 86400.0
TAUS_S: tuple[float, ...] = (0.0, 60.0, 120.0, 200.0, 300.0, 450.0, 700.0, 1200.0)
DEAD_S: tuple[float, ...] = (0.0, 30.0, 60.0, 120.0, 240.0)
N_COOL = 6  # [1, hl, cos, sin, hl·cos, hl·sin]


class EWLS:
    """Batch-updated exponentially weighted least squares with a ridge toward the last estimate;
    ``R`` (B, p, p), ``r`` (B, p), ``theta`` (B, p) for B independent models."""

    def __init__(self, n_models: int, p: int, ridge: np.ndarray) -> None:
        self.R = np.zeros((n_models, p, p))
        self.r = np.zeros((n_models, p))
        self.theta: np.ndarray = np.zeros((n_models, p))
        self.weight = np.zeros(n_models)  # forgotten sum of sample weights (hours of data)
        self.ridge = np.broadcast_to(np.asarray(ridge, dtype=float), (n_models, p)).copy()

    def update(self, X: np.ndarray, y: np.ndarray, w: np.ndarray, lam: np.ndarray | float) -> None:
        """Forget by ``lam`` then add rows ``X`` (B, n, p) with targets ``y`` (B, n), weights ``w`` (B, n)."""
        self.add(X, y, w, lam)
        self.solve()

    def add(self, X: np.ndarray, y: np.ndarray, w: np.ndarray, lam: np.ndarray | float) -> None:
        """``update`` without the solve (for a caller that solves less often than it adds)."""
        lam_b = np.broadcast_to(np.asarray(lam, dtype=float), self.weight.shape)
        self.R *= lam_b[:, None, None]
        self.r *= lam_b[:, None]
        self.weight *= lam_b
        if X.shape[1]:
            Xw = X * w[..., None]
            self.R += np.einsum("bni,bnj->bij", Xw, X)
            self.r += np.einsum("bni,bn->bi", Xw, y)
            self.weight += w.sum(axis=1)

    def solve(self, anchor: np.ndarray | None = None, r: np.ndarray | None = None) -> None:
        """``theta`` from the statistics, the ridge pulling toward ``anchor`` (B, p): a fixed prior;
        by default the last estimate. ``r`` (B, p) replaces the kept right-hand side (a caller that
        keeps its targets apart and scales them at the solve). A singular system keeps the last estimate."""
        lhs = self.R + self.ridge[:, :, None] * np.eye(self.R.shape[1])[None]
        rhs = (self.r if r is None else r) + self.ridge * (self.theta if anchor is None else anchor)
        with contextlib.suppress(np.linalg.LinAlgError):  # keep the last estimate; more data next window
            self.theta = np.linalg.solve(lhs, rhs[..., None])[..., 0]

    def state_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}_R": self.R, f"{prefix}_r": self.r, f"{prefix}_theta": self.theta,
                f"{prefix}_weight": self.weight}

    def load_arrays(self, prefix: str, arrays: dict[str, np.ndarray]) -> None:
        for key, arr in self.state_arrays(prefix).items():
            if arrays[key].shape != arr.shape:
                raise ValueError(f"state '{key}': shape {arrays[key].shape}, expected {arr.shape}")
            arr[...] = arrays[key]


def it_features(gpu_m1: np.ndarray, gpu_m2: np.ndarray, gpu_m3: np.ndarray, gpu_lag: np.ndarray,
                frac: np.ndarray, scale_w: float, seen_dev: np.ndarray) -> np.ndarray:
    """IT regressors per bin: [1, g, g², g³, gl, gl², gl³, d, d₂, f_0 … f_S-1]: g the bin's raw GPU
    power moments, gl the GPU power through a ~1 min lag (server fans follow the GPUs' heat sinks),
    d and d₂ how far the 1st and 2nd moments at the PDU feeds' sampling instants are from the bin's
    own (``seen_dev``, n × 2; feed_load.py; 0: the feeds saw the bin's mean). Their coefficients say
    how much of what the GPUs did at those instants the feeds' readings show: the local slope where
    the readings and the GPU samples share their instants, 0 where their clocks or averaging differ."""
    gl = gpu_lag / scale_w
    g = (gpu_m1 / scale_w, gpu_m2 / scale_w**2, gpu_m3 / scale_w**3)
    dev = seen_dev / np.array([scale_w, scale_w**2])
    return np.column_stack((np.ones_like(gl), *g, gl, gl * gl, gl * gl * gl, dev, frac))


N_IT_BASE = 9  # it_features' columns before the stage fractions
IT_SEEN_COLUMNS = [7, 8]  # the feeds' view (d, d₂): absent from states saved before them (persist.py)


def feed_view_w(theta: np.ndarray, seen_dev: np.ndarray, scale_w: float) -> np.ndarray:
    """What the feeds' view adds to each bin's IT prediction (W): the d, d₂ terms of ``it_features``
    (linear, so the same inside and beyond the learned GPU range: ``it_predict`` leaves them at 0)."""
    dev = seen_dev / np.array([scale_w, scale_w**2])
    out: np.ndarray = dev @ theta[IT_SEEN_COLUMNS] * scale_w
    return out


def it_predict(theta: np.ndarray, g: np.ndarray, gl: np.ndarray, frac: np.ndarray, scale_w: float,
               lo_w: float, hi_w: float) -> np.ndarray:
    """The rack's IT power (W) per bin (the feeds' view: ``feed_view_w``). Beyond the GPU-power range
    already learned [lo_w, hi_w] the cubic continues with its edge slope: one fitted at low load must
    not be extrapolated as a cubic."""
    no_view = np.zeros((g.shape[0], len(IT_SEEN_COLUMNS)))
    X = it_features(g[:, 0], g[:, 1], g[:, 2], gl, frac, scale_w, no_view)
    pred = X @ theta
    if not (math.isfinite(lo_w) and math.isfinite(hi_w)) or hi_w <= lo_w:
        return np.asarray(pred * scale_w)
    gc = np.clip(g[:, 0], lo_w, hi_w)
    glc = np.clip(gl, lo_w, hi_w)
    out = (gc != g[:, 0]) | (glc != gl)
    if out.any():
        gn, gln = gc[out] / scale_w, glc[out] / scale_w
        # every node's load scaled by the same factor: the per-node moments keep the rack's load shape
        r = np.where(g[out, 0] > 0, gc[out] / np.maximum(g[out, 0], 1e-9), 1.0)
        m2 = np.where(g[out, 0] > 0, g[out, 1] * r**2, gc[out] ** 2)
        m3 = np.where(g[out, 0] > 0, g[out, 2] * r**3, gc[out] ** 3)
        Xc = it_features(gc[out], m2, m3, glc[out], frac[out], scale_w, no_view[out])
        # slope along that scaling: d/dg of θ1·g + θ2·c2·g² + θ3·c3·g³, c2, c3 the load-shape factors
        c2 = np.where(gc[out] > 0, m2 / np.maximum(gc[out], 1e-9) ** 2, 1.0)
        c3 = np.where(gc[out] > 0, m3 / np.maximum(gc[out], 1e-9) ** 3, 1.0)
        slope_g = theta[1] + 2 * theta[2] * c2 * gn + 3 * theta[3] * c3 * gn**2
        slope_gl = theta[4] + 2 * theta[5] * gln + 3 * theta[6] * gln**2
        pred[out] = (
            Xc @ theta + slope_g * (g[out, 0] - gc[out]) / scale_w + slope_gl * (gl[out] - glc[out]) / scale_w
        )
    return np.asarray(pred * scale_w)


# Where no stage is known (slot 0) power is not monotone in the work rate (evaluation passes report
# more samples/s than training yet draw less; a stall reports none), so there the rate over the job's
# usual rate enters as a piecewise-linear curve: knots at half-steps up to twice the usual rate (few
# enough to learn within the warm-up from 15-s bins), plus the share of the bin with no rate at all.
RATE_KNOTS = np.array([0.5, 1.0, 1.5, 2.0])
N_RATE_CURVE = RATE_KNOTS.size + 1  # the knots, then the no-rate share


def stage_it_features(frac: np.ndarray, work_rate_n: np.ndarray, usual_rate_n: np.ndarray,
                      rated: np.ndarray) -> np.ndarray:
    """Regressors of the IT model that needs no GPU telemetry:
    [f_0 … f_S-1, f_0·w … f_S-1·w, f_u·r·hat_1(u) … f_u·r·hat_4(u), f_u·(1 − r)].

    Per stage a level and a slope in the work rate over its job's peak ``w`` (0 where unknown); where
    no stage is known (f_u, slot 0) the curve of the rate over the job's usual rate ``u`` replaces the
    slope (``RATE_KNOTS``); ``rated``: the share of each bin with a reported rate."""
    slope = frac * work_rate_n[:, None]
    slope[:, 0] = 0.0  # the unknown slot: the rate curve below
    u = np.clip(usual_rate_n, 0.0, RATE_KNOTS[-1])
    step = RATE_KNOTS[1] - RATE_KNOTS[0]
    hats = np.maximum(1.0 - np.abs(u[:, None] - RATE_KNOTS[None, :]) / step, 0.0)
    unknown = frac[:, :1]
    curve = np.concatenate((unknown * rated[:, None] * hats, unknown * (1.0 - rated[:, None])), axis=1)
    return np.concatenate((frac, slope, curve), axis=1)


def stage_it_ridge(n_slots: int) -> np.ndarray:
    """Levels pulled weakly toward their last value (a stage unseen for days keeps its level), slopes
    more firmly (a job that never reports a rate leaves them be); the curve's points are levels."""
    return np.concatenate((np.full(n_slots, 2e-3), np.full(n_slots, 2e-2), np.full(N_RATE_CURVE, 2e-3)))


FAN_LAG_S = 60.0


def it_ridge(n_slots: int) -> np.ndarray:
    return np.concatenate((np.full(N_IT_BASE, 1e-6), np.full(n_slots, 2e-3)))


class SingleLag:
    """One first-order lag over runs of bins (the server-fan lag of the GPU power)."""

    def __init__(self, bin_s: float, tau_s: float, max_run: int) -> None:
        a = math.exp(-bin_s / tau_s)
        i = np.arange(max_run)
        expo = i[:, None] - i[None, :]
        self.T = np.where(expo >= 0, (1.0 - a) * a ** np.maximum(expo, 0), 0.0)
        self.apow = a ** (i + 1)
        self.y = math.nan

    def run(self, u: np.ndarray) -> np.ndarray:
        n = u.shape[0]
        if not n:
            return u.copy()
        if not math.isfinite(self.y):
            self.y = float(u[0])
        y = self.T[:n, :n] @ u + self.apow[:n] * self.y
        self.y = float(y[-1])
        return np.asarray(y)


def daily_phase(t_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ang = 2.0 * math.pi * (t_s % DAY_S) / DAY_S
    return np.cos(ang), np.sin(ang)


def cooling_features(hl: np.ndarray, cos_t: np.ndarray, sin_t: np.ndarray) -> np.ndarray:
    """Cooling regressors (K, n, 6) from normalised lagged heat ``hl`` (K, n) and the time of day."""
    c, s = cos_t[None, :], sin_t[None, :]
    return np.stack(np.broadcast_arrays(np.ones_like(hl), hl, c, s, hl * c, hl * s), axis=-1)


COOL_RIDGE = np.array([1e-6, 1e-6, 3e-2, 3e-2, 3e-2, 3e-2])


class LagBank:
    """Dead time + first-order lag of the heat for every (τ, d) candidate, a run of bins at once: the
    lag is a lower-triangular Toeplitz product, the dead time an index shift into a ring of the last
    ``max_delay`` bins of heat (total and per stage, to attribute cooling to the stage that caused it)."""

    def __init__(self, bin_s: float, n_slots: int, max_run: int) -> None:
        self.tau_s = np.repeat(TAUS_S, len(DEAD_S))  # every (τ, d) pair, τ-major
        self.dead_s = np.tile(DEAD_S, len(TAUS_S))
        self.delay = np.rint(self.dead_s / bin_s).astype(np.int64)
        self.max_delay = int(self.delay.max())
        with np.errstate(divide="ignore"):
            self.alpha = np.where(self.tau_s > 0, np.exp(-bin_s / np.maximum(self.tau_s, 1e-9)), 0.0)
        self.K = K = self.tau_s.size
        i = np.arange(max_run)
        expo = i[:, None] - i[None, :]
        a = self.alpha[:, None, None]
        with np.errstate(invalid="ignore"):
            T = np.where(expo[None] >= 0, (1.0 - a) * np.power(a, np.maximum(expo, 0)[None]), 0.0)
        T[:, i, i] = 1.0 - self.alpha[:, None]
        self.T = T  # (K, run, run)
        self.apow = np.power(self.alpha[:, None], (i + 1)[None, :])  # (K, run)
        self.ring = np.zeros(self.max_delay)  # heat of the last bins, W
        self.ring_s = np.zeros((self.max_delay, n_slots))
        self.y = np.zeros(K)  # lagged heat, W
        self.y_s = np.zeros(n_slots)  # per-stage lagged heat of the selected candidate only
        self.k_s = 0  # the candidate ``y_s`` follows
        self.started = False

    def run(self, heat_w: np.ndarray, heat_s: np.ndarray, k_s: int) -> tuple[np.ndarray, np.ndarray]:
        """Lagged heat (K, n) of every candidate, and per-stage lagged heat (n, S) of candidate ``k_s``
        only (the selected one); when the selection changes, the stage split carries over."""
        n = heat_w.shape[0]
        if not self.started and n:
            self.ring[:] = heat_w[0]
            self.ring_s[:] = heat_s[0]
            self.y[:] = heat_w[0]
            self.y_s[:] = heat_s[0]
            self.started = True
        if k_s != self.k_s:
            tot = self.y_s.sum()
            self.y_s = self.y_s * (self.y[k_s] / tot) if tot > 0 else self.y_s
            self.k_s = k_s
        D = self.max_delay
        full = np.concatenate([self.ring, heat_w])
        idx = (D - self.delay)[:, None] + np.arange(n)[None, :]
        u = full[idx]  # (K, n)
        T = self.T[:, :n, :n]
        y = np.einsum("kij,kj->ki", T, u) + self.apow[:, :n] * self.y[:, None]
        full_s = np.concatenate([self.ring_s, heat_s], axis=0)
        d = int(self.delay[k_s])
        u_s = full_s[D - d : D - d + n]  # (n, S)
        y_s = T[k_s] @ u_s + self.apow[k_s, :n, None] * self.y_s[None, :]
        self.y = y[:, -1].copy()
        self.y_s = y_s[-1].copy()
        if D:
            self.ring = full[-D:].copy()
            self.ring_s = full_s[-D:].copy()
        return y, y_s

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {"lag_ring": self.ring, "lag_ring_s": self.ring_s, "lag_y": self.y, "lag_y_s": self.y_s,
                "lag_flags": np.array([float(self.started), float(self.k_s)])}

    def load_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        for key, arr in self.state_arrays().items():  # lag_flags: a fresh copy, read below
            arr[...] = arrays[key]
        self.started = bool(arrays["lag_flags"][0])
        self.k_s = int(arrays["lag_flags"][1])


# Candidates (lag candidates, residual-level memories) are scored over half a daily cycle: long
# enough to average a day's part of windows, short enough to follow a rack whose use changes.
SCORE_HALFLIFE_H = 12.0


def prequential_score(score: np.ndarray, err: np.ndarray, length_h: float, first: bool) -> np.ndarray:
    """Candidates' running score after one window of ``length_h`` hours with errors ``err``: an
    exponentially weighted mean over ``SCORE_HALFLIFE_H``, or the window's errors for the ``first``."""
    if first:
        return err
    lam = 0.5 ** (length_h / SCORE_HALFLIFE_H)
    out: np.ndarray = lam * score + (1.0 - lam) * err
    return out


def ew_bias(bias: np.ndarray, resid: np.ndarray, rows: np.ndarray, dur: np.ndarray,
            halflife_s: float | np.ndarray) -> np.ndarray:
    """Short-memory mean of the model's recent residual (W), per model column, over the valid bins:
    the level of slow disturbances no regressor explains (other racks on the unit, weather fronts),
    known at the window's start, so it may shift the next window's prediction."""
    halflife = np.broadcast_to(np.asarray(halflife_s, dtype=float), dur.shape)
    if not rows.any() or (halflife[rows] <= 0).any():
        return bias
    r = resid[rows]
    lam = 0.5 ** (dur[rows] / halflife[rows])  # per valid bin
    # weight of bin i in the new mean: (1 - lam_i) · Π_{j>i} lam_j
    tail = np.concatenate((np.cumprod(lam[::-1])[::-1][1:], [1.0]))
    w = (1.0 - lam) * tail
    out: np.ndarray = bias * float(np.prod(lam)) + (w[:, None] * r).sum(axis=0)
    return out
