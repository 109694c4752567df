"""``JobEnergy``: IT, cooling and facility energy per job and per stage, node by node.

Why: on a rack whose nodes run different jobs, "energy by stage" mixes the jobs; a tenant asks
what *its* job's checkpoints cost. The rack's meters (PDUs, cooling unit) see the whole rack, so
the energy of each bin (``Engine.bin_s``, ≈ 15 s) is split over the (job, stage) each node was in.

How, per bin (docs/stage-hints.md, "Several jobs on one rack"):
- per node and row: its stage and job (``node_stages.NodeStages``) and its GPU power (the sum of
  its own ``gpu.<i>.power_w``; a missing GPU is scaled from the node's known ones, as the engine's
  GPU total does). A node with no GPU reading is off (drained, powered down) while other nodes
  report; when no node reports, every node counts as on (a rack without GPU telemetry: split by
  node time). Rows are intervals like the engine's bins: a row's values hold until the next row.
- per (job, stage) cell: GPU energy G and node-seconds S inside the bin;
- the bin's measured IT energy (Σ PDU) is split in proportion to k·G + b_s·S: k IT watts per GPU
  watt and b_s the non-GPU power of a powered node in stage s, both learned from the bins
  (``node_power.NodePowerModel``). The split adds up to the measurement.
- the bin's cooling energy (the rack's share) follows its IT split: the heat is the IT power.
  (The per-stage totals of ``Engine.energy_kwh`` move cooling to the stage whose heat caused it
  through the learned lag; per job, over hours, the lag moves a bin's cooling by a minute.)

Fixed memory: at most ``MAX_CELLS`` (job, stage) cells, the least recently credited evicted (its
energy is counted in ``evicted_kwh``); the accumulators of bins not yet closed span the engine's
short look-ahead. State round-trips through ``state``/``load`` (JSON, in the engine's state file).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

import numpy as np

from agent.engine.frames import RackInfo, split_pieces
from agent.engine.job_rates import CAPACITY as MAX_JOBS
from agent.engine.node_power import IT_PER_GPU_W, NodePowerModel
from agent.engine.node_stages import NodeHints, NodeStages
from agent.engine.signals import F, node_totals
from agent.engine.stage_attribution import MIN_KNOWN
from agent.engine.stage_slots import N_SLOTS, StageSlots
from agent.trace.model import J_PER_KWH, TraceChunk

# The jobs the engine tracks work rates for (job_rates.CAPACITY) × the 8 stages a job typically
# reports (the six canonical ones, "unknown" and one custom): cells beyond that are long gone jobs.
MAX_CELLS = MAX_JOBS * 8
NO_JOB = "-"  # the cell key of rows no job reported: job ids start with [A-Za-z0-9], never "-"


class JobEnergy:
    """Per (job, stage): IT, cooling and GPU energy (kWh) since the engine started, node-wise split."""

    def __init__(self, rack: RackInfo, bin_s: float, slots: StageSlots, gap_s: float = math.inf) -> None:
        self.nodes = NodeStages(rack)
        self.slots = slots  # the engine's stage-slot table: the node power model's stages are its slots
        self.power = NodePowerModel(bin_s)
        self.bin_s = float(bin_s)
        self.gap_s = gap_s
        self.cells: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()  # → [it, cooling, gpu] kWh
        self.evicted_kwh = 0.0
        # bin index → (node, cell) → [GPU W·s, node-seconds, node-seconds labelled by a hint]
        self._open: dict[int, dict[tuple[int, tuple[str, str]], np.ndarray]] = {}
        self._pend_ts = math.nan
        self._pend_w = np.zeros(0)
        self._pend_h = np.zeros(0)
        self._pend_keys: list[tuple[str, str]] = []  # per node: the (job, stage) cell of the last row

    # ----------------------------------------------------------------------------- rows
    def observe(self, chunk: TraceChunk, t0: float, rack_hints: np.ndarray, rack_labels: np.ndarray,
                hints: NodeHints | None) -> None:
        """Rows as the engine classifies them (cleaned, in time order): each node's stage, job and
        GPU power, integrated into the bins they fall in."""
        n = len(chunk)
        if not n or not math.isfinite(t0):
            return
        stage, job, hinted = self.nodes.labels(chunk, rack_hints, rack_labels, hints)
        power = self._node_power(chunk)
        hint_f = hinted.astype(float)
        keys, codes = _cell_codes(stage, job)
        ts = chunk.ts
        prev = self._pend_ts
        if math.isfinite(prev) and ts[0] - prev <= self.gap_s and self._pend_w.size == power.shape[1]:
            starts = np.concatenate(([prev], ts[:-1]))
            keys += [c for c in dict.fromkeys(self._pend_keys) if c not in keys]  # the held row's cells
            pend_codes = np.array([keys.index(c) for c in self._pend_keys])
            held_w = np.vstack([self._pend_w[None, :], power[:-1]])
            held_c = np.vstack([pend_codes[None, :], codes[:-1]])
            held_h = np.vstack([self._pend_h[None, :], hint_f[:-1]])
        else:  # the first row (or the first after a gap) starts an interval, it closes none
            starts, held_w, held_c, held_h = ts[:-1], power[:-1], codes[:-1], hint_f[:-1]
            ts = ts[1:]
        self._pend_ts, self._pend_w, self._pend_h = float(chunk.ts[-1]), power[-1].copy(), hint_f[-1].copy()
        self._pend_keys = [keys[int(i)] for i in codes[-1]]
        if not starts.size:
            return
        self._integrate(starts, ts, held_w, held_c, held_h, keys, t0)

    def _node_power(self, chunk: TraceChunk) -> np.ndarray:
        """(rows × nodes) GPU power; NaN where none of the node's GPUs has a reading."""
        cols = {int(k.split(".")[1]): v for k, v in chunk.numeric.items()
                if k.startswith("gpu.") and k.endswith(".power_w") and k.split(".")[1].isdigit()}
        groups = self.nodes.gpus or (frozenset(cols),)
        out = np.full((len(chunk), len(groups)), np.nan)
        node = np.array([k for k, gpus in enumerate(groups) for _ in gpus], dtype=np.int64)
        if node.size:  # a configured GPU without a column counts as missing: scaled like the engine's
            absent = np.full(len(chunk), np.nan)
            held = np.stack([cols.get(i, absent) for gpus in groups for i in sorted(gpus)], axis=1)
            out[:, np.unique(node)] = node_totals(held, node)
        return out

    def _integrate(self, starts: np.ndarray, ends: np.ndarray, w: np.ndarray, c: np.ndarray,
                   h: np.ndarray, keys: list[tuple[str, str]], t0: float) -> None:
        src, dt, bins = split_pieces(starts, ends, t0, self.bin_s)
        p, code = w[src], c[src]
        known = np.isfinite(p)
        on = np.where(known.any(axis=1)[:, None], known, True)  # nobody reports: every node is on
        g = np.where(known, p, 0.0) * dt[:, None]
        s = on * dt[:, None]
        n_keys, n_nodes = len(keys), p.shape[1]
        node = np.arange(n_nodes)[None, :]
        flat = ((bins[:, None] - bins.min()) * n_nodes + node) * n_keys + code
        size = int(flat.max()) + 1
        g_sum = np.bincount(flat.ravel(), weights=g.ravel(), minlength=size)
        s_sum = np.bincount(flat.ravel(), weights=s.ravel(), minlength=size)
        h_sum = np.bincount(flat.ravel(), weights=(s * h[src]).ravel(), minlength=size)
        for f in np.flatnonzero(s_sum > 0):
            bn, k = divmod(int(f), n_keys)
            b, n = divmod(bn, n_nodes)
            cell = self._open.setdefault(int(bins.min()) + b, {}).setdefault((n, keys[k]), np.zeros(3))
            cell += (g_sum[f], s_sum[f], h_sum[f])

    # ----------------------------------------------------------------------------- bins
    def hinted_node_frac(self, start: np.ndarray, dur: np.ndarray, frac: np.ndarray, t0: float) -> np.ndarray:
        """Per bin and stage slot: the share of the rack's node time in that stage, as hints say.

        The stage-only IT forecast (``model``) reads it: on a rack whose nodes run different jobs,
        the rack's load is each node's base plus its own stage's extra, so a stage's weight is the
        share of node time in it, not one rack-wide label. Only hinted labels count (node hints, the
        rack-wide hint): they come from the jobs, so they may drive a window's own prediction, where
        stages inferred from PDU power may not (report spec, causality). Node time no hint labels
        (and bins not seen here) keeps the rack's stage fractions ``frac``, what the forecast used
        before: a rack without hints is predicted as before.
        """
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
        """Completed bins (the engine's, time ordered): split each bin's measured energy over the
        cells its rows fell in; accumulators of bins that will never close (a gap) are dropped."""
        for i in range(len(start)):
            idx = round((float(start[i]) - t0) / self.bin_s)
            for stale in [b for b in self._open if b < idx]:
                del self._open[stale]
            acc = self._open.pop(idx, None)
            if acc:
                self._split(acc, sums[i], float(start[i]))

    def _split(self, acc: dict[tuple[int, tuple[str, str]], np.ndarray], row: np.ndarray, ts: float) -> None:
        """Split one bin over the nodes by the learned node power model (``node_power``), then
        within a node over its (job, stage) cells: the PSUs' loss on each cell's GPU energy, each
        stage's learned non-GPU extra, and the rest of the node's power (fans, which follow the
        heat over tens of seconds) by time: stages alternating within seconds share the fans."""
        entries = list(acc)
        v = np.array([acc[e] for e in entries])  # [GPU J, node-seconds] per (node, cell)
        node = np.array([n for n, _ in entries])
        it_ws, cool_ws = float(row[F["pdu_ws"]]), float(row[F["cool_ws"]])
        pdu_s, dur = float(row[F["pdu_s"]]), float(row[F["dur_s"]])
        m = self.power
        node_g = np.bincount(node, weights=v[:, 0])
        node_s = np.bincount(node, weights=v[:, 1])
        slot = [self.slots.slot(stage, ts) for _, (_, stage) in entries]
        stage_w = m.stage_w(np.array(slot, dtype=np.int64))
        node_w = m.node_weights(node_g, node_s) + np.bincount(node, weights=stage_w * v[:, 1],
                                                                      minlength=node_g.size)
        inner = IT_PER_GPU_W * v[:, 0] + stage_w * v[:, 1]
        on = node_s > 0
        rest = np.where(on, node_w - np.bincount(node, weights=inner, minlength=node_g.size), 0.0)
        rest /= np.where(on, node_s, 1.0)  # the node's unexplained W per second: shared by time
        weight = np.maximum(inner + rest[node] * v[:, 1], 0.0)
        total = float(weight.sum())
        frac = weight / total if total > 0 else v[:, 1] / max(float(v[:, 1].sum()), 1e-9)
        if dur > 0 and pdu_s >= MIN_KNOWN * dur:  # learn from bins whose IT power is known
            by_slot = np.bincount(slot, weights=v[:, 1] / dur, minlength=N_SLOTS)
            x = m.features(float(node_g.sum()) / dur, node_s / dur, by_slot, self.nodes.n)
            m.learn(x, it_ws / pdu_s, self.nodes.n)
        for j, (_, cell) in enumerate(entries):
            e = self._cell(cell)
            if pdu_s > 0:
                e[0] += frac[j] * it_ws / J_PER_KWH
            if float(row[F["cool_s"]]) > 0:
                e[1] += frac[j] * cool_ws / J_PER_KWH
            e[2] += v[j, 0] / J_PER_KWH

    def _cell(self, cell: tuple[str, str]) -> np.ndarray:
        e = self.cells.pop(cell, None)
        if e is None:
            e = np.zeros(3)
            if len(self.cells) >= MAX_CELLS:
                _, old = self.cells.popitem(last=False)
                self.evicted_kwh += float(old[0] + old[1])
        self.cells[cell] = e  # most recently credited last
        return e

    # ----------------------------------------------------------------------------- outputs, state
    @property
    def now(self) -> dict[str, dict[str, str]]:
        """Node → {"stage", "job"} at the last row seen (job "" where none was reported)."""
        ids = self.nodes.ids or ("rack",)
        return {node: {"stage": stage, "job": "" if job == NO_JOB else job}
                for node, (job, stage) in zip(ids, self._pend_keys, strict=False)}

    def table(self) -> dict[str, dict[str, dict[str, float]]]:
        """{job: {stage: {"it", "cooling", "facility", "gpu"}}} in kWh (job ``NO_JOB``: none reported)."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for (job, stage), e in sorted(self.cells.items()):
            out.setdefault(job, {})[stage] = {"it": float(e[0]), "cooling": float(e[1]),
                                              "facility": float(e[0] + e[1]), "gpu": float(e[2])}
        return out

    def state(self) -> dict[str, Any]:
        return {"cells": [[job, stage, *map(float, e)] for (job, stage), e in self.cells.items()],
                "evicted_kwh": self.evicted_kwh, "nodes": self.nodes.state(), "power": self.power.state()}

    def load(self, state: dict[str, Any]) -> None:
        """Restore totals and the per-node inferrers; a malformed entry raises ValueError."""
        self.cells.clear()
        for entry in list(state.get("cells", []))[-MAX_CELLS:]:
            job, stage, it, cool, gpu = entry
            values = np.array([float(it), float(cool), float(gpu)])
            if not np.all(np.isfinite(values)) or (values < 0).any():
                raise ValueError(f"job energy cell {job!r}/{stage!r}: not finite and ≥ 0")
            self.cells[(str(job), str(stage))] = values
        self.evicted_kwh = float(state.get("evicted_kwh", 0.0))
        if state.get("nodes"):
            self.nodes.load(state["nodes"])
        if state.get("power"):
            self.power.load(state["power"])


def _cell_codes(stage: np.ndarray, job: np.ndarray) -> tuple[list[tuple[str, str]], np.ndarray]:
    """The distinct (job, stage) cells of (rows × nodes) labels and each entry's cell index."""
    pairs = np.char.add(np.char.add(job.astype(str), "\x1f"), stage.astype(str))
    uniq, inv = np.unique(pairs, return_inverse=True)
    keys = []
    for u in uniq.tolist():
        j, _, st = u.partition("\x1f")
        keys.append((j or NO_JOB, st or "unknown"))
    return keys, inv.reshape(stage.shape).astype(np.int64)
