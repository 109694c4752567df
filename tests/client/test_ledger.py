"""The engine's energy ledger answers windows with the energy its own counters accounted."""

from __future__ import annotations

import numpy as np
import pytest
import synth

from agent.engine import Engine, rack_info
from agent.engine.energy_ledger import EnergyLedger
from agent.engine.signals import N_FIELDS, F
from agent.trace.model import J_PER_KWH


@pytest.fixture(scope="module")
def engine() -> Engine:
    eng = Engine(None, rack_info(synth.meta()))
    for chunk in synth.chunks(2 / 24, seed=4, chunk_rows=900):
        eng.process(chunk)
    return eng


def test_the_whole_ledger_equals_the_engines_energy_counters(engine: Engine) -> None:
    led = engine.ledger
    assert led.accounted_from is not None and led.accounted_until is not None
    found = led.interval(led.accounted_from, led.accounted_until)
    assert found.why == {}
    it_j, cool_j = engine.energy_kwh[:, 0].sum() * J_PER_KWH, engine.energy_kwh[:, 1].sum() * J_PER_KWH
    assert found.it_j == pytest.approx(it_j, rel=1e-9)
    assert found.cooling_j == pytest.approx(cool_j, rel=1e-9)
    assert found.facility_j == pytest.approx(it_j + cool_j, rel=1e-9)
    assert found.gpu_j == pytest.approx(engine.energy_kwh[:, 2].sum() * J_PER_KWH, rel=1e-9)


def test_windows_add_up_and_a_straddled_bin_counts_by_its_overlap(engine: Engine) -> None:
    led = engine.ledger
    t0, t1 = led.accounted_from + 100.0, led.accounted_until - 100.0
    mid = t0 + 0.5 * (t1 - t0) + 3.7  # not on a bin edge
    whole = led.interval(t0, t1).facility_j
    halves = [led.interval(t0, mid).facility_j, led.interval(mid, t1).facility_j]
    assert whole is not None and None not in halves
    assert sum(h for h in halves if h is not None) == pytest.approx(whole, rel=1e-12)
    b0 = led.accounted_from + 40 * led.bin_s  # a bin start, well inside
    one_bin = led.interval(b0, b0 + led.bin_s).it_j
    third = led.interval(b0, b0 + led.bin_s / 3).it_j
    assert one_bin is not None and third == pytest.approx(one_bin / 3, rel=1e-12)


def test_unknown_is_none_with_a_reason_never_zero(engine: Engine) -> None:
    led = engine.ledger
    late = led.interval(led.accounted_until - 60, led.accounted_until + 30)
    assert late.facility_j is None and late.why["facility_j"].startswith("not yet accounted")
    early = led.interval(led.accounted_from - 60, led.accounted_from + 60)
    assert early.it_j is None and "ledger starts" in early.why["it_j"]
    other = led.interval(led.accounted_from, led.accounted_until, job="someone-else")
    assert other.facility_j is None and "someone-else" in other.why["facility_j"]
    mine = led.interval(led.accounted_from, led.accounted_until, job="j1")
    assert mine.facility_j == pytest.approx(led.interval(led.accounted_from, led.accounted_until).facility_j)
    no_crac = led.interval(led.accounted_from, led.accounted_until, cooling_measured=False)
    assert no_crac.it_j is not None and no_crac.cooling_j is None and no_crac.facility_j is None
    assert "no cooling-unit" in no_crac.why["cooling_j"] and "cooling" in no_crac.why["facility_j"]
    empty = led.interval(led.accounted_until, led.accounted_until)
    assert empty.it_j is None and "empty window" in empty.why["it_j"]
    assert EnergyLedger(15.0).interval(0.0, 1.0).why["it_j"].startswith("the rack agent has accounted no")


def test_a_part_known_for_too_little_of_the_window_is_none() -> None:
    led = EnergyLedger(10.0, capacity=8)
    sums = np.zeros((4, N_FIELDS))
    sums[:, F["pdu_s"]] = [10, 10, 2, 2]  # the PDU went silent for most of the last two bins
    sums[:, F["pdu_ws"]] = sums[:, F["pdu_s"]] * 5000.0
    sums[:, F["cool_s"]] = 10
    sums[:, F["cool_ws"]] = 10 * 1000.0
    led.add(np.arange(4) * 10.0 + 1000.0, sums, ["j"] * 4)
    assert led.interval(1000.0, 1020.0).it_j == pytest.approx(100_000.0)
    late = led.interval(1020.0, 1040.0)
    assert late.it_j is None and "known for 20% of the window" in late.why["it_j"]
    assert late.cooling_j == pytest.approx(20_000.0)


def test_the_ring_keeps_fixed_memory_and_says_how_far_back_it_reaches() -> None:
    led = EnergyLedger(10.0, capacity=5)
    sums = np.zeros((1, N_FIELDS))
    sums[0, [F["pdu_s"], F["cool_s"], F["gpu_s"]]] = 10.0
    sums[0, F["pdu_ws"]] = 1000.0
    for k in range(12):
        led.add(np.array([k * 10.0 + 2e9]), sums, [""])
    assert led._rows.shape[0] == 5
    assert led.accounted_from == 7 * 10.0 + 2e9 and led.accounted_until == 12 * 10.0 + 2e9
    assert led.interval(2e9 + 70, 2e9 + 120).it_j == pytest.approx(5000.0)
    assert led.interval(2e9 + 60, 2e9 + 120).it_j is None
