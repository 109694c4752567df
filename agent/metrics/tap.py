"""What ``/metrics`` learns from the messages the agent publishes, exactly as MQTT subscribers do:
summaries feed the job energy ledger; drift events give each cause's published deviation (what an
operator was told) and are counted by cause and state.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from agent.live.outbox import MessageObserver
from agent.metrics.jobs import JobEnergyLedger
from agent.payload import number

log = logging.getLogger("rackwatt.metrics")


class MessageTap:
    """An ``on_message`` observer; chain it in front of the agent's own with ``observer()``."""

    def __init__(self, ledger: JobEnergyLedger) -> None:
        self.ledger = ledger
        self.deviations: dict[str, float | None] = {}  # cause → its last published onset's deviation_pct
        self.events: Counter[tuple[str, str]] = Counter()  # (cause, state) → published drift events
        self.last_summary_ts: float | None = None

    def message(self, kind: str, topic: str, payload: dict[str, Any]) -> None:
        if kind == "summary":
            self.ledger.observe_summary(payload)
            ts = number(payload.get("ts"))
            if ts is not None:
                self.last_summary_ts = ts
        elif kind == "event" and payload.get("kind") == "drift":
            self._event(payload)

    def _event(self, payload: dict[str, Any]) -> None:
        cause, state = str(payload.get("cause") or "unknown"), str(payload.get("state") or "")
        self.events[(cause, state)] += 1
        if state == "onset":
            self.deviations[cause] = number(payload.get("deviation_pct"))
        elif state == "cleared":
            self.deviations.pop(cause, None)

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
