"""Stand-ins for the parts the live tests do not exercise: a device driver and an engine.

``FakeDriver`` follows drivers/base.py's ``Driver`` protocol; ``FakeEngine`` is a
``LiveEngine`` (agent/live/engine_link.py: process → report dicts, summary/baseline payloads,
state bytes) and ``fake_link`` wraps it the way ``EngineLink.from_config`` wraps the real one.
Both are deterministic so tests can assert exact counts.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from agent.config.model import AgentSection, Config, MqttSection, StagesSection
from agent.live.engine_link import EngineLink, LiveEngine
from agent.trace.model import TraceChunk
from drivers.base import PollResult


class FakeDriver:
    def __init__(
        self, device: str = "pdu.a", interval_s: float = 0.1, power_w: float = 5000.0, fail: bool = False
    ) -> None:
        self.device = device
        self.interval_s = interval_s
        self.power_w = power_w
        self.fail = fail
        self.polls = 0
        self.closed = False

    async def poll(self) -> PollResult:
        self.polls += 1
        if self.fail:
            return PollResult(self.device, time.time(), {}, False, 0.1, error=f"{self.device}: timeout")
        return PollResult(
            self.device,
            time.time(),
            {f"{self.device}.power_w": self.power_w + self.polls % 7},
            True,
            0.1,
            profile="fake",
        )

    async def close(self) -> None:
        self.closed = True


class FakeEngine:
    """Emits a summary every ``summary_every`` frames and an event every ``event_every`` frames."""

    def __init__(
        self, summary_every: int = 1, event_every: int = 5, site: str = "s1", rack: str = "r1"
    ) -> None:
        self.summary_every = summary_every
        self.event_every = event_every
        self.frames = 0  # persisted
        self.power_sum_w = 0.0  # persisted
        self.accepted: list[str] = []
        self.site, self.rack = site, rack

    def process(self, chunk: TraceChunk) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i in range(len(chunk)):
            self.frames += 1
            for name, values in chunk.numeric.items():
                if name.endswith(".power_w") and not math.isnan(values[i]):
                    self.power_sum_w += float(values[i])
            ts = float(chunk.ts[i])
            if self.summary_every and self.frames % self.summary_every == 0:
                out.append(
                    {"type": "summary", "ts": ts, "topic": "ignored", "payload": self.summary_payload(ts)}
                )
            if self.event_every and self.frames % self.event_every == 0:
                out.append(
                    {
                        "type": "event",
                        "ts": ts,
                        "kind": "drift",
                        "state": "onset",
                        "cause": "cooling",
                        "stage": "forward_backward",
                        "deviation_pct": 4.2,
                        "detail": {"frames": self.frames},
                    }
                )
        return out

    def summary_payload(self, ts: float) -> dict[str, Any]:
        return {
            "v": 1,
            "type": "summary",
            "ts": ts,
            "site": self.site,
            "rack": self.rack,
            "frames": self.frames,
        }

    def baseline_payloads(self, ts: float) -> dict[str, dict[str, Any]]:
        return {"idle": {"v": 1, "type": "baseline", "ts": ts, "stage": "idle", "frames": self.frames}}

    def accept(self, cause: str, ts: float, by: str = "operator") -> list[dict[str, Any]]:
        self.accepted.append(cause)
        return [
            {
                "ts": ts,
                "kind": "accept",
                "state": "cleared",
                "cause": "cooling",
                "stage": None,
                "deviation_pct": None,
                "detail": {"by": by},
            }
        ]

    def save_state(self) -> bytes:
        return json.dumps({"frames": self.frames, "power_sum_w": self.power_sum_w}).encode()

    def restore(self, data: bytes) -> FakeEngine:
        """This engine continuing from ``data`` (raises on bytes it did not write)."""
        obj = json.loads(data)
        self.frames = int(obj["frames"])
        self.power_sum_w = float(obj["power_sum_w"])
        return self


def fake_link(engine: FakeEngine) -> EngineLink:
    def accept(e: LiveEngine, cause: str, ts: float, by: str) -> list[dict[str, Any]]:
        return engine.accept(cause, ts, by)

    return EngineLink(engine, restore=engine.restore, accept=accept)


def make_config(
    state_dir: Path, port: int, *, tick_s: float = 0.1, summary_interval_s: float = 60.0, **mqtt: Any
) -> Config:
    return Config(
        agent=AgentSection(site="s1", rack="r1", state_dir=state_dir, tick_s=tick_s),
        mqtt=MqttSection(
            host="127.0.0.1", port=port, keepalive_s=5, summary_interval_s=summary_interval_s, **mqtt
        ),
        stages=StagesSection(socket_path=None, udp_port=None, mqtt_hints=True),
    )


class TwinDriver:
    """A device reading the rack twin in-process: real signal names and physics, no network."""

    def __init__(self, device: str, interval_s: float, read: Any, clock: Any) -> None:
        self.device, self.interval_s, self._read, self._clock = device, interval_s, read, clock

    async def poll(self) -> PollResult:
        return PollResult(self.device, self._clock(), self._read(), True, 0.0, profile="twin")

    async def close(self) -> None:
        return None


def twin_drivers(twin: Any, clock: Any, interval_s: float) -> list[TwinDriver]:
    """One driver per PDU feed, the cooling unit and the GPUs of ``twin`` (agent.sim.RackTwin)."""
    rack = twin.scenario.rack

    def now() -> Any:
        twin.advance_to(max(twin.ts, clock.time()))
        return twin

    def flat(prefix: str, values: dict[str, Any]) -> dict[str, float]:
        return {
            (k if k.startswith("inlet.") else f"{prefix}.{k}"): float(v)
            for k, v in values.items()
            if v is not None and math.isfinite(v) and k != "power_limit_w"
        }

    def gpus() -> dict[str, float]:
        out: dict[str, float] = {}
        for i, values in now().gpu_values().items():
            out.update(flat(f"gpu.{i}", values))
        return out

    drivers = [
        TwinDriver(f"pdu.{p}", interval_s, (lambda p=p: flat(f"pdu.{p}", now().pdu_values(p))), clock.time)
        for p in rack.pdu_ids
    ]
    crac = rack.cooling.crac_id
    drivers.append(
        TwinDriver(f"crac.{crac}", interval_s, lambda: flat(f"crac.{crac}", now().crac_values()), clock.time)
    )
    drivers.append(TwinDriver("nvml", interval_s, gpus, clock.time))
    return drivers
