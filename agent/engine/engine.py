"""``Engine``: the stage-aware facility baseline — one code path for live ticks and replay chunks.

``process(chunk)`` takes rows (one live tick or 65k replay rows) and returns the report records
they completed (docs/spec/report-format.md). Rows become bins (``RowBinner``); each window's bins
are predicted by the model as it was at the window's start, from load-side inputs only, and its
PDU and CRAC samples reach the model only after the window's line is written; every drift bin
(≈ 60 s) goes to the ``DriftMonitor``. Pipeline: docs/engine.md.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agent.config.model import EngineSection
from agent.engine import outputs, persist
from agent.engine.baselines import BaselineLibrary
from agent.engine.components import LEARNED, ComponentSample
from agent.engine.drift import DriftMonitor
from agent.engine.energy_ledger import EnergyLedger
from agent.engine.frames import BinBatch, RackInfo
from agent.engine.job_energy import JobEnergy
from agent.engine.model import ResponseModel
from agent.engine.node_stages import NodeHints
from agent.engine.rows import RowBinner, Stretch
from agent.engine.signals import SAMPLE_MEANS, F
from agent.engine.stage_attribution import stage_own_means, stage_powers
from agent.engine.stage_slots import N_SLOTS, Segments, StageSlots, StageSource
from agent.engine.window_buffer import WindowBuffer
from agent.live.topics import Topics
from agent.trace.model import J_PER_KWH, TraceChunk

TARGET_BIN_S = 15.0
DRIFT_BIN_S = 60.0
LOOKAHEAD_S = 30.0
# More than this many windows without a single row is a discontinuity (the agent or its clock
# stopped; a device outage leaves other rows flowing): an hour at 900 s, by when the slowest lag
# candidate (1200 s) keeps exp(-3600 / 1200) = 5 % of the heat before it: nothing worth carrying.
GAP_WINDOWS = 4


class Engine:
    """Per-stage facility baseline with a lag-aware response model, in fixed memory."""

    def __init__(self, config: EngineSection | None = None, rack: RackInfo | None = None, *,
                 site: str = "site", rack_name: str = "rack", topic_root: str = "rackwatt/v1") -> None:
        self.config = config or EngineSection()
        self.rack = rack or RackInfo()
        self.site, self.rack_name, self.topic_root = site, rack_name, topic_root
        window_s = float(self.config.window_s)
        if not window_s > 0:
            raise ValueError(f"engine.window_s must be > 0, got {window_s}")
        self.window_s = window_s
        self.bins_per_window = max(1, round(window_s / TARGET_BIN_S))
        self.bin_s = window_s / self.bins_per_window
        self.bins_per_drift = max(1, round(DRIFT_BIN_S / self.bin_s))
        self.slots = StageSlots()
        self.stage_source = StageSource()
        self.segments = Segments()
        self.rows = RowBinner(self.rack, self.bin_s, N_SLOTS, LOOKAHEAD_S, self._classify,
                              gap_s=GAP_WINDOWS * window_s, window_s=window_s)
        self.seq = 0
        self.energy_kwh = np.zeros((N_SLOTS, 3))  # per slot: it, cooling (attributed), gpu
        self.ledger = EnergyLedger(self.bin_s)  # the same energy per bin, for windows (energy_ledger.py)
        # node_hints: each node's own stage hints (live: NodeTimelines.labels_at; None: rack-wide only)
        self.job_energy = JobEnergy(self.rack, self.bin_s, self.slots, gap_s=GAP_WINDOWS * window_s,
                                     window_s=window_s)
        self.node_hints: NodeHints | None = None
        self.rewarms = 0  # times the model was forgotten after a gap longer than max_state_age_h
        self._start_learning()

    def _start_learning(self) -> None:
        """What is learned (model, baselines, drift) and the window being filled, from scratch; the
        old arrays go before the new ones exist, so a re-warm has no double memory peak."""
        for name in ("model", "baselines", "buf", "drift"):
            self.__dict__.pop(name, None)
        halflife_h = float(self.config.forgetting_halflife_h)
        self.model = ResponseModel(self.window_s, self.bins_per_window, N_SLOTS, halflife_h)
        self.baselines = BaselineLibrary(N_SLOTS, self.config.learning_rate)
        self.buf = WindowBuffer(self.bins_per_window, N_SLOTS, self.model.lag.K)
        self.drift = DriftMonitor(self.config, bin_s=self.bins_per_drift * self.bin_s)
        self.window_idx = -1
        self.window_warm = False  # the model was warm when the open window started
        self.last_window: dict[str, Any] = {}
        self.last_sample: ComponentSample | None = None
        self.last_ts = math.nan

    def process(self, chunk: TraceChunk) -> list[dict[str, Any]]:
        """Consume rows; return the report records they completed (time ordered)."""
        return self._on_stretches(self.rows.push(chunk))

    def finish(self) -> list[dict[str, Any]]:
        """End of input: flush the look-ahead buffer, the partial bin and window, the last segment."""
        none = np.zeros(0, dtype=object)
        empty = TraceChunk(ts=np.zeros(0), numeric={}, stage=none, job=none)
        out = self._on_stretches(self.rows.push(empty, flush=True))
        out += self._on_bins(self.rows.close_open_bin())
        if self.buf.n:
            out += self._close_window()
        end = self.rows.pending_ts
        out += self.segments.close(end, self.slots)
        if math.isfinite(end):
            out.append(self.summary_record(end))
        return out

    @property
    def held(self) -> frozenset[str]:
        return frozenset(self.drift.held)

    @property
    def warm(self) -> bool:
        """Has the model learned enough (``model.WARMUP_H``) for its predictions to be published?"""
        return self.model.warm

    @property
    def learned_lag(self) -> tuple[float, float]:
        """(time constant, dead time) of the cooling response, seconds."""
        return self.model.learned_lag

    def capabilities(self) -> dict[str, Any]:
        """What the rack's data lets the engine do now (``outputs.capabilities``)."""
        fresh = self.model.gpu_fresh_at(self.last_ts)  # GPU telemetry within GPU_FRESH_S of the last bin
        return outputs.capabilities(self.last_sample, fresh, self.warm, fresh and self.model.gpu_warm)

    def view(self) -> outputs.EngineView:
        """The engine's parts the payloads are made of, at this instant."""
        r = self.rows
        times = r.times
        hygiene = outputs.hygiene_counts(r.signals.hygiene, self.stage_source.malformed_hints,
                                         times.out_of_order_rows, times.bad_ts_rows, r.gaps)
        return outputs.EngineView(self.site, self.rack_name, self.warm, self.last_sample, self.slots.name,
                                  self.baselines, self.energy_kwh, self.learned_lag, self.model.scored,
                                  self.held, hygiene, self.capabilities(), self.last_window,
                                  self.job_energy)

    def summary_payload(self, ts: float, seq: int | None = None) -> dict[str, Any]:
        return outputs.summary_payload(self.view(), ts, self.seq if seq is None else seq)

    def baseline_payloads(self, ts: float, seq: int | None = None) -> dict[str, dict[str, Any]]:
        return outputs.baseline_payloads(self.view(), ts, self.seq if seq is None else seq)

    def summary_record(self, ts: float) -> dict[str, Any]:
        self.seq += 1
        topic = Topics.for_rack(self.topic_root, self.site, self.rack_name).summary
        return {"type": "summary", "ts": ts, "topic": topic, "payload": self.summary_payload(ts)}

    def save_state(self) -> bytes:
        return persist.save_engine(self._parts(), self._own())

    @classmethod
    def load_state(cls, blob: bytes, config: EngineSection | None = None, rack: RackInfo | None = None,
                   **kwargs: Any) -> Engine:
        engine = cls(config, rack, **kwargs)
        own = persist.load_engine(engine._parts(), blob, engine._own())
        engine.window_idx, engine.window_warm, engine.seq = own.window_idx, own.window_warm, own.seq
        engine.last_ts, engine.energy_kwh, engine.last_window = own.last_ts, own.energy_kwh, own.last_window
        engine.rewarms = own.rewarms
        return engine

    def _parts(self) -> persist.EngineParts:
        return persist.EngineParts(self.rows, self.model, self.slots, self.segments, self.baselines, self.buf,
                                   self.stage_source, self.drift, self.job_energy)

    def _own(self) -> persist.EngineOwn:
        return persist.EngineOwn(self.window_s, self.bin_s, self.window_idx, self.window_warm, self.seq,
                                 self.last_ts, self.energy_kwh, self.last_window, self.rewarms)

    def _classify(self, chunk: TraceChunk) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        labels, inferred, hinted = self.stage_source.infer_stages(chunk)
        rack_hints = np.where(hinted, labels, "").astype(object)  # a hinted row's label is its hint
        self.job_energy.observe(chunk, self.rows.t0, rack_hints, labels, self.node_hints)
        slots = self.slots.slots_of(labels, chunk.ts)
        for i in self.slots.evicted:
            self.baselines.reset_slot(i)
            self.energy_kwh[i] = 0.0
            self.job_energy.power.reset_slot(i)
        self.slots.evicted.clear()
        return slots, inferred, hinted

    def _on_stretches(self, stretches: list[Stretch]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for part in stretches:
            recs = self.segments.feed(part.rows.ts, part.rows.slot, part.rows.inferred, self.slots)
            out += sorted(recs + self._on_bins(part.bins), key=_record_time)
            if part.gap is not None:
                out += self._on_bins(part.closed) if part.closed is not None else []
                out += self._on_gap(*part.gap)
        return out

    def _on_gap(self, last_ts: float, next_ts: float) -> list[dict[str, Any]]:
        """A discontinuity: close what is open, mark the gap, start the timeline again after it
        (and re-warm when what was learned is older than ``max_state_age_h``)."""
        out = self._close_window() if self.buf.n else []
        self.window_idx = -1
        out += self.segments.close(last_ts, self.slots)
        self.model.restart_inputs()  # the lag filters restart from the heat after the gap
        out.append({"type": "gap", "start": last_ts, "end": next_ts})
        max_age_h = self.config.max_state_age_h
        if max_age_h is not None and next_ts - last_ts > max_age_h * 3600.0:
            # re-warm: what was learned may no longer describe the rack (parts swapped, another
            # season); the row and stage bookkeeping, ``seq`` and the energy totals are kept
            self._start_learning()
            self.rewarms += 1
        return out

    def _on_bins(self, bins: BinBatch) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if not len(bins):
            return out
        t0 = self.rows.t0
        widx = np.floor((bins.start - t0) / self.window_s + 1e-9).astype(np.int64)
        cuts = np.flatnonzero(np.diff(widx)) + 1
        for a, b in zip(np.concatenate(([0], cuts)), np.concatenate((cuts, [len(bins)])), strict=True):
            w = int(widx[a])
            if w != self.window_idx:
                if self.buf.n:
                    out += self._close_window()
                self.window_idx = w
                self.window_warm = self.model.warm
            out += self._advance(bins, int(a), int(b))
        return out

    def _advance(self, bins: BinBatch, a: int, b: int) -> list[dict[str, Any]]:
        sums, stage_s, start, jobs = bins.sums[a:b], bins.stage_s[a:b], bins.start[a:b], bins.job[a:b]
        n = b - a
        dur = np.maximum(sums[:, F["dur_s"]], 1e-9)
        frac = stage_s / dur[:, None]
        node_frac = self.job_energy.hinted_node_frac(start, dur, frac, self.rows.t0)
        p = self.model.predict(sums, frac, start, jobs, self.window_warm, self.baselines.stats[:, 5],
                               node_frac)
        held = np.tile([c in self.held for c in LEARNED], (n, 1))
        j0 = self.buf.n
        self.buf.append(bins, a, b, p, held, node_frac)
        share = self.model.cooling_shares(frac, p.hl_stage_w, start)
        self.energy_kwh[:, 0] += (frac * sums[:, F["pdu_ws"], None]).sum(axis=0) / J_PER_KWH
        self.energy_kwh[:, 1] += (share * sums[:, F["cool_ws"], None]).sum(axis=0) / J_PER_KWH
        self.energy_kwh[:, 2] += (frac * sums[:, F["gpu_ws"], None]).sum(axis=0) / J_PER_KWH
        self.ledger.add(start, sums, jobs)
        self.job_energy.account(start, sums, self.rows.t0)
        out: list[dict[str, Any]] = []
        g_per = self.bins_per_drift
        for j in range(j0, self.buf.n):
            if (j + 1) % g_per == 0 or j + 1 == self.buf.n_bins:
                out += self._drift_bin(slice((j // g_per) * g_per, j + 1))
        return out

    def _drift_bin(self, sl: slice) -> list[dict[str, Any]]:
        wb = self.buf
        tot = wb.sums[sl].sum(axis=0)
        dur = float(tot[F["dur_s"]])
        if dur <= 0:
            return []

        def mean(q: str) -> float:  # known for at least half the bin, else unknown
            known = float(tot[F[f"{q}_s"]])
            return float(tot[F[f"{q}_ws"]]) / known if known >= 0.5 * dur and known > 0 else math.nan

        d = wb.sums[sl, F["dur_s"]]
        end = float(wb.start[sl.stop - 1] + self.bin_s)
        # the IT expectation the detectors judge: the model and the running job's own level
        it_exp = wb.it_pred_w[sl] + self.model.job_level_w(wb, sl, self.drift.work_change)
        stage_s = wb.stage_s[sl].sum(axis=0)
        main = int(np.argmax(stage_s))
        means = {field: mean(q) for field, q in SAMPLE_MEANS.items()}
        # the main stage's own GPU power and memory utilisation, as factors of the bin's means
        own = stage_own_means(np.array([wb.stage_gpu_s[sl, main].sum(), wb.stage_mem_s[sl, main].sum()]),
                              np.array([wb.stage_gpu_ws[sl, main].sum(), wb.stage_mem_ws[sl, main].sum()]),
                              np.full(2, stage_s[main]))
        bin_means = np.array([means["gpu_w"], means["gpu_mem_util_pct"]])
        with np.errstate(invalid="ignore", divide="ignore"):
            factors = np.where(bin_means > 0, own / bin_means, np.nan)
        sample = ComponentSample(
            ts=end,
            duration_s=dur,
            stage=self.slots.name(main),
            stage_share=float(stage_s[main]) / dur,
            stage_gpu_factor=float(factors[0]),
            stage_mem_factor=float(factors[1]),
            stage_source="hint" if float(tot[F["hint_s"]]) >= 0.5 * dur else "inferred",
            job=wb.jobs[sl.stop - 1],
            transient=bool(wb.transient[sl].any()),
            gpu_expected_w=float(wb.gpu_exp_w[sl] @ d / dur),
            it_expected_w=float(it_exp @ d / dur),
            cooling_expected_w=float(wb.cool_pred_w[sl, self.model.best] @ d / dur),
            gpu_counter_resets=self.rows.take_gpu_resets(end),
            **means,
        )
        self.last_sample = sample
        self.last_ts = sample.ts
        events: list[dict[str, Any]] = list(self.drift.observe(sample)) if self.window_warm else []
        self.model.shadow.note_events(events, self.held)  # a fault onset confirms a held suspicion
        if not self.held:  # every stage with ≥ 10 % of the bin: its share of the power (stage_attribution)
            for sp in stage_powers(wb, sl, self.model if self.window_warm else None):
                bl = (sp.facility_w, sp.gpu_w, sp.it_w, sp.cooling_w)
                self.baselines.update(sp.slot, sample.job, sample.ts, *bl)
        return events

    def _close_window(self) -> list[dict[str, Any]]:
        """The window's line from the frozen predictions, then learning (in that order: prequential)."""
        m = self.model
        start = self.rows.t0 + self.window_idx * self.window_s
        warm = self.window_warm
        # the IT side's recent residual level and, per bin, the running job's own level (model.JobLevel)
        it_level = m.bias_it + m.job_level_w(self.buf, slice(0, self.buf.n), self.drift.work_change)
        predicted = (self.buf.cool_pred_w[:, m.best], it_level, float(m.bias_cool[m.best])) if warm else None
        rec = self.buf.record(start, self.slots.name, self.held, predicted)
        m.learn(self.buf, self.window_warm, self.drift.relearn, self.drift.relearn_halflife_h,
                self.drift.work_change, self.drift.faulted)
        self.buf.clear()
        self.last_window = rec
        return [rec, self.summary_record(rec["end"])]


def _record_time(rec: dict[str, Any]) -> float:
    if rec["type"] in ("window", "segment"):
        return float(rec["end"])
    return float(rec.get("ts", 0.0))
