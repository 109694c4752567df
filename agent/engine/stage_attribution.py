"""Per-stage facility power inside one drift bin (≈ 60 s), also when stages alternate within it.

`forward_backward` and `grad_sync` alternate every few seconds, so a bin is almost never "pure".
Each stage's own mean GPU power g_s inside the bin is exact (GPU power is known per row); its IT
power is the bin's measured IT plus k·(g_s − ḡ), k the IT model's local slope bounded to
[K_MIN, K_MAX]; the measured cooling is split by the cooling model's steady-state response to each
stage's IT. Both splits add up to the measurement; before the models learned, k = 1 and cooling
follows IT. Why each choice: docs/engine.md, "Baselines, attribution, drift interface".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from agent.engine.model import ResponseModel
from agent.engine.response import it_predict
from agent.engine.signals import F
from agent.engine.window_buffer import WindowBuffer

MIN_SHARE = 0.1  # a stage gets a baseline update from a bin where it ran ≥ 10 % of the time
MIN_KNOWN = 0.9  # facility power must be known for ≥ 90 % of the bin
K_MIN, K_MAX = 1.0, 1.25  # IT watts per GPU watt between stages of one bin (PSU losses, bounded)


@dataclass
class StagePower:
    """One stage's attributed mean powers (W) over the bin and its time share."""

    slot: int
    share: float
    facility_w: float
    gpu_w: float
    it_w: float
    cooling_w: float


def stage_own_means(known_s: np.ndarray, integral: np.ndarray, stage_s: np.ndarray) -> np.ndarray:
    """Each stage's own mean of a quantity (GPU power, memory utilisation) over the seconds it was
    known in that stage (``integral`` / ``known_s``); NaN where it was known for less than half of
    the stage's time ``stage_s``: a few seconds say little of a whole stage."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((known_s >= 0.5 * stage_s) & (known_s > 0), integral / known_s, np.nan)


def stage_powers(wb: WindowBuffer, sl: slice, model: ResponseModel | None) -> list[StagePower]:
    """Attributed powers of every stage with ≥ ``MIN_SHARE`` of the bins ``sl`` of the window buffer;
    ``model``: the frozen response model once it was warm at the window's start, else None."""
    if model is not None and not math.isfinite(model.scale_w):
        model = None
    tot = wb.sums[sl].sum(axis=0)
    dur = float(tot[F["dur_s"]])
    if dur <= 0 or float(tot[F["fac_s"]]) < MIN_KNOWN * dur or float(tot[F["pdu_s"]]) <= 0:
        return []
    it_meas = float(tot[F["pdu_ws"]] / tot[F["pdu_s"]])
    cool_meas = float(tot[F["cool_ws"]] / tot[F["cool_s"]]) if tot[F["cool_s"]] > 0 else 0.0
    stage_t = wb.stage_s[sl].sum(axis=0)
    present = np.flatnonzero(stage_t > 0)
    if not present.size or not (math.isfinite(it_meas) and math.isfinite(cool_meas)):
        return []
    share = stage_t[present] / stage_t[present].sum()
    known, gpu_ws = wb.stage_gpu_s[sl].sum(axis=0)[present], wb.stage_gpu_ws[sl].sum(axis=0)[present]
    g_s = stage_own_means(known, gpu_ws, stage_t[present])
    it_s = _it_split(wb, sl, model, it_meas, g_s, share)
    cool_s = cool_meas * _split(_cooling_expected(wb, sl, model, it_s), it_s, share)
    return [StagePower(int(s), float(share[i]), float(it_s[i] + cool_s[i]), float(g_s[i]), float(it_s[i]),
                       float(cool_s[i])) for i, s in enumerate(present) if share[i] >= MIN_SHARE]


def _split(expected: np.ndarray, fallback: np.ndarray, share: np.ndarray) -> np.ndarray:
    """Weights w_s with Σ share·w = 1, proportional to ``expected`` (else ``fallback``, else equal)."""
    for weights in (expected, fallback):
        if np.all(np.isfinite(weights)) and np.all(weights > 0):
            return weights / float(share @ weights)
    return np.ones_like(share)


def _it_split(wb: WindowBuffer, sl: slice, model: ResponseModel | None, it_meas: float, g_s: np.ndarray,
              share: np.ndarray) -> np.ndarray:
    """Each stage's IT power: the measurement plus k × its GPU power's distance from the bin's mean."""
    if not np.all(np.isfinite(g_s)):
        return np.full(g_s.size, it_meas)
    g_mean = float(share @ g_s)
    k = 1.0
    if model is not None:
        d = wb.sums[sl, F["dur_s"]]
        w = d / max(float(d.sum()), 1e-9)
        frac = (wb.stage_s[sl].T @ np.ones(d.size))[None, :] / max(float(d.sum()), 1e-9)
        step = 0.02 * max(g_mean, 1.0)
        g = np.array([g_mean - step, g_mean + step])
        gm = np.stack([g, g**2, g**3], axis=1)
        gl = np.full(2, float(wb.gpu_lag_w[sl] @ w))
        frac2 = np.repeat(frac, 2, axis=0)
        e = it_predict(model.it.theta[0], gm, gl, frac2, model.scale_w, model.g_lo_w, model.g_hi_w)
        slope = float(e[1] - e[0]) / (2 * step)
        k = min(max(slope, K_MIN), K_MAX) if math.isfinite(slope) else K_MIN
    out: np.ndarray = np.maximum(it_meas + k * (g_s - g_mean), 0.0)
    return out


def _cooling_expected(wb: WindowBuffer, sl: slice, model: ResponseModel | None,
                      it_s: np.ndarray) -> np.ndarray:
    """Steady-state cooling the frozen model expects for each stage's own heat (NaN before warm)."""
    if model is None:
        return np.full(it_s.size, np.nan)
    a, b = model.cooling_ab(np.array([float(wb.start[sl].mean()) + 0.5 * model.bin_s]))
    out: np.ndarray = (a + b * it_s / model.scale_w) * model.scale_w
    return out
