"""``RowBinner``: the look-ahead row buffer and the exact integration of held signals into bins.

Rows pass ``RowTimes``, wait ``lookahead_s`` in the buffer (the spike rule needs the next sample),
are cleaned (``hygiene``), labelled (the caller's classifier) and held (``Signals.hold``); their
per-interval quantities are split at bin edges and summed into bins. The last emitted row stays
pending: its value holds until the next row's time. A gap longer than ``gap_s`` is never
integrated: the open bin is closed and the rows after it start again like a first row (bins keep
their grid). Chunking never changes the result (up to floating-point summation order).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.engine.feed_load import FeedLoad
from agent.engine.frames import (
    PER_SLOT_BLOCKS,
    PER_SLOT_BLOCKS_BEFORE_MEMORY,
    BinBatch,
    Held,
    RackInfo,
    RowBatch,
    Signals,
    split_pieces,
)
from agent.engine.meter_power import apply_meters
from agent.engine.row_times import RowTimes
from agent.engine.signals import (
    FACILITY,
    FEED_GPU,
    LEGACY_FIELDS,
    N_FIELDS,
    QUANTITIES,
    F,
    combine,
    gpu_load,
    is_engine_signal,
    member_names,
    remap_fields,
)
from agent.trace.model import TraceChunk

EMIT_BATCH_S = 15.0  # rows leave the look-ahead buffer in batches spanning at least this long
# per-signal state arrays (one row per registered signal)
PER_SIGNAL = frozenset(
    {"hyg_counts", "hyg_last", "hyg_run", "hyg_repeat_rate", "last_value", "last_ts", "interval_s",
     "meter_step", "meter_inc"}
)
NAME_WIDTH = 64  # signal names saved in a state: canonical column names are far shorter
# interval values that only shape the GPU sums' 2nd and 3rd moments
MOMENTS = ("gpu2", "gpu3", f"{FEED_GPU}2")
MAX_RESET_ROWS = 64  # rows with a GPU counter reset kept until their bin is read (fixed memory)

Classifier = Callable[[TraceChunk], tuple[np.ndarray, np.ndarray, np.ndarray]]
"""chunk of emitted rows (cleaned) → (stage slot per row, inferred per row, has-hint per row)."""


@dataclass
class Stretch:
    """What one ``push`` produced up to a gap (or the end of its rows): completed bins and emitted
    rows; before a gap (``gap``: the last row before it, the first after it) also the open bin it
    closed (``closed``, partial)."""

    bins: BinBatch
    rows: RowBatch
    closed: BinBatch | None = None
    gap: tuple[float, float] | None = None


class RowBinner:
    """Turns rows into completed bins; fixed state (the buffer is at most ``lookahead_s`` of rows)."""

    def __init__(self, rack: RackInfo, bin_s: float, n_slots: int, lookahead_s: float, classify: Classifier,
                 gap_s: float = math.inf, wall_clock: Callable[[], float] = time.time,
                 window_s: float = math.inf) -> None:
        self.rack = rack
        self.window_s = window_s  # meter spans never reach into the next window (meter_power)
        self.gap_s = gap_s
        self.times = RowTimes(wall_clock)
        self.gaps = 0  # discontinuities so far
        self.bin_s = bin_s
        self.n_slots = n_slots
        self.lookahead_s = lookahead_s
        self.classify = classify
        self.signals = Signals(rack, lookahead_s)
        self.feed_load = FeedLoad()
        self.t0 = math.nan  # first row's timestamp: bins and windows align to it
        self._buf: TraceChunk | None = None
        self._pending_ts = math.nan
        self._pending_slot = 0
        self._pending_hint = False
        self._pending_job = ""
        self._open_bin = -1
        # open bin: FIELDS, then the PER_SLOT_BLOCKS per-slot blocks (BinBatch's order)
        self._open_sums = np.zeros(N_FIELDS + PER_SLOT_BLOCKS * n_slots)
        self._open_job = ""
        # (row time, GPU counter resets in that row) not yet read by a bin: a driver reload lands in
        # its own bin whatever the chunking
        self._gpu_resets: list[tuple[float, int]] = []
        # last ``gpu.<i>.energy_resets`` per column: reset-safe drivers (NVML, dcgm-exporter) keep
        # energy_j rising and count the resets they absorbed instead
        self._reset_counts: dict[str, float] = {}

    def push(self, chunk: TraceChunk, flush: bool = False) -> list[Stretch]:
        """Rows in → one ``Stretch`` per gap crossed, then the stretch after the last gap."""
        buf = self._append(chunk)
        out: list[Stretch] = []
        if buf is not None and len(buf) and math.isnan(self.t0):
            self.t0 = float(buf.ts[0])
        while buf is not None and len(buf):
            g = self._first_gap(buf)
            if g is None:
                break
            before = float(buf.ts[g - 1]) if g else self._pending_ts
            bins, rows = self._emit(buf.take(slice(0, g)), g) if g else self._empty()
            out.append(Stretch(bins, rows, self.close_open_bin(), (before, float(buf.ts[g]))))
            self._pending_ts = math.nan  # the next row starts again, as the very first one did
            self.gaps += 1
            buf = buf.take(slice(g, len(buf)))
        self._buf = None
        out.append(Stretch(*self._push_continuous(buf, flush)))
        return out

    def _first_gap(self, buf: TraceChunk) -> int | None:
        """Index of the first row more than ``gap_s`` after the row before it (or the pending row)."""
        prev = np.concatenate(([self._pending_ts], buf.ts[:-1]))
        with np.errstate(invalid="ignore"):
            far = np.flatnonzero(buf.ts - prev > self.gap_s)
        return int(far[0]) if far.size else None

    def _push_continuous(self, buf: TraceChunk | None, flush: bool) -> tuple[BinBatch, RowBatch]:
        if buf is None or len(buf) == 0:
            return self._empty()
        cutoff = buf.ts[-1] - self.lookahead_s
        n_emit = len(buf) if flush else int(np.searchsorted(buf.ts, cutoff, side="right"))
        if n_emit == 0 or (not flush and cutoff - buf.ts[0] < EMIT_BATCH_S):
            # live ticks wait until a batch of rows can go (same result, far fewer numpy calls)
            self._buf = buf
            return self._empty()
        out = self._emit(buf, n_emit)
        self._buf = buf.take(slice(n_emit, len(buf))) if n_emit < len(buf) else None
        return out

    def take_gpu_resets(self, until_ts: float) -> int:
        """GPU energy counters that went backwards in rows at or before ``until_ts`` (a bin's end),
        not yet taken: the bin ending there owns them."""
        n = sum(c for t, c in self._gpu_resets if t <= until_ts + 1e-9)
        if n:
            self._gpu_resets = [(t, c) for t, c in self._gpu_resets if t > until_ts + 1e-9]
        return n

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The binner's fixed-shape state: grid, pending row, open bin, each signal's hold and hygiene."""
        out = {
            "rows_scalars": np.array([self.t0, self._pending_ts, float(self._pending_slot),
                                      float(self._pending_hint), self._open_bin]),
            "open_sums": self._open_sums,
            "signal_names": np.array(self.signals.names or [""], dtype=f"<U{NAME_WIDTH}"),
        }
        out.update(self.signals.state_arrays())
        return out

    def state(self) -> dict[str, Any]:
        """The binner's JSON state: jobs, the counters of refused rows and gaps."""
        return {"pending_job": self._pending_job, "open_job": self._open_job, "row_times": self.times.state(),
                "gaps": self.gaps, "feed_load": self.feed_load.state()}

    def load(self, names: list[str], arrays: dict[str, np.ndarray], state: dict[str, Any]) -> None:
        """The inverse of ``state_arrays`` and ``state`` (values already range-checked by the caller).
        Signals a state holds that this build does not read are dropped with their per-signal state."""
        keep = [i for i, n in enumerate(names) if is_engine_signal(n)]
        names = [names[i] for i in keep]
        self.signals.ensure(names)
        if self.signals.names != names:
            raise ValueError("state signal table does not match")
        self.signals.load_arrays({k: v[keep] if k in PER_SIGNAL else v for k, v in arrays.items()})
        r = arrays["rows_scalars"]
        self.t0, self._pending_ts = float(r[0]), float(r[1])
        self._pending_slot, self._pending_hint, self._open_bin = int(r[2]), bool(r[3]), int(r[4])
        saved = arrays["open_sums"]
        legacy = LEGACY_FIELDS[: saved.shape[-1] - PER_SLOT_BLOCKS_BEFORE_MEMORY * self.n_slots]
        fields = [str(n) for n in arrays.get("bin_fields", legacy)]
        trailing = saved.shape[-1] - len(fields)
        # per-slot blocks were only ever appended: an older state's are a prefix (the rest stay 0)
        kept = N_FIELDS + min(trailing, PER_SLOT_BLOCKS * self.n_slots)
        self._open_sums[:] = 0.0
        self._open_sums[:kept] = remap_fields(saved, fields, trailing=trailing)[:kept]
        self._pending_job, self._open_job = str(state.get("pending_job", "")), str(state.get("open_job", ""))
        self.times.load(state.get("row_times") or {})
        self.gaps = int(state.get("gaps") or 0)
        feed_state = state.get("feed_load")
        self.feed_load.load(feed_state if isinstance(feed_state, dict) else {})

    @property
    def pending_ts(self) -> float:
        return self._pending_ts

    def _append(self, chunk: TraceChunk) -> TraceChunk | None:
        if len(chunk):
            last = self._buf.ts[-1] if self._buf is not None and len(self._buf) else self._pending_ts
            chunk = self.times.admit(chunk, float(last))
            if len(chunk):
                self.signals.ensure(list(chunk.numeric))
        if self._buf is None:
            return chunk if len(chunk) else None
        if not len(chunk):
            return self._buf
        return TraceChunk.concat([self._buf, chunk])

    def _empty(self) -> tuple[BinBatch, RowBatch]:
        z = np.zeros(0)
        zs = np.zeros((0, self.n_slots))
        return (
            BinBatch(z, np.zeros((0, N_FIELDS)), zs, [], zs, zs, zs, zs),
            RowBatch(z, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)),
        )

    def _emit(self, buf: TraceChunk, n: int) -> tuple[BinBatch, RowBatch]:
        ts = buf.ts[:n]
        sig = self.signals
        clean = {name: sig.hygiene.clean(k, buf.ts, buf.numeric[name], n)
                 for k, name in enumerate(sig.names) if name in buf.numeric}
        self._note_gpu_resets(ts, buf, n)
        numeric = {c: v[:n] for c, v in {**buf.numeric, **clean}.items()}
        emitted = TraceChunk(ts=ts, numeric=numeric, stage=buf.stage[:n], job=buf.job[:n],
                             first_line=buf.first_line)
        slots, inferred, hinted = self.classify(emitted)
        rows = RowBatch(ts, slots, inferred)
        first_call = math.isnan(self._pending_ts)
        start_ts = np.concatenate(([self._pending_ts], ts[:-1]))
        holds = {
            name: sig.hold(k, ts, clean.get(name, np.full(n, np.nan)), start_ts)
            for k, name in enumerate(sig.names)
            if not sig.hygiene.kinds[k].counter  # counters are only checked for resets
        }
        held = {name: h.values for name, h in holds.items()}
        metered = apply_meters(self.signals, held, buf, n, clean, start_ts, self.t0, self.window_s)
        per = self._interval_values(held, n)
        per[FEED_GPU], per[f"{FEED_GPU}2"] = self._feed_gpu(ts, holds, metered, per)
        slot_i = np.concatenate(([self._pending_slot], slots[:-1])).astype(np.int64)
        hint_i = np.concatenate(([self._pending_hint], hinted[:-1]))
        job_i = np.concatenate(([self._pending_job], emitted.job[:-1])) if n else emitted.job
        self._pending_ts = float(ts[-1])
        self._pending_slot = int(slots[-1])
        self._pending_hint = bool(hinted[-1])
        self._pending_job = str(emitted.job[-1]) if len(emitted.job) else ""
        starts, ends = start_ts, ts
        if first_call:
            starts, ends, per = starts[1:], ends[1:], {k: v[1:] for k, v in per.items()}
            slot_i, hint_i, job_i = slot_i[1:], hint_i[1:], job_i[1:]
        if starts.size == 0:
            return self._empty()[0], rows
        return self._bin(starts, ends, per, slot_i, hint_i, job_i), rows

    def _feed_gpu(self, ts: np.ndarray, holds: dict[str, Held], metered: dict[str, np.ndarray],
                  per: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
        """The GPU load's 1st and 2nd moments as the PDU feeds' samples saw them, per interval
        (feed_load.py). The GPU load is taken only at the rows where some feed sampled."""
        names = self.signals.names
        gpus = member_names(names, "gpu.power_w")
        feeds = {n: holds[n] for n in member_names(names, "pdu.power_w")}
        own_row = np.arange(ts.size)
        sampled = np.flatnonzero(np.logical_or.reduce([h.last_sample == own_row for h in feeds.values()]))
        g_rows = np.full((ts.size, 2), np.nan)
        if gpus and sampled.size:
            at = np.stack([holds[n].at_rows(sampled, ts) for n in gpus], axis=1)
            g_rows[sampled] = np.stack(gpu_load(at, self._gpu_groups(gpus))[:2], axis=1)
        g_intervals = np.stack([per["gpu"], per["gpu2"]], axis=1)
        seen = self.feed_load.moments(g_rows, g_intervals, feeds, metered)
        return seen[:, 0], seen[:, 1]

    def _gpu_groups(self, gpus: list[str]) -> np.ndarray | None:
        return np.array([self.rack.gpu_node(n) for n in gpus]) if self.rack.node_gpus else None

    def _note_gpu_resets(self, ts: np.ndarray, buf: TraceChunk, n: int) -> None:
        """Remember the rows of this emit where GPU energy counters went backwards, or where a
        reset-safe driver's ``gpu.<i>.energy_resets`` count rose (live NVML, recorded traces)."""
        per_row = np.zeros(ts.size, dtype=np.int64)
        for k, mask in self.signals.hygiene.reset_rows.items():  # counters that went backwards
            name = self.signals.names[k]
            if name.startswith("gpu.") and name.endswith(".energy_j") and mask.size == ts.size:
                per_row += mask
        for name, col in buf.numeric.items():
            if name.startswith("gpu.") and name.endswith(".energy_resets"):
                per_row += self._count_increments(name, col[:n])
        self._gpu_resets.extend((float(ts[i]), int(per_row[i])) for i in np.flatnonzero(per_row))
        while len(self._gpu_resets) > MAX_RESET_ROWS:  # merge the oldest two: counts are kept
            (_, c0), (t1, c1) = self._gpu_resets[0], self._gpu_resets[1]
            self._gpu_resets[:2] = [(t1, c0 + c1)]

    def _count_increments(self, name: str, col: np.ndarray) -> np.ndarray:
        """Per row, how much a cumulative reset count rose since its previous finite value (the
        first value seen only sets the reference: resets before the agent started are history)."""
        out = np.zeros(col.size, dtype=np.int64)
        rows = np.flatnonzero(np.isfinite(col))
        if not rows.size:
            return out
        values = np.concatenate(([self._reset_counts.get(name, math.nan)], col[rows]))
        rise = np.diff(values)  # NaN after an unknown reference; < 0 is the driver restarting its count
        up = np.isfinite(rise) & (rise > 0)
        out[rows[up]] = np.rint(rise[up]).astype(np.int64)
        self._reset_counts[name] = float(values[-1])
        return out

    def _interval_values(self, held: dict[str, np.ndarray], m: int) -> dict[str, np.ndarray]:
        """Each ``signals.QUANTITIES`` value per interval, from the held columns (and the facility)."""
        names = self.signals.names
        out: dict[str, np.ndarray] = {}
        for q in QUANTITIES:
            members = member_names(names, q.column)
            # stacked member by member, then viewed rows × members: a copy into rows would be strided
            cols = np.stack([held[n] for n in members]).T if members else np.zeros((m, 0))
            shares = np.array([self.rack.crac_shares.get(n.split(".")[1], 1.0) for n in members if "." in n])
            if q.name == "gpu":  # the total and its moments (node by node where nodes are listed)
                out["gpu"], out["gpu2"], out["gpu3"] = gpu_load(cols, self._gpu_groups(members))
            else:
                out[q.name] = combine(q, cols, shares)
        out[FACILITY] = out["pdu"] + out["cool"]
        return out

    def _bin(self, starts: np.ndarray, ends: np.ndarray, per: dict[str, np.ndarray], slot_i: np.ndarray,
             hint_i: np.ndarray, job_i: np.ndarray) -> BinBatch:
        src, dt, bins = split_pieces(starts, ends, self.t0, self.bin_s)
        m = src.size
        w = np.zeros((m, N_FIELDS))
        w[:, F["dur_s"]] = dt
        for key, v_all in per.items():
            if key in MOMENTS:
                continue
            v = v_all[src]
            known = ~np.isnan(v)
            w[:, F[f"{key}_s"]] = dt * known
            w[:, F[f"{key}_ws"]] = dt * np.where(known, v, 0.0)
            for moment in (f"{key}2", f"{key}3"):  # the GPU power's higher moments (signals.gpu_load)
                if moment in per:
                    w[:, F[f"{moment}_ws"]] = dt * np.where(known, per[moment][src], 0.0)
        w[:, F["hint_s"]] = dt * hint_i[src]
        cut = np.flatnonzero(np.diff(bins)) + 1
        first = np.concatenate(([0], cut))
        per_slot = self._per_slot((per["gpu"], per["gmem"]), src, dt, slot_i, cut)
        sums = np.concatenate([np.add.reduceat(w, first, axis=0), per_slot], axis=1)
        ids = bins[first]
        last_piece = np.concatenate((cut, [m])) - 1
        jobs = [str(j) for j in job_i[src[last_piece]]]
        if ids[0] == self._open_bin:
            sums[0] += self._open_sums
        complete = self.t0 + (ids + 1) * self.bin_s <= float(ends[-1]) + 1e-9
        n_done = int(complete.sum())
        if n_done < ids.size:
            self._open_bin = int(ids[-1])
            self._open_sums = sums[-1].copy()
            self._open_job = jobs[-1]
        else:
            self._open_bin = -1
            self._open_sums[:] = 0.0
        return self._batch(self.t0 + ids[:n_done] * self.bin_s, sums[:n_done], jobs[:n_done])

    def _per_slot(self, values: tuple[np.ndarray, ...], src: np.ndarray, dt: np.ndarray, slot_i: np.ndarray,
                  cut: np.ndarray) -> np.ndarray:
        """Per bin and stage slot: seconds in the stage, then for each of ``values`` (GPU power, GPU
        memory utilisation) the seconds it was known and its integral: each stage's own level."""
        S = self.n_slots
        grp = np.zeros(src.size, dtype=np.int64)
        grp[cut] = 1
        np.cumsum(grp, out=grp)
        n_grp = int(grp[-1]) + 1 if grp.size else 0
        key = grp * S + slot_i[src]
        weights = [dt]
        for v in values:
            x = v[src]
            known = ~np.isnan(x)
            weights += [dt * known, dt * np.where(known, x, 0.0)]
        out = [np.bincount(key, weights=w, minlength=n_grp * S).reshape(n_grp, S) for w in weights]
        return np.concatenate(out, axis=1)

    def _batch(self, start: np.ndarray, sums: np.ndarray, jobs: list[str]) -> BinBatch:
        S, a = self.n_slots, N_FIELDS
        blocks = [sums[:, a + k * S : a + (k + 1) * S] for k in range(PER_SLOT_BLOCKS)]
        return BinBatch(start, sums[:, :a], blocks[0], jobs, *blocks[1:])

    def close_open_bin(self) -> BinBatch:
        """At the end of a trace: the partial last bin (its ``dur_s`` says how much it covers)."""
        if self._open_bin < 0:
            return self._empty()[0]
        start = np.array([self.t0 + self._open_bin * self.bin_s])
        batch = self._batch(start, self._open_sums[None, :].copy(), [self._open_job])
        self._open_bin = -1
        self._open_sums[:] = 0.0
        return batch
