"""Re-learning after a job change is paced by how far the model is behind, not a fixed time."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

from agent.engine.components import ComponentSample
from agent.engine.drift import DriftMonitor
from agent.engine.drift import tuning as T
from agent.engine.drift.catch_up import ModelCatchUp
from tests.drift.synthetic import Injection, stream

T0 = 1_764_000_000.0
CHANGE_AT_S = 1.5 * 86400
NEW_PROFILE_PCT = 12.0  # the new job draws 12 % more GPU power per stage (and runs 20 % slower)
# A model that is not behind still passes 2 k σ now and then (≈ 5 % of bins for Gaussian noise)
# and re-learns until back within k σ: at most this share of the bounded re-learn (fixed: all of it).
EVERYDAY_SHARE = 0.2


def caught_up_after(samples: Iterator[ComponentSample], after_s: float,
                    profile_pct: float = NEW_PROFILE_PCT) -> Iterator[ComponentSample]:
    """The engine's GPU model has learned the new job ``after_s`` after the change: from then on it
    expects the new profile (as the real model does once its fast re-learn has fitted it)."""
    for sample in samples:
        if sample.ts - T0 >= CHANGE_AT_S + after_s:
            learned = sample.gpu_expected_w * (1 + profile_pct / 100)
            sample = dataclasses.replace(sample, gpu_expected_w=learned)
        yield sample


def relearn_times(samples: Iterator[ComponentSample]) -> tuple[DriftMonitor, dict[str, list[float]],
                                                                list[dict[str, object]]]:
    """Per component, the bins (s after the change) it was in ``relearn``; and the events."""
    monitor = DriftMonitor()
    seen: dict[str, list[float]] = {"gpu": [], "it": []}
    events: list[dict[str, object]] = []
    for sample in samples:
        events += monitor.observe(sample)
        for comp in seen:
            if comp in monitor.relearn:
                seen[comp].append(sample.ts - T0 - CHANGE_AT_S)
                if comp == "gpu":
                    assert monitor.relearn_halflife_h["gpu"] > 0.0
    return monitor, seen, events


def test_relearn_lasts_as_long_as_the_change_needs() -> None:
    """Two new jobs whose profiles the model has learned 20 min after the change: the larger change
    re-learns longer (its residual needs longer to come back within the noise), both end before
    the bound, and neither stops in between."""
    catch_s = 1200.0
    ends = {}
    for pct in (4.0, 12.0):
        jobs = (Injection("workload", CHANGE_AT_S, pct),)
        monitor, seen, events = relearn_times(caught_up_after(stream(2.0, 21, jobs), catch_s, pct))
        gpu = seen["gpu"]
        assert gpu and min(gpu) < catch_s  # behind (≈ 10–40 σ): re-learning at once
        assert max(gpu) - min(gpu) == 60.0 * (len(gpu) - 1)  # one stretch: no flicker at its edge
        ends[pct] = max(gpu)
        # The IT side re-learns only what a job changes, its own level per stage (the engine's
        # model.JobLevel, from the change point given here), not by fast forgetting its whole model.
        assert not seen["it"]
        assert abs(monitor.work_changed_ts - (T0 + CHANGE_AT_S)) <= 120.0
        assert any(e["cause"] == "workload" and e["state"] == "onset" for e in events)  # reported
    assert catch_s < ends[4.0] < ends[12.0] < T.RELEARN_S - 300.0


def test_a_model_that_stays_behind_relearns_to_the_bound() -> None:
    jobs = (Injection("workload", CHANGE_AT_S, NEW_PROFILE_PCT),)
    _, seen, _ = relearn_times(stream(2.0, 22, jobs))  # the GPU expectation never learns the new job
    # bounded from the verdict (the new job's first bins, minutes after the change)
    assert T.RELEARN_S - 180.0 < max(seen["gpu"]) <= T.RELEARN_S + 900.0


def test_a_job_change_within_the_noise_relearns_nothing() -> None:
    """New work (another work rate) whose GPU profile is the old one: the model is not behind."""
    jobs = (Injection("workload", CHANGE_AT_S, NEW_PROFILE_PCT),)
    _, seen, events = relearn_times(caught_up_after(stream(2.0, 23, jobs), 0.0))
    assert any(e["cause"] == "workload" and e["state"] == "onset" for e in events)  # the change is reported
    assert len(seen["gpu"]) <= EVERYDAY_SHARE * T.RELEARN_S / 60.0  # everyday excursions only


def test_the_farther_behind_the_faster_the_relearn() -> None:
    def halflife_after(step_pct: float) -> float:
        pace = ModelCatchUp(bin_s=60.0)
        for i in range(600):  # an hour of the step at the end
            noise = 0.5 * math.sin(1.7 * i)  # ≈ 0.5 % bin noise (its 15-min level: under the 0.2 % floor)
            sample = _sample(gpu_w=1000.0 * (1 + (noise + (step_pct if i >= 540 else 0.0)) / 100))
            pace.update(sample)
        return pace.halflife_s("gpu")

    small, large, huge = halflife_after(0.5), halflife_after(1.0), halflife_after(8.0)  # floor σ 0.2 %
    assert math.isfinite(small) and small > large > 0.0
    assert huge == T.FOLLOW_HALFLIFE_S / math.log2(T.Z_CLIP / T.CUSUM_K)  # capped: "all new"
    assert large <= T.FOLLOW_HALFLIFE_S  # behind (beyond BEHIND_Z): back to k σ within ½ h
    assert halflife_after(0.3) == math.inf  # within 2 k σ: not behind
    assert halflife_after(0.0) == math.inf


def _sample(gpu_w: float) -> ComponentSample:
    return ComponentSample(ts=T0, duration_s=60.0, stage="forward_backward", stage_source="hint", job="j",
                           transient=False, gpu_w=gpu_w, work_rate=math.nan, gpu_expected_w=1000.0,
                           it_measured_w=5000.0, it_expected_w=5000.0, cooling_measured_w=math.nan,
                           cooling_expected_w=math.nan, inlet_mean_c=math.nan, inlet_spread_c=math.nan,
                           fan_pct=math.nan, setpoint_c=math.nan)
