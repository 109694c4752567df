"""Each job's own work-rate scale: jobs report throughput in their own units (samples/s, tokens/s),
so a rate means something only relative to that job's usual rate.

Fixed memory: the scales of the last ``CAPACITY`` jobs seen; an older job that comes back starts
again from its first rate.
"""

from __future__ import annotations

import math

import numpy as np

CAPACITY = 32  # more concurrent or alternating jobs than a rack runs between two restarts


class JobRates:
    """Per job, the highest bin-mean work rate seen (a running maximum: causal, and load side)."""

    def __init__(self) -> None:
        self._peak: dict[str, float] = {}

    def normalised(self, jobs: list[str], rates: np.ndarray) -> np.ndarray:
        """``rates`` (nan where unknown) over each bin's job scale, updating the scales; 0 where unknown."""
        out = np.zeros(len(rates))
        for i, (job, rate) in enumerate(zip(jobs, rates, strict=True)):
            if not math.isfinite(rate) or rate <= 0:
                continue
            peak = max(self._peak.pop(job, 0.0), float(rate))
            self._peak[job] = peak  # re-inserted: most recently used last
            if len(self._peak) > CAPACITY:
                del self._peak[next(iter(self._peak))]
            out[i] = rate / peak
        return out

    def state(self) -> dict[str, float]:
        return dict(self._peak)

    def load(self, state: dict[str, float]) -> None:
        self._peak = {str(k): float(v) for k, v in list(state.items())[-CAPACITY:]}
