"""CUSUM decision threshold from a false-alarm target.

The operator configures "at most N false alarms per 30 days" (``false_alarms_per_30d``); Siegmund's
approximation of a one-sided CUSUM's in-control run length, for unit-variance increments,

    ARL0(h) ≈ (exp(2k(h + 1.166)) − 2k(h + 1.166) − 1) / (2k²)

is solved for ``h``. Residuals are not Gaussian and blocks stay somewhat correlated, so the
monitor asks for a ``margin`` times longer run length.
"""

from __future__ import annotations

import math

SECONDS_PER_30D = 30.0 * 86400.0


def siegmund_arl0(h: float, k: float) -> float:
    """In-control average run length (in increments) of a one-sided CUSUM with threshold h."""
    a = 2.0 * k * (h + 1.166)
    return (math.exp(a) - a - 1.0) / (2.0 * k * k)


def cusum_threshold(arl0_target: float, k: float) -> float:
    """The smallest h with ``siegmund_arl0(h, k) >= arl0_target`` (bisection; monotone in h)."""
    if arl0_target <= 1.0:
        return 0.5
    low, high = 0.0, 1.0
    while siegmund_arl0(high, k) < arl0_target:
        high *= 2.0
        if high > 1e4:
            return high
    for _ in range(60):
        mid = 0.5 * (low + high)
        if siegmund_arl0(mid, k) < arl0_target:
            low = mid
        else:
            high = mid
    return high


def threshold_for_target(
    false_alarms_per_30d: float, block_s: float, n_detectors: int, k: float, margin: float
) -> float:
    """h such that ``n_detectors`` one-sided CUSUMs over blocks of ``block_s`` seconds together
    raise at most ``false_alarms_per_30d`` alarms per 30 days on healthy residuals."""
    if false_alarms_per_30d <= 0:
        raise ValueError(f"engine.false_alarms_per_30d must be > 0, got {false_alarms_per_30d}")
    blocks_per_30d = SECONDS_PER_30D / block_s
    arl0 = blocks_per_30d * n_detectors / false_alarms_per_30d * margin
    return cusum_threshold(arl0, k)
