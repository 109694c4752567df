"""The response model's pieces: least squares with forgetting, the lag bank, the IT curve guard."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent.engine.response import (
    EWLS,
    N_IT_BASE,
    LagBank,
    it_predict,
    it_ridge,
    stage_it_features,
    stage_it_ridge,
)


def test_ewls_recovers_coefficients_and_forgets() -> None:
    rng = np.random.default_rng(1)
    m = EWLS(1, 2, np.array([1e-6, 1e-6]))
    X = np.stack([np.ones(200), rng.uniform(0, 2, 200)], axis=1)
    m.update(X[None], (1.0 + 3.0 * X[:, 1])[None], np.ones((1, 200)), 1.0)
    np.testing.assert_allclose(m.theta[0], [1.0, 3.0], atol=1e-4)
    for _ in range(30):  # the plant changes: heavy forgetting follows it
        m.update(X[None], (2.0 + 3.0 * X[:, 1])[None], np.ones((1, 200)), 0.5)
    np.testing.assert_allclose(m.theta[0], [2.0, 3.0], atol=1e-3)


def test_ewls_keeps_an_unexcited_direction_instead_of_winding_up() -> None:
    m = EWLS(1, 3, np.array([1e-6, 1e-3, 1e-3]))  # [1, f_a, f_b]: stage fractions
    a = np.array([[1.0, 1.0, 0.0]] * 50)
    b = np.array([[1.0, 0.0, 1.0]] * 50)
    m.update(
        np.concatenate([a, b])[None],
        np.concatenate([np.full(50, 5.0), np.full(50, 7.0)])[None],
        np.ones((1, 100)),
        1.0,
    )
    pred_b = float(b[0] @ m.theta[0])
    for _ in range(200):  # only stage a is seen for a long time, with forgetting
        m.update(a[None], np.full((1, 50), 5.0), np.ones((1, 50)), 0.7)
    assert float(b[0] @ m.theta[0]) == pytest.approx(pred_b, rel=1e-3)
    assert np.isfinite(m.R).all() and np.abs(m.theta).max() < 100


def test_lag_bank_delays_and_lags_and_keeps_the_stage_that_caused_the_heat() -> None:
    bank = LagBank(bin_s=15.0, n_slots=2, max_run=60)
    heat = np.concatenate([np.full(40, 1000.0), np.zeros(20)])  # stage 0 heats, then stage 1 idles
    per_stage = np.zeros((60, 2))
    per_stage[:40, 0] = 1000.0
    k = int(np.flatnonzero((bank.tau_s == 300.0) & (bank.dead_s == 60.0))[0])
    bank.started = True  # start from cold: zero heat before
    y, y_s = bank.run(heat, per_stage, k)
    d = int(bank.delay[k])
    assert d == 4 and y[k, d - 1] == 0.0 and y[k, d] > 0.0  # dead time of 4 bins, then the lag
    assert y[k, 39] == pytest.approx(1000.0 * (1 - math.exp(-(40 - d) * 15.0 / 300.0)), rel=1e-9)
    assert y[k, 45] > y[k, 39] * 0.9  # still cooling stage 0's heat after the switch
    np.testing.assert_allclose(y_s.sum(axis=1), y[k])
    assert (y_s[:, 1] == 0).all()  # the idle stage caused none of it
    # chunking: the same series in two runs gives the same output
    bank2 = LagBank(bin_s=15.0, n_slots=2, max_run=60)
    bank2.started = True
    y1, _ = bank2.run(heat[:25], per_stage[:25], k)
    y2, _ = bank2.run(heat[25:], per_stage[25:], k)
    np.testing.assert_allclose(np.concatenate([y1, y2], axis=1), y, atol=1e-9)


def test_it_curve_is_extended_linearly_outside_the_learned_range() -> None:
    theta = np.zeros(N_IT_BASE + 2)
    theta[:4] = [0.1, 1.0, 0.5, 2.0]  # a strongly curved cubic in g (normalised by 1000 W)
    frac = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    g1 = np.array([500.0, 1000.0, 2000.0])
    g = np.stack([g1, g1**2, g1**3], axis=1)
    gl = np.zeros(3)
    inside = it_predict(theta, g[:2], gl[:2], frac[:2], 1000.0, 0.0, 1000.0)
    free = it_predict(theta, g, gl, frac, 1000.0, math.nan, math.nan)
    guarded = it_predict(theta, g, gl, frac, 1000.0, 0.0, 1000.0)
    np.testing.assert_allclose(guarded[:2], inside)
    slope = 1.0 + 2 * 0.5 * 1.0 + 3 * 2.0 * 1.0  # d/dg at the edge, per normalised unit
    assert guarded[2] == pytest.approx(inside[1] + slope * 1000.0)
    assert free[2] > guarded[2] * 1.5  # what a free cubic would have said
    assert it_ridge(2).shape == (N_IT_BASE + 2,)


def test_where_no_stage_is_known_the_stage_only_model_follows_power_that_falls_as_the_rate_rises() -> None:
    """No stage known (slot 0) and power not monotone in the job's rate (evaluation reports more
    samples/s than training yet draws less; a stall reports 0; no job reports nothing): the rate
    curve fits it, a straight line in the rate cannot."""
    S = 4
    rng = np.random.default_rng(3)
    n = 2000
    state = rng.integers(0, 4, n)  # 0 no job, 1 stalled, 2 training, 3 evaluating
    rate = np.array([0.0, 0.0, 1.0, 1.5])[state]  # over the job's usual rate
    rated = (state > 0).astype(float)
    power = np.array([0.30, 0.45, 1.00, 0.75])[state] + rng.normal(0, 0.005, n)
    frac = np.zeros((n, S))
    frac[:, 0] = 1.0  # every bin: no stage known
    X = stage_it_features(frac, rate / 1.5, rate, rated)
    model = EWLS(1, X.shape[1], stage_it_ridge(S))
    model.update(X[None], power[None], np.ones((1, n)), 1.0)
    err = np.abs(X @ model.theta[0] - power)
    assert err.max() < 0.03, err.max()
    line = np.stack([np.ones(n), rate], axis=1)  # the level-and-slope form used where a stage is known
    coef = np.linalg.lstsq(line, power, rcond=None)[0]
    assert np.abs(line @ coef - power).max() > 0.2
    known = frac.copy()
    known[:, 0], known[:, 2] = 0.0, 1.0  # a known stage keeps its own level and slope, no curve
    Xk = stage_it_features(known, rate / 1.5, rate, rated)
    assert not Xk[:, 2 * S:].any() and np.array_equal(Xk[:, S + 2], rate / 1.5)
