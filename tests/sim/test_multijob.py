"""Racks whose nodes run different jobs, and a drained node (agent.sim.jobs)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from agent.sim import scenario_truth
from agent.sim.jobs import Drain, NodeGroup
from agent.sim.randomize import random_multijob_scenario, random_scenario
from tests.sim.conftest import Run


def _node_truth(truth: dict, node: int, t0: float, n: int) -> np.ndarray:
    """Per-second stage label of one node from truth.json's node_stage_segments."""
    out = np.full(n, "", dtype=object)
    for start, end, stage, _job in truth["node_stage_segments"][node]:
        out[int(start - t0) : int(end - t0)] = stage
    return out


def test_one_group_of_every_node_is_the_single_job_rack() -> None:
    sc = random_scenario(5, "single", days=0.05)
    grouped = replace(sc, groups=(NodeGroup(tuple(range(sc.rack.nodes)), sc.plan),))
    a, b = Run(sc), Run(grouped)
    assert a.numeric.keys() == b.numeric.keys()
    for name in a.numeric:
        np.testing.assert_array_equal(a.col(name), b.col(name), err_msg=name)
    assert list(a.stage) == list(b.stage) and list(a.job) == list(b.job)


def test_each_node_group_follows_its_own_job() -> None:
    sc = random_multijob_scenario(21, days=0.15, nodes=2, per_node=4, jobs=2, drain=False)
    run, truth = Run(sc), scenario_truth(sc)
    t0, n = sc.start_ts, len(run.ts)
    first, second = _node_truth(truth, 0, t0, n), _node_truth(truth, 1, t0, n)
    assert (first != second).mean() > 0.05  # the two jobs are not in lockstep
    ids = [j["id"] for j in truth["jobs"]]
    assert len(ids) == len(set(ids)) and {j["nodes"][0] for j in truth["jobs"]} == {0, 1}
    gpu_a, gpu_b = truth["node_gpus"][0][1], truth["node_gpus"][1][1]
    low = ("idle", "data_load", "checkpoint")  # stages well below a training step's power
    busy_a = (first == "forward_backward") & np.isin(second, low)
    busy_b = (second == "forward_backward") & np.isin(first, low)
    assert busy_a.sum() > 30 and busy_b.sum() > 30
    pa, pb = run.col(f"gpu.{gpu_a}.power_w"), run.col(f"gpu.{gpu_b}.power_w")
    assert np.nanmedian(pa[busy_a]) > 1.5 * np.nanmedian(pb[busy_a])
    assert np.nanmedian(pb[busy_b]) > 1.5 * np.nanmedian(pa[busy_b])
    # The trace's one stage column carries one of the node truths wherever it carries a label.
    labelled = run.stage != ""
    assert labelled.any()
    assert np.all((run.stage[labelled] == first[labelled]) | (run.stage[labelled] == second[labelled]))


def test_a_drained_node_reads_nothing_draws_nothing_and_slows_its_job() -> None:
    sc = random_multijob_scenario(4, days=0.2, nodes=2, per_node=4, jobs=1, drain=True)
    run, truth = Run(sc), scenario_truth(sc)
    (drain,) = truth["scenario"]["drains"]
    off = (run.ts >= drain["start_ts"]) & (run.ts < drain["end_ts"])
    assert off.sum() > 600
    node = drain["node"]
    for g in truth["node_gpus"][node]:
        col = run.col(f"gpu.{g}.power_w")
        assert np.isnan(col[off]).all()
        assert np.isfinite(col[~off]).mean() > 0.9
    other = truth["node_gpus"][1 - node][0]
    assert np.isfinite(run.col(f"gpu.{other}.power_w")[off]).mean() > 0.9
    assert [s for s in truth["node_stage_segments"][node] if s[2] == "off"] == [
        [drain["start_ts"], drain["end_ts"], "off", ""]
    ]
    # The job goes on on the other node at half the throughput.
    truth_other = _node_truth(truth, 1 - node, sc.start_ts, len(run.ts))
    fb = truth_other == "forward_backward"
    job = truth["jobs"][0]  # this seed's first job runs from before the drain into it
    rate = run.col("work_rate")
    inside = rate[off & fb & (run.job == job["id"])]
    outside = rate[~off & fb & (run.job == job["id"])]
    assert inside.size > 60 and outside.size > 60
    assert np.nanmedian(inside) == pytest.approx(0.5 * np.nanmedian(outside), rel=0.05)
    assert np.nanmedian(outside) == pytest.approx(job["work_rate_nominal"], rel=0.05)
    # Rack power drops while a node of two is off (same stage on the live node: compare levels).
    pdu = sum(np.nan_to_num(run.col(f"pdu.{p}.power_w")) for p in sc.rack.pdu_ids)
    sampled = np.isfinite(run.col(f"pdu.{sc.rack.pdu_ids[0]}.power_w"))
    assert np.median(pdu[off & fb & sampled]) < 0.8 * np.median(pdu[~off & fb & sampled])


def test_eight_nodes_two_jobs_four_nodes_each() -> None:
    sc = random_multijob_scenario(10, days=0.02, nodes=8, per_node=8, jobs=2, drain=False)
    assert sc.rack.gpus == 64
    assert [g.nodes for g in sc.groups] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    truth = scenario_truth(sc)
    assert truth["node_gpus"][4] == list(range(32, 40))
    assert len(truth["node_stage_segments"]) == 8


def test_bad_layouts_are_refused_by_name() -> None:
    sc = random_multijob_scenario(1, days=0.02, nodes=2, per_node=4, jobs=2, drain=False)
    overlap = replace(sc, groups=(NodeGroup((0, 1), sc.plan), NodeGroup((1,), sc.plan)))
    with pytest.raises(ValueError, match="cover nodes 0…1 once each"):
        Run(overlap)
    with pytest.raises(ValueError, match="drain: node 5"):
        Run(replace(sc, drains=(Drain(5, 0.1, 1.0),)))
    with pytest.raises(ValueError, match="jobs must be in 1…2"):
        random_multijob_scenario(1, nodes=2, jobs=3)
    with pytest.raises(ValueError, match="at least 2 nodes"):
        random_multijob_scenario(1, nodes=2, jobs=2, drain=True)


def test_every_drawn_layout_builds_and_drains_only_a_shared_group() -> None:
    # a seed that draws only one-node groups gets no drain (it used to raise, e.g. seed 4)
    drained = 0
    for seed in range(40):
        sc = random_multijob_scenario(seed, days=0.1)
        groups = sc.groups or (NodeGroup(tuple(range(sc.rack.nodes)), sc.plan),)
        for d in sc.drains:
            assert len(next(g for g in groups if d.node in g.nodes).nodes) > 1
        drained += bool(sc.drains)
    assert 0 < drained < 40


def test_cli_writes_a_multijob_trace(tmp_path: Path) -> None:
    out = tmp_path / "mj"
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "sim", "--randomize", "--family", "multijob", "--seed", "3",
         "--days", "0.01", "--quiet", "--out", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    truth = json.loads((out / "truth.json").read_text())
    assert truth["scenario"]["name"] == "random_multijob"
    assert len(truth["node_stage_segments"]) == truth["scenario"]["nodes"]


def test_the_stepping_twin_serves_a_multijob_rack() -> None:
    from agent.sim import RackTwin
    from agent.sim.params import STAGES

    sc = random_multijob_scenario(4, days=0.2, nodes=2, per_node=4, jobs=1, drain=True)
    (drain,) = scenario_truth(sc)["scenario"]["drains"]
    twin = RackTwin(sc)
    twin.advance_to(drain["start_ts"] + 10.0)
    gpus = twin.gpu_values()
    node = drain["node"]
    off = [g for g in gpus if g // 4 == node]
    assert all(gpus[g]["power_w"] == 0.0 for g in off)
    assert all(gpus[g]["power_w"] > 0.0 for g in gpus if g not in off)
    stage, job = twin.stage()
    assert stage in STAGES and job in {"", *(j["id"] for j in scenario_truth(sc)["jobs"])}
