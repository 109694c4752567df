"""The cooling unit's part-load curve: a load the unit model has not learned is no evidence, and once
learned its band corrects the fit; a COP loss at the usual load still shows in full."""

from __future__ import annotations

import math

import numpy as np

from agent.engine.drift import tuning as T
from agent.engine.drift.cooling_model import CoolingUnitModel, _features

T0 = 1_764_000_000.0
CAPACITY_W = 40_000.0


def unit_power_w(load_w: float, cop_loss: float = 0.0) -> float:
    """A unit whose COP peaks at 80 % load and whose fans stop at a 50 % floor: log power is far from
    linear in log load below the usual operating point."""
    plr = load_w / CAPACITY_W
    cop = 3.5 * (1.0 - 0.6 * ((plr - 0.8) / 0.8) ** 2) * (1.0 - cop_loss)
    fan = max(0.5, plr)
    return load_w / cop + 3000.0 * fan**3


def run(model: CoolingUnitModel, loads: np.ndarray, t0_bin: int, cop_loss: float = 0.0,
        rng: np.random.Generator | None = None) -> list[float]:
    rng = rng or np.random.default_rng(0)
    out = []
    for i, load in enumerate(loads):
        power = unit_power_w(float(load), cop_loss) * (1.0 + 0.005 * float(rng.normal()))
        out.append(model.residual_pct(power, float(load), math.nan, T0 + 60.0 * (t0_bin + i), True))
    return out


def test_a_load_the_model_has_not_learned_is_not_judged() -> None:
    rng = np.random.default_rng(3)
    model = CoolingUnitModel(bin_s=60.0)
    run(model, 0.85 * CAPACITY_W * (1.0 + 0.03 * np.sin(np.arange(1440) / 37.0)), 0, rng=rng)  # a day busy
    assert np.isfinite(run(model, np.full(10, 0.86 * CAPACITY_W), 1440, rng=rng)).all()
    first_visit = run(model, np.full(59, 0.35 * CAPACITY_W), 1450, rng=rng)  # an idle gap, never seen
    assert np.isnan(first_visit).all()  # no evidence before an hour of that load is learned
    assert np.isfinite(run(model, np.full(3, 0.35 * CAPACITY_W), 1509, rng=rng)[-1])  # then judged


def test_a_load_band_corrects_the_fit_at_the_bend_of_the_curve() -> None:
    """Jobs of 3 h (their checkpoints at a lower load) with 20-min idle gaps between them, as on the
    twin's single-job racks: the unit's load in a gap sits at the bend of its curve, which the
    smooth fit, learned mostly at the busy load, misses by more than the smallest alarmed effect."""
    rng = np.random.default_rng(4)
    model = CoolingUnitModel(bin_s=60.0)
    busy_load, idle_load = 0.85 * CAPACITY_W, 0.35 * CAPACITY_W
    busy = busy_load * (1.0 + 0.03 * np.sin(np.arange(180) / 37.0))
    busy[150:] = 0.6 * CAPACITY_W  # each job's checkpoints: a third operating point
    smallest = T.BLIND_COOLING_MIN_EFFECT_PCT  # the smallest shift the cooling channel alarms
    t, gaps = 0, []
    for _ in range(20):  # 2.8 days
        run(model, busy, t, rng=rng)
        t += busy.size
        x = _features(idle_load / model.load_scale, T0 + 60.0 * t)
        fit_alone = math.expm1(math.log(unit_power_w(idle_load) / model.power_scale) - float(x @ model.theta))
        gaps.append((100.0 * fit_alone, run(model, np.full(20, idle_load), t, rng=rng)))
        t += 20
    last_fit, last_gap = gaps[-1]
    assert last_fit > smallest  # what the smooth fit alone would call "more power for the same heat" …
    assert abs(float(np.median(last_gap))) < smallest / 2.0  # … the band's level corrects


def test_a_cop_loss_at_the_usual_load_shows_in_full() -> None:
    rng = np.random.default_rng(5)
    model = CoolingUnitModel(bin_s=60.0)
    busy = CAPACITY_W * (0.85 + 0.03 * np.sin(np.arange(2880) / 37.0))
    run(model, busy, 0, rng=rng)
    model_off = [model.residual_pct(unit_power_w(float(x), 0.06), float(x), math.nan, T0 + 60.0 * (2880 + i),
                                    False) for i, x in enumerate(busy[:120])]
    assert 5.0 < float(np.median(model_off)) < 8.0  # 1 / (1 − 0.06) of the compressor's share
