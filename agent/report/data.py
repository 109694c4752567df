"""Condense a replay report (and optionally its trace) into the small arrays the HTML page draws.

Everything streams (the report is read twice, the trace once), so a 30-day, 1 s trace never sits in
memory; series are reduced to ``buckets`` points, power envelopes keep each bucket's min and max.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agent.engine.hygiene import SENTINELS
from agent.payload import number, section
from agent.trace.model import CANONICAL_STAGES, J_PER_KWH, TraceChunk

NON_COMPUTE_STAGES = ("idle", "checkpoint", "data_load", "grad_sync")
# a report window's energies (``<name>_kwh``): the rack's facility energy and its IT and cooling parts
WINDOW_ENERGIES = (
    "measured", "predicted", "it_measured", "it_predicted", "cooling_measured", "cooling_predicted"
)


class ReportInputError(ValueError):
    """A report file that cannot be rendered, with the file and line."""


def iter_report(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each JSON line; a malformed line is an error naming it."""
    with path.open("r", encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ReportInputError(f"{path.name} line {line_no}: not JSON ({exc.msg})") from None
            if not isinstance(obj, dict) or "type" not in obj:
                raise ReportInputError(f"{path.name} line {line_no}: not a report object (no 'type')")
            yield line_no, obj


@dataclass
class TimeAxis:
    """Fixed buckets over [start, end]."""

    start: float
    end: float
    count: int

    @property
    def width_s(self) -> float:
        return max(self.end - self.start, 1.0) / self.count

    def index(self, ts: np.ndarray) -> np.ndarray:
        return np.clip(((ts - self.start) / self.width_s).astype(np.int64), 0, self.count - 1)

    def centers(self) -> np.ndarray:
        return self.start + (np.arange(self.count) + 0.5) * self.width_s


@dataclass
class ReportData:
    axis: TimeAxis
    stages: list[str]
    stage_time_s: np.ndarray  # (buckets, stages) seconds of each stage per bucket
    inferred_time_s: np.ndarray  # (buckets,) seconds labelled by inference
    windows: dict[str, list[float | None]]
    events: list[dict[str, Any]]
    baselines: dict[str, dict[str, list[float | None]]]  # stage → {"ts", "level_w", "low_w", "high_w"}
    last_summary: dict[str, Any] | None
    # detection → (why it was off, share of the run's summaries in which it was off)
    detections_off: dict[str, tuple[str, float]] = field(default_factory=dict)
    meta: dict[str, str] = field(default_factory=dict)
    trace: TraceSeries | None = None


@dataclass
class TraceSeries:
    """What only the trace can tell: the instantaneous facility power envelope and GPU energy."""

    facility_min_w: np.ndarray
    facility_max_w: np.ndarray
    facility_mean_w: np.ndarray
    energy_by_stage_kwh: dict[str, float]
    window_gpu_kwh: np.ndarray  # aligned with the report's windows
    static_pue_ratio: float | None  # facility / GPU energy over the first 24 h


def _time_range(path: Path) -> tuple[float, float, int]:
    start, end, summaries = math.inf, -math.inf, 0
    for _, obj in iter_report(path):
        kind = obj["type"]
        if kind in ("window", "segment"):
            start = min(start, float(obj["start"]))
            end = max(end, float(obj["end"]))
        elif kind == "summary":
            summaries += 1
        elif kind == "event":
            start, end = min(start, float(obj["ts"])), max(end, float(obj["ts"]))
    if not math.isfinite(start):
        raise ReportInputError(f"{path.name}: no window, segment or event lines to draw")
    return start, end, summaries


def _stage_levels(payload: dict[str, Any]) -> dict[str, tuple[float, float, float]]:
    """Per-stage (level, low, high) in W from a summary's ``stages``; no level: skipped, no band: flat."""
    found: dict[str, tuple[float, float, float]] = {}
    for name, entry in section(payload, "stages").items():
        level = number(entry.get("level_w")) if isinstance(entry, dict) else None
        if level is None:
            continue
        band = entry.get("band_w")
        if not (isinstance(band, list | tuple) and len(band) == 2):
            band = (level, level)
        found[str(name)] = (level, float(band[0]), float(band[1]))
    return found


def load_report(path: Path, buckets: int = 3000, max_baseline_points: int = 1500) -> ReportData:
    start, end, summary_count = _time_range(path)
    axis = TimeAxis(start, end, buckets)
    stages = list(CANONICAL_STAGES)
    stage_time = np.zeros((buckets, len(stages) + 8))
    inferred_time = np.zeros(buckets)
    keys = ("start", "end", *(f"{name}_kwh" for name in WINDOW_ENERGIES), "coverage")
    windows: dict[str, list[float | None]] = {key: [] for key in keys}
    events: list[dict[str, Any]] = []
    baselines: dict[str, dict[str, list[float | None]]] = {}
    summary_step = max(1, summary_count // max_baseline_points)
    last_summary: dict[str, Any] | None = None
    summary_index = 0
    meta: dict[str, str] = {}
    off_counts: dict[str, tuple[str, int]] = {}
    for _, obj in iter_report(path):
        kind = obj["type"]
        if kind == "segment":
            label = str(obj["stage"])
            if label not in stages:
                if len(stages) >= stage_time.shape[1] - 1:  # the last column is kept for "other"
                    label = "other"
                if label not in stages:
                    stages.append(label)
            _add_segment(axis, stage_time, inferred_time, float(obj["start"]), float(obj["end"]),
                         stages.index(label), obj.get("source") == "inferred")
        elif kind == "window":
            for key in windows:
                windows[key].append(number(obj.get(key)))
        elif kind == "event":
            events.append(obj)
        elif kind == "summary":
            payload = obj.get("payload") or {}
            last_summary = payload
            if not meta:
                meta = _site_rack(obj)
            _count_off(off_counts, payload)
            if summary_index % summary_step == 0:
                for name, (level, low, high) in _stage_levels(payload).items():
                    series = baselines.setdefault(name, {"ts": [], "level_w": [], "low_w": [], "high_w": []})
                    for key, value in zip(series, (float(obj["ts"]), level, low, high), strict=True):
                        series[key].append(value)
            summary_index += 1
    detections_off = {name: (why, n / max(summary_index, 1)) for name, (why, n) in off_counts.items()}
    return ReportData(
        axis, stages, stage_time[:, : len(stages)], inferred_time, windows, events, baselines, last_summary,
        detections_off, meta,
    )


def _site_rack(summary: dict[str, Any]) -> dict[str, str]:
    """Site and rack of a summary line: its payload's fields (summary.schema.json), else the
    topic's ``<root>/<site>/<rack>/summary`` (docs/mqtt.md)."""
    payload = section(summary, "payload")
    site, rack = payload.get("site"), payload.get("rack")
    if isinstance(site, str) and isinstance(rack, str) and site and rack:
        return {"site": site, "rack": rack}
    parts = str(summary.get("topic") or "").split("/")
    if len(parts) >= 3 and parts[-1] == "summary" and parts[-3] and parts[-2]:
        return {"site": parts[-3], "rack": parts[-2]}
    return {}


def _count_off(counts: dict[str, tuple[str, int]], payload: dict[str, Any]) -> None:
    """Tally the detections a summary says were off (``capabilities.detections``), first reason kept."""
    for name, state in section(section(payload, "capabilities"), "detections").items():
        if isinstance(state, str) and state.startswith("off"):
            why, n = counts.get(name, (state.removeprefix("off: "), 0))
            counts[name] = (why, n + 1)


def _add_segment(
    axis: TimeAxis, stage_time: np.ndarray, inferred_time: np.ndarray, start: float, end: float,
    stage_index: int, inferred: bool,
) -> None:
    """Spread one segment's duration over the buckets it covers."""
    if end <= start:
        return
    first = int(axis.index(np.array([start]))[0])
    last = int(axis.index(np.array([end - 1e-9]))[0])
    b_start = axis.start + np.arange(first, last + 1) * axis.width_s
    overlap = np.minimum(end, b_start + axis.width_s) - np.maximum(start, b_start)
    overlap = np.where(overlap > 0, overlap, 0.0)
    stage_time[first : last + 1, stage_index] += overlap
    if inferred:
        inferred_time[first : last + 1] += overlap


def dominant_stages(data: ReportData) -> list[int]:
    """Index of the stage holding most time in each bucket (-1 where nothing was covered)."""
    covered = data.stage_time_s.sum(axis=1) > 0
    dominant = np.argmax(data.stage_time_s, axis=1)
    return [int(d) if c else -1 for d, c in zip(dominant, covered, strict=True)]


def floats(values: list[float | None]) -> np.ndarray:
    """A report column as a float array, None → NaN."""
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def window_errors(windows: dict[str, list[float | None]]) -> np.ndarray:
    """Signed relative error (predicted − measured) / measured per predicted window, in %."""
    measured, predicted = floats(windows["measured_kwh"]), floats(windows["predicted_kwh"])
    with np.errstate(divide="ignore", invalid="ignore"):
        error = 100.0 * (predicted - measured) / measured
    finite: np.ndarray = error[np.isfinite(error)]
    return finite


def load_trace_series(trace_path: Path, data: ReportData) -> TraceSeries:
    """Facility power envelope, energy by stage and per-window GPU energy, from the trace."""
    from agent.engine.row_times import RowTimes
    from agent.trace.reader import open_trace  # the reader is only needed when a trace is given

    axis = data.axis
    fmin = np.full(axis.count, np.inf)
    fmax = np.full(axis.count, -np.inf)
    fsum = np.zeros(axis.count)
    fcount = np.zeros(axis.count)
    window_starts = np.array(data.windows["start"], dtype=float)
    window_gpu_kwh = np.zeros(len(window_starts))
    energy_by_stage: dict[str, float] = {}
    first_day_facility_j = first_day_gpu_j = 0.0
    holder = FacilityHold()
    reader = open_trace(trace_path, strict=False)
    if not data.meta:  # a report without summaries: the trace's metadata names the rack
        data.meta = {"site": reader.meta.site, "rack": reader.meta.rack}
    shares = dict(reader.meta.crac_shares)
    times, last_ts = RowTimes(), float("nan")  # the rows the engine used: same rule, same rows
    for raw in reader:
        chunk = times.admit(raw, last_ts)
        if not len(chunk):
            continue
        last_ts = float(chunk.ts[-1])
        facility_w = holder.facility_power(chunk, shares)
        gpu_w = _gpu_total(chunk)
        dt = np.diff(chunk.ts, append=chunk.ts[-1] + (holder.interval_s or 1.0))
        known = np.isfinite(facility_w)
        idx = axis.index(chunk.ts)
        np.minimum.at(fmin, idx[known], facility_w[known])
        np.maximum.at(fmax, idx[known], facility_w[known])
        np.add.at(fsum, idx[known], facility_w[known])
        np.add.at(fcount, idx[known], 1)
        energy_j = np.where(known, facility_w * dt, 0.0)
        for label in np.unique(chunk.stage):
            mask = chunk.stage == label
            key = str(label) or "unlabelled"
            energy_by_stage[key] = energy_by_stage.get(key, 0.0) + float(energy_j[mask].sum()) / J_PER_KWH
        if len(window_starts):
            widx = np.clip(
                np.searchsorted(window_starts, chunk.ts, side="right") - 1, 0, len(window_starts) - 1
            )
            gpu_known = np.isfinite(gpu_w)
            np.add.at(window_gpu_kwh, widx[gpu_known], (gpu_w * dt)[gpu_known] / J_PER_KWH)
        day = chunk.ts < axis.start + 86400
        both = day & known & np.isfinite(gpu_w)
        first_day_facility_j += float((facility_w * dt)[both].sum())
        first_day_gpu_j += float((gpu_w * dt)[both].sum())
    empty = fcount == 0
    fmin[empty] = fmax[empty] = np.nan
    with np.errstate(invalid="ignore", divide="ignore"):
        fmean = np.where(empty, np.nan, fsum / np.maximum(fcount, 1))
    ratio = first_day_facility_j / first_day_gpu_j if first_day_gpu_j > 0 else None
    return TraceSeries(fmin, fmax, fmean, energy_by_stage, window_gpu_kwh, ratio)


def _gpu_total(chunk: TraceChunk) -> np.ndarray:
    columns = list(chunk.columns_matching("gpu.", ".power_w").values())
    if not columns:
        return np.full(len(chunk), np.nan)
    stacked = np.vstack(columns)
    return np.where(np.isfinite(stacked).any(axis=0), np.nansum(stacked, axis=0), np.nan)


class FacilityHold:
    """Facility power per trace-format.md: Σ PDU + Σ share × CRAC, each held ≤ 3× its interval (the
    engine's is inside its frame assembly; the page wants every bucket's min and max)."""

    def __init__(self) -> None:
        self.last_value: dict[str, float] = {}
        self.last_ts: dict[str, float] = {}
        self.interval: dict[str, float] = {}
        self.interval_s: float | None = None

    def _held(self, name: str, ts: np.ndarray, values: np.ndarray) -> np.ndarray:
        # Device "no reading" codes and negative powers are not measurements (the engine's
        # hygiene rejects them too); real peaks are kept.
        values = np.where(np.isin(values, SENTINELS) | (values < 0), np.nan, values)
        sampled = np.isfinite(values)
        sample_ts = ts[sampled]
        if len(sample_ts) >= 2:
            self.interval[name] = float(np.median(np.diff(sample_ts)))
        elif name in self.last_ts and len(sample_ts) == 1:
            self.interval.setdefault(name, float(sample_ts[0] - self.last_ts[name]))
        # index of the last sample at or before each row (-1: before this chunk)
        positions = np.where(sampled, np.arange(len(ts)), -1)
        last_index = np.maximum.accumulate(positions)
        held = np.where(last_index >= 0, values[np.maximum(last_index, 0)], self.last_value.get(name, np.nan))
        held_ts = np.where(last_index >= 0, ts[np.maximum(last_index, 0)], self.last_ts.get(name, -np.inf))
        limit = 3.0 * self.interval.get(name, 1.0)
        held = np.where(ts - held_ts <= limit, held, np.nan)
        if sampled.any():
            self.last_value[name] = float(values[sampled][-1])
            self.last_ts[name] = float(sample_ts[-1])
        return held

    def facility_power(self, chunk: TraceChunk, shares: dict[str, float]) -> np.ndarray:
        if len(chunk.ts) >= 2:
            self.interval_s = float(np.median(np.diff(chunk.ts)))
        total = np.zeros(len(chunk))
        parts = 0
        for pdu_id, values in chunk.columns_matching("pdu.", ".power_w").items():
            total = total + self._held(f"pdu.{pdu_id}", chunk.ts, values)
            parts += 1
        for crac_id, values in chunk.columns_matching("crac.", ".power_w").items():
            total = total + shares.get(crac_id, 1.0) * self._held(f"crac.{crac_id}", chunk.ts, values)
            parts += 1
        return total if parts else np.full(len(chunk), np.nan)
