"""A new job id: a restart of the same kind of job keeps the baselines; another kind re-learns.

Synthetic streams (``agent.engine.drift.synthetic``): the job id is changed by hand for a restart
(same work rate); the stream's ``workload`` injection is another kind (work rate −20 %).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import replace

from agent.engine.components import ComponentSample
from agent.engine.drift import DriftMonitor
from agent.engine.drift.tuning import DECIDE_WITHIN_S, SAME_WORK_RATE_FRAC
from tests.drift.synthetic import STAGE_LEVELS_W, Injection, stream

T0 = 1_764_000_000.0
RESTART_S = 1.5 * 86400


def restarted(samples: Iterator[ComponentSample], at_s: float, rate_factor: float = 1.0,
              rate_from_s: float = 0.0) -> Iterator[ComponentSample]:
    """The same stream with job ``job-r`` from ``at_s``; its work rate × ``rate_factor``, and NaN
    until ``rate_from_s`` after the restart (a job that reports no rate at first)."""
    for s in samples:
        t = s.ts - T0
        if t <= at_s:
            yield s
            continue
        rate = s.work_rate * rate_factor if t > at_s + rate_from_s else math.nan
        yield replace(s, job="job-r", work_rate=rate)


def observe(monitor: DriftMonitor, samples: Iterator[ComponentSample]) -> list[dict[str, object]]:
    events: list[dict[str, object]] = []
    for sample in samples:
        events += monitor.observe(sample)
    return events


def faults(events: list[dict[str, object]]) -> list[dict[str, object]]:
    return [e for e in events if e["state"] == "onset" and e["cause"] != "workload"]


def workload(events: list[dict[str, object]]) -> list[dict[str, object]]:
    return [e for e in events if e["state"] == "onset" and e["cause"] == "workload"]


def test_restart_of_the_same_kind_keeps_baselines_and_a_fault_after_it_is_found() -> None:
    """A 3 % GPU step 30 min after a restart at a 5 % faster rate: judged against the old baseline
    (a re-learn would have taken it for the new job's profile)."""
    monitor = DriftMonitor()
    fault = Injection("gpu", RESTART_S + 1800, 3.0)
    samples = restarted(stream(2.5, 41, (fault,)), RESTART_S, rate_factor=1.05)
    events: list[dict[str, object]] = []
    held_while_checking, relearned = [], False
    for sample in samples:
        events += monitor.observe(sample)
        if monitor.changes.work.pending:
            held_while_checking.append({"gpu", "it"} <= monitor.held)
        relearned |= bool(monitor.relearn)
    assert held_while_checking and all(held_while_checking)  # neither learned nor judged meanwhile
    assert len(held_while_checking) < 60  # decided within the hour: the first training bins
    assert not relearned
    assert not workload(events)
    found = faults(events)
    assert found and found[0]["cause"] == "gpu_hardware"
    assert 0 < float(found[0]["ts"]) - (T0 + RESTART_S + 1800) <= 3 * 3600  # type: ignore[arg-type]
    detail: dict = found[0]["detail"]  # type: ignore[assignment]
    assert "runs like 'job-a'" in detail["explanation"] and "+5.0 %" in detail["explanation"]
    job = [x for x in detail["evidence"] if x["signal"] == "job"]
    assert job and job[0]["from"] == "job-a" and job[0]["to"] == "job-r"


def test_restart_of_the_same_kind_raises_nothing_on_a_healthy_stream() -> None:
    events = observe(DriftMonitor(), restarted(stream(2.5, 42), RESTART_S, rate_factor=0.9))
    assert events == []


def test_another_kind_of_job_is_a_workload_change_dated_at_the_job_change() -> None:
    monitor = DriftMonitor()
    events = observe(monitor, stream(2.5, 43, (Injection("workload", RESTART_S, 8.0),)))
    change = workload(events)
    assert len(change) == 1 and not faults(events)
    detail: dict = change[0]["detail"]  # type: ignore[assignment]
    job = detail["evidence"][0]
    assert job["from"] == "job-a" and job["to"] == "job-b"
    assert job["work_rate_moved_pct"] < -100 * SAME_WORK_RATE_FRAC  # the stream's other kind runs 20 % slower
    assert float(detail["since"]) <= T0 + RESTART_S + 60 < float(change[0]["ts"])  # type: ignore[arg-type]
    assert detail["relearn"] == ["gpu", "it"]
    assert "-20 % work rate" in detail["explanation"]


def test_a_job_that_shows_no_comparable_rate_within_the_hour_is_re_learned() -> None:
    samples = restarted(stream(2.5, 44), RESTART_S, rate_from_s=2 * DECIDE_WITHIN_S)
    monitor = DriftMonitor()
    events = observe(monitor, samples)
    change = workload(events)
    assert len(change) == 1 and not faults(events)
    waited = float(change[0]["ts"]) - (T0 + RESTART_S)  # type: ignore[arg-type]
    assert DECIDE_WITHIN_S < waited <= DECIDE_WITHIN_S + 180


def test_a_pending_check_survives_a_restart_of_the_agent() -> None:
    samples = list(restarted(stream(2.0, 45), RESTART_S))
    cut = next(i for i, s in enumerate(samples) if s.job == "job-r") + 1
    monitor = DriftMonitor()
    observe(monitor, iter(samples[:cut]))
    assert monitor.changes.work.pending
    state = json.loads(json.dumps(monitor.save_state()))
    again = DriftMonitor()
    again.load_state(state)
    assert again.changes.work.pending and again.save_state() == monitor.save_state()
    assert observe(again, iter(samples[cut:])) == []
    assert not again.changes.work.pending and again.changes.work.last is not None
    assert again.changes.work.last.kind == "same"
    older = {"version": 1, "channels": {}}  # state of the layout before estimators.py: re-warms
    old = DriftMonitor()
    old.load_state(older)
    assert not old.changes.work.pending and not old.held


def unrated(samples: Iterator[ComponentSample]) -> Iterator[ComponentSample]:
    """The same stream from a rack whose jobs report no work rate (job ids and stages only)."""
    for s in samples:
        yield replace(s, work_rate=math.nan)


def test_without_work_rates_a_restart_with_the_same_gpu_signature_keeps_the_baselines() -> None:
    """Most jobs report no throughput: the restart is judged by its GPU signature in the previous
    job's main stage; the same signature keeps every baseline, so a 4 % GPU step at the restart (a
    driver update in the maintenance window) is found, not learned as the new run's profile."""
    monitor = DriftMonitor()
    fault = Injection("gpu", RESTART_S + 60, 4.0)
    events: list[dict[str, object]] = []
    held_while_checking, relearned = [], False
    for sample in unrated(restarted(stream(2.5, 45, (fault,)), RESTART_S)):
        events += monitor.observe(sample)
        if monitor.changes.work.pending:
            held_while_checking.append({"gpu", "it"} <= monitor.held)
        relearned |= bool(monitor.relearn)
    assert held_while_checking and all(held_while_checking)
    assert not relearned and not workload(events)
    found = faults(events)
    assert found and found[0]["cause"] == "gpu_hardware"
    detail: dict = found[0]["detail"]  # type: ignore[assignment]
    assert "runs like 'job-a' (GPU power +" in detail["explanation"]
    job = [x for x in detail["evidence"] if x["signal"] == "job"]
    assert job and "gpu_power_moved_pct" in job[0]


def test_without_work_rates_another_gpu_signature_is_a_workload_change_of_the_whole_rack() -> None:
    monitor = DriftMonitor()
    samples = unrated(stream(2.5, 46, (Injection("workload", RESTART_S, -30.0),)))
    events = observe(monitor, samples)
    assert not faults(events)
    changes = workload(events)
    assert changes and "different GPU signature" in str(changes[0]["detail"]["explanation"])  # type: ignore[index]
    assert float(changes[0]["detail"]["since"]) <= T0 + RESTART_S + 120  # type: ignore[index,arg-type]
    assert set(changes[0]["detail"]["relearn"]) == {"gpu", "it"}  # type: ignore[index]


def test_without_work_rates_a_job_that_never_runs_the_previous_main_stage_is_judged_within_minutes() -> None:
    """An inference job after a training run: it never enters forward_backward (the training run's
    main stage), but it runs eval, which the training run ran too, at 30 % less GPU power. It is
    judged in eval as soon as it filled a few bins there, not when the check times out an hour on
    (most jobs of a churning rack have ended by then)."""
    def inference(samples: Iterator[ComponentSample]) -> Iterator[ComponentSample]:
        for s in samples:
            if s.ts - T0 <= RESTART_S:
                yield s
            elif s.stage == "idle":
                yield replace(s, job="job-inf")
            else:  # every working bin an eval bin, at 0.7 × the training run's eval power
                scale = 0.7 * STAGE_LEVELS_W["eval"] / STAGE_LEVELS_W[s.stage]
                yield replace(s, job="job-inf", stage="eval", gpu_w=s.gpu_w * scale)

    events = observe(DriftMonitor(), inference(unrated(stream(2.5, 47))))
    changes = workload(events)
    assert changes, "the inference job was never taken for new work"
    since = float(changes[0]["detail"]["since"])  # type: ignore[index,arg-type]
    assert since <= T0 + RESTART_S + 120
    assert float(changes[0]["ts"]) - since < DECIDE_WITHIN_S / 2  # type: ignore[arg-type]
    assert "different GPU signature" in str(changes[0]["detail"]["explanation"])  # type: ignore[index]


def test_with_work_rates_a_job_that_rates_only_eval_is_compared_there_within_minutes() -> None:
    """A training run reports its rate in forward_backward and in eval; an inference job after it
    reports one only in eval, at 60 % of the training run's eval rate. It is compared in eval as
    soon as that rate settles, not when the check times out an hour on."""
    def inference(samples: Iterator[ComponentSample]) -> Iterator[ComponentSample]:
        for s in samples:
            if s.ts - T0 <= RESTART_S:
                yield replace(s, work_rate=300.0) if s.stage == "eval" else s
            elif s.stage == "idle":
                yield replace(s, job="job-inf")
            else:
                scale = STAGE_LEVELS_W["eval"] / STAGE_LEVELS_W[s.stage]
                yield replace(s, job="job-inf", stage="eval", gpu_w=s.gpu_w * scale, work_rate=180.0)

    changes = workload(observe(DriftMonitor(), inference(stream(2.5, 48))))
    assert changes, "the inference job was never taken for new work"
    since = float(changes[0]["detail"]["since"])  # type: ignore[index,arg-type]
    assert since <= T0 + RESTART_S + 120
    assert float(changes[0]["ts"]) - since < DECIDE_WITHIN_S / 2  # type: ignore[arg-type]
    assert "-40 % work rate" in str(changes[0]["detail"]["explanation"])  # type: ignore[index]
