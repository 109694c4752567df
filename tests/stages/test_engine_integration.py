"""The engine uses the inferrer for unlabelled rows: segments say "inferred" and match the truth."""

from __future__ import annotations

import numpy as np

from agent.engine.engine import Engine
from agent.engine.frames import rack_info
from agent.sim.scenarios import make_scenario
from agent.sim.twin import scenario_truth, simulate, trace_meta


def _segments(hints: bool) -> tuple[list[dict], list[list]]:
    scenario = make_scenario("tide", 0.25, 21, hints=hints)
    meta = trace_meta(scenario)
    engine = Engine(rack=rack_info(meta), site=meta.site, rack_name=meta.rack)
    records: list[dict] = []
    for chunk in simulate(scenario):
        records += engine.process(chunk)
    records += engine.finish()
    return [r for r in records if r["type"] == "segment"], scenario_truth(scenario)["stage_segments"]


def _stage_at(segments: list, ts: np.ndarray, key_start: str | int, key_stage: str | int) -> np.ndarray:
    starts = np.array([s[key_start] for s in segments], dtype=float)
    names = np.array([s[key_stage] for s in segments], dtype=object)
    idx = np.clip(np.searchsorted(starts, ts, side="right") - 1, 0, len(starts) - 1)
    return names[idx]


def test_unlabelled_trace_gives_inferred_segments_that_match_the_truth() -> None:
    segments, truth = _segments(hints=False)
    assert segments and all(s["source"] == "inferred" for s in segments)
    ts = np.arange(truth[0][0], truth[-1][1], 1.0)
    got = _stage_at(segments, ts, "start", "stage")
    want = _stage_at(truth, ts, 0, 2)
    assert np.mean(got == want) >= 0.9
    labelled, _ = _segments(hints=True)
    assert all(s["source"] == "hint" for s in labelled)
