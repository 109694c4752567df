"""What the live agent says and hears: engine reports → MQTT messages, status, inbound commands.

A mixin of ``LiveAgent`` (agent/live/loop.py), kept apart so the loop module stays about the
lifecycle. ``emit`` is the one way out (spool first, then observers such as the demo's view);
``status_body`` is the ``online`` status; hints and ``cmd/accept`` arrive through ``_on_*``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from agent.config.model import Config
from agent.live import sdnotify
from agent.live.engine_link import EngineLink
from agent.live.poller import Poller
from agent.live.publisher import MqttPublisher
from agent.live.spool import Spool
from agent.live.topics import SCHEMA_VERSION, Topics
from agent.metrics.snapshot import active_drift_list

log = logging.getLogger("rackwatt.agent")

MessageObserver = Callable[[str, str, dict[str, Any]], None]  # kind, topic, payload (with its seq)


class AgentOutputs:
    """Reports, status and inbound handling; the attributes below are set by ``LiveAgent``."""

    config: Config
    clock: Any
    engine: EngineLink | None
    poller: Poller | None
    publisher: MqttPublisher | None
    spool: Spool | None
    intake: Any
    stage_now: Any
    on_message: MessageObserver | None
    started_ts: float
    engine_errors: int
    last_engine_error: str | None
    reloads: int
    reload_failures: int
    _local_seq: int

    @property
    def topics(self) -> Topics:
        c = self.config
        return Topics.for_rack(c.mqtt.topic_root, c.agent.site, c.agent.rack)

    def _engine_failed(self, what: str, exc: Exception) -> None:
        self.engine_errors += 1
        self.last_engine_error = f"{what}: {type(exc).__name__}: {exc}"
        if self.engine_errors in (1, 10, 100) or self.engine_errors % 1000 == 0:
            log.exception(
                "engine: %s failed (%d time(s) so far); the agent keeps running",
                what,
                self.engine_errors,
                exc_info=exc,
            )

    def _handle_reports(self, reports: list[dict[str, Any]]) -> bool:
        summary = False
        for report in reports:
            kind = report.get("type")
            if kind == "summary" and isinstance(report.get("payload"), dict):
                self.emit("summary", report["payload"])
                summary = True
            elif kind == "event":
                self.emit("event", self._event_payload(report))
        return summary

    def _event_payload(self, report: dict[str, Any]) -> dict[str, Any]:
        body = {k: v for k, v in report.items() if k != "type"}
        return {
            "v": SCHEMA_VERSION,
            "type": "event",
            "site": self.config.agent.site,
            "rack": self.config.agent.rack,
            **body,
        }

    def _emit_engine_summary(self, ts: float) -> None:
        if self.engine is None:
            return
        try:
            payload = self.engine.summary_payload(ts)
        except Exception as exc:
            self._engine_failed("summary_payload", exc)
            return
        if payload:
            self.emit("summary", payload)

    def _emit_baselines(self, ts: float) -> None:
        if self.engine is None:
            return
        try:
            baselines = self.engine.baseline_payloads(ts)
        except Exception as exc:
            self._engine_failed("baseline_payloads", exc)
            return
        for stage, payload in sorted(baselines.items()):
            self.emit("baseline", payload, stage=stage)

    def emit(self, kind: str, payload: dict[str, Any], stage: str | None = None) -> int:
        """Publish (spool first) a summary/event/baseline; observers see it with its seq."""
        topics = self.topics
        topic = topics.baseline(stage or "") if kind == "baseline" else getattr(topics, kind)
        if self.publisher is not None:
            try:
                seq = self.publisher.publish(kind, payload, stage=stage)
            except (OSError, ValueError) as exc:
                log.error("cannot spool a %s message: %s", kind, exc)
                return -1
        else:
            self._local_seq += 1
            seq = self._local_seq
        if self.on_message is not None:
            try:
                self.on_message(kind, topic, {**payload, "seq": seq})
            except Exception:
                log.exception("message observer failed")
        return seq

    # ---- status ----------------------------------------------------------------------------
    def status_body(self) -> dict[str, Any]:
        """The ``online`` status fields the publisher wraps (see agent/schemas/status.schema.json)."""
        now = self.clock.time()
        body: dict[str, Any] = {
            "ts": now,
            "started": self.started_ts,
            "uptime_s": round(max(0.0, now - self.started_ts), 1),
            "devices": self.poller.health_dict() if self.poller else {},
            "engine": {
                "ok": self.engine is not None and self.engine_errors == 0,
                "errors": self.engine_errors,
                "last_error": self.last_engine_error,
            },
            "reloads": {"ok": self.reloads, "rejected": self.reload_failures},
        }
        caps = self.engine.capabilities() if self.engine is not None else None
        if caps is not None:
            body["capabilities"] = caps
        if self.spool is not None:
            body["spool"] = self.spool.stats()
        if self.intake is not None:
            body["hints"] = dict(self.intake.counters)
        # active drifts, so a watcher that missed the onset event still sees them (rackwatt watch)
        body["drifts"] = active_drift_list(getattr(self.engine, "engine", None))
        if self.stage_now is not None:
            body["stage"] = {
                "stage": self.stage_now.stage,
                "source": self.stage_now.source,
                "job": self.stage_now.job,
            }
        return body

    def _health_signature(self) -> tuple[Any, ...]:
        devices = self.poller.health_dict() if self.poller else {}
        return (
            tuple(sorted(d for d, h in devices.items() if h["ok"])),
            self.engine_errors > 0,
            tuple(d["cause"] for d in active_drift_list(getattr(self.engine, "engine", None))),
            self.reloads,
            self.reload_failures,
        )

    def _refresh_status(self) -> None:
        devices = self.poller.health_dict() if self.poller else {}
        ok = sum(1 for h in devices.values() if h["ok"])
        mqtt_state = "off"
        if self.publisher is not None:
            self.publisher.publish_status()
            mqtt_state = "connected" if self.publisher.connected else "unreachable"
        pending = len(self.spool) if self.spool is not None else 0
        sdnotify.status(f"{ok}/{len(devices)} devices ok; mqtt {mqtt_state}; {pending} message(s) spooled")

    # ---- inbound ---------------------------------------------------------------------------
    def _on_mqtt_hint(self, data: bytes) -> None:
        if self.intake is not None:
            self.intake.receive(data, "mqtt", "broker")

    def _on_mqtt_accept(self, data: bytes) -> None:
        from agent.live.accept import parse_accept

        try:
            cause, by = parse_accept(data)
        except ValueError as exc:
            log.warning("mqtt cmd/accept: ignored: %s", exc)
            return
        self._accept(cause, by)

    def _on_command(self, command: Any) -> None:
        if getattr(command, "name", "") == "accept":
            self._accept(command.cause or "all", "operator")
        else:
            log.warning("stage hints: unknown command %r ignored", getattr(command, "name", command))

    def _accept(self, cause: str, by: str) -> None:
        if self.engine is None:
            log.warning("accept %s from %s: no engine running", cause, by)
            return
        try:
            events = self.engine.accept(cause, self.clock.time(), by)
        except Exception as exc:
            log.warning("accept %s from %s: %s", cause, by, exc)
            return
        log.info("accept: %s accepted as the new normal by %s", cause or "(all)", by)
        self._handle_reports([{"type": "event", **e} if "type" not in e else e for e in events])
