"""Every drift estimator: doctests run, state round-trips exactly, state does not grow, None before data."""

from __future__ import annotations

import doctest
import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from agent.engine.drift import estimators
from agent.engine.drift.estimators import (
    ESTIMATORS,
    CorrelatedScale,
    DelayedReference,
    Estimator,
    LevelInNoise,
    OperatingBands,
    ReferenceLevel,
    StageLocation,
    StageMix,
    TwoSidedCusum,
    TypicalRate,
)
from tests.drift.synthetic import state_leaves

# One way to build and to feed each estimator: (factory, update(est, rng, i), value readers).
Feed = Callable[[Any, np.random.Generator, int], object]
CASES: dict[type[Estimator], tuple[Callable[[], Estimator], Feed, Callable[[Any], object]]] = {
    ReferenceLevel: (
        lambda: ReferenceLevel(fast_halflife=5.0, ref_halflife=50.0),
        lambda e, r, i: e.update(float(r.normal()), hold=bool(i % 7 == 0)),
        lambda e: e.moved,
    ),
    StageLocation: (
        lambda: StageLocation(n_slots=3, halflife=50.0, scale_halflife=80.0, min_scale=0.1, warm=5),
        lambda e, r, i: e.update(float(r.normal()), i % 3, learn_scale=bool(i % 5)),
        lambda e: e.scale(0),
    ),
    CorrelatedScale: (
        lambda: CorrelatedScale(halflife=40.0, min_scale=0.2, z_clip=6.0),
        lambda e, r, i: e.update(float(r.normal())),
        lambda e: e.value,
    ),
    TwoSidedCusum: (
        lambda: TwoSidedCusum(k=0.5),
        lambda e, r, i: e.update(float(r.normal()), dev=float(r.normal()), ts=float(i)),
        lambda e: e.since if math.isfinite(e.since) else None,
    ),
    DelayedReference: (
        lambda: DelayedReference(delay=7),
        lambda e, r, i: e.update(float(r.normal())),
        lambda e: e.value,
    ),
    StageMix: (
        lambda: StageMix(n_slots=4, slow_halflife=100.0, fast_halflife=10.0, warm=5),
        lambda e, r, i: e.update(int(r.integers(0, 4))),
        lambda e: e.distance or None,
    ),
    TypicalRate: (
        lambda: TypicalRate(n_slots=2, halflife=30.0, band=0.03, reacquire=0.6, first=5),
        lambda e, r, i: e.update(float(100.0 * (1.0 + 0.05 * r.normal())), i % 2, fallback=100.0),
        lambda e: e.value(0),
    ),
    LevelInNoise: (
        lambda: LevelInNoise(level_halflife=3.0, noise_halflife=100.0, min_scale=0.1, z_clip=6.0),
        lambda e, r, i: e.update(float(r.normal()) if i % 11 else math.nan),
        lambda e: e.z,
    ),
    OperatingBands: (
        lambda: OperatingBands(n_bands=2, width=1.5, halflife=40.0, warm=3.0),
        lambda e, r, i: e.update(float(r.normal()), float(r.normal()) if i % 13 else math.nan),
        lambda e: e.level(0.1),
    ),
}


def test_doctests_run() -> None:
    finder = doctest.DocTestFinder(recurse=False)
    undocumented = [cls.__name__ for cls in ESTIMATORS if not any(t.examples for t in finder.find(cls))]
    assert undocumented == [], "every estimator carries a doctest"
    result = doctest.testmod(estimators, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= len(ESTIMATORS)
    assert result.failed == 0


def test_every_estimator_has_a_case() -> None:
    assert set(CASES) == set(ESTIMATORS)


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_none_before_data_and_state_round_trip(cls: type[Estimator]) -> None:
    make, feed, read = CASES[cls]
    est = make()
    assert read(est) is None  # nothing made up before the first update
    rng = np.random.default_rng(3)
    for i in range(500):
        assert feed(est, rng, i) is est  # update returns self
    assert read(est) is not None
    saved = json.loads(json.dumps(est.state()))  # JSON-safe
    again = cls.from_state(saved)
    assert again.state() == est.state()
    # …and both go on identically.
    rng_a, rng_b = np.random.default_rng(9), np.random.default_rng(9)
    for i in range(200):
        feed(est, rng_a, i)
        feed(again, rng_b, i)
    assert again.state() == est.state()


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_state_size_does_not_grow(cls: type[Estimator]) -> None:
    make, feed, _ = CASES[cls]
    short, long = make(), make()
    rng = np.random.default_rng(5)
    for i in range(10):
        feed(short, rng, i)
    for i in range(20_000):
        feed(long, rng, i)
    assert state_leaves(short.state()) == state_leaves(long.state())
    assert len(json.dumps(long.state())) <= len(json.dumps(short.state())) + 64


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_bad_state_is_a_clear_error(cls: type[Estimator]) -> None:
    make, _, _ = CASES[cls]
    state = make().state()
    with pytest.raises(ValueError, match=cls.__name__):
        cls.from_state({"no": "params"})
    for key, value in state.items():
        if key == "params":
            continue
        broken = dict(state, **{key: "x" if not isinstance(value, list) else value[:-1] or ["x"]})
        with pytest.raises(ValueError, match=rf"^{cls.__name__}: {key} must"):  # names this field
            cls.from_state(broken)


def test_cusum_sizes_a_step_in_the_residuals_unit() -> None:
    """A 2-σ step: the upper side leaves zero at the step and its mean deviation is the step's."""
    cusum = TwoSidedCusum(k=0.5)
    rng = np.random.default_rng(1)
    for i in range(200):
        z = float(rng.normal()) * 0.1 + (2.0 if i >= 100 else 0.0)
        cusum.update(z, dev=3.0 * z, ts=float(i))
    assert cusum.up > 100.0 and cusum.down == 0.0
    assert 100.0 <= cusum.since <= 101.0
    assert cusum.deviation == pytest.approx(6.0, abs=0.2)


def test_stage_location_is_robust_to_one_glitch() -> None:
    loc = StageLocation(n_slots=1, halflife=100.0, scale_halflife=100.0, min_scale=0.1, warm=10)
    rng = np.random.default_rng(2)
    for _ in range(300):
        loc.update(float(rng.normal()), 0)
    before = loc.level(0)
    assert before is not None
    loc.update(1000.0, 0)
    after = loc.level(0)
    assert after is not None and abs(after - before) < 0.05  # Huber: one glitch moves it little
    scale = loc.scale(0)
    assert scale is not None and 0.7 < scale < 1.3


def test_correlated_scale_inflates_for_persistent_noise() -> None:
    white, ar = CorrelatedScale(200.0, 0.1, 6.0), CorrelatedScale(200.0, 0.1, 6.0)
    rng = np.random.default_rng(4)
    x = 0.0
    for _ in range(3000):
        white.update(float(rng.normal()))
        x = 0.8 * x + float(rng.normal())
        ar.update(x)
    assert white.vif < 1.3
    assert ar.vif == pytest.approx((1 + 0.6) / (1 - 0.6))  # ρ ≈ 0.8, capped at max_rho
