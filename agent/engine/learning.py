"""What happens when a window closes: its report line (from the frozen predictions), then learning.

Order matters and is the point of this module: ``window_record`` reads predictions that were made
bin by bin with the model frozen at the window's start; only afterwards does ``learn_window``
let the window's PDU and cooling samples into the models (prequential evaluation).

Learning skips bins whose component the drift monitor holds (a suspected or active deviation
must not become the new normal), and uses a short half-life for components it asks to re-learn.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from agent.engine import engine as E
from agent.engine.frames import F
from agent.engine.response import cooling_features, daily_phase, it_features, stage_it_features

if TYPE_CHECKING:
    from agent.engine.engine import Engine

KNOWN_FRAC = 0.9  # a bin teaches a model only if its inputs were known ≥ 90 % of the bin


def _kwh_or_none(ws: float, known_s: float, length_s: float) -> float | None:
    """Energy over the window: the integral, extended over gaps at the mean known power (None if
    less than half of the window is known)."""
    if length_s <= 0 or known_s < 0.5 * length_s:
        return None
    return ws * (length_s / known_s) / 3.6e6


def window_record(engine: Engine) -> dict[str, Any]:
    wb = engine.buf
    n = wb.n
    sums = wb.sums[:n]
    dur = sums[:, F["dur_s"]]
    start = engine.rows.t0 + engine.window_idx * engine.window_s
    end = float(wb.start[n - 1] + dur[-1])
    length = end - start
    tot = sums.sum(axis=0)
    rec: dict[str, Any] = {
        "type": "window",
        "start": start,
        "end": end,
        "measured_kwh": _kwh_or_none(tot[F["fac_ws"]], tot[F["fac_s"]], length),
        "predicted_kwh": None,
        "it_measured_kwh": _kwh_or_none(tot[F["pdu_ws"]], tot[F["pdu_s"]], length),
        "it_predicted_kwh": None,
        "cooling_measured_kwh": _kwh_or_none(tot[F["cool_ws"]], tot[F["cool_s"]], length),
        "cooling_predicted_kwh": None,
        "coverage": float(min(max(tot[F["fac_s"]] / length, 0.0), 1.0)) if length > 0 else 0.0,
        "gpu_kwh": _kwh_or_none(tot[F["gpu_ws"]], tot[F["gpu_s"]], length),
    }
    it_m, cool_m = rec["it_measured_kwh"], rec["cooling_measured_kwh"]
    if (
        rec["measured_kwh"] is not None
        and tot[F["fac_s"]] < length
        and it_m is not None
        and cool_m is not None
    ):
        # gaps: each side extended over its own gaps uses more of the samples than the facility sum
        rec["measured_kwh"] = it_m + cool_m
    # Bins without fresh GPU telemetry were predicted by the stage-only IT model (see Engine._advance),
    # so a window is predicted whenever the engine is warm, GPU telemetry or not.
    if engine.window_warm:
        it_kwh = float(((wb.it_pred_w[:n] + engine.bias_it) * dur).sum() / 3.6e6)
        cool_kwh = float(
            ((wb.cool_pred_w[:n, engine.best] + engine.bias_cool[engine.best]) * dur).sum() / 3.6e6
        )
        rec.update(predicted_kwh=it_kwh + cool_kwh, it_predicted_kwh=it_kwh, cooling_predicted_kwh=cool_kwh)
        # the model alone, without the recent residual level: where a confirmed drift shows as a gap
        level_kwh = float((engine.bias_it + engine.bias_cool[engine.best]) * dur.sum() / 3.6e6)
        rec["baseline_kwh"] = it_kwh + cool_kwh - level_kwh
    stage_tot = wb.stage_s[:n].sum(axis=0)
    rec["stage"] = engine.slots.name(int(np.argmax(stage_tot)))
    rec["transient_frac"] = round(float((dur * wb.transient[:n]).sum() / max(length, 1e-9)), 3)
    held = sorted(engine.held)
    if held:
        rec["held"] = held
    return rec


def _ew_bias(
    bias: np.ndarray, resid: np.ndarray, rows: np.ndarray, dur: np.ndarray, halflife_s: float | np.ndarray
) -> np.ndarray:
    """Short-memory mean of the model's recent residual (W), per model column, over the valid bins.

    This is the "level" of slow disturbances no regressor explains (other racks on the same unit,
    weather fronts): known at the window's start, so it may shift the next window's prediction.
    """
    halflife = np.broadcast_to(np.asarray(halflife_s, dtype=float), dur.shape)
    if not rows.any() or (halflife[rows] <= 0).any():
        return bias
    r = resid[rows]
    lam = 0.5 ** (dur[rows] / halflife[rows])  # per valid bin
    # weight of bin i in the new mean: (1 - lam_i) · Π_{j>i} lam_j
    tail = np.concatenate((np.cumprod(lam[::-1])[::-1][1:], [1.0]))
    w = (1.0 - lam) * tail
    return bias * float(np.prod(lam)) + (w[:, None] * r).sum(axis=0)


def _halflife_h(engine: Engine, component: str) -> float:
    relearn = engine.drift.relearn if engine.drift is not None else frozenset()
    from agent.engine.engine import RELEARN_HALFLIFE_H

    if component in relearn:
        return RELEARN_HALFLIFE_H
    factor = E.IT_MEMORY_FACTOR if component == "it" else 1.0
    return float(engine.config.forgetting_halflife_h) * factor


def learn_window(engine: Engine) -> None:
    from agent.engine.engine import SCORE_HALFLIFE_H, WARMUP_H

    wb = engine.buf
    n = wb.n
    sums = wb.sums[:n]
    dur = np.maximum(sums[:, F["dur_s"]], 1e-9)
    length_h = float(dur.sum()) / 3600.0
    with np.errstate(invalid="ignore", divide="ignore"):
        gpu_mean = sums[:, F["gpu_ws"]] / sums[:, F["gpu_s"]]
        pdu_mean = sums[:, F["pdu_ws"]] / sums[:, F["pdu_s"]]
        cool_mean = sums[:, F["cool_ws"]] / sums[:, F["cool_s"]]
    if not math.isfinite(engine.scale_w):
        # The power normaliser: the GPUs' peak when they are seen, else (a rack without GPU
        # telemetry) the PDUs'. It only scales the regressions, so either is fine once fixed.
        finite = gpu_mean[np.isfinite(gpu_mean)]
        if not finite.size or finite.max() <= 0:
            finite = pdu_mean[np.isfinite(pdu_mean)]
        if not finite.size or finite.max() <= 0:
            return
        engine.scale_w = float(finite.max())
    scale = engine.scale_w
    frac = wb.stage_s[:n] / dur[:, None]
    gpu_ok = sums[:, F["gpu_s"]] >= KNOWN_FRAC * dur
    w_h = dur / 3600.0

    # IT side
    rows = gpu_ok & (sums[:, F["pdu_s"]] >= KNOWN_FRAC * dur) & ~wb.held[:n, 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        g = (
            np.stack([sums[:, F["gpu_ws"]], sums[:, F["gpu2_ws"]], sums[:, F["gpu3_ws"]]], axis=1)
            / sums[:, F["gpu_s"], None]
        )
    g = np.nan_to_num(g)
    temp = wb.gpu_temp_c[:n]
    X = it_features(g[:, 0], g[:, 1], g[:, 2], wb.gpu_lag_w[:n], frac, scale, temp)
    y = np.where(rows, np.nan_to_num(pdu_mean) / scale, 0.0)
    seen_it = sums[:, F["pdu_s"]] >= KNOWN_FRAC * dur
    # Without GPU power in a bin, the IT residual is mostly the running job's own level, which the
    # last window measured best: its memory is one window instead of the GPU model's hour.
    bias_halflife_s = np.where(sums[:, F["gpu_s"]] > 0, E.IT_BIAS_HALFLIFE_S, engine.window_s)
    engine.bias_it = float(
        _ew_bias(
            np.array([engine.bias_it]),
            (np.nan_to_num(pdu_mean) - wb.it_pred_w[:n])[:, None],
            seen_it,
            dur,
            bias_halflife_s,
        )[0]
    )
    if rows.any():
        lo = float(min(g[rows, 0].min(), wb.gpu_lag_w[:n][rows].min()))
        hi = float(max(g[rows, 0].max(), wb.gpu_lag_w[:n][rows].max()))
        engine.g_lo_w = lo if not math.isfinite(engine.g_lo_w) else min(engine.g_lo_w, lo)
        engine.g_hi_w = hi if not math.isfinite(engine.g_hi_w) else max(engine.g_hi_w, hi)
        t_lo, t_hi = float(temp[rows].min()), float(temp[rows].max())
        engine.t_lo_c = t_lo if not math.isfinite(engine.t_lo_c) else min(engine.t_lo_c, t_lo)
        engine.t_hi_c = t_hi if not math.isfinite(engine.t_hi_c) else max(engine.t_hi_c, t_hi)
    lam_it = 0.5 ** (length_h / _halflife_h(engine, "it"))
    if rows.any():  # no data (held, or PDU unknown): no forgetting either
        engine.it.update(X[None], y[None], (w_h * rows)[None], lam_it)
    # the stage-only IT model learns from every bin whose PDU power is known, GPU telemetry or not
    rows_s = (sums[:, F["pdu_s"]] >= KNOWN_FRAC * dur) & ~wb.held[:n, 0]
    if rows_s.any():
        Xs = stage_it_features(frac, engine.job_rate_n(sums, wb.jobs[:n]))
        ys = np.where(rows_s, np.nan_to_num(pdu_mean) / scale, 0.0)
        engine.it_stage.update(Xs[None], ys[None], (w_h * rows_s)[None], lam_it)

    # cooling side: score every lag candidate on its frozen predictions, then update all
    rows_c = (sums[:, F["cool_s"]] >= KNOWN_FRAC * dur) & ~wb.held[:n, 1]
    y_c = np.where(rows_c, np.nan_to_num(cool_mean) / scale, 0.0)
    w_c = w_h * rows_c
    # Candidates are scored only once the models have learned for a while (warm): the first hours'
    # errors say how fast each candidate's fit converged, not which lag is right.
    if w_c.sum() > 0 and engine.window_warm:
        # Score the dynamics: changes of the residual between consecutive bins. Slow disturbances
        # (other racks, weather) cancel out; what is left is how well (τ, d) follow heat steps.
        # The previous window's last residual is carried so that a step right at a window edge
        # is scored too.
        res = np.concatenate([engine.last_res[:, None], wb.cool_pred_w[:n].T / scale - y_c[None]], axis=1)
        ok = np.concatenate([[bool(np.isfinite(engine.last_res).all())], rows_c])
        pair = ok[1:] & ok[:-1]
        d = np.where(pair[None], res[:, 1:] - res[:, :-1], 0.0)
        err = (d**2).sum(axis=1) / max(int(pair.sum()), 1)
        if engine.scored:
            lam_s = 0.5 ** (length_h / SCORE_HALFLIFE_H)
            engine.score = lam_s * engine.score + (1.0 - lam_s) * err
        else:
            engine.score = err
            engine.scored = True
    # The residual level follows the data even while the drift monitor holds the model: it is the
    # short-term state of disturbances the regressors cannot see (other racks on the unit), not
    # the baseline. The held model (theta) is what the drift detector compares against.
    last_ok = rows_c[-1] if n else False
    engine.last_res = (
        (wb.cool_pred_w[n - 1] / scale - y_c[n - 1]) if last_ok else np.full_like(engine.last_res, np.nan)
    )
    seen_c = sums[:, F["cool_s"]] >= KNOWN_FRAC * dur
    resid = np.nan_to_num(cool_mean)[:, None] - wb.cool_pred_w[:n]
    engine.bias_cool = _ew_bias(engine.bias_cool, resid, seen_c, dur, E.BIAS_HALFLIFE_S)
    cos_t, sin_t = daily_phase(wb.start[:n] + 0.5 * engine.bin_s)
    Xc = cooling_features(wb.hl_w[:n].T / scale, cos_t, sin_t)
    K = Xc.shape[0]
    lam_c = 0.5 ** (length_h / _halflife_h(engine, "cooling"))
    if w_c.sum() > 0:
        engine.cool.update(Xc, np.broadcast_to(y_c, (K, n)), np.broadcast_to(w_c, (K, n)), lam_c)
    if engine.scored:
        engine.best = int(np.argmin(engine.score))

    # GPU power per stage against work rate (for the gpu_hardware drift channel)
    with np.errstate(invalid="ignore", divide="ignore"):
        wr = sums[:, F["wr_ws"]] / sums[:, F["wr_s"]]
    wr_ok = (sums[:, F["wr_s"]] >= KNOWN_FRAC * dur) & np.isfinite(wr)
    if not math.isfinite(engine.wr_scale) and wr_ok.any() and np.nanmax(wr[wr_ok]) > 0:
        engine.wr_scale = float(np.nanmax(wr[wr_ok]))
    if math.isfinite(engine.wr_scale):
        dom = np.argmax(frac, axis=1)
        pure = frac[np.arange(n), dom] >= 0.9
        use = wr_ok & gpu_ok & pure & ~wb.held[:n, 2]
        S = engine.gpu_model.theta.shape[0]
        Xg = np.stack([np.ones(n), np.where(use, wr, 0.0) / engine.wr_scale], axis=1)
        Wg = (np.arange(S)[:, None] == dom[None, :]) * (w_h * use)[None, :]
        yg = np.where(use, np.nan_to_num(gpu_mean), 0.0) / scale
        lam_g = 0.5 ** (length_h / _halflife_h(engine, "gpu"))
        lam_slots = np.where(Wg.sum(axis=1) > 0, lam_g, 1.0)  # only slots seen in this window forget
        if use.any():
            engine.gpu_model.update(
                np.broadcast_to(Xg, (S, n, 2)), np.broadcast_to(yg, (S, n)), Wg, lam_slots
            )

    # a rack whose cooling-unit power never arrives (no column, or always empty) warms up on IT alone
    has_cooling = float(engine.cool.weight.max()) > 0
    cool_ready = float(engine.cool.weight.min()) >= WARMUP_H or not has_cooling
    it_ready = max(float(engine.it.weight[0]), float(engine.it_stage.weight[0])) >= WARMUP_H
    if not engine.warm and it_ready and cool_ready:
        engine.warm = True
