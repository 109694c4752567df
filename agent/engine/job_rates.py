"""Each job's own work-rate scales: jobs report throughput in their own units (samples/s, tokens/s),
so a rate means something only relative to that job's own rates.

Two scales per job: its peak (the highest bin-mean rate seen), and its usual rate (a running median
of its bin-mean rates). The peak is what the per-stage slopes of the stage-only IT model read; the
usual rate is what the rate curve reads where no stage is known (``response.RATE_KNOTS``): it is the
training rate from a job's first minutes on, where the peak is that rate until the job's first
evaluation pass (faster than training) raises it.

Fixed memory: the scales of the last ``CAPACITY`` jobs seen; an older job that comes back starts
again from its first rate.
"""

from __future__ import annotations

import math

import numpy as np

CAPACITY = 32  # more concurrent or alternating jobs than a rack runs between two restarts
# The usual rate steps by 2 % of itself toward each new bin's rate (a sign step: a running median):
# one odd bin moves it by 2 %, and it follows a drift of the rate within ~50 bins (12 min of 15-s bins).
USUAL_STEP = 0.02
# A job's first bins carry its start-up: data loading, rates rising from 0 in bins only partly
# rated. A median started from them would need hours of 2 % steps to reach the training rate, so for
# its first 20 rated bins (5 min of 15-s bins: the start-up the twin and real loaders take) the usual
# rate is the highest rate so far — the training rate, as the first evaluation comes later.
USUAL_SETTLE_BINS = 20


class JobRates:
    """Per job, the peak and the usual bin-mean work rate (causal: each bin's own and earlier rates)."""

    def __init__(self) -> None:
        self._scales: dict[str, tuple[float, float, int]] = {}  # job → (peak, usual, rated bins)

    def normalised(
        self, jobs: list[str], rates: np.ndarray, learn: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """``rates`` (nan where unknown) over each bin's job peak and over its usual rate; 0 where unknown.

        ``learn``: the scales take these bins in (the first pass over them, the forecast's); without
        it they are read as they are (learning reads the same bins again at the window's close).
        """
        peak_n, usual_n = np.zeros(len(rates)), np.zeros(len(rates))
        for i, (job, rate) in enumerate(zip(jobs, rates, strict=True)):
            if not math.isfinite(rate) or rate <= 0:
                continue
            peak, usual, seen = self._scales.pop(job, (0.0, float(rate), 0))
            if learn:
                peak = max(peak, float(rate))
                settled = seen >= USUAL_SETTLE_BINS
                usual = usual + USUAL_STEP * usual * float(np.sign(rate - usual)) if settled else peak
                seen += 1
            self._scales[job] = (peak, usual, seen)  # re-inserted: most recently used last
            if len(self._scales) > CAPACITY:
                del self._scales[next(iter(self._scales))]
            peak_n[i] = rate / max(peak, float(rate))
            usual_n[i] = rate / usual
        return peak_n, usual_n

    def state(self) -> dict[str, list[float]]:
        return {job: [peak, usual, float(seen)] for job, (peak, usual, seen) in self._scales.items()}

    def load(self, state: dict[str, float | list[float]]) -> None:
        """Restore ``state``; a state saved with peaks only starts each job's usual rate at its peak
        (settled: those jobs have run for a while)."""
        out: dict[str, tuple[float, float, int]] = {}
        for job, v in list(state.items())[-CAPACITY:]:
            if isinstance(v, list):
                out[str(job)] = (float(v[0]), float(v[1]), int(v[2]))
            else:
                out[str(job)] = (float(v), float(v), USUAL_SETTLE_BINS)
        self._scales = out
