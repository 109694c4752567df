"""Each job's work-rate scales: the peak for the per-stage slopes, the usual rate for the rate curve."""

from __future__ import annotations

import json

import numpy as np

from agent.engine.job_rates import CAPACITY, JobRates


def test_the_usual_rate_is_the_training_rate_before_and_after_an_evaluation_raises_the_peak() -> None:
    rates = JobRates()
    training = np.full(80, 1000.0)
    training[::10] = 0.0  # a stall every 10th bin reports no progress
    peak_n, usual_n = rates.normalised(["a"] * 80, training)
    assert abs(usual_n[-1] - 1.0) < 0.03 and peak_n[-1] == 1.0
    peak_n, usual_n = rates.normalised(["a"] * 4, np.array([1500.0, 1500.0, 1000.0, 1000.0]))  # an eval
    assert abs(peak_n[-1] - 1000 / 1500) < 1e-12  # the peak moved to the eval's rate …
    assert abs(usual_n[-1] - 1.0) < 0.05 and abs(usual_n[0] - 1.5) < 0.05  # … the usual rate did not


def test_reading_again_does_not_move_the_scales_and_each_job_has_its_own() -> None:
    rates = JobRates()
    rates.normalised(["a", "b"] * 30, np.array([1000.0, 40.0] * 30))
    before = json.dumps(rates.state())
    again = rates.normalised(["a", "b"], np.array([3000.0, 80.0]), learn=False)
    assert json.dumps(rates.state()) == before
    assert abs(again[1][0] - 3.0) < 0.1 and abs(again[1][1] - 2.0) < 0.1
    assert np.array_equal(rates.normalised(["a"], np.array([np.nan]))[0], [0.0])  # no rate: 0


def test_a_state_of_peaks_only_loads_and_memory_stays_bounded() -> None:
    rates = JobRates()
    rates.load({"old": 500.0})  # saved before the usual rate existed
    peak_n, usual_n = rates.normalised(["old"], np.array([250.0]), learn=False)
    assert peak_n[0] == 0.5 and usual_n[0] == 0.5
    rates.normalised([f"j{i}" for i in range(3 * CAPACITY)], np.arange(1.0, 3 * CAPACITY + 1))
    assert len(rates.state()) == CAPACITY
    restored = JobRates()
    restored.load(json.loads(json.dumps(rates.state())))
    assert restored.state() == rates.state()


def test_a_start_up_in_partly_rated_bins_does_not_hold_the_usual_rate_down() -> None:
    rates = JobRates()
    start_up = np.array([80.0, 300.0, 700.0])  # bins mixing the loader's zeros and the first steps
    _, usual_n = rates.normalised(["a"] * 23, np.concatenate((start_up, np.full(20, 1000.0))))
    assert abs(usual_n[-1] - 1.0) < 1e-9  # the training rate, not 80 samples/s stepped up by 2 %
