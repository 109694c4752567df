"""The engine-error and reload tally the ``online`` status reports, and the health signature whose
change publishes that status at once (the body itself is ``LiveAgent.status_body``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from agent.live.engine_link import EngineLink
from agent.live.logsetup import worth_logging
from agent.live.poller import Poller
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
