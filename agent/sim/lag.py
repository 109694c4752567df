"""First-order lag and dead time, vectorised and exact for a 1-s step.

``y[n] = a·y[n-1] + (1-a)·x[n]``, ``a = exp(-dt/τ)``, exact for ``τ·dy/dt = x − y`` with the input held
over each step, evaluated as a scaled cumulative sum in blocks short enough that ``a**-n`` never overflows.
"""

from __future__ import annotations

import numpy as np


def first_order_lag(x: np.ndarray, tau_s: float, y0: np.ndarray | float, dt_s: float = 1.0) -> np.ndarray:
    """Filter ``x`` (time on axis 0, any trailing shape) through a first-order lag from state ``y0``."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    out = np.empty_like(x)
    y_prev = np.broadcast_to(np.asarray(y0, dtype=np.float64), x.shape[1:]).copy()
    if n == 0:
        return out
    if tau_s <= 0:
        return x.copy()
    a = float(np.exp(-dt_s / tau_s))
    block = max(1, min(n, int(300.0 * tau_s / dt_s)))  # a**-block ≤ e**300
    for start in range(0, n, block):
        seg = x[start : start + block]
        m = seg.shape[0]
        k = np.arange(1, m + 1, dtype=np.float64)
        shape = (m,) + (1,) * (x.ndim - 1)
        grow = np.exp(k * dt_s / tau_s).reshape(shape)  # a**-k
        shrink = np.exp(-k * dt_s / tau_s).reshape(shape)  # a**k
        acc = np.cumsum(seg * grow, axis=0)
        seg_out = shrink * (y_prev + (1.0 - a) * acc)
        out[start : start + m] = seg_out
        y_prev = seg_out[-1].copy()
    return out


def delay(x: np.ndarray, history: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Shift ``x`` later by ``len(history)`` steps; returns (delayed x, new history)."""
    if history.shape[0] == 0:
        return x.copy(), history
    joined = np.concatenate((history, x), axis=0)
    return joined[: x.shape[0]], joined[x.shape[0] :].copy()
