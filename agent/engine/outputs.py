"""The engine's MQTT payloads: the rack summary (with its ``capabilities``) and one retained baseline
per stage.

Shapes are versioned (``"v": 1``) and checked by ``agent/schemas/summary.schema.json`` and
``agent/schemas/baseline.schema.json``. ``seq`` is the caller's (the live publisher keeps its own;
replay uses the engine's). Powers are rounded to 0.1 W, energies to 1 Wh.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.engine.baselines import BaselineLibrary
from agent.engine.components import ComponentSample
from agent.engine.hygiene import RULES, Hygiene
from agent.engine.job_energy import JobEnergy

PAYLOAD_VERSION = 1
NO_GPU = "off: no GPU telemetry (configure [[dcgm]] nodes or node agents)"


@dataclass(frozen=True)
class EngineView:
    """What the payloads are made of: read from the engine's parts at one instant."""

    site: str
    rack: str
    warm: bool
    last_sample: ComponentSample | None
    stage_name: Callable[[int], str]
    baselines: BaselineLibrary
    energy_kwh: np.ndarray  # per slot: it, cooling (attributed), gpu
    lag: tuple[float, float]  # (time constant, dead time) of the cooling response, s
    lag_learned: bool
    held: frozenset[str]
    hygiene: dict[str, Any]
    capabilities: dict[str, Any]
    last_window: dict[str, Any]
    job_energy: JobEnergy


def capabilities(sample: ComponentSample | None, gpu: bool, warm: bool,
                 predicts_from_gpu: bool) -> dict[str, Any]:
    """What the rack's data lets the engine do now. Without GPU telemetry the detections comparing
    PDU with GPU power cannot run, and "no drift" there would be a claim the data cannot support,
    so each detection says "on" or why it is off."""
    inlet = sample is not None and math.isfinite(sample.inlet_spread_c)
    cooling = sample is not None and math.isfinite(sample.cooling_measured_w)
    return {
        "gpu_telemetry": gpu,
        "inlet_telemetry": inlet,
        "cooling_telemetry": cooling,
        "prediction": "warming_up" if not warm else "gpu" if predicts_from_gpu else "stages",
        "detections": {
            "cooling": "on" if cooling else "off: no cooling-unit power",
            "thermal": "on" if inlet else "off: no rack inlet temperatures",
            "power_chain": "on" if gpu else NO_GPU,
            "gpu_hardware": "on" if gpu else NO_GPU,
        },
    }


def _r(x: float, nd: int = 1) -> float | None:
    return round(float(x), nd) if x is not None and math.isfinite(x) else None


def _header(view: EngineView, ts: float, seq: int) -> dict[str, Any]:
    return {"v": PAYLOAD_VERSION, "seq": int(seq), "ts": _r(ts, 3), "site": view.site, "rack": view.rack}


def _lag(view: EngineView) -> dict[str, Any]:
    tau, dead = view.lag
    return {"tau_s": tau, "dead_s": dead, "learned": view.lag_learned}


def _stage_entry(view: EngineView, slot: int) -> dict[str, Any]:
    row = view.baselines.row(slot)
    gpu_seen = row["gpu_w"] > 0  # a stage never seen with GPU telemetry has no GPU power or ratio
    return {
        "level_w": _r(row["level_w"]),
        "band_w": [_r(row["p10_w"]), _r(row["p90_w"])],
        "gpu_w": _r(row["gpu_w"]) if gpu_seen else None,
        "it_w": _r(row["it_w"]),
        "cooling_w": _r(row["cooling_w"]),
        "ratio": _r(row["ratio"], 4) if gpu_seen else None,
        "samples": int(row["n"]),
        "updated": _r(row["updated"], 0),
        "lag_s": list(view.lag),  # [time constant, dead time] of the cooling response
    }


def _stage_summary(view: EngineView, slot: int) -> dict[str, Any]:
    """The summary's per-stage entry: only what changes minute to minute. The full entry (GPU, IT
    and cooling parts, lag) is in the retained ``baseline/<stage>`` payload, so repeating it every
    summary would only multiply the bytes a rack publishes."""
    full = _stage_entry(view, slot)
    return {key: full[key] for key in ("level_w", "band_w", "ratio", "samples", "updated")}


def hygiene_counts(hygiene: Hygiene, malformed_hints: int, out_of_order_rows: int, bad_ts_rows: int,
                   gaps: int) -> dict[str, Any]:
    """The summary's ``hygiene`` object: rejections per rule and per signal, refused rows, gaps."""
    totals = hygiene.counts.sum(axis=0)
    return {
        "rejected": {r: int(t) for r, t in zip(RULES, totals, strict=True) if t},
        "by_signal": hygiene.counts_by_signal(),
        "malformed_hints": malformed_hints,
        "out_of_order_rows": out_of_order_rows,
        "bad_ts_rows": bad_ts_rows,
        "gaps": gaps,
    }


def summary_payload(view: EngineView, ts: float, seq: int) -> dict[str, Any]:
    s = view.last_sample
    stages = {
        view.stage_name(i): _stage_summary(view, i)
        for i in range(view.baselines.stats.shape[0])
        if view.baselines.stats[i, 0] > 0
    }
    energy = {
        view.stage_name(i): {"it": _r(e[0], 3), "cooling": _r(e[1], 3), "gpu": _r(e[2], 3)}
        for i, e in enumerate(view.energy_kwh)
        if e.any()
    }
    payload: dict[str, Any] = {
        **_header(view, ts, seq),
        "warm": view.warm,
        "stage": s.stage if s else None,
        "stage_source": s.stage_source if s else None,
        "job": (s.job or None) if s else None,
        "power_w": {
            "gpu": _r(s.gpu_w) if s else None,
            "it": _r(s.it_measured_w) if s else None,
            # no expectation before warm-up: a model still learning predicts nothing (never 0.0)
            "it_expected": _r(s.it_expected_w) if s and view.warm else None,
            "cooling": _r(s.cooling_measured_w) if s else None,
            "cooling_expected": _r(s.cooling_expected_w) if s and view.warm else None,
        },
        "capabilities": view.capabilities,
        "transient": bool(s.transient) if s else False,
        "lag": _lag(view),
        "stages": stages,
        "energy_kwh": energy,
        "held": sorted(view.held),
        "hygiene": view.hygiene,
    }
    job_table = view.job_energy.table()  # the windows not yet final included, split as the model stands
    if job_table:  # {job: {stage: {it, cooling, facility, gpu}}} kWh (job "-": none reported)
        payload["job_energy_kwh"] = {
            job: {stage: {k: _r(v, 3) for k, v in parts.items()} for stage, parts in stages.items()}
            for job, stages in job_table.items()
        }
        if view.job_energy.nodes.ids:
            payload["nodes"] = view.job_energy.now
    if view.last_window:
        keys = ("start", "end", "measured_kwh", "predicted_kwh", "coverage")
        payload["window"] = {k: view.last_window.get(k) for k in keys}
    return payload


def baseline_payloads(view: EngineView, ts: float, seq: int) -> dict[str, dict[str, Any]]:
    """Retained ``baseline/<stage>`` payloads for every stage that has a baseline."""
    out: dict[str, dict[str, Any]] = {}
    current_job = view.last_sample.job if view.last_sample else ""
    jobs = view.baselines.job_rows(current_job) if current_job else {}
    for i in range(view.baselines.stats.shape[0]):
        if view.baselines.stats[i, 0] <= 0:
            continue
        name = view.stage_name(i)
        entry = {**_header(view, ts, seq), "stage": name, **_stage_entry(view, i), "lag": _lag(view)}
        if i in jobs:
            row = jobs[i]
            entry["job"] = {"id": current_job, "level_w": _r(row["level_w"]),
                            "band_w": [_r(row["p10_w"]), _r(row["p90_w"])], "samples": int(row["n"])}
        out[name] = entry
    return out
