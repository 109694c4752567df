"""What the node power model's shape decides: the per-job split of a rack's sum, fitted offline on
the twin's true node power (no instruments, no engine).

    .venv/bin/python bench/node_model_fit.py [--seeds 1] [--first-seed 18] [--every 7]

Each seed draws bench/job_energy.py's rack (8 nodes × 8 GPUs, two node groups with their own
jobs, 1 day). From the twin's clean per-second values (``simulate_hours``) it fits, by least
squares on the rack's *sum* of true node AC power (one row every ``--every`` s), the structure of
``agent.engine.node_power``: Σ over nodes of shape terms in the node's GPU power, a base per node,
an extra per stage pooled over the jobs and a deviation per (group, job, stage) cell, with a ridge
on the extras and deviations only: "weak" (1) and "strong" (1e4, about a fifth of a cell's data).
Because each group's cells add up to its node count at every instant, how much each group draws
beside its GPUs is decided by the shape and the prior, not by the data; the printed split (each
group's modelled energy against its true energy) shows by how much, with the worst (group, job,
stage) cell with ≥ 1 % of its job's energy (the fit evaluated at every second) and the shape terms'
coefficients (kW per kW^p of node GPU power). Shapes:

  straight   k·G (the model before the fans' curve)
  fans       k·G + cubic in L (L: the node's GPU power through the engine's FAN_LAG_S lag)
  fans+T     … + the node's mean GPU temperature through the same lag (a proxy for its inlet air)
  fans+rack  fans + L·R and L²·R, R the rack's mean L (inlet air the rack's own heat warms; tried in
             the engine and not kept, docs/engine.md)

Also printed per seed: each node's mean true fan power and the rack's inlet sensors, which show
fans driven by a warm inlet rather than by the GPUs (what no GPU term carries). docs/engine.md,
"Per-job stage energy", quotes development seeds 18 and 12 (the split) and 2, 12, 16, 18, 23,
27, 46 (the worst cell of ``fans`` and ``fans+rack``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.engine.response import FAN_LAG_S
from agent.sim.lag import first_order_lag
from agent.sim.params import STAGES
from agent.sim.physics import RackPhysics
from agent.sim.randomize import random_multijob_scenario
from agent.sim.twin import simulate_hours

NODES, GROUP = 8, 4
RIDGES = {"weak": 1.0, "strong": 1e4}


def _lagged(x: np.ndarray) -> np.ndarray:
    """Rows of 1-s values through a first-order lag of ``FAN_LAG_S``."""
    out: np.ndarray = first_order_lag(x, FAN_LAG_S, x[0])
    return out


def _fit(feats: list[np.ndarray], y: np.ndarray, stage: np.ndarray, cell: np.ndarray, n_stages: int,
         n_cells: int, ridge: float) -> np.ndarray:
    """The coefficients [shape terms, base, stage extras, cell deviations] of a ridge fit on the
    rack's sum ``y`` (kW) of the rows ``feats`` (each rows × nodes), ``stage`` and ``cell``."""
    n_f, rows = len(feats), len(y)
    x = np.zeros((rows, n_f + 1 + n_stages + n_cells))
    for j, f in enumerate(feats):
        x[:, j] = f.sum(axis=1)
    x[:, n_f] = NODES
    r = np.arange(rows)
    for n in range(NODES):
        np.add.at(x, (r, n_f + 1 + stage[:, n]), 1.0)
        np.add.at(x, (r, n_f + 1 + n_stages + cell[:, n]), 1.0)
    penalty = np.zeros(x.shape[1])
    penalty[n_f + 1:] = ridge
    th: np.ndarray = np.linalg.solve(x.T @ x + np.diag(penalty) + 1e-9 * np.eye(x.shape[1]), x.T @ y)
    return th


def _model(th: np.ndarray, feats: list[np.ndarray], stage: np.ndarray, cell: np.ndarray,
           n_stages: int) -> np.ndarray:
    """Per-node modelled power (rows × nodes, kW) of the coefficients ``th``."""
    n_f = len(feats)
    out: np.ndarray = (sum(th[j] * f for j, f in enumerate(feats)) + th[n_f] + th[n_f + 1 + stage]
                       + th[n_f + 1 + n_stages + cell])
    return out


def _shapes(g: np.ndarray, lag: np.ndarray, lag_t: np.ndarray) -> dict[str, list[np.ndarray]]:
    fans = [lag, lag**2, lag**3]
    rack = (lag.sum(axis=1, keepdims=True) / NODES) * (g > 0)  # R: the rack's mean L, at powered nodes
    return {"straight": [g], "fans": [g, *fans], "fans+T": [g, *fans, lag_t],
            "fans+rack": [g, *fans, rack * lag, rack * lag**2]}


def _worst_cell(model: np.ndarray, p: np.ndarray, keys: np.ndarray, cell: np.ndarray) -> tuple[float, int]:
    """The worst |error| % of a (group, job, stage) cell with ≥ 1 % of its job's true energy, and its key."""
    true = np.bincount(cell.ravel(), weights=p.ravel())
    got = np.bincount(cell.ravel(), weights=model.ravel())
    key = np.zeros(len(true), dtype=np.int64)
    key[cell.ravel()] = keys.ravel()
    job = key // 100
    job_true = {j: true[job == j].sum() for j in np.unique(job)}
    worst, worst_key = 0.0, -1
    for c in range(len(true)):
        if key[c] < 0 or true[c] < 0.01 * job_true[job[c]]:
            continue
        err = abs(100.0 * (got[c] / true[c] - 1.0))
        if err > worst:
            worst, worst_key = err, int(key[c])
    return worst, worst_key


def run_seed(seed: int, every: int) -> None:
    sc = random_multijob_scenario(seed, days=1.0, nodes=NODES, per_node=8, jobs=2, drain=False)
    physics = RackPhysics(sc)
    node_of_gpu = physics.k.node_of_gpu
    per_node = np.bincount(node_of_gpu, minlength=NODES)[None, :]
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("g", "p", "s", "j", "t", "fan", "inlet")}
    for _chunk, clean in simulate_hours(sc):
        g = np.zeros((len(clean["ts"]), NODES))
        np.add.at(g.T, node_of_gpu, clean["gpu_power_w"].T)
        t = np.zeros_like(g)
        np.add.at(t.T, node_of_gpu, clean["gpu_temp_c"].T)
        parts["g"].append(g / 1000.0)
        parts["t"].append(t / per_node / 100.0)
        parts["p"].append(clean["node_ac_w"] / 1000.0)
        parts["s"].append(clean["node_stage"])
        parts["j"].append(clean["node_job"])
        parts["fan"].append(sc.rack.node.fan_max_w * clean["fan_frac"] ** 3)
        parts["inlet"].append(clean["inlet_c"])
    g, p, t = (np.vstack(parts[k]) for k in ("g", "p", "t"))
    stage = np.vstack(parts["s"]).astype(np.int64)
    job = np.vstack(parts["j"]).astype(np.int64)
    group = np.where(job >= 0, np.arange(NODES)[None, :] // GROUP, -1)  # no job: shared by both
    keys = group * 10_000 + job * 100 + stage
    _, cell = np.unique(keys, return_inverse=True)
    cell = cell.reshape(keys.shape)
    n_stages, n_cells = int(stage.max()) + 1, int(cell.max()) + 1
    rows = np.arange(0, len(g), every)
    every_s = _shapes(g, _lagged(g), _lagged(t))  # every second: the cells' energies
    fitted = {name: [f[rows] for f in feats] for name, feats in every_s.items()}  # the fitted rows
    print(f"\nseed {seed}: fan time constant {sc.rack.node.fan_tau_s:.1f} s (the model's {FAN_LAG_S:.0f} s); "
          f"mean fan W per node {np.round(np.vstack(parts['fan']).mean(axis=0)).astype(int).tolist()}; "
          f"inlet sensors mean °C {np.vstack(parts['inlet']).mean(axis=0).round(1).tolist()}")
    y = p[rows].sum(axis=1)
    for name, feats in fitted.items():
        for label, ridge in RIDGES.items():
            th = _fit(feats, y, stage[rows], cell[rows], n_stages, n_cells, ridge)
            model = _model(th, feats, stage[rows], cell[rows], n_stages)
            split = []
            for grp in range(NODES // GROUP):
                sel = group[rows] == grp
                split.append(f"group {grp} {100.0 * (model[sel].sum() / p[rows][sel].sum() - 1.0):+.2f} %")
            worst, key = _worst_cell(_model(th, every_s[name], stage, cell, n_stages), p, keys, cell)
            print(f"  {name:<9} {label:<6} prior: " + ", ".join(split)
                  + f"; worst cell {worst:.2f} % (group {key // 10_000}, job {key // 100 % 100}, "
                  f"stage {STAGES[key % 100]}); shape coefficients {np.round(th[:len(feats)], 3).tolist()}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--first-seed", type=int, default=18)
    ap.add_argument("--every", type=int, default=7, help="seconds between fitted rows")
    args = ap.parse_args()
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        run_seed(seed, args.every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
