"""``NodePowerModel``: what one powered node draws at the PDU beyond its GPUs, per stage, learned.

Why: splitting a bin's measured IT energy over the jobs needs each node's share. A node's AC power
is its GPU power through the PSUs plus a non-GPU part (CPUs, memory, NICs, storage, fans) that
depends on the stage: data loading and checkpoints keep CPUs and storage busy while the GPUs idle.
Splitting that part evenly over the nodes credits a checkpointing job with too little and a
training one with too much (several % per stage on the twin).

Model (per bin, mean powers): IT_w = k·G_w + Σ_s (b + d_s)·N_s, with G_w the rack's GPU power,
N_s the mean number of powered nodes in stage s, k IT watts per GPU watt, b the base per node and
d_s the stage's own extra. Learned by exponentially weighted least squares (half-life
``HALFLIFE_H``) with a ridge prior that holds k at the PSUs' typical loss and every d_s at 0 until
the data tells them apart (nodes of different jobs in different stages, stage mixes changing).
It only splits what was measured: the split always adds up to the bin's IT energy.

Fixed memory: one (2 + ``MAX_STAGES``)² normal matrix; stages beyond ``MAX_STAGES`` share the last
column (the engine keeps at most that many stage slots anyway).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agent.engine.stage_slots import N_SLOTS

# PSUs convert at 90–96 % across their load range (docs/DESIGN: 90 % at 10 % load, 96 % at 50 %,
# 91 % at 100 %): a GPU watt costs 1/0.93 ≈ 1.075 W at the PDU, the middle of that range.
IT_PER_GPU_W = 1.0 / 0.93
MAX_STAGES = N_SLOTS  # the engine's own bound on distinct stages
HALFLIFE_H = 24.0  # one daily cycle: node fans follow the room's temperature through the day
SCALE_W = 1000.0  # features in kW per node: every coefficient of order 1, so one ridge fits all
# Prior strength in bins' worth of evidence (a bin's features are of order 1 in these units): k and
# the stage extras move from their prior after ~6 minutes of bins that tell them apart.
RIDGE_BINS = 24.0
BASE_RIDGE = 1e-6  # b is unregularised (only kept solvable before the first bin)


class NodePowerModel:
    """k (IT per GPU watt) and per-stage non-GPU watts per node, from bins of measured IT power."""

    def __init__(self, bin_s: float) -> None:
        self.n = 2 + MAX_STAGES
        self.decay = 0.5 ** (bin_s / (HALFLIFE_H * 3600.0))
        self.stages: list[str] = []
        self._a = np.zeros((self.n, self.n))
        self._r = np.zeros(self.n)
        self._ridge = np.full(self.n, RIDGE_BINS)
        self._ridge[1] = BASE_RIDGE
        self._prior = np.zeros(self.n)
        self._prior[0] = IT_PER_GPU_W
        self.theta = self._prior.copy()
        self.bins = 0

    def column(self, stage: str) -> int:
        """The feature column of a stage label (new labels take the next free one, the last is shared)."""
        if stage in self.stages:
            return 2 + self.stages.index(stage)
        if len(self.stages) < MAX_STAGES:
            self.stages.append(stage)
            return 1 + len(self.stages)
        return self.n - 1

    def features(self, gpu_w: float, nodes_by_stage: dict[str, float], n_nodes: int) -> np.ndarray:
        x = np.zeros(self.n)
        per = SCALE_W * max(n_nodes, 1)
        x[0] = gpu_w / per
        for stage, nodes in nodes_by_stage.items():
            x[1] += nodes * SCALE_W / per
            x[self.column(stage)] += nodes * SCALE_W / per
        return x

    def learn(self, x: np.ndarray, it_w: float, n_nodes: int) -> None:
        """One bin: its features and its measured mean IT power."""
        if not math.isfinite(it_w) or not np.all(np.isfinite(x)):
            return
        y = it_w / (SCALE_W * max(n_nodes, 1))
        self._a *= self.decay
        self._r *= self.decay
        self._a += np.outer(x, x)
        self._r += x * y
        self.bins += 1
        a = self._a + np.diag(self._ridge)
        try:
            self.theta = np.linalg.solve(a, self._r + self._ridge * self._prior)
        except np.linalg.LinAlgError:
            return

    def node_w(self, stage: str) -> float:
        """The learned non-GPU power of one powered node in ``stage`` (W, ≥ 0)."""
        col = self.column(stage)
        return max(float(self.theta[1] + self.theta[col]), 0.0) * SCALE_W

    @property
    def k(self) -> float:
        return float(self.theta[0])

    def state(self) -> dict[str, Any]:
        return {"stages": list(self.stages), "a": self._a.tolist(), "r": self._r.tolist(), "bins": self.bins}

    def load(self, state: dict[str, Any]) -> None:
        a, r = np.asarray(state["a"], dtype=float), np.asarray(state["r"], dtype=float)
        if a.shape != (self.n, self.n) or r.shape != (self.n,) or not (np.all(np.isfinite(a)) and np.all(np.isfinite(r))):
            raise ValueError(f"node power model: expected finite {self.n}×{self.n} arrays")
        self.stages = [str(s) for s in state.get("stages", [])][:MAX_STAGES]
        self._a[...], self._r[...] = a, r
        self.bins = int(state.get("bins", 0))
        self.theta = np.linalg.solve(self._a + np.diag(self._ridge), self._r + self._ridge * self._prior)
