"""The randomised drift bench scores what the issue defines (bench/drift_random.py): a fault's size
is measured in its component, onsets match faults or job changes, the rest are false alarms."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from types import ModuleType
from typing import Any

import pytest

from agent.sim import FaultSpec
from agent.sim.randomize import random_scenario
from tests.conftest import REPO_ROOT


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("drift_random", REPO_ROOT / "bench" / "drift_random.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("drift_random", module)  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


dr = _bench()
T0 = 1_000_000.0
H = 3600.0


def _truth(*jobs: tuple[float, float, str]) -> dict[str, Any]:
    return {"jobs": [{"start_ts": T0 + a * H, "end_ts": T0 + b * H, "profile": p} for a, b, p in jobs]}


def _onset(h: float, cause: str) -> dict[str, Any]:
    return {"ts": T0 + h * H, "cause": cause, "state": "onset"}


def test_a_gpu_step_is_measured_in_its_component() -> None:
    sc = random_scenario(3, "single", days=0.125)
    sc = replace(sc, faults=(FaultSpec("gpu_ageing", start_h=1.0, magnitude_pct=5.0, shape="step"),))
    (effect,) = dr.fault_effects(sc)
    assert effect["component"] == "gpu" and effect["effect_pct"] == pytest.approx(5.0, abs=1.0)
    assert effect["ref_ts"] == sc.start_ts + H  # a step's reference is its start


def test_onsets_are_matched_to_faults_and_job_changes() -> None:
    fault = {"kind": "power_chain", "cause": "power_chain", "effect_pct": 4.0, "start_ts": T0 + 10 * H,
             "ref_ts": T0 + 10 * H, "until_ts": T0 + 20 * H}
    small = {**fault, "effect_pct": 1.0, "start_ts": T0 + 30 * H, "ref_ts": T0 + 30 * H,
             "until_ts": T0 + 31 * H}
    truth = _truth((0, 5, "a"), (5, 8, "b"), (8, 40, "b"))
    onsets = [
        _onset(5.2, "workload"),  # the change a → b: flagged
        _onset(6.0, "thermal"),  # after a job change, but not workload: a false alarm
        _onset(8.5, "workload"),  # b restarted as b: allowed its re-learn, not a job change
        _onset(10.5, "gpu_hardware"),  # the fault, found after 30 min, named wrong
        _onset(30.5, "cooling"),  # inside a fault too small to score: neither found nor false
        _onset(35.0, "workload"),  # no job start in the 3 h before: false
    ]
    s = dr.score_onsets(onsets, [fault, small], truth, days=2.0)
    assert [(f["found"], f["delay_s"], f["named"]) for f in s["faults"]] == [(True, 1800.0, "gpu_hardware")]
    assert s["false"] == ["thermal", "workload"]
    listed = [(a["cause"], a["since_job_h"]) for a in s["false_onsets"]]
    assert listed == [("thermal", 1.0), ("workload", 27.0)]  # when, after which job start
    assert (s["job_changes"], s["flagged"]) == (1, 1)
    summary = dr.summarise([{**s, "errors": [1.0] * 19 + [9.0], "errors_job": [], "unpredicted": 0,
                             "held_pct": 0.0, "relearn_pct": 0.0}])
    assert summary["false_per_day"] == 1.0 and summary["cause_pct"] == 0.0 and summary["found_pct"] == 100.0


def test_a_fault_found_after_three_hours_is_missed() -> None:
    fault = {"kind": "cooling", "cause": "cooling", "effect_pct": 5.0, "start_ts": T0, "ref_ts": T0 + H,
             "until_ts": T0 + 10 * H}
    s = dr.score_onsets([_onset(4.5, "cooling")], [fault], _truth((0, 10, "a")), days=1.0)
    assert not s["faults"][0]["found"] and s["false"] == []


def test_a_saved_run_is_read_back_run_by_run_and_says_which_seeds_are_complete(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bench/drift.py --save`` appends each finished run; ``--table-from`` reads what is there
    (a run cut short, or still going) and states its seeds, and which of them have every run."""
    import pickle

    spec = importlib.util.spec_from_file_location("drift_bench", REPO_ROOT / "bench" / "drift.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("drift_bench", bench)  # its dataclass looks its module up
    spec.loader.exec_module(bench)
    saved = tmp_path / "runs.pkl"
    done = [dr.RandomJob("churn", 10_000, 3.0, True), dr.RandomJob("churn", 10_000, 3.0, False),
            dr.RandomJob("churn", 10_001, 3.0, True)]  # the last seed cut short
    for job in done:
        with open(saved, "ab") as out:
            pickle.dump({"job": job}, out)
    results = bench._load_results(str(saved))
    assert [r["job"] for r in results] == done
    bench._print_seeds(results)
    assert "seeds 10000–10001 (2 seeds, 1 with every run), 3 days each" in capsys.readouterr().out
    assert bench._complete_seeds(results) == {10_000}


def test_a_hot_spot_on_a_rack_without_inlet_sensors_is_sized_by_what_the_rack_measures() -> None:
    """No spread is measured there: the fault's size is its effect on IT or cooling power, which a
    recirculating inlet barely moves, so it is not scored as a ≥ 3 % fault nobody could see."""
    sc = random_scenario(3, "single", days=0.25)
    hot = (FaultSpec("hotspot", start_h=1.0, magnitude_pct=30.0, shape="step"),)
    with_inlets = replace(sc, faults=hot, rack=replace(sc.rack, sampling=replace(sc.rack.sampling, omit=())))
    (seen,) = dr.fault_effects(with_inlets)
    assert seen["seen_on"] == "thermal" and seen["effect_pct"] > 3 * dr.EFFECT_MIN_PCT
    blind = replace(with_inlets, rack=replace(sc.rack, sampling=replace(sc.rack.sampling, omit=("inlet",))))
    (unseen,) = dr.fault_effects(blind)
    assert unseen["seen_on"] in dr.MEASURED_ALWAYS and unseen["effect_pct"] < dr.EFFECT_MIN_PCT
    s = dr.score_onsets([], [unseen], {"jobs": []}, days=0.25)  # listed as not scored, not as missed
    assert s["faults"] == [] and s["unmeasured"] == [
        {"kind": "hotspot", "effect_pct": unseen["effect_pct"], "seen_on": unseen["seen_on"]}]
