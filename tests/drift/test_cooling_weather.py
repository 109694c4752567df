"""The cooling unit's efficiency against the weather: with the unit's outdoor air temperature a slow
COP loss stands out; without it, the same creep is indistinguishable from a warmer week."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from agent.engine.components import ComponentSample
from agent.engine.drift import DriftMonitor
from agent.engine.drift.channel import GRACE
from agent.engine.drift.cooling_model import CoolingUnitModel
from tests.drift.synthetic import stream

T0 = 1_764_000_000.0
DAY = 86400.0


def outdoor_c(t_s: float) -> float:
    """A daily cycle (warmest at 15:00) plus a 4-day weather swing of ±3 °C."""
    return (18.0 + 6.0 * math.cos(2 * math.pi * (t_s / DAY - 15.0 / 24.0))
            + 3.0 * math.sin(2 * math.pi * t_s / (4.1 * DAY)))


def ramp(t_s: float, start_s: float, pct: float, ramp_s: float = 6 * 3600.0) -> float:
    return 0.0 if t_s < start_s else pct * min(1.0, (t_s - start_s) / ramp_s)


def weather_stream(days: float, seed: int, loss_pct: float = 0.0, loss_at_s: float = 3 * DAY,
                   sensor: bool = True) -> Iterator[ComponentSample]:
    """The synthetic residual stream with the unit's power following the temperature lift
    (Carnot: power ∝ outdoor + 8 K for the same heat) and an optional COP loss ramping in."""
    for sample in stream(days, seed):
        t = sample.ts - T0
        weather = (outdoor_c(t) + 8.0) / 26.0
        loss = 1.0 + ramp(t, loss_at_s, loss_pct) / 100.0
        probe = outdoor_c(t) + 0.8 if sensor else math.nan
        yield replace(sample, cooling_measured_w=sample.cooling_measured_w * weather * loss, outdoor_c=probe)


def cooling_onsets(monitor: DriftMonitor, samples: Iterator[ComponentSample]) -> list[dict[str, object]]:
    events: list[dict[str, object]] = []
    for sample in samples:
        events += monitor.observe(sample)
    return [e for e in events if e["state"] == "onset" and e["cause"] == "cooling"]


def test_weather_swing_with_the_outdoor_probe_raises_no_alarm() -> None:
    monitor = DriftMonitor()
    assert cooling_onsets(monitor, weather_stream(6, 31)) == []
    assert monitor.cooling_model.weather_known


def test_slow_cop_loss_is_found_with_the_outdoor_probe() -> None:
    found = cooling_onsets(DriftMonitor(), weather_stream(4, 32, loss_pct=3.0))
    assert found, "a 3 % COP loss over 6 h was not found"
    delay_s = float(found[0]["ts"]) - (T0 + 3 * DAY + 6 * 3600)  # type: ignore[arg-type]
    assert -6 * 3600 < delay_s <= 3 * 3600
    assert "same heat" in str(found[0]["detail"]["explanation"])  # type: ignore[index]


def test_unit_model_explains_the_weather_only_with_the_probe() -> None:
    """2-hour residual means over 5 days: flat with the probe; the daily terms alone drift
    with the weather swing (the reason the weather-blind cooling channel follows a trend)."""
    def residual_spread(sensor: bool) -> float:
        model = CoolingUnitModel()
        values = []
        for sample in weather_stream(5, 33, sensor=sensor):
            values.append(model.residual_pct(sample.cooling_measured_w, math.nan, sample.fan_pct,
                                             sample.ts, True, outdoor_c=sample.outdoor_c))
        arr = np.array(values[2 * 1440:])  # after both models are warm
        means = np.nanmean(arr[: arr.size // 120 * 120].reshape(-1, 120), axis=1)
        return float(np.nanmax(np.abs(means)))

    with_probe, blind = residual_spread(True), residual_spread(False)
    assert with_probe < 1.5  # noise and the stream's own daily wobble (0.4 %)
    assert blind > 2 * with_probe


def test_unit_model_state_round_trip_continues_identically() -> None:
    samples = list(weather_stream(2.5, 34))
    whole, first = CoolingUnitModel(), CoolingUnitModel()

    def feed(model: CoolingUnitModel, part: list[ComponentSample]) -> list[float]:
        return [model.residual_pct(s.cooling_measured_w, math.nan, s.fan_pct, s.ts, True,
                                   outdoor_c=s.outdoor_c) for s in part]

    cut = 1800  # inside the 6-h learning queue's second day
    expected = feed(whole, samples)
    feed(first, samples[:cut])
    resumed = CoolingUnitModel()
    resumed.restore(json.loads(json.dumps(first.state())))
    got = feed(resumed, samples[cut:])
    np.testing.assert_allclose(got, expected[cut:], rtol=1e-9, equal_nan=True)
    assert np.isfinite(got).sum() > 1000


def test_restored_monitor_keeps_the_weather_tuning_without_re_warming() -> None:
    monitor = DriftMonitor()
    for sample in weather_stream(2.0, 35):
        monitor.observe(sample)
    assert monitor.channels["cooling"].params.trend_halflife_bins == 0.0  # weather-aware tuning
    restored = DriftMonitor()
    restored.load_state(json.loads(json.dumps(monitor.save_state())))
    assert restored.channels["cooling"].params.trend_halflife_bins == 0.0
    assert restored.channels["cooling"].mode != GRACE
