"""How the per-job split learns and closes (agent.engine.job_energy, agent.engine.node_power): from
PDU readings polled as slowly as real PDUs are, per window, with a missed GPU poll held.

Uses the two-node synthetic rack of test_job_energy.py (its truth: each node's AC power credited to
its own (job, stage)).
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
import pytest

from agent.engine import Engine
from agent.engine.frames import RackInfo
from agent.engine.job_energy import FINAL_AFTER_S, GPU_HOLD_S, JobEnergy, _Window
from agent.engine.node_power import MODEL_CELLS, FanLag, FeedShares, NodePowerModel
from agent.engine.response import FAN_LAG_S
from agent.engine.signals import F
from agent.engine.stage_slots import N_SLOTS, StageSlots
from agent.trace.model import J_PER_KWH, TraceChunk
from tests.engine.test_job_energy import RACK, T0, _engine, _rack, _run, job_it_kwh

PDU_EVERY_S = 27  # the twin's multijob racks poll their PDUs every 20–30 s


def _slow_pdu(chunks: list[TraceChunk]) -> list[TraceChunk]:
    """The same rack with its PDU read every ``PDU_EVERY_S`` (NaN between readings, as a trace has)."""
    out = []
    for c in chunks:
        keep = (np.round(c.ts - T0).astype(np.int64) % PDU_EVERY_S) == 0
        numeric = dict(c.numeric)
        numeric["pdu.a.power_w"] = np.where(keep, c.numeric["pdu.a.power_w"], np.nan)
        out.append(replace(c, numeric=numeric))
    return out


def test_a_pdu_polled_every_27_s_still_splits_each_jobs_stages() -> None:
    chunks, truth, stages = _rack()
    engine = _engine(RACK, stages)
    _run(engine, _slow_pdu(chunks))
    table = engine.job_energy.table()
    for (job, stage), t in truth.items():
        assert table[job][stage]["it"] == pytest.approx(t, rel=0.05), (job, stage)
    learned = engine.job_energy.power
    slot = list(engine.slots.names).index
    extra_w = (learned.cell_w(("b", "data_load"), slot("data_load"))
               - learned.cell_w(("b", "forward_backward"), slot("forward_backward")))
    assert 400 < extra_w < 700  # truth: 550 W, learned from one reading every 27 s
    it = sum(c["it"] for s in table.values() for c in s.values())
    assert it == pytest.approx(float(engine.energy_kwh[:, 0].sum()), rel=1e-9)


@functools.cache
def _fan_rack_split() -> tuple[dict, dict]:
    """The split's table and the truth of the two-node rack whose nodes draw fan power (600 W at
    full speed), PDU read every ``PDU_EVERY_S``: run once for the tests that read it."""
    chunks, truth, stages = _rack(fan_max_w=600.0)
    engine = _engine(RACK, stages)
    _run(engine, _slow_pdu(chunks))
    return engine.job_energy.table(), truth


def test_a_heavy_jobs_fans_are_credited_to_it_not_spread_over_both_jobs() -> None:
    """Node 0's job runs its GPUs hard, node 1's lightly, and each node's fans draw ∝ speed³ of
    its own lagged GPU heat (600 W at full speed). Each node is always in its own job's cells, so
    the rack's readings cannot tell the jobs' non-GPU watts apart but through the model's shape:
    without the fans' curve, the heavy job's fan watts sat in cell deviations the prior shrinks, and
    the split credited part of them to the light job (on the twin: 2–5 % per job)."""
    table, truth = _fan_rack_split()
    for job in ("a", "b"):
        got, total = job_it_kwh(table, truth, job)
        assert got == pytest.approx(total, rel=0.01), job


def test_a_short_stage_is_learned_from_its_readings_not_held_at_the_prior() -> None:
    """Node 0 loads data 100 s in every 1200 s (8 % of its time): its cell has a few PDU readings
    an hour, so a prior worth 4 bins' readings per column held its extra low (−1.1 %); worth one
    bin's, the readings decide (every cell within 0.5 % here)."""
    table, truth = _fan_rack_split()
    for (job, stage), t in truth.items():
        assert table[job][stage]["it"] == pytest.approx(t, rel=0.01), (job, stage)


def test_the_fans_lag_is_the_per_row_first_order_lag_across_chunks_gaps_and_off_nodes() -> None:
    lag = FanLag()
    rng = np.random.default_rng(1)
    ts = T0 + np.cumsum(rng.uniform(0.5, 3.0, 5000))
    ts[2000:] += 500.0  # the rack unread for 8 minutes
    ts[4000:] += 86_400.0  # and for a day
    power = rng.uniform(0.0, 5000.0, (5000, 3))
    power[100:200, 1] = np.nan  # node 1 off
    got = np.vstack([lag.update(ts[:1700], power[:1700]), lag.update(ts[1700:], power[1700:])])
    inputs = np.nan_to_num(power)
    level, want = inputs[0].copy(), [inputs[0].copy()]
    for i in range(1, len(ts)):
        d = np.exp(-(ts[i] - ts[i - 1]) / FAN_LAG_S)
        level = d * level + (1.0 - d) * inputs[i - 1]
        want.append(level.copy())
    assert np.all(np.isfinite(got))
    assert np.abs(got - np.array(want)).max() < 1e-6


def test_open_windows_are_in_the_table_and_final_once_their_hours_after_are_learned() -> None:
    chunks, _truth, stages = _rack()
    engine = _engine(RACK, stages)
    ledger = engine.job_energy
    assert ledger.final_after_windows * 900.0 == pytest.approx(FINAL_AFTER_S)  # 15-min engine windows
    ledger.final_after_windows = 4  # final an hour later: this rack's 4 h then close some windows
    for c in chunks:
        engine.process(c)
        assert len(ledger._windows) <= 4 + 1  # bounded: the open one and 4 more
        it = sum(x["it"] for s in ledger.table().values() for x in s.values())
        # nothing the engine accounted is missing while windows are still open
        assert it == pytest.approx(float(engine.energy_kwh[:, 0].sum()), rel=1e-9)
    final = sum(float(e[0]) for e in engine.job_energy.cells.values())
    assert 0 < final < float(engine.energy_kwh[:, 0].sum())  # the last hour is still provisional
    restored = Engine.load_state(engine.save_state(), None, RACK)  # the open windows saved as split so far
    assert _flat(restored.job_energy.table()) == pytest.approx(_flat(engine.job_energy.table()))


def test_a_windows_split_from_its_cells_sums_is_the_split_of_its_entries() -> None:
    """A window not yet final keeps a few sums per cell, not its (node, cell) entries bin by bin
    (6 h of them): the model is linear in GPU energy, the fans' terms and node time, so the split
    of the sums equals the split of every entry with its bin's measured share (the old form)."""
    rng = np.random.default_rng(5)
    slots = StageSlots()
    ledger = JobEnergy(RackInfo(node_gpus=((0,), (1,), (2,)), node_ids=("n0", "n1", "n2")), 15.0, slots)
    theta = ledger.power.theta
    theta[:] = rng.uniform(0.05, 0.3, theta.size)
    theta[0] = 1.08
    cells = [("a", "forward_backward"), ("a", "grad_sync"), ("b", "checkpoint"), ("-", "idle")]
    ledger.power.cell_columns(cells)
    window, entries = _Window(0), []
    for b in range(60):
        row = np.zeros(len(F))
        row[F["dur_s"]] = 15.0
        row[F["pdu_s"]] = 15.0 if b % 7 else 6.0  # a feed missed now and then
        row[F["cool_s"]] = 15.0 if b % 11 else 0.0
        row[F["pdu_ws"]], row[F["cool_ws"]] = rng.uniform(2e5, 4e5), rng.uniform(5e4, 1e5)
        acc = {}
        for node in range(3):
            for cell in rng.choice(len(cells), size=2, replace=False):
                v = rng.uniform(0.0, 1.0, 6) * np.array([6e4, 15.0, 15.0, 8.0, 5.0, 3.0])
                acc[(node, cells[int(cell)])] = v
                entries.append((cells[int(cell)], v, row[F["pdu_s"]] / 15.0, row[F["cool_s"]] / 15.0))
        window.add(acc, row, slots, T0 + 15.0 * b)
    got = ledger._split(window)

    keys = list(dict.fromkeys(c for c, *_ in entries))
    code = np.array([keys.index(c) for c, *_ in entries])
    slot = np.array([slots.slot(c[1], T0) for c in keys])[code]
    v = np.array([e[1] for e in entries])
    model = ledger.power.energy_j(v[:, 0], v[:, 3:], v[:, 1], slot, code, keys)
    assert (model > 0).all()
    for k, (part, measured) in enumerate(((np.array([e[2] for e in entries]), window.it_ws),
                                          (np.array([e[3] for e in entries]), window.cool_ws))):
        want = np.bincount(code, weights=model * measured / float((model * part).sum())) / J_PER_KWH
        for i, cell in enumerate(keys):
            assert got[cell][k] == pytest.approx(want[i], rel=1e-9), (cell, k)


def _flat(table: dict[str, dict[str, dict[str, float]]]) -> dict[str, float]:
    return {f"{job}/{stage}/{part}": v for job, stages in table.items()
            for stage, parts in stages.items() for part, v in parts.items()}


def _gpu_chunk(ts: np.ndarray, gpu: np.ndarray) -> TraceChunk:
    numeric = {f"gpu.{i}.power_w": gpu[:, i] for i in range(gpu.shape[1])}
    blank = np.full(len(ts), "", dtype=object)
    return TraceChunk(ts=ts, numeric=numeric, stage=blank, job=blank.copy())


def test_a_missed_gpu_poll_is_held_and_a_silent_node_is_off() -> None:
    rack = RackInfo(node_gpus=((0,), (1,)), node_ids=("n0", "n1"))
    ledger = JobEnergy(rack, 15.0, StageSlots())
    ts = T0 + np.arange(120, dtype=float)
    gpu = np.full((120, 2), 500.0)
    gpu[40, :] = np.nan  # one poll lost for the whole rack
    gpu[60:, 1] = np.nan  # node 1 stops reporting (drained) from row 60
    power = ledger._held(ts, ledger._node_power(_gpu_chunk(ts, gpu)))
    assert power[40, 0] == 500.0 and power[40, 1] == 500.0
    held_until = 59 + GPU_HOLD_S
    assert np.all(power[60 : int(held_until) + 1, 1] == 500.0)
    assert np.all(np.isnan(power[int(held_until) + 1 :, 1]))
    assert np.all(power[:, 0] == 500.0)


def test_each_feed_reading_is_scaled_by_its_share_of_the_rack() -> None:
    shares = FeedShares()
    ts = T0 + np.arange(0, 3600, 27, dtype=float)
    load = 10_000.0 + 3000.0 * np.sin(ts / 300.0)
    shares.update("pdu.a.power_w", ts, 0.4 * load)
    shares.update("pdu.b.power_w", ts + 5, 0.6 * load)
    assert shares.share("pdu.a.power_w") == pytest.approx(0.4, abs=0.01)
    assert shares.share("pdu.b.power_w") == pytest.approx(0.6, abs=0.01)
    again = FeedShares()
    again.load(shares.state())
    assert again.share("pdu.a.power_w") == shares.share("pdu.a.power_w")
    with pytest.raises(ValueError, match="feed shares"):
        again.load({"sum": {"pdu.a.power_w": float("nan")}, "count": {}})


def test_a_pdu_reading_is_learned_only_against_gpu_readings_of_its_own_instant() -> None:
    """A node whose power alternates every second (forward/backward against gradient sync) and
    whose GPU poll is missed at a fifth of the PDU's instants: the held reading is the other phase,
    so pairing it with the PDU reading would pull the learned IT watts per GPU watt far off."""
    rack = RackInfo(node_gpus=((0,), (1,)), node_ids=("n0", "n1"))
    ledger = JobEnergy(rack, 15.0, StageSlots())
    psu, base_w, n = 1.08, 600.0, 4 * 3600
    rng = np.random.default_rng(3)
    ts = T0 + np.arange(n, dtype=float)
    swing = 1.0 + 0.2 * np.sin(2 * np.pi * np.arange(n) / 2400.0)  # the level moves over the hours
    gpu = np.stack([np.where(np.arange(n) % 2 == 0, 900.0, 300.0) * swing, 400.0 * swing], axis=1)
    pdu = (psu * gpu.sum(axis=1) + 2 * base_w) * (1 + 0.002 * rng.standard_normal(n))
    read = (np.arange(n) % PDU_EVERY_S) == 0
    seen = gpu.copy()
    seen[read & (rng.random(n) < 0.2), 0] = np.nan  # node 0's poll missed at that instant
    stage = np.full(3600, "forward_backward", dtype=object)
    for h in range(4):
        sl = slice(h * 3600, (h + 1) * 3600)
        numeric = {"gpu.0.power_w": seen[sl, 0], "gpu.1.power_w": seen[sl, 1],
                   "pdu.a.power_w": np.where(read[sl], pdu[sl], np.nan)}
        chunk = TraceChunk(ts=ts[sl], numeric=numeric, stage=stage, job=np.full(3600, "a", dtype=object))
        ledger.observe(chunk, T0, stage, stage, None)
    ledger.power.solve()
    assert float(ledger.power.theta[0]) == pytest.approx(psu, rel=0.03)


def test_minutes_no_pdu_measured_are_filled_not_taken_from_the_job_that_ran_through_them() -> None:
    """Node 1's job draws far more than node 0's (heavier GPUs); the PDU goes unread for 20 minutes
    of the second hour. Dropped, those minutes' energy would be missing from both jobs; filled at
    the window's own measured-to-modelled scale, each job keeps what its nodes drew."""
    chunks, truth, stages = _rack()
    out = []
    for h, c in enumerate(chunks):
        numeric = dict(c.numeric)
        if h == 1:
            gap = (c.ts >= T0 + 3600 + 1200) & (c.ts < T0 + 3600 + 2400)
            numeric["pdu.a.power_w"] = np.where(gap, np.nan, c.numeric["pdu.a.power_w"])
        out.append(replace(c, numeric=numeric))
    engine = _engine(RACK, stages)
    _run(engine, out)
    table = engine.job_energy.table()
    for job in ("a", "b"):
        got, total = job_it_kwh(table, truth, job)
        assert got == pytest.approx(total, rel=0.03), job  # 20 of 240 min dropped: 8 % short
    measured = float(engine.energy_kwh[:, 0].sum())
    split = sum(c["it"] for s in table.values() for c in s.values())
    assert split > measured * 1.05  # the filled minutes are the split's, not the rack's measurement


def test_readings_are_divided_by_their_feeds_share_as_it_stands_at_each_solve() -> None:
    """A rack's first readings come while its feeds' shares are still being learned (here the first
    minutes looked 50/50, the feeds carry 60/40): divided on arrival, the first hours would stay
    learned 20 % off; kept per feed, they are divided by the shares as they stand when solved."""
    shares = FeedShares()
    model = NodePowerModel(15.0, shares)
    rng = np.random.default_rng(4)
    ts = T0 + np.arange(0.0, 3600.0, 20.0)
    n = ts.size
    gpu = rng.uniform(1000.0, 4000.0, n)  # two nodes' GPU watts
    rack = 1.08 * gpu + 2 * 600.0
    for feed in ("pdu.a.power_w", "pdu.b.power_w"):
        shares.update(feed, ts[:3], np.full(3, 1500.0))
    model.add_readings("pdu.a.power_w", ts, gpu, np.zeros((n, 3)), np.full(n, 2.0), np.zeros((n, N_SLOTS)),
                       np.zeros((n, MODEL_CELLS)), 0.6 * rack, np.ones(n), 2)
    model.solve()
    assert float(model.theta[0]) == pytest.approx(1.08 * 0.6 / 0.5, rel=0.02)  # what the shares said then
    later = ts + 3600.0
    shares.update("pdu.a.power_w", later, 0.6 * rack)
    shares.update("pdu.b.power_w", later, 0.4 * rack)
    model.solve()
    assert model.k == pytest.approx(1.08, rel=0.02)
    again = NodePowerModel(15.0, shares)
    again.load(model.state())  # the per-feed sums are saved
    assert again.k == pytest.approx(model.k, rel=1e-9)
