"""The GPU load as the PDU feeds' samples see it (agent/engine/feed_load.py).

A rack whose training steps last exactly one PDU poll interval is the worst case of held samples: each
feed reads the same phase of every step, so its window energy is off the true one by tens of %. The
IT model, regressed and predicted on the GPU load at the feeds' own instants, must follow what the
feeds measure; the instants are the samples' times, never their values (causality); the chunking of
the rows must not change it; a metered feed saw every second.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import synth

from agent.config.model import EngineSection
from agent.engine import Engine, rack_info
from agent.engine.rows import RowBinner
from agent.engine.signals import FEED_GPU, F
from agent.engine.state import pack, unpack
from agent.trace.model import J_PER_KWH, TraceChunk, TraceMeta

N_GPU = 4
STEP_S = 8  # one training step: 5 s of compute, 3 s of communication; the feeds are polled every 8 s
HIGH_W, LOW_W = 650.0, 250.0
BASE_W = 900.0  # the nodes' own power beside the GPUs
T0 = 1_750_000_000.0


def _rack_power(gpu_w: np.ndarray) -> np.ndarray:
    """True PDU power of the rack: base, PSU losses convex in the load."""
    return BASE_W + 1.05 * gpu_w + 2e-5 * gpu_w**2


def _trace(hours: float, phase_s: int = 1, meter: bool = False) -> tuple[list[TraceChunk], np.ndarray]:
    """1 Hz rows; GPU power a square wave of period STEP_S whose compute level wanders over hours;
    two feeds, each polled every STEP_S s at ``phase_s`` and ``phase_s`` + 2 (both inside the
    compute part for phases 0–2), a 0.1 Wh meter each when ``meter``. Returns the chunks (one per
    hour) and the true PDU power per row."""
    n = int(hours * 3600)
    t = np.arange(n)
    scale = 0.75 + 0.25 * np.sin(2 * math.pi * t / 5400.0)  # the load wanders: the fit has a range
    per_gpu = np.where(t % STEP_S < 5, HIGH_W * scale, LOW_W)
    gpu_total = N_GPU * per_gpu
    true_w = _rack_power(gpu_total)
    numeric: dict[str, np.ndarray] = {f"gpu.{i}.power_w": per_gpu.copy() for i in range(N_GPU)}
    energy = np.cumsum(true_w / 2.0) / J_PER_KWH  # each feed carries half the rack
    for feed, offset in (("a", phase_s), ("b", phase_s + 2)):
        polled = t % STEP_S == offset % STEP_S
        numeric[f"pdu.{feed}.power_w"] = np.where(polled, np.round(true_w / 2.0), np.nan)
        if meter:
            numeric[f"pdu.{feed}.energy_kwh"] = np.where(polled, np.floor(energy * 1e4) / 1e4, np.nan)
    ts = T0 + t.astype(float)
    chunks = []
    for a in range(0, n, 3600):
        sl = slice(a, min(n, a + 3600))
        chunks.append(TraceChunk(ts=ts[sl], numeric={k: v[sl] for k, v in numeric.items()},
                                 stage=np.full(sl.stop - sl.start, "forward_backward", dtype=object),
                                 job=np.full(sl.stop - sl.start, "j1", dtype=object)))
    return chunks, true_w


def _meta() -> TraceMeta:
    return TraceMeta(rack="rf", site="sf", crac_shares={}, interval_s=1.0)


def _bins(chunks: list[TraceChunk]) -> np.ndarray:
    """Every completed bin's sums, the rows pushed as given."""
    def classify(c: TraceChunk) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = len(c)
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)

    binner = RowBinner(rack_info(_meta()), 60.0, 7, 30.0, classify, window_s=900.0)
    out = []
    for i, c in enumerate(chunks):
        for stretch in binner.push(c, flush=i == len(chunks) - 1):
            out.append(stretch.bins.sums[:, : len(F)])
    return np.concatenate(out)


def _mean(sums: np.ndarray, stem: str) -> np.ndarray:
    return np.asarray(sums[:, F[f"{stem}_ws"]] / sums[:, F[f"{stem}_s"]])


def test_the_feeds_see_the_gpu_load_at_their_own_instants() -> None:
    chunks, _ = _trace(0.5)
    sums = _bins(chunks)[2:]  # the first bins wait for both feeds' first samples
    seen = _mean(sums, FEED_GPU) / N_GPU
    own = _mean(sums, "gpu") / N_GPU
    # both feeds read the compute part (HIGH_W × scale); the GPUs' own mean is 5/8 of the way there
    assert np.all(seen - own > 50.0)
    t = np.arange(len(sums)) * 60.0 + 150.0  # around each bin's middle (the first two skipped)
    high = HIGH_W * (0.75 + 0.25 * np.sin(2 * math.pi * t / 5400.0))
    assert seen == pytest.approx(high, rel=0.02)
    # the 2nd moment is the feeds' too: the square of what they read, not the GPUs' mean square
    second = sums[:, F[f"{FEED_GPU}2_ws"]] / sums[:, F[f"{FEED_GPU}_s"]] / N_GPU**2
    assert second == pytest.approx(high**2, rel=0.04)


def test_chunking_does_not_change_what_the_feeds_saw() -> None:
    chunks, _ = _trace(0.5)
    whole = _bins([TraceChunk.concat(chunks)])
    rows = TraceChunk.concat(chunks)
    odd = [rows.take(slice(a, min(len(rows), a + 37))) for a in range(0, len(rows), 37)]
    pieces = _bins(odd)
    n = min(len(whole), len(pieces))
    stems = [F[f"{FEED_GPU}{p}_ws"] for p in ("", "2")] + [F[f"{FEED_GPU}_s"]]
    assert np.allclose(whole[:n, stems], pieces[:n, stems], rtol=1e-9)


def test_a_metered_feed_saw_every_second() -> None:
    chunks, _ = _trace(0.5, meter=True)
    sums = _bins(chunks)[3:]
    # (rel 1e-3: the seconds before a window's end that no meter span closes inside keep their
    # held sample, as the feed's power does: meter_power.py)
    assert _mean(sums, FEED_GPU) == pytest.approx(_mean(sums, "gpu"), rel=1e-3)
    exact = np.isclose(_mean(sums, FEED_GPU), _mean(sums, "gpu"), rtol=1e-9)
    assert exact.mean() > 0.8


def _windows(chunks: list[TraceChunk]) -> list[dict[str, Any]]:
    eng = Engine(EngineSection(window_s=900.0), rack_info(_meta()), site="sf", rack_name="rf")
    out: list[dict[str, Any]] = []
    for c in chunks:
        out += eng.process(c)
    out += eng.finish()
    return [r for r in out if r["type"] == "window" and r["predicted_kwh"] is not None]


@pytest.fixture(scope="module")
def strobe() -> tuple[list[TraceChunk], np.ndarray, list[dict[str, Any]]]:
    chunks, true_w = _trace(8.0, phase_s=1)
    return chunks, true_w, _windows(chunks)


def test_the_prediction_follows_what_the_feeds_measure(strobe: Any) -> None:
    """Feeds that read the compute part of every step measure a window far (> 5 %) from its true
    energy; the forecast follows the measurement (within 1 %), not the truth."""
    _, true_w, wins = strobe
    late = [w for w in wins if w["start"] >= T0 + 5 * 3600]  # the IT fit has settled (2 h warm-up + 3 h)
    assert len(late) >= 10
    for w in late:
        i0, i1 = int(w["start"] - T0), int(w["end"] - T0)
        true_kwh = float(true_w[i0:i1].sum()) / J_PER_KWH
        off = abs(w["measured_kwh"] - true_kwh) / true_kwh
        err = abs(w["predicted_kwh"] - w["measured_kwh"]) / w["measured_kwh"]
        assert err < 0.01 and off > 0.05


def test_pdu_values_inside_a_window_do_not_move_its_prediction(strobe: Any) -> None:
    chunks, _, wins = strobe
    target = next(w for w in wins if w["start"] >= T0 + 4 * 3600)
    changed = _windows(synth.scale_facility_inside(chunks, target["start"], target["end"], 1.3))
    again = next(w for w in changed if w["start"] == target["start"])
    assert again["measured_kwh"] != target["measured_kwh"]
    assert again["predicted_kwh"] == target["predicted_kwh"]


def test_a_state_saved_before_the_feeds_view_loads_with_it_off() -> None:
    """The previous build's IT regression had no columns for the feeds' view: its state loads, the
    two new coefficients start at 0 (the feeds seeing the bins' means: that build's own model), the
    others are kept, and the engine goes on predicting."""
    from agent.engine.response import IT_SEEN_COLUMNS

    chunks, _ = _trace(4.0)
    eng = Engine(EngineSection(window_s=900.0), rack_info(_meta()), site="sf", rack_name="rf")
    for c in chunks[:3]:
        eng.process(c)
    arrays = unpack(eng.save_state())
    old = dict(arrays)
    for key in [k for k in arrays if k.startswith(("it_", "shadow_it0_")) and not k.endswith("weight")]:
        arr = np.delete(arrays[key], IT_SEEN_COLUMNS, axis=-1)
        old[key] = np.delete(arr, IT_SEEN_COLUMNS, axis=-2) if key.endswith("_R") else arr
    loaded = Engine.load_state(pack(old), EngineSection(window_s=900.0), rack_info(_meta()))
    theta = loaded.model.it.theta[0]
    assert np.all(theta[IT_SEEN_COLUMNS] == 0.0)
    kept = np.delete(arrays["it_theta"][0], IT_SEEN_COLUMNS)
    assert np.array_equal(np.delete(theta, IT_SEEN_COLUMNS), kept)
    wins = [r for r in loaded.process(chunks[3]) if r["type"] == "window"]
    assert wins and all(w["predicted_kwh"] is not None for w in wins)
