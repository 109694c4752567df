"""On the twin: a GPU driver reload (energy counters reset) is a change point for the GPU channel,
also when it falls right after a job change, while the GPU baseline re-learns the new job."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from agent.engine.components import ComponentSample
from agent.engine.drift import DriftMonitor
from agent.sim import FaultSpec, make_scenario, scenario_truth
from tests.drift.twin_events import twin_events

DAYS = 1.0
SEED = 21  # jobs j000 → j001 at ~19.6 h, work rates 1051 → 1055: the same kind of job
WITHIN_S = 3 * 3600.0


def _job_change_h(name: str, seed: int, days: float = DAYS) -> float:
    sc = make_scenario(name, days=days, seed=seed)
    jobs = scenario_truth(sc)["jobs"]
    return (float(jobs[1]["start_ts"]) - sc.start_ts) / 3600.0


def _replay(name: str, seed: int, fault: FaultSpec, days: float = DAYS) -> tuple[list[dict[str, Any]], float]:
    sc = make_scenario(name, days=days, seed=seed, fault=fault)
    return twin_events(sc), sc.start_ts + fault.start_h * 3600.0


def _faults(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["state"] == "onset" and e["cause"] != "workload"]


@pytest.mark.parametrize(("after_min", "magnitude"), [(10, 3.0), (25, 3.0), (40, 8.0)])
def test_driver_step_shortly_after_a_job_change_is_gpu_hardware(after_min: int, magnitude: float) -> None:
    start_h = _job_change_h("steady", SEED) + after_min / 60.0
    events, fault_ts = _replay("fault_gpu_driver", SEED, FaultSpec("gpu_driver", start_h=start_h,
                                                                   magnitude_pct=magnitude))
    faults = _faults(events)
    assert faults, "the step at the driver reload was absorbed as the new job's profile"
    first = faults[0]
    assert first["cause"] == "gpu_hardware"
    assert fault_ts <= float(first["ts"]) <= fault_ts + WITHIN_S
    assert first["deviation_pct"] >= 0.6 * magnitude
    assert "driver reloaded" in first["detail"]["explanation"]
    reload = [x for x in first["detail"]["evidence"] if x["signal"] == "gpu_counter_resets"]
    assert reload and abs(float(reload[0]["since"]) - fault_ts) <= 60.0
    assert reload[0]["counters"] >= 1


@pytest.mark.parametrize("after_min", [10, 40])
def test_driver_reload_that_changes_nothing_is_no_alarm(after_min: int) -> None:
    start_h = _job_change_h("steady", SEED) + after_min / 60.0
    events, _ = _replay("fault_gpu_driver", SEED, FaultSpec("gpu_driver", start_h=start_h, magnitude_pct=0.0))
    assert not _faults(events)
    # a restart of the same kind of job: nothing to re-learn, so no workload event either
    assert not [e for e in events if e["cause"] == "workload"]


def test_reload_in_the_job_change_bin_is_judged_against_the_previous_job_of_the_same_kind() -> None:
    start_h = _job_change_h("steady", SEED)  # the counters reset as the new job starts
    events, fault_ts = _replay("fault_gpu_driver", SEED, FaultSpec("gpu_driver", start_h=start_h,
                                                                   magnitude_pct=5.0))
    faults = _faults(events)
    assert faults and faults[0]["cause"] == "gpu_hardware"
    assert fault_ts <= float(faults[0]["ts"]) <= fault_ts + WITHIN_S
    text = faults[0]["detail"]["explanation"]
    assert "driver reloaded" in text and "runs like 'j000'" in text
    job = [x for x in faults[0]["detail"]["evidence"] if x["signal"] == "job"]
    assert job and job[0]["from"] == "j000" and abs(job[0]["work_rate_moved_pct"]) < 15.0


def test_reload_without_a_job_change_is_named_in_the_onset() -> None:
    fault = FaultSpec("gpu_driver", start_h=10.0, magnitude_pct=3.0)
    events, fault_ts = _replay("fault_gpu_driver", SEED, fault)
    faults = _faults(events)
    assert faults and faults[0]["cause"] == "gpu_hardware"
    assert float(faults[0]["ts"]) - fault_ts <= WITHIN_S
    assert "since the GPU driver reloaded" in faults[0]["detail"]["explanation"]


def test_reload_with_a_change_to_another_kind_of_job_stays_workload() -> None:
    days = 2.0
    sc = make_scenario("workload_change", days=days, seed=31)
    moe = next(j for j in scenario_truth(sc)["jobs"] if j["profile"] == "moe")  # dense → MoE, rate +50 %
    start_h = (float(moe["start_ts"]) - sc.start_ts) / 3600.0
    events, fault_ts = _replay("workload_change", 31, FaultSpec("gpu_driver", start_h=start_h,
                                                                magnitude_pct=0.0), days)
    assert not _faults(events)
    workload = [e for e in events if e["cause"] == "workload" and 0 <= float(e["ts"]) - fault_ts <= WITHIN_S]
    assert any(e["state"] == "onset" for e in workload)
    assert any("driver reloaded" in e["detail"]["explanation"] for e in workload if e["state"] == "cleared")


def _sample(ts: float, resets: int = 0, job: str = "j1", gpu_w: float = 8000.0) -> ComponentSample:
    nan = math.nan
    return ComponentSample(ts, 60.0, "forward_backward", "hint", job, False, gpu_w, 1000.0, nan, nan, nan,
                           nan, nan, nan, nan, nan, nan, gpu_counter_resets=resets)


def test_state_round_trip_keeps_the_reload_and_older_state_still_loads() -> None:
    mon = DriftMonitor()
    ts = 1.7e9
    for i in range(300):
        mon.observe(_sample(ts + 60.0 * i))
    mon.observe(_sample(ts + 60.0 * 300, job="j2"))
    mon.observe(_sample(ts + 60.0 * 301, resets=8, job="j2"))
    state = json.loads(json.dumps(mon.save_state()))
    assert state["changes"]["resets"]["counters"] == 8
    again = DriftMonitor()
    again.load_state(state)
    assert again.save_state() == mon.save_state()
    assert again.relearn == mon.relearn
    older = dict(state, version=1)  # the layout before estimators.py: the monitor re-warms
    old = DriftMonitor()
    old.load_state(older)
    assert math.isnan(old.changes.resets.reload_ts) and old.save_state() == DriftMonitor().save_state()
