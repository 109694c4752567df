"""Drift state from the engine's incidents (they survive a restart), deviation from the onset event."""

from __future__ import annotations

from types import SimpleNamespace

from agent.engine.drift.monitor import Incident
from agent.metrics.jobs import JobEnergyLedger
from agent.metrics.snapshot import active_drift_list, active_drifts
from agent.metrics.tap import MessageTap


def engine_with(**incidents: Incident) -> SimpleNamespace:
    return SimpleNamespace(drift=SimpleNamespace(incidents=incidents))


def test_an_incident_restored_without_its_event_is_still_active() -> None:
    engine = engine_with(cooling=Incident("cooling", "forward_backward", 200.0, 100.0, 7.5, "cooling"))
    drifts = active_drifts(engine, MessageTap(JobEnergyLedger(2)))
    assert drifts["cooling"].active and drifts["cooling"].since_ts == 100.0
    assert drifts["cooling"].deviation_pct == 7.5  # the incident's own %, as the onset published it
    assert not drifts["thermal"].active and set(drifts) >= {"power_chain", "gpu_hardware", "workload"}
    assert active_drift_list(engine) == [
        {"cause": "cooling", "since": 100.0, "onset": 200.0, "stage": "forward_backward"}
    ]


def test_the_published_deviation_wins_and_a_thermal_spread_is_not_a_percentage() -> None:
    tap = MessageTap(JobEnergyLedger(2))
    engine = engine_with(thermal=Incident("thermal", "eval", 200.0, 150.0, 0.3, "thermal"))
    assert active_drifts(engine, tap)["thermal"].deviation_pct is None  # 0.3 °C, not 0.3 %
    event = {
        "kind": "drift",
        "state": "onset",
        "cause": "thermal",
        "ts": 200.0,
        "deviation_pct": 19.9,
        "detail": {"since": 150.0},
    }
    tap.observer(None)("event", "t", event)
    assert active_drifts(engine, tap)["thermal"].deviation_pct == 19.9
    assert active_drifts(None, tap)["thermal"].active is False  # no engine: nothing is active
