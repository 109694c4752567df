"""Turn ``ReportData`` into one self-contained HTML page that makes no network request: uPlot (MIT,
vendored in ``vendor/``), its CSS, the data and the script are all inlined."""

from __future__ import annotations

import html
import json
import math
from importlib import resources
from typing import Any

import numpy as np

from agent import __version__
from agent.payload import number, section, total
from agent.report.data import (
    NON_COMPUTE_STAGES,
    WINDOW_ENERGIES,
    ReportData,
    dominant_stages,
    floats,
    window_errors,
)
from agent.report.playbook import playbook_sections
from agent.trace.model import J_PER_KWH

STAGE_COLOURS = {
    "idle": "#9e9e9e", "data_load": "#f2b134", "forward_backward": "#2e7d32", "grad_sync": "#1e88e5",
    "checkpoint": "#8e24aa", "eval": "#00acc1",
}
EXTRA_COLOURS = ["#e64a19", "#6d4c41", "#5c6bc0", "#c0ca33", "#d81b60", "#00897b", "#546e7a", "#fb8c00"]


# Robust power axis. A glitch (one wrong sample, a device's bad reading) fills one time bucket of
# ~3000; a real change (a stage, a fault step) lasts far longer than 0.5 % of the run (15 min of
# 2 days). Scaling on the 0.5th-99.5th percentiles of the plotted buckets therefore ignores up to
# 15 glitch buckets while keeping every lasting level in view; what lies beyond is clipped and
# marked. The margin keeps the extreme kept values off the frame.
AXIS_PERCENTILES = (0.5, 99.5)
AXIS_MARGIN = 0.08  # of the kept span, each side

NON_COMPUTE_DEFINITION = (
    "Non-compute energy: the share of the facility energy (PDU power plus the rack's share of "
    "cooling power) spent while the rack was in a stage that does no training computation: "
    + ", ".join(NON_COMPUTE_STAGES)
    + "."
)


def page_title(data: ReportData, fallback: str) -> str:
    """``site / rack`` from the summaries or the trace metadata; the file name only if neither says."""
    site, rack = data.meta.get("site"), data.meta.get("rack")
    return f"rackwatt report: {site} / {rack}" if site and rack else f"rackwatt report: {fallback}"


def robust_range(
    series: list[np.ndarray], x: list[np.ndarray], floor: float | None = 0.0, min_margin: float = 1.0,
    percentiles: tuple[float, float] = AXIS_PERCENTILES,
) -> dict[str, Any] | None:
    """The axis from robust percentiles of every plotted value (``series[i]`` drawn at ``x[i]``), and the
    times and extremes of the values beyond it, for the page to mark as clipped. The axis does not go
    below ``floor`` unless the data does; ``min_margin`` is in the data's unit (1 W; 0.5 % for a
    deviation, so a flat line is not drawn on the frame)."""
    finite = [v[np.isfinite(v)] for v in series]
    values = np.concatenate(finite) if finite else np.array([])
    if values.size == 0:
        return None
    low, high = (float(v) for v in np.percentile(values, percentiles))
    margin = max(AXIS_MARGIN * (high - low), 0.01 * abs(high), min_margin)
    axis_min, axis_max = low - margin, high + margin
    if floor is not None and low >= floor:
        axis_min = max(floor, axis_min)
    above: set[float] = set()
    below: set[float] = set()
    for values_i, x_i in zip(series, x, strict=True):
        with np.errstate(invalid="ignore"):
            above.update(float(t) for t in x_i[values_i > axis_max])
            below.update(float(t) for t in x_i[values_i < axis_min])
    return {"min": axis_min, "max": axis_max, "clipped_above": sorted(above), "clipped_below": sorted(below),
            "peak": float(values.max()), "trough": float(values.min())}


def drift_periods(events: list[dict[str, Any]], end: float) -> list[dict[str, Any]]:
    """Each onset as a period: from its estimated start (``detail.since``, where the evidence
    began; the onset's time is only when it was confirmed) to its ``cleared`` event, or to the
    end of the report while still active."""
    periods: list[dict[str, Any]] = []
    open_by_cause: dict[str, dict[str, Any]] = {}
    for event in sorted(events, key=lambda e: float(e.get("ts") or 0.0)):
        ts, cause = number(event.get("ts")), str(event.get("cause"))
        if ts is None:
            continue
        if event.get("state") == "onset":
            since = number(section(event, "detail").get("since"))
            start = since if since is not None and since <= ts else ts
            period = {"cause": cause, "stage": event.get("stage"), "start": start, "confirmed": ts,
                      "end": end, "active": True, "deviation_pct": event.get("deviation_pct")}
            periods.append(period)
            open_by_cause[cause] = period
        elif event.get("state") == "cleared" and cause in open_by_cause:
            period = open_by_cause.pop(cause)
            period["end"], period["active"] = max(ts, period["start"]), False
    return periods


def _resource(*parts: str) -> str:
    """A file shipped in the ``agent.report`` package (the page's script, style and vendored uPlot)."""
    return resources.files("agent.report").joinpath(*parts).read_text(encoding="utf-8")


def _clean(values: Any) -> Any:
    """JSON-safe: NaN/inf → null, numpy → python, floats rounded to keep the page small."""
    if isinstance(values, np.ndarray):
        values = values.tolist()
    if isinstance(values, list):
        return [_clean(v) for v in values]
    if isinstance(values, dict):
        return {str(k): _clean(v) for k, v in values.items()}
    if isinstance(values, float | np.floating):
        return None if not math.isfinite(float(values)) else round(float(values), 4)
    if isinstance(values, np.integer):
        return int(values)
    return values


def _mean_w(windows: dict[str, list[float | None]], energy: str) -> np.ndarray:
    """Each window's mean power from its ``<energy>_kwh`` (NaN where unknown)."""
    energy_j = floats(windows[f"{energy}_kwh"]) * J_PER_KWH
    t0, t1 = floats(windows["start"]), floats(windows["end"])
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_w: np.ndarray = np.where(t1 > t0, energy_j / (t1 - t0), np.nan)
    return mean_w


def _deviation_pct(measured: list[float | None], expected: list[float | None]) -> np.ndarray:
    """(measured − expected) / expected per window, in %: a drift's step in the operator's terms
    ("x % above what the baseline expects"), readable where stage swings hide it in kW."""
    m, e = floats(measured), floats(expected)
    with np.errstate(invalid="ignore", divide="ignore"):
        pct: np.ndarray = np.where(e > 0, 100.0 * (m - e) / e, np.nan)
    return pct


def _percentiles(errors: np.ndarray) -> dict[str, float | None]:
    if errors.size == 0:
        return {"p50": None, "p95": None, "max": None}
    absolute = np.abs(errors)
    p50, p95 = (float(p) for p in np.percentile(absolute, [50, 95]))
    return {"p50": p50, "p95": p95, "max": float(absolute.max())}


def _histogram(errors: np.ndarray, edges: np.ndarray) -> list[int]:
    clipped = np.clip(errors, edges[0], edges[-1] - 1e-9)
    counts: list[int] = np.histogram(clipped, bins=edges)[0].tolist()
    return counts


def _skipped_input(last_summary: dict[str, Any]) -> dict[str, int]:
    """Rows the engine did not use and gaps it restarted after (the last summary's ``hygiene``)."""
    hygiene = section(last_summary, "hygiene")
    return {k: int(number(hygiene.get(k)) or 0) for k in ("out_of_order_rows", "bad_ts_rows", "gaps")}


def build_payload(data: ReportData) -> dict[str, Any]:
    """Everything the page's script needs, as plain JSON."""
    w = data.windows
    colours = {
        s: STAGE_COLOURS.get(s, EXTRA_COLOURS[i % len(EXTRA_COLOURS)]) for i, s in enumerate(data.stages)
    }
    engine_errors = window_errors(w)
    static_errors = np.array([])
    if data.trace is not None and data.trace.static_pue_ratio is not None:
        measured = floats(w["measured_kwh"])
        reference = data.trace.static_pue_ratio * data.trace.window_gpu_kwh
        predicted_mask = np.array([v is not None for v in w["predicted_kwh"]])
        with np.errstate(divide="ignore", invalid="ignore"):
            static_all = 100.0 * (reference - measured) / measured
        static_errors = static_all[predicted_mask & np.isfinite(static_all)]
    all_errors = np.abs(np.concatenate([engine_errors, static_errors]))
    span = max(5.0, float(np.percentile(all_errors, 99))) if all_errors.size else 5.0
    edges = np.linspace(-span, span, 41)
    stage_time = data.stage_time_s.sum(axis=0)
    energy = data.trace.energy_by_stage_kwh if data.trace else {}
    total_energy = sum(energy.values())
    non_compute = sum(v for k, v in energy.items() if k in NON_COMPUTE_STAGES)
    last = data.last_summary or {}
    per_stage, lag = section(last, "stages"), section(last, "lag")
    table = []
    for i, stage in enumerate(data.stages):
        entry = section(per_stage, stage)
        table.append({
            "stage": stage, "time_h": float(stage_time[i]) / 3600.0, "energy_kwh": energy.get(stage),
            "energy_share": (energy.get(stage, 0.0) / total_energy) if total_energy else None,
            "level_w": entry.get("level_w"), "band_w": entry.get("band_w"),
            "lag_s": entry.get("lag_s", lag.get("tau_s")), "dead_s": entry.get("dead_s", lag.get("dead_s")),
            "facility_gpu_ratio": entry.get("facility_gpu_ratio", entry.get("ratio")),
            "samples": entry.get("samples"),
        })
    payload: dict[str, Any] = {
        "version": __version__,
        "range": [data.axis.start, data.axis.end],
        "stages": data.stages,
        "colours": colours,
        "timeline": {
            "x": data.axis.centers(),
            "dominant": dominant_stages(data),
            "inferred_share": data.inferred_time_s / np.maximum(data.stage_time_s.sum(axis=1), 1e-9),
        },
        "windows": {
            "x": w["start"],
            **{f"{energy}_w": _mean_w(w, energy) for energy in WINDOW_ENERGIES},
            "deviation_pct": _deviation_pct(w["measured_kwh"], w["predicted_kwh"]),
        },
        "envelope": None if data.trace is None else {
            "x": data.axis.centers(), "min": data.trace.facility_min_w, "max": data.trace.facility_max_w,
            "mean": data.trace.facility_mean_w,
        },
        "power_axis": _power_axis(data),
        "deviation_axis": _deviation_axis(w),
        "drifts": drift_periods(data.events, data.axis.end),
        "playbook": playbook_sections(sorted({str(e.get("cause")) for e in data.events})),
        "definitions": {"non_compute": NON_COMPUTE_DEFINITION},
        "baselines": data.baselines,
        "errors": {
            "edges": edges,
            "engine": _histogram(engine_errors, edges),
            "static": _histogram(static_errors, edges) if static_errors.size else None,
            "engine_pct": _percentiles(engine_errors),
            "static_pct": _percentiles(static_errors),
            "static_ratio": data.trace.static_pue_ratio if data.trace else None,
        },
        "events": [
            {"ts": e.get("ts"), "state": e.get("state"), "cause": e.get("cause"), "stage": e.get("stage"),
             "deviation_pct": e.get("deviation_pct"),
             "explanation": section(e, "detail").get("explanation", ""),
             "since": section(e, "detail").get("since")}
            for e in data.events
        ],
        "detections_off": [
            {"detection": name, "why": why, "share": share}
            for name, (why, share) in sorted(data.detections_off.items())
        ],
        "table": table,
        "jobs": job_rows(last),
        "input": _skipped_input(last),
        "energy": {
            "total_kwh": total_energy or None,
            "non_compute_share": (non_compute / total_energy) if total_energy else None,
        },
    }
    clean: dict[str, Any] = _clean(payload)
    return clean


JOB_PARTS = ("it", "cooling", "facility", "gpu")  # summary.schema.json job_energy_kwh entries


def job_rows(last_summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The "Energy by job" table: per job its total (None for a part any stage lacks), then each stage,
    from the last summary's ``job_energy_kwh`` (energy since the engine started, split node by node;
    agent.engine.job_energy). Empty when the summary has none (a report written before per-job energy)."""
    rows: list[dict[str, Any]] = []
    for job, stages in sorted(section(last_summary, "job_energy_kwh").items()):
        if not isinstance(stages, dict):
            continue
        parts = {stage: p for stage, p in sorted(stages.items()) if isinstance(p, dict)}
        name = "no job reported" if job == "-" else job
        job_total = {k: total(*(p.get(k) for p in parts.values())) for k in JOB_PARTS}
        rows.append({"job": name, "stage": None, **job_total})
        rows += [{"job": name, "stage": stage, **{k: p.get(k) for k in JOB_PARTS}}
                 for stage, p in parts.items()]
    return rows


def _power_axis(data: ReportData) -> dict[str, Any] | None:
    w = data.windows
    starts = floats(w["start"])
    values = [_mean_w(w, energy) for energy in ("measured", "predicted")]
    xs = [starts, starts]
    if data.trace is not None:
        centres = data.axis.centers()
        values += [data.trace.facility_max_w, data.trace.facility_min_w]
        xs += [centres, centres]
    return robust_range(values, xs)


# The deviation axis always spans at least ±1 %: the baseline's usual window error (P95 ~1 %,
# docs/engine.md) must not be zoomed up to look like a step. It is not clipped: a window mean
# already dilutes a one-sample glitch (50 kW for 1 s of 900 s moves it by ~0.2 %), and with a
# few hundred windows a percentile would cut off the very step being looked for.
DEVIATION_AXIS_MIN_PCT = 1.0


def _deviation_axis(w: dict[str, list[float | None]]) -> dict[str, Any] | None:
    deviation = _deviation_pct(w["measured_kwh"], w["predicted_kwh"])
    axis = robust_range([deviation], [floats(w["start"])], floor=None, min_margin=0.5, percentiles=(0, 100))
    if axis is not None:
        axis["min"] = min(axis["min"], -DEVIATION_AXIS_MIN_PCT)
        axis["max"] = max(axis["max"], DEVIATION_AXIS_MIN_PCT)
    return axis


def render_page(data: ReportData, title: str) -> str:
    payload = json.dumps(build_payload(data), separators=(",", ":"))
    # "</" inside inline JSON/JS would end the <script> element early.
    payload = payload.replace("</", "<\\/")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title>"
        f"<style>{_resource('vendor', 'uPlot.min.css')}</style>"
        f"<style>{_resource('page.css')}</style></head><body>"
        f'<header><h1>{html.escape(title)}</h1><div id="headline"></div></header><main id="app"></main>'
        f"<footer>rackwatt {html.escape(__version__)} · charts: uPlot (MIT licence, vendored)</footer>"
        f"<script>{_resource('vendor', 'uPlot.iife.min.js')}</script>"
        f'<script id="rackwatt-data" type="application/json">{payload}</script>'
        f"<script>{_resource('page.js')}</script></body></html>\n"
    )
