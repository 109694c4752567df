"""The ``online`` status body (agent/schemas/status.schema.json) and the engine's error tally."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from agent.live.engine_link import EngineLink
from agent.live.logsetup import worth_logging
from agent.live.poller import Poller
from agent.live.store import Store
from agent.metrics.snapshot import active_drift_list

log = logging.getLogger("rackwatt.agent")


@dataclass
class AgentTally:
    """Counters the status reports: engine failures (the agent keeps running) and reloads."""

    engine_errors: int = 0
    last_engine_error: str | None = None
    reloads: int = 0
    reload_failures: int = 0

    def engine_failed(self, what: str, exc: Exception) -> None:
        self.engine_errors += 1
        self.last_engine_error = f"{what}: {type(exc).__name__}: {exc}"
        if worth_logging(self.engine_errors):
            log.error("engine: %s failed (%d time(s) so far); the agent keeps running", what,
                      self.engine_errors, exc_info=exc)


def status_body(
    *,
    now: float,
    started_ts: float,
    poller: Poller | None,
    engine: EngineLink | None,
    tally: AgentTally,
    store: Store | None,
    hint_counters: dict[str, int] | None,
    stage: Any,
) -> dict[str, Any]:
    """The ``online`` status fields the publisher wraps."""
    body: dict[str, Any] = {
        "ts": now,
        "started": started_ts,
        "uptime_s": round(max(0.0, now - started_ts), 1),
        "devices": poller.health_dict() if poller else {},
        "engine": {
            "ok": engine is not None and tally.engine_errors == 0,
            "errors": tally.engine_errors,
            "last_error": tally.last_engine_error,
        },
        "reloads": {"ok": tally.reloads, "rejected": tally.reload_failures},
    }
    caps = engine.capabilities() if engine is not None else None
    if caps is not None:
        body["capabilities"] = caps
    if store is not None:
        body["spool"] = store.stats()
    if hint_counters is not None:
        body["hints"] = dict(hint_counters)
    # active drifts, so a watcher that missed the onset event still sees them (rackwatt watch)
    body["drifts"] = active_drift_list(engine.engine if engine is not None else None)
    if stage is not None:
        body["stage"] = {"stage": stage.stage, "source": stage.source, "job": stage.job}
    return body


def health_signature(poller: Poller | None, engine: EngineLink | None, tally: AgentTally) -> tuple[Any, ...]:
    """What, when it changes, makes the agent publish its status at once."""
    devices = poller.health_dict() if poller else {}
    return (
        tuple(sorted(d for d, h in devices.items() if h["ok"])),
        tally.engine_errors > 0,
        tuple(d["cause"] for d in active_drift_list(engine.engine if engine is not None else None)),
        tally.reloads,
        tally.reload_failures,
    )
