"""The residual level's memory is chosen per rack by how well each candidate forecast the next window."""

from __future__ import annotations

import numpy as np

from agent.engine.level_bank import HALFLIVES_S, LevelBank

BIN_S = 15.0
BINS = 60  # 15-min windows of 15-s bins


def _run(resid_of_window, windows: int = 200, columns: int = 1) -> LevelBank:
    bank = LevelBank(columns, 300.0)
    dur = np.full(BINS, BIN_S)
    rows = np.ones(BINS, dtype=bool)
    for i in range(windows):
        resid = resid_of_window(i).reshape(BINS, columns)
        bank.update(resid, rows, dur, BINS * BIN_S / 3600.0, score=True)
    return bank


def test_noisy_readings_around_a_steady_offset_get_a_long_memory() -> None:
    rng = np.random.default_rng(1)
    bank = _run(lambda i: 200.0 + rng.normal(0.0, 600.0, BINS))
    assert HALFLIVES_S[int(bank.choice[0])] >= 3600.0  # a window's mean noise is 77 W, an hour's 32 W
    assert abs(bank.level[0] - 200.0) < 60.0


def test_a_level_that_wanders_from_window_to_window_gets_a_short_memory() -> None:
    rng = np.random.default_rng(2)
    walk = np.cumsum(rng.normal(0.0, 300.0, 400))
    bank = _run(lambda i: walk[i] + rng.normal(0.0, 20.0, BINS), windows=400)
    assert 0.0 < HALFLIVES_S[int(bank.choice[0])] <= 900.0


def test_a_residual_with_no_level_keeps_no_level() -> None:
    """Zero-mean noise that is independent from window to window: any level only adds noise."""
    rng = np.random.default_rng(3)
    # every bin of a window shares one draw: a window-long disturbance no level can forecast
    bank = _run(lambda i: np.full(BINS, rng.normal(0.0, 500.0)))
    assert HALFLIVES_S[int(bank.choice[0])] == 0.0
    assert bank.level[0] == 0.0


def test_the_default_memory_is_used_until_a_window_was_scored() -> None:
    bank = LevelBank(3, 300.0)
    assert list(bank.choice) == [HALFLIVES_S.index(300.0)] * 3
    dur, rows = np.full(BINS, BIN_S), np.ones(BINS, dtype=bool)
    bank.update(np.full((BINS, 3), 50.0), rows, dur, 0.25, score=False)  # learns, is not scored
    assert list(bank.choice) == [HALFLIVES_S.index(300.0)] * 3
    assert np.all(bank.level > 0)


def test_state_round_trips_and_a_single_level_state_still_loads() -> None:
    rng = np.random.default_rng(4)
    bank = _run(lambda i: rng.normal(100.0, 50.0, BINS * 2), windows=20, columns=2)
    again = LevelBank(2, 300.0)
    again.load_arrays("cool", bank.state_arrays("cool"))
    assert np.array_equal(again.level, bank.level) and np.array_equal(again.choice, bank.choice)
    old = LevelBank(2, 300.0)
    old.load_arrays("cool", {}, before_bank=np.array([12.0, -3.0]))  # before the bank: one level each
    assert list(old.level) == [12.0, -3.0]
