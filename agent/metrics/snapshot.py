"""One scrape's figures as plain data, taken on the agent's event loop: read from the HTTP thread,
the engine, poller and spool could be half-updated. ``families.py`` turns it into metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent import __version__
from agent.engine.drift.attribution import CAUSES  # every cause has a 0/1 series, active or not
from agent.metrics.tap import MessageTap
from agent.payload import number


@dataclass(frozen=True)
class DriftState:
    active: bool
    deviation_pct: float | None = None
    since_ts: float | None = None


@dataclass
class RackSnapshot:
    labels: dict[str, str]  # site, rack, node: on every series
    info: dict[str, str]  # version, row, hall: on rackwatt_info only (join on site, rack)
    summary: dict[str, Any] | None  # the engine's summary payload now (None without an engine)
    status: dict[str, Any]  # the agent's status body (devices, spool, hints, engine, reloads)
    drifts: dict[str, DriftState] = field(default_factory=dict)
    jobs_j: dict[str, dict[str, float]] = field(default_factory=dict)
    drift_events: dict[tuple[str, str], int] = field(default_factory=dict)
    last_summary_ts: float | None = None


def _incidents(engine: Any) -> dict[str, Any]:
    """cause → the drift monitor's active incident (none without an engine or a detector)."""
    return dict(getattr(getattr(engine, "drift", None), "incidents", None) or {})


def active_drifts(engine: Any, tap: MessageTap) -> dict[str, DriftState]:
    """cause → state, from the engine's own incidents (they survive a restart; events do not)."""
    incidents = _incidents(engine)
    out: dict[str, DriftState] = {}
    for cause in dict.fromkeys((*CAUSES, *incidents)):
        incident = incidents.get(cause)
        if incident is None:
            out[cause] = DriftState(active=False)
            continue
        deviation = tap.deviations.get(cause)
        if deviation is None and getattr(incident, "component", "") != "thermal":
            deviation = number(getattr(incident, "deviation", None))  # % of the expectation, as published
        since = number(getattr(incident, "since_ts", None)) or number(getattr(incident, "onset_ts", None))
        out[cause] = DriftState(active=True, deviation_pct=deviation, since_ts=since)
    return out


def active_drift_list(engine: Any) -> list[dict[str, Any]]:
    """The engine's active incidents as the status payload's ``drifts`` (cause, since, onset, stage)."""
    incidents = _incidents(engine)
    return [
        {
            "cause": cause,
            "since": number(getattr(i, "since_ts", None)),
            "onset": number(getattr(i, "onset_ts", None)),
            "stage": getattr(i, "stage", None) or None,
        }
        for cause, i in sorted(incidents.items())
    ]


def take_snapshot(agent: Any, tap: MessageTap, node: str) -> RackSnapshot:
    """Everything one scrape exports; call on the agent's loop."""
    config = agent.config
    now = agent.clock.time()
    link = agent.engine
    # the engine's failure is the engine's metric (tallied), not a failed scrape
    summary = agent.ask_engine("summary_payload (metrics)", lambda engine: engine.summary_payload(now))
    return RackSnapshot(labels={"site": config.agent.site, "rack": config.agent.rack, "node": node},
                        info={"version": __version__, "row": config.metrics.row, "hall": config.metrics.hall},
                        summary=summary, status=agent.status_body(),
                        drifts=active_drifts(getattr(link, "engine", None), tap),
                        jobs_j=tap.ledger.totals_j(), drift_events=dict(tap.events),
                        last_summary_ts=tap.last_summary_ts)
