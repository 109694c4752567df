"""The CUSUM threshold follows the configured false-alarm target."""

from __future__ import annotations

import pytest

from agent.engine.drift.threshold import cusum_threshold, siegmund_arl0, threshold_for_target


def test_threshold_meets_the_run_length_it_was_asked_for() -> None:
    for target in (10.0, 1e3, 1e6):
        h = cusum_threshold(target, 0.5)
        assert siegmund_arl0(h, 0.5) >= target
        assert siegmund_arl0(h - 0.01, 0.5) < target


def test_stricter_false_alarm_target_raises_the_threshold() -> None:
    loose = threshold_for_target(10.0, 300.0, 8, 0.5, 1.0)
    strict = threshold_for_target(0.1, 300.0, 8, 0.5, 1.0)
    assert strict > loose + 3.0


def test_non_positive_target_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="false_alarms_per_30d"):
        threshold_for_target(0.0, 300.0, 8, 0.5, 1.0)
