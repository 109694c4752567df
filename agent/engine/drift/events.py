"""Report ``event`` dicts (docs/spec/report-format.md) and the evidence they carry.

Why a module of its own: the event shape is a binding format read by the publisher, the HTML
report and other tools; building it in one place keeps every event alike and valid.
"""

from __future__ import annotations

import math

from agent.engine.drift import tuning as T
from agent.engine.drift.channel import ResidualChannel, Transition
from agent.engine.drift.context import SignalContext

PLAYBOOK = "docs/drift-playbook.md"
# What each channel's residual compares, for the evidence list.
CHANNEL_SIGNALS: dict[str, tuple[str, str]] = {
    "it": ("it_measured_w", "Σ PDU power vs the IT model for the GPU and server load (%)"),
    "cooling": ("cooling_measured_w", "cooling power vs the unit's efficiency model for its load (%)"),
    "gpu": ("gpu_w", "GPU power vs its usual level in this stage at the usual work rate (%)"),
    "gpu_idle": ("gpu_mean_w", "one GPU's power at rest (idle, settled) vs its usual idle level (%)"),
    "thermal": ("inlet_spread_c", "max − min of the rack inlet temperatures vs its usual level (°C)"),
}
CONTEXT_UNITS = {"setpoint_c": "°C", "inlet_mean_c": "°C", "inlet_spread_c": "°C", "fan_pct": "%"}


def drift_event(
    ts: float, state: str, cause: str, stage: str, deviation_pct: float | None, component: str,
    since_ts: float, evidence: list[dict[str, object]], explanation: str,
    extra: dict[str, object] | None = None,
) -> dict[str, object]:
    """One ``event`` line; ``detail`` always has component, since, evidence, explanation, playbook."""
    detail: dict[str, object] = {
        "component": component,
        "since": _round(since_ts, 1),
        "evidence": evidence,
        "explanation": explanation,
        "playbook": f"{PLAYBOOK}#{cause}",
    }
    if extra:
        detail.update(extra)
    return {
        "type": "event",
        "ts": float(ts),
        "kind": "drift",
        "state": state,
        "cause": cause,
        "stage": stage or None,
        "deviation_pct": None if deviation_pct is None or not math.isfinite(deviation_pct) else deviation_pct,
        "detail": detail,
    }


def evidence_for(
    component: str, tr: Transition, channels: dict[str, ResidualChannel], ctx: SignalContext
) -> list[dict[str, object]]:
    """Which signals moved, by how much, since when: the triggering residual first, then the
    other residuals that were moving too, then the context signals beyond their noise."""
    items: list[dict[str, object]] = []
    signal, meaning = CHANNEL_SIGNALS[component]
    items.append({"signal": signal, "compares": meaning, "moved": _round(tr.deviation, 2),
                  "z": _round(tr.z, 1), "since": _round(tr.since_ts, 1), "role": "trigger"})
    for name, channel in channels.items():
        if name == component or channel.cusum < T.MOVING_FRAC * channel.params.threshold_h:
            continue
        other, meaning = CHANNEL_SIGNALS[name]
        items.append({"signal": other, "compares": meaning, "moved": _round(channel.recent_deviation(), 2),
                      "cusum_of_threshold": _round(channel.cusum / channel.params.threshold_h, 2),
                      "since": _round(channel.since, 1), "role": "moved_with"})
    for name, level in ctx.levels.items():
        moved, ref, fast = level.moved, level.ref, level.fast
        if moved is None or ref is None or fast is None:
            continue
        if abs(moved) >= T.EVIDENCE_MOVED[name]:
            items.append({"signal": name, "from": _round(ref, 2), "to": _round(fast, 2),
                          "moved": _round(moved, 2), "unit": CONTEXT_UNITS[name], "role": "context"})
    rate = ctx.work_rate_moved_pct()
    if math.isfinite(rate) and abs(rate) >= T.EVIDENCE_MOVED["work_rate_pct"]:
        items.append({"signal": "work_rate", "moved_pct": _round(rate, 2), "role": "context"})
    mix = ctx.mix.distance
    if mix >= T.EVIDENCE_MOVED["stage_mix"]:
        items.append({"signal": "stage_mix", "moved_fraction": _round(mix, 2), "role": "context"})
    return items


def _round(value: float, digits: int) -> float | None:
    return round(value, digits) if math.isfinite(value) else None
