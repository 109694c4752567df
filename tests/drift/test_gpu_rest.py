"""The GPUs at rest (``gpu_idle`` channel): idle power is the hardware's, kept across job changes.

Why: on a rack whose jobs change every hour or two, every new kind of job re-learns the per-stage
GPU level, so a slow rise of the GPUs' own draw (ageing, a driver that draws more) is learned as
each new job's profile. Idle power is set by no job: judged on its own level it shows the rise.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from agent.engine.components import ComponentSample
from agent.engine.drift import DriftMonitor

T0 = 1_764_000_000.0
GPUS = 8
IDLE_W = 70.0  # one GPU at rest
FAULT_AT_S = 1.2 * 86400.0


def churning_rack(days: float, seed: int, rest_rise_pct: float = 0.0, ramp_s: float = 4 * 3600.0,
                  gpus_on: int = GPUS, drained_s: tuple[float, float] = (math.inf, math.inf),
                  reload: bool = False, at_work: bool = True, fault_at_s: float = FAULT_AT_S
                  ) -> Iterator[ComponentSample]:
    """Jobs of 60–120 min, each a new kind (its own GPU level and work rate), 10–30 min idle between;
    from ``fault_at_s`` every GPU draws ``rest_rise_pct`` % more (a ramp over ``ramp_s``), at rest
    and at work alike; within ``drained_s`` (start, end) only ``gpus_on`` GPUs report (a drained node);
    ``reload``: every GPU's energy counter resets at ``fault_at_s`` (a driver update); not ``at_work``:
    the rise is at rest only."""
    rng = np.random.default_rng(seed)
    t, n_job, reloaded = 0.0, 0, False
    while t < days * 86400.0:
        n_job += 1
        job, level = f"job-{n_job}", float(rng.uniform(300.0, 650.0))  # W per GPU while training
        rate = 100.0 * level / 650.0 * float(rng.uniform(0.5, 1.5))
        plan = [("forward_backward", int(rng.integers(60, 120))), ("idle", int(rng.integers(10, 30)))]
        for stage, minutes in plan:
            for _ in range(minutes):
                t += 60.0
                share = (t - fault_at_s) / ramp_s if ramp_s > 0 else float(t >= fault_at_s)
                rise = rest_rise_pct * min(1.0, max(0.0, share)) if at_work or stage == "idle" else 0.0
                per_gpu = (IDLE_W if stage == "idle" else level) * (1 + rise / 100.0)
                per_gpu *= 1 + 0.003 * rng.standard_normal()
                on = gpus_on if drained_s[0] <= t < drained_s[1] else GPUS
                resets = GPUS if reload and not reloaded and t >= fault_at_s else 0
                reloaded = reloaded or resets > 0
                gpu_w = per_gpu * on
                it_w = (gpu_w * 1.08 + 2000.0) * (1 + 0.003 * rng.standard_normal())
                yield ComponentSample(
                    ts=T0 + t, duration_s=60.0, stage=stage, stage_source="hint", job=job, transient=False,
                    gpu_w=gpu_w, work_rate=rate if stage != "idle" else math.nan, gpu_expected_w=gpu_w,
                    it_measured_w=it_w, it_expected_w=gpu_w * 1.08 + 2000.0,
                    cooling_measured_w=0.35 * it_w, cooling_expected_w=0.35 * it_w,
                    inlet_mean_c=24.0, inlet_spread_c=1.5 + 0.05 * rng.standard_normal(), fan_pct=math.nan,
                    setpoint_c=22.0, gpu_mean_w=per_gpu, gpu_counter_resets=resets,
                )


def _onsets(monitor: DriftMonitor, samples: Iterator[ComponentSample]) -> list[dict[str, object]]:
    events = [e for s in samples for e in monitor.observe(s)]
    return [e for e in events if e["state"] == "onset" and e["cause"] != "workload"]


def test_a_rise_of_the_gpus_own_draw_is_found_at_rest_on_a_churning_rack() -> None:
    found = _onsets(DriftMonitor(), churning_rack(2.5, 1, rest_rise_pct=5.0))
    assert found, "a 5 % rise of every GPU's draw went unseen"
    first = found[0]
    assert first["cause"] == "gpu_hardware"
    assert first["detail"]["component"] == "gpu_idle"  # type: ignore[index]
    assert "at rest" in str(first["detail"]["explanation"])  # type: ignore[index]
    assert FAULT_AT_S < float(first["ts"]) - T0 < FAULT_AT_S + 6 * 3600.0  # type: ignore[arg-type]


def test_the_rest_level_is_not_relearned_at_job_changes_and_raises_no_false_alarm() -> None:
    monitor = DriftMonitor()
    samples = list(churning_rack(3.0, 2))
    assert _onsets(monitor, iter(samples)) == []
    jobs = len({s.job for s in samples})
    settled_idle = sum(s.stage == "idle" for s in samples) - 3 * jobs  # less each gap's settling bins
    rest = monitor.channels["gpu_idle"]
    assert jobs > 25
    assert rest.levels.count(0) >= settled_idle  # every settled idle bin learned: never forgotten
    assert abs(rest.location(0) - 100.0 * math.log(IDLE_W)) < 0.5


def test_a_drained_node_does_not_move_one_gpus_rest_level() -> None:
    """Half the GPUs leave for 6 h and come back: the rack's total halves and doubles at rest, one
    GPU's level does not (judged on the total, the return would be a +100 % "fault")."""
    monitor = DriftMonitor()
    drained = (FAULT_AT_S, FAULT_AT_S + 6 * 3600.0)
    found = _onsets(monitor, churning_rack(2.5, 3, gpus_on=4, drained_s=drained))
    assert [e for e in found if e["detail"]["component"] == "gpu_idle"] == []  # type: ignore[index]
    assert monitor.adopted.get("gpu_idle", 0) == 0  # nor adopted as a saving while drained


def test_less_draw_at_rest_saves_energy_and_is_adopted_without_an_event() -> None:
    monitor = DriftMonitor()
    assert _onsets(monitor, churning_rack(2.5, 4, rest_rise_pct=-6.0, ramp_s=0.0)) == []
    assert monitor.adopted.get("gpu_idle", 0) >= 1


def test_a_state_saved_before_the_rest_channel_existed_still_loads() -> None:
    monitor = DriftMonitor()
    for sample in churning_rack(0.5, 5):
        monitor.observe(sample)
    state = monitor.save_state()
    del state["channels"]["gpu_idle"]  # type: ignore[attr-defined]
    restored = DriftMonitor()
    restored.load_state(state)
    assert restored.channels["gpu_idle"].n_blocks == 0  # starts afresh, the rest as saved
    assert restored.channels["gpu"].n_blocks == monitor.channels["gpu"].n_blocks


EARLY_S = 8 * 3600.0  # the rest level is learned (an hour of rest bins), its block noise not yet


def _first_onset_s(reload: bool, seed: int) -> float:
    rack = churning_rack(1.5, seed, rest_rise_pct=4.0, ramp_s=0.0, reload=reload, at_work=False,
                         fault_at_s=EARLY_S)
    found = _onsets(DriftMonitor(), rack)
    return float(found[0]["ts"]) - T0 - EARLY_S if found else math.inf  # type: ignore[arg-type]


def test_a_step_at_rest_at_a_driver_reload_is_judged_before_the_rest_channel_could() -> None:
    """The reload is measured: rest power after it is compared with the learned level before it, so
    a clear step is found even while the channel's CUSUM still learns its block noise (a churning
    rack's first day: its idle gaps are short) and without its false-alarm margin."""
    for seed in (6, 7, 8):
        monitor = DriftMonitor()
        rack = churning_rack(1.5, seed, rest_rise_pct=4.0, ramp_s=0.0, reload=True, at_work=False,
                             fault_at_s=EARLY_S)
        found = _onsets(monitor, rack)
        assert found and found[0]["cause"] == "gpu_hardware", seed
        first = found[0]
        assert first["detail"]["component"] == "gpu_idle"  # type: ignore[index]
        assert "driver reloaded" in str(first["detail"]["explanation"])  # type: ignore[index]
        assert float(first["ts"]) - T0 - EARLY_S < 3 * 3600.0  # type: ignore[arg-type]
        assert _first_onset_s(True, seed) < _first_onset_s(False, seed)


def test_a_reload_that_leaves_rest_power_alone_raises_nothing() -> None:
    for seed in (6, 7):
        rack = churning_rack(1.5, seed, reload=True, fault_at_s=EARLY_S)
        assert _onsets(DriftMonitor(), rack) == []
