"""The live loop's typed view of the engine, and the one place that knows how it is built and restored.

``LiveEngine`` is what the loop calls; ``EngineLink`` adds what an engine cannot do by itself:
restore from bytes (a new engine) and the operator's accept (the drift monitor's).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from agent.config.model import Config
from agent.engine import Engine, rack_info
from agent.engine.node_stages import NodeHints
from agent.live.envelope import Payload
from agent.trace.model import TraceChunk

log = logging.getLogger("rackwatt.engine")

Report = dict[str, Any]  # one record of the engine's output (``type``: summary | event | …)


class LiveEngine(Protocol):
    """What the live agent needs from an engine (``agent.engine.Engine`` is one)."""

    def process(self, chunk: TraceChunk) -> list[Report]: ...

    def summary_payload(self, ts: float) -> Payload: ...

    def baseline_payloads(self, ts: float) -> dict[str, Payload]: ...

    def save_state(self) -> bytes: ...


Restore = Callable[[bytes], LiveEngine]  # state bytes → an engine holding them (raises if unfit)
Accept = Callable[[LiveEngine, str, float, str], list[Report]]  # engine, cause, ts, by → events


class EngineLink:
    """One engine plus how to restore it and how an operator's accept reaches it."""

    def __init__(self, engine: LiveEngine, *, restore: Restore, accept: Accept | None = None) -> None:
        self.engine = engine
        self._restore = restore
        self._accept = accept

    @classmethod
    def from_config(cls, config: Config) -> EngineLink | None:
        """The real engine for ``config``, or None (logged) when it cannot be set up."""
        rack = rack_info(config=config)
        site, rack_name, root = config.agent.site, config.agent.rack, config.mqtt.topic_root

        names = {"site": site, "rack_name": rack_name, "topic_root": root}

        def build(blob: bytes | None = None) -> Engine:
            if blob is None:
                return Engine(config.engine, rack, **names)
            return Engine.load_state(blob, config.engine, rack, **names)

        try:
            engine = build()
        except Exception as exc:  # a broken engine must not stop polling and status
            log.error("engine: cannot be set up (%s: %s); the agent will poll and report status only",
                      type(exc).__name__, exc)
            return None
        return cls(engine, restore=build, accept=_accept_by_drift_monitor)

    def process(self, chunk: TraceChunk) -> list[Report]:
        return list(self.engine.process(chunk))

    def summary_payload(self, ts: float) -> Payload:
        return self.engine.summary_payload(ts)

    def baseline_payloads(self, ts: float) -> dict[str, Payload]:
        """stage → retained baseline payload."""
        return dict(self.engine.baseline_payloads(ts))

    def capabilities(self) -> Payload | None:
        """What the rack's data lets the engine do now (agent/engine/outputs.py: capabilities)."""
        return self.engine.capabilities() if isinstance(self.engine, Engine) else None

    def use_node_hints(self, hints: NodeHints | None) -> None:
        """Each node's own stage hints (``NodeTimelines.labels_at``) for the engine's per-job energy."""
        if isinstance(self.engine, Engine):
            self.engine.node_hints = hints

    def accept(self, cause: str, ts: float, by: str) -> list[Report]:
        """Operator accepts the active deviation of ``cause`` (or component) as the new normal."""
        if self._accept is None:
            raise ValueError("this engine cannot accept deviations")
        return self._accept(self.engine, cause, ts, by)

    def state_bytes(self) -> bytes:
        return self.engine.save_state()

    def restore(self, blob: bytes) -> None:
        """Continue from ``blob``; raises (and keeps the current engine) when it does not fit."""
        self.engine = self._restore(blob)


def _accept_by_drift_monitor(engine: LiveEngine, cause: str, ts: float, by: str) -> list[Report]:
    if not isinstance(engine, Engine) or engine.drift is None:
        raise ValueError("this engine has no drift detector to accept deviations")
    return [dict(e) for e in engine.drift.accept(cause, ts, by=by)]
