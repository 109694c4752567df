"""A closed window's bins as the response model's learning reads them, and the per-bin means it uses.

Split from ``model.py`` (which predicts and learns) so that module keeps one job; nothing here
holds state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agent.engine.signals import FEED_GPU, F
from agent.engine.window_buffer import WindowBuffer

KNOWN_FRAC = 0.9  # a bin teaches a model only if its inputs were known ≥ 90 % of the bin


def bin_mean(sums: np.ndarray, q: str) -> np.ndarray:
    """Per bin, the mean of quantity ``q`` while known (nan/inf where never known)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        out: np.ndarray = sums[:, F[f"{q}_ws"]] / sums[:, F[f"{q}_s"]]
    return out


def gpu_moments(sums: np.ndarray) -> np.ndarray:
    """Per bin, the GPU power's first three moments while known (the IT model's g, g², g³)."""
    moments = np.stack([sums[:, F["gpu_ws"]], sums[:, F["gpu2_ws"]], sums[:, F["gpu3_ws"]]], axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(moments / sums[:, F["gpu_s"], None])


def feed_seen_dev(sums: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Per bin (n × 2), how far the GPU load's 1st and 2nd moments at the PDU feeds' sampling
    instants (feed_load.py) are from the bin's own ``g``: what the held PDU readings saw beyond the
    bin's mean; 0 where no feed sample met a known GPU load."""
    n_seen = sums[:, F[f"{FEED_GPU}_s"]]
    moments = np.stack([sums[:, F[f"{FEED_GPU}{p}_ws"]] for p in ("", "2")], axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        dev = moments / n_seen[:, None] - g[:, :2]
    out: np.ndarray = np.where((n_seen[:, None] > 0) & np.isfinite(dev), dev, 0.0)
    return out


def bin_work_rate(sums: np.ndarray) -> np.ndarray:
    """Each bin's mean reported work rate (nan where none was reported)."""
    known = sums[:, F["wr_s"]] > 0
    out: np.ndarray = np.where(known, sums[:, F["wr_ws"]] / np.maximum(sums[:, F["wr_s"]], 1e-9), np.nan)
    return out


@dataclass(frozen=True)
class ClosedWindow:
    """A closed window's bins as learning reads them: sums, lengths, stage fractions, means."""

    n: int
    sums: np.ndarray
    dur: np.ndarray  # s per bin (never 0)
    length_h: float
    frac: np.ndarray  # (n, S) share of each bin per stage slot
    w_h: np.ndarray  # a bin's weight: its length in hours
    gpu_ok: np.ndarray  # GPU power known for ≥ KNOWN_FRAC of the bin
    gpu_mean: np.ndarray
    pdu_mean: np.ndarray
    cool_mean: np.ndarray
    it_ok: np.ndarray  # PDU power known for ≥ KNOWN_FRAC of the bin
    cool_ok: np.ndarray  # cooling power known for ≥ KNOWN_FRAC of the bin
    g: np.ndarray  # (n, 3) GPU power moments, 0 where never known
    seen_dev: np.ndarray  # (n, 2) what the PDU feeds' samples saw beyond them (feed_seen_dev)
    wr: np.ndarray  # mean work rate
    wr_ok: np.ndarray  # work rate known for ≥ KNOWN_FRAC of the bin

    @staticmethod
    def of(wb: WindowBuffer) -> ClosedWindow:
        """Everything learning reads, computed once per window (the main and the shadow fits share it)."""
        n = wb.n
        sums = wb.sums[:n]
        dur = np.maximum(sums[:, F["dur_s"]], 1e-9)
        frac, gpu_ok = wb.stage_s[:n] / dur[:, None], sums[:, F["gpu_s"]] >= KNOWN_FRAC * dur
        means = (bin_mean(sums, "gpu"), bin_mean(sums, "pdu"), bin_mean(sums, "cool"))
        it_ok, cool_ok = sums[:, F["pdu_s"]] >= KNOWN_FRAC * dur, sums[:, F["cool_s"]] >= KNOWN_FRAC * dur
        wr = bin_mean(sums, "wr")
        wr_ok = (sums[:, F["wr_s"]] >= KNOWN_FRAC * dur) & np.isfinite(wr)
        g = np.nan_to_num(gpu_moments(sums))
        return ClosedWindow(n, sums, dur, float(dur.sum()) / 3600.0, frac, dur / 3600.0, gpu_ok, *means,
                            it_ok, cool_ok, g, feed_seen_dev(sums, g), wr, wr_ok)
