"""The training step as the median GPU power of one node shows it, across chunks.

A step alternates forward/backward (high) and grad_sync (lower) every few seconds: ``swing`` gives
that alternation's range and where a row sits in it, ``alternating`` when it was last seen (and
whether the GPUs went straight on since: an eval), ``step_high`` the high side of the latest clear,
periodic alternation: the job's own training level. Memory: two short rings, four scalars.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from agent.stages.job_scope import last_true_ts

SWING_ROWS = 15  # rows (≈ seconds) over which the forward/backward ↔ grad_sync alternation is seen
_MID_ROWS = 3  # consecutive mid-range rows that end an alternation
_SWING_MIN = 0.08  # below this range of level there is no alternation to place a row in
# … nor below this many widths of the level's own sample noise (features._noise_w): the range of
# SWING_ROWS samples of white noise passes 5.5 widths once in 100 windows and 7 once in 10 000,
# while a step's communication draws 45–80 % of its compute (a swing of 0.2–0.55 of the level).
SWING_NOISE_WIDTHS = 7.0
ALT_S = 30.0  # a training step lasts seconds (≤ ~15 s): twice that without alternation is no step
LOW_LEVEL = 0.3  # below a third of the training level: no stage computes (idle, loading, writing, spinning)
STEP_MEMORY_S = 1800.0  # evals and stalls last minutes: a job stepping half an hour ago is this job
# A clear alternation (its high side is the job's own training level): high side ≥ ALT_RATIO × low
# side (communication draws 45–80 % of compute; a steady stage's median wanders by 1–4 % noise),
# ALT_SIDE_ROWS rows on each side (a glitch is one sample; each phase lasts a second or more), and
# periodic: ALT_CROSSINGS midpoint crossings (two cycles) within STEP_ROWS rows, so one low spell
# between two busy levels is none. Two steps of up to ~15 s at 1-s sampling fit in STEP_ROWS.
ALT_RATIO = 1.2
ALT_SIDE_ROWS = 2
ALT_CROSSINGS = 4
STEP_ROWS = 40


@dataclass
class StepWatch:
    """Carried rows and times of the step detectors (``FeatureExtractor.steps``)."""

    _recent: np.ndarray = field(default_factory=lambda: np.full(SWING_ROWS, np.nan))
    _recent_w: np.ndarray = field(default_factory=lambda: np.full(STEP_ROWS, np.nan))
    _last_swing_ts: float = float("-inf")
    _last_low_ts: float = float("-inf")
    _step_hi_w: float = float("nan")  # the high side of the latest clear step alternation …
    _step_hi_ts: float = float("nan")  # … and when it was seen

    def alternating(
        self, ts: np.ndarray, swing: np.ndarray, level: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per row: alternation seen within ALT_S (1/0); and "unstepped" (1/0): seen within
        STEP_MEMORY_S but not within ALT_S, with the GPUs never low (under LOW_LEVEL) since. A
        job that stepped and went straight on at a steady level is evaluating; one that went
        low in between (a stall, a checkpoint, another job's start-up) may come back training
        flat."""
        last = last_true_ts(ts, swing >= _SWING_MIN, self._last_swing_ts)
        last_low = last_true_ts(ts, level < LOW_LEVEL, self._last_low_ts)
        self._last_swing_ts, self._last_low_ts = float(last[-1]), float(last_low[-1])
        age = ts - last
        straight_on = last_low < last
        unstepped = (age > ALT_S) & (age <= STEP_MEMORY_S) & straight_on
        return (age <= ALT_S).astype(float), unstepped.astype(float)

    def step_high(
        self, ts: np.ndarray, mean_w: np.ndarray, floor: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per row: the highest row (W) of the latest clear step alternation, held for
        STEP_MEMORY_S, and when it was seen (NaN before any or after that); and the row's ts
        where the alternation's low side is a working level (above LOW_LEVEL), NaN elsewhere:
        training bursts between checkpoints or stalls alternate too, with a low side that
        computes nothing. Held until the next clear alternation, so an eval or a stall is placed
        against the level of the job that stepped just before it.
        """
        series = np.concatenate((self._recent_w, mean_w))
        self._recent_w = series[-STEP_ROWS:].copy()
        windows = np.lib.stride_tricks.sliding_window_view(series, STEP_ROWS + 1)[:, 1:]
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            mid = 0.5 * (np.nanmax(windows, axis=1) + np.nanmin(windows, axis=1))
            above = windows > mid[:, None]
            below = windows <= mid[:, None]
            crossings = np.count_nonzero(above[:, 1:] != above[:, :-1], axis=1)
            hi = np.nanmean(np.where(above, windows, np.nan), axis=1)
            lo = np.nanmean(np.where(below, windows, np.nan), axis=1)
            sides = np.minimum(np.count_nonzero(above, axis=1), np.count_nonzero(below, axis=1))
            clear = (crossings >= ALT_CROSSINGS) & (sides >= ALT_SIDE_ROWS) & (hi >= ALT_RATIO * lo)
            clear &= np.isfinite(windows).all(axis=1)
        with np.errstate(invalid="ignore"):
            working_low = lo - floor >= LOW_LEVEL * (hi - floor)
        visible = np.where(clear & working_low, ts, np.nan)
        seen = np.where(clear, np.nanmax(windows, axis=1), np.nan)
        idx = np.where(clear, np.arange(len(seen)), -1)
        np.maximum.accumulate(idx, out=idx)
        held = np.where(idx >= 0, seen[np.maximum(idx, 0)], self._step_hi_w)
        held_ts = np.where(idx >= 0, ts[np.maximum(idx, 0)], self._step_hi_ts)
        if held.size and np.isfinite(held[-1]):
            self._step_hi_w, self._step_hi_ts = float(held[-1]), float(held_ts[-1])
        with np.errstate(invalid="ignore"):
            recent = ts - held_ts <= STEP_MEMORY_S
        return np.where(recent, held, np.nan), held_ts, visible

    def swing(self, frac: np.ndarray, noise: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Range of an alternating level over the previous SWING_ROWS rows (crossed at least
        twice), and where this row sits in it (0 low, 1 high), whatever the job's absolute levels.
        A row that leaves the range (a stall) or a third row in a row halfway between the levels
        (eval) is a departure: no alternation for it. ``noise``: the level's sample noise per row
        (σ; NaN or None where unknown): a range within SWING_NOISE_WIDTHS of it is no alternation.
        """
        series = np.concatenate((self._recent, frac))
        self._recent = series[-SWING_ROWS:].copy()
        windows = np.lib.stride_tricks.sliding_window_view(series, SWING_ROWS + 1)
        prev = windows[:, :-1]
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            hi = np.nanmax(prev, axis=1)
            lo = np.nanmin(prev, axis=1)
            above = prev > (0.5 * (hi + lo))[:, None]
            crossings = np.count_nonzero(above[:, 1:] != above[:, :-1], axis=1)
            inside = (frac >= lo - _SWING_MIN) & (frac <= hi + _SWING_MIN)
            # three rows in a row halfway between the levels: a steady stage (eval) has begun
            recent_pos = (windows[:, -_MID_ROWS:] - lo[:, None]) / (hi - lo)[:, None]
            settled = np.all((recent_pos > 0.25) & (recent_pos < 0.75), axis=1)
            least = _SWING_MIN if noise is None else np.fmax(_SWING_MIN, SWING_NOISE_WIDTHS * noise)
            swing = np.where((crossings >= 2) & inside & ~settled & (hi - lo >= least), hi - lo, 0.0)
            swing = np.where(np.isnan(hi) | np.isnan(frac), np.nan, swing)
            pos = np.clip((frac - lo) / (hi - lo), 0.0, 1.0)
        pos = np.where(swing >= _SWING_MIN, pos, np.nan)
        return swing, pos
