"""Partial GPU coverage per node: a missing node's GPUs are not scaled from the other nodes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from agent.config.loader import load_config
from agent.config.model import EngineSection
from agent.engine import Engine, rack_info
from agent.engine.signals import QUANTITIES, combine
from agent.sim import scenario_truth
from agent.sim.randomize import random_multijob_scenario
from agent.sim.twin import simulate_hours, trace_meta
from agent.trace.model import J_PER_KWH

GPU = next(q for q in QUANTITIES if q.name == "gpu")


def test_a_node_without_readings_adds_nothing_and_a_partial_node_scales_within_itself() -> None:
    nan = np.nan
    held = np.array(
        [
            [100.0, 100.0, nan, nan],  # node 1 silent
            [100.0, nan, 50.0, 50.0],  # one GPU of node 0 missing
            [nan, nan, nan, nan],  # nothing known
        ]
    )
    nodes = np.array([0, 0, 1, 1])
    got = combine(GPU, held, np.zeros(0), nodes)
    np.testing.assert_allclose(got[:2], [200.0, 300.0])
    assert np.isnan(got[2])
    # Without nodes the rack is one group: the old rule, every missing GPU like the known mean.
    np.testing.assert_allclose(combine(GPU, held, np.zeros(0))[:2], [400.0, 266.6666667])


def _gpu_kwh_in_drain(node_gpus: tuple[tuple[int, ...], ...]) -> tuple[np.ndarray, np.ndarray]:
    sc = random_multijob_scenario(4, days=0.2, nodes=2, per_node=4, jobs=1, drain=True)
    (drain,) = scenario_truth(sc)["scenario"]["drains"]
    meta = trace_meta(sc)
    info = replace(rack_info(meta), node_gpus=node_gpus)
    engine = Engine(EngineSection(window_s=900.0), info, site=meta.site, rack_name=meta.rack)
    records: list[dict] = []
    true_ws: list[np.ndarray] = []
    ts: list[np.ndarray] = []
    for chunk, clean in simulate_hours(sc):
        records += engine.process(chunk)
        true_ws.append(clean["gpu_power_w"].sum(axis=1))
        ts.append(clean["ts"])
    records += engine.finish()
    t, gpu_w = np.concatenate(ts), np.concatenate(true_ws)
    wins = [
        r for r in records
        if r["type"] == "window" and r["start"] >= drain["start_ts"] + 300 and r["end"] <= drain["end_ts"]
    ]
    assert len(wins) >= 4
    engine_kwh = np.array([w["gpu_kwh"] for w in wins])
    truth_kwh = np.array([gpu_w[(t >= w["start"]) & (t < w["end"])].sum() / J_PER_KWH for w in wins])
    return engine_kwh, truth_kwh


def test_a_drained_node_is_not_scaled_from_the_live_one() -> None:
    per_node, truth = _gpu_kwh_in_drain(((0, 1, 2, 3), (4, 5, 6, 7)))
    np.testing.assert_allclose(per_node, truth, rtol=0.03)
    whole_rack, _ = _gpu_kwh_in_drain(())
    assert np.all(whole_rack > 1.8 * truth)  # the rule before: the live node counted twice


def test_the_engine_learns_each_node_s_gpus_from_the_configuration(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(
        '[agent]\nsite = "dc1"\nrack = "r07"\n\n[nvml]\nenabled = false\n\n'
        '[[dcgm]]\nid = "a"\nurl = "http://127.0.0.1:9/metrics"\ngpu_count = 4\n\n'
        '[[dcgm]]\nid = "b"\nurl = "http://127.0.0.1:9/metrics"\ngpu_count = 2\n'
    )
    info = rack_info(config=load_config(path))
    assert info.node_gpus == ((0, 1, 2, 3), (4, 5))
    assert info.gpu_node("gpu.5.power_w") == 1 and info.gpu_node("gpu.9.power_w") == -1
