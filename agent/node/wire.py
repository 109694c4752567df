"""The node → rack datagram: one node's GPU readings of one poll, signed with the node's key.

Layout (network byte order)::

    header   magic "RWN1" | version u8 | flags u8 | id length u8 | GPU count u8
             | session u64 | seq u64 | read_ts f64 | sent_ts f64 | node id (ASCII)
    GPU × n  ordinal u8 | present u16 (bit per field) | power_w f32 | energy_j f64
             | energy_resets u32 | util_pct f32 | mem_util_pct f32 | temp_c f32
             | sm_clock_mhz f32 | power_limit_w f32
    trailer  HMAC-SHA256 over everything before it (32 bytes)

``energy_j`` is the node's reset-safe cumulative count, so a lost datagram loses no energy.
``session`` (never lower than the previous one) and ``seq`` make every datagram unique and ordered,
so a captured one cannot be replayed. ``read_ts``/``sent_ts`` are the node's clock; the receiver
measures its offset from ``sent_ts``. Trust decisions are the receiver's; this module only packs.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import struct
from dataclasses import dataclass, field

MAGIC = b"RWN1"
VERSION = 1
HEADER = struct.Struct("!4sBBBBQQdd")
GPU = struct.Struct("!BHfdIfffff")
MAC_BYTES = 32  # HMAC-SHA256
MAX_ID_BYTES = 64
# One 1500-byte Ethernet frame carries 1472 bytes of UDP payload; a datagram larger than that is
# fragmented, and losing any fragment loses it whole. 32 GPUs (every node board today carries
# 4–8, a GB200 tray 4) with the longest id fit: 40 + 64 + 32 × 39 + 32 = 1384 bytes.
MAX_GPUS = 32
MAX_DATAGRAM_BYTES = HEADER.size + MAX_ID_BYTES + MAX_GPUS * GPU.size + MAC_BYTES
# The per-GPU fields in wire order (bit i of ``present`` ↔ FIELDS[i]); canonical signal suffixes.
FIELDS = ("power_w", "energy_j", "energy_resets", "util_pct", "mem_util_pct", "temp_c",
          "sm_clock_mhz", "power_limit_w")
FLAG_ENERGY_ESTIMATED = 1  # the node has no energy counter: energy_j integrates power


class WireError(ValueError):
    """A datagram that is not a well-formed rackwatt node datagram; the message says what is wrong."""


@dataclass(frozen=True)
class NodeReading:
    """One node's GPUs at one poll, as the node saw them (its own clock)."""

    node_id: str
    session: int
    seq: int
    read_ts: float  # node wall clock when NVML was read
    sent_ts: float  # node wall clock when the datagram left
    gpus: dict[int, dict[str, float]] = field(default_factory=dict)  # ordinal → field → value
    energy_estimated: bool = False


def encode(reading: NodeReading, key: bytes) -> bytes:
    """The signed datagram for ``reading``; raises ``WireError`` for what cannot be sent."""
    node_id = reading.node_id.encode("ascii", errors="strict")
    if not 0 < len(node_id) <= MAX_ID_BYTES:
        raise WireError(f"node id must be 1..{MAX_ID_BYTES} ASCII bytes, got {len(node_id)}")
    if len(reading.gpus) > MAX_GPUS:
        raise WireError(f"{len(reading.gpus)} GPUs: at most {MAX_GPUS} fit one datagram")
    flags = FLAG_ENERGY_ESTIMATED if reading.energy_estimated else 0
    parts = [HEADER.pack(MAGIC, VERSION, flags, len(node_id), len(reading.gpus), reading.session,
                         reading.seq, reading.read_ts, reading.sent_ts), node_id]
    for ordinal, values in sorted(reading.gpus.items()):
        if not 0 <= ordinal <= 255:
            raise WireError(f"GPU ordinal {ordinal} is outside 0..255")
        present = 0
        numbers: list[float] = []
        for bit, name in enumerate(FIELDS):
            value = values.get(name)
            if value is not None and math.isfinite(value):
                present |= 1 << bit
                numbers.append(value)
            else:
                numbers.append(0.0)
        numbers[2] = float(min(max(int(numbers[2]), 0), 2**32 - 1))  # energy_resets is a count
        parts.append(GPU.pack(ordinal, present, numbers[0], numbers[1], int(numbers[2]), *numbers[3:]))
    body = b"".join(parts)
    return body + hmac.new(key, body, hashlib.sha256).digest()


def node_id_of(datagram: bytes) -> str:
    """The node id a datagram claims (unauthenticated: used only to pick the key to check it with)."""
    if len(datagram) < HEADER.size + MAC_BYTES:
        raise WireError(f"{len(datagram)} bytes: shorter than any node datagram")
    if len(datagram) > MAX_DATAGRAM_BYTES:
        raise WireError(f"{len(datagram)} bytes: longer than any node datagram ({MAX_DATAGRAM_BYTES})")
    magic, version, _flags, id_len, _count, *_rest = HEADER.unpack_from(datagram)
    if magic != MAGIC:
        raise WireError("not a rackwatt node datagram (wrong magic)")
    if version != VERSION:
        raise WireError(f"wire version {version}; this agent reads version {VERSION} (upgrade one side)")
    raw_id = datagram[HEADER.size:HEADER.size + id_len]
    try:
        return raw_id.decode("ascii")
    except UnicodeDecodeError:
        raise WireError("node id is not ASCII") from None


def verify(datagram: bytes, key: bytes) -> bool:
    """Whether the datagram's trailer is this key's HMAC of its body (constant-time compare)."""
    body, mac = datagram[:-MAC_BYTES], datagram[-MAC_BYTES:]
    return hmac.compare_digest(mac, hmac.new(key, body, hashlib.sha256).digest())


def decode(datagram: bytes) -> NodeReading:
    """The reading in an (already verified) datagram; raises ``WireError`` if it is malformed."""
    node_id = node_id_of(datagram)
    _magic, _version, flags, id_len, count, session, seq, read_ts, sent_ts = HEADER.unpack_from(datagram)
    expected = HEADER.size + id_len + count * GPU.size + MAC_BYTES
    if len(datagram) != expected:
        raise WireError(f"{len(datagram)} bytes where {count} GPU(s) make {expected}")
    if not (math.isfinite(read_ts) and math.isfinite(sent_ts)):
        raise WireError("timestamps are not finite")
    gpus: dict[int, dict[str, float]] = {}
    offset = HEADER.size + id_len
    for _ in range(count):
        ordinal, present, *numbers = GPU.unpack_from(datagram, offset)
        offset += GPU.size
        values = {name: float(numbers[bit]) for bit, name in enumerate(FIELDS) if present & (1 << bit)}
        gpus[ordinal] = {k: v for k, v in values.items() if math.isfinite(v)}
    return NodeReading(node_id, session, seq, read_ts, sent_ts, gpus,
                       energy_estimated=bool(flags & FLAG_ENERGY_ESTIMATED))
