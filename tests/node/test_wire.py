"""The node datagram: what goes in comes out, a changed byte or key is caught, the size is bounded."""

from __future__ import annotations

import math

import pytest

from agent.node import wire

KEY = b"k" * 32


def reading(gpus: int = 8, **kw: object) -> wire.NodeReading:
    values = {"power_w": 651.5, "energy_j": 123456789.125, "energy_resets": 2.0, "util_pct": 97.0,
              "mem_util_pct": 41.0, "temp_c": 63.0, "sm_clock_mhz": 1755.0, "power_limit_w": 700.0}
    fields: dict[str, object] = {"node_id": "n1", "session": 1_700_000_000_000_000, "seq": 42,
                                 "read_ts": 1.7e9 + 0.25, "sent_ts": 1.7e9 + 0.5,
                                 "gpus": {i: dict(values) for i in range(gpus)}}
    fields["gpus"] = kw.pop("gpus_values", fields["gpus"])
    fields.update(kw)
    return wire.NodeReading(**fields)  # type: ignore[arg-type]


def test_round_trip_keeps_every_field() -> None:
    sent = reading()
    data = wire.encode(sent, KEY)
    assert wire.verify(data, KEY) and wire.node_id_of(data) == "n1"
    got = wire.decode(data)
    assert (got.node_id, got.session, got.seq, got.read_ts, got.sent_ts) == (
        "n1", sent.session, 42, sent.read_ts, sent.sent_ts)
    assert got.gpus[7]["energy_j"] == 123456789.125  # f64: a year of 1 kW keeps sub-joule steps
    assert got.gpus[0]["power_w"] == 651.5 and got.gpus[3]["energy_resets"] == 2.0
    assert set(got.gpus[0]) == set(wire.FIELDS)


def test_absent_and_non_finite_values_stay_absent() -> None:
    data = wire.encode(reading(gpus=0, gpus_values={0: {"power_w": 300.0, "temp_c": math.nan}}), KEY)
    assert wire.decode(data).gpus == {0: {"power_w": 300.0}}


def test_a_changed_byte_or_another_key_fails_the_hmac() -> None:
    data = bytearray(wire.encode(reading(), KEY))
    assert not wire.verify(bytes(data), b"x" * 32)
    data[60] ^= 1
    assert not wire.verify(bytes(data), KEY)


def test_the_largest_datagram_fits_one_ethernet_frame() -> None:
    data = wire.encode(reading(gpus=wire.MAX_GPUS, node_id="n" * wire.MAX_ID_BYTES), KEY)
    assert len(data) == wire.MAX_DATAGRAM_BYTES <= 1472  # 1500-byte MTU − IPv4 and UDP headers
    with pytest.raises(wire.WireError, match="at most 32"):
        wire.encode(reading(gpus=wire.MAX_GPUS + 1), KEY)


@pytest.mark.parametrize(("data", "message"), [
    (b"", "shorter than any"),
    (b"XXXX" + bytes(100), "wrong magic"),
    (b"RWN1\x09" + bytes(100), "wire version 9"),
    (bytes(2000), "longer than any"),
])
def test_malformed_datagrams_say_what_is_wrong(data: bytes, message: str) -> None:
    with pytest.raises(wire.WireError, match=message):
        wire.decode(data)


def test_a_truncated_datagram_is_refused_by_its_length() -> None:
    data = wire.encode(reading(), KEY)
    with pytest.raises(wire.WireError, match="8 GPU"):
        wire.decode(data[:-5])
