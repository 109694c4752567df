"""New work that runs a working stage the work before it never ran is a new stage mix: a workload
change, decided as soon as the new work filled that stage, not when the same-work check times out.

Synthetic streams (``tests.drift.synthetic``): a training run that never evaluates (its eval bins
are turned into forward/backward), then an inference job that runs eval only.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace

from agent.engine.components import ComponentSample
from agent.engine.drift import DriftMonitor
from agent.engine.drift.context import stage_slot
from agent.engine.drift.same_work import SameWorkCheck, WorkVerdict
from agent.engine.drift.tuning import DECIDE_WITHIN_S, RATE_FIRST_BINS
from tests.drift.synthetic import STAGE_LEVELS_W, stream

T0 = 1_764_000_000.0
CHANGE_S = 1.5 * 86400


def training_then_inference(samples: Iterator[ComponentSample], rated: bool) -> Iterator[ComponentSample]:
    """Until ``CHANGE_S`` a training run (job-a) with no eval; then job-inf, whose every working bin
    is eval at the training run's own eval power (no power level tells the two apart)."""
    for s in samples:
        rate = s.work_rate if rated else math.nan
        if s.ts - T0 <= CHANGE_S:
            if s.stage == "eval":
                scale = STAGE_LEVELS_W["forward_backward"] / STAGE_LEVELS_W["eval"]
                yield replace(s, stage="forward_backward", gpu_w=s.gpu_w * scale, work_rate=rate)
            else:
                yield replace(s, work_rate=rate)
        elif s.stage == "idle":
            yield replace(s, job="job-inf", work_rate=rate)
        else:
            scale = STAGE_LEVELS_W["eval"] / STAGE_LEVELS_W[s.stage]
            yield replace(s, job="job-inf", stage="eval", gpu_w=s.gpu_w * scale, work_rate=rate)


def _workload_onsets(samples: Iterator[ComponentSample]) -> list[dict]:
    monitor = DriftMonitor()
    events = [e for s in samples for e in monitor.observe(s) if e["state"] == "onset"]
    assert all(e["cause"] == "workload" for e in events), [e["cause"] for e in events]
    return events


def test_a_labelled_job_that_runs_a_stage_the_previous_job_never_ran_is_new_work_within_minutes() -> None:
    """With work rates (the training run's only in forward/backward) and without them: nothing of
    the previous job can be compared with eval; before, the check waited out its hour."""
    for rated, seed in ((True, 61), (False, 62)):
        changes = _workload_onsets(training_then_inference(stream(2.0, seed), rated))
        assert changes, f"rated={rated}: the inference job was never taken for new work"
        since = float(changes[0]["detail"]["since"])
        assert since <= T0 + CHANGE_S + 120
        assert float(changes[0]["ts"]) - since < DECIDE_WITHIN_S / 2, f"rated={rated}: waited for the timeout"
        assert "runs a stage the previous job did not (eval)" in changes[0]["detail"]["explanation"]
        job = changes[0]["detail"]["evidence"][0]
        assert job["signal"] == "job" and job["new_stage"] == "eval"


def _resumed(before: list[str], after: list[str]) -> tuple[WorkVerdict | None, int]:
    """A check that saw the stages ``before`` (one per bin), then the GPUs resumed after idling in the
    stages ``after``, every bin at one GPU signature (6 kW, 40 % memory use): the verdict and the bin
    after the resume it came in (None, -1: none)."""
    check = SameWorkCheck()
    for i, stage in enumerate(before):
        check.observe(stage_slot(stage), 6000.0, 40.0, 60.0 * i)
    resume_ts = 60.0 * len(before)
    assert check.start_by_power(resume_ts)
    for i, stage in enumerate(after):
        check.observe(stage_slot(stage), 6000.0, 40.0, resume_ts + 60.0 * i)
        verdict = check.decide(resume_ts + 60.0 * (i + 1), None)  # type: ignore[arg-type]
        if verdict is not None:
            return verdict, i + 1
    return None, -1


TRAINING = ["forward_backward"] * 60


def test_unlabelled_resumed_work_in_a_stage_never_run_before_is_new_work() -> None:
    verdict, at = _resumed(TRAINING, ["eval"] * 10)
    assert verdict is not None and verdict.kind == "different" and verdict.new_stage == "eval"
    assert at == RATE_FIRST_BINS  # as soon as a comparison could have been made
    verdict, _ = _resumed(TRAINING, ["forward_backward"] * 10)
    assert verdict is not None and verdict.kind == "same" and not verdict.new_stage


def test_a_waiting_stage_never_run_before_says_nothing_about_the_work() -> None:
    """A data-load or checkpoint bin's power depends on how much training it holds: running one the
    work before did not is no new stage mix (the check goes on waiting)."""
    for waiting in ("data_load", "checkpoint"):
        verdict, _ = _resumed(TRAINING, [waiting] * 10)
        assert verdict is None


TRAINING_WITH_EVAL = TRAINING + ["eval"] * 20  # the main stage is forward/backward


def test_the_same_work_is_decided_only_in_the_main_stage_of_the_work_before() -> None:
    """An inference job after a training run evaluates at the training run's own eval power: judged
    on eval alone it was "the same work". It is the same only once the main stage kept its signature."""
    verdict, at = _resumed(TRAINING_WITH_EVAL, ["eval"] * 10 + ["forward_backward"] * 10)
    assert verdict is not None and verdict.kind == "same" and at == 10 + RATE_FIRST_BINS
    assert verdict.main_stage == "forward_backward"


def test_the_main_stage_is_the_work_before_s_own_not_the_rack_s_day() -> None:
    """A rack that served inference most of the day (eval), then ran a training run: work resumed
    after the training run that evaluates at its eval power is judged against the training run's main
    stage (forward/backward), not the day's (eval), where it was "the same work" within minutes."""
    check = SameWorkCheck()
    ts = 0.0

    def run(stages: list[str]) -> None:
        nonlocal ts
        for stage in stages:
            check.observe(stage_slot(stage), 6000.0, 40.0, ts)
            ts += 60.0
            check.decide(ts, None)  # type: ignore[arg-type]

    run(["eval"] * 300)  # inference all day
    assert check.start_by_power(ts)  # then a training run
    run(TRAINING_WITH_EVAL)
    assert check.start_by_power(ts)
    assert check.slot == stage_slot("forward_backward")
    for _ in range(3 * RATE_FIRST_BINS):
        check.observe(stage_slot("eval"), 6000.0, 40.0, ts)
        ts += 60.0
        verdict = check.decide(ts, None)  # type: ignore[arg-type]
        assert verdict is None or verdict.kind != "same", "judged the same work on eval alone"


def test_resumed_work_that_never_returns_to_the_main_stage_is_new_work_at_the_hour() -> None:
    bins = int(DECIDE_WITHIN_S / 60) + 3
    verdict, at = _resumed(TRAINING_WITH_EVAL, ["eval"] * bins)
    assert verdict is not None and verdict.kind == "different" and at > DECIDE_WITHIN_S / 60
    # resumed work that ran nothing comparable (data loading only) is still the same work then
    verdict, _ = _resumed(TRAINING_WITH_EVAL, ["data_load"] * bins)
    assert verdict is not None and verdict.kind == "same"


def test_an_unlabelled_rack_that_turns_to_eval_only_after_an_idle_gap_gets_a_workload_event() -> None:
    """End to end, no labels: after an idle gap the GPUs run eval only, at the training run's own eval
    power. Nothing moved where it can be compared; the main stage never came back within the hour."""
    def eval_only(samples: Iterator[ComponentSample]) -> Iterator[ComponentSample]:
        for s in samples:
            s = replace(s, job="", stage_source="inferred", work_rate=math.nan)
            t = s.ts - T0
            if t <= CHANGE_S:
                yield s
                continue
            to = "idle" if t <= CHANGE_S + 600 else "eval"  # a 10-min gap, then eval only
            scale = STAGE_LEVELS_W[to] / STAGE_LEVELS_W[s.stage]
            yield replace(s, stage=to, stage_share=1.0, gpu_w=s.gpu_w * scale)

    changes = _workload_onsets(eval_only(stream(2.0, 63)))
    assert changes, "the eval-only work was never taken for new work"
    assert "did not return to the main stage of the work before (forward backward)" in (
        changes[0]["detail"]["explanation"])
