"""The twin's physics: power chain, facility ratio, cooling lag, COP cycle (docs/twin.md)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from agent.sim.cooling import Environment
from agent.sim.lag import delay, first_order_lag
from agent.sim.params import CoolingParams, NodeParams
from agent.sim.physics import psu_efficiency, psu_loss_coefficients
from agent.sim.scenarios import make_scenario

SHARE = CoolingParams().share


def test_psu_curve_passes_through_its_anchor_points() -> None:
    node = NodeParams()
    coeffs = psu_loss_coefficients(node.psu_curve)
    for load, eta in node.psu_curve:
        assert psu_efficiency(np.array([load]), coeffs)[0] == pytest.approx(eta, abs=1e-9)
    curve = psu_efficiency(np.linspace(0.05, 1.0, 96), coeffs)
    assert 0.3 < np.linspace(0.05, 1.0, 96)[np.argmax(curve)] < 0.7  # best near half load


def test_first_order_lag_is_the_exact_recursion() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(100.0, 20.0, (5000, 3))
    tau = 37.0
    a = np.exp(-1.0 / tau)
    y = np.empty_like(x)
    prev = np.full(3, 80.0)
    for i in range(len(x)):
        prev = a * prev + (1 - a) * x[i]
        y[i] = prev
    np.testing.assert_allclose(first_order_lag(x, tau, 80.0), y, rtol=1e-9)
    # Long inputs with a short τ are split into blocks without overflow.
    np.testing.assert_allclose(first_order_lag(x[:, 0], 2.0, 80.0)[-1], _loop(x[:, 0], 2.0, 80.0), rtol=1e-9)


def _loop(x: np.ndarray, tau: float, y0: float) -> float:
    a, y = np.exp(-1.0 / tau), y0
    for v in x:
        y = a * y + (1 - a) * v
    return y


def test_delay_shifts_across_chunks() -> None:
    history = np.zeros(3)
    first, history = delay(np.arange(1.0, 6.0), history)
    second, history = delay(np.arange(6.0, 9.0), history)
    np.testing.assert_array_equal(np.concatenate([first, second]), [0, 0, 0, 1, 2, 3, 4, 5])


def test_pdu_power_exceeds_gpu_total(simulated: Callable) -> None:
    run = simulated("steady", 0.25)
    pdu = run.minute_median(run.clean_col("pdu.a.power_w")) + run.minute_median(
        run.clean_col("pdu.b.power_w")
    )
    gpu = run.minute_median(run.gpu_total_w())
    ok = np.isfinite(pdu) & np.isfinite(gpu)
    assert ok.sum() > 300
    assert np.all(pdu[ok] > gpu[ok] * 1.05)
    # Node base power (CPUs, memory, NICs, fans) and PSU losses come on top of the GPUs.
    assert np.min(pdu[ok] - gpu[ok]) > 0.9 * run.scenario.rack.node.base_w * run.scenario.rack.nodes


def test_facility_to_it_ratio_is_higher_at_low_load(simulated: Callable) -> None:
    run = simulated("steady", 1.0)
    pdu = run.minute_median(run.clean_col("pdu.a.power_w")) + run.minute_median(
        run.clean_col("pdu.b.power_w")
    )
    crac = run.minute_median(run.clean_col("crac.1.power_w"))
    gpu_per = run.minute_median(run.gpu_total_w()) / run.scenario.gpus
    ratio = (pdu + SHARE * crac) / pdu
    low = np.isfinite(ratio) & (gpu_per < 150.0)
    high = np.isfinite(ratio) & (gpu_per > 550.0)
    assert low.sum() >= 10 and high.sum() >= 100
    assert np.median(ratio[low]) > np.median(ratio[high]) + 0.1


def _step_response(run, column: str) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Dead time and time constant of ``column`` after the idle → forward_backward steps.

    Averages the normalised responses, then reads the 10 % and 63 % crossings: for a dead time
    θ and lag τ these are θ + 0.105 τ and θ + τ.
    """
    stage = run.stage
    ups = np.flatnonzero((stage[1:] == "forward_backward") & (stage[:-1] == "idle")) + 1
    values = run.clean_col(column)
    curves = []
    for up in ups:
        if up + 3000 > len(values):
            continue
        before = np.nanmean(values[up - 600 : up])
        after = np.nanmean(values[up + 2400 : up + 3000])
        curves.append((values[up : up + 2400] - before) / (after - before))
    assert curves, "no idle → forward_backward step in the trace"
    with warnings.catch_warnings():  # seconds between the unit's 10-s samples are all-NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        curve = np.nanmean(curves, axis=0)
    t = np.flatnonzero(np.isfinite(curve))
    rising = np.maximum.accumulate(curve[t])
    t10 = float(np.interp(0.10, rising, t))
    t63 = float(np.interp(1 - np.exp(-1), rising, t))
    tau = (t63 - t10) / (1.0 + np.log(0.9))
    return t63 - tau, tau


@pytest.mark.parametrize(("tau_s", "dead_s"), [(300.0, 60), (600.0, 150)])
def test_cooling_follows_a_load_step_with_the_configured_lag(
    run_of: Callable, tau_s: float, dead_s: int
) -> None:
    sc = make_scenario("lag_steps", days=0.5, seed=4)
    sc = replace(sc, rack=replace(sc.rack, cooling=replace(sc.rack.cooling, tau_s=tau_s, dead_s=dead_s)))
    run = run_of(sc)
    dead, tau = _step_response(run, "crac.1.cooling_w")
    assert tau == pytest.approx(tau_s, rel=0.2)
    assert dead == pytest.approx(dead_s, abs=30.0)
    # The unit's electrical power follows the same lag; the PDU (the heat) does not lag.
    dead_p, tau_p = _step_response(run, "crac.1.power_w")
    assert tau_p == pytest.approx(tau_s, rel=0.25)
    assert dead_p == pytest.approx(dead_s, abs=40.0)
    dead_pdu, tau_pdu = _step_response(run, "pdu.a.power_w")
    assert dead_pdu + tau_pdu < 60.0


def test_cop_follows_the_daily_outdoor_cycle(simulated: Callable) -> None:
    run = simulated("steady", 2.0, seed=3)
    c = run.scenario.rack.cooling
    power = run.clean_col("crac.1.power_w")
    fan_w = c.fan_max_w * (run.clean_col("crac.1.fan_pct") / 100.0) ** 3
    cop = run.clean_col("crac.1.cooling_w") / (power - fan_w)
    hour = (run.ts % 86400.0) / 3600.0
    warm = np.isfinite(cop) & (np.abs(hour - c.outdoor_peak_hour) < 2.0)
    cold = np.isfinite(cop) & (np.abs(hour - (c.outdoor_peak_hour + 12.0) % 24.0) < 2.0)
    assert np.median(cop[cold]) > 1.2 * np.median(cop[warm])
    env = Environment(c, (0.0, 0.0, 0.0), swing_enabled=False)
    ok = np.isfinite(cop)
    assert np.corrcoef(cop[ok], env.outdoor_c(run.ts[ok]))[0, 1] < -0.7


def test_lower_setpoint_costs_cooling_power_not_it_power() -> None:
    """Direct check of the COP model: colder supply air → lower COP, at every outdoor temperature."""
    from agent.sim.cooling import cop

    c = CoolingParams()
    outdoor = np.linspace(5.0, 35.0, 31)
    ones = np.ones_like(outdoor)
    warm = cop(c, 22.0 * ones, outdoor, 0.7 * ones, 0 * ones)
    cold = cop(c, 20.0 * ones, outdoor, 0.7 * ones, 0 * ones)
    assert np.all(cold < warm)
    assert np.all(np.diff(warm) < 0)  # hotter outside → lower COP
    part = cop(c, 22.0 * ones[:3], 20.0 * ones[:3], np.array([0.2, 0.75, 1.0]), 0 * ones[:3])
    assert part[1] > part[0] and part[1] > part[2]  # best at part load
