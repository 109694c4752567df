"""``JobEnergy``: IT, cooling and facility energy per job and per stage, node by node.

On a rack whose nodes run different jobs, "energy by stage" mixes the jobs, and the rack's meters
see only the whole rack, so their energy is split over the (job, stage) each node was in
(docs/stage-hints.md, "Several jobs on one rack"):
- per node and row: its stage and job (``NodeStages``) and GPU power (missing GPUs scaled from the
  node's known ones; a node's last reading held for ``GPU_HOLD_S``). A node with no GPU reading is
  off while others report; when none reports, every node counts as on (split by node time).
- per bin and (node, cell): GPU energy G, the fans' terms F (the node's GPU power through the fans'
  lag) and node-seconds S, modelled as k·G + f·F + (b + d_s + e_c)·S by ``NodePowerModel``, which
  learns from the PDU feeds' readings at their instants (``_learn``).
- each engine window's measured IT energy is split in proportion to its entries' modelled energy
  (per window, not per bin: a feed's meter spans never cross a window, while a 15-s bin gets its
  neighbours' energy); its cooling follows the IT split. The split adds up to the measurement, plus
  the minutes no meter measured, filled at the window's own measured-to-modelled scale.
Fixed memory: at most ``MAX_CELLS`` cells (the least recently credited evicted into
``evicted_kwh``), the bins of the look-ahead and of the windows not yet final.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

import numpy as np

from agent.engine.frames import DEFAULT_INTERVAL_S, HOLD_FACTOR, RackInfo, split_pieces
from agent.engine.job_rates import CAPACITY as MAX_JOBS
from agent.engine.node_power import FAN_POWERS, MODEL_CELLS, FanLag, FeedShares, NodePowerModel, fan_terms
from agent.engine.node_stages import NodeHints, NodeStages
from agent.engine.signals import F, node_totals
from agent.engine.stage_slots import N_SLOTS, StageSlots
from agent.trace.model import J_PER_KWH, TraceChunk

# The jobs the engine tracks work rates for (job_rates.CAPACITY) × the 8 stages a job typically
# reports (the six canonical ones, "unknown" and one custom): cells beyond that are long gone jobs.
MAX_CELLS = MAX_JOBS * 8
NO_JOB = "-"  # the cell key of rows no job reported: job ids start with [A-Za-z0-9], never "-"
# A GPU reading holds as the engine holds a signal whose interval it has not measured (frames).
GPU_HOLD_S = HOLD_FACTOR * DEFAULT_INTERVAL_S
# A window's split is final once the model has learned from the 6 h after it. k, the fans' curve and
# a job's cells are told apart by how the job's load varies across its stages, and a training job's
# slowest stages (checkpoint, eval) recur every one to a few hours: split with the model of the hour
# after, a job's first hours carried its cells' early estimates (development seed 16 of
# bench/job_energy.py: a grad_sync cell +8.1 % at 1 h, +4.3 % at 6 h, +3.5 % with the whole day's
# model in a one-off run; docs/engine.md). A window not yet final is a few numbers per cell (``_Window``).
FINAL_AFTER_S = 6 * 3600.0
N_ACC = 3 + len(FAN_POWERS)  # per (node, cell) and bin: GPU J, node-seconds, hinted node-seconds, fan terms
# What a window keeps per cell, for the split: GPU J, powered node-seconds and the fans' terms, each
# summed plainly and weighted by the share of its bin the PDUs (IT) and the cooling unit measured.
N_TERMS = 2 + len(FAN_POWERS)
PLAIN, IT_PART, COOL_PART = range(3)

Key = tuple[str, str]


class _Window:
    """An engine window's accounted bins, as the split needs them: per cell its stage slot and its
    entries' sums (the model is linear in them, so a window's split from the sums equals the split of
    its (node, cell) entries one by one); per window what the PDUs and the cooling unit measured."""

    def __init__(self, idx: int) -> None:
        self.idx = idx
        self.keys: dict[Key, int] = {}  # cell → its code in this window
        self.slots: list[int] = []  # per code: its stage slot
        self.sums: list[np.ndarray] = []  # per code: (PLAIN, IT_PART, COOL_PART) × N_TERMS
        self.it_ws = 0.0
        self.cool_ws = 0.0

    def add(self, acc: dict[tuple[int, Key], np.ndarray], row: np.ndarray, slots: StageSlots,
            ts: float) -> None:
        """One bin's entries (``acc``: (node, cell) → [GPU J, node-seconds, hinted node-seconds, the
        fans' terms ∫ (L / 1 kW)^p dt]) and
        the energies its PDUs and cooling unit measured (``row``: the bin's sums; ``ts``: its start)."""
        dur = float(row[F["dur_s"]])
        it_part = float(row[F["pdu_s"]]) / dur if dur > 0 else 0.0
        cool_part = float(row[F["cool_s"]]) / dur if dur > 0 else 0.0
        parts = np.array([1.0, it_part, cool_part])[:, None]
        for (_, cell), v in acc.items():
            code = self.keys.setdefault(cell, len(self.keys))
            if code == len(self.sums):
                self.sums.append(np.zeros((3, N_TERMS)))
                self.slots.append(0)
            self.slots[code] = slots.slot(cell[1], ts)
            self.sums[code] += parts * np.concatenate((v[:2], v[3:]))[None, :]
        self.it_ws += float(row[F["pdu_ws"]]) if it_part > 0 else 0.0
        self.cool_ws += float(row[F["cool_ws"]]) if cool_part > 0 else 0.0


class JobEnergy:
    """Per (job, stage): IT, cooling and GPU energy (kWh) since the engine started, node-wise split."""

    def __init__(self, rack: RackInfo, bin_s: float, slots: StageSlots, gap_s: float = math.inf,
                 window_s: float | None = None) -> None:
        self.rack = rack
        self.nodes = NodeStages(rack)
        self.slots = slots  # the engine's stage-slot table: the node power model's stages are its slots
        self.feeds = FeedShares()
        self.power = NodePowerModel(bin_s, self.feeds)
        self.bin_s = float(bin_s)
        self.bins_per_window = max(1, round((window_s or bin_s) / bin_s))
        self.final_after_windows = max(1, math.ceil(FINAL_AFTER_S / (self.bins_per_window * self.bin_s)))
        self.gap_s = gap_s
        self.cells: OrderedDict[Key, np.ndarray] = OrderedDict()  # → [it, cooling, gpu] kWh
        self.evicted_kwh = 0.0
        # bin index → (node, cell) → [GPU W·s, node-seconds, node-seconds labelled by a hint]
        self._open: dict[int, dict[tuple[int, Key], np.ndarray]] = {}
        # the windows not yet final, oldest first: (window index, its accounted bins)
        self._windows: list[_Window] = []
        self._pend_ts = math.nan
        self._pend_w = np.zeros(0)
        self._pend_h = np.zeros(0)
        self._pend_keys: list[Key] = []  # per node: the (job, stage) cell of the last row
        self.fan_lag = FanLag()
        self._gpu_w = np.zeros(0)  # per node: the last GPU reading and its time (the hold)
        self._gpu_ts = np.zeros(0)
        self._feed_ts: dict[str, float] = {}  # per feed: its last reading's time

    def observe(self, chunk: TraceChunk, t0: float, rack_hints: np.ndarray, rack_labels: np.ndarray,
                hints: NodeHints | None) -> None:
        """Rows as the engine classifies them (cleaned, in time order): each node's stage, job and
        GPU power, integrated into the bins they fall in; the PDU readings among them teach the model."""
        n = len(chunk)
        if not n or not math.isfinite(t0):
            return
        stage, job, hinted = self.nodes.labels(chunk, rack_hints, rack_labels, hints)
        read = self._node_power(chunk)
        power = self._held(chunk.ts, read)
        lag_before = self.fan_lag.level  # at the previous chunk's last row
        lag = self.fan_lag.update(chunk.ts, power)
        hint_f = hinted.astype(float)
        keys, codes = _cell_codes(stage, job)
        self._learn(chunk, power, lag, np.isfinite(read), keys, codes)
        ts = chunk.ts
        prev = self._pend_ts
        if math.isfinite(prev) and ts[0] - prev <= self.gap_s and self._pend_w.size == power.shape[1]:
            starts = np.concatenate(([prev], ts[:-1]))
            keys += [c for c in dict.fromkeys(self._pend_keys) if c not in keys]  # the held row's cells
            pend_codes = np.array([keys.index(c) for c in self._pend_keys])
            held_w = np.vstack([self._pend_w[None, :], power[:-1]])
            held_c = np.vstack([pend_codes[None, :], codes[:-1]])
            held_h = np.vstack([self._pend_h[None, :], hint_f[:-1]])
            held_l = np.vstack([lag_before[None, :], lag[:-1]])
        else:  # the first row (or the first after a gap) starts an interval, it closes none
            starts, held_w, held_c, held_h, held_l = ts[:-1], power[:-1], codes[:-1], hint_f[:-1], lag[:-1]
            ts = ts[1:]
        self._pend_ts, self._pend_w, self._pend_h = float(chunk.ts[-1]), power[-1].copy(), hint_f[-1].copy()
        self._pend_keys = [keys[int(i)] for i in codes[-1]]
        if not starts.size:
            return
        self._integrate(starts, ts, held_w, held_c, held_h, held_l, keys, t0)

    def _node_power(self, chunk: TraceChunk) -> np.ndarray:
        """(rows × nodes) GPU power; NaN where none of the node's GPUs has a reading."""
        cols = {int(k.split(".")[1]): v for k, v in chunk.numeric.items()
                if k.startswith("gpu.") and k.endswith(".power_w") and k.split(".")[1].isdigit()}
        groups = self.nodes.gpus or (frozenset(cols),)
        out = np.full((len(chunk), len(groups)), np.nan)
        node = np.array([k for k, gpus in enumerate(groups) for _ in gpus], dtype=np.int64)
        if node.size:  # a configured GPU without a column counts as missing: scaled like the engine's
            absent = np.full(len(chunk), np.nan)
            # stacked GPU by GPU, then viewed rows × GPUs: a copy into rows would be strided
            held = np.stack([cols.get(i, absent) for gpus in groups for i in sorted(gpus)]).T
            out[:, np.unique(node)] = node_totals(held, node)
        return out

    def _held(self, ts: np.ndarray, power: np.ndarray) -> np.ndarray:
        """Each node's GPU power with a missed poll filled by its last reading, up to ``GPU_HOLD_S``
        old (a node whose GPUs stop reporting for longer is off)."""
        if self._gpu_w.size != power.shape[1]:
            self._gpu_w = np.full(power.shape[1], np.nan)
            self._gpu_ts = np.full(power.shape[1], -np.inf)
        vals = np.vstack([self._gpu_w[None, :], power])
        times = np.concatenate(([0.0], ts))
        known = np.isfinite(vals)
        idx = np.maximum.accumulate(np.where(known, np.arange(len(vals))[:, None], 0), axis=0)
        src_ts = np.where(idx == 0, self._gpu_ts[None, :], times[idx])
        filled = np.take_along_axis(vals, idx, axis=0)
        out: np.ndarray = np.where(times[:, None] - src_ts <= GPU_HOLD_S, filled, np.nan)[1:]
        last = known[1:].any(axis=0)
        if last.any():
            rows = len(ts) - 1 - np.argmax(known[1:][::-1], axis=0)
            self._gpu_w = np.where(last, power[rows, np.arange(power.shape[1])], self._gpu_w)
            self._gpu_ts = np.where(last, ts[rows], self._gpu_ts)
        return out

    def _learn(self, chunk: TraceChunk, power: np.ndarray, lag: np.ndarray, read: np.ndarray,
               keys: list[Key], codes: np.ndarray) -> None:
        """Teach the node power model each PDU feed's readings (over the feed's share of the rack)
        against the nodes' GPU power and cells at the same rows, only where every powered node's GPUs
        were read at that row (``read``): a held GPU reading is from before the PDU's instant, and a
        node's power alternates within seconds (forward/backward against gradient sync): 1 % of the
        readings, paired with a node's previous second, pulled k from 1.06 to 0.93 IT watts per GPU
        watt and credited the lighter job with the heavier one's power (development seed 2 of
        bench/job_energy.py, a one-off trace). A reading stands for the time since its feed's previous
        one (at most ``GPU_HOLD_S``), shared by the feeds read."""
        known = np.isfinite(power)
        valid: dict[str, np.ndarray] = {}  # feed → its rows with a reading in range
        for f in [k for k in chunk.numeric if k.startswith("pdu.") and k.endswith(".power_w")]:
            p = chunk.numeric[f]
            with np.errstate(invalid="ignore"):
                ok = np.isfinite(p) & (p >= 0) & (p <= self.rack.max_power_w(f))
            if ok.any():
                valid[f] = np.flatnonzero(ok)
                self.feeds.update(f, chunk.ts[ok], p[ok])
        if not valid or not keys:
            return
        now = float(chunk.ts[-1])
        slot = np.array([self.slots.slot(stage, now) for _, stage in keys], dtype=np.int64)
        col = self.power.cell_columns(keys) - self.power.first_cell
        rows = np.unique(np.concatenate(list(valid.values())))
        # GPU telemetry at that instant, read there for every node counted as on: the features exist
        rows = rows[known[rows].any(axis=1) & (known[rows] == read[rows]).all(axis=1)]
        if not rows.size:
            return
        pos = {int(r): i for i, r in enumerate(rows)}
        on, code = known[rows], codes[rows]
        r_i, n_i = np.nonzero(on)
        by_slot = np.zeros((rows.size, N_SLOTS))
        by_col = np.zeros((rows.size, MODEL_CELLS))
        np.add.at(by_slot, (r_i, slot[code[r_i, n_i]]), 1.0)
        np.add.at(by_col, (r_i, col[code[r_i, n_i]]), 1.0)
        gpu_w = np.where(on, power[rows], 0.0).sum(axis=1)
        fan = (fan_terms(lag[rows]) * on[:, :, None]).sum(axis=1)
        n_on = on.sum(axis=1).astype(float)
        for f, idx in valid.items():
            share = self.feeds.share(f)
            idx = idx[np.isin(idx, rows)]
            if not idx.size or not share > 0:
                continue
            t = chunk.ts[idx]
            prev = np.concatenate(([self._feed_ts.get(f, -math.inf)], t[:-1]))
            self._feed_ts[f] = float(t[-1])
            weight = np.minimum(t - prev, GPU_HOLD_S) / self.bin_s / len(valid)
            i = np.array([pos[int(r)] for r in idx])
            self.power.add_readings(f, t, gpu_w[i], fan[i], n_on[i], by_slot[i], by_col[i],
                                    chunk.numeric[f][idx], weight, self.nodes.n)

    def _integrate(self, starts: np.ndarray, ends: np.ndarray, w: np.ndarray, c: np.ndarray,
                   h: np.ndarray, lag: np.ndarray, keys: list[Key], t0: float) -> None:
        src, dt, bins = split_pieces(starts, ends, t0, self.bin_s)
        p, code = w[src], c[src]
        known = np.isfinite(p)
        on = np.where(known.any(axis=1)[:, None], known, True)  # nobody reports: every node is on
        g = np.where(known, p, 0.0) * dt[:, None]
        s = on * dt[:, None]
        n_keys, n_nodes = len(keys), p.shape[1]
        flat = ((bins[:, None] - bins.min()) * n_nodes + np.arange(n_nodes)[None, :]) * n_keys + code
        size = int(flat.max()) + 1
        fan = fan_terms(np.where(known, lag[src], 0.0)) * dt[:, None, None]
        sums = np.stack([np.bincount(flat.ravel(), weights=x.ravel(), minlength=size)
                         for x in (g, s, s * h[src], *np.moveaxis(fan, -1, 0))], axis=1)
        for f in np.flatnonzero(sums[:, 1] > 0):
            bn, k = divmod(int(f), n_keys)
            b, n = divmod(bn, n_nodes)
            cell = self._open.setdefault(int(bins.min()) + b, {}).setdefault((n, keys[k]), np.zeros(N_ACC))
            cell += sums[f]

    def hinted_node_frac(self, start: np.ndarray, dur: np.ndarray, frac: np.ndarray, t0: float) -> np.ndarray:
        """Per bin and stage slot: the share of the rack's node time in that stage as hints say (the
        stage-only IT forecast's weights). Only hints count: they come from the jobs, so they may drive
        a window's own prediction (causality). Node time no hint labels keeps the rack's ``frac``."""
        out = frac.copy()
        node_s = self.nodes.n * dur  # the bin's node time: every listed node for the whole bin
        for i in range(len(start)):
            acc = self._open.get(round((float(start[i]) - t0) / self.bin_s))
            if not acc or node_s[i] <= 0:
                continue
            hinted = np.zeros(frac.shape[1])
            for (_, (_, stage)), v in acc.items():
                if v[2] > 0:
                    hinted[self.slots.slot(stage, float(start[i]))] += v[2]
            share = min(float(hinted.sum()) / node_s[i], 1.0)
            if share > 0:
                out[i] = hinted / max(float(hinted.sum()), 1e-9) * share + (1.0 - share) * frac[i]
        return out

    def account(self, start: np.ndarray, sums: np.ndarray, t0: float) -> None:
        """Completed bins (the engine's, time ordered): each bin's entries join its window, whose
        measured energy is split when its last bin is accounted (or a later window's first is);
        accumulators of bins that will never close (a gap) are dropped."""
        for i in range(len(start)):
            idx = round((float(start[i]) - t0) / self.bin_s)
            while self._open and (first := next(iter(self._open))) < idx:  # bins arrive in time order:
                del self._open[first]  # the stale ones are the first (a chunk's rows can span a day)
            window = idx // self.bins_per_window
            if not self._windows or self._windows[-1].idx != window:
                self._windows.append(_Window(window))
            acc = self._open.pop(idx, None)
            if acc:
                self._windows[-1].add(acc, sums[i], self.slots, float(start[i]))
            self.power.bin_done()
            while len(self._windows) > self.final_after_windows + 1:  # the open one and 6 h of complete ones
                for cell, e in self._split(self._windows.pop(0)).items():
                    self._cell(cell)[:] += e

    def _split(self, window: _Window) -> dict[Key, np.ndarray]:
        """A window's [IT, cooling, GPU] kWh per cell: each entry's energy as the model now says (by
        node time where it says none), scaled so that the part of the window that was measured adds
        up to the measurement. Minutes no meter measured (a feed's outage, a lost poll) are filled at
        that scale rather than dropped: dropped, they were taken from whichever job ran through
        them (development seed 3 of bench/job_energy.py: 3.5 min without one feed cost a 63-kWh job
        2.4 % of its energy, a one-off trace). A window nothing measured is the IT model's own
        estimate, and has no cooling."""
        if not window.sums:
            return {}
        sums = np.stack(window.sums)
        keys = list(window.keys)
        slot, code = np.array(window.slots, dtype=np.int64), np.arange(len(keys))

        def modelled_j(x: np.ndarray) -> np.ndarray:
            j: np.ndarray = np.maximum(self.power.energy_j(x[:, 0], x[:, 2:], x[:, 1], slot, code, keys), 0.0)
            return j

        model = modelled_j(sums[:, PLAIN])
        modelled = float(model.sum()) > 0  # else no GPU telemetry, or a model not yet solved
        base = model if modelled else sums[:, PLAIN, 1]
        out = np.zeros((len(keys), 3))
        for k, (part, measured) in enumerate(((IT_PART, window.it_ws), (COOL_PART, window.cool_ws))):
            total = float((modelled_j(sums[:, part]) if modelled else sums[:, part, 1]).sum())
            if total > 0:
                scale = measured / total
            elif k == 0 and modelled:
                scale = 1.0  # no PDU reading in the whole window: the node power model's watts
            else:
                continue
            out[:, k] = base * scale
        out[:, 2] = sums[:, PLAIN, 0]
        out /= J_PER_KWH
        return dict(zip(keys, out, strict=True))

    def _cell(self, cell: Key) -> np.ndarray:
        e = self.cells.pop(cell, None)
        if e is None:
            e = np.zeros(3)
            if len(self.cells) >= MAX_CELLS:
                _, old = self.cells.popitem(last=False)
                self.evicted_kwh += float(old[0] + old[1])
        self.cells[cell] = e  # most recently credited last
        return e

    @property
    def now(self) -> dict[str, dict[str, str]]:
        """Node → {"stage", "job"} at the last row seen (job "" where none was reported)."""
        ids = self.nodes.ids or ("rack",)
        return {node: {"stage": stage, "job": "" if job == NO_JOB else job}
                for node, (job, stage) in zip(ids, self._pend_keys, strict=False)}

    def _totals(self) -> dict[Key, np.ndarray]:
        """The closed windows' cells plus the open window split by what it has so far."""
        out = {cell: e.copy() for cell, e in self.cells.items()}
        for window in self._windows:
            for cell, e in self._split(window).items():
                out[cell] = out.get(cell, np.zeros(3)) + e
        return out

    def table(self) -> dict[str, dict[str, dict[str, float]]]:
        """{job: {stage: {"it", "cooling", "facility", "gpu"}}} in kWh (job ``NO_JOB``: none reported)."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for (job, stage), e in sorted(self._totals().items()):
            out.setdefault(job, {})[stage] = {"it": float(e[0]), "cooling": float(e[1]),
                                              "facility": float(e[0] + e[1]), "gpu": float(e[2])}
        return out

    def state(self) -> dict[str, Any]:
        """Totals (the open window's split so far included: a restart loses none of it), the
        per-node inferrers, the node power model and the feeds' shares."""
        totals = self._totals()
        cells = [*self.cells, *(c for c in totals if c not in self.cells)][-MAX_CELLS:]
        return {"cells": [[job, stage, *map(float, totals[(job, stage)])] for job, stage in cells],
                "evicted_kwh": self.evicted_kwh, "nodes": self.nodes.state(), "power": self.power.state(),
                "feeds": self.feeds.state()}

    def load(self, state: dict[str, Any]) -> None:
        """Restore totals, the per-node inferrers and the model; a malformed entry raises ValueError."""
        self.cells.clear()
        self._windows.clear()
        for entry in list(state.get("cells", []))[-MAX_CELLS:]:
            job, stage, it, cool, gpu = entry
            values = np.array([float(it), float(cool), float(gpu)])
            if not np.all(np.isfinite(values)) or (values < 0).any():
                raise ValueError(f"job energy cell {job!r}/{stage!r}: not finite and ≥ 0")
            self.cells[(str(job), str(stage))] = values
        self.evicted_kwh = float(state.get("evicted_kwh", 0.0))
        if state.get("nodes"):
            self.nodes.load(state["nodes"])
        if state.get("feeds"):  # before the model: it solves with the feeds' shares
            self.feeds.load(state["feeds"])
        if state.get("power"):
            self.power.load(state["power"])


def _cell_codes(stage: np.ndarray, job: np.ndarray) -> tuple[list[Key], np.ndarray]:
    """The distinct (job, stage) cells of (rows × nodes) labels and each entry's cell index."""
    pairs = np.char.add(np.char.add(job.astype(str), "\x1f"), stage.astype(str))
    uniq, inv = np.unique(pairs, return_inverse=True)
    keys = [(j or NO_JOB, st or "unknown") for j, _, st in (u.partition("\x1f") for u in uniq.tolist())]
    return keys, inv.reshape(stage.shape).astype(np.int64)
