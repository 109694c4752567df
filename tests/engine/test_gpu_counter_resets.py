"""Per-bin evidence of GPU energy-counter resets (a driver reload): the right bin, any chunking."""

from __future__ import annotations

from typing import Any

import numpy as np
import synth
from conftest import run_engine

from agent.engine import Engine, rack_info
from agent.engine.components import ComponentSample
from agent.trace.model import TraceChunk

ROW_S = 2.0
# (seconds after T0, GPUs whose counter resets in that row): mid-bin, two GPUs in one row; a row
# exactly on a drift-bin edge (its interval ends there: the bin ending at it owns the reset); and
# all four GPUs of a driver reload, the last one a row later.
RESETS: tuple[tuple[float, tuple[int, ...]], ...] = (
    (1810.0, (0, 2)),
    (2400.0, (1,)),
    (3010.0, (0, 1, 2)),
    (3012.0, (3,)),
)


class _Recording(Engine):
    """The real engine, keeping every drift-bin sample it builds."""

    def __init__(self) -> None:
        super().__init__(None, rack_info(synth.meta()), site="st", rack_name="rt")
        self.samples: list[ComponentSample] = []

    def _drift_bin(self, sl: slice) -> list[dict[str, Any]]:
        out = super()._drift_bin(sl)
        if self.last_sample is not None:
            self.samples.append(self.last_sample)
        return out


def _with_counters(chunks: list[TraceChunk]) -> list[TraceChunk]:
    """Add cumulative ``gpu.<i>.energy_j`` columns that restart from 0 at the rows in RESETS."""
    ts = np.concatenate([c.ts for c in chunks])
    n_gpu = 4
    power = np.stack([np.concatenate([c.numeric[f"gpu.{g}.power_w"] for c in chunks]) for g in range(n_gpu)])
    energy = np.cumsum(power * ROW_S, axis=1) + 5e8
    for offset, gpus in RESETS:
        i = int(np.searchsorted(ts, synth.T0 + offset))
        for g in gpus:
            energy[g, i:] -= energy[g, i]
    out, a = [], 0
    for c in chunks:
        b = a + len(c)
        numeric = dict(c.numeric)
        for g in range(n_gpu):
            numeric[f"gpu.{g}.energy_j"] = energy[g, a:b].copy()
        out.append(TraceChunk(ts=c.ts, numeric=numeric, stage=c.stage, job=c.job))
        a = b
    return out


def _resets_by_bin(chunks: list[TraceChunk]) -> dict[float, int]:
    eng = _Recording()
    run_engine(chunks, engine=eng)
    return {s.ts - synth.T0: s.gpu_counter_resets for s in eng.samples if s.gpu_counter_resets}


def test_counter_resets_land_in_their_own_bin_whatever_the_chunking() -> None:
    base = _with_counters(synth.chunks(1.5 / 24, seed=4, chunk_rows=1500))
    expected = {1860.0: 2, 2400.0: 1, 3060.0: 4}  # drift bins end every 60 s after T0
    assert _resets_by_bin(base) == expected
    assert _resets_by_bin(synth.rechunk(base, 7)) == expected  # live-sized ticks
    assert _resets_by_bin([TraceChunk.concat(base)]) == expected  # one replay chunk


def test_a_sample_without_the_field_still_builds() -> None:
    sample = ComponentSample(1.0, 60.0, "", "hint", "", False, *([float("nan")] * 11))
    assert sample.gpu_counter_resets == 0



def _with_reset_counts(chunks: list[TraceChunk]) -> list[TraceChunk]:
    """What a reset-safe driver (NVML, dcgm-exporter) records: ``energy_j`` keeps rising and
    ``gpu.<i>.energy_resets`` counts the resets it absorbed (3 before the trace: history)."""
    ts = np.concatenate([c.ts for c in chunks])
    counts = np.full((4, ts.size), 3.0)
    for offset, gpus in RESETS:
        i = int(np.searchsorted(ts, synth.T0 + offset))
        for g in gpus:
            counts[g, i:] += 1.0
    counts[1, 100:110] = np.nan  # missed polls carry no count: they neither reset nor hide one
    out, a = [], 0
    for c in chunks:
        b = a + len(c)
        numeric = dict(c.numeric) | {f"gpu.{g}.energy_resets": counts[g, a:b].copy() for g in range(4)}
        out.append(TraceChunk(ts=c.ts, numeric=numeric, stage=c.stage, job=c.job))
        a = b
    return out


def test_a_reset_safe_drivers_reset_count_is_a_reset_whatever_the_chunking() -> None:
    base = _with_reset_counts(synth.chunks(1.5 / 24, seed=4, chunk_rows=1500))
    expected = {1860.0: 2, 2400.0: 1, 3060.0: 4}
    assert _resets_by_bin(base) == expected
    assert _resets_by_bin(synth.rechunk(base, 7)) == expected
    assert _resets_by_bin([TraceChunk.concat(base)]) == expected
