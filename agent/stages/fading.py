"""A fading running extreme: a reference level that follows the hardware and the job with one
carried value and its time instead of stored history."""

from __future__ import annotations

import numpy as np


def decaying_extreme(
    ts: np.ndarray, x: np.ndarray, carry: float, carry_ts: float, halflife_s: float, upper: bool
) -> np.ndarray:
    """Running max (or min) whose old values fade toward the present with the given half-life.

    max_{j<=i} x_j * d^(t_i - t_j) is computed in log space with one cumulative max, so a chunk
    of any length costs a few vector operations. For the min, the distance above the running
    minimum fades instead (min_{j<=i} x_j * d^-(t_i - t_j)), a symmetric slow release.
    """
    if ts.size == 0:
        return x.copy()
    t0 = float(ts[0])
    rel = ts - t0
    k = np.log(2.0) / halflife_s
    sign = 1.0 if upper else -1.0
    with np.errstate(all="ignore"):
        logx = np.where(np.isfinite(x) & (x > 0), sign * np.log(np.maximum(x, 1e-9)), -np.inf)
        base = logx + k * rel
        if np.isfinite(carry) and carry > 0 and np.isfinite(carry_ts):
            carry_log = sign * np.log(carry) + k * (carry_ts - t0)
            base = np.maximum(base, carry_log)
        cm = np.maximum.accumulate(base)
        out = np.exp(sign * (cm - k * rel))
    out[~np.isfinite(cm)] = np.nan
    faded: np.ndarray = out
    return faded


__all__ = ["decaying_extreme"]
