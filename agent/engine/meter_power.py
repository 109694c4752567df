"""PDU power between a feed's energy-meter readings: the exact mean ΔE/Δt where the PDU has a meter.

A held instantaneous ``pdu.<id>.power_w`` sample aliases training's seconds-scale swings (window
energy off by P95 3–5 % on the twin's multijob racks polled every 27–28 s; 0.1 % from the meter).
A span between two readings replaces the held sample of the row intervals it encloses only when it
closes inside the interval's window (causality) and within ``lookahead_s`` (ticks and chunks give
the same values), is no longer than the hold of a power sample, does not go backwards, stays below
the feed's maximum, and two meter steps are below ``RESOLUTION_SHARE`` of the feed's window energy.
Rules and figures: docs/engine.md, "PDU energy meters".
"""

from __future__ import annotations

import math

import numpy as np

from agent.engine.frames import DEFAULT_INTERVAL_S, HOLD_FACTOR, Signals
from agent.trace.model import J_PER_KWH, TraceChunk

# Two meter steps may cost at most a third of the tightest window-accuracy target (issue 14/3: P95 ≤
# 1.5 %): the measurement must not use up the error budget the model is judged by.
RESOLUTION_SHARE = 0.005
# Differences below this share of the counter's value are float rounding, not a meter step
# (float64 carries ~16 digits; a counter keeps at most ~10 significant ones).
FLOAT_TOL = 1e-9


def meter_power(sig: Signals, power_k: int, energy_k: int, emit_ts: np.ndarray, start_ts: np.ndarray,
                view_ts: np.ndarray, view_kwh: np.ndarray, clean_kwh: np.ndarray, t0: float,
                window_s: float) -> np.ndarray:
    """Per emitted row interval ``(start_ts[i], emit_ts[i]]``: the feed's mean power from its meter (W),
    NaN where the meter cannot say. ``view_*``: every buffered row's time and raw meter value
    (emitted rows first, then look-ahead); ``clean_kwh``: the emitted rows' cleaned values.

    Advances the counter's hold state and step past the emitted rows only, so live ticks and
    replay chunks give the same values.
    """
    n = emit_ts.size
    out = np.full(n, np.nan)
    raw = np.concatenate((clean_kwh, view_kwh[n:]))
    ok = np.isfinite(raw)
    carried_t, carried_v = float(sig.last_ts[energy_k]), float(sig.last_value[energy_k])
    has_carried = math.isfinite(carried_t) and math.isfinite(carried_v)
    r_t = np.concatenate(([carried_t] if has_carried else [], view_ts[ok]))
    r_v = np.concatenate(([carried_v] if has_carried else [], raw[ok]))
    emitted_readings = int(ok[:n].sum()) + int(has_carried)
    step0 = float(sig.step[energy_k])
    if r_t.size >= 2 and n:
        inc = np.diff(r_v)  # inc[j]: between readings j and j + 1
        # Increments are whole multiples of the meter's step, so two successive ones differ by at
        # least one step: the smallest nonzero difference seen is the step (an overestimate until
        # enough readings came, which leaves the meter unused rather than trusted too early).
        last_inc = float(sig.meter_inc[energy_k]) if has_carried else math.nan
        d_inc = np.abs(inc - np.concatenate(([last_inc], inc[:-1])))
        tol = FLOAT_TOL * float(np.max(np.abs(r_v)))
        first = step0 if math.isfinite(step0) else np.inf
        seen = np.where(np.isfinite(d_inc) & (d_inc > tol), d_inc, np.inf)
        steps = np.minimum.accumulate(np.concatenate(([first], seen)))  # steps[j]: up to reading j
        prev = np.searchsorted(r_t, start_ts, side="right") - 1
        nxt = np.searchsorted(r_t, emit_ts, side="left")
        have = (prev >= 0) & (nxt < r_t.size) & (nxt == prev + 1)
        i = np.flatnonzero(have)
        p, q = prev[i], nxt[i]
        span = r_t[q] - r_t[p]
        d_kwh = r_v[q] - r_v[p]
        interval = sig.interval_s[energy_k] if math.isfinite(sig.interval_s[energy_k]) else DEFAULT_INTERVAL_S
        window_end = (
            t0 + (np.floor((emit_ts[i] - t0) / window_s - 1e-9) + 1.0) * window_s
            if math.isfinite(window_s)
            else np.full(i.size, np.inf)
        )
        with np.errstate(invalid="ignore", divide="ignore"):
            power = d_kwh * J_PER_KWH / span
            step_kwh = steps[q]  # smallest step among the increments up to this span's end
            fine = 2.0 * step_kwh <= RESOLUTION_SHARE * power * window_s / J_PER_KWH
        use = (
            (span > 0)
            & (span <= HOLD_FACTOR * interval + 1e-9)
            & (d_kwh >= 0)
            & (r_t[q] <= window_end + 1e-9)
            & (r_t[q] - emit_ts[i] <= sig.lookahead_s + 1e-9)
            & (power <= sig.rack.max_power_w(sig.names[power_k]))
            & fine
        )
        out[i[use]] = power[use]
        done = min(emitted_readings, steps.size) - 1  # the last reading already emitted
        if done >= 1:
            sig.step[energy_k] = float(steps[done]) if math.isfinite(steps[done]) else math.nan
            sig.meter_inc[energy_k] = float(inc[done - 1])
    sig.hold(energy_k, emit_ts, clean_kwh, start_ts)  # the last emitted reading becomes the carried one
    return out


def apply_meters(sig: Signals, held: dict[str, np.ndarray], buf: TraceChunk, n: int,
                 clean: dict[str, np.ndarray], start_ts: np.ndarray, t0: float,
                 window_s: float) -> dict[str, np.ndarray]:
    """Each PDU feed with an energy meter: its held power (``held``, per emitted row interval) replaced
    by the meter's exact mean power wherever two readings enclose the interval. Returns, per feed's
    power column, the intervals so replaced."""
    metered: dict[str, np.ndarray] = {}
    for k, name in enumerate(sig.names):
        if not (name.startswith("pdu.") and name.endswith(".energy_kwh")) or name not in buf.numeric:
            continue
        power_name = name[: -len("energy_kwh")] + "power_w"
        if power_name not in held:
            continue
        power = meter_power(sig, sig.names.index(power_name), k, buf.ts[:n], start_ts, buf.ts,
                            buf.numeric[name], clean[name], t0, window_s)
        held[power_name] = np.where(np.isnan(power), held[power_name], power)
        metered[power_name] = ~np.isnan(power)
    return metered
