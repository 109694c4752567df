"""The one way out: engine records → envelope (``seq`` from the store) → topic → store → publisher.

Every observer (the demo's view, the metrics tap) sees exactly what was stored, with its ``seq``;
with MQTT off the store still hands out the ``seq`` (``keep=False``), so the numbering is the same.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from agent.live.engine_link import Report
from agent.live.envelope import MessageKind, Payload
from agent.live.store import Store
from agent.live.topics import SCHEMA_VERSION, Topics

log = logging.getLogger("rackwatt.agent")

MessageObserver = Callable[[str, str, Payload], None]  # kind, topic, payload (with its seq)


class Outbox:
    """Turns reports into stored, numbered messages and tells the publisher and observers."""

    def __init__(
        self,
        topics: Topics,
        store: Store,
        *,
        site: str,
        rack: str,
        qos: int,
        keep: bool,
        on_stored: Callable[[], None] | None = None,
        observe: MessageObserver | None = None,
    ) -> None:
        self.topics = topics
        self.store = store
        self.site, self.rack = site, rack
        self.qos = qos
        self.keep = keep  # False with MQTT off: seqs only, nothing waits for a broker
        self.on_stored = on_stored
        self.observe = observe

    def send(self, kind: MessageKind, payload: Payload, stage: str | None = None) -> int:
        """Store one message (durably, before returning) and return its ``seq``."""
        topic, retain = self.topics.for_message(kind, stage)
        env = self.store.put(kind, topic, payload, retain=retain, qos=self.qos, keep=self.keep)
        if self.on_stored is not None:
            self.on_stored()
        if self.observe is not None:
            try:
                self.observe(kind, topic, env.payload)
            except Exception:  # an observer (the demo's view, metrics) must never stop delivery
                log.exception("message observer failed")
        return env.seq

    def reports(self, reports: Iterable[Report]) -> bool:
        """Send the engine's summary and event records; True if one was a summary."""
        summary = False
        for report in reports:
            kind = report.get("type")
            payload = report.get("payload")
            if kind == "summary" and isinstance(payload, dict):
                self.send("summary", payload)
                summary = True
            elif kind == "event":
                self.send("event", self.event_payload(report))
        return summary

    def baselines(self, payloads: dict[str, Payload]) -> None:
        for stage, payload in sorted(payloads.items()):
            self.send("baseline", payload, stage=stage)

    def event_payload(self, report: Report) -> Payload:
        body = {k: v for k, v in report.items() if k != "type"}
        return {"v": SCHEMA_VERSION, "type": "event", "site": self.site, "rack": self.rack, **body}
