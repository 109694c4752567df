"""The randomised twin: wide, reproducible draws, the real-rack signatures, missing signals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agent.sim.params import CHECKPOINT, DATA_LOAD, IDLE
from agent.sim.randomize import FAMILIES, OPTIONAL_SIGNALS, random_scenario
from agent.sim.sampling import omitted
from agent.sim.twin import columns, scenario_truth, simulate

SEEDS = range(40)


def test_same_seed_same_trace_and_seeds_differ() -> None:
    a = next(simulate(random_scenario(3, "churn", days=0.02)))
    b = next(simulate(random_scenario(3, "churn", days=0.02)))
    assert a.numeric.keys() == b.numeric.keys()
    assert all(np.array_equal(a.numeric[k], b.numeric[k], equal_nan=True) for k in a.numeric)
    racks = {(s.gpus, round(s.rack.gpu.tdp_w)) for s in (random_scenario(k) for k in range(10))}
    assert len(racks) >= 8


def test_draws_cover_the_stated_ranges() -> None:
    scenarios = [random_scenario(seed, "churn") for seed in SEEDS]
    nodes = {s.rack.nodes for s in scenarios}
    per_node = {s.rack.node.gpus_per_node for s in scenarios}
    tdp = [s.rack.gpu.tdp_w for s in scenarios]
    assert nodes <= set(range(1, 9)) and len(nodes) >= 6
    assert per_node <= set(range(4, 9)) and len(per_node) >= 4
    assert 300 <= min(tdp) < 500 and 1000 < max(tdp) <= 1200
    lags = [s.rack.cooling.tau_s for s in scenarios]
    assert min(lags) >= 60 and max(lags) <= 900 and max(lags) - min(lags) > 400
    pdu_rates = {s.rack.sampling.pdu_interval_s for s in scenarios}
    assert min(pdu_rates) >= 1 and max(pdu_rates) <= 30 and len(pdu_rates) >= 10
    styles = {k.checkpoint_writers for s in scenarios for k in s.plan.job_kinds}
    assert styles == {"all", "rank0"}
    assert any(s.rack.sampling.omit for s in scenarios)


def test_missing_optional_signals_are_absent_from_header_and_rows() -> None:
    scenario = next(s for s in (random_scenario(k) for k in SEEDS) if s.rack.sampling.omit)
    header = columns(scenario)
    chunk = next(simulate(scenario))
    for signal in scenario.rack.sampling.omit:
        assert signal in OPTIONAL_SIGNALS
        assert not [c for c in header if omitted(c, (signal,))]
        assert not [c for c in chunk.numeric if omitted(c, (signal,))]
    assert any(c.startswith("gpu.") for c in header)


def _first(seed_range: range, family: str, want: str) -> tuple[int, object]:
    for seed in seed_range:
        scenario = random_scenario(seed, family, days=0.25)
        kinds = {k.name: k for k in scenario.plan.job_kinds}
        jobs = scenario_truth(scenario)["jobs"]
        if any(getattr(kinds[j["profile"]], "checkpoint_writers", "") == want for j in jobs):
            return seed, scenario
    raise AssertionError(f"no seed with a {want} checkpoint")


def test_one_rank_writes_while_the_others_spin() -> None:
    _, scenario = _first(range(100), "single", "rank0")
    tdp = scenario.rack.gpu.tdp_w  # type: ignore[attr-defined]
    chunks = list(simulate(scenario))  # type: ignore[arg-type]
    truth = np.concatenate([c.stage for c in chunks])
    ckpt = truth == "checkpoint"
    assert ckpt.sum() > 30
    util0 = np.concatenate([c.numeric["gpu.0.util_pct"] for c in chunks])[ckpt]
    util1 = np.concatenate([c.numeric["gpu.1.util_pct"] for c in chunks])[ckpt]
    power1 = np.concatenate([c.numeric["gpu.1.power_w"] for c in chunks])[ckpt]
    assert np.nanmedian(util0) < 10  # the writer
    assert np.nanmedian(util1) >= 95  # a spinning peer: busy by NVML's count …
    assert np.nanmedian(power1) < 0.4 * tdp  # … at little power


def test_start_up_shows_contexts_up_and_no_utilisation() -> None:
    scenario = random_scenario(11, "single", days=0.1)
    chunks = list(simulate(scenario))
    truth = np.concatenate([c.stage for c in chunks])
    util = np.concatenate([c.numeric["gpu.0.util_pct"] for c in chunks])
    power = np.concatenate([c.numeric["gpu.0.power_w"] for c in chunks])
    load, idle = truth == "data_load", truth == "idle"
    assert load.sum() > 30 and idle.sum() > 30
    assert np.nanmax(util[load]) <= 5
    assert np.nanmedian(power[load]) > 1.3 * np.nanmedian(power[idle])


def test_a_driver_update_drains_the_rack() -> None:
    scenario = next(
        s for s in (random_scenario(k, "single", days=0.5) for k in range(400))
        if any(f.kind == "gpu_driver" for f in s.faults)
    )
    fault = next(f for f in scenario.faults if f.kind == "gpu_driver")
    from agent.sim.physics import RackPhysics

    stage = RackPhysics(scenario).timeline.stage
    at = round(fault.start_h * 3600.0)
    assert stage[at] == IDLE  # maintenance: no job while the driver is reloaded
    after = stage[at:]
    assert (after == DATA_LOAD).any() or at > len(stage) - 3600  # jobs start again after it


def test_frequent_checkpoints_leave_short_training_bursts() -> None:
    scenario = next(
        s for s in (random_scenario(k, "single", days=0.25) for k in range(200))
        if s.plan.job_kinds and any(k.checkpoint_every_steps for k in s.plan.job_kinds
                                    if k.name in s.plan.profiles)
    )
    from agent.sim.physics import RackPhysics

    stage = RackPhysics(scenario).timeline.stage
    runs = np.flatnonzero(np.diff(stage) != 0) + 1
    lengths = np.diff(np.concatenate(([0], runs, [len(stage)])))
    codes = stage[np.concatenate(([0], runs))]
    short_ckpts = np.count_nonzero((codes == CHECKPOINT) & (lengths <= 20))
    assert short_ckpts >= 50


def test_counter_wrap_keeps_the_meter_in_range() -> None:
    scenario = next(
        s for s in (random_scenario(k, "single", days=0.1) for k in range(200))
        if s.rack.pdu.energy_wrap_kwh and "pdu.energy_kwh" not in s.rack.sampling.omit
    )
    wrap = scenario.rack.pdu.energy_wrap_kwh
    energy = np.concatenate([c.numeric["pdu.a.energy_kwh"] for c in simulate(scenario)])
    energy = energy[np.isfinite(energy)]
    assert energy.max() < wrap
    assert (np.diff(energy) < -0.5 * wrap).sum() == 1  # it rolled over once


@pytest.mark.parametrize("family", list(FAMILIES))
def test_cli_writes_a_randomised_trace(tmp_path: Path, family: str) -> None:
    out = tmp_path / family
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "sim", "--randomize", "--family", family, "--seed", "5",
         "--days", "0.01", "--no-hints", "--quiet", "--out", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    truth = json.loads((out / "truth.json").read_text())
    assert truth["scenario"]["name"] == f"random_{family}"
    header = next(line for line in (out / "trace.csv").read_text().splitlines() if not line.startswith("#"))
    assert header.startswith("ts,")


def test_unknown_family_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown family"):
        random_scenario(1, "nope")
