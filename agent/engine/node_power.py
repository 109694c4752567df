"""``NodePowerModel``: what each powered node of a rack draws at the PDU, per (job, stage), learned
from the rack's PDU readings; the weights that split a window's measured IT energy over the jobs.

Per node n at an instant (G_n its GPU power, c its (job, stage) cell, s its stage):
``P_n = k·G_n + f(L_n) + b + d_s + e_c``: k IT watts per GPU watt (PSU losses, kept in [K_MIN,
K_MAX]); f the node's fans, a cubic in L_n, its GPU power through the fans' lag (``FAN_LAG_S``: a
fan's speed follows its heat sinks' heat, its power ∝ speed³); b a powered node's base, d_s stage
s's extra pooled over the jobs, e_c the cell's own deviation (jobs differ per stage: one job's
grad_sync node drew 650 W more beside its GPUs than another's). A ridge prior holds k at the PSUs'
typical loss and f, d_s, e_c at 0 until the data tells them apart.

Why the fans: the rack's readings see only the sum over nodes, and the cells of two node groups
that run their own jobs side by side add up to the same node count at every instant, so how much
each group draws beside its GPUs is told apart only by the shape of the model. Without the fans'
curve, a heavy job's fan watts had to sit in its cells' deviations, which the prior shrinks toward
the other group's: development seed 18 of bench/job_energy.py credited the heavy group's jobs −2.4 %
and the light group's +4.8 %; with the curve −0.3 / +0.4 % (19c4ea0; docs/engine.md, "Per-job stage energy").
What no GPU feature carries: fans that also speed up for a warm inlet (the air at the rack's bottom
of development seed 12 was 5 K over the fan table's knee) draw per node group, not per GPU watt.

It learns from each PDU feed's instantaneous readings (``add_readings``), not from bin energies:
a feed polled every 20–30 s smears a bin's energy over its neighbours and hides stages that
alternate within seconds; a reading is an exact snapshot. A reading is divided by its feed's share
of the rack (``FeedShares``) at every solve, with the shares as they then stand: the normal
equations keep each feed's readings in its own right-hand side, so a rack's first hours are not
learned against the first minutes' estimate of the shares (development seed 16 of
bench/job_energy.py: divided once, on arrival, the first job's grad_sync cell came out +3.5 % even
with the whole day's model; with the day's shares from the start, +0.75 %, a one-off run). Fixed
memory: one (``FIRST_STAGE`` + ``N_SLOTS`` + ``MODEL_CELLS``)² normal matrix, one right-hand side
per PDU feed and the cell table.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

import numpy as np

from agent.engine.response import EWLS, FAN_LAG_S
from agent.engine.stage_attribution import K_MAX, K_MIN
from agent.engine.stage_slots import N_SLOTS

# PSUs convert at 90–96 % across their load range (docs/DESIGN: 90 % at 10 % load, 96 % at 50 %,
# 91 % at 100 %): a GPU watt costs 1/0.93 ≈ 1.075 W at the PDU, the middle of that range.
IT_PER_GPU_W = 1.0 / 0.93
HALFLIFE_H = 24.0  # one daily cycle: node fans follow the room's temperature through the day
SCALE_W = 1000.0  # features in kW per node: every coefficient of order 1, so one ridge fits all
# Prior strength in bins' worth of readings: a column is its share of the nodes (0.1–0.5), so 1 is
# 30 s – 2.5 min of a stage (or cell), a few PDU readings (every 5–30 s), before the data outweighs the
# prior: the prior keeps a column solvable until it has been read, it does not decide a short stage.
# (Offline, dev seeds 1–2, before the fans' curve: 24 held a job's brief data loading at the prior,
# cells off by 8 %; 1 let fast-alternating stages trade watts. With the curve, bench/job_energy.py on
# dev seeds 0–49, 4 → 1: (job, stage) cells within 2 % on 18 → 34 seeds, docs/engine.md.)
RIDGE_BINS = 1.0
FIRST_FAN = 2  # columns: k (GPU W), b (powered nodes), the fans' L, L², L³, one per stage slot, one per cell
FAN_POWERS = (1, 2, 3)
FIRST_STAGE = FIRST_FAN + len(FAN_POWERS)
# A rack of up to 8 nodes runs at most 8 jobs side by side, each reporting about 8 stages (the six
# canonical ones, "unknown", one custom): older cells are forgotten and re-learned from d_s.
MODEL_CELLS = 64
# The coefficients move with a day's half-life: solving every 20 bins (5 min of 15-s bins) changes
# them by < 0.3 % between solves and keeps the solve off the per-bin path of a month-long replay.
SOLVE_EVERY_BINS = 20
BASE_RIDGE = 1e-6  # b is unregularised (only kept solvable before the first reading)

Cell = tuple[str, str]  # (job, stage)


class NodePowerModel:
    """IT watts per GPU watt and non-GPU watts of a powered node (base, per stage, per cell), learned."""

    def __init__(self, bin_s: float, feeds: FeedShares) -> None:
        self.bin_s = float(bin_s)
        self.feeds = feeds
        self.first_cell = FIRST_STAGE + N_SLOTS
        self.n = self.first_cell + MODEL_CELLS
        self.halflife_s = HALFLIFE_H * 3600.0
        ridge = np.full(self.n, RIDGE_BINS)
        ridge[1] = BASE_RIDGE
        self._fit = EWLS(1, self.n, ridge)  # solved with its ridge anchored at the prior, not the last fit
        self._prior = np.zeros((1, self.n))
        self._prior[0, 0] = IT_PER_GPU_W
        self._fit.theta[...] = self._prior
        # per feed: Σ w·x·reading (W, not yet over the feed's share); the fit's own r holds only what
        # a state saved before these were kept carried (readings already divided)
        self._feed_r: dict[str, np.ndarray] = {}
        self._fit.r[...] = 0.0
        self._cells: OrderedDict[Cell, int] = OrderedDict()  # cell → its column (least recent first)
        self._last_ts = math.nan  # the time the statistics were last decayed to
        self.bins = 0

    @property
    def theta(self) -> np.ndarray:
        """The coefficients [k, b, f_1, f_2, f_3, d_0 … d_S-1, e_0 … e_C-1] in ``SCALE_W`` units (k
        unbounded; f_p per kW^p of a node's lagged GPU power)."""
        out: np.ndarray = self._fit.theta[0]
        return out

    @property
    def k(self) -> float:
        """IT watts per GPU watt, within [K_MIN, K_MAX]: PSUs lose, and by a bounded amount."""
        return min(max(float(self.theta[0]), K_MIN), K_MAX)

    def reset_slot(self, slot: int) -> None:
        """Forget what was learned for a stage slot (its label was evicted from the slot table)."""
        self._reset_column(FIRST_STAGE + slot)
        self.solve()

    def cell_columns(self, cells: list[Cell]) -> np.ndarray:
        """Each cell's column index, a new cell taking the least recently used column (forgotten)."""
        out = np.empty(len(cells), dtype=np.int64)
        for i, cell in enumerate(cells):
            col = self._cells.pop(cell, None)
            if col is None:
                if len(self._cells) >= MODEL_CELLS:
                    _, col = self._cells.popitem(last=False)
                    self._reset_column(self.first_cell + col)
                else:
                    col = len(self._cells)
            self._cells[cell] = col
            out[i] = self.first_cell + col
        return out

    def _reset_column(self, col: int) -> None:
        self._fit.R[0, col, :] = 0.0
        self._fit.R[0, :, col] = 0.0
        self._fit.r[0, col] = 0.0
        for r in self._feed_r.values():
            r[col] = 0.0
        self._fit.theta[0, col] = self._prior[0, col]

    def cell_w(self, cell: Cell, slot: int) -> float:
        """A powered node's non-GPU watts in ``cell`` (stage slot ``slot``): b + d_s + e_c."""
        col = self._cells.get(cell)
        e = float(self.theta[self.first_cell + col]) if col is not None else 0.0
        return (float(self.theta[1]) + float(self.theta[FIRST_STAGE + slot]) + e) * SCALE_W

    def energy_j(self, gpu_j: np.ndarray, fan_s: np.ndarray, node_s: np.ndarray, slots: np.ndarray,
                 code: np.ndarray, cells: list[Cell]) -> np.ndarray:
        """Modelled energy (J) of (node, cell) entries: GPU energy ``gpu_j``, the fans' terms
        ``fan_s`` (entries × powers: ∫ (L / SCALE_W)^p dt) and powered node-seconds ``node_s`` in stage
        slots ``slots``, entry i in cell ``cells[code[i]]`` (a cell without a column costs its stage's)."""
        th = self.theta
        cols = [self._cells.get(c) for c in cells]
        per_cell = np.array([th[self.first_cell + col] if col is not None else 0.0 for col in cols])
        non_gpu_w = (float(th[1]) + th[FIRST_STAGE + slots] + per_cell[code]) * SCALE_W
        fan_w_s = fan_s @ th[FIRST_FAN:FIRST_STAGE] * SCALE_W
        out: np.ndarray = self.k * gpu_j + fan_w_s + non_gpu_w * node_s
        return out

    def add_readings(self, feed: str, ts: np.ndarray, gpu_w: np.ndarray, fan: np.ndarray, on: np.ndarray,
                     by_slot: np.ndarray, by_col: np.ndarray, feed_w: np.ndarray, weight: np.ndarray,
                     n_nodes: int) -> None:
        """PDU feed ``feed``'s readings ``feed_w`` (W) at times ``ts``, with the rack's GPU power, its
        nodes' fan terms (readings × powers: Σ (L / SCALE_W)^p), powered nodes, and powered nodes per
        stage slot and per cell column at the same instants; ``weight``: the bins' worth of time each
        reading stands for."""
        ok = np.isfinite(feed_w) & np.isfinite(gpu_w) & (weight > 0)
        if not ok.any():
            return
        per = SCALE_W * max(n_nodes, 1)
        x = np.zeros((int(ok.sum()), self.n))
        x[:, 0] = gpu_w[ok] / per
        x[:, 1] = on[ok] * SCALE_W / per
        x[:, FIRST_FAN:FIRST_STAGE] = fan[ok] * SCALE_W / per
        x[:, FIRST_STAGE:self.first_cell] = by_slot[ok] * SCALE_W / per
        x[:, self.first_cell:] = by_col[ok] * SCALE_W / per
        t = ts[ok]
        t_end = float(t.max())
        since = t_end - self._last_ts if math.isfinite(self._last_ts) else 0.0
        lam = 0.5 ** (max(since, 0.0) / self.halflife_s)
        w = weight[ok] * 0.5 ** ((t_end - t) / self.halflife_s)
        r = self._feed_r.setdefault(feed, np.zeros(self.n))
        for other in self._feed_r.values():
            other *= lam
        self._fit.add(x[None], np.zeros((1, len(t))), w[None], lam)  # R (and the saved r) only
        r += (x * w[:, None]).T @ (feed_w[ok] / per)
        self._last_ts = t_end if not math.isfinite(self._last_ts) else max(self._last_ts, t_end)

    def bin_done(self) -> None:
        """One more bin accounted: the coefficients are solved every ``SOLVE_EVERY_BINS``."""
        self.bins += 1
        if self.bins <= SOLVE_EVERY_BINS or self.bins % SOLVE_EVERY_BINS == 0:
            self.solve()

    def solve(self) -> None:
        """θ from the statistics, each feed's readings over its share as the shares now stand."""
        r = self._fit.r.copy()  # what a state saved before the feeds were kept apart carried
        for feed, feed_r in self._feed_r.items():
            share = self.feeds.share(feed)
            if share > 0:
                r[0] += feed_r / share
        self._fit.solve(self._prior, r)

    def state(self) -> dict[str, Any]:
        return {"a": self._fit.R[0].tolist(), "r": self._fit.r[0].tolist(), "bins": self.bins,
                "feed_r": {feed: r.tolist() for feed, r in self._feed_r.items()},
                "cells": [[job, stage, col] for (job, stage), col in self._cells.items()],
                "last_ts": self._last_ts if math.isfinite(self._last_ts) else None}

    def load(self, state: dict[str, Any]) -> None:
        """Restore the statistics; a state of another layout (an older build's per-stage model) is
        not used: the model starts from its prior and re-learns within hours."""
        a, r = np.asarray(state["a"], dtype=float), np.asarray(state["r"], dtype=float)
        if a.shape != (self.n, self.n) or r.shape != (self.n,):
            return
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(r))):
            raise ValueError(f"node power model: expected finite {self.n}×{self.n} arrays")
        cells: OrderedDict[Cell, int] = OrderedDict()
        for job, stage, col in state.get("cells", []):
            if not 0 <= int(col) < MODEL_CELLS:
                raise ValueError(f"node power model: cell column {col} outside 0…{MODEL_CELLS - 1}")
            cells[(str(job), str(stage))] = int(col)
        feed_r = {str(f): np.asarray(v, dtype=float) for f, v in state.get("feed_r", {}).items()}
        if any(v.shape != (self.n,) or not np.all(np.isfinite(v)) for v in feed_r.values()):
            raise ValueError(f"node power model: expected finite feed sums of {self.n}")
        self._fit.R[0], self._fit.r[0] = a, r
        self._feed_r = feed_r
        self._cells = cells
        self.bins = int(state.get("bins", 0))
        last = state.get("last_ts")
        self._last_ts = float(last) if last is not None else math.nan
        self.solve()


class FanLag:
    """Each node's GPU power through the fans' first-order lag (``FAN_LAG_S``), row by row, across
    chunks: the held power of the interval before a row (a node off counts 0) moves it by
    1 − e^(−Δt/τ). In closed form per block, L_i = D_i·(L_0 + Σ_j≤i (1 − d_j)·P_j−1 / D_j) with D
    the decay since the block's start: no per-row Python loop on a month-long replay."""

    BLOCK_S = 20.0 * FAN_LAG_S  # e^(block / τ) stays far inside a float's range

    def __init__(self) -> None:
        self._ts = math.nan  # the last row's time, per node its lagged value and its held input
        self._level = np.zeros(0)
        self._input = np.zeros(0)

    @property
    def level(self) -> np.ndarray:
        """Per node, the lagged GPU watts at the last row updated (empty before any)."""
        return self._level.copy()

    def update(self, ts: np.ndarray, power_w: np.ndarray) -> np.ndarray:
        """(rows × nodes) lagged GPU watts at rows ``ts`` of held GPU watts ``power_w`` (NaN: off)."""
        p = np.nan_to_num(power_w, nan=0.0)
        if self._level.size != p.shape[1] or not math.isfinite(self._ts):
            self._level, self._input, self._ts = p[0].copy(), p[0].copy(), float(ts[0])
        times = np.concatenate(([self._ts], ts))
        inputs = np.vstack([self._input[None, :], p])  # input i drives the interval ending at row i
        out: np.ndarray = np.empty_like(p)
        start, level = 0, self._level
        while start < len(ts):
            stop = int(np.searchsorted(times, times[start] + self.BLOCK_S, side="right"))
            stop = min(max(stop, start + 2), len(times))  # rows start … stop − 2 of ``ts``
            u = times[start:stop] - times[start]  # from the block's first time
            decay = np.exp(-np.minimum(u / FAN_LAG_S, 300.0))  # D (D_0 = 1; a gap of hours: settled)
            step = 1.0 - decay[1:] / decay[:-1]  # 1 − d_j
            acc = np.cumsum(step[:, None] * inputs[start:stop - 1] / decay[1:, None], axis=0)
            block = decay[1:, None] * (level[None, :] + acc)
            out[start:stop - 1] = block
            level, start = block[-1], stop - 1
        self._level, self._input, self._ts = out[-1].copy(), p[-1].copy(), float(ts[-1])
        return out


def fan_terms(lag_w: np.ndarray) -> np.ndarray:
    """(…, powers) terms of the fans' cubic from lagged GPU watts ``lag_w`` (NaN: a node off, 0)."""
    x = np.nan_to_num(lag_w, nan=0.0) / SCALE_W
    return np.stack([x**p for p in FAN_POWERS], axis=-1)


class FeedShares:
    """Each PDU feed's share of the rack's power (A/B feeds: about half each), from the means of its
    own readings over the model's half-life (readings fall at random phases of the load)."""

    def __init__(self) -> None:
        self._sum: dict[str, float] = {}
        self._count: dict[str, float] = {}
        self._last_ts = math.nan

    def update(self, feed: str, ts: np.ndarray, power_w: np.ndarray) -> None:
        """Readings of one feed (finite, in range) at times ``ts``."""
        if not power_w.size:
            return
        t_end = float(ts.max())
        if math.isfinite(self._last_ts) and t_end > self._last_ts:
            lam = 0.5 ** ((t_end - self._last_ts) / (HALFLIFE_H * 3600.0))
            self._sum = {k: v * lam for k, v in self._sum.items()}
            self._count = {k: v * lam for k, v in self._count.items()}
        if not math.isfinite(self._last_ts) or t_end > self._last_ts:
            self._last_ts = t_end
        w = 0.5 ** ((self._last_ts - ts) / (HALFLIFE_H * 3600.0))
        self._sum[feed] = self._sum.get(feed, 0.0) + float((w * power_w).sum())
        self._count[feed] = self._count.get(feed, 0.0) + float(w.sum())

    def share(self, feed: str) -> float:
        """The feed's share of the rack (NaN before its first reading or while the rack draws nothing)."""
        means = {k: self._sum[k] / c for k, c in self._count.items() if c > 0}
        total = sum(means.values())
        return means[feed] / total if feed in means and total > 0 else math.nan

    def state(self) -> dict[str, Any]:
        return {"sum": self._sum, "count": self._count,
                "last_ts": self._last_ts if math.isfinite(self._last_ts) else None}

    def load(self, state: dict[str, Any]) -> None:
        s = {str(k): float(v) for k, v in state.get("sum", {}).items()}
        c = {str(k): float(v) for k, v in state.get("count", {}).items()}
        if not all(math.isfinite(v) and v >= 0 for v in (*s.values(), *c.values())):
            raise ValueError("feed shares: sums and counts must be finite and ≥ 0")
        self._sum, self._count = s, c
        last = state.get("last_ts")
        self._last_ts = float(last) if last is not None else math.nan
