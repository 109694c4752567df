"""Each fault moves the signals its cause predicts and leaves the others alone.

Every fault scenario shares its workload and random streams with ``steady`` of the same seed,
so the comparison is the fault's effect alone, measured on the sampled trace (what an engine
sees) over the last hours, when gradual faults have reached full strength.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from agent.sim import FAULT_KINDS, FaultSpec, make_scenario, scenario_truth

DAYS = 0.5
SEED = 11


def _window_mean(run, name: str) -> float:  # type: ignore[no-untyped-def]
    values = run.clean_col(name) if name != "gpu_total" else run.gpu_total_w()
    late = run.t_s >= 0.75 * DAYS * 86400
    return float(np.nanmean(values[late]))


def _effects(simulated: Callable, scenario: str) -> dict[str, float]:
    """Relative change (power, energy) or absolute change in K (temperatures) vs steady."""
    base, faulty = simulated("steady", DAYS, SEED), simulated(scenario, DAYS, SEED)
    out: dict[str, float] = {}
    for name in (
        "gpu_total",
        "pdu.a.power_w",
        "pdu.b.power_w",
        "crac.1.power_w",
        "crac.1.cooling_w",
        "work_rate",
        "crac.1.setpoint_c",
        "crac.1.supply_temp_c",
        "inlet.top.temp_c",
        "inlet.mid.temp_c",
        "inlet.bottom.temp_c",
    ):
        a, b = _window_mean(base, name), _window_mean(faulty, name)
        out[name] = b - a if name.endswith("_c") else b / a - 1.0
    return out


# fault scenario → ({signal: (low, high)} that must move into the range, signals that must not move)
EXPECTED: dict[str, tuple[dict[str, tuple[float, float]], tuple[str, ...]]] = {
    "fault_cooling": (
        {"crac.1.power_w": (0.08, 0.25)},
        (
            "gpu_total",
            "pdu.a.power_w",
            "pdu.b.power_w",
            "crac.1.cooling_w",
            "crac.1.setpoint_c",
            "inlet.top.temp_c",
        ),
    ),
    "fault_setpoint": (
        {"crac.1.power_w": (0.015, 0.1), "crac.1.setpoint_c": (-2.0, -0.5), "inlet.mid.temp_c": (-2.0, -0.5)},
        ("gpu_total", "pdu.a.power_w", "pdu.b.power_w", "work_rate"),
    ),
    "fault_power_chain": (
        {"pdu.b.power_w": (0.02, 0.08), "crac.1.power_w": (0.001, 0.02)},
        ("gpu_total", "pdu.a.power_w", "crac.1.setpoint_c", "inlet.top.temp_c", "work_rate"),
    ),
    "fault_hotspot": (
        {"inlet.top.temp_c": (1.0, 6.0), "pdu.a.power_w": (0.001, 0.02), "pdu.b.power_w": (0.001, 0.02)},
        ("gpu_total", "inlet.mid.temp_c", "inlet.bottom.temp_c", "crac.1.setpoint_c", "work_rate"),
    ),
    "fault_gpu_ageing": (
        {"gpu_total": (0.02, 0.08), "pdu.a.power_w": (0.015, 0.08), "crac.1.power_w": (0.002, 0.03)},
        ("work_rate", "crac.1.setpoint_c", "inlet.bottom.temp_c"),
    ),
    "fault_gpu_driver": (
        {"gpu_total": (0.015, 0.06), "pdu.b.power_w": (0.01, 0.06)},
        ("work_rate", "crac.1.setpoint_c", "inlet.bottom.temp_c"),
    ),
}
STILL = {"_c": 0.05, "": 0.0015}  # K for temperatures, fraction otherwise


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_fault_moves_only_what_its_cause_predicts(simulated: Callable, scenario: str) -> None:
    effects = _effects(simulated, scenario)
    moved, still = EXPECTED[scenario]
    for name, (low, high) in moved.items():
        assert low <= effects[name] <= high, f"{scenario}: {name} changed by {effects[name]:+.4f}"
    for name in still:
        limit = STILL["_c"] if name.endswith("_c") else STILL[""]
        assert abs(effects[name]) <= limit, (
            f"{scenario}: {name} should not move, changed {effects[name]:+.4f}"
        )


def test_nothing_differs_before_the_fault_starts(simulated: Callable) -> None:
    base, faulty = simulated("steady", DAYS, SEED), simulated("fault_cooling", DAYS, SEED)
    start_s = faulty.scenario.faults[0].start_h * 3600
    before = base.t_s < start_s
    for name in ("crac.1.power_w", "pdu.a.power_w", "gpu.3.power_w"):
        np.testing.assert_array_equal(base.col(name)[before], faulty.col(name)[before])


def test_driver_update_resets_the_energy_counter(simulated: Callable) -> None:
    run = simulated("fault_gpu_driver", DAYS, SEED)
    start_s = run.scenario.faults[0].start_h * 3600
    energy = run.col("gpu.0.energy_j")
    before = energy[(run.t_s < start_s) & np.isfinite(energy)]
    after = energy[(run.t_s >= start_s) & np.isfinite(energy)]
    assert before[-1] > 1e6 and after[0] < 1e5  # restarted near zero
    assert np.all(np.diff(after) >= 0) and np.all(np.diff(before) >= 0)
    gap = np.isnan(energy[(run.t_s >= start_s) & (run.t_s < start_s + 20)])
    assert gap.all()  # NVML unavailable while the driver reloads


def test_truth_names_cause_component_and_timing() -> None:
    for kind in FAULT_KINDS:
        sc = make_scenario(
            "steady", days=1, seed=0, fault=FaultSpec(kind, start_h=6, magnitude_pct=10, shape="step")
        )
        (fault,) = scenario_truth(sc)["faults"]
        assert fault["start_ts"] == sc.start_ts + 6 * 3600
        assert fault["magnitude_pct"] == 10
        assert fault["cause"] == FAULT_KINDS[kind][0] and fault["component"] == FAULT_KINDS[kind][1]
    gradual = make_scenario("fault_gpu_ageing", days=2, seed=0, fault_shape="gradual", fault_start_h=10)
    (fault,) = scenario_truth(gradual)["faults"]
    assert fault["shape"] == "gradual" and fault["full_ts"] > fault["start_ts"]


def test_magnitude_scales_the_effect(simulated: Callable, run_of: Callable) -> None:
    base = simulated("steady", 0.1, 2)
    late = base.t_s >= 3600
    ref = np.nanmean(base.clean_col("crac.1.power_w")[late])
    rises = []
    for pct in (5.0, 20.0):
        fault = FaultSpec("cooling", start_h=0.5, magnitude_pct=pct, shape="step")
        run = run_of(make_scenario("steady", days=0.1, seed=2, fault=fault))
        rises.append(np.nanmean(run.clean_col("crac.1.power_w")[late]) / ref - 1.0)
    assert 0.02 < rises[0] < rises[1] and rises[1] > 3.0 * rises[0]
