"""Sparkplug B payloads, the protobuf wire format by hand (a dozen fields did not justify a protobuf
dependency): ``Payload {timestamp=1, metrics=2, seq=3}``, ``Metric {name=1, alias=2, timestamp=3,
datatype=4, is_null=7, long_value=11, double_value=13, boolean_value=14, string_value=15}``, as in
Eclipse Tahu's ``sparkplug_b.proto`` (which the tests decode with).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

# Sparkplug B data types (sparkplug_b.proto, enum DataType) for the values we send
UINT64, DOUBLE, BOOLEAN, STRING = 8, 10, 11, 12
Value = float | bool | str | int | None


@dataclass(frozen=True)
class Metric:
    """One metric; ``value`` None is sent as ``is_null`` (a known-unknown, never 0)."""

    name: str
    datatype: int
    value: Value
    alias: int | None = None
    timestamp_ms: int | None = None


def _varint(n: int) -> bytes:
    if n < 0:
        raise ValueError(f"varint must be >= 0, got {n}")
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _uint(field: int, n: int) -> bytes:
    return _key(field, 0) + _varint(n)


def _bytes(field: int, data: bytes) -> bytes:
    return _key(field, 2) + _varint(len(data)) + data


def encode_metric(m: Metric) -> bytes:
    out = _bytes(1, m.name.encode())
    if m.alias is not None:
        out += _uint(2, m.alias)
    if m.timestamp_ms is not None:
        out += _uint(3, m.timestamp_ms)
    out += _uint(4, m.datatype)
    if m.value is None or (isinstance(m.value, float) and not math.isfinite(m.value)):
        return out + _uint(7, 1)  # is_null
    if m.datatype == DOUBLE:
        return out + _key(13, 1) + struct.pack("<d", float(m.value))
    if m.datatype == BOOLEAN:
        return out + _uint(14, 1 if m.value else 0)
    if m.datatype == STRING:
        return out + _bytes(15, str(m.value).encode())
    if m.datatype == UINT64:
        return out + _uint(11, int(m.value))
    raise ValueError(f"metric {m.name!r}: unsupported datatype {m.datatype}")


def encode_payload(timestamp_ms: int, metrics: list[Metric], seq: int | None) -> bytes:
    """A Payload; ``seq`` None for NDEATH (which carries none)."""
    out = _uint(1, timestamp_ms)
    for m in metrics:
        out += _bytes(2, encode_metric(m))
    if seq is not None:
        out += _uint(3, seq)
    return out
