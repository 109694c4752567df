"""What every driver returns, and the small protocol the poll loop relies on.

A poll never raises: a device error becomes a ``PollResult`` with ``ok=False`` and a message
naming the device and what failed, and its signals are simply absent (missing, never zero).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class PollResult:
    device: str  # "pdu.a", "crac.1", "nvml"
    ts: float  # Unix seconds when the poll started
    signals: dict[str, float]  # canonical name ("pdu.a.power_w") → value; missing signals are absent
    ok: bool
    elapsed_ms: float
    profile: str | None = None
    error: str | None = None  # "pdu 'a' (10.0.3.7:161): timeout after 2 tries"
    estimated: frozenset[str] = field(default_factory=frozenset)  # signals that are estimates
    profile_reason: str | None = None  # why this profile: "sysObjectID … starts with …", "probed …"
    unverified: frozenset[str] = field(default_factory=frozenset)  # read at addresses no real unit confirmed


class Driver(Protocol):
    """A configured device. ``poll`` does all I/O and never raises."""

    device: str
    interval_s: float

    async def poll(self) -> PollResult: ...

    async def close(self) -> None: ...
