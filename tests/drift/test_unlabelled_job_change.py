"""Without job labels a new job is found from telemetry: GPUs resume after idling at another power level.

The change-point judge opens a same-work check when an unlabelled rack's GPUs resume work after
idle bins, and compares the GPU power level and memory utilisation in the main stage: moved by more than
``SAME_WORK_POWER_FRAC`` is a new job (re-learned, a ``workload`` event); less is the same work,
so a fault that starts at a restart (a few % more power) is still judged as one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from agent.engine.components import ComponentSample
from agent.engine.drift import DriftMonitor
from agent.engine.drift.tuning import RATE_FIRST_BINS
from tests.drift.synthetic import STAGE_LEVELS_W, stream

DAY_S = 86400.0


def unlabelled(
    samples: Iterator[ComponentSample], after_s: float, gpu_factor: float, at_idle: bool = True
) -> Iterator[ComponentSample]:
    """No stage hints, job ids or work rates; from the first idle stretch after ``after_s`` (or at
    ``after_s`` itself, back to back, when not ``at_idle``) the GPUs (and with them the PDU, which
    the IT model follows) draw ``gpu_factor`` times the power."""
    t0, changed, idle = None, False, False
    for s in samples:
        t0 = s.ts if t0 is None else t0
        if not changed and s.ts - t0 >= after_s:
            idle = idle or s.stage == "idle" or not at_idle
            changed = idle and (s.stage != "idle" or not at_idle)
        factor = gpu_factor if changed else 1.0
        gpu_w = s.gpu_w * factor
        it_w = s.it_measured_w + (gpu_w - s.gpu_w) * 1.08
        yield replace(s, stage_source="inferred", job="", work_rate=float("nan"), gpu_w=gpu_w,
                      gpu_expected_w=s.gpu_expected_w * factor, it_measured_w=it_w,
                      it_expected_w=s.it_expected_w + (gpu_w - s.gpu_w) * 1.08)


def _run(samples: Iterator[ComponentSample]) -> list[dict[str, Any]]:
    monitor = DriftMonitor()
    return [e for s in samples for e in monitor.observe(s) if e["state"] == "onset"]


def test_a_heavier_job_after_an_idle_gap_is_a_workload_change_not_a_gpu_fault() -> None:
    onsets = _run(unlabelled(stream(2.5, 51), 1.5 * DAY_S, 1.3))
    assert [e["cause"] for e in onsets] == ["workload"]
    assert "found from telemetry" in onsets[0]["detail"]["explanation"]
    moved = onsets[0]["detail"]["evidence"][0]["gpu_power_moved_pct"]
    assert moved == pytest.approx(30.0, abs=3.0)


def test_idle_gaps_of_the_same_work_change_nothing() -> None:
    assert _run(unlabelled(stream(2.5, 52), 10 * DAY_S, 1.0)) == []


def test_a_few_percent_more_power_after_a_restart_is_still_a_gpu_fault() -> None:
    onsets = _run(unlabelled(stream(2.5, 53), 1.5 * DAY_S, 1.06))
    assert [e["cause"] for e in onsets] == ["gpu_hardware"]


def test_a_much_heavier_job_back_to_back_is_new_work_not_a_gpu_fault() -> None:
    """No idle gap, so no same-work check: the GPU channel confirms the step itself. Without a work
    rate, a step beyond what a driver or firmware change adds (``SAME_WORK_POWER_FRAC``) is new
    work, re-learned; a step within it stays a GPU fault (the test above)."""
    onsets = _run(unlabelled(stream(2.5, 54), 1.5 * DAY_S, 1.2, at_idle=False))
    assert [e["cause"] for e in onsets] == ["workload"]
    assert "reports no work rate" in onsets[0]["detail"]["explanation"]
    onsets = _run(unlabelled(stream(2.5, 55), 1.5 * DAY_S, 1.05, at_idle=False))
    assert [e["cause"] for e in onsets] == ["gpu_hardware"]


def _check_after_idle(previous: tuple[float, float], new: tuple[float, float]) -> Any:
    """A SameWorkCheck that saw an hour of ``previous`` (GPU W, memory util %) in forward/backward,
    then the GPUs resumed with ``new``: its verdict."""
    from agent.engine.drift.context import stage_slot
    from agent.engine.drift.same_work import SameWorkCheck

    check, slot = SameWorkCheck(), stage_slot("forward_backward")
    for _ in range(60):
        check.observe(slot, *previous)
    assert check.start_by_power(3600.0)
    verdict = None
    for i in range(10):
        check.observe(slot, *new)
        verdict = verdict or check.decide(3600.0 + 60.0 * (i + 1), None)  # type: ignore[arg-type]
    return verdict


def test_a_job_with_the_same_power_but_other_memory_traffic_is_new_work() -> None:
    """Two models can draw the same GPU power; their memory-bandwidth use tells them apart."""
    verdict = _check_after_idle((6000.0, 47.0), (6050.0, 62.0))
    assert verdict.kind == "different"
    assert verdict.memory_ratio == pytest.approx(62.0 / 47.0, rel=1e-6)
    assert _check_after_idle((6000.0, 47.0), (6050.0, 48.0)).kind == "same"


def test_without_memory_utilisation_the_power_level_alone_decides() -> None:
    nan = float("nan")
    assert _check_after_idle((6000.0, nan), (6050.0, nan)).kind == "same"
    assert _check_after_idle((6000.0, nan), (7000.0, nan)).kind == "different"
    assert _check_after_idle((6000.0, 47.0), (6050.0, nan)).kind == "same"  # (no longer reported)


def test_guessed_new_work_recentres_the_it_detector_but_only_the_gpus_re_learn() -> None:
    """The nodes' own load is the new job's too, so the IT detector re-centres; the IT model's job
    level is kept (a guess from the GPUs does not say the nodes' load moved): ``relearn`` says so."""
    from agent.engine.drift.channel import GRACE

    monitor = DriftMonitor()
    for sample in unlabelled(stream(2.5, 51), 1.5 * DAY_S, 1.3):
        onsets = [e for e in monitor.observe(sample) if e["state"] == "onset" and e["cause"] == "workload"]
        if onsets:
            assert onsets[0]["detail"]["relearn"] == ["gpu"]
            assert monitor.channels["it"].mode == GRACE
            assert monitor.work_change[0] != monitor.work_change[0]  # NaN: no new IT job level
            return
    raise AssertionError("no workload onset for the guessed new job")


def test_only_a_bin_at_rest_throughout_can_end_in_a_resume() -> None:
    """A stall between steps can fill a plurality of a bin's seconds with ``idle``: running work
    going on after it is not a possible job change. A bin idle throughout is a rest."""
    from agent.engine.drift.context import SignalContext

    busy = [replace(s, stage_source="inferred", job="") for s in stream(0.1, 56) if s.stage != "idle"][:3]
    stall = replace(busy[0], stage="idle", stage_share=0.45)
    rest = replace(stall, stage_share=1.0)
    for middle, resumes in ((stall, False), (rest, True)):
        context = SignalContext()
        seen = []
        for s in (busy[0], middle, busy[1], busy[2]):
            context.update(s, frozen=False)
            seen.append(context.resumed)
        assert seen == [False, False, resumes, False]


def test_without_a_work_rate_a_checkpoint_bin_shared_with_training_is_judged_on_its_own_seconds() -> None:
    """A checkpoint (or data-load) bin's mean GPU power is the waiting level plus however much
    training shares the bin; its own seconds' power (``stage_gpu_w``) is the waiting level alone, so
    a shared bin teaches (and tests) the stage's level like a whole one. (Before the per-stage power,
    such bins were dropped: a training run that checkpoints every step or two left the GPU channel
    nothing to judge, development single seed 16.)"""
    from agent.engine.drift.context import stage_slot

    slot = stage_slot("checkpoint")
    own = 100.0 * math.log(STAGE_LEVELS_W["checkpoint"] / 1000.0)
    for factor in (1.0, 0.5):  # a whole bin; a bin whose other half trains at three times the power
        monitor = DriftMonitor()
        for s in stream(1.0, 57):
            if s.stage == "checkpoint" and factor < 1.0:
                s = replace(s, gpu_w=s.gpu_w / factor, stage_gpu_factor=factor, stage_share=0.5)
            monitor.observe(replace(s, work_rate=float("nan")))
        gpu = monitor.channels["gpu"]
        assert abs(gpu.location(slot) - own) < 2.0, factor


def _dipped(samples: Iterator[ComponentSample], start_s: float, for_s: float, factor: float
            ) -> Iterator[ComponentSample]:
    """Unlabelled and unrated; for ``for_s`` from ``start_s`` the GPUs draw ``factor`` times the power
    in every stage but idle (an eval that stage inference took for training draws less)."""
    t0 = None
    for s in samples:
        t0 = s.ts if t0 is None else t0
        inside = start_s <= s.ts - t0 < start_s + for_s and s.stage != "idle"
        gpu_w = s.gpu_w * (factor if inside else 1.0)
        extra = (gpu_w - s.gpu_w) * 1.08
        yield replace(s, stage_source="inferred", job="", work_rate=float("nan"), gpu_w=gpu_w,
                      gpu_expected_w=gpu_w, it_measured_w=s.it_measured_w + extra,
                      it_expected_w=s.it_expected_w + extra)


def test_without_a_work_rate_a_level_that_does_not_hold_an_hour_is_not_new_work() -> None:
    """A step's size alone says "new work" on a rack with neither labels nor a work rate, and so does
    a long eval read as training. New work holds its level: the verdict waits ``SHOW_S`` from the
    evidence's start, and a dip that ends first raises nothing."""
    from agent.engine.drift import tuning as T

    assert _run(_dipped(stream(2.5, 58), 1.5 * DAY_S, 20 * 60.0, 0.8)) == []
    monitor = DriftMonitor()
    for s in _dipped(stream(2.5, 58), 1.5 * DAY_S, DAY_S, 0.8):
        onsets = [e for e in monitor.observe(s) if e["state"] == "onset"]
        if onsets:
            assert [e["cause"] for e in onsets] == ["workload"]
            assert s.ts - float(onsets[0]["detail"]["since"]) >= T.SHOW_S
            return
    raise AssertionError("no workload onset for a level that held")


def test_an_onset_waiting_to_hold_survives_a_restart() -> None:
    import json

    monitor = DriftMonitor()
    for s in _dipped(stream(2.5, 58), 1.5 * DAY_S, DAY_S, 0.8):
        monitor.observe(s)
        if monitor._unproven is not None:
            break
    waiting = monitor._unproven
    assert waiting is not None
    restarted = DriftMonitor()
    restarted.load_state(json.loads(json.dumps(monitor.save_state())))
    assert restarted._unproven == waiting


def _labelled_from(samples: Iterator[ComponentSample], after_s: float, job: str,
                   gpu_factor: float) -> Iterator[ComponentSample]:
    """Unlabelled work (as ``unlabelled``) until the first idle stretch after ``after_s``; from
    there a job that reports its id, stages and work rate, at ``gpu_factor`` times the power."""
    t0, changed, idle = None, False, False
    for s in unlabelled(samples, after_s, gpu_factor):
        t0 = s.ts if t0 is None else t0
        if not changed and s.ts - t0 >= after_s:
            idle = idle or s.stage == "idle"
            changed = idle and s.stage != "idle"
        yield replace(s, stage_source="hint", job=job) if changed else s


def test_the_first_labelled_job_after_unlabelled_work_is_a_job_change() -> None:
    """A rack whose jobs label themselves only sometimes: a job id that replaces work that reported
    none is a new job, judged as one (not a GPU fault, not silently the same)."""
    onsets = _run(_labelled_from(stream(2.5, 59), 1.5 * DAY_S, "j-new", 1.3))
    assert [e["cause"] for e in onsets] == ["workload"]
    item = onsets[0]["detail"]["evidence"][0]
    assert (item["from"], item["to"]) == ("", "j-new")
    assert onsets[0]["ts"] - item["since"] <= 15 * 60  # judged at once, not an hour on by its size
    assert "replaced work that reported no job id" in onsets[0]["detail"]["explanation"]


def _restart_loading_after(samples: Iterator[ComponentSample], after_s: float, load_bins: int
                           ) -> Iterator[ComponentSample]:
    """Until ``after_s``, every data-load bin also holds training seconds: the bin's mean GPU power
    is twice the stall's own (``stage_gpu_factor`` ½), as a running job's short stalls are. After
    the first idle gap from then, the resumed job first loads data for ``load_bins`` whole bins at
    the stall's own level."""
    t0, gap, loading = None, False, 0
    load_w = STAGE_LEVELS_W["data_load"]
    for s in samples:
        t0 = s.ts if t0 is None else t0
        if s.ts - t0 < after_s:
            if s.stage == "data_load":
                s = replace(s, gpu_w=2.0 * s.gpu_w, stage_gpu_factor=0.5, stage_share=0.7)
        elif s.stage == "idle" and not loading:
            gap = True
        elif gap and loading < load_bins:
            loading += 1
            s = replace(s, stage="data_load", gpu_w=load_w * s.gpu_w / STAGE_LEVELS_W[s.stage])
        yield s


def test_resumed_work_is_compared_in_each_stage_s_own_seconds() -> None:
    """After a restart the first data loading fills whole bins at the stall's own level. Compared on
    bin means, that was 50 % less GPU power in data_load than the job's stalls: new work, and its
    re-learn absorbed a driver update made in the maintenance gap (development single seed 12, a
    one-off trace). In the stage's own seconds it is the same work, and the +6 % is a GPU fault."""
    samples = _restart_loading_after(stream(2.5, 53), 1.5 * DAY_S, 2 * RATE_FIRST_BINS)
    onsets = _run(unlabelled(samples, 1.5 * DAY_S, 1.06))
    assert [e["cause"] for e in onsets] == ["gpu_hardware"]
