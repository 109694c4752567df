"""``Engine``: the stage-aware facility baseline — one code path for live ticks and replay chunks.

``process(chunk)`` takes rows (1 live tick or 65k replay rows) and returns report records
(``segment``, ``window``, ``event``, ``summary``; docs/spec/report-format.md). Pipeline:

  rows ──RowBinner──► bins (``bin_s`` ≈ 15 s) ──per window──► frozen-model predictions (IT, lagged
  heat, cooling for every lag candidate) ──► window buffer ──window close──► report line, then
  learning (IT and cooling least squares, lag selection, GPU-per-work model)
                       └─every drift bin (≈ 60 s)──► ComponentSample → DriftMonitor → events, held

Everything inside a window is predicted with the model as it was at the window's start and
from load-side inputs only (stages, work_rate, GPU power): PDU and CRAC samples inside a window
reach the model only after the window's line is written. See docs/engine.md.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from agent.config.model import EngineSection
from agent.engine import outputs
from agent.engine.baselines import BaselineLibrary
from agent.engine.components import ComponentSample
from agent.engine.frames import BinBatch, F, RackInfo
from agent.engine.job_rates import JobRates
from agent.engine.response import (
    COOL_RIDGE,
    EWLS,
    FAN_LAG_S,
    N_COOL,
    N_IT_BASE,
    TEMP_REF_C,
    LagBank,
    SingleLag,
    cooling_features,
    daily_phase,
    it_predict,
    it_ridge,
    stage_it_features,
    stage_it_ridge,
)
from agent.engine.rows import RowBinner, Stretch
from agent.engine.stage_attribution import stage_powers
from agent.engine.stage_slots import N_SLOTS, Segments, StageSlots, StageSource
from agent.engine.window_buffer import HELD, WindowBuffer
from agent.live.topics import Topics
from agent.trace.model import TraceChunk

_SAMPLE_FIELDS = frozenset(f.name for f in dataclasses.fields(ComponentSample))
TARGET_BIN_S = 15.0
DRIFT_BIN_S = 60.0
LOOKAHEAD_S = 30.0
WARMUP_H = 2.0  # hours of learned data (IT and cooling) before predictions are published
# GPU telemetry older than this is missing: the trace spec holds a signal for three of its own
# sampling intervals, and the slowest GPU source we read is a dcgm-exporter refreshing every 30 s.
# Bins past it are predicted by the stage-only IT model instead of a held GPU load.
GPU_FRESH_S = 90.0
SCORE_HALFLIFE_H = 12.0
RELEARN_HALFLIFE_H = 1.0
IT_MEMORY_FACTOR = 1.0
# GPU temperature as an IT regressor (fans follow temperatures): plumbed but off — on the twin it
# helped tide (P95 1.55 → 1.49 %) and hurt plateau (0.93 → 1.30 %); see docs/engine.md.
USE_GPU_TEMP = False
TRANSIENT_FRAC = 0.05  # lagged heat still > 5 % away from the heat → the facility is settling
BIAS_HALFLIFE_S = 300.0  # memory of the recent cooling residual level added to the next window's prediction
IT_BIAS_HALFLIFE_S = 3600.0  # the same for the IT side (slow disturbances there are rarer)
# A stretch of more than this many windows without a single row is a discontinuity (the agent or
# its clock stopped: a device outage leaves the other devices' rows flowing). At the default
# 900 s window that is an hour, by when the slowest cooling-lag candidate (1200 s) has forgotten
# all but exp(-3600 / 1200) = 5 % of the heat before it: nothing worth carrying across.
GAP_WINDOWS = 4


def _make_drift_monitor(config: EngineSection, bin_s: float) -> Any:
    try:
        from agent.engine.drift import DriftMonitor
    except ImportError:
        try:
            from agent.engine.drift.monitor import DriftMonitor
        except ImportError:
            return None
    return DriftMonitor(config, bin_s=bin_s)


class Engine:
    """Per-stage facility baseline with a lag-aware response model, in fixed memory."""

    def __init__(
        self,
        config: EngineSection | None = None,
        rack: RackInfo | None = None,
        *,
        site: str = "site",
        rack_name: str = "rack",
        topic_root: str = "rackwatt/v1",
    ) -> None:
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
        self.rows = RowBinner(
            self.rack, self.bin_s, N_SLOTS, LOOKAHEAD_S, self._classify, gap_s=GAP_WINDOWS * window_s
        )
        self.lag = LagBank(self.bin_s, N_SLOTS, self.bins_per_window)
        K = self.lag.K
        self.fan_lag = SingleLag(self.bin_s, FAN_LAG_S, self.bins_per_window)
        self.it = EWLS(1, N_IT_BASE + N_SLOTS, it_ridge(N_SLOTS))
        # IT from stages and work rate alone: predicts bins without fresh GPU telemetry (PDU-only
        # racks, GPU sources down) and the whole rack until the GPU model has warmed up.
        self.it_stage = EWLS(1, 2 * N_SLOTS, stage_it_ridge(N_SLOTS))
        self.gpu_seen_ts = -math.inf  # end of the last bin with a GPU sample
        self.job_rates = JobRates()
        self.cool = EWLS(K, N_COOL, COOL_RIDGE)
        self.gpu_model = EWLS(N_SLOTS, 2, np.array([1e-6, 1e-3]))
        self.score = np.zeros(K)
        self.bias_it = 0.0  # W: recent IT residual level (see learning._ew_bias)
        self.bias_cool = np.zeros(K)  # W: recent cooling residual level, per lag candidate
        self.last_res = np.full(K, np.nan)  # last bin's normalised cooling residual, per candidate
        self.scored = False
        self.best = int(np.argmin(np.abs(self.lag.tau_s - 240.0) + np.abs(self.lag.dead_s - 60.0)))
        self.baselines = BaselineLibrary(N_SLOTS, self.config.learning_rate)
        self.buf = WindowBuffer(self.bins_per_window, N_SLOTS, K)
        self.drift = _make_drift_monitor(self.config, self.bins_per_drift * self.bin_s)
        # scalars
        self.scale_w = math.nan  # GPU power normaliser, fixed at the first learned window
        self.g_lo_w = math.nan  # GPU power range the IT model has learned from
        self.g_hi_w = math.nan
        self.t_lo_c = math.nan  # GPU temperature range the IT model has learned from
        self.t_hi_c = math.nan
        self.last_temp_c = math.nan
        self.wr_scale = math.nan
        self.window_idx = -1
        self.warm = False
        self.window_warm = False
        self.seq = 0
        self.last_g = np.array([math.nan, math.nan, math.nan])
        self.energy_kwh = np.zeros((N_SLOTS, 3))  # per slot: it, cooling (attributed), gpu
        self.last_window: dict[str, Any] = {}
        self.last_sample: ComponentSample | None = None
        self.last_ts = math.nan
        self.rewarms = 0  # times the model was forgotten after a gap longer than max_state_age_h

    # ================================================================== public API
    def process(self, chunk: TraceChunk) -> list[dict[str, Any]]:
        """Consume rows; return the report records they completed (time ordered)."""
        return self._on_stretches(self.rows.push(chunk))

    def finish(self) -> list[dict[str, Any]]:
        """End of input: flush the look-ahead buffer, the partial bin and window, the last segment."""
        empty = TraceChunk(
            ts=np.zeros(0), numeric={}, stage=np.zeros(0, dtype=object), job=np.zeros(0, dtype=object)
        )
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
        return frozenset(self.drift.held) if self.drift is not None else frozenset()

    @property
    def gpu_telemetry_fresh(self) -> bool:
        """Was GPU telemetry known within ``GPU_FRESH_S`` of the last bin the engine saw?"""
        return math.isfinite(self.last_ts) and self.last_ts - self.gpu_seen_ts <= GPU_FRESH_S + self.bin_s

    @property
    def predicts_from_gpu(self) -> bool:
        """Are bins predicted from GPU power now (fresh telemetry and a warm GPU-driven IT model)?"""
        return self.gpu_telemetry_fresh and bool(self.it.weight[0] >= WARMUP_H)

    @property
    def learned_lag(self) -> tuple[float, float]:
        """(time constant, dead time) of the cooling response, seconds."""
        return float(self.lag.tau_s[self.best]), float(self.lag.dead_s[self.best])

    def summary_payload(self, ts: float, seq: int | None = None) -> dict[str, Any]:
        return outputs.summary_payload(self, ts, self.seq if seq is None else seq)

    def baseline_payloads(self, ts: float, seq: int | None = None) -> dict[str, dict[str, Any]]:
        return outputs.baseline_payloads(self, ts, self.seq if seq is None else seq)

    def summary_record(self, ts: float) -> dict[str, Any]:
        self.seq += 1
        return {
            "type": "summary",
            "ts": ts,
            "topic": Topics.for_rack(self.topic_root, self.site, self.rack_name).summary,
            "payload": self.summary_payload(ts),
        }

    def save_state(self) -> bytes:
        from agent.engine import persist

        return persist.save_engine(self)

    @classmethod
    def load_state(
        cls, blob: bytes, config: EngineSection | None = None, rack: RackInfo | None = None, **kwargs: Any
    ) -> Engine:
        from agent.engine import persist

        engine = cls(config, rack, **kwargs)
        persist.load_engine(engine, blob)
        return engine

    # ================================================================== rows → bins
    def _classify(self, chunk: TraceChunk) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        labels, inferred, hinted = self.stage_source.infer_stages(chunk)
        slots = self.slots.slots_of(labels, chunk.ts)
        for i in self.slots.evicted:
            self.baselines.reset_slot(i)
            self.energy_kwh[i] = 0.0
        self.slots.evicted.clear()
        return slots, inferred, hinted

    def _on_stretches(self, stretches: list[Stretch]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for part in stretches:
            out += self._after_rows(part.bins, part.rows)
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
        self.lag.started = False  # the lag filters restart from the heat after the gap
        self.fan_lag.y = math.nan
        self.last_g[:] = math.nan
        out.append({"type": "gap", "start": last_ts, "end": next_ts})
        max_age_h = self.config.max_state_age_h
        if max_age_h is not None and next_ts - last_ts > max_age_h * 3600.0:
            self._rewarm()
        return out

    def _rewarm(self) -> None:
        """Forget the learned model (response, baselines, drift): it may no longer describe the rack
        (parts swapped, another season). Kept: the row and stage bookkeeping, ``seq`` (subscribers
        deduplicate on it) and the energy totals."""
        kept = {"rows", "slots", "stage_source", "segments", "seq", "energy_kwh", "rewarms"}
        identity = ("config", "rack", "site", "rack_name", "topic_root")
        config, rack, site, rack_name, topic_root = (getattr(self, k) for k in identity)
        for name in [n for n in vars(self) if n not in kept]:
            delattr(self, name)  # the old model's arrays go before the new ones exist: no double peak
        fresh = Engine(config, rack, site=site, rack_name=rack_name, topic_root=topic_root)
        for name, value in vars(fresh).items():
            if name not in kept:
                setattr(self, name, value)
        self.rewarms += 1

    def _after_rows(self, bins: BinBatch, rows: Any) -> list[dict[str, Any]]:
        out = self.segments.feed(rows.ts, rows.slot, rows.inferred, self.slots)
        out += self._on_bins(bins)
        out.sort(key=_record_time)
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
                self.window_warm = self.warm
            out += self._advance(bins, int(a), int(b))
        return out

    # ================================================================== predictions (frozen model)
    def _advance(self, bins: BinBatch, a: int, b: int) -> list[dict[str, Any]]:
        sums, stage_s, start = bins.sums[a:b], bins.stage_s[a:b], bins.start[a:b]
        n = b - a
        dur = np.maximum(sums[:, F["dur_s"]], 1e-9)
        frac = stage_s / dur[:, None]
        g = self._gpu_moments(sums)
        scale = self.scale_w if math.isfinite(self.scale_w) else 1.0
        gl = self.fan_lag.run(g[:, 0])
        temp = self._gpu_temp(sums)
        it_gpu = it_predict(
            self.it.theta[0], g, gl, frac, scale, self.g_lo_w, self.g_hi_w, temp, (self.t_lo_c, self.t_hi_c)
        )
        Xs = stage_it_features(frac, self.job_rate_n(sums, bins.job[a:b]))
        it_stage = Xs @ self.it_stage.theta[0] * scale
        gpu_warm, stage_warm = self.it.weight[0] >= WARMUP_H, self.it_stage.weight[0] >= WARMUP_H
        use_gpu = gpu_warm & (self._gpu_fresh(sums, start) | ~stage_warm)
        it_pred = np.where(use_gpu, it_gpu, it_stage)
        if self.window_warm:
            heat = it_pred
        else:  # warm-up: heat from the PDU itself (no prediction is published yet)
            pdu_mean = np.where(
                sums[:, F["pdu_s"]] > 0, sums[:, F["pdu_ws"]] / np.maximum(sums[:, F["pdu_s"]], 1e-9), np.nan
            )
            heat = np.where(np.isfinite(pdu_mean), pdu_mean, np.nan_to_num(g[:, 0]))
        hl, hl_s = self.lag.run(heat, heat[:, None] * frac, self.best)
        cos_t, sin_t = daily_phase(start + 0.5 * self.bin_s)
        Xc = cooling_features(hl / scale, cos_t, sin_t)
        cool_pred = np.einsum("kni,ki->kn", Xc, self.cool.theta) * scale
        gpu_exp = self._gpu_expected(sums, frac)
        k = self.best
        with np.errstate(invalid="ignore", divide="ignore"):
            transient = np.abs(hl[k] - heat) > TRANSIENT_FRAC * np.maximum(np.abs(heat), 1.0)
        held = np.array([[c in self.held for c in HELD]] * n, dtype=bool).reshape(n, len(HELD))
        j0 = self.buf.n
        self.buf.append(
            start,
            sums,
            stage_s,
            bins.job[a:b],
            it_pred,
            heat,
            hl,
            cool_pred,
            gpu_exp,
            transient,
            held,
            gl,
            temp,
            bins.stage_gpu_s[a:b],
            bins.stage_gpu_ws[a:b],
        )
        self._attribute_energy(sums, frac, hl_s, cos_t, sin_t, scale)
        out: list[dict[str, Any]] = []
        g_per = self.bins_per_drift
        for j in range(j0, self.buf.n):
            if (j + 1) % g_per == 0 or j + 1 == self.buf.n_bins:
                out += self._drift_bin(slice((j // g_per) * g_per, j + 1))
        return out

    def _gpu_moments(self, sums: np.ndarray) -> np.ndarray:
        known = sums[:, F["gpu_s"]]
        with np.errstate(invalid="ignore", divide="ignore"):
            g = (
                np.stack([sums[:, F["gpu_ws"]], sums[:, F["gpu2_ws"]], sums[:, F["gpu3_ws"]]], axis=1)
                / known[:, None]
            )
        ok = known > 0
        if not ok.all():  # no GPU sample in a bin: hold the last known load
            last = self.last_g
            for i in range(g.shape[0]):
                if ok[i]:
                    last = g[i]
                else:
                    g[i] = last
        if ok.any():
            self.last_g = g[np.flatnonzero(ok)[-1]].copy()
        return np.nan_to_num(g)

    def _gpu_fresh(self, sums: np.ndarray, start: np.ndarray) -> np.ndarray:
        """Per bin: was GPU telemetry known within ``GPU_FRESH_S`` (in the bin or just before)?"""
        end = start + self.bin_s
        seen_end = np.where(sums[:, F["gpu_s"]] > 0, end, -np.inf)
        last = np.maximum.accumulate(np.concatenate(([self.gpu_seen_ts], seen_end)))[1:]
        if last.size:
            self.gpu_seen_ts = float(last[-1])
        return np.asarray(end - last <= GPU_FRESH_S + self.bin_s)

    @staticmethod
    def _bin_work_rate(sums: np.ndarray) -> np.ndarray:
        """Each bin's mean reported work rate (nan where none was reported)."""
        known = sums[:, F["wr_s"]] > 0
        return np.where(known, sums[:, F["wr_ws"]] / np.maximum(sums[:, F["wr_s"]], 1e-9), np.nan)

    def job_rate_n(self, sums: np.ndarray, jobs: list[str]) -> np.ndarray:
        """The bins' work rate relative to their own job's peak (0 where none was reported)."""
        return self.job_rates.normalised(list(jobs), self._bin_work_rate(sums))

    def _work_rate_n(self, sums: np.ndarray) -> np.ndarray:
        """The bin's mean work rate over the rack-wide scale (0 where none was reported)."""
        wr = np.nan_to_num(self._bin_work_rate(sums))
        return wr / self.wr_scale if math.isfinite(self.wr_scale) else np.zeros_like(wr)

    def _gpu_temp(self, sums: np.ndarray) -> np.ndarray:
        """Mean GPU temperature per bin (°C), the last known value held through bins without one."""
        known = sums[:, F["gtemp_s"]]
        with np.errstate(invalid="ignore", divide="ignore"):
            t = np.where(known > 0, sums[:, F["gtemp_ws"]] / known, np.nan)
        if np.isnan(t).any():
            idx = np.where(~np.isnan(t), np.arange(t.size), -1)
            np.maximum.accumulate(idx, out=idx)
            t = np.where(idx >= 0, t[np.maximum(idx, 0)], self.last_temp_c)
        if t.size and np.isfinite(t[-1]):
            self.last_temp_c = float(t[-1])
        if not USE_GPU_TEMP:
            return np.full(t.shape, TEMP_REF_C)
        return np.nan_to_num(t, nan=TEMP_REF_C)

    def _gpu_expected(self, sums: np.ndarray, frac: np.ndarray) -> np.ndarray:
        """Per-stage GPU power the baseline expects for the work rate (load-side only)."""
        wr_known = sums[:, F["wr_s"]] > 0
        wr_n = self._work_rate_n(sums)
        theta = self.gpu_model.theta  # (S, 2)
        per_slot = theta[None, :, 0] + theta[None, :, 1] * wr_n[:, None]  # (n, S)
        fitted = self.gpu_model.weight[None, :] > 0.05
        level = self.baselines.stats[:, 5][None, :]
        expect = np.where(fitted & wr_known[:, None], per_slot * max(self.scale_w, 1.0), level)
        return (frac * expect).sum(axis=1)

    def _attribute_energy(
        self,
        sums: np.ndarray,
        frac: np.ndarray,
        hl_s: np.ndarray,
        cos_t: np.ndarray,
        sin_t: np.ndarray,
        scale: float,
    ) -> None:
        th = self.cool.theta[self.best]
        a_t = th[0] + th[2] * cos_t + th[3] * sin_t
        b_t = th[1] + th[4] * cos_t + th[5] * sin_t
        contrib = np.maximum(a_t[:, None] * frac + b_t[:, None] * hl_s / scale, 0.0)
        tot = contrib.sum(axis=1, keepdims=True)
        share = np.where(tot > 0, contrib / np.maximum(tot, 1e-12), frac)
        self.energy_kwh[:, 0] += (frac * sums[:, F["pdu_ws"], None]).sum(axis=0) / 3.6e6
        self.energy_kwh[:, 1] += (share * sums[:, F["cool_ws"], None]).sum(axis=0) / 3.6e6
        self.energy_kwh[:, 2] += (frac * sums[:, F["gpu_ws"], None]).sum(axis=0) / 3.6e6

    # ================================================================== drift bins
    def _drift_bin(self, sl: slice) -> list[dict[str, Any]]:
        wb = self.buf
        tot = wb.sums[sl].sum(axis=0)
        dur = float(tot[F["dur_s"]])
        if dur <= 0:
            return []

        def mean(ws: str, s: str, min_frac: float = 0.5) -> float:
            known = float(tot[F[s]])
            return float(tot[F[ws]]) / known if known >= min_frac * dur and known > 0 else math.nan

        stage_tot = wb.stage_s[sl].sum(axis=0)
        slot = int(np.argmax(stage_tot))
        d = wb.sums[sl, F["dur_s"]]
        sample = ComponentSample(
            ts=float(wb.start[sl.stop - 1] + self.bin_s),
            duration_s=dur,
            stage=self.slots.name(slot),
            stage_source="hint" if float(tot[F["hint_s"]]) >= 0.5 * dur else "inferred",
            job=wb.jobs[sl.stop - 1],
            transient=bool(wb.transient[sl].any()),
            gpu_w=mean("gpu_ws", "gpu_s"),
            work_rate=mean("wr_ws", "wr_s"),
            gpu_expected_w=float(wb.gpu_exp_w[sl] @ d / dur),
            it_measured_w=mean("pdu_ws", "pdu_s"),
            it_expected_w=float(wb.it_pred_w[sl] @ d / dur),
            cooling_measured_w=mean("cool_ws", "cool_s"),
            cooling_expected_w=float(wb.cool_pred_w[sl, self.best] @ d / dur),
            inlet_mean_c=mean("inlet_ws", "inlet_s"),
            inlet_spread_c=mean("spread_ws", "spread_s"),
            fan_pct=mean("fan_ws", "fan_s"),
            setpoint_c=mean("setp_ws", "setp_s"),
            gpu_counter_resets=self.rows.take_gpu_resets(float(wb.start[sl.stop - 1] + self.bin_s)),
            **self._extra_sample_fields(mean),
        )
        self.last_sample = sample
        self.last_ts = sample.ts
        events: list[dict[str, Any]] = []
        if self.drift is not None and self.window_warm:
            events = list(self.drift.observe(sample))
        if not self.held:  # every stage with ≥ 10 % of the bin: its share of the power (stage_attribution)
            for sp in stage_powers(self, sl):
                bl = (sp.facility_w, sp.gpu_w, sp.it_w, sp.cooling_w)
                self.baselines.update(sp.slot, sample.job, sample.ts, *bl)
        return events

    @staticmethod
    def _extra_sample_fields(mean: Any) -> dict[str, float]:
        """Fields ComponentSample gained after its first version (filled only if this build has them)."""
        extra = {"cooling_load_w": ("cload_ws", "cload_s"), "outdoor_c": ("outdoor_ws", "outdoor_s")}
        return {k: mean(*v) for k, v in extra.items() if k in _SAMPLE_FIELDS}

    # ================================================================== window close: report, then learn
    def _close_window(self) -> list[dict[str, Any]]:
        from agent.engine.learning import learn_window, window_record

        rec = window_record(self)
        learn_window(self)
        self.buf.clear()
        self.last_window = rec
        return [rec, self.summary_record(rec["end"])]


def _record_time(rec: dict[str, Any]) -> float:
    if rec["type"] in ("window", "segment"):
        return float(rec["end"])
    return float(rec.get("ts", 0.0))
