"""Device sampling: rates, empty cells, misses, outages, glitches, hints, and the stepping twin."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from agent.sim import RackTwin, make_scenario, scenario_truth, simulate
from agent.sim.physics import RackPhysics
from agent.sim.sampling import RESOLUTION
from agent.trace.model import J_PER_KWH


def test_each_device_reports_at_its_own_rate(simulated: Callable) -> None:
    run = simulated("steady", 0.25)
    t = run.t_s.astype(int)
    for column, period, phase in (
        ("pdu.a.power_w", 5, 0),
        ("pdu.b.power_w", 5, 3),
        ("crac.1.power_w", 10, 1),
        ("inlet.top.temp_c", 10, 2),
    ):
        sampled = np.isfinite(run.col(column))
        assert np.all(t[sampled] % period == phase), column
        slots = t % period == phase
        assert 0.9 < sampled.sum() / slots.sum() <= 1.0, column
    gpu = np.isfinite(run.col("gpu.5.power_w"))
    assert 0.99 < gpu.mean() < 1.0  # NVML every second, a few polls missed


def test_missed_polls_and_outages_leave_cells_empty(simulated: Callable) -> None:
    run = simulated("steady", 1.0, seed=8)
    truth = scenario_truth(run.scenario)
    t = run.t_s.astype(int)
    slots = t % 5 == 0
    missed = slots & np.isnan(run.col("pdu.a.power_w"))
    assert 0 < missed.sum() < 0.05 * slots.sum()
    for outage in truth["device_outages"]:
        inside = (run.ts >= outage["start_ts"]) & (run.ts < outage["end_ts"])
        column = {"crac": "crac.1.power_w", "inlet": "inlet.mid.temp_c", "nvml": "gpu.0.power_w"}.get(
            outage["device"], f"{outage['device']}.power_w"
        )
        assert np.isnan(run.col(column)[inside]).all(), outage


def test_glitches_are_rare_sentinels_or_spikes(simulated: Callable) -> None:
    run = simulated("steady", 1.0, seed=8)
    sentinels = 0
    cells = 0
    for name, values in run.numeric.items():
        if name.endswith(("power_w", "temp_c")):
            finite = values[np.isfinite(values)]
            cells += finite.size
            sentinels += int(np.sum((finite == -1.0) | (finite == 65535.0)))
    assert 0 < sentinels < 1e-4 * cells
    energy = run.col("gpu.2.energy_j")
    assert np.all(np.diff(energy[np.isfinite(energy)]) >= 0)  # counters never glitch


def test_values_carry_device_resolution(simulated: Callable) -> None:
    run = simulated("steady", 0.25)
    for name in ("gpu.0.power_w", "pdu.b.energy_kwh", "crac.1.power_w", "crac.1.cooling_w", "gpu.1.temp_c"):
        kind, _, field = name.split(".")
        places = RESOLUTION[kind][field]
        values = run.col(name)[np.isfinite(run.col(name))]
        np.testing.assert_allclose(values, np.round(values, places), atol=1e-9)


def test_no_hints_blanks_labels_and_work_rate_only(simulated: Callable) -> None:
    hinted, blind = simulated("tide", 0.2, seed=9), simulated("tide", 0.2, seed=9, hints=False)
    assert set(blind.stage.tolist()) == {""} and set(blind.job.tolist()) == {""}
    assert np.isnan(blind.col("work_rate")).all()
    assert set(hinted.stage.tolist()) > {"idle"} and np.isfinite(hinted.col("work_rate")).any()
    for name in hinted.numeric:
        if name != "work_rate":
            np.testing.assert_array_equal(hinted.col(name), blind.col(name))
    assert (
        scenario_truth(blind.scenario)["stage_segments"] == scenario_truth(hinted.scenario)["stage_segments"]
    )


def test_chunking_does_not_change_the_trace() -> None:
    sc = make_scenario("mixed", days=0.1, seed=12)
    whole = list(simulate(sc))
    pieces = list(simulate(sc, chunk_s=777))
    assert max(len(c) for c in pieces) <= 777
    for name in ("gpu.7.power_w", "pdu.b.power_w", "crac.1.power_w", "work_rate"):
        np.testing.assert_array_equal(
            np.concatenate([c.numeric[name] for c in whole]),
            np.concatenate([c.numeric[name] for c in pieces]),
        )


def test_rack_twin_serves_the_same_values_as_the_trace(simulated: Callable) -> None:
    run = simulated("steady", 0.25)
    twin = RackTwin(run.scenario)
    for offset in (0, 17, 3600 + 5, 3 * 3600 + 11, 5 * 3600 + 2):
        twin.advance_to(run.scenario.start_ts + offset + 0.4)
        values = twin.device_values()
        assert set(values) >= {"gpu.0", "gpu.15", "pdu.a", "pdu.b", "crac.1", "inlet", "job"}
        stage, job = twin.stage()
        assert stage == run.stage[offset] and job == run.job[offset]
        for device, field, column in (
            ("gpu.3", "power_w", "gpu.3.power_w"),
            ("pdu.a", "power_w", "pdu.a.power_w"),
            ("crac.1", "cooling_w", "crac.1.cooling_w"),
            ("inlet", "top.temp_c", "inlet.top.temp_c"),
        ):
            cell = run.col(column)[offset]
            if np.isfinite(cell):  # sampled here: the trace is the twin's value at device resolution
                kind, _, leaf = column.split(".")
                assert round(values[device][field], RESOLUTION[kind][leaf]) == pytest.approx(cell, rel=0.01)
    gpus = twin.gpu_values()
    assert sorted(gpus) == list(range(16)) and gpus[3]["power_w"] == values["gpu.3"]["power_w"]
    assert gpus[0]["power_limit_w"] == run.scenario.rack.gpu.tdp_w
    assert twin.pdu_values("b")["power_w"] == values["pdu.b"]["power_w"]
    assert twin.pdu_values("a")["inlet.top.temp_c"] == values["inlet"]["top.temp_c"]
    assert twin.crac_values() == values["crac.1"]
    with pytest.raises(KeyError, match="no PDU feed 'c'"):
        twin.pdu_values("c")
    with pytest.raises(ValueError, match="back in time"):
        twin.advance_to(run.scenario.start_ts)
    with pytest.raises(ValueError, match="past the end"):
        twin.advance_to(run.scenario.start_ts + run.scenario.total_s + 5)


def test_rack_twin_jumps_ahead_consistently() -> None:
    sc = make_scenario("steady", days=0.2, seed=3)
    jumper, walker = RackTwin(sc), RackTwin(sc)
    for t in range(0, 3 * 3600, 600):
        walker.advance_to(sc.start_ts + t)
        walker.device_values()
    jumper.advance_to(sc.start_ts + 3 * 3600 - 600)
    walker.advance_to(sc.start_ts + 3 * 3600 - 600)
    assert jumper.device_values() == walker.device_values()


def test_physics_rejects_non_consecutive_chunks() -> None:
    physics = RackPhysics(make_scenario("steady", days=0.1, seed=1))
    physics.step(0, 100)
    with pytest.raises(ValueError, match="consecutive"):
        physics.step(200, 300)


def test_energy_counters_integrate_the_reported_power(simulated: Callable) -> None:
    run = simulated("steady", 0.25)
    for power, energy, to_units in (
        ("gpu.4.power_w", "gpu.4.energy_j", 1.0),
        ("pdu.a.power_w", "pdu.a.energy_kwh", 1 / J_PER_KWH),
        ("pdu.b.power_w", "pdu.b.energy_kwh", 1 / J_PER_KWH),
    ):
        e = run.col(energy)
        ok = np.flatnonzero(np.isfinite(e))
        first, last = ok[0], ok[-1]
        mean_power = np.nanmean(run.clean_col(power)[first + 1 : last + 1])
        expected = mean_power * (run.t_s[last] - run.t_s[first]) * to_units
        assert e[last] - e[first] == pytest.approx(expected, rel=0.01), energy


def test_outages_spill_across_hour_boundaries(run_of: Callable) -> None:
    sc = make_scenario("steady", days=0.25, seed=14)  # a seed with outages crossing an hour
    sampling = replace(sc.rack.sampling, outage_per_h=1.0, outage_s=(200.0, 200.0))
    sc = replace(sc, rack=replace(sc.rack, sampling=sampling))
    run = run_of(sc)
    outages = scenario_truth(sc)["device_outages"]
    assert len(outages) == 4 * 6  # every device, every hour
    spilled = [
        o for o in outages if (o["start_ts"] - sc.start_ts) // 3600 != (o["end_ts"] - 1 - sc.start_ts) // 3600
    ]
    for outage in outages:
        inside = (run.ts >= outage["start_ts"]) & (run.ts < outage["end_ts"])
        column = {"crac": "crac.1.cooling_w", "inlet": "inlet.bottom.temp_c"}.get(
            outage["device"], f"{outage['device']}.voltage_v"
        )
        assert np.isnan(run.col(column)[inside]).all(), outage
    assert spilled


def test_rack_twin_at_wall_clock_time() -> None:
    sc = make_scenario("tide", days=0.1, seed=2, start_ts=1764440000.75)
    twin = RackTwin(sc)
    twin.advance_to(1764440000.75 + 4000.2)
    assert twin.ts == pytest.approx(1764440000.75 + 4000)
    assert np.isfinite(twin.gpu_values()[0]["power_w"])
    chunk = next(iter(simulate(sc)))
    assert chunk.ts[0] == 1764440000.75
