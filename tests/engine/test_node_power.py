"""The node power model's physical bounds (agent.engine.node_power): IT watts per GPU watt never
below a PSU at its best, and the two phases of a training step sharing one non-GPU extra."""

from __future__ import annotations

import numpy as np
import pytest

from agent.engine.frames import RackInfo
from agent.engine.job_energy import JobEnergy
from agent.engine.node_power import FIRST_STAGE, K_FLOOR, SHARED_EXTRA, NodePowerModel
from agent.engine.signals import N_FIELDS, F
from agent.engine.stage_slots import StageSlots


def test_k_is_held_at_the_psu_bound_and_the_base_solved_given_it() -> None:
    # data a free fit explains with k < 1 (fewer IT watts than GPU watts) and a large base
    rng = np.random.default_rng(0)
    m = NodePowerModel(15.0)
    n_nodes = 4
    for _ in range(400):
        gpu = rng.uniform(4000.0, 20000.0)
        it = 0.9 * gpu + 2500.0 * n_nodes
        m.learn(m.features(gpu, np.ones(n_nodes), {}, n_nodes), it, n_nodes)
    m._solve()
    assert m.theta[0] == K_FLOOR and m.k == K_FLOOR
    # given k at its bound, the base is the least-squares one: the mean residual per node
    gpu = np.full(n_nodes, 3000.0)
    modelled = m.node_weights(gpu, np.ones(n_nodes)).sum()
    mid = 0.9 * 12000.0 + 2500.0 * n_nodes
    assert abs(modelled - mid) / mid < 0.03


def test_a_training_steps_phases_share_one_extra() -> None:
    """A node alternating forward_backward (10 s) and grad_sync (5 s) at equal GPU power within a
    bin: whatever extra the model learned for training, both phases get it per second."""
    slots = StageSlots()
    energy = JobEnergy(RackInfo(node_gpus=((0,),), node_ids=("n0",)), 15.0, slots)
    fb = FIRST_STAGE + slots.slot("forward_backward", 0.0)
    energy.power.theta[fb] = 0.8  # 800 W of extra per node in training (kW units)
    energy.power.theta[1] = 1.0
    acc = {(0, ("a", "forward_backward")): np.array([10 * 500.0, 10.0, 10.0]),
           (0, ("a", "grad_sync")): np.array([5 * 500.0, 5.0, 5.0])}
    row = np.zeros(N_FIELDS)
    row[F["dur_s"]], row[F["pdu_s"]], row[F["pdu_ws"]] = 15.0, 15.0, 15.0 * 2400.0
    energy._split(acc, row, 0.0)
    table = energy.table()["a"]
    per_s = {s: table[s]["it"] / acc[(0, ("a", s))][1] for s in ("forward_backward", "grad_sync")}
    assert per_s["grad_sync"] == pytest.approx(per_s["forward_backward"], rel=1e-9)
    assert SHARED_EXTRA["grad_sync"] == "forward_backward"
