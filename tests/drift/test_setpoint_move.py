"""A cooling-unit setpoint move with the matching cooling-power change is a ``cooling`` onset that
names the move (from → to, since when), even when the change is ~2 % of cooling power — below the
cooling channel's own minimum effect, which must stay high against the weather."""

from __future__ import annotations

from typing import Any

import pytest

from agent.engine.drift.input_step import InputStep
from agent.engine.drift.monitor import DriftMonitor
from agent.sim import FaultSpec, make_scenario, scenario_truth
from tests.drift.synthetic import Injection, stream
from tests.drift.twin_events import twin_events

T0 = 1_764_000_000.0
MOVE_AT_S = 1.5 * 86400


def _onsets(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["state"] == "onset"]


@pytest.mark.parametrize("seed", [5, 6])
def test_small_setpoint_step_is_a_cooling_onset_naming_the_move(seed: int) -> None:
    monitor = DriftMonitor()
    events: list[dict[str, Any]] = []
    for sample in stream(2.5, seed, (Injection("setpoint", MOVE_AT_S, -0.8),)):  # ≈ 2 % of cooling
        events += monitor.observe(sample)
    onsets = _onsets(events)
    assert [e["cause"] for e in onsets] == ["cooling"], onsets
    onset = onsets[0]
    move_ts = T0 + MOVE_AT_S
    assert move_ts <= onset["ts"] <= move_ts + 3 * 3600
    detail = onset["detail"]
    setpoint = [e for e in detail["evidence"] if e["signal"] == "setpoint_c"]
    assert setpoint and setpoint[0]["from"] == pytest.approx(22.0, abs=0.05)
    assert setpoint[0]["to"] == pytest.approx(21.2, abs=0.05)
    assert abs(setpoint[0]["since"] - move_ts) <= 120
    assert "setpoint moved from 22.0 °C to 21.2 °C" in detail["explanation"]
    assert 1.0 <= onset["deviation_pct"] <= 3.5
    assert "cooling" in monitor.held


def test_setpoint_move_without_a_power_change_is_not_an_alarm() -> None:
    watch = InputStep()
    wobble = [0.1 * ((i * 7919) % 11 - 5) for i in range(1200)]  # flat residual, ±0.5 %
    hits = [watch.update(22.0 if i < 600 else 21.2, w, T0 + 60 * i) for i, w in enumerate(wobble)]
    assert not any(hits)


def test_healthy_stream_has_no_setpoint_onsets() -> None:
    monitor = DriftMonitor()
    events: list[dict[str, Any]] = []
    for sample in stream(3.0, 12):
        events += monitor.observe(sample)
    assert _onsets(events) == []


def test_watch_state_round_trips() -> None:
    monitor = DriftMonitor()
    for sample in stream(0.2, 3, (Injection("setpoint", 0.1 * 86400, -0.8),)):
        monitor.observe(sample)
    state = monitor.save_state()
    other = DriftMonitor()
    other.load_state(state)
    assert other.changes.input.state() == monitor.changes.input.state()


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["step", "gradual"])
def test_twin_setpoint_lowered_3_pct_is_found_as_cooling(shape: str) -> None:
    fault = FaultSpec("setpoint", start_h=40.0, magnitude_pct=3.0, shape=shape, ramp_h=6.0)
    sc = make_scenario("fault_setpoint", days=2.5, seed=321, fault=fault)
    events = twin_events(sc)
    start = float(scenario_truth(sc)["faults"][0]["start_ts"])
    onsets = [e for e in _onsets(events) if e["cause"] != "workload"]
    assert onsets and all(float(e["ts"]) >= start for e in onsets), onsets
    first = onsets[0]
    assert first["cause"] == "cooling"
    assert float(first["ts"]) - start <= 9 * 3600  # ramp 6 h + the 3 h the issue allows
    assert any(e["signal"] == "setpoint_c" for e in first["detail"]["evidence"])
    assert "setpoint" in first["detail"]["explanation"]
