"""The GPU load as the PDU feeds' samples see it: the GPU moments at each feed's sampling instants,
held like the feed's own power.

Why: a window's measured IT energy integrates held PDU samples (trace-format.md). A feed polled every
5–30 s sees training's seconds-scale swings at its own instants only, so its window energy can be off
the true one by several % — systematically where the step period and the poll interval are near
multiples (stroboscopic). How far the GPU load at those instants is from the bin's own moments enters
the IT regression as two regressors (response.it_features: d, d₂), whose learned coefficients say how
much of it the readings show: the forecast then follows what the feeds will measure, and measured −
predicted is the rack's own deviation, not the meter's (the drift monitor's IT residual too). Where a
feed's energy meter gives the span's exact mean power (meter_power.py) the feed saw every second, and
the GPUs' own interval moments stand.

Only the samples' *times* are used, never their values: no PDU value from inside a window drives its
prediction (report spec). The feeds are weighted equally: an A/B pair carries the rack half each.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agent.engine.drift.estimators import finite_or_none, number_or_nan
from agent.engine.frames import Held

MOMENTS = 2  # the GPU load's 1st and 2nd moments: what the IT model reads of the feeds' view (d, d₂)


class FeedLoad:
    """Per PDU feed, the GPU moments at its last sample before the rows now emitted (fixed state:
    ``MOMENTS`` numbers per feed)."""

    def __init__(self) -> None:
        self.carried: dict[str, np.ndarray] = {}

    def moments(self, g_rows: np.ndarray, g_intervals: np.ndarray, feeds: dict[str, Held],
                metered: dict[str, np.ndarray]) -> np.ndarray:
        """Per emitted interval, the GPU moments (m × ``MOMENTS``) the feeds' held samples saw,
        averaged over the feeds; NaN where a feed's power is unknown (as the PDU sum is) or the GPU
        load at its sample is.

        ``g_rows``: (n × ``MOMENTS``) the moments held at each row's time (needed at the feeds'
        sample rows only); ``g_intervals``: the intervals' own moments; ``feeds``: each feed's hold
        of its power; ``metered``: per feed, the intervals whose power came from its energy meter."""
        m = g_intervals.shape[0]
        if not feeds:
            return np.full((m, MOMENTS), np.nan)
        total = np.zeros((m, MOMENTS))
        for name, held in feeds.items():
            carried = self.carried.get(name, np.full(MOMENTS, np.nan))
            rows = np.concatenate(([-1], held.last_sample[:-1]))  # interval i holds row i-1's last sample
            seen = np.where((rows >= 0)[:, None], g_rows[np.maximum(rows, 0)], carried[None, :])
            if name in metered:
                seen = np.where(metered[name][:, None], g_intervals, seen)
            total += np.where(np.isnan(held.values)[:, None], np.nan, seen)
            if held.last_sample.size and held.last_sample[-1] >= 0:  # the next rows' first interval holds it
                self.carried[name] = g_rows[held.last_sample[-1]].copy()
        return total / len(feeds)

    def state(self) -> dict[str, Any]:
        return {name: [finite_or_none(float(v)) for v in g] for name, g in self.carried.items()}

    def load(self, state: dict[str, Any]) -> None:
        """The inverse of ``state``; a feed whose entry is not ``MOMENTS`` numbers starts unknown."""
        self.carried = {
            str(name): np.array([number_or_nan(v) for v in values])
            for name, values in (state or {}).items()
            if isinstance(values, list) and len(values) == MOMENTS
        }
