"""Fixed memory: the persisted state and the per-day allocation peak do not grow with uptime."""

from __future__ import annotations

import gc
import tracemalloc

import pytest
import synth
from conftest import run_engine

from agent.engine import Engine, rack_info


@pytest.mark.slow
def test_state_size_and_memory_peak_do_not_grow_from_1_to_30_days() -> None:
    eng = Engine(None, rack_info(synth.meta()))
    # coarse rows (30 s) keep the test fast; the engine's bins, windows and models are the same
    days = synth.iter_chunks(30, seed=4, row_s=30.0, chunk_rows=2880)  # one chunk = one day
    sizes: dict[int, int] = {}
    peaks: dict[int, int] = {}
    held: dict[int, int] = {}
    for day, chunk in enumerate(days, start=1):
        traced = day in (2, 30)  # day 1 also pays one-time imports and table setup
        if traced:  # tracemalloc slows Python a lot: trace only the days compared
            gc.collect()
            tracemalloc.start()
            base = tracemalloc.get_traced_memory()[0]
        run_engine([chunk], engine=eng, finish=False)
        if traced:
            current, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            peaks[day], held[day] = peak - base, current - base
        if day in (1, 30):
            sizes[day] = len(eng.save_state())
    assert sizes[1] == sizes[30]
    assert abs(peaks[30] - peaks[2]) <= 0.05 * peaks[2] + 64 * 1024, peaks
    assert held[30] <= held[2] + 64 * 1024, held  # nothing accumulates from one day to the next
