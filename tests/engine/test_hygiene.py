"""Each input-hygiene rule, on hand-made sample streams (agent/engine/hygiene.py)."""

from __future__ import annotations

import numpy as np
import pytest

from agent.engine.hygiene import RULES, STUCK_MIN_SAMPLES, Hygiene, kind_for


def _clean(
    values: list[float],
    name: str = "pdu.a.power_w",
    max_w: float = 30000.0,
    lookahead_s: float = 30.0,
    n_emit: int | None = None,
) -> tuple[np.ndarray, dict[str, int], Hygiene]:
    h = Hygiene([name], [kind_for(name, max_w)], lookahead_s)
    v = np.array(values, dtype=float)
    ts = np.arange(v.size, dtype=float)
    out = h.clean(0, ts, v, v.size if n_emit is None else n_emit)
    return out, dict(zip(RULES, h.counts[0].tolist(), strict=True)), h


def test_nan_is_not_sampled_not_a_rejection() -> None:
    out, counts, _ = _clean([1000.0, np.nan, 1001.0])
    assert np.isnan(out[1]) and out[0] == 1000.0
    assert sum(counts.values()) == 0


@pytest.mark.parametrize("bad", [-1.0, -410.0, 65535.0, 32768.0, 6553.5, 655.35])
def test_sentinels_rejected(bad: float) -> None:
    out, counts, _ = _clean([1000.0, 1001.0, bad, 1002.0, 1003.0])
    assert np.isnan(out[2])
    assert counts["sentinel"] == 1
    assert np.isfinite(out[[0, 1, 3, 4]]).all()


def test_negative_and_above_max_and_inf() -> None:
    out, counts, _ = _clean([1000.0, -3.0, 1001.0, 40000.0, 1002.0, np.inf, 1003.0], max_w=30000.0)
    assert np.isnan(out[[1, 3, 5]]).all()
    assert counts["negative"] == 1 and counts["above_max"] == 1 and counts["nonfinite"] == 1


def test_single_sample_spike_up_and_down() -> None:
    out, counts, _ = _clean([1000.0, 1002.0, 9000.0, 1001.0, 1003.0, 100.0, 999.0, 1000.0])
    assert np.isnan(out[2]) and np.isnan(out[5])
    assert counts["spike"] == 2


def test_a_real_step_is_not_a_spike() -> None:
    out, counts, _ = _clean([1000.0, 1002.0, 9000.0, 9010.0, 9005.0])
    assert counts["spike"] == 0
    assert np.isfinite(out).all()


def test_spike_needs_its_successor_within_lookahead() -> None:
    # the successor is 1 s later but the look-ahead is 0.5 s: never judged a spike (chunking-proof)
    _, counts, _ = _clean([1000.0, 1002.0, 9000.0, 1001.0], lookahead_s=0.5)
    assert counts["spike"] == 0


def test_stuck_value_rejected_after_run_limit() -> None:
    rng = np.random.default_rng(3)
    healthy = list(1000.0 + rng.normal(0, 5, 200).round(1))
    stuck = [1234.5] * 80
    out, counts, _ = _clean(healthy + stuck)
    assert counts["stuck"] > 0
    assert np.isnan(out[-1])  # still stuck at the end
    assert np.isfinite(out[200 : 200 + STUCK_MIN_SAMPLES - 1]).all()  # a short repeat is fine


def test_quantised_signal_that_often_repeats_is_not_stuck() -> None:
    # a 100 W-quantised cooling unit: long repeats are normal for it
    levels = np.repeat([13100.0, 13200.0, 13100.0, 13000.0] * 40, 25)
    _, counts, _ = _clean(list(levels), name="crac.1.power_w", max_w=200000.0)
    assert counts["stuck"] == 0


def test_counter_going_backwards_is_a_reset() -> None:
    out, counts, _ = _clean([100.0, 150.0, 210.0, 5.0, 40.0], name="gpu.0.energy_j", max_w=1500.0)
    assert counts["reset"] == 1
    assert np.isfinite(out).all()


def test_state_carries_across_calls() -> None:
    # spike judged with the previous call's last value
    h = Hygiene(["gpu.0.power_w"], [kind_for("gpu.0.power_w", 1500.0)], 30.0)
    h.clean(0, np.array([0.0, 1.0]), np.array([300.0, 301.0]), 2)
    out = h.clean(0, np.array([2.0, 3.0, 4.0]), np.array([1400.0, 302.0, 300.0]), 3)
    assert np.isnan(out[0])
    assert h.counts_by_signal() == {"gpu.0.power_w": {"spike": 1}}


@pytest.mark.parametrize(
    ("name", "reading", "max_w"),
    [
        ("gpu.0.power_w", 655.35, 1500.0),  # a GPU at 655.35 W (NVML reports errors, not codes)
        ("work_rate", 32768.0, 0.0),  # the job's own float throughput
        ("crac.a.outdoor_temp_c", -1.0, 200000.0),  # a winter night at the heat rejection
    ],
)
def test_a_reading_equal_to_a_register_code_is_kept_where_no_register_delivers_it(
    name: str, reading: float, max_w: float
) -> None:
    """Issue 17: the sentinel list was applied to every signal; it applies only to columns read
    from raw device registers (``signals.COLUMNS``)."""
    values = [reading * 0.98, reading * 0.99, reading, reading * 1.01, reading * 1.02]
    out, counts, _ = _clean(values, name=name, max_w=max_w)
    assert out[2] == reading
    assert sum(counts.values()) == 0


@pytest.mark.parametrize("name", ["pdu.a.power_w", "crac.a.power_w", "inlet.a.temp_c"])
def test_register_codes_are_still_rejected_where_registers_deliver_them(name: str) -> None:
    code = 655.35 if name.endswith("power_w") else -1.0
    base = 1000.0 if name.endswith("power_w") else 24.0
    out, counts, _ = _clean([base, base + 1, code, base + 2, base + 3], name=name, max_w=30000.0)
    assert np.isnan(out[2]) and counts["sentinel"] == 1


def test_a_feed_of_a_dense_rack_is_kept_where_no_rating_is_configured() -> None:
    """A 64-GPU rack draws ~40 kW per feed of an A/B pair (80 kW on one feed when its pair fails):
    without a configured rating, those readings are the rack's power, not glitches."""
    from agent.engine.frames import rack_info

    limit = rack_info().max_power_w("pdu.a.power_w")
    loads = [39_000.0, 41_000.0, 80_000.0, 81_000.0, 40_000.0]
    out, counts, _ = _clean(loads, max_w=limit)
    assert np.array_equal(out, loads) and counts["above_max"] == 0
    out, counts, _ = _clean([40_000.0, 40_100.0, 400_000.0, 40_200.0, 40_300.0], max_w=limit)
    assert np.isnan(out[2]) and counts["above_max"] == 1  # VA read as 10× W is still caught
