"""Register words ⇄ engineering values for one cooling-unit point, and unit conversion.

32-bit values span two words whose order varies by vendor (``word_order``: "big" = most-significant
word first, APC/Schneider; "little" = word-swapped, e.g. Liebert DCD "(sw)" floats). Sentinels are
compared on the raw bit pattern before scaling and become ``None`` (missing), never 0.
``encode_value`` is the exact inverse (the demo Modbus server serves register images with it).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Protocol

TYPE_WIDTH = {"u16": 1, "s16": 1, "u32": 2, "s32": 2, "f32": 2}
STRUCT_FORMAT = {"u16": ">H", "s16": ">h", "u32": ">I", "s32": ">i", "f32": ">f"}  # the bits as a number
WORD_ORDERS = ("big", "little")

# Raw bit patterns that mean "not available" when a profile does not say otherwise. They are
# the conventional Modbus "no value" patterns; a cooling unit's temperatures, percentages and
# kW never legitimately reach them. f32 NaN/inf is always missing.
DEFAULT_SENTINELS: dict[str, frozenset[int]] = {
    "u16": frozenset({0xFFFF}), "s16": frozenset({0x7FFF, 0x8000}), "u32": frozenset({0xFFFFFFFF}),
    "s32": frozenset({0x7FFFFFFF, 0x80000000}), "f32": frozenset(),
}

# unit written in a profile → (canonical signal suffix it may feed, multiplier, offset)
_UNITS: dict[str, tuple[str, float, float]] = {
    "W": ("_w", 1.0, 0.0), "kW": ("_w", 1000.0, 0.0), "%": ("_pct", 1.0, 0.0),
    "degC": ("_c", 1.0, 0.0), "degF": ("_c", 5.0 / 9.0, -32.0),
}
_UNIT_ALIASES = {"°C": "degC", "C": "degC", "°F": "degF", "F": "degF", "pct": "%", "%RH": "%"}


class PointLike(Protocol):
    """What decoding needs of a point (``profiles.Point``, which imports this module, has it)."""

    @property
    def type(self) -> str: ...
    @property
    def word_order(self) -> str: ...
    @property
    def scale(self) -> float: ...
    @property
    def unit(self) -> str: ...
    @property
    def sentinels(self) -> frozenset[int]: ...


def canonical_unit(unit: str) -> str:
    """The profile unit spelled the one way this module knows it ("" = already canonical)."""
    return _UNIT_ALIASES.get(unit, unit)


def unit_problem(signal: str, unit: str) -> str | None:
    """Why ``unit`` cannot feed ``signal`` (e.g. kW into a temperature), or None when it can."""
    unit = canonical_unit(unit)
    if unit == "":
        return None
    if unit not in _UNITS:
        known = ", ".join(sorted({*_UNITS, *_UNIT_ALIASES}))
        return f"unknown unit {unit!r} (known: {known}, or empty for canonical units)"
    suffix = _UNITS[unit][0]
    if not signal.endswith(suffix):
        return f"unit {unit!r} cannot feed signal {signal!r} (needs a name ending in {suffix})"
    return None


def _conversion(unit: str) -> tuple[float, float]:
    """(multiplier, offset) from ``unit`` to canonical units: (value + offset) × multiplier."""
    unit = canonical_unit(unit)
    return (1.0, 0.0) if unit == "" else _UNITS[unit][1:]


def words_to_raw(words: Sequence[int], type_: str, word_order: str) -> int:
    """The unsigned bit pattern held by 1 or 2 registers."""
    if TYPE_WIDTH[type_] == 1:
        return words[0] & 0xFFFF
    high, low = (words[0], words[1]) if word_order == "big" else (words[1], words[0])
    return ((high & 0xFFFF) << 16) | (low & 0xFFFF)


def raw_to_words(raw: int, type_: str, word_order: str) -> list[int]:
    if TYPE_WIDTH[type_] == 1:
        return [raw & 0xFFFF]
    high, low = (raw >> 16) & 0xFFFF, raw & 0xFFFF
    return [high, low] if word_order == "big" else [low, high]


def raw_to_number(raw: int, type_: str) -> float:
    return float(struct.unpack(STRUCT_FORMAT[type_], raw.to_bytes(2 * TYPE_WIDTH[type_], "big"))[0])


def number_to_raw(number: float, type_: str) -> int:
    value = number if type_ == "f32" else round(number)
    try:
        packed = struct.pack(STRUCT_FORMAT[type_], value)
    except struct.error:
        raise ValueError(f"{number} does not fit {type_}") from None
    return int.from_bytes(packed, "big")


def decode_value(point: PointLike, words: Sequence[int]) -> float | None:
    """The point's canonical value from its registers, or None for a sentinel / non-finite value."""
    raw = words_to_raw(words, point.type, point.word_order)
    if raw in point.sentinels:
        return None
    number = raw_to_number(raw, point.type)
    if not math.isfinite(number):
        return None
    # round away float noise from scale/unit arithmetic (22.000000000000007 °C); far below resolution
    multiplier, offset = _conversion(point.unit)
    return round((number * point.scale + offset) * multiplier, 6)


def encode_value(point: PointLike, value: float | None) -> list[int]:
    """Registers that decode to ``value``; ``None`` encodes the point's first sentinel (or NaN)."""
    if value is None:
        if point.type == "f32":
            return raw_to_words(number_to_raw(math.nan, "f32"), point.type, point.word_order)
        sentinel = min(point.sentinels) if point.sentinels else 0
        return raw_to_words(sentinel, point.type, point.word_order)
    multiplier, offset = _conversion(point.unit)
    number = (value / multiplier - offset) / point.scale
    return raw_to_words(number_to_raw(number, point.type), point.type, point.word_order)
