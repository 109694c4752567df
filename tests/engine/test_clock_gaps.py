"""Timestamps the engine refuses (``RowTimes``) and gaps it restarts after (``RowBinner``/``Engine``)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import synth
from conftest import run_engine

from agent.engine import Engine, rack_info
from agent.engine.row_times import FIRST_LINES_KEPT, MAX_AHEAD_S, TS_FLOOR_S, RowTimes
from agent.trace.model import TraceChunk

NOW = 1_780_000_000.0


def _chunk(ts: list[float], first_line: int = 10) -> TraceChunk:
    n = len(ts)
    blank = np.full(n, "", dtype=object)
    return TraceChunk(
        np.array(ts, dtype=float), {"x": np.arange(n, dtype=float)}, blank, blank.copy(), first_line
    )


def test_row_times_refuses_impossible_and_backward_rows_naming_their_lines() -> None:
    times = RowTimes(wall_clock=lambda: NOW)
    ts = [
        0.0,
        TS_FLOOR_S - 1,
        math.nan,
        math.inf,
        NOW + MAX_AHEAD_S + 1,
        NOW - 100,
        NOW - 100,
        NOW - 200,
        NOW - 50,
    ]
    kept = times.admit(_chunk(ts), math.nan)
    assert list(kept.ts) == [NOW - 100, NOW - 50]
    assert list(kept.numeric["x"]) == [5.0, 8.0]  # the values travel with their rows
    assert times.bad_ts_rows == 5 and times.bad_ts_lines == [10, 11, 12, 13, 14]
    assert times.out_of_order_rows == 2 and times.out_of_order_lines == [16, 17]
    # the next chunk is judged against the last admitted row; live rows (no file line) are counted only
    times.admit(_chunk([NOW - 60, NOW - 40], first_line=0), NOW - 50)
    assert times.out_of_order_rows == 3 and times.out_of_order_lines == [16, 17]


def test_row_times_keeps_a_fixed_number_of_lines_and_survives_a_state_round_trip() -> None:
    times = RowTimes(wall_clock=lambda: NOW)
    times.admit(_chunk([1.0] * 1000), math.nan)
    assert times.bad_ts_rows == 1000 and len(times.bad_ts_lines) == FIRST_LINES_KEPT
    again = RowTimes()
    again.load(times.state())
    assert again.state() == times.state()
    again.load({"bad_ts_rows": "x", "bad_ts_lines": "y"})  # a damaged state reads as zero, not a crash
    assert again.bad_ts_rows == 0 and again.bad_ts_lines == []


def _shifted(chunks: list[TraceChunk], at_s: float, by_s: float) -> list[TraceChunk]:
    out = []
    for c in chunks:
        ts = np.where(c.ts - synth.T0 >= at_s, c.ts + by_s, c.ts)
        out.append(TraceChunk(ts, c.numeric, c.stage, c.job))
    return out


@pytest.fixture(scope="module")
def ten_hours() -> list[TraceChunk]:
    return synth.chunks(10 / 24, seed=21, chunk_rows=1500)


def test_a_gap_closes_what_is_open_is_marked_and_starts_again(
    ten_hours: list[TraceChunk],
) -> None:
    gap_at, gap_s = 8 * 3600.0 + 123.0, 6 * 3600.0  # mid-window, longer than 4 windows
    eng, recs = run_engine(_shifted(ten_hours, gap_at, gap_s))
    (gap,) = [r for r in recs if r["type"] == "gap"]
    assert gap["start"] < synth.T0 + gap_at <= gap["end"] and gap["end"] - gap["start"] > gap_s
    wins = [r for r in recs if r["type"] == "window"]
    assert all(w["end"] <= gap["start"] + 1e-6 or w["start"] >= gap["start"] for w in wins)  # none spans it
    assert [w for w in wins if w["start"] >= gap["end"]], "the data after the gap is still reported"
    segs = [r for r in recs if r["type"] == "segment"]
    for a, b in itertools.pairwise(segs):  # segments tile the trace except for the gap itself
        assert a["end"] == b["start"] or (a["end"] == gap["start"] and b["start"] == gap["end"])
    after = [w for w in wins if w["start"] >= gap["end"]]
    assert all(w["predicted_kwh"] is not None for w in after)  # 6 h < max_state_age_h: still warm
    assert eng.rewarms == 0 and recs[-1]["payload"]["hygiene"]["gaps"] == 1


def test_a_gap_longer_than_max_state_age_re_warms(ten_hours: list[TraceChunk]) -> None:
    eng, recs = run_engine(_shifted(ten_hours, 8 * 3600.0, 8 * 86400.0))
    (gap,) = [r for r in recs if r["type"] == "gap"]
    wins = [r for r in recs if r["type"] == "window"]
    before = [w for w in wins if w["end"] <= gap["start"]]
    after = [w for w in wins if w["start"] >= gap["end"]]
    assert before[-1]["predicted_kwh"] is not None  # warm before the gap …
    assert after and all(w["predicted_kwh"] is None for w in after)  # … warming up again after it
    assert eng.rewarms == 1 and not eng.warm
    seqs = [r["payload"]["seq"] for r in recs if r["type"] == "summary"]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)  # seq goes on: subscribers dedup on it


def test_a_restored_state_older_than_max_state_age_re_warms(ten_hours: list[TraceChunk]) -> None:
    first = [c for c in ten_hours if c.ts[0] - synth.T0 < 8 * 3600.0]
    eng, _ = run_engine(first)
    assert eng.warm
    restored = Engine.load_state(eng.save_state(), None, rack_info(synth.meta()))
    later = _shifted(ten_hours[len(first) :], 0.0, 30 * 86400.0)
    eng2, recs = run_engine(later, engine=restored)
    assert [r["type"] for r in recs].count("gap") == 1 and eng2.rewarms == 1
    assert eng2.seq > eng.seq
