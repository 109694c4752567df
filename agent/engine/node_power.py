"""``NodePowerModel``: what each powered node of a rack draws at the PDU, learned from the rack's bins.

Why: splitting a bin's measured IT energy over the jobs needs each node's share. A node's AC power
is its GPU power through the PSUs plus a non-GPU part (CPUs, memory, NICs, storage, fans) that
depends on the stage — data loading and checkpoints keep CPUs and storage busy while the GPUs
idle. Splitting the non-GPU part evenly credits a checkpointing job with too little and a
training one with too much.

Model, per bin and node n (mean powers; G_n the node's GPU power, t_n its share of the bin
powered, t_{n,s} in stage s): P_n = k·G_n + b·t_n + Σ_s d_s·t_{n,s}. k: IT watts per GPU watt
(the PSUs' loss plus the server fans that speed up with the GPU heat), kept in [K_MIN, K_MAX] as
stage_attribution does; b: the base per powered node; d_s: stage s's own non-GPU extra. Only
Σ_n P_n is measured (the PDUs), so k, b and d_s come from exponentially weighted least squares
over bins (``response.EWLS``, half-life ``HALFLIFE_H``) with a ridge prior that holds k at the
PSUs' typical loss and every d_s at 0 until the data tells them apart (nodes of different jobs
in different stages, stage mixes changing). A stage whose GPU power hardly varies leaves k and its d_s partly
interchangeable; the split of a node's total is what the bench scores. Tried and left out: terms
in the node's GPU power squared and cubed (PSU I²R loss, fan cube law): from rack-level sums they
were not identifiable and made the twin's per-job split worse (bench/job_energy.py).
It only splits what was measured: the split always adds up to the bin's IT energy.

Stages are the engine's stage slots (``stage_slots.StageSlots``, the one table of stage labels):
one column per slot, reset with the slot when the table evicts its label.

Fixed memory: one (``FIRST_STAGE`` + ``N_SLOTS``)² normal matrix.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agent.engine.response import EWLS
from agent.engine.stage_attribution import K_MAX, K_MIN
from agent.engine.stage_slots import N_SLOTS

# PSUs convert at 90–96 % across their load range (docs/DESIGN: 90 % at 10 % load, 96 % at 50 %,
# 91 % at 100 %): a GPU watt costs 1/0.93 ≈ 1.075 W at the PDU, the middle of that range.
IT_PER_GPU_W = 1.0 / 0.93
HALFLIFE_H = 24.0  # one daily cycle: node fans follow the room's temperature through the day
SCALE_W = 1000.0  # features in kW per node: every coefficient of order 1, so one ridge fits all
# Prior strength in bins' worth of evidence (a bin's features are of order 1 in these units). A
# stage's column is its share of the nodes, 0.1–0.5 per bin, so 24 is half an hour to an hour of
# bins in which that stage ran: stages that always alternate together (forward/backward and
# grad_sync) stay near the prior instead of trading watts between them (bench/job_energy.py: a
# prior of 4 bins doubled the twin's worst stage error).
RIDGE_BINS = 24.0
FIRST_STAGE = 2  # columns: k (GPU W), b (powered nodes), then one per stage
# The coefficients move with a day's half-life: solving every 20 bins (5 min of 15-s bins) changes
# them by < 0.3 % between solves and keeps the solve off the per-bin path of a month-long replay.
SOLVE_EVERY_BINS = 20
BASE_RIDGE = 1e-6  # b is unregularised (only kept solvable before the first bin)


class NodePowerModel:
    """IT watts per GPU watt and non-GPU watts of a powered node (base, per stage), learned."""

    def __init__(self, bin_s: float) -> None:
        self.n = FIRST_STAGE + N_SLOTS
        self.decay = 0.5 ** (bin_s / (HALFLIFE_H * 3600.0))
        ridge = np.full(self.n, RIDGE_BINS)
        ridge[1] = BASE_RIDGE
        self._fit = EWLS(1, self.n, ridge)  # solved with its ridge anchored at the prior, not the last fit
        self._prior = np.zeros((1, self.n))
        self._prior[0, 0] = IT_PER_GPU_W
        self._fit.theta[...] = self._prior
        self.bins = 0

    @property
    def theta(self) -> np.ndarray:
        """The coefficients [k, b, d_0 … d_S-1] in ``SCALE_W`` units (k unbounded)."""
        out: np.ndarray = self._fit.theta[0]
        return out

    def reset_slot(self, slot: int) -> None:
        """Forget what was learned for a stage slot (its label was evicted from the slot table)."""
        col = FIRST_STAGE + slot
        self._fit.R[0, col, :] = 0.0
        self._fit.R[0, :, col] = 0.0
        self._fit.r[0, col] = 0.0
        self._fit.solve(self._prior)

    def features(self, gpu_w: float, on: np.ndarray, nodes_by_slot: np.ndarray, n_nodes: int) -> np.ndarray:
        """One bin's features: the rack's GPU power (W), each node's powered share of the bin
        (``on``) and the powered nodes in each stage slot (``nodes_by_slot``, means over the bin)."""
        x = np.empty(self.n)
        per = SCALE_W * max(n_nodes, 1)
        x[0] = gpu_w / per
        x[1] = float(on.sum()) * SCALE_W / per
        x[FIRST_STAGE:] = nodes_by_slot * SCALE_W / per
        return x

    def node_weights(self, gpu_ws: np.ndarray, on_s: np.ndarray) -> np.ndarray:
        """Each node's modelled energy over a bin (J) without its stages' extras: k·G + b·t."""
        out: np.ndarray = self.k * gpu_ws + float(self.theta[1]) * SCALE_W * on_s
        return out

    @property
    def k(self) -> float:
        """IT watts per GPU watt, within [K_MIN, K_MAX]: PSUs lose, and by a bounded amount."""
        return min(max(float(self.theta[0]), K_MIN), K_MAX)

    def stage_w(self, slot: int | np.ndarray) -> np.ndarray:
        """The learned non-GPU extra of a powered node in stage slot(s) ``slot`` (W)."""
        out: np.ndarray = self.theta[FIRST_STAGE + np.asarray(slot, dtype=np.int64)] * SCALE_W
        return out

    def learn(self, x: np.ndarray, it_w: float, n_nodes: int) -> None:
        """One bin: its features and its measured mean IT power (W)."""
        if not math.isfinite(it_w) or not np.all(np.isfinite(x)):
            return
        y = it_w / (SCALE_W * max(n_nodes, 1))
        self._fit.add_row(x, y, self.decay)
        self.bins += 1
        if self.bins <= SOLVE_EVERY_BINS or self.bins % SOLVE_EVERY_BINS == 0:
            self._fit.solve(self._prior)

    def state(self) -> dict[str, Any]:
        return {"a": self._fit.R[0].tolist(), "r": self._fit.r[0].tolist(), "bins": self.bins}

    def load(self, state: dict[str, Any]) -> None:
        a, r = np.asarray(state["a"], dtype=float), np.asarray(state["r"], dtype=float)
        finite = bool(np.all(np.isfinite(a)) and np.all(np.isfinite(r)))
        if a.shape != (self.n, self.n) or r.shape != (self.n,) or not finite:
            raise ValueError(f"node power model: expected finite {self.n}×{self.n} arrays")
        self._fit.R[0], self._fit.r[0] = a, r
        self.bins = int(state.get("bins", 0))
        self._fit.solve(self._prior)
