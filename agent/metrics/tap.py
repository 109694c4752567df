"""What ``/metrics`` learns from the messages the agent publishes, exactly as MQTT subscribers do:
summaries feed the job energy ledger; drift events give each cause's published deviation and are
counted by cause and state.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

from agent.live.outbox import MessageObserver
from agent.metrics.jobs import JobEnergyLedger

log = logging.getLogger("rackwatt.metrics")


@dataclass(frozen=True)
class Onset:
    """The last published onset of one cause: what an operator was told."""

    ts: float
    deviation_pct: float | None
    since_ts: float | None


class MessageTap:
    """An ``on_message`` observer; chain it in front of the agent's own with ``observer()``."""

    def __init__(self, ledger: JobEnergyLedger) -> None:
        self.ledger = ledger
        self.onsets: dict[str, Onset] = {}
        self.events: Counter[tuple[str, str]] = Counter()  # (cause, state) → published drift events
        self.last_summary_ts: float | None = None

    def message(self, kind: str, topic: str, payload: dict[str, Any]) -> None:
        if kind == "summary":
            self.ledger.observe_summary(payload)
            ts = payload.get("ts")
            if isinstance(ts, int | float):
                self.last_summary_ts = float(ts)
        elif kind == "event" and payload.get("kind") == "drift":
            self._event(payload)

    def _event(self, payload: dict[str, Any]) -> None:
        cause, state = str(payload.get("cause") or "unknown"), str(payload.get("state") or "")
        self.events[(cause, state)] += 1
        if state == "onset":
            detail = payload.get("detail") if isinstance(payload.get("detail"), dict) else {}
            since = detail.get("since") if detail else None
            dev = payload.get("deviation_pct")
            self.onsets[cause] = Onset(ts=float(payload.get("ts") or 0.0),
                                       deviation_pct=float(dev) if isinstance(dev, int | float) else None,
                                       since_ts=float(since) if isinstance(since, int | float) else None)
        elif state == "cleared":
            self.onsets.pop(cause, None)

    def observer(self, downstream: MessageObserver | None) -> MessageObserver:
        """This tap, then ``downstream``; a failure here never keeps a message from it."""

        def both(kind: str, topic: str, payload: dict[str, Any]) -> None:
            try:
                self.message(kind, topic, payload)
            except Exception:
                log.exception("metrics: a %s message could not be read", kind)
            if downstream is not None:
                downstream(kind, topic, payload)

        return both
