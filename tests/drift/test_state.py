"""The drift state is fixed-size, round-trips exactly, and rejects bad input clearly."""

from __future__ import annotations

import json

import pytest

from agent.engine.drift import DriftMonitor
from tests.drift.synthetic import Injection, state_leaves, stream

T0 = 1_764_000_000.0


def test_state_size_does_not_grow_with_uptime() -> None:
    short, long = DriftMonitor(), DriftMonitor()
    for sample in stream(0.2, 3):
        short.observe(sample)
    for sample in stream(6, 3):
        long.observe(sample)
    assert state_leaves(short.save_state()) == state_leaves(long.save_state())
    size_long = len(json.dumps(long.save_state()))
    assert size_long < 16_000  # a few floats per channel and stage: nothing grows with uptime


def test_restart_mid_fault_gives_the_same_events_as_no_restart() -> None:
    samples = list(stream(2.5, 6, (Injection("cooling", 1.5 * 86400, 5.0),)))
    cut = int(len(samples) * 0.62)
    straight = DriftMonitor()
    expected = [e for s in samples for e in straight.observe(s)]

    first = DriftMonitor()
    got = [e for s in samples[:cut] for e in first.observe(s)]
    saved = json.loads(json.dumps(first.save_state()))
    second = DriftMonitor()
    second.load_state(saved)
    assert second.held == first.held
    got += [e for s in samples[cut:] for e in second.observe(s)]
    assert got == expected
    assert any(e["state"] == "onset" for e in expected)


def test_wrong_version_and_malformed_state_are_clear_errors() -> None:
    monitor = DriftMonitor()
    with pytest.raises(ValueError, match="version"):
        monitor.load_state({"version": 99})
    state = monitor.save_state()
    state["channels"] = {"it": {}}
    with pytest.raises(ValueError, match="malformed"):
        monitor.load_state(state)


def test_offline_accept_events_are_reported_on_the_next_bin() -> None:
    monitor = DriftMonitor()
    samples = list(stream(2.2, 7, (Injection("gpu", 1.5 * 86400, 6.0),)))
    for s in samples[:-10]:
        monitor.observe(s)
    assert "gpu" in monitor.held
    stopped = DriftMonitor()
    stopped.load_state(json.loads(json.dumps(monitor.save_state())))
    assert stopped.accept_offline("gpu_hardware", samples[-10].ts)
    restarted = DriftMonitor()
    restarted.load_state(json.loads(json.dumps(stopped.save_state())))
    first = restarted.observe(samples[-9])
    assert [e["detail"]["accepted"] for e in first] == [True]  # type: ignore[index]
    assert "gpu" not in restarted.held
    assert restarted.observe(samples[-8]) == []


def test_a_number_read_back_from_state_is_nan_unless_it_is_a_finite_number() -> None:
    from agent.engine.drift.estimators import number_or_nan

    assert number_or_nan(3) == 3.0 and number_or_nan(2.5) == 2.5
    for bad in (None, True, "1", 10**400, float("inf")):  # 10**400: a JSON integer no float holds
        assert number_or_nan(bad) != number_or_nan(bad)  # NaN
