"""The bins of the current window, kept until it closes (then the model learns from them): the bin
sums, the stage seconds, and what the frozen model predicted for each bin. Learning happens only at
the close, so every prediction inside a window is made with the model as it was at the window's
start (prequential, no look-ahead into PDU/CRAC samples).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.engine.components import LEARNED
from agent.engine.frames import BinBatch
from agent.engine.signals import LEGACY_FIELDS, N_FIELDS, F, remap_fields
from agent.trace.model import J_PER_KWH


@dataclass
class Prediction:
    """What the frozen model said for a run of bins (W; ``hl_w``/``cool_w``: per lag candidate)."""

    it_w: np.ndarray  # (n,)
    heat_w: np.ndarray  # (n,) the heat driving the lag: predicted IT once warm, else the PDU
    hl_w: np.ndarray  # (K, n) lagged heat
    hl_stage_w: np.ndarray  # (n, S) lagged heat per stage, of the selected candidate
    cool_w: np.ndarray  # (K, n)
    gpu_expected_w: np.ndarray  # (n,)
    transient: np.ndarray  # (n,) bool
    gpu_lag_w: np.ndarray  # (n,) GPU power through the server-fan lag


class WindowBuffer:
    def __init__(self, n_bins: int, n_slots: int, n_cand: int) -> None:
        self.n_bins = n_bins
        self.n = 0
        self.start = np.zeros(n_bins)
        self.sums = np.zeros((n_bins, N_FIELDS))
        self.stage_s = np.zeros((n_bins, n_slots))
        self.stage_gpu_s = np.zeros((n_bins, n_slots))  # per stage: seconds with GPU power known
        self.stage_gpu_ws = np.zeros((n_bins, n_slots))  # per stage: GPU energy (W·s)
        self.stage_mem_s = np.zeros((n_bins, n_slots))  # per stage: seconds with memory utilisation known
        self.stage_mem_ws = np.zeros((n_bins, n_slots))  # per stage: its integral (%·s)
        # per stage: the share of node time in it as hints say (JobEnergy.hinted_node_frac)
        self.node_frac = np.zeros((n_bins, n_slots))
        self.it_pred_w = np.zeros(n_bins)
        self.heat_w = np.zeros(n_bins)
        self.hl_w = np.zeros((n_bins, n_cand))
        self.cool_pred_w = np.zeros((n_bins, n_cand))
        self.gpu_exp_w = np.zeros(n_bins)
        self.transient = np.zeros(n_bins, dtype=bool)
        self.held = np.zeros((n_bins, len(LEARNED)), dtype=bool)  # per bin: LEARNED held by drift
        self.jobs: list[str] = [""] * n_bins
        self.gpu_lag_w = np.zeros(n_bins)

    def clear(self) -> None:
        self.n = 0

    def append(self, bins: BinBatch, a: int, b: int, p: Prediction, held: np.ndarray,
               node_frac: np.ndarray) -> None:
        """Bins ``a:b`` of ``bins``, the frozen model's prediction ``p`` for them, which learned
        components (``LEARNED``) the drift monitor held in each, and their per-node stage shares."""
        i, j = self.n, self.n + b - a
        if j > self.n_bins:
            raise ValueError(f"window buffer overflow: {j} bins > {self.n_bins}")
        self.start[i:j], self.sums[i:j], self.jobs[i:j] = bins.start[a:b], bins.sums[a:b], bins.job[a:b]
        self.stage_s[i:j], self.stage_gpu_s[i:j] = bins.stage_s[a:b], bins.stage_gpu_s[a:b]
        self.stage_gpu_ws[i:j], self.held[i:j] = bins.stage_gpu_ws[a:b], held
        self.stage_mem_s[i:j], self.stage_mem_ws[i:j] = bins.stage_mem_s[a:b], bins.stage_mem_ws[a:b]
        self.it_pred_w[i:j], self.heat_w[i:j], self.hl_w[i:j] = p.it_w, p.heat_w, p.hl_w.T
        self.cool_pred_w[i:j], self.gpu_exp_w[i:j] = p.cool_w.T, p.gpu_expected_w
        self.gpu_lag_w[i:j], self.transient[i:j] = p.gpu_lag_w, p.transient
        self.node_frac[i:j] = node_frac
        self.n = j

    def record(self, start: float, stage_name: Callable[[int], str], held: frozenset[str],
               predicted: tuple[np.ndarray, float | np.ndarray, float] | None) -> dict[str, Any]:
        """The window's report line (report-format.md) from its bins; ``start``: the window's grid start;
        ``predicted`` (once warm, GPU telemetry or not; else None): the selected cooling candidate's
        predictions per bin, the IT residual level (one, or per bin) and the cooling residual level."""
        n = self.n
        sums = self.sums[:n]
        dur = sums[:, F["dur_s"]]
        end = float(self.start[n - 1] + dur[-1])
        length = end - start
        tot = sums.sum(axis=0)
        rec: dict[str, Any] = {
            "type": "window",
            "start": start,
            "end": end,
            "measured_kwh": _kwh_or_none(tot, "fac", length),
            "predicted_kwh": None,
            "it_measured_kwh": _kwh_or_none(tot, "pdu", length),
            "it_predicted_kwh": None,
            "cooling_measured_kwh": _kwh_or_none(tot, "cool", length),
            "cooling_predicted_kwh": None,
            "coverage": float(min(max(tot[F["fac_s"]] / length, 0.0), 1.0)) if length > 0 else 0.0,
            "gpu_kwh": _kwh_or_none(tot, "gpu", length),
        }
        it_m, cool_m = rec["it_measured_kwh"], rec["cooling_measured_kwh"]
        gaps = tot[F["fac_s"]] < length
        if rec["measured_kwh"] is not None and gaps and it_m is not None and cool_m is not None:
            # gaps: each side extended over its own gaps uses more of the samples than the facility sum
            rec["measured_kwh"] = it_m + cool_m
        if predicted is not None:
            cool_w, bias_it, bias_cool = predicted
            it_kwh = float(((self.it_pred_w[:n] + bias_it) * dur).sum() / J_PER_KWH)
            cool_kwh = float(((cool_w[:n] + bias_cool) * dur).sum() / J_PER_KWH)
            rec.update(predicted_kwh=it_kwh + cool_kwh, it_predicted_kwh=it_kwh)
            rec["cooling_predicted_kwh"] = cool_kwh
            # the model alone, without the recent residual level: where a confirmed drift shows as a gap
            level_kwh = float(((bias_it + bias_cool) * dur).sum() / J_PER_KWH)
            rec["baseline_kwh"] = it_kwh + cool_kwh - level_kwh
        rec["stage"] = stage_name(int(np.argmax(self.stage_s[:n].sum(axis=0))))
        rec["transient_frac"] = round(float((dur * self.transient[:n]).sum() / max(length, 1e-9)), 3)
        if held:
            rec["held"] = sorted(held)
        return rec

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {
            "wb_n": np.array([float(self.n)]), "wb_start": self.start, "wb_sums": self.sums,
            "wb_stage_s": self.stage_s, "wb_it": self.it_pred_w, "wb_heat": self.heat_w, "wb_hl": self.hl_w,
            "wb_cool": self.cool_pred_w, "wb_gexp": self.gpu_exp_w, "wb_tr": self.transient,
            "wb_held": self.held, "wb_gl": self.gpu_lag_w, "wb_stage_gs": self.stage_gpu_s,
            "wb_stage_gws": self.stage_gpu_ws, "wb_node_frac": self.node_frac,
            "wb_stage_ms": self.stage_mem_s, "wb_stage_mws": self.stage_mem_ws,
        }

    def load_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        names = [str(n) for n in arrays.get("bin_fields", LEGACY_FIELDS[: arrays["wb_sums"].shape[-1]])]
        for key, arr in self.state_arrays().items():
            if key == "wb_sums":
                arr[...] = remap_fields(arrays[key], names)
            elif key == "wb_node_frac" and key not in arrays:  # saved before per-node stages
                dur = np.maximum(self.sums[:, F["dur_s"]], 1e-9)
                arr[...] = self.stage_s / dur[:, None]
            elif key in ("wb_stage_ms", "wb_stage_mws") and key not in arrays:  # saved before them
                arr[...] = 0.0
            elif key not in ("wb_n", "bin_fields"):
                arr[...] = arrays[key]
        self.n = int(arrays["wb_n"][0])
        self.jobs = [""] * self.n_bins


def _kwh_or_none(tot: np.ndarray, q: str, length_s: float) -> float | None:
    """Energy of quantity ``q`` over the window: the integral, extended over gaps at the mean known
    power (None if less than half of the window is known)."""
    ws, known_s = float(tot[F[f"{q}_ws"]]), float(tot[F[f"{q}_s"]])
    if length_s <= 0 or known_s < 0.5 * length_s:
        return None
    return ws * (length_s / known_s) / J_PER_KWH
