"""Register words ⇄ values: every type and word order round-trips; sentinels and NaN become missing."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drivers.modbus_crac.decode import decode_value, encode_value, unit_problem, words_to_raw
from drivers.modbus_crac.profiles import Point, available_profiles, load_profile

RANGES = {
    "u16": (0, 0xFFFE), "s16": (-0x7FFF, 0x7FFE), "u32": (0, 0xFFFFFFFE), "s32": (-0x7FFFFFFF, 0x7FFFFFFE)
}


def point(
    type_: str, word_order: str = "big", scale: float = 1.0, unit: str = "", signal: str = "x_w"
) -> Point:
    from drivers.modbus_crac.decode import DEFAULT_SENTINELS

    return Point(signal, 0, "holding", type_, word_order, scale, unit, DEFAULT_SENTINELS[type_])


@pytest.mark.parametrize("type_", sorted(RANGES))
@pytest.mark.parametrize("word_order", ["big", "little"])
@given(data=st.data())
def test_integer_types_round_trip(type_: str, word_order: str, data: st.DataObject) -> None:
    low, high = RANGES[type_]
    number = data.draw(st.integers(low, high))
    p = point(type_, word_order)
    assert decode_value(p, encode_value(p, number)) == number


@pytest.mark.parametrize("word_order", ["big", "little"])
@given(value=st.floats(-1e6, 1e6, allow_nan=False, width=32))
def test_float32_round_trips(word_order: str, value: float) -> None:
    p = point("f32", word_order)
    assert decode_value(p, encode_value(p, value)) == pytest.approx(value, rel=1e-6, abs=1e-6)


def test_word_order_decides_which_register_is_high() -> None:
    assert words_to_raw([0x0001, 0x0002], "u32", "big") == 0x00010002
    assert words_to_raw([0x0001, 0x0002], "u32", "little") == 0x00020001
    # the same float, Liebert DCD style word-swapped: 0x41A40000 = 20.5
    assert decode_value(point("f32", "little"), [0x0000, 0x41A4]) == 20.5
    assert decode_value(point("f32", "big"), [0x41A4, 0x0000]) == 20.5


@pytest.mark.parametrize(
    ("type_", "words"),
    [("s16", [0x7FFF]), ("s16", [0x8000]), ("u16", [0xFFFF]), ("u32", [0xFFFF, 0xFFFF]),
     ("s32", [0x7FFF, 0xFFFF]), ("s32", [0x8000, 0x0000]),
     ("f32", [0x7FC0, 0x0000]), ("f32", [0x7F80, 0x0000])],
)
def test_sentinels_and_non_finite_values_are_missing_not_zero(type_: str, words: list[int]) -> None:
    assert decode_value(point(type_), words) is None


def test_signed_values_keep_their_sign() -> None:
    assert decode_value(point("s16", scale=0.1, unit="degC", signal="t_c"), [0xFFF6]) == -1.0


def test_tenths_of_fahrenheit_become_celsius() -> None:
    p = point("s32", scale=0.1, unit="degF", signal="supply_temp_c")
    assert decode_value(p, [0, 680]) == pytest.approx(20.0)  # 68.0 °F
    assert encode_value(p, 20.0) == [0, 680]


def test_tenths_of_kw_become_watts() -> None:
    p = point("s32", scale=0.1, unit="kW", signal="cooling_w")
    assert decode_value(p, [0, 108]) == pytest.approx(10800.0)


def test_none_encodes_a_sentinel() -> None:
    p = point("s16")
    assert decode_value(p, encode_value(p, None)) is None
    assert math.isnan(struct_float(encode_value(point("f32"), None)))


def struct_float(words: list[int]) -> float:
    import struct

    return float(struct.unpack(">f", ((words[0] << 16) | words[1]).to_bytes(4, "big"))[0])


def test_unit_must_fit_the_signal() -> None:
    assert unit_problem("supply_temp_c", "kW") is not None
    assert "unknown unit" in (unit_problem("fan_pct", "rpm") or "")
    assert unit_problem("cooling_w", "kW") is None
    assert unit_problem("setpoint_c", "°F") is None


ALL_POINTS = [p for name in available_profiles() for p in load_profile(name).points]


@given(words=st.lists(st.integers(0, 0xFFFF), min_size=2, max_size=2))
def test_any_register_content_decodes_to_a_finite_value_or_missing(words: list[int]) -> None:
    for p in ALL_POINTS:
        value = decode_value(p, words[: p.width])
        assert value is None or math.isfinite(value)
