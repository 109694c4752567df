"""Profiles load and carry their sources; batching groups contiguous registers into ≤125-register reads."""

from __future__ import annotations

import pytest

from agent.config.model import CracConfig, ModbusRegister
from drivers.modbus_crac.driver import CracModbusDriver
from drivers.modbus_crac.plan import plan_batches
from drivers.modbus_crac.profiles import (
    Point,
    ProfileError,
    available_profiles,
    load_profile,
    merged_points,
    profile_from_dict,
)

VENDOR_PROFILES = ["apc_inrow_sc", "liebert_crv", "liebert_icom", "stulz_c7000"]


def test_every_vendor_profile_is_shipped() -> None:
    assert set(VENDOR_PROFILES) | {"generic"} <= set(available_profiles())


@pytest.mark.parametrize("name", VENDOR_PROFILES)
def test_every_point_names_its_source(name: str) -> None:
    profile = load_profile(name)
    assert profile.points and profile.sources
    for point in profile.points:
        assert point.source, f"{name}: {point.signal} has no source"


def test_inrow_sc_matches_the_published_map() -> None:
    points = {p.signal: p for p in load_profile("apc_inrow_sc").points}
    assert (points["supply_temp_c"].address, points["supply_temp_c"].type, points["supply_temp_c"].unit) == (
        94, "s32", "degF")
    assert points["cooling_w"].address == 88 and points["cooling_w"].word_order == "big"
    assert all(p.function_code == 3 for p in points.values())


def test_liebert_uses_input_registers_at_register_minus_30001() -> None:
    points = {p.signal: p for p in load_profile("liebert_icom").points}
    assert points["setpoint_c"].address == 30023 - 30001
    assert points["power_w"].address == 31010 - 30001
    assert all(p.function_code == 4 for p in points.values())


def test_unknown_profile_names_the_known_ones() -> None:
    with pytest.raises(ProfileError, match=r"known: .*liebert_icom"):
        load_profile("carrier_x")


@pytest.mark.parametrize(
    ("change", "message"),
    [({"type": "u64"}, "type must be"), ({"table": "coil"}, "table must be"), ({"address": -1}, "address"),
     ({"word_order": "middle"}, "word_order"), ({"unit": "kW", "signal": "supply_temp_c"}, "cannot feed"),
     ({"scale": 0}, "scale")],
)
def test_bad_points_are_refused_with_the_reason(change: dict[str, object], message: str) -> None:
    raw = {"signal": "fan_pct", "address": 10, "type": "u16"} | change
    with pytest.raises(ProfileError, match=message):
        profile_from_dict({"name": "t", "points": [raw]}, where="profile 't'")


def test_hex_sentinels_in_profiles() -> None:
    profile = profile_from_dict(
        {"name": "t", "points": [{"signal": "fan_pct", "address": 1, "sentinels": ["0x7FFF", 0]}]}, "t")
    assert profile.points[0].sentinels == frozenset({0x7FFF, 0})


def test_configured_registers_override_profile_points_by_signal() -> None:
    profile = load_profile("liebert_crv")
    extra = (ModbusRegister(address=100, signal="supply_temp_c", table="input", type="s16", scale=0.1,
                            unit="degC"),
             ModbusRegister(address=7, signal="fan_pct", table="input"))
    points = {p.signal: p for p in merged_points(profile, extra, "crac 'x'")}
    assert points["fan_pct"].address == 7 and points["supply_temp_c"].address == 100
    assert points["compressor_pct"].address == 451


def test_generic_profile_without_registers_is_a_clear_error() -> None:
    with pytest.raises(ProfileError, match=r"crac 'x'.*\[\[crac.registers\]\]"):
        CracModbusDriver(CracConfig(id="x", host="127.0.0.1", profile="generic"))


def _p(signal: str, address: int, type_: str = "u16", table: str = "holding") -> Point:
    return Point(signal, address, table, type_)


def test_contiguous_registers_share_one_request() -> None:
    batches = plan_batches([_p("a", 10), _p("b", 11, "u32"), _p("c", 13), _p("d", 20)])
    assert [(b.start, b.count, len(b.points)) for b in batches] == [(10, 4, 3), (20, 1, 1)]


def test_tables_are_never_mixed_and_gaps_break_batches() -> None:
    batches = plan_batches([_p("a", 10), _p("b", 11, table="input"), _p("c", 12)])
    assert [(b.function_code, b.start, b.count) for b in batches] == [(3, 10, 1), (3, 12, 1), (4, 11, 1)]
    bridged = plan_batches([_p("a", 10), _p("c", 12)], bridge_gap=1)
    assert [(b.start, b.count) for b in bridged] == [(10, 3)]


def test_no_request_exceeds_125_registers() -> None:
    points = [_p(f"s{i}", i) for i in range(300)]
    batches = plan_batches(points)
    assert max(b.count for b in batches) == 125
    assert sum(len(b.points) for b in batches) == 300
    assert len(batches) == 3
    assert all(b.count <= 60 for b in plan_batches(points, max_registers=60))


def test_cooling_kind_in_the_config_overrides_the_profile() -> None:
    config = CracConfig(id="x", host="127.0.0.1", profile="apc_inrow_sc", cooling_kind="chilled_water")
    assert CracModbusDriver(config).estimate_inputs.cooling_kind == "chilled_water"
    default = CracModbusDriver(CracConfig(id="x", host="h", profile="apc_inrow_sc"))
    assert default.estimate_inputs.cooling_kind == "dx"
    with pytest.raises(ProfileError, match="cooling_kind must be one of"):
        CracModbusDriver(CracConfig(id="x", host="h", profile="apc_inrow_sc", cooling_kind="glycol"))


def test_sample_configuration_loads_and_builds() -> None:
    from agent.config.loader import load_config
    from drivers.registry import build_drivers
    from tests.conftest import REPO_ROOT

    config = load_config(REPO_ROOT / "drivers" / "modbus_crac" / "sample.toml")
    drivers = build_drivers(config)
    assert [type(d).__name__ for d in drivers] == ["CracModbusDriver"] * 3
    assert [d.device for d in drivers] == ["crac.crah1", "crac.inrow2", "crac.lcp3"]
