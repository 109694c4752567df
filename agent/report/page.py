"""Turn ``ReportData`` into one self-contained HTML page (uPlot and the data inlined).

The page makes no network request: the charting library (uPlot, MIT, vendored in ``vendor/``),
its CSS, the data and the script are all inside the file.
"""

from __future__ import annotations

import html
import json
import math
from importlib import resources
from typing import Any

import numpy as np

from agent import __version__
from agent.report.data import NON_COMPUTE_STAGES, ReportData, dominant_stages, window_errors

STAGE_COLOURS = {
    "idle": "#9e9e9e",
    "data_load": "#f2b134",
    "forward_backward": "#2e7d32",
    "grad_sync": "#1e88e5",
    "checkpoint": "#8e24aa",
    "eval": "#00acc1",
}
EXTRA_COLOURS = ["#e64a19", "#6d4c41", "#5c6bc0", "#c0ca33", "#d81b60", "#00897b", "#546e7a", "#fb8c00"]


def _vendor(name: str) -> str:
    return resources.files("agent.report").joinpath("vendor", name).read_text(encoding="utf-8")


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


def _kwh_to_mean_w(
    kwh: list[float | None], start: list[float | None], end: list[float | None]
) -> list[float | None]:
    out: list[float | None] = []
    for value, t0, t1 in zip(kwh, start, end, strict=True):
        if value is None or t0 is None or t1 is None or t1 <= t0:
            out.append(None)
        else:
            out.append(value * 3.6e6 / (t1 - t0))
    return out


def _percentiles(errors: np.ndarray) -> dict[str, float | None]:
    if errors.size == 0:
        return {"p50": None, "p95": None, "max": None}
    absolute = np.abs(errors)
    return {
        "p50": float(np.percentile(absolute, 50)),
        "p95": float(np.percentile(absolute, 95)),
        "max": float(absolute.max()),
    }


def _histogram(errors: np.ndarray, edges: np.ndarray) -> list[int]:
    clipped = np.clip(errors, edges[0], edges[-1] - 1e-9)
    return np.histogram(clipped, bins=edges)[0].tolist()


def _skipped_input(last_summary: dict[str, Any]) -> dict[str, int]:
    """Rows the engine did not use and gaps it restarted after (the last summary's ``hygiene``)."""
    hygiene = last_summary.get("hygiene")
    hygiene = hygiene if isinstance(hygiene, dict) else {}
    keys = ("out_of_order_rows", "bad_ts_rows", "gaps")
    return {k: int(v) if isinstance(v := hygiene.get(k), (int, float)) else 0 for k in keys}


def build_payload(data: ReportData) -> dict[str, Any]:
    """Everything the page's script needs, as plain JSON."""
    w = data.windows
    colours = {
        s: STAGE_COLOURS.get(s, EXTRA_COLOURS[i % len(EXTRA_COLOURS)]) for i, s in enumerate(data.stages)
    }
    engine_errors = window_errors(w)
    static_errors = np.array([])
    if data.trace is not None and data.trace.static_pue_ratio is not None:
        measured = np.array([np.nan if v is None else v for v in w["measured_kwh"]], dtype=float)
        reference = data.trace.static_pue_ratio * data.trace.window_gpu_kwh
        predicted_mask = np.array([v is not None for v in w["predicted_kwh"]])
        with np.errstate(divide="ignore", invalid="ignore"):
            static_all = 100.0 * (reference - measured) / measured
        static_errors = static_all[predicted_mask & np.isfinite(static_all)]
    span = max(
        5.0,
        float(np.percentile(np.abs(np.concatenate([engine_errors, static_errors])), 99))
        if engine_errors.size or static_errors.size
        else 5.0,
    )
    edges = np.linspace(-span, span, 41)
    stage_time = data.stage_time_s.sum(axis=0)
    energy = data.trace.energy_by_stage_kwh if data.trace else {}
    total_energy = sum(energy.values())
    non_compute = sum(v for k, v in energy.items() if k in NON_COMPUTE_STAGES)
    last = data.last_summary or {}
    per_stage = last.get("stages") or {}
    lag_entry = last.get("lag")
    lag: dict[str, Any] = lag_entry if isinstance(lag_entry, dict) else {}
    table = []
    for i, stage in enumerate(data.stages):
        entry = per_stage.get(stage, {}) if isinstance(per_stage, dict) else {}
        table.append(
            {
                "stage": stage,
                "time_h": float(stage_time[i]) / 3600.0,
                "energy_kwh": energy.get(stage),
                "energy_share": (energy.get(stage, 0.0) / total_energy) if total_energy else None,
                "level_w": entry.get("level_w"),
                "band_w": entry.get("band_w"),
                "lag_s": entry.get("lag_s", lag.get("tau_s")),
                "dead_s": entry.get("dead_s", lag.get("dead_s")),
                "facility_gpu_ratio": entry.get("facility_gpu_ratio", entry.get("ratio")),
                "samples": entry.get("samples"),
            }
        )
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
            "measured_w": _kwh_to_mean_w(w["measured_kwh"], w["start"], w["end"]),
            "predicted_w": _kwh_to_mean_w(w["predicted_kwh"], w["start"], w["end"]),
            "it_measured_w": _kwh_to_mean_w(w["it_measured_kwh"], w["start"], w["end"]),
            "it_predicted_w": _kwh_to_mean_w(w["it_predicted_kwh"], w["start"], w["end"]),
            "cooling_measured_w": _kwh_to_mean_w(w["cooling_measured_kwh"], w["start"], w["end"]),
            "cooling_predicted_w": _kwh_to_mean_w(w["cooling_predicted_kwh"], w["start"], w["end"]),
        },
        "envelope": None
        if data.trace is None
        else {
            "x": data.axis.centers(),
            "min": data.trace.facility_min_w,
            "max": data.trace.facility_max_w,
            "mean": data.trace.facility_mean_w,
        },
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
            {
                "ts": e.get("ts"),
                "state": e.get("state"),
                "cause": e.get("cause"),
                "stage": e.get("stage"),
                "deviation_pct": e.get("deviation_pct"),
                "explanation": (e.get("detail") or {}).get("explanation", ""),
                "playbook": (e.get("detail") or {}).get("playbook", f"drift-playbook.md#{e.get('cause')}"),
            }
            for e in data.events
        ],
        "table": table,
        "input": _skipped_input(last),
        "energy": {
            "total_kwh": total_energy or None,
            "non_compute_share": (non_compute / total_energy) if total_energy else None,
        },
    }
    return _clean(payload)


def render_page(data: ReportData, title: str) -> str:
    payload = json.dumps(build_payload(data), separators=(",", ":"))
    script = resources.files("agent.report").joinpath("page.js").read_text(encoding="utf-8")
    style = resources.files("agent.report").joinpath("page.css").read_text(encoding="utf-8")
    # "</" inside inline JSON/JS would end the <script> element early.
    payload = payload.replace("</", "<\\/")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title>"
        f"<style>{_vendor('uPlot.min.css')}</style><style>{style}</style></head><body>"
        f'<header><h1>{html.escape(title)}</h1><div id="headline"></div></header><main id="app"></main>'
        f"<footer>rackwatt {html.escape(__version__)} · charts: uPlot (MIT licence, vendored)</footer>"
        f"<script>{_vendor('uPlot.iife.min.js')}</script>"
        f'<script id="rackwatt-data" type="application/json">{payload}</script>'
        f"<script>{script}</script></body></html>\n"
    )
