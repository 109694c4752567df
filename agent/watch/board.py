"""What a site's MQTT topics say about each of its racks: the state ``rackwatt watch`` shows (no I/O).

``receive`` takes the messages of ``<root>/<site>/+/{status,summary,event}``; ``rows`` gives one
``RackRow`` per rack. Active drifts come from events (onset adds, cleared removes) and from the
retained status's ``drifts`` list, so a watcher started after an onset still sees the drift (its
deviation only from the next onset event).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from agent.live.topics import Topics, site_prefix
from agent.payload import json_object, number, section, total

KINDS = ("status", "summary", "event")


@dataclass(frozen=True)
class ActiveDrift:
    cause: str
    since_ts: float  # the estimated start the onset gave (else the onset's time)
    deviation_pct: float | None
    stage: str | None


@dataclass
class RackState:
    rack: str
    state: str = ""  # online / offline (from the retained status)
    offline_reason: str = ""
    stage: str | None = None
    facility_w: float | None = None
    expected_w: float | None = None
    held: tuple[str, ...] = ()
    spool_pending: int | None = None
    devices_down: tuple[str, ...] = ()
    last_seen: float = math.nan  # when the watcher last received anything from it (its own clock)
    drifts: dict[str, ActiveDrift] = field(default_factory=dict)


@dataclass(frozen=True)
class RackRow:
    """One line of the table; ``as_json`` is what ``--json`` prints."""

    rack: str
    state: str
    stage: str | None
    facility_kw: float | None
    expected_kw: float | None
    deviation_pct: float | None
    drifts: tuple[ActiveDrift, ...]
    held: tuple[str, ...]
    spool_pending: int | None
    devices_down: tuple[str, ...]
    last_seen_s: float | None

    def as_json(self) -> dict[str, Any]:
        out = {name: list(v) if isinstance(v, tuple) else v for name, v in asdict(self).items()}
        out["drifts"] = [
            {"cause": d.cause, "since": d.since_ts, "deviation_pct": d.deviation_pct, "stage": d.stage}
            for d in self.drifts
        ]
        return out


def _from_status(d: dict[str, Any], seen: ActiveDrift | None) -> ActiveDrift:
    """A drift the status lists; its deviation only an onset event carries (kept if one was seen)."""
    since = number(d.get("since")) or number(d.get("onset")) or math.nan
    stage = d.get("stage") if isinstance(d.get("stage"), str) else None
    return ActiveDrift(str(d["cause"]), since, seen.deviation_pct if seen else None, stage)


class SiteBoard:
    """Every rack seen under one site; ``ignored`` counts messages that were not readable."""

    def __init__(self, topic_root: str, site: str) -> None:
        self.prefix = site_prefix(topic_root, site)
        self.racks: dict[str, RackState] = {}
        self.ignored = 0

    def receive(self, topic: str, payload: bytes, received_ts: float) -> bool:
        """Take one message; False (and counted) when it is not one this board reads."""
        if not topic.startswith(self.prefix):
            return False
        rack = topic[len(self.prefix) :].partition("/")[0]
        kind = Topics(self.prefix + rack).kind_of(topic)
        if not rack or kind not in KINDS:
            return False
        body = json_object(payload)
        if body is None:
            self.ignored += 1
            return False
        state = self.racks.setdefault(rack, RackState(rack))
        state.last_seen = received_ts
        getattr(self, f"_{kind}")(state, body)
        return True

    @staticmethod
    def _status(state: RackState, body: dict[str, Any]) -> None:
        state.state = str(body.get("state") or "")
        state.offline_reason = str(body.get("reason") or "") if state.state == "offline" else ""
        pending = number(section(body, "spool").get("pending"))
        if pending is not None:
            state.spool_pending = int(pending)
        drifts = body.get("drifts")
        if state.state == "online" and isinstance(drifts, list):  # the agent's own list: it wins
            state.drifts = {
                str(d["cause"]): _from_status(d, state.drifts.get(str(d["cause"])))
                for d in drifts
                if isinstance(d, dict) and d.get("cause")
            }
        devices = body.get("devices")
        if isinstance(devices, dict):
            state.devices_down = tuple(
                sorted(d for d, h in devices.items() if isinstance(h, dict) and not h.get("ok", True))
            )

    @staticmethod
    def _summary(state: RackState, body: dict[str, Any]) -> None:
        p = section(body, "power_w")
        state.facility_w = total(p.get("it"), p.get("cooling"))
        state.expected_w = total(p.get("it_expected"), p.get("cooling_expected"))
        state.stage = body.get("stage") if isinstance(body.get("stage"), str) else None
        held = body.get("held")
        state.held = tuple(str(h) for h in held) if isinstance(held, list) else ()
        if not state.state:
            state.state = "online"  # a summary before any status: it is publishing

    @staticmethod
    def _event(state: RackState, body: dict[str, Any]) -> None:
        if body.get("kind") != "drift":
            return
        cause = str(body.get("cause") or "unknown")
        if body.get("state") == "cleared":
            state.drifts.pop(cause, None)
            return
        if body.get("state") != "onset":
            return
        since = number(section(body, "detail").get("since")) or number(body.get("ts")) or math.nan
        stage = body.get("stage") if isinstance(body.get("stage"), str) else None
        state.drifts[cause] = ActiveDrift(cause, since, number(body.get("deviation_pct")), stage)

    def rows(self, now: float) -> list[RackRow]:
        """One row per rack, by rack name (``table.sort_rows`` orders them otherwise)."""
        out = []
        for rack in sorted(self.racks):
            s = self.racks[rack]
            dev = None
            if s.facility_w is not None and s.expected_w:
                dev = round(100.0 * (s.facility_w / s.expected_w - 1.0), 1)
            out.append(
                RackRow(
                    rack=rack,
                    state=s.state + (f" ({s.offline_reason})" if s.offline_reason else ""),
                    stage=s.stage,
                    facility_kw=round(s.facility_w / 1000.0, 2) if s.facility_w is not None else None,
                    expected_kw=round(s.expected_w / 1000.0, 2) if s.expected_w is not None else None,
                    deviation_pct=dev,
                    drifts=tuple(sorted(s.drifts.values(), key=lambda d: d.since_ts)),
                    held=s.held,
                    spool_pending=s.spool_pending,
                    devices_down=s.devices_down,
                    last_seen_s=round(max(0.0, now - s.last_seen), 1) if math.isfinite(s.last_seen) else None,
                )
            )
        return out
