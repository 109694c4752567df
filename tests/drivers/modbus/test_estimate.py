"""The electrical-power estimate: cube-law fans, compressor by load or cooling/COP, nothing for CW units."""

from __future__ import annotations

import pytest

from drivers.modbus_crac.estimate import EstimateInputs, estimate_power_w, fan_power_w

DX = EstimateInputs(rated_fan_power_w=1000.0, rated_compressor_power_w=8000.0, cooling_kind="dx", cop=3.5)


def test_fan_power_follows_the_cube_of_speed_with_a_floor() -> None:
    assert fan_power_w(100, 1000) == pytest.approx(1000)
    assert fan_power_w(50, 1000) == pytest.approx(125)
    assert fan_power_w(20, 1000) == pytest.approx(100)  # 0.2³ = 0.008 < 10 % floor
    assert fan_power_w(0, 1000) == 0


def test_compressor_load_beats_cooling_over_cop() -> None:
    value = estimate_power_w({"fan_pct": 50, "compressor_pct": 40, "cooling_w": 20000}, DX)
    assert value == pytest.approx(125 + 3200)


def test_cooling_over_cop_without_a_compressor_rating() -> None:
    inputs = EstimateInputs(None, None, "dx", 3.5)
    assert estimate_power_w({"cooling_w": 10800}, inputs) == pytest.approx(10800 / 3.5)


def test_chilled_water_units_are_fans_only() -> None:
    inputs = EstimateInputs(800.0, None, "chilled_water", 3.5)
    assert estimate_power_w({"fan_pct": 100, "cooling_w": 30000}, inputs) == pytest.approx(800)
    no_compressor = EstimateInputs(800.0, 0.0, "unknown", 3.5)
    assert estimate_power_w({"fan_pct": 100, "cooling_w": 30000}, no_compressor) == pytest.approx(800)


def test_no_measurement_no_estimate() -> None:
    assert estimate_power_w({"supply_temp_c": 18.0}, DX) is None
    assert estimate_power_w({"fan_pct": 60}, EstimateInputs(None, None, "chilled_water", 3.5)) is None
