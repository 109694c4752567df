"""Each job's own work-rate scales: jobs report throughput in their own units (samples/s, tokens/s),
so a rate means something only relative to that job's own rates.

Per job: its peak (the highest bin-mean rate seen; the stage-only IT model's per-stage slopes read
it) and its usual rate (a running median of its bin-mean rates; the rate curve where no stage is
known reads it: the training rate from a job's first minutes on, where the peak is that only until
the job's first evaluation pass raises it). Fixed memory: the last ``CAPACITY`` jobs.
"""

from __future__ import annotations

import math

import numpy as np

CAPACITY = 32  # more concurrent or alternating jobs than a rack runs between two restarts
# The usual rate steps by 2 % of itself toward each bin's rate (a running median): one odd bin moves
# it by 2 %, and it follows a drift of the rate within ~50 bins (12 min of 15-s bins).
USUAL_STEP = 0.02
# A job's first bins are its start-up (rates rising from 0), from which a median would need hours to
# reach the training rate: for its first 20 rated bins (5 min of 15-s bins) the usual rate is the
# highest rate so far (the training rate: the first evaluation comes later).
USUAL_SETTLE_BINS = 20


class JobRates:
    """Per job, the peak and the usual bin-mean work rate (causal: each bin's own and earlier rates)."""

    def __init__(self) -> None:
        self._scales: dict[str, tuple[float, float, int]] = {}  # job → (peak, usual, rated bins)

    def normalised(self, jobs: list[str], rates: np.ndarray,
                   learn: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """``rates`` (nan where unknown) over each bin's job peak and over its usual rate; 0 where unknown.
        ``learn``: the scales take these bins in (False: read them again, as learning does at the close)."""
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
