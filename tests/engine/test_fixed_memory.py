"""Fixed memory: the persisted state and the per-day allocation peak do not grow with uptime."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
import synth
from conftest import run_engine

from agent.engine import Engine, rack_info

LAST_DAY = 14


@pytest.mark.slow
def test_state_size_and_memory_peak_do_not_grow_from_1_to_14_days() -> None:
    eng = Engine(None, rack_info(synth.meta()))
    # coarse rows (30 s) keep the test fast; the engine's bins, windows and models are the same.
    # 14 days is over 4 x the longest horizon any engine state keeps (the cooling unit's weather
    # fit, a 3-day half-life): whatever grows with uptime has grown by the last day compared.
    days = synth.iter_chunks(LAST_DAY, seed=4, row_s=30.0, chunk_rows=2880)  # one chunk = one day
    sizes: dict[int, int] = {}
    peaks: dict[int, int] = {}
    held: dict[int, int] = {}
    for day, chunk in enumerate(days, start=1):
        traced = day in (2, LAST_DAY)  # day 1 also pays one-time imports and table setup
        if traced:  # tracemalloc slows Python a lot: trace only the days compared
            gc.collect()
            tracemalloc.start()
            base = tracemalloc.get_traced_memory()[0]
        run_engine([chunk], engine=eng, finish=False)
        if traced:
            current, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            peaks[day], held[day] = peak - base, current - base
        if day in (1, LAST_DAY):
            sizes[day] = len(eng.save_state())
    assert sizes[1] == sizes[LAST_DAY]
    assert abs(peaks[LAST_DAY] - peaks[2]) <= 0.05 * peaks[2] + 64 * 1024, peaks
    assert held[LAST_DAY] <= held[2] + 64 * 1024, held  # nothing accumulates from one day to the next


CHILD = Path(__file__).resolve().parent / "rss_child.py"


def _child(scenario: str) -> dict[str, int]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(CHILD), scenario],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, f"{scenario}: {proc.stderr[-2000:]}"
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
def test_any_clock_runs_in_the_memory_of_a_normal_run() -> None:
    """First row from 2000, a ts of 0, two +1 year jumps, a state saved 30 days before the data:
    each a discontinuity or a refused row, never an allocation for the time in between (issue 18:
    23.9 GiB for ts 0, 3.1 GB for one +1 year jump, 290 MB instead of 37 MB for the old state)."""
    normal = _child("normal")
    runs = {s: _child(s) for s in ("first_row_2000", "ts_0", "year_jumps", "state_30_days_old")}
    for scenario, got in runs.items():
        assert got["peak_kib"] <= 1.10 * normal["peak_kib"], (scenario, got, normal)
    assert runs["ts_0"]["bad_ts_rows"] == 1 and runs["ts_0"]["gaps"] == 0
    assert runs["first_row_2000"]["gaps"] == 1
    assert runs["year_jumps"]["gaps"] == 2 and runs["year_jumps"]["bad_ts_rows"] == 0
    assert runs["state_30_days_old"]["gaps"] == 1 and runs["state_30_days_old"]["rewarms"] == 1
    for got in runs.values():  # the data after each discontinuity is still reported, window by window
        assert got["windows"] >= normal["windows"] // 2 - 2
