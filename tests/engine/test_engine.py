"""The engine end to end on the cheap synthetic rack (tests/engine/synth.py)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from typing import Any, ClassVar

import numpy as np
import pytest
import synth
from conftest import run_engine

from agent.engine import Engine, rack_info
from agent.engine.response import TAUS_S


def _windows(recs: list[dict]) -> list[dict]:
    return [r for r in recs if r["type"] == "window"]


def test_report_lines_validate_against_the_spec(
    synth_8h_run: tuple[Engine, list[dict]], spec_dir: Any
) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(json.loads((spec_dir / "report.schema.json").read_text()))
    _, recs = synth_8h_run
    kinds = {r["type"] for r in recs}
    assert {"window", "segment", "summary"} <= kinds
    for rec in recs:
        line = json.dumps(rec, allow_nan=False)  # no NaN may reach the report
        errors = list(validator.iter_errors(json.loads(line)))
        assert not errors, (rec, errors[0].message)


def test_payloads_validate_against_their_schemas(synth_8h_run: tuple[Engine, list[dict]]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from conftest import Path

    schemas = Path(__file__).resolve().parents[2] / "agent" / "schemas"
    summary = jsonschema.Draft202012Validator(json.loads((schemas / "summary.schema.json").read_text()))
    baseline = jsonschema.Draft202012Validator(json.loads((schemas / "baseline.schema.json").read_text()))
    eng, recs = synth_8h_run
    payload = eng.summary_payload(eng.last_ts, seq=42)
    assert payload["seq"] == 42 and payload["v"] == 1
    summary.validate(json.loads(json.dumps(payload, allow_nan=False)))
    per_stage = eng.baseline_payloads(eng.last_ts, seq=43)
    assert "forward_backward" in per_stage
    for p in per_stage.values():
        baseline.validate(json.loads(json.dumps(p, allow_nan=False)))
    seqs = [r["payload"]["seq"] for r in recs if r["type"] == "summary"]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_warm_up_ends_within_6h_and_windows_are_predicted(synth_8h_run: tuple[Engine, list[dict]]) -> None:
    _, recs = synth_8h_run
    wins = _windows(recs)
    t0 = wins[0]["start"]
    first = next(w for w in wins if w["predicted_kwh"] is not None)
    assert first["start"] - t0 <= 6 * 3600
    after = [w for w in wins if w["start"] >= first["start"]]
    assert sum(w["predicted_kwh"] is not None for w in after) >= 0.99 * len(after)
    errs = [abs(w["predicted_kwh"] / w["measured_kwh"] - 1) for w in after if w["measured_kwh"]]
    assert np.percentile(errs, 95) < 0.03  # sanity: the model tracks this simple rack


def test_windows_are_aligned_and_tile(synth_8h_run: tuple[Engine, list[dict]]) -> None:
    _, recs = synth_8h_run
    wins = _windows(recs)
    assert wins[0]["start"] == synth.T0
    for a, b in itertools.pairwise(wins):
        assert b["start"] == pytest.approx(a["end"])
        assert a["end"] - a["start"] == pytest.approx(900.0)
    assert all(0.0 <= w["coverage"] <= 1.0 for w in wins)


def test_segments_tile_the_trace(synth_8h: list[Any], synth_8h_run: tuple[Engine, list[dict]]) -> None:
    _, recs = synth_8h_run
    segs = [r for r in recs if r["type"] == "segment"]
    assert segs[0]["start"] == synth_8h[0].ts[0]
    assert segs[-1]["end"] == synth_8h[-1].ts[-1]
    for a, b in itertools.pairwise(segs):
        assert b["start"] == a["end"]
        assert (a["stage"], a["source"]) != (b["stage"], b["source"])  # runs are merged
    assert {s["source"] for s in segs} == {"hint"}
    assert {s["stage"] for s in segs} == set(synth.STAGE_W)


def test_pdu_and_crac_inside_a_window_do_not_move_its_prediction(
    synth_8h: list[Any], synth_8h_run: tuple[Engine, list[dict]]
) -> None:
    _, base = synth_8h_run
    target = _windows(base)[20]  # well after warm-up
    assert target["predicted_kwh"] is not None
    _, moved = run_engine(synth.scale_facility_inside(synth_8h, target["start"], target["end"], 1.4))
    w = next(x for x in _windows(moved) if x["start"] == target["start"])
    assert w["measured_kwh"] > 1.3 * target["measured_kwh"]  # the perturbation was real
    for key in ("predicted_kwh", "it_predicted_kwh", "cooling_predicted_kwh"):
        assert w[key] == target[key]
    nxt = next(x for x in _windows(moved) if x["start"] == target["end"])
    old_nxt = next(x for x in _windows(base) if x["start"] == target["end"])
    assert nxt["predicted_kwh"] != old_nxt["predicted_kwh"]  # …but the model did learn from them afterwards


def test_feeding_ticks_or_big_chunks_gives_the_same_report() -> None:
    chunks = synth.chunks(3 / 24, seed=9, chunk_rows=6000)
    _, big = run_engine(chunks)
    _, small = run_engine(synth.rechunk(chunks, 7))
    wb, ws = _windows(big), _windows(small)
    assert len(wb) == len(ws)
    for a, b in zip(wb, ws, strict=True):
        for key, va in a.items():
            vb = b[key]
            if isinstance(va, float):
                assert vb == pytest.approx(va, rel=1e-9, abs=1e-12), key
            else:
                assert va == vb, key
    segs = lambda recs: [(r["start"], r["end"], r["stage"]) for r in recs if r["type"] == "segment"]  # noqa: E731
    assert segs(big) == segs(small)


def test_save_and_restore_continue_the_same_model(
    synth_8h: list[Any], synth_8h_run: tuple[Engine, list[dict]]
) -> None:
    _, whole = synth_8h_run
    half = len(synth_8h) // 2
    eng, _ = run_engine(synth_8h[:half], finish=False)
    blob = eng.save_state()
    restored = Engine.load_state(blob, None, rack_info(synth.meta()), site="st", rack_name="rt")
    assert restored.save_state() == blob  # nothing lost in a round trip
    _, second = run_engine(synth_8h[half:], engine=restored)
    split_ts = synth_8h[half].ts[0]
    late = {w["start"]: w for w in _windows(second) if w["start"] >= split_ts + 1800}
    ref = {w["start"]: w for w in _windows(whole) if w["start"] in late}
    assert len(ref) >= 5
    for start, w in late.items():
        assert w["predicted_kwh"] == pytest.approx(ref[start]["predicted_kwh"], rel=5e-3)


def test_held_components_do_not_learn(synth_8h: list[Any]) -> None:
    class HoldCooling:
        held = frozenset({"cooling"})
        relearn = frozenset()
        relearn_halflife_h: ClassVar[dict[str, float]] = {}
        work_change = (math.nan, math.nan, math.nan)
        faulted = frozenset()

        def observe(self, sample: Any) -> list[dict]:
            assert math.isfinite(sample.it_expected_w) and sample.stage
            return []

        def save_state(self) -> dict:
            return {}

    eng = Engine(None, rack_info(synth.meta()))
    run_engine(synth_8h[:4], engine=eng, finish=False)  # learn a little first
    eng.drift = HoldCooling()
    run_engine(synth_8h[4:5], engine=eng, finish=False)  # the window open at the hold closes
    theta = eng.model.cool.theta.copy()
    it_theta = eng.model.it.theta.copy()
    run_engine(synth_8h[5:], engine=eng, finish=False)
    assert eng.model.cool.weight.max() > 0
    np.testing.assert_array_equal(eng.model.cool.theta, theta)
    assert not np.array_equal(eng.model.it.theta, it_theta)


def test_learned_lag_is_one_of_the_candidates(synth_8h_run: tuple[Engine, list[dict]]) -> None:
    eng, recs = synth_8h_run
    tau, dead = eng.learned_lag
    assert tau in TAUS_S
    assert recs[-1]["payload"]["lag"] == {"tau_s": tau, "dead_s": dead, "learned": True}


def test_rack_without_cooling_telemetry_and_malformed_hints() -> None:
    chunks = synth.chunks(4 / 24, seed=2)
    for c in chunks:
        del c.numeric["crac.c1.power_w"]
        c.stage[::50] = "Bad Label!"
    _, recs = run_engine(chunks)
    wins = [w for w in _windows(recs) if w["predicted_kwh"] is not None]
    assert wins, "predictions without a cooling unit"
    assert all(
        w["predicted_kwh"] == pytest.approx(w["it_predicted_kwh"] + w["cooling_predicted_kwh"]) for w in wins
    )
    assert all(w["measured_kwh"] == pytest.approx(w["it_measured_kwh"]) for w in wins)
    assert recs[-1]["payload"]["hygiene"]["malformed_hints"] == sum(len(c.stage[::50]) for c in chunks)


def test_a_first_full_load_after_a_light_start_is_not_extrapolated_as_a_cubic() -> None:
    # 6 h with GPUs at ≤ 250 W, then the full cycle up to 650 W per GPU
    chunks = synth.chunks(9 / 24, seed=3, chunk_rows=2000, light_until_h=6)
    _, recs = run_engine(chunks)
    after = [
        w
        for w in _windows(recs)
        if 6 * 3600 <= w["start"] - synth.T0 < 9 * 3600 and w["predicted_kwh"] is not None
    ]
    assert len(after) == 12
    errs = [abs(w["predicted_kwh"] / w["measured_kwh"] - 1) for w in after]
    assert max(errs) < 0.05, errs  # a cubic extrapolated from ≤ 250 W misses the first one by ~40 %


def test_rows_that_do_not_move_forward_are_dropped_and_counted() -> None:
    chunks = synth.chunks(1 / 24, seed=6, chunk_rows=600)
    again = synth.rechunk([chunks[2]], 100)[0]  # 100 rows the engine has already seen
    eng, recs = run_engine([*chunks[:4], again, *chunks[4:]])
    assert eng.rows.times.out_of_order_rows == len(again)
    assert recs[-1]["payload"]["hygiene"]["out_of_order_rows"] == len(again)
    segs = [r for r in recs if r["type"] == "segment"]
    assert all(b["start"] == a["end"] for a, b in itertools.pairwise(segs))


def test_component_samples_carry_the_cooling_units_reported_load() -> None:
    from agent.engine.components import ComponentSample

    seen: list[ComponentSample] = []

    class Recorder:
        held = frozenset()
        relearn = frozenset()
        relearn_halflife_h: ClassVar[dict[str, float]] = {}
        work_change = (math.nan, math.nan, math.nan)
        faulted = frozenset()

        def observe(self, sample: ComponentSample) -> list[dict]:
            seen.append(sample)
            return []

        def save_state(self) -> dict:
            return {}

    chunks = synth.chunks(3 / 24, seed=6, chunk_rows=600)
    for c in chunks:
        c.numeric["crac.c1.cooling_w"] = np.where(np.isnan(c.numeric["crac.c1.power_w"]), np.nan, 50000.0)
    eng = Engine(None, rack_info(synth.meta()))
    eng.drift = Recorder()
    run_engine(chunks, engine=eng)
    assert seen and all(s.duration_s == pytest.approx(60.0) for s in seen[:-1])
    assert all(abs(s.ts - synth.T0) % 60.0 == pytest.approx(0.0, abs=1e-6) for s in seen)
    if "cooling_load_w" in {f.name for f in dataclasses.fields(ComponentSample)}:
        assert seen[-1].cooling_load_w == pytest.approx(0.3 * 50000.0)
    assert all(math.isfinite(s.it_expected_w) and math.isfinite(s.cooling_expected_w) for s in seen)


def test_energy_by_stage_adds_up_to_the_measured_energy(synth_8h_run: tuple[Engine, list[dict]]) -> None:
    _, recs = synth_8h_run
    by_stage = recs[-1]["payload"]["energy_kwh"]
    wins = _windows(recs)
    assert all(w["coverage"] > 0.99 for w in wins)
    it_total = sum(w["it_measured_kwh"] for w in wins)
    cool_total = sum(w["cooling_measured_kwh"] for w in wins)
    assert sum(v["it"] for v in by_stage.values()) == pytest.approx(it_total, rel=1e-3)
    assert sum(v["cooling"] for v in by_stage.values()) == pytest.approx(cool_total, rel=1e-3)
    assert by_stage["forward_backward"]["cooling"] > by_stage["idle"]["cooling"]


def test_a_cooling_column_that_never_reports_does_not_block_warm_up() -> None:
    chunks = synth.chunks(4 / 24, seed=2, chunk_rows=2000)
    for c in chunks:
        c.numeric["crac.c1.power_w"][:] = np.nan
    _, recs = run_engine(chunks)
    wins = _windows(recs)
    assert any(w["it_predicted_kwh"] is not None for w in wins)
    assert all(w["measured_kwh"] is None and w["coverage"] == 0.0 for w in wins)  # facility unknown
    assert all(w["it_measured_kwh"] is not None for w in wins)
