"""PowerIntegral: the energy estimate of devices without a counter (SNMP ENTITY-SENSOR PDUs, NVML
GPUs without a total-energy counter): trapezoids, never across a gap or a restart."""

from __future__ import annotations

import pytest

from drivers.counters import PowerIntegral


def test_the_first_reading_starts_at_zero_and_trapezoids_follow() -> None:
    integral = PowerIntegral(max_gap_s=5.0)
    assert integral.add(100.0, 400.0) == 0.0
    assert integral.add(102.0, 600.0) == pytest.approx(1000.0)  # (400 + 600) / 2 × 2 s


def test_a_gap_or_a_restart_is_not_bridged_and_the_total_never_goes_back() -> None:
    integral = PowerIntegral(max_gap_s=5.0)
    integral.add(0.0, 500.0)
    integral.add(1.0, 500.0)
    assert integral.add(10.0, 500.0) == pytest.approx(500.0)  # 9 s gap: unknown power, skipped
    integral.restart()
    assert integral.add(11.0, 500.0) == pytest.approx(500.0)  # no previous reading after a restart
    assert integral.add(12.0, 500.0) == pytest.approx(1000.0)
    assert integral.add(11.5, 500.0) == pytest.approx(1000.0)  # time going back adds nothing
