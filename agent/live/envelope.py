"""One outbound MQTT message as the store keeps it: payload plus where, how, and its ``seq``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

MessageKind = Literal["summary", "event", "baseline"]
MESSAGE_KINDS: tuple[MessageKind, ...] = ("summary", "event", "baseline")

# Which messages a full store gives up first (lower first). A summary or a baseline is
# superseded by the next one (the retained baseline is re-published every interval); an event
# (a drift onset or its clearing) is not, so events go only when nothing else is left.
DROP_PRIORITY: dict[str, int] = {"summary": 0, "baseline": 0, "event": 1}

Payload = dict[str, Any]  # a JSON object


@dataclass(frozen=True)
class Envelope:
    seq: int
    kind: MessageKind
    topic: str
    retain: bool
    qos: int
    created: float  # Unix seconds when it was stored (``delayed`` is judged from it)
    payload: Payload  # includes ``"seq": seq``

    @property
    def priority(self) -> int:
        return DROP_PRIORITY[self.kind]


def payload_json(payload: Payload) -> str:
    """The wire form of every outbound payload (compact; NaN and ±inf are a ValueError, not JSON)."""
    return json.dumps(payload, separators=(",", ":"), allow_nan=False)


def message_kind(text: str) -> MessageKind:
    """``text`` as a message kind; anything else is a ValueError naming it."""
    for kind in MESSAGE_KINDS:
        if text == kind:
            return kind
    raise ValueError(f"unknown message kind {text!r} (expected one of {', '.join(MESSAGE_KINDS)})")
