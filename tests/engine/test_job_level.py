"""``model.JobLevel``: a new job's own IT level per stage, learned from its own bins only."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent.engine.model import JobLevel

T0 = 1_764_000_000.0
BIN_S = 15.0
S = 4  # stage slots


def _bins(t0: float, n: int, slot: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    start = t0 + BIN_S * np.arange(n)
    frac = np.zeros((n, S))
    frac[:, slot] = 1.0
    return start, frac, np.full(n, BIN_S), np.ones(n, dtype=bool)


def test_a_new_job_learns_its_own_level_in_the_stages_it_runs() -> None:
    level = JobLevel(S, BIN_S)
    change = (T0 + 600.0, T0 + 600.0 + 7200.0, math.nan)
    start, frac, dur, seen = _bins(T0, 60, slot=2)  # 15 min of stage 2: 10 of the old job, 5 of the new
    resid = np.where(start >= change[0], 300.0, -500.0)  # the new job draws 300 W more than the model
    level.learn(start, frac, dur, seen, resid, change)
    # only the new job's bins count: 20 bins of +300 W against a prior of one bin at 0
    assert level.level_w[2] == pytest.approx(300.0 * 20 / 21)
    assert level.level_w[[0, 1, 3]].tolist() == [0.0, 0.0, 0.0]  # not run yet: the rack's usual level
    # the next window, in stage 2: predicted with the level; a stage-1 bin gets none
    start, frac, _, _ = _bins(T0 + 900.0, 4, slot=2)
    frac[3] = np.eye(S)[1]
    assert level.per_bin_w(start, frac, change).tolist() == pytest.approx([300.0 * 20 / 21] * 3 + [0.0])


def test_the_level_stays_as_learned_after_the_relearn_and_under_a_fault() -> None:
    level = JobLevel(S, BIN_S)
    change = (T0, T0 + 900.0, math.nan)
    start, frac, dur, seen = _bins(T0, 120, slot=1)  # 30 min: the first half inside the re-learn
    resid = np.where(start < T0 + 900.0, 200.0, 800.0)
    level.learn(start, frac, dur, seen, resid, change)
    learned = float(level.level_w[1])
    assert learned == pytest.approx(200.0 * 60 / 61)  # the re-learn's 60 bins only, not the later 800 W
    later, frac, dur, seen = _bins(T0 + 1800.0, 60, slot=1)  # after the re-learn: nothing moves
    level.learn(later, frac, dur, seen, np.full(60, 900.0), change)
    assert level.level_w[1] == learned
    fresh = JobLevel(S, BIN_S)  # a confirmed IT fault: the level does not learn it
    fresh.learn(*_bins(T0, 120, slot=1), np.full(120, 500.0), change, learn=False)
    assert fresh.level_w.tolist() == [0.0] * S


def test_bins_of_a_job_not_judged_yet_get_the_racks_usual_level() -> None:
    level = JobLevel(S, BIN_S)
    change = (T0, T0 + 7200.0, math.nan)
    start, frac, dur, seen = _bins(T0, 40, slot=1)
    level.learn(start, frac, dur, seen, np.full(40, 400.0), change)
    assert level.level_w[1] > 0
    nxt, frac, _, _ = _bins(T0 + 3600.0, 8, slot=1)
    judging = (T0, T0 + 7200.0, float(nxt[4]))  # a new job id in the middle of the window
    out = level.per_bin_w(nxt, frac, judging)
    assert (out[:4] > 0).all() and (out[4:] == 0.0).all()
    # a new-work change point the level has not learned since: the same from that bin on
    assert (level.per_bin_w(nxt, frac, (float(nxt[2]), math.inf, math.nan))[2:] == 0.0).all()


def test_no_level_before_the_first_change_point_and_state_round_trip() -> None:
    level = JobLevel(S, BIN_S)
    start, frac, dur, seen = _bins(T0, 40, slot=3)
    level.learn(start, frac, dur, seen, np.full(40, 250.0), (math.nan, math.nan, math.nan))
    assert level.level_w.tolist() == [0.0] * S  # the model's own first job: no offset of its own
    level.learn(start, frac, dur, seen, np.full(40, 250.0), (T0, T0 + 7200.0, math.nan))
    copy = JobLevel(S, BIN_S)
    copy.load_arrays(level.state_arrays())
    assert copy.level_w.tolist() == level.level_w.tolist() and copy.since_ts == T0
    copy.load_arrays({})  # a state from before the job level: nothing changes, nothing raises
    with pytest.raises(ValueError, match="shape"):
        copy.load_arrays({**level.state_arrays(), "job_level_sum": np.zeros(S + 1)})


def test_bins_without_gpu_power_neither_get_nor_learn_a_level() -> None:
    """Without GPU power the IT residual's one-window memory already is the job's level: a second
    estimator of the same offset would chase it (the no-GPU, no-label rack predicted worse)."""
    level = JobLevel(S, BIN_S)
    change = (T0, T0 + 7200.0, math.nan)
    start, frac, dur, seen = _bins(T0, 40, slot=1)
    gpu = np.arange(40) < 20  # GPU power in the first half only
    level.learn(start, frac, dur, seen, np.where(gpu, 200.0, 900.0), change, gpu)
    assert level.level_w[1] == pytest.approx(200.0 * 20 / 21)  # the no-GPU bins' 900 W is not learned
    assert level.per_bin_w(start[:4], frac[:4], change, np.array([True, False, True, False])).tolist() == (
        pytest.approx([200.0 * 20 / 21, 0.0, 200.0 * 20 / 21, 0.0]))
