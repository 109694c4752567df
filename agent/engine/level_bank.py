"""``LevelBank``: the recent level of a model's residual, with its memory chosen per rack.

Why: a window's forecast adds the recent mean of the model's residual, the level of disturbances no
regressor sees (other racks on a shared cooling unit, the weather between its daily terms). How long
that mean should remember depends on the rack. The best memory of an exponential smoother follows
from how fast the level drifts against how noisy each reading is (the local-level Kalman filter),
and neither is known in advance: a unit polled every 30 s whose power wobbles by several % wants a
long memory (a 5-min mean of a few noisy readings carries their noise into the next window, so
consecutive windows' errors alternate in sign: development seed 29 of ``bench/drift.py
--randomized``, lag-1 autocorrelation −0.26 in a one-off trace of its windows), a unit whose other
racks swing within the hour wants a short one. So, as the lag bank does for the cooling lag, every
candidate memory runs side by side and each is scored prequentially on what it is for: the window's
mean residual, forecast from what was known at the window's start. The score is the mean *absolute*
error: the report judges a quantile of absolute window errors, and squared errors let the few
windows no level can forecast (a job starting mid-window) choose the memory for all the others (on
the 8-node twin without GPU telemetry, development seeds 0–4 of ``bench/multinode.py``, P95 per seed
8.65 / 9.01 / 17.11 / 10.17 / 17.60 % scored squared, 6.97 / 8.83 / 16.96 / 10.17 / 12.52 % scored
absolute). Fixed memory: two (columns × candidates) arrays.
"""

from __future__ import annotations

import numpy as np

from agent.engine.response import ew_bias, prequential_score

# Candidate memories (half-lives, s): no level (the model alone), then a geometric ladder (×3–4)
# from a few bins to a few windows; the ladder spans the choices, it is not tuned to a rack.
HALFLIVES_S = (0.0, 300.0, 900.0, 3600.0, 4 * 3600.0)


class LevelBank:
    """Per model column: the residual's recent level under each candidate memory, and each one's
    prequential score (an exponentially weighted mean absolute error of the window-mean forecast)."""

    def __init__(self, columns: int, default_halflife_s: float) -> None:
        self.halflives_s = np.array(HALFLIVES_S)
        self.default = int(np.argmin(np.abs(self.halflives_s - default_halflife_s)))
        self.bias = np.zeros((columns, len(HALFLIVES_S)))  # W, per column and candidate
        self.score = np.zeros((columns, len(HALFLIVES_S)))  # W, per column and candidate
        self.scored = np.zeros(1)  # windows scored (an array: part of the fixed-shape state)

    @property
    def choice(self) -> np.ndarray:
        """Per column, the candidate in use: the best scored, the default until a window was scored."""
        if self.scored[0] < 1:
            return np.full(self.bias.shape[0], self.default)
        return np.asarray(np.argmin(self.score, axis=1))

    @property
    def level(self) -> np.ndarray:
        """Per column, the residual level (W) the next window's forecast adds."""
        return np.asarray(self.bias[np.arange(self.bias.shape[0]), self.choice])

    def update(self, resid: np.ndarray, rows: np.ndarray, dur: np.ndarray, length_h: float,
               score: bool, memory_s: np.ndarray | None = None) -> None:
        """A closed window's residuals (W, bins × columns) over its valid ``rows``: with ``score``,
        each candidate is first scored on how well its level at the window's start forecast the
        window's mean residual; then every candidate's level follows the window's bins. ``memory_s``
        (per bin, NaN where the candidate's own applies) gives bins whose level is known to need
        another memory that memory in every candidate but "no level"."""
        if not rows.any():
            return
        if score:
            w = dur[rows]
            mean = (w[:, None] * resid[rows]).sum(axis=0) / w.sum()
            err = np.abs(mean[:, None] - self.bias)
            self.score = prequential_score(self.score, err, length_h, first=self.scored[0] < 1)
            self.scored[0] += 1.0
        for j, halflife_s in enumerate(self.halflives_s):
            if halflife_s > 0:
                memory = halflife_s if memory_s is None else np.where(np.isnan(memory_s), halflife_s,
                                                                      memory_s)
                self.bias[:, j] = ew_bias(self.bias[:, j], resid, rows, dur, memory)

    def state_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        return {f"level_{prefix}": self.bias, f"level_{prefix}_score": self.score,
                f"level_{prefix}_scored": self.scored}

    def load_arrays(self, prefix: str, a: dict[str, np.ndarray],
                    before_bank: np.ndarray | None = None) -> None:
        """The inverse of ``state_arrays``. A state saved before the bank held one level per column
        (``before_bank``, at the default memory): every candidate starts from it, none scored."""
        if f"level_{prefix}" not in a:
            if before_bank is None:
                raise KeyError(f"level_{prefix}")
            self.bias[...] = np.asarray(before_bank).reshape(-1, 1)
            self.score[...] = 0.0
            self.scored[...] = 0.0
            return
        self.bias[...] = a[f"level_{prefix}"]
        self.score[...] = a[f"level_{prefix}_score"]
        self.scored[...] = a[f"level_{prefix}_scored"]
