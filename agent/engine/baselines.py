"""Per-stage baseline library: one row of ``COLS`` per stage slot, plus a bounded table of (job, stage)
rows (least recently updated evicted). Rows are updated per drift bin with each stage's attributed
power (``stage_attribution``) by EW means and stochastic-approximation quantiles: fixed memory.
Powers in W; ``updated`` in Unix seconds.
"""

from __future__ import annotations

import math

import numpy as np

COLS: tuple[str, ...] = ("n", "level_w", "p10_w", "p90_w", "absdev_w", "gpu_w", "it_w", "cooling_w", "ratio",
                         "updated")
C = {name: i for i, name in enumerate(COLS)}
N_JOB_ROWS = 32
JOB_WIDTH = 64


class BaselineLibrary:
    """Fixed table: ``stats`` (slots × COLS) and ``job_stats`` (N_JOB_ROWS × COLS)."""

    def __init__(self, n_slots: int, learning_rate: float) -> None:
        self.learning_rate = learning_rate
        self.stats = np.zeros((n_slots, len(COLS)))
        self.job_stats = np.zeros((N_JOB_ROWS, len(COLS)))
        self.job_key = np.full(N_JOB_ROWS, "", dtype=f"<U{JOB_WIDTH}")
        self.job_slot = np.full(N_JOB_ROWS, -1, dtype=np.int64)

    def reset_slot(self, slot: int) -> None:
        self.stats[slot] = 0.0
        drop = self.job_slot == slot
        self.job_stats[drop] = 0.0
        self.job_key[drop] = ""
        self.job_slot[drop] = -1

    def update(self, slot: int, job: str, ts: float, fac_w: float, gpu_w: float, it_w: float,
               cooling_w: float) -> None:
        if not math.isfinite(fac_w):
            return
        _update_row(self.stats[slot], self.learning_rate, ts, fac_w, gpu_w, it_w, cooling_w)
        if job:
            row = self._job_row(job, slot)
            _update_row(self.job_stats[row], self.learning_rate, ts, fac_w, gpu_w, it_w, cooling_w)

    def _job_row(self, job: str, slot: int) -> int:
        key = job[:JOB_WIDTH]
        hit = np.flatnonzero((self.job_key == key) & (self.job_slot == slot))
        if hit.size:
            return int(hit[0])
        free = np.flatnonzero(self.job_slot < 0)
        row = int(free[0]) if free.size else int(np.argmin(self.job_stats[:, C["updated"]]))
        self.job_stats[row] = 0.0
        self.job_key[row] = key
        self.job_slot[row] = slot
        return row

    def row(self, slot: int) -> dict[str, float]:
        return {name: float(v) for name, v in zip(COLS, self.stats[slot], strict=True)}

    def job_rows(self, job: str) -> dict[int, dict[str, float]]:
        """One job's rows by stage slot (every stage the job has a row for; no filter on its level)."""
        out: dict[int, dict[str, float]] = {}
        for r in np.flatnonzero(self.job_key == job[:JOB_WIDTH]):
            slot = int(self.job_slot[r])
            out[slot] = {name: float(v) for name, v in zip(COLS, self.job_stats[r], strict=True)}
        return out

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {"bl_stats": self.stats, "bl_job_stats": self.job_stats, "bl_job_key": self.job_key,
                "bl_job_slot": self.job_slot}

    def load_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        for key, arr in self.state_arrays().items():
            arr[...] = arrays[key]


def _update_row(row: np.ndarray, lr: float, ts: float, fac_w: float, gpu_w: float, it_w: float,
                cooling_w: float) -> None:
    n = row[C["n"]] + 1.0
    row[C["n"]] = n
    a = max(1.0 / n, lr)
    if n == 1.0:
        row[C["level_w"]] = row[C["p10_w"]] = row[C["p90_w"]] = fac_w
        row[C["absdev_w"]] = 0.02 * abs(fac_w)
        row[C["gpu_w"]] = gpu_w if math.isfinite(gpu_w) else 0.0
        row[C["it_w"]] = it_w if math.isfinite(it_w) else 0.0
        row[C["cooling_w"]] = cooling_w if math.isfinite(cooling_w) else 0.0
    else:
        level = row[C["level_w"]]
        row[C["absdev_w"]] += a * (abs(fac_w - level) - row[C["absdev_w"]])
        row[C["level_w"]] += a * (fac_w - level)
        step = max(a, lr) * 2.0 * max(row[C["absdev_w"]], 1e-6)
        row[C["p10_w"]] += step * (0.1 - (fac_w < row[C["p10_w"]]))
        row[C["p90_w"]] += step * (0.9 - (fac_w < row[C["p90_w"]]))
        for col, v in (("gpu_w", gpu_w), ("it_w", it_w), ("cooling_w", cooling_w)):
            if math.isfinite(v):
                row[C[col]] += a * (v - row[C[col]])
    if row[C["gpu_w"]] > 0:
        row[C["ratio"]] = row[C["level_w"]] / row[C["gpu_w"]]
    row[C["updated"]] = ts
