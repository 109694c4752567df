"""PDU energy meters (agent/engine/meter_power.py): a feed polled every 27 s measures its window
energy from the meter, not from aliased instantaneous samples; a coarse meter is not trusted; no
meter span reaches into the next window; ticks and chunks give the same values."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import synth

from agent.config.model import EngineSection
from agent.engine import Engine, rack_info
from agent.sim.randomize import random_multijob_scenario
from agent.sim.twin import simulate_hours, trace_meta
from agent.trace.model import J_PER_KWH, TraceChunk

HOURS = 4.0
WINDOW_S = 900.0


@pytest.fixture(scope="module")
def twin_rack() -> tuple[Any, list[TraceChunk], np.ndarray, np.ndarray]:
    """Dev seed 1 of the multijob family: PDU feeds polled every 27 s, a 1 Wh energy meter each.
    Returns the trace meta, its hourly chunks (GPU power kept, other GPU columns dropped for speed),
    and the true PDU power per second with its timestamps."""
    sc = random_multijob_scenario(1, days=HOURS / 24, nodes=8, per_node=8, jobs=2)
    assert sc.rack.sampling.pdu_interval_s >= 20  # the case the meter is for
    chunks, truth, ts = [], [], []
    for chunk, clean in simulate_hours(sc):
        keep = {k: v for k, v in chunk.numeric.items() if not k.startswith("gpu.") or k.endswith(".power_w")}
        chunks.append(TraceChunk(ts=chunk.ts, numeric=keep, stage=chunk.stage, job=chunk.job))
        truth.append(clean["pdu_power_w"].sum(axis=1))
        ts.append(chunk.ts)
    return trace_meta(sc), chunks, np.concatenate(ts), np.concatenate(truth)


def _run(meta: Any, chunks: list[TraceChunk]) -> list[dict[str, Any]]:
    eng = Engine(EngineSection(window_s=WINDOW_S), replace(rack_info(meta)), site="s", rack_name="r")
    out: list[dict[str, Any]] = []
    for c in chunks:
        out += eng.process(c)
    out += eng.finish()
    return [r for r in out if r["type"] == "window" and r["end"] - r["start"] >= WINDOW_S - 1e-6]


def _edit(chunks: list[TraceChunk], fn: Any) -> list[TraceChunk]:
    out = copy.deepcopy(chunks)
    for c in out:
        for name in list(c.numeric):
            if name.startswith("pdu.") and name.endswith(".energy_kwh"):
                fn(c, name)
    return out


def _errors_pct(wins: list[dict[str, Any]], ts: np.ndarray, truth_w: np.ndarray) -> np.ndarray:
    out = []
    for w in wins:
        sel = (ts >= w["start"]) & (ts < w["end"])
        true_kwh = truth_w[sel].sum() / J_PER_KWH  # 1-s rows
        out.append(abs(w["it_measured_kwh"] / true_kwh - 1) * 100)
    return np.array(out)


def test_the_meter_measures_window_energy_that_instantaneous_samples_alias(twin_rack) -> None:
    meta, chunks, ts, truth_w = twin_rack
    with_meter = _errors_pct(_run(meta, chunks), ts, truth_w)

    def drop(c: TraceChunk, name: str) -> None:
        del c.numeric[name]

    samples_only = _errors_pct(_run(meta, _edit(chunks, drop)), ts, truth_w)
    # the windows left with sampled power: the first ones (the meter's step is not known yet) and the
    # stretches at each window's end after its last meter reading
    assert np.median(with_meter) < 0.15 and with_meter.max() < 1.5, with_meter
    assert np.median(samples_only) > 5 * np.median(with_meter), (samples_only, with_meter)


def test_a_coarse_meter_is_not_trusted(twin_rack) -> None:
    """A 0.1 kWh meter (two steps ≈ 8 % of a feed's window energy here) leaves the power samples."""
    meta, chunks, _, _ = twin_rack

    def coarse(c: TraceChunk, name: str) -> None:
        c.numeric[name] = np.floor(c.numeric[name] * 10.0) / 10.0

    def drop(c: TraceChunk, name: str) -> None:
        del c.numeric[name]

    a, b = _run(meta, _edit(chunks, coarse)), _run(meta, _edit(chunks, drop))
    assert [w["it_measured_kwh"] for w in a] == [w["it_measured_kwh"] for w in b]


def test_no_meter_span_reaches_into_the_next_window(twin_rack) -> None:
    """Meter readings inside window k change neither window k-1's measurement (what the model
    learns before predicting window k) nor window k's prediction."""
    meta, chunks, _, _ = twin_rack
    base = _run(meta, chunks)
    k = 8
    t_a, t_b = base[k]["start"], base[k]["end"]

    def bump(c: TraceChunk, name: str) -> None:
        inside = (c.ts >= t_a) & (c.ts < t_b)
        c.numeric[name] = np.where(inside, c.numeric[name] + 0.05 * (c.ts - t_a) / 900.0, c.numeric[name])

    moved = _run(meta, _edit(chunks, bump))
    assert moved[k]["it_measured_kwh"] != base[k]["it_measured_kwh"]  # the readings were used
    assert moved[k - 1]["it_measured_kwh"] == base[k - 1]["it_measured_kwh"]
    assert moved[k]["predicted_kwh"] == base[k]["predicted_kwh"]


def test_ticks_and_chunks_give_the_same_meter_energy(twin_rack) -> None:
    meta, chunks, _, _ = twin_rack
    one_hour = chunks[:1]  # four windows: enough meter spans cut by 7-row chunks at every offset
    big = _run(meta, one_hour)
    small = _run(meta, synth.rechunk(one_hour, 7))
    assert len(big) == len(small) >= 3
    for a, b in zip(big, small, strict=True):
        assert b["it_measured_kwh"] == pytest.approx(a["it_measured_kwh"], rel=1e-9)
