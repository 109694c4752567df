"""Per-row stage features from a trace chunk, vectorised, with last values held across chunks.

GPUs are sampled every second and PDUs every few seconds, with empty cells between, so every
column is held at its last sample (for at most ``max_hold_s``), across chunk boundaries too: a live
chunk of one row sees the same features as a replay chunk of thousands. Not a classifier (``infer``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from agent.stages.fading import decaying_extreme
from agent.stages.job_scope import UNPROVEN_TRAINING_S, JobScope, carried_state, load_carried
from agent.stages.steps import LOW_LEVEL, STEP_MEMORY_S, SWING_ROWS, StepWatch
from agent.trace.model import TraceChunk

# Columns of FeatureExtractor.extract's matrix, each scale-free so what is learned on one GPU model
# carries over to another; docs/stage-hints.md ("Inference when no hint is fresh") says what each is.
FEATURES: tuple[str, ...] = (
    "level", "lift", "util", "copy", "writer", "node_frac", "swing", "step_pos", "alternating", "unstepped",
    "over_start",
)
N_FEATURES = len(FEATURES)

MAX_GPU_POWER_W = 1500.0  # beyond this a GPU reading is a glitch (engine.max_gpu_power_w)
MAX_PDU_POWER_W = 100000.0
MAX_NODE_W_PER_GPU = 600.0  # CPUs, fans, NICs, storage and PSU losses per GPU, generous
_TRAIN_HALFLIFE_S = 2 * 3600.0  # the training level follows the job: a new job's level within hours
_FLOOR_HALFLIFE_S = 86400.0  # the idle floor is a property of the hardware: it forgets slowly
_NODE_HALFLIFE_S = 86400.0  # how slowly the learned node (non-GPU) power range forgets
# Datacentre GPUs idle at 7–15 % of TDP and train at 55–100 %: training ≈ 4–14 × idle. Until
# both have been seen, the one missing is taken as TRAIN_OVER_IDLE times (or over) the other,
# and a floor above MAX_FLOOR_FRAC of the training level is not an idle floor.
TRAIN_OVER_IDLE = 7.0
MAX_FLOOR_FRAC = 0.3
LIMIT_TRAIN_FRAC = 0.9  # with an NVML power limit known, training runs near it until seen
# Gates for learning the references (not stage signals): an idle GPU shows no utilisation, a
# training one most of it.
_IDLE_UTIL = 0.10
_BUSY_UTIL = 0.50
# writer: at least one GPU under _WRITER_UTIL while the median is over _PEERS_UTIL
_WRITER_UTIL = 25.0
_PEERS_UTIL = 75.0
# Idle floor vs contexts up: a GPU with a job's contexts up draws 1.4–2.0 × its idle power even
# with nothing running (H100: 115 W vs 65 W), so halfway between, in log terms, is no job: the
# end of one job and the start of the next. Many noise widths (1–4 % per GPU) from either side.
IDLE_LIFT = 0.5 * float(np.log(1.4))
# Memory busy while the SMs are idle is a copy (a checkpoint reading GPU memory out). NVML's
# percentages are integers and a data stall reads 0–3 % on both: 4 points is above that rounding.
COPY_MIN = 0.04
# A training step keeps a kernel resident on every GPU nearly all the time (97–100 % NVML
# utilisation on recordings of dense training, ≥ 90 % on any job whose step keeps the SMs fed);
# forward passes that wait on requests leave gaps. Three points under that floor is several widths
# of the smoothed utilisation's noise (under one point for the median over UTIL_SMOOTH_ROWS rows).
# One-sided: full utilisation is no proof of training (serving can saturate, spinning reads 100 %).
SATURATED_UTIL = 0.87
UTIL_SMOOTH_ROWS = SWING_ROWS  # rows of the node's median utilisation the test above looks at
# How a row's job has proved to be training (features._training_level)
PROOF_NONE, PROOF_STEPS, PROOF_CHECKPOINT = 0, 1, 2


def hold_last(
    ts: np.ndarray, values: np.ndarray, carry_value: np.ndarray, carry_ts: np.ndarray, max_hold_s: float
) -> np.ndarray:
    """Forward-fill NaN cells of each column with its last sample, up to max_hold_s old.

    ``values`` is (rows, columns); ``carry_value``/``carry_ts`` (one per column) hold the last
    sample from earlier chunks and are updated in place with this chunk's last samples.
    """
    n = values.shape[0]
    if n == 0:
        return values.copy()
    valid = ~np.isnan(values)
    idx = np.where(valid, np.arange(n)[:, None], -1)
    np.maximum.accumulate(idx, axis=0, out=idx)
    safe = np.maximum(idx, 0)
    src_value = np.where(idx >= 0, np.take_along_axis(values, safe, axis=0), carry_value[None, :])
    src_ts = np.where(idx >= 0, ts[safe], carry_ts[None, :])
    held = np.where(ts[:, None] - src_ts <= max_hold_s, src_value, np.nan)
    last = idx[-1]
    seen = last >= 0
    carry_value[seen] = values[last[seen], np.flatnonzero(seen)]
    carry_ts[seen] = ts[last[seen]]
    return held


class _JobRows(NamedTuple):
    """Per row of a chunk, what its job has shown (FeatureExtractor._training_level)."""

    train_w: np.ndarray  # the training level the row is placed against, W
    proof: np.ndarray  # how the job proved to be training: PROOF_NONE, PROOF_STEPS, PROOF_CHECKPOINT
    busy: np.ndarray  # utilisation high enough to teach a training level
    step_ts: np.ndarray  # the row's ts where a clear fb ↔ grad_sync alternation shows, else NaN
    start_w: np.ndarray  # the job's start-up power (contexts up, nothing running), NaN if unseen
    start_ts: np.ndarray  # when the job started (its GPUs left the idle floor), -inf if unseen


@dataclass
class _Group:
    """Carried last samples of one column family (e.g. every gpu.<i>.power_w)."""

    names: tuple[str, ...] = ()
    value: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ts: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def align(self, names: tuple[str, ...]) -> None:
        """Follow a changed column set, keeping the carry of columns that remain."""
        if names == self.names:
            return
        old = {name: (v, t) for name, v, t in zip(self.names, self.value, self.ts, strict=True)}
        self.value = np.array([old.get(name, (np.nan, -np.inf))[0] for name in names], dtype=float)
        self.ts = np.array([old.get(name, (np.nan, -np.inf))[1] for name in names], dtype=float)
        self.names = names


@dataclass
class FeatureExtractor:
    """Turns chunks into an (n, N_FEATURES) float matrix; NaN where a feature is unknown.

    ``gpus``: the GPU indices to look at (one node, one job's GPUs); None = every GPU of the rack.
    """

    max_hold_s: float = 30.0
    power_ref_w: float | None = None  # GPU power limit when known (as NVML's power_limit_w)
    gpus: tuple[int, ...] | None = None
    _groups: dict[str, _Group] = field(default_factory=dict)
    _layout_key: tuple[str, ...] = ()
    _layout: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _recent_node: np.ndarray = field(default_factory=lambda: np.full(SWING_ROWS - 1, np.nan))
    _recent_util: np.ndarray = field(default_factory=lambda: np.full(UTIL_SMOOTH_ROWS - 1, np.nan))
    _recent_noise: np.ndarray = field(default_factory=lambda: np.full(SWING_ROWS - 1, np.nan))
    _last_power: np.ndarray = field(default_factory=lambda: np.zeros(0))  # the last row, per GPU
    _peak_w: float = 0.0
    _peak_ts: float = float("nan")
    _floor_w: float = float("nan")
    _floor_ts: float = float("nan")
    _busy_s: float = 0.0  # seconds of busy rows seen: the clock the training level forgets on
    _last_ts: float = float("nan")
    _node_lo_w: float = float("nan")
    _node_hi_w: float = float("nan")
    _node_ts: float = float("nan")
    steps: StepWatch = field(default_factory=StepWatch)  # the training step's alternation
    job: JobScope = field(default_factory=JobScope)  # what the current job has shown

    def _matrix(self, chunk: TraceChunk, suffix: str, prefix: str, lo: float, hi: float) -> np.ndarray:
        """Columns <prefix>*<suffix> as a matrix; implausible cells (glitches) count as missing."""
        family = prefix + "*" + suffix
        names = self._layout.get(family)
        if names is None:
            keys = sorted(chunk.columns_matching(prefix, suffix), key=_natural)
            if prefix == "gpu." and self.gpus is not None:
                keys = [k for k in keys if k.isdigit() and int(k) in self.gpus]
            names = tuple(f"{prefix}{key}{suffix}" for key in keys)
            self._layout[family] = names
        if not names:
            return np.full((len(chunk), 0), np.nan)
        raw = np.stack([chunk.numeric[name] for name in names]).T  # a view: no strided copy
        with np.errstate(invalid="ignore"):
            clean = np.where((raw >= lo) & (raw <= hi), raw, np.nan)
        group = self._groups.setdefault(family, _Group())
        group.align(names)
        return hold_last(chunk.ts, clean, group.value, group.ts, self.max_hold_s)

    def extract(self, chunk: TraceChunk) -> np.ndarray:
        n = len(chunk)
        feats = np.full((n, N_FEATURES), np.nan)
        if n == 0:
            return feats
        ts = chunk.ts
        layout_key = tuple(chunk.numeric)
        if layout_key != self._layout_key:  # new column set: find the families again
            self._layout_key, self._layout = layout_key, {}
        power = self._matrix(chunk, ".power_w", "gpu.", 1.0, MAX_GPU_POWER_W)
        util = self._matrix(chunk, ".util_pct", "gpu.", 0.0, 100.0)
        mem = self._matrix(chunk, ".mem_util_pct", "gpu.", 0.0, 100.0)
        pdu = self._matrix(chunk, ".power_w", "pdu.", 1.0, MAX_PDU_POWER_W)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            med_util = _nanmedian(util) / 100.0 if util.shape[1] else np.full(n, np.nan)
            writer = np.zeros(n, dtype=bool)
            if util.shape[1]:
                feats[:, 2] = med_util
                lowest = np.nanmin(util, axis=1)
                writer = (lowest < _WRITER_UTIL) & (_nanmedian(util) > _PEERS_UTIL) & (util.shape[1] > 1)
                feats[:, 4] = np.where(np.isnan(lowest), np.nan, writer.astype(float))
            if mem.shape[1]:
                feats[:, 3] = _nanmedian(mem) / 100.0 - med_util
            if power.shape[1]:
                mean_w = _nanmedian(power)  # robust to one GPU's glitch
                limit = self._matrix(chunk, ".power_limit_w", "gpu.", 50.0, MAX_GPU_POWER_W)
                limit_w = _nanmedian(limit) if limit.shape[1] else np.full(n, np.nan)
                if self.power_ref_w:
                    limit_w = np.where(np.isnan(limit_w), float(self.power_ref_w), limit_w)
                floor, peak_train = self._references(ts, mean_w, med_util, limit_w)
                lift = np.log(np.maximum(mean_w, 1.0) / floor)
                job = self._training_level(ts, mean_w, med_util, lift, writer, feats[:, 3], peak_train, floor)
                train = np.maximum(job.train_w, floor * 1.5)
                level = (mean_w - floor) / np.maximum(train - floor, 1.0)
                feats[:, 0] = np.clip(level, -0.3, 1.5)
                feats[:, 1] = np.clip(lift, -1.0, 3.0)
                # one-sided: below the start-up says nothing (clocks may drop over a long write)
                feats[:, 10] = np.clip(np.log(np.maximum(mean_w, 1.0) / job.start_w), 0.0, 3.0)
                if pdu.shape[1]:
                    # every feed and every GPU must be known, or the difference is meaningless
                    # median × count: one GPU's spike must not move the node estimate
                    node_w = pdu.sum(axis=1) - mean_w * power.shape[1]
                    # a PDU sentinel or spike gives an impossible node power: treat as missing
                    plausible = (node_w >= 0.0) & (node_w <= MAX_NODE_W_PER_GPU * power.shape[1])
                    node_w = np.where(plausible, node_w, np.nan)
                    feats[:, 5] = self._node_frac(ts, node_w)
                noise = self._noise_w(power) / np.maximum(train - floor, 1.0)
                feats[:, 6], feats[:, 7] = self.steps.swing(feats[:, 0], noise)
                feats[:, 8], feats[:, 9] = self.steps.alternating(ts, feats[:, 6], feats[:, 0])
                # what the job holds (a rolling median), from rows that work only: a job's first rows
                # after its start-up or a stall must not read the low stage's utilisation as the job's
                with np.errstate(invalid="ignore"):
                    working_util = np.where(feats[:, 0] >= LOW_LEVEL, med_util, np.nan)
                held_util, self._recent_util = _rolling_median(self._recent_util, working_util)
                feats[:, 9] = np.maximum(feats[:, 9], self._untrained(ts, feats, job, held_util))
        return feats

    def _references(
        self, ts: np.ndarray, mean_w: np.ndarray, util: np.ndarray, limit_w: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Idle floor and training level per row, in W, both learned from the rack itself: a slowly
        forgetting minimum over idle rows, and a maximum over busy rows forgetting over busy time
        (it follows the job and survives idle gaps). Until one is seen it comes from the other
        (``TRAIN_OVER_IDLE``) or from the power limit."""
        unknown_util = np.isnan(util)
        low = np.where(unknown_util | (util <= _IDLE_UTIL), mean_w, np.nan)
        busy = np.where(unknown_util | (util >= _BUSY_UTIL), mean_w, np.nan)
        floor = decaying_extreme(ts, low, self._floor_w, self._floor_ts, _FLOOR_HALFLIFE_S, upper=False)
        # the training level forgets over busy time only: an idle night does not erase it
        step = np.diff(ts, prepend=self._last_ts if np.isfinite(self._last_ts) else ts[0])
        busy_step = np.where(np.isnan(busy), 0.0, np.maximum(step, 0.0))  # a busy row's gap counts
        busy_clock = self._busy_s + np.cumsum(busy_step)
        self._busy_s, self._last_ts = float(busy_clock[-1]), float(ts[-1])
        peak = decaying_extreme(busy_clock, busy, self._peak_w, self._peak_ts, _TRAIN_HALFLIFE_S, upper=True)
        for arr, clock, attr in ((floor, ts, "_floor"), (peak, busy_clock, "_peak")):
            if np.isfinite(arr).any():
                last = int(np.flatnonzero(np.isfinite(arr))[-1])
                setattr(self, attr + "_w", float(arr[last]))
                setattr(self, attr + "_ts", float(clock[last]))
        train = np.fmax(peak, LIMIT_TRAIN_FRAC * limit_w)
        train = np.where(np.isnan(train), floor * TRAIN_OVER_IDLE, train)
        floor = np.where(np.isnan(floor), train / TRAIN_OVER_IDLE, np.fmin(floor, MAX_FLOOR_FRAC * train))
        # neither seen yet: the level is unknown (NaN), not guessed from the row itself
        train = np.maximum(train, floor * 1.5)
        return np.maximum(floor, 1.0), train

    def _training_level(
        self,
        ts: np.ndarray,
        mean_w: np.ndarray,
        util: np.ndarray,
        lift: np.ndarray,
        writer: np.ndarray,
        copy: np.ndarray,
        peak_w: np.ndarray,
        floor: np.ndarray,
    ) -> _JobRows:
        """Per row, what its job has shown, above all the training level (W) the row is placed
        against: the high side of its steps if it steps visibly; its highest busy level if it has
        checkpointed but shows no step (steps shorter than a sample); else the node's proven
        training level (the learned peak until a job has proved to train)."""
        unknown_util = np.isnan(util)
        idle = (lift < IDLE_LIFT) & (unknown_util | (util <= _IDLE_UTIL))
        busy = unknown_util | (util >= _BUSY_UTIL)
        with np.errstate(invalid="ignore"):
            copying = (copy >= COPY_MIN) & (util <= _IDLE_UTIL) & ~idle
        step_hi, step_ts, visible_ts = self.steps.step_high(ts, mean_w, floor)
        start, checkpointed, job_hi, start_w = self.job.update(ts, mean_w, idle, busy, writer | copying)
        with np.errstate(invalid="ignore"):
            stepped = np.isfinite(step_hi) & (step_ts >= start) & (ts - step_ts <= STEP_MEMORY_S)
        flat_trainer = checkpointed & np.isfinite(job_hi) & ~stepped
        proven = np.where(stepped, step_hi, np.where(flat_trainer & busy, job_hi, np.nan))
        train_ref = self.job.train_ref(ts, proven)
        unproven = np.where(np.isfinite(train_ref), train_ref, peak_w)
        train = np.where(stepped, step_hi, np.where(flat_trainer, job_hi, unproven))
        proof = np.where(stepped, PROOF_STEPS, np.where(flat_trainer, PROOF_CHECKPOINT, PROOF_NONE))
        return _JobRows(train, proof, busy, visible_ts, start_w, start)

    def _noise_w(self, power: np.ndarray) -> np.ndarray:
        """Per row, the sample noise (σ, W) of the node's median GPU power, from its own GPUs.

        What the GPUs do together from row to row is the job's; what each does apart is noise. The
        spread across GPUs of their row-to-row changes (/2 for a difference of two samples) gives
        one GPU's σ; the median of G GPUs has about 1.25 σ/√G (high for a few GPUs, the safe side),
        steadied by a rolling median over SWING_ROWS rows. NaN with a single GPU.
        """
        same_gpus = self._last_power.shape == (power.shape[1],)
        prev = self._last_power if same_gpus else np.full(power.shape[1], np.nan)
        self._last_power = power[-1].copy()
        if power.shape[1] < 2:
            return np.full(power.shape[0], np.nan)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            change = np.diff(np.vstack((prev[None, :], power)), axis=0)
            per_gpu = np.sqrt(np.nanvar(change, axis=1, ddof=1) / 2.0)
            count = np.sum(np.isfinite(change), axis=1)
            row = 1.2533 * per_gpu / np.sqrt(np.maximum(count, 1))
        medians, self._recent_noise = _rolling_median(self._recent_noise, row)
        return medians

    def _untrained(
        self, ts: np.ndarray, feats: np.ndarray, job: _JobRows, held_util: np.ndarray
    ) -> np.ndarray:
        """Per row (1/0): busy and flat in a job that has shown no sign of training, on a node
        whose training jobs show their steps (no job trained flat within a day), or with
        utilisation held below SATURATED_UTIL, or busy for longer than UNPROVEN_TRAINING_S on a
        node with no flat trainer within the day: forward passes only (docs/stage-hints.md).
        """
        level, flat = feats[:, 0], feats[:, 8] == 0.0
        with np.errstate(invalid="ignore"):
            working = flat & (level >= LOW_LEVEL)
        flat_trainer = working & job.busy & (job.proof == PROOF_CHECKPOINT)
        steps_visible, no_flat_trainer = self.job.habit(ts, flat_trainer, job.step_ts)
        with np.errstate(invalid="ignore"):
            unsaturated = held_util < SATURATED_UTIL  # NaN (no utilisation reported) is not
        overdue = no_flat_trainer & (ts - job.start_ts > UNPROVEN_TRAINING_S)
        serving: np.ndarray = working & (job.proof == PROOF_NONE) & (steps_visible | unsaturated | overdue)
        return serving.astype(float)

    def _node_frac(self, ts: np.ndarray, node_w: np.ndarray) -> np.ndarray:
        """Node (PDU minus GPU) power placed in its learned range: 0 at the low end, 1 at the high.
        The range follows a rolling median, so a PDU sample lagging a GPU step does not stretch it."""
        smooth, self._recent_node = _rolling_median(self._recent_node, node_w)
        lo = decaying_extreme(ts, smooth, self._node_lo_w, self._node_ts, _NODE_HALFLIFE_S, upper=False)
        hi = decaying_extreme(ts, smooth, self._node_hi_w, self._node_ts, _NODE_HALFLIFE_S, upper=True)
        finite = np.isfinite(lo) & np.isfinite(hi)
        if finite.any():
            last = int(np.flatnonzero(finite)[-1])
            self._node_lo_w, self._node_hi_w = float(lo[last]), float(hi[last])
            self._node_ts = float(ts[last])
        span = np.maximum(hi - lo, 200.0)
        frac: np.ndarray = np.clip((node_w - lo) / span, 0.0, 1.0)
        return frac

    def state(self) -> dict[str, float]:
        return {**carried_state(self), **carried_state(self.steps), **carried_state(self.job)}

    def load(self, state: dict[str, float]) -> None:
        """Keys missing (a state saved before a part existed) restore that part's defaults."""
        for part in (self, self.steps, self.job):
            load_carried(part, state)


def _rolling_median(ring: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Median of each row's window of len(ring) + 1 rows (NaN ignored), and the new carried ring."""
    series = np.concatenate((ring, values))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        medians = _nanmedian(np.lib.stride_tricks.sliding_window_view(series, ring.size + 1))
    return medians, series[series.size - ring.size :].copy()


def _natural(key: str) -> tuple[int, str]:
    return (int(key), "") if key.isdigit() else (1 << 30, key)


def _nanmedian(m: np.ndarray) -> np.ndarray:
    if m.shape[1] == 1:
        return m[:, 0].copy()
    with np.errstate(all="ignore"):
        filled = np.where(np.isnan(m), np.inf, m)
        srt = np.sort(filled, axis=1)
        count = np.sum(~np.isnan(m), axis=1)
        lo = np.take_along_axis(srt, np.maximum((count - 1) // 2, 0)[:, None], axis=1)[:, 0]
        hi = np.take_along_axis(srt, np.maximum(count // 2, 0)[:, None], axis=1)[:, 0]
        return np.where(count > 0, 0.5 * (lo + hi), np.nan)

