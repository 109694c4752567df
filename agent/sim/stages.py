"""The training-job stage generator: which stage the rack is in, second by second.

Job by job: an idle gap, initial data_load, training steps (forward_backward then grad_sync),
data-load stalls, periodic evals and checkpoints, then a final checkpoint (none when preempted).
A ``WorkloadPlan`` sets durations, job kinds, a convergence plateau or a workload change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agent.sim.params import (
    CHECKPOINT,
    DATA_LOAD,
    EVAL,
    FORWARD_BACKWARD,
    GRAD_SYNC,
    IDLE,
    PROFILES,
    STAGES,
    JobProfile,
)

# Per-second variant of a stage, where one stage has more than one per-GPU signature.
V_PLAIN, V_SPIN = 0, 1  # V_SPIN: a collective stall, every rank spinning in NCCL (grad_sync)


@dataclass(frozen=True)
class WorkloadPlan:
    """How the rack is used over time (durations in minutes unless named otherwise)."""

    kind: str = "jobs"  # "jobs" | "lag_steps"
    profiles: tuple[str, ...] = ("dense",)  # job kinds drawn from, uniformly
    job_h: tuple[float, float] = (12.0, 36.0)
    idle_gap_min: tuple[float, float] = (5.0, 20.0)
    long_idle_prob: float = 0.0  # chance that a gap is a long idle instead
    long_idle_h: tuple[float, float] = (2.0, 8.0)
    preempt_prob: float = 0.0  # chance a job ends abruptly (no final checkpoint)
    initial_load_min: tuple[float, float] = (2.0, 5.0)
    checkpoint_every_min: tuple[float, float] = (30.0, 90.0)  # per job, drawn once
    checkpoint_min: tuple[float, float] = (2.0, 6.0)
    eval_every_min: tuple[float, float] = (90.0, 150.0)
    eval_min: tuple[float, float] = (4.0, 10.0)
    stall_every_min: float = 15.0  # mean interval between data-load stalls
    stall_s: tuple[float, float] = (5.0, 90.0)
    job_rate_spread: float = 0.05  # per-job deviation of the nominal work_rate
    plateau_start_h: float | None = None  # convergence plateau from then on
    plateau_rate_factor: float = 0.6  # small-batch resampling: lower throughput
    plateau_eval_every_min: tuple[float, float] = (25.0, 40.0)
    plateau_reload_every_min: tuple[float, float] = (60.0, 120.0)
    plateau_stall_every_min: float = 5.0
    workload_change_h: float | None = None  # from then on jobs are `change_to`
    change_to: str = "moe"
    step_block_min: float = 60.0  # lag_steps: length of each clean level
    first_idle_min: tuple[float, float] = (3.0, 8.0)
    job_kinds: tuple[JobProfile, ...] = ()  # a randomised rack's own kinds, found by name before PROFILES
    maintenance: tuple[tuple[float, float], ...] = ()  # (start_h, minutes): rack drained (driver update …)
    labelled_prob: float = 1.0  # chance that a job reports its stages at all (hints)


def profile_table(plan: WorkloadPlan) -> tuple[JobProfile, ...]:
    """The job kinds a timeline's ``profile`` codes index: the built-in ones, then the plan's own."""
    return (*PROFILES.values(), *plan.job_kinds)


@dataclass
class Timeline:
    """Per-second stage truth for the whole scenario."""

    stage: np.ndarray  # int8 stage code per second
    job: np.ndarray  # int32 job index per second, -1 = no job
    work_rate: np.ndarray  # float64 nominal work_rate per second, NaN = no job
    profile: np.ndarray  # int8 index into profile_table(plan) per second (last job's kind when idle)
    variant: np.ndarray  # int8 V_* per second
    labelled: np.ndarray  # bool per second: the job reports its stage
    jobs: list[dict[str, Any]] = field(default_factory=list)
    plateau_ranges: list[tuple[int, int]] = field(default_factory=list)


class _Builder:
    def __init__(self, plan: WorkloadPlan, total_s: int, rng: np.random.Generator) -> None:
        self.plan = plan
        self.total_s = total_s
        self.rng = rng
        self.t = 0
        # one run per add(): (stage, seconds, job, work_rate, profile, variant, labelled)
        self.runs: list[tuple[int, int, int, float, int, int, bool]] = []
        self.jobs: list[dict[str, Any]] = []
        self.last_profile = 0
        self.job_labelled = True
        self.table = profile_table(plan)
        self.names = [p.name for p in self.table]

    def add(self, stage: int, dur_s: float, job: int, rate: float, variant: int = V_PLAIN) -> None:
        d = max(1, round(dur_s))
        self.runs.append((stage, d, job, rate, self.last_profile, variant, self.job_labelled or job < 0))
        self.t += d

    def new_job(self, kind: str, start_s: int, end_s: int, rate: float, preempted: bool) -> dict[str, Any]:
        """Record the next job for the truth (the caller moves ``end_s`` to where it really ended)."""
        info = {"id": f"j{len(self.jobs):03d}", "profile": kind, "start_s": start_s, "end_s": end_s,
                "work_rate_nominal": rate, "preempted": preempted}
        self.jobs.append(info)
        return info

    def maintenance_after(self, t: float) -> tuple[float, float] | None:
        """The next maintenance window (start_s, end_s) that has not ended by ``t``."""
        spans = sorted((h * 3600.0, h * 3600.0 + m * 60.0) for h, m in self.plan.maintenance)
        return next(((a, e) for a, e in spans if e > t), None)

    def uniform(self, lo_hi: tuple[float, float], scale: float = 1.0) -> float:
        return float(self.rng.uniform(lo_hi[0], lo_hi[1])) * scale


def build_timeline(plan: WorkloadPlan, total_s: int, rng: np.random.Generator) -> Timeline:
    """Generate the per-second stage, job and work_rate truth for ``total_s`` seconds."""
    b = _Builder(plan, total_s, rng)
    if plan.kind == "lag_steps":
        _lag_steps(b)
    else:
        while b.t < total_s:
            _idle_gap(b, first=not b.jobs)
            if b.t < total_s:
                _job(b)
    stages, durs, jobs, rates, profiles, variants, labelled = zip(*b.runs, strict=True)

    def per_second(values: tuple[Any, ...], dtype: Any) -> np.ndarray:
        return np.repeat(np.asarray(values, dtype=dtype), durs)[:total_s]

    for info in b.jobs:
        info["end_s"] = min(info["end_s"], total_s)
    plateau = []
    if plan.plateau_start_h is not None and plan.plateau_start_h * 3600 < total_s:
        plateau.append((int(plan.plateau_start_h * 3600), total_s))
    return Timeline(
        per_second(stages, np.int8), per_second(jobs, np.int32), per_second(rates, np.float64),
        per_second(profiles, np.int8), per_second(variants, np.int8), per_second(labelled, bool),
        b.jobs, plateau,
    )


def _idle_gap(b: _Builder, first: bool) -> None:
    p = b.plan
    if first:
        minutes = b.uniform(p.first_idle_min)
    elif b.rng.random() < p.long_idle_prob:
        minutes = b.uniform(p.long_idle_h, 60.0)
    else:
        minutes = b.uniform(p.idle_gap_min)
    b.add(IDLE, minutes * 60.0, -1, math.nan)
    window = b.maintenance_after(b.t) if p.maintenance else None
    if window is not None and window[0] <= b.t:  # drained for maintenance: idle until it is over
        b.add(IDLE, window[1] - b.t, -1, math.nan)


def _job(b: _Builder) -> None:
    p = b.plan
    change_s = None if p.workload_change_h is None else p.workload_change_h * 3600.0
    changed = change_s is not None and b.t >= change_s
    name = p.change_to if changed else str(b.rng.choice(list(p.profiles)))
    if name not in b.names:
        raise ValueError(f"workload plan: unknown job kind {name!r}")
    b.last_profile = b.names.index(name)
    profile = b.table[b.last_profile]
    index = len(b.jobs)
    start = b.t
    end = start + b.uniform(p.job_h, 3600.0)
    ends_at_change = change_s is not None and start < change_s < end
    if ends_at_change and change_s is not None:
        end = change_s
    window = b.maintenance_after(start) if p.maintenance else None
    drained = window is not None and window[0] < end
    if window is not None and drained:  # the job is stopped when the rack is drained
        end = max(start + 60.0, window[0])
    preempted = drained or (not ends_at_change and bool(b.rng.random() < p.preempt_prob))
    if p.labelled_prob < 1.0:
        b.job_labelled = bool(b.rng.random() < p.labelled_prob)
    rate_factor = 1.0 + float(b.rng.normal(0.0, p.job_rate_spread))
    info = b.new_job(name, start, int(end), round(profile.work_rate * rate_factor, 3), preempted)
    b.add(DATA_LOAD, b.uniform(p.initial_load_min, 60.0), index, 0.0)
    ckpt_every = b.uniform(p.checkpoint_every_min, 60.0)
    next_ckpt = b.t + ckpt_every * b.rng.uniform(0.9, 1.1)
    next_eval = b.t + b.uniform(p.eval_every_min, 60.0)
    next_stall = b.t + b.rng.exponential(p.stall_every_min * 60.0)
    next_reload = math.inf
    plateau_s = math.inf if p.plateau_start_h is None else p.plateau_start_h * 3600.0
    if profile.steady:  # a server keeps no optimiser state to checkpoint and runs no evals
        next_ckpt = next_eval = math.inf
    spin_every_s = profile.collective_stall_every_min * 60.0
    next_spin = b.t + b.rng.exponential(spin_every_s) if spin_every_s > 0 else math.inf
    steps = 0
    while b.t < end and b.t < b.total_s:
        in_plateau = b.t >= plateau_s
        rate = profile.work_rate * rate_factor * (p.plateau_rate_factor if in_plateau else 1.0)
        if in_plateau and next_reload == math.inf:
            next_reload = b.t + b.uniform(p.plateau_reload_every_min, 60.0)
            next_eval = min(next_eval, b.t + b.uniform(p.plateau_eval_every_min, 60.0))
        if b.t >= next_ckpt:
            b.add(CHECKPOINT, b.uniform(p.checkpoint_min, 60.0), index, 0.0)
            next_ckpt = b.t + ckpt_every * b.rng.uniform(0.9, 1.1)
        elif b.t >= next_eval:
            b.add(EVAL, b.uniform(p.eval_min, 60.0), index, rate * 1.5)
            every = p.plateau_eval_every_min if in_plateau else p.eval_every_min
            next_eval = b.t + b.uniform(every, 60.0)
        elif b.t >= next_reload:  # plateau: roll back to a checkpoint and reload data
            b.add(CHECKPOINT, b.uniform((1.5, 3.0), 60.0), index, 0.0)
            b.add(DATA_LOAD, b.uniform((1.0, 3.0), 60.0), index, 0.0)
            next_reload = b.t + b.uniform(p.plateau_reload_every_min, 60.0)
        elif b.t >= next_stall:
            b.add(DATA_LOAD, b.uniform(p.stall_s), index, 0.0)
            mean = p.plateau_stall_every_min if in_plateau else p.stall_every_min
            next_stall = b.t + b.rng.exponential(mean * 60.0)
        elif b.t >= next_spin:  # a collective stall: every rank waits in NCCL for a straggler
            b.add(GRAD_SYNC, b.uniform(profile.collective_stall_s), index, rate, V_SPIN)
            next_spin = b.t + b.rng.exponential(spin_every_s)
        elif profile.steady:  # inference-like: forward passes only, in blocks between stalls
            b.add(EVAL, min(end - b.t, b.uniform((120.0, 600.0))), index, rate)
        elif profile.grad_sync_s[1] <= 0:  # lag_steps-like profile: one long level
            b.add(FORWARD_BACKWARD, min(end - b.t, 600.0), index, rate)
        else:
            b.add(FORWARD_BACKWARD, b.uniform(profile.fb_s), index, rate)
            b.add(GRAD_SYNC, b.uniform(profile.grad_sync_s), index, rate)
            steps += 1
            if profile.checkpoint_every_steps and steps % profile.checkpoint_every_steps == 0:
                b.add(CHECKPOINT, b.uniform(profile.frequent_checkpoint_s), index, 0.0)
    info["end_s"] = b.t
    if not preempted and not profile.steady:
        b.add(CHECKPOINT, b.uniform(p.checkpoint_min, 60.0), index, 0.0)
        info["end_s"] = b.t
    b.job_labelled = True


def _lag_steps(b: _Builder) -> None:
    """Clean load steps: idle → forward_backward → eval → forward_backward → idle …, one job."""
    block_s = b.plan.step_block_min * 60.0
    profile = PROFILES["step_load"]
    b.last_profile = b.names.index("step_load")
    b.new_job("step_load", 0, b.total_s, profile.work_rate, preempted=False)
    cycle = (IDLE, FORWARD_BACKWARD, EVAL, FORWARD_BACKWARD)
    k = 0
    while b.t < b.total_s:
        stage = cycle[k % len(cycle)]
        rate = {IDLE: math.nan, FORWARD_BACKWARD: profile.work_rate, EVAL: profile.work_rate * 1.5}[stage]
        b.add(stage, block_s, -1 if stage == IDLE else 0, rate)
        k += 1


def stage_runs(stage: np.ndarray, job: np.ndarray, ids: list[str], t0: float) -> list[list[Any]]:
    """Per-second stage codes and job indices as ``[start_ts, end_ts, stage, job_id]`` runs
    (truth.json); a negative code is a powered-down node (``"off"``), job -1 no job (``""``)."""
    change = np.flatnonzero((np.diff(stage) != 0) | (np.diff(job) != 0)) + 1
    starts = np.concatenate(([0], change))
    ends = np.concatenate((change, [len(stage)]))
    out: list[list[Any]] = []
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        code, j = int(stage[s]), int(job[s])
        out.append([t0 + s, t0 + e, "off" if code < 0 else STAGES[code], ids[j] if j >= 0 else ""])
    return out
