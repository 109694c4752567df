"""The stage generator: all canonical stages at realistic durations, per scenario character."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest

from agent.sim import make_scenario, scenario_truth
from agent.trace.model import CANONICAL_STAGES


def _segments(name: str, days: float, seed: int = 1) -> list[list]:
    return scenario_truth(make_scenario(name, days=days, seed=seed))["stage_segments"]


def _durations(segments: list[list], stage: str) -> np.ndarray:
    return np.array([end - start for start, end, s, _ in segments if s == stage])


def test_steady_has_every_canonical_stage_at_realistic_durations() -> None:
    segs = _segments("steady", 1.0)
    assert {s for _, _, s, _ in segs} == set(CANONICAL_STAGES)
    assert np.all((_durations(segs, "grad_sync") >= 1) & (_durations(segs, "grad_sync") <= 4))
    fb = _durations(segs, "forward_backward")
    assert np.median(fb) >= 5 and fb.max() <= 10
    ckpt = _durations(segs, "checkpoint") / 60
    assert ckpt.min() >= 1.5 and ckpt.max() <= 6.5
    evals = _durations(segs, "eval") / 60
    assert evals.min() >= 3.5 and evals.max() <= 10.5


def test_checkpoints_come_every_30_to_90_minutes_within_a_job() -> None:
    segs = _segments("steady", 2.0, seed=4)
    gaps = []
    last_end: dict[str, float] = {}
    for start, end, stage, job in segs:
        if stage == "checkpoint":
            if job in last_end:
                gaps.append((start - last_end[job]) / 60)
            last_end[job] = end
    gaps_a = np.array(gaps)
    assert len(gaps_a) > 20
    # Drawn per job from 30–90 min ± 10 %, delayed at most by one eval or stall; a job's last
    # checkpoint can come early when the job ends.
    assert np.percentile(gaps_a, 5) >= 25 and gaps_a.max() <= 110


def test_segments_tile_the_trace_and_match_the_stage_column(simulated: Callable) -> None:
    run = simulated("tide", 0.25, seed=2)
    segs = _segments("tide", 0.25, seed=2)
    assert segs[0][0] == run.ts[0] and segs[-1][1] == run.ts[-1] + 1
    assert all(a[1] == b[0] for a, b in itertools.pairwise(segs))
    rebuilt = np.concatenate(
        [np.full(int(end - start), stage, dtype=object) for start, end, stage, _ in segs]
    )
    assert np.array_equal(rebuilt, run.stage)


def test_tide_churns_preempts_and_idles() -> None:
    truth = scenario_truth(make_scenario("tide", days=3.0, seed=3))
    jobs = truth["jobs"]
    assert len(jobs) >= 8
    assert any(j["preempted"] for j in jobs) and not all(j["preempted"] for j in jobs)
    assert len({j["profile"] for j in jobs}) >= 2
    idle = _durations(truth["stage_segments"], "idle")
    assert idle.max() >= 3600 and idle.sum() / (3 * 86400) > 0.1


def test_plateau_brings_more_evals_lower_throughput_and_reloads(simulated: Callable) -> None:
    run = simulated("plateau", 2.0, seed=5)
    truth = scenario_truth(run.scenario)
    (plateau,) = [c for c in truth["workload_changes"] if c["kind"] == "plateau"]
    after = run.ts >= plateau["ts"]
    before = ~after & (run.t_s > 3600)
    fb = run.stage == "forward_backward"
    rate = run.col("work_rate")
    assert np.nanmean(rate[fb & after]) < 0.7 * np.nanmean(rate[fb & before])
    gpu = run.gpu_total_w()
    assert np.nanmean(gpu[fb & after]) < 0.95 * np.nanmean(gpu[fb & before])
    evals = [s for s in truth["stage_segments"] if s[2] == "eval"]
    per_h_before = sum(1 for s in evals if s[0] < plateau["ts"]) / ((plateau["ts"] - run.ts[0]) / 3600)
    per_h_after = sum(1 for s in evals if s[0] >= plateau["ts"]) / ((run.ts[-1] - plateau["ts"]) / 3600)
    assert per_h_after > 2 * per_h_before
    # Checkpoint reloads: a checkpoint followed directly by a data_load.
    segs = truth["stage_segments"]
    reloads = [a for a, b in itertools.pairwise(segs) if a[2] == "checkpoint" and b[2] == "data_load"]
    reloads_before = sum(1 for r in reloads if r[0] < plateau["ts"])  # a stall right after a checkpoint
    assert len(reloads) - reloads_before > 3 * max(reloads_before, 1)


def test_workload_change_switches_job_kind_and_gpu_profile(simulated: Callable) -> None:
    run = simulated("workload_change", 1.0, seed=6)
    truth = scenario_truth(run.scenario)
    (change,) = truth["workload_changes"]
    assert change["kind"] == "job_profile" and change["to"] == "moe" and not change["is_fault"]
    assert truth["faults"] == []
    kinds_before = {j["profile"] for j in truth["jobs"] if j["start_ts"] < change["ts"]}
    kinds_after = {j["profile"] for j in truth["jobs"] if j["start_ts"] >= change["ts"]}
    assert kinds_before == {"dense"} and kinds_after == {"moe"}
    fb = run.stage == "forward_backward"
    gpu = run.gpu_total_w()
    dense, moe = np.nanmean(gpu[fb & (run.ts < change["ts"])]), np.nanmean(gpu[fb & (run.ts >= change["ts"])])
    assert moe < 0.92 * dense
    sync = _durations([s for s in truth["stage_segments"] if s[0] >= change["ts"]], "grad_sync")
    assert np.median(sync) >= 2


@pytest.mark.parametrize("name", ["lag_steps"])
def test_lag_steps_are_clean_hour_long_levels(name: str) -> None:
    segs = _segments(name, 0.5)
    assert all(end - start == 3600 for start, end, _, _ in segs)
    assert [s for _, _, s, _ in segs[:4]] == ["idle", "forward_backward", "eval", "forward_backward"]
