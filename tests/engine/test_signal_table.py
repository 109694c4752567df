"""The one signal table (agent/engine/signals.py): every layer's view of the signals derives from it."""

from __future__ import annotations

import dataclasses

import numpy as np
import synth
from conftest import run_engine

from agent.engine import Engine, rack_info
from agent.engine.components import ComponentSample
from agent.engine.signals import COLUMNS, FIELDS, QUANTITIES, SAMPLE_MEANS, is_engine_signal
from agent.trace.model import TraceChunk


def test_fields_are_unique_and_every_quantity_has_its_pair() -> None:
    assert len(set(FIELDS)) == len(FIELDS)
    for q in QUANTITIES:
        assert f"{q.name}_s" in FIELDS and f"{q.name}_ws" in FIELDS


def test_every_sample_mean_is_a_component_sample_field() -> None:
    fields = {f.name for f in dataclasses.fields(ComponentSample)}
    assert set(SAMPLE_MEANS) <= fields


def test_every_quantity_reads_a_listed_column() -> None:
    listed = {f"{c.device}.{c.suffix}" if c.device else c.suffix for c in COLUMNS}
    assert {q.column for q in QUANTITIES} <= listed
    assert is_engine_signal("crac.a.outdoor_temp_c") and not is_engine_signal("gpu.0.temp_c")


def test_an_outdoor_temperature_of_minus_one_reaches_the_drift_sample() -> None:
    """−1.0 °C is weather, not a register code: it arrives in ``ComponentSample.outdoor_c``."""
    chunks = synth.chunks(1 / 24, chunk_rows=600)
    cold = [
        TraceChunk(
            ts=c.ts,
            numeric={**c.numeric, "crac.a.outdoor_temp_c": np.full(len(c), -1.0)},
            stage=c.stage,
            job=c.job,
        )
        for c in chunks
    ]
    eng = Engine(None, rack_info(synth.meta()))
    run_engine(cold, engine=eng, finish=False)
    assert eng.last_sample is not None and eng.last_sample.outdoor_c == -1.0
    assert "crac.a.outdoor_temp_c" not in eng.rows.signals.hygiene.counts_by_signal()


def test_the_drift_sample_carries_one_gpus_mean_power_over_those_that_report() -> None:
    """``gpu_mean_w`` is one GPU's level whatever how many report (the rest channel's input), where
    ``gpu_w`` is the rack's total; ``stage_share`` says how much of the bin its stage filled."""
    chunks = synth.chunks(1 / 24, chunk_rows=600)
    eng = Engine(None, rack_info(synth.meta()))
    run_engine(chunks, engine=eng, finish=False)
    full = eng.last_sample
    gpus = [n for n in chunks[-1].numeric if n.startswith("gpu.") and n.endswith(".power_w")]
    assert full is not None and len(gpus) > 1
    lost = gpus[0]  # one GPU stops reporting: the mean is the others', not pulled down by a zero
    dropped = [TraceChunk(ts=c.ts, numeric={**c.numeric, lost: np.full(len(c), np.nan)}, stage=c.stage,
                          job=c.job) for c in chunks]
    eng2 = Engine(None, rack_info(synth.meta()))
    run_engine(dropped, engine=eng2, finish=False)
    part = eng2.last_sample
    assert part is not None
    rows = chunks[-1].numeric
    others = np.mean([rows[n][-60:].mean() for n in gpus[1:]])
    assert abs(part.gpu_mean_w - others) / others < 0.05
    assert abs(full.gpu_mean_w * len(gpus) - full.gpu_w) / full.gpu_w < 0.01
    assert 0.0 < full.stage_share <= 1.0


def test_the_drift_sample_carries_its_stage_s_own_gpu_power() -> None:
    """A bin that training shares with an eval (a quarter of each minute at half the GPU power, a
    quarter of the memory traffic) has a mean of neither stage: ``stage_gpu_w`` and
    ``stage_mem_util_pct`` are over its main stage's seconds only, the signature the GPU detector and
    the same-work check compare."""
    chunks = synth.chunks(1 / 24, chunk_rows=600)
    gpus = [n for n in chunks[0].numeric if n.startswith("gpu.") and n.endswith(".power_w")]
    mixed = []
    for c in chunks:
        evaluating = (c.ts % 60.0) < 15.0
        numeric = dict(c.numeric)
        for n in gpus:
            numeric[n] = np.where(evaluating, 300.0, 600.0)
            numeric[n.replace("power_w", "mem_util_pct")] = np.where(evaluating, 10.0, 40.0)
        stage = np.where(evaluating, "eval", "forward_backward").astype(object)
        mixed.append(TraceChunk(ts=c.ts, numeric=numeric, stage=stage, job=c.job))
    eng = Engine(None, rack_info(synth.meta()))
    run_engine(mixed, engine=eng, finish=False)
    s = eng.last_sample
    assert s is not None and s.stage == "forward_backward" and 0.7 <= s.stage_share <= 0.8
    total = 600.0 * len(gpus)
    assert s.gpu_w < 0.92 * total  # the bin's mean mixes in the eval
    assert abs(s.stage_gpu_w - total) / total < 0.01
    assert s.gpu_mem_util_pct < 0.92 * 40.0  # and its memory traffic
    assert abs(s.stage_mem_util_pct - 40.0) < 0.4
