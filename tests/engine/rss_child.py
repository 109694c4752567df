"""Run the engine over one clock scenario and print the process's peak RSS (KiB) and a few counts.

``python rss_child.py SCENARIO``; run in a fresh subprocess by ``test_fixed_memory.py`` so every
scenario pays the same imports and its peak is its own. An address-space limit makes a
regression fail fast (MemoryError) instead of taking the machine's memory.
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import synth

from agent.engine import Engine, rack_info
from agent.trace.model import TraceChunk

DAY_S = 86400.0
YEAR_S = 365 * DAY_S
AS_LIMIT_BYTES = 3 << 30  # far above a normal run's few hundred MB of address space


def _shift(chunks: list[TraceChunk], from_row: int, by_s: float) -> list[TraceChunk]:
    """The same rows, those from ``from_row`` on moved ``by_s`` later."""
    out, seen = [], 0
    for c in chunks:
        idx = np.arange(seen, seen + len(c))
        out.append(TraceChunk(np.where(idx >= from_row, c.ts + by_s, c.ts), c.numeric, c.stage, c.job))
        seen += len(c)
    return out


def _first_ts(chunks: list[TraceChunk], ts: float) -> list[TraceChunk]:
    first = chunks[0]
    new_ts = first.ts.copy()
    new_ts[0] = ts
    return [TraceChunk(new_ts, first.numeric, first.stage, first.job), *chunks[1:]]


def main(scenario: str) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT_BYTES, AS_LIMIT_BYTES))
    chunks = synth.chunks(1.0, seed=8, row_s=10.0, chunk_rows=2000)
    rows = sum(len(c) for c in chunks)
    engine = Engine(None, rack_info(synth.meta()))
    if scenario == "first_row_2000":
        chunks = _first_ts(chunks, 960000000.0)  # 2000-06-03: then 2025
    elif scenario == "ts_0":
        chunks = _first_ts(chunks, 0.0)
    elif scenario == "year_jumps":  # two years earlier, then +1 year twice (the last stays in the past)
        chunks = _shift(_shift(_shift(chunks, 0, -2 * YEAR_S), rows // 3, YEAR_S), 2 * rows // 3, YEAR_S)
    elif scenario == "state_30_days_old":
        half = len(chunks) // 2
        for c in chunks[:half]:
            engine.process(c)
        engine = Engine.load_state(engine.save_state(), None, rack_info(synth.meta()))
        chunks = _shift(chunks[half:], 0, 30 * DAY_S)
    elif scenario != "normal":
        raise SystemExit(f"unknown scenario {scenario!r}")
    records = []
    for c in chunks:
        records += engine.process(c)
    records += engine.finish()
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    types = [r["type"] for r in records]
    print(
        json.dumps(
            {
                "peak_kib": peak_kib,
                "windows": types.count("window"),
                "gaps": types.count("gap"),
                "bad_ts_rows": engine.rows.times.bad_ts_rows,
                "rewarms": engine.rewarms,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
