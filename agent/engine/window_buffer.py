"""The bins of the current window, kept until the window closes (then the model learns from them).

Preallocated for ``n_bins`` rows: the bin sums, the stage seconds, and what the frozen model
predicted for each bin (IT, heat, lagged heat and cooling for every lag candidate). Learning
happens only when the window closes, so every prediction inside a window is made with the model
as it was at the window's start (prequential evaluation, no look-ahead into PDU/CRAC samples).
"""

from __future__ import annotations

import numpy as np

from agent.engine.frames import N_FIELDS, F, widen_saved_sums

HELD = ("it", "cooling", "gpu")


class WindowBuffer:
    def __init__(self, n_bins: int, n_slots: int, n_cand: int) -> None:
        self.n_bins = n_bins
        self.n = 0
        self.start = np.zeros(n_bins)
        self.sums = np.zeros((n_bins, N_FIELDS))
        self.stage_s = np.zeros((n_bins, n_slots))
        self.stage_gpu_s = np.zeros((n_bins, n_slots))  # per stage: seconds with GPU power known
        self.stage_gpu_ws = np.zeros((n_bins, n_slots))  # per stage: GPU energy (W·s)
        self.it_pred_w = np.zeros(n_bins)
        self.heat_w = np.zeros(n_bins)
        self.hl_w = np.zeros((n_bins, n_cand))
        self.cool_pred_w = np.zeros((n_bins, n_cand))
        self.gpu_exp_w = np.zeros(n_bins)
        self.transient = np.zeros(n_bins, dtype=bool)
        self.held = np.zeros((n_bins, len(HELD)), dtype=bool)
        self.jobs: list[str] = [""] * n_bins
        self.gpu_lag_w = np.zeros(n_bins)
        self.gpu_temp_c = np.zeros(n_bins)

    def clear(self) -> None:
        self.n = 0

    def append(
        self,
        start: np.ndarray,
        sums: np.ndarray,
        stage_s: np.ndarray,
        jobs: list[str],
        it_pred_w: np.ndarray,
        heat_w: np.ndarray,
        hl_w: np.ndarray,
        cool_pred_w: np.ndarray,
        gpu_exp_w: np.ndarray,
        transient: np.ndarray,
        held: np.ndarray,
        gpu_lag_w: np.ndarray,
        gpu_temp_c: np.ndarray,
        stage_gpu_s: np.ndarray,
        stage_gpu_ws: np.ndarray,
    ) -> slice:
        a = self.n
        b = a + start.shape[0]
        if b > self.n_bins:
            raise ValueError(f"window buffer overflow: {b} bins > {self.n_bins}")
        self.start[a:b] = start
        self.sums[a:b] = sums
        self.stage_s[a:b] = stage_s
        self.it_pred_w[a:b] = it_pred_w
        self.heat_w[a:b] = heat_w
        self.hl_w[a:b] = hl_w.T
        self.cool_pred_w[a:b] = cool_pred_w.T
        self.gpu_exp_w[a:b] = gpu_exp_w
        self.transient[a:b] = transient
        self.held[a:b] = held
        self.jobs[a:b] = jobs
        self.gpu_lag_w[a:b] = gpu_lag_w
        self.gpu_temp_c[a:b] = gpu_temp_c
        self.stage_gpu_s[a:b] = stage_gpu_s
        self.stage_gpu_ws[a:b] = stage_gpu_ws
        self.n = b
        return slice(a, b)

    def col(self, name: str, sl: slice | None = None) -> np.ndarray:
        return self.sums[sl or slice(0, self.n), F[name]]

    def mean(self, ws: str, s: str, sl: slice, min_frac: float = 0.5) -> float:
        """Time-mean of a quantity over rows ``sl`` (NaN if known for < ``min_frac`` of the time)."""
        known = float(self.sums[sl, F[s]].sum())
        dur = float(self.sums[sl, F["dur_s"]].sum())
        if dur <= 0 or known < min_frac * dur:
            return float("nan")
        return float(self.sums[sl, F[ws]].sum()) / known

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {
            "wb_n": np.array([float(self.n)]),
            "wb_start": self.start,
            "wb_sums": self.sums,
            "wb_stage_s": self.stage_s,
            "wb_it": self.it_pred_w,
            "wb_heat": self.heat_w,
            "wb_hl": self.hl_w,
            "wb_cool": self.cool_pred_w,
            "wb_gexp": self.gpu_exp_w,
            "wb_tr": self.transient,
            "wb_held": self.held,
            "wb_gl": self.gpu_lag_w,
            "wb_gt": self.gpu_temp_c,
            "wb_stage_gs": self.stage_gpu_s,
            "wb_stage_gws": self.stage_gpu_ws,
        }

    def load_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        for key, arr in self.state_arrays().items():
            if key == "wb_sums":
                arr[...] = widen_saved_sums(arrays[key])
            elif key != "wb_n":
                arr[...] = arrays[key]
        self.n = int(arrays["wb_n"][0])
        self.jobs = [""] * self.n_bins
