"""The IT model's GPU-power moments are taken node by node where the rack's nodes are known
(signals.node_moments): PSU losses and fan power are convex in each node's own load."""

from __future__ import annotations

import numpy as np
import pytest

from agent.engine.signals import QUANTITIES, combine, node_moments, node_totals

GPU = next(q for q in QUANTITIES if q.name == "gpu")


def test_nodes_at_one_load_give_the_rack_total_s_moments() -> None:
    held = np.full((3, 8), 400.0)  # 2 nodes × 4 GPUs, all at 400 W
    groups = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    m2, m3 = node_moments(node_totals(held, groups))
    g = combine(GPU, held, np.ones(0), groups)
    assert g == pytest.approx(np.full(3, 3200.0))
    assert m2 == pytest.approx(g**2) and m3 == pytest.approx(g**3)


def test_an_uneven_rack_has_larger_moments_and_a_silent_node_adds_nothing() -> None:
    groups = np.array([0, 0, 1, 1])
    hot_and_idle = np.array([[700.0, 700.0, 100.0, 100.0]])
    m2, m3 = node_moments(node_totals(hot_and_idle, groups))
    g = 1600.0
    assert m2[0] == pytest.approx(2 * (1400.0**2 + 200.0**2)) and m2[0] > g**2
    assert m3[0] > g**3
    one_silent = np.array([[500.0, np.nan, np.nan, np.nan]])  # node 1 says nothing; node 0 half known
    per_node = node_totals(one_silent, groups)
    assert per_node[0, 0] == pytest.approx(1000.0) and np.isnan(per_node[0, 1])
    m2, _ = node_moments(per_node)
    assert m2[0] == pytest.approx(2 * 1000.0**2)
    assert combine(GPU, one_silent, np.ones(0), groups)[0] == pytest.approx(1000.0)
