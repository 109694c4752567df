"""On the twin: a job change after a confirmed power-chain fault must not teach the IT baseline the
fault (the README's example trace once showed the fault absorbed, then a reversed onset)."""

from __future__ import annotations

from typing import Any

from agent.sim import FaultSpec, make_scenario
from tests.drift.twin_events import twin_events


def replay(days: float, seed: int, fault: FaultSpec) -> list[dict[str, Any]]:
    return twin_events(make_scenario("fault_power_chain", days=days, seed=seed, fault=fault))


def test_power_chain_fault_survives_a_later_job_change() -> None:
    start_h = 19.2  # seed 3: the fault is found at ~19.5 h, a new job starts at ~22.3 h
    events = replay(2.0, 3, FaultSpec("power_chain", start_h=start_h, magnitude_pct=6.0))
    t0 = make_scenario("steady", days=0.1, seed=3).start_ts
    onsets = [e for e in events if e["state"] == "onset"]
    faults = [e for e in onsets if e["cause"] != "workload"]
    jobs = [e for e in onsets if e["cause"] == "workload"]
    assert [e["cause"] for e in faults] == ["power_chain"], faults
    assert jobs and float(jobs[0]["ts"]) > float(faults[0]["ts"]), "the scenario needs a later job change"
    assert float(faults[0]["ts"]) - t0 - start_h * 3600 < 3600
    assert "it" not in jobs[0]["detail"]["relearn"]
    assert not [e for e in events if e["state"] == "cleared" and e["cause"] == "power_chain"]
