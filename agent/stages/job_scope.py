"""What the GPUs of one node have shown since their current job started: the job's own evidence.

A job starts where the GPUs leave their idle floor and ends when they return to it (a data stall
or a checkpoint keeps the contexts up). Per job: whether it has checkpointed (only training keeps
optimiser state) and its highest busy power; over jobs: the node's proven training level.

Why: a busy, flat row alone cannot tell forward passes from training whose steps are shorter than
the sample (an 8B GPT on H100s reads flat at 1 s). A job that checkpoints trains, and its flat
level is its training level; a job with no sign of training is placed against the level this
node's GPUs draw when they do train. Not a job-id tracker (job ids are not in GPU telemetry).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from agent.stages.fading import decaying_extreme

# A training level learned from jobs that proved to be training is a property of the GPU model
# and of what the site trains, like the idle floor: it forgets over a day, not over a job.
TRAIN_REF_HALFLIFE_S = 86400.0
# How a node's training jobs look at its sampling rate (visible steps or flat) is a habit of the
# site's models and sampling: one job that trained flat is remembered for a day, as the floor is.
HABIT_MEMORY_S = 86400.0
# A training job writes its state out to bound the work an interruption loses: Young/Daly's
# optimum interval √(2·δ·M), for a checkpoint taking δ ≤ 5 min and an interruption every M ≤ 6 h
# (large runs see one every few hours: Llama 3, 2024), is at most an hour, and frameworks'
# every-N-steps defaults land minutes to an hour apart (the 8B GPT recording: every 1–1000 steps).
# A job busy and flat for longer than that with neither a step nor a checkpoint is not training.
UNPROVEN_TRAINING_S = 3600.0
# A checkpoint is believed on this many consecutive rows (seconds) of its signature: a single
# row of one GPU lagging or of a counter's rounding is one sample, while the shortest checkpoint
# written between steps lasts several seconds (3–20 s on frequent-checkpoint runs).
CKPT_PROOF_ROWS = 3
# Twice any GPU power reading (features.MAX_GPU_POWER_W is 1500 W) and more: offsets each job's
# running extreme above the last job's, so that one cumulative maximum serves every job of a chunk.
_SEGMENT_OFFSET_W = 1.0e4


@dataclass
class JobScope:
    """Carried per-job and per-node evidence; ``update`` returns it per row of a chunk."""

    _job_start_ts: float = float("-inf")  # the last row at the idle floor
    _ckpt_ts: float = float("-inf")  # the last row of a believed checkpoint
    _ckpt_run: int = 0  # consecutive checkpoint-signature rows at the end of the last chunk
    _job_hi_w: float = float("nan")  # the highest busy power of the current job
    _start_w: float = float("nan")  # the lowest power of the current job's start-up
    _train_ref_w: float = float("nan")  # the node's proven training level …
    _train_ref_ts: float = float("nan")  # … and when it was last taught
    _step_seen_ts: float = float("-inf")  # the last clear step alternation (any job)
    _flat_seen_ts: float = float("-inf")  # the last busy row of a job that trained flat

    def update(
        self,
        ts: np.ndarray,
        mean_w: np.ndarray,
        idle: np.ndarray,
        busy: np.ndarray,
        ckpt_like: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per row: job start ts, whether the job has checkpointed, the job's highest busy power,
        and its start-up power (contexts up, nothing running: the floor of its low stages)."""
        start = last_true_ts(ts, idle, self._job_start_ts)
        run = run_length(ckpt_like, self._ckpt_run)
        ckpt = last_true_ts(ts, run >= CKPT_PROOF_ROWS, self._ckpt_ts)
        self._job_start_ts, self._ckpt_ts = float(start[-1]), float(ckpt[-1])
        self._ckpt_run = int(run[-1])
        seg = np.cumsum(idle)
        job_hi = _job_extreme(mean_w, busy, seg, self._job_hi_w, upper=True)
        # the start-up: the job's rows before its first busy one, with nothing running yet
        start_up = ~idle & ~busy & np.isnan(job_hi)
        start_w = _job_extreme(mean_w, start_up, seg, self._start_w, upper=False)
        if job_hi.size:
            self._job_hi_w, self._start_w = float(job_hi[-1]), float(start_w[-1])
        return start, ckpt > start, job_hi, start_w

    def train_ref(self, ts: np.ndarray, proven_w: np.ndarray) -> np.ndarray:
        """The node's proven training level per row: a day-forgetting maximum of ``proven_w``
        (rows of jobs that showed they train; NaN elsewhere), NaN until one is seen."""
        carry_w, carry_ts = self._train_ref_w, self._train_ref_ts
        ref = decaying_extreme(ts, proven_w, carry_w, carry_ts, TRAIN_REF_HALFLIFE_S, upper=True)
        finite = np.flatnonzero(np.isfinite(ref))
        if finite.size:
            self._train_ref_w, self._train_ref_ts = float(ref[finite[-1]]), float(ts[finite[-1]])
        return ref

    def habit(
        self, ts: np.ndarray, flat_trainer: np.ndarray, step_ts: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per row, how this node's training jobs look: whether they show their steps — a clear
        forward/backward ↔ grad_sync alternation has been seen (``step_ts``: the rows' ts where
        one shows, else NaN) and no job has trained flat within HABIT_MEMORY_S — and whether no
        job has trained flat (``flat_trainer`` rows) within HABIT_MEMORY_S, steps seen or not."""
        flat = last_true_ts(ts, flat_trainer, self._flat_seen_ts)
        seen = last_true_ts(ts, np.isfinite(step_ts), self._step_seen_ts)  # step_ts is ts or NaN
        self._flat_seen_ts = float(flat[-1]) if flat.size else self._flat_seen_ts
        self._step_seen_ts = float(seen[-1]) if seen.size else self._step_seen_ts
        no_flat = ts - flat > HABIT_MEMORY_S
        return np.isfinite(seen) & no_flat, no_flat


def _job_extreme(
    values: np.ndarray, mask: np.ndarray, seg: np.ndarray, carry: float, upper: bool
) -> np.ndarray:
    """Running max (or min) of ``values`` over ``mask`` rows, restarted where ``seg`` (the count
    of idle rows so far) steps up; ``carry`` continues the job the chunk starts in. NaN before
    the job's first such row. Each job is offset above the last, so one cumulative max serves."""
    half = 0.5 * _SEGMENT_OFFSET_W
    sign = 1.0 if upper else -1.0
    base = 0.0 if upper else half
    use = mask & np.isfinite(values)
    value = np.where(use, base + sign * values, 0.0) + seg * _SEGMENT_OFFSET_W
    first = base + sign * carry if np.isfinite(carry) else 0.0
    run = np.maximum.accumulate(np.concatenate(([first], value)))[1:] - seg * _SEGMENT_OFFSET_W
    return np.where(run > 0.0, sign * (run - base), np.nan)


def last_true_ts(ts: np.ndarray, mask: np.ndarray, carry: float) -> np.ndarray:
    """Per row: the ts of the latest row (this one included) where ``mask`` holds, else ``carry``."""
    seen = np.where(mask, ts, -np.inf)
    return np.maximum.accumulate(np.concatenate(([carry], seen)))[1:]


def run_length(mask: np.ndarray, carry: float) -> np.ndarray:
    """Per row: how many consecutive rows up to it ``mask`` has held (``carry``: the run at the end
    of the previous chunk)."""
    n = mask.size
    idx = np.arange(1, n + 1)
    last_false = np.maximum.accumulate(np.where(mask, 0, idx))
    run = idx - last_false
    # rows before the chunk's first False continue the carried run
    return np.where(last_false == 0, run + carry, run)


def _carried(obj: Any) -> list[Any]:
    """The carried scalars of a state dataclass: its ``_``-named float and int fields."""
    return [f for f in fields(obj) if f.name.startswith("_") and f.type in ("float", "int")]


def carried_state(obj: Any) -> dict[str, float]:
    """Each carried scalar ``_<key>`` as ``<key>`` (floats, field order); a "last seen" time whose
    default is never (-inf) is saved as NaN, which JSON can hold."""
    out: dict[str, float] = {}
    for f in _carried(obj):
        x = float(getattr(obj, f.name))
        out[f.name[1:]] = x if math.isfinite(x) or f.default != -math.inf else math.nan
    return out


def load_carried(obj: Any, state: dict[str, float]) -> None:
    """The inverse of ``carried_state``: a missing key restores the field's default; a time that
    is not finite is never (-inf); a count that is not a positive number is 0."""
    for f in _carried(obj):
        x = float(state.get(f.name[1:], f.default))
        if f.type == "int":
            setattr(obj, f.name, int(x) if math.isfinite(x) and x > 0 else 0)
        elif f.default == -math.inf and not math.isfinite(x):
            setattr(obj, f.name, -math.inf)
        else:
            setattr(obj, f.name, x)
