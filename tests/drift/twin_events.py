"""Test helper: simulate a twin scenario and replay it through the engine, as `rackwatt replay` does."""

from __future__ import annotations

from typing import Any

from agent.config.model import EngineSection
from agent.engine.engine import Engine
from agent.engine.frames import RackInfo
from agent.sim import simulate, trace_meta
from agent.sim.scenarios import Scenario


def twin_events(scenario: Scenario) -> list[dict[str, Any]]:
    """The drift events (report ``event`` records) of ``scenario`` replayed with default settings."""
    meta = trace_meta(scenario)
    engine = Engine(EngineSection(), RackInfo(crac_shares=dict(meta.crac_shares)), site=meta.site,
                    rack_name=meta.rack)
    events: list[dict[str, Any]] = []
    for chunk in simulate(scenario):
        events += [r for r in engine.process(chunk) if r.get("type") == "event"]
    return events + [r for r in engine.finish() if r.get("type") == "event"]
