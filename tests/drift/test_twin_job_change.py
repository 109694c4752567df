"""On the twin: job changes and faults near them.

- A change to a different kind of job after a confirmed power-chain fault must not teach the IT
  baseline the fault (the README's example trace once showed the fault absorbed, then a reversed
  onset).
- A restart of the same kind of job re-learns nothing, so a fault that starts right around it is
  judged against the baseline the rack already had (a re-learn once took such faults for the new
  job's profile: the `bench/drift.py --full` misses of 2026-11-30).
"""

from __future__ import annotations

from typing import Any

import pytest

from agent.sim import FaultSpec, make_scenario, scenario_truth
from tests.drift.twin_events import twin_events

WITHIN_S = 3 * 3600.0


def _onsets(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    onsets = [e for e in events if e["state"] == "onset"]
    return [e for e in onsets if e["cause"] != "workload"], [e for e in onsets if e["cause"] == "workload"]


def test_power_chain_fault_survives_a_later_change_to_another_kind_of_job() -> None:
    days, seed = 2.0, 3
    plain = make_scenario("workload_change", days=days, seed=seed)
    moe = next(j for j in scenario_truth(plain)["jobs"] if j["profile"] == "moe")  # dense → MoE
    change_h = (float(moe["start_ts"]) - plain.start_ts) / 3600.0
    start_h = change_h - 3.0
    sc = make_scenario("workload_change", days=days, seed=seed,
                       fault=FaultSpec("power_chain", start_h=start_h, magnitude_pct=6.0))
    faults, jobs = _onsets(twin_events(sc))
    assert [e["cause"] for e in faults] == ["power_chain"], faults
    assert float(faults[0]["ts"]) - sc.start_ts - start_h * 3600 < 3600
    later = [e for e in jobs if float(e["ts"]) > float(faults[0]["ts"])]
    assert later, "the change to MoE jobs must be flagged workload"
    assert "it" not in later[0]["detail"]["relearn"]
    assert "power chain" in later[0]["detail"]["explanation"]


# seed 21: jobs j000 → j001 (both dense) at ≈19.6 h
@pytest.mark.parametrize(("kind", "after_min", "cause"), [
    ("power_chain", 15, "power_chain"),  # a PSU that fails on the power-up
    ("gpu_ageing", 60, "gpu_hardware"),  # once learned away inside the 2-h re-learn
    ("power_chain", -20, "power_chain"),  # starts just before the restart
])
def test_fault_around_a_restart_of_the_same_kind_of_job_is_found(
    kind: str, after_min: int, cause: str
) -> None:
    days, seed = 1.0, 21
    plain = make_scenario("steady", days=days, seed=seed)
    restart = scenario_truth(plain)["jobs"][1]
    start_h = (float(restart["start_ts"]) - plain.start_ts) / 3600.0 + after_min / 60.0
    sc = make_scenario(f"fault_{kind}", days=days, seed=seed,
                       fault=FaultSpec(kind, start_h=start_h, magnitude_pct=3.0, shape="step"))
    faults, jobs = _onsets(twin_events(sc))
    fault_ts = sc.start_ts + start_h * 3600.0
    assert not jobs, "a restart of the same kind of job is not a workload change"
    assert faults, f"the {kind} fault {after_min:+d} min around the restart was not found"
    assert faults[0]["cause"] == cause
    assert fault_ts <= float(faults[0]["ts"]) <= fault_ts + WITHIN_S
    if after_min > 0:  # the onset says the new job was judged against the old job's baseline
        assert "runs like 'j000'" in faults[0]["detail"]["explanation"]


def test_restart_of_the_same_kind_of_job_raises_nothing() -> None:
    sc = make_scenario("steady", days=1.5, seed=21)
    assert len(scenario_truth(sc)["jobs"]) >= 2
    faults, jobs = _onsets(twin_events(sc))
    assert not faults and not jobs
