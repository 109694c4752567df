"""What the demo shows: a model of the run (``DemoState``), a full-screen ANSI view, plain lines.

``DemoState`` is fed by the agent's message observer and sampled from the agent; ``screen_lines``
renders it for the terminal (redrawn in place, plain ANSI), ``PlainLog`` as lines for pipes and CI.
"""

from __future__ import annotations

import math
import shutil
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from agent.payload import number, section, total

MAX_EVENTS = 6


@dataclass
class DeviceRow:
    device: str
    ok: bool
    polls: int
    elapsed_ms: float | None
    error: str | None
    profile: str | None
    interval_s: float


@dataclass
class DemoState:
    """Everything the view needs; only ``observe`` and ``sample`` change it."""

    header: list[str] = field(default_factory=list)
    sim_ts: float = math.nan
    speed: float = 1.0
    stage: str | None = None
    stage_source: str | None = None
    job: str | None = None
    summary: dict[str, Any] | None = None
    summaries: int = 0
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_EVENTS))
    event_count: int = 0
    last_by_topic: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    devices: dict[str, DeviceRow] = field(default_factory=dict)
    mqtt_mode: str = "off"  # off | broker
    mqtt_endpoint: str = ""
    mqtt_connected: bool = False
    spooled: int = 0
    published: int = 0
    fault_note: str = ""
    end_note: str = ""
    started_real: float = field(default_factory=time.monotonic)

    def observe(self, kind: str, topic: str, payload: dict[str, Any]) -> None:
        """The agent's ``on_message`` observer: what it publishes (or would publish)."""
        self.published += 1
        self.last_by_topic[topic] = (kind, payload)
        if kind == "summary":
            self.summary = payload
            self.summaries += 1
            self.baselines.update(section(payload, "stages"))
        elif kind == "baseline":
            stage = payload.get("stage")
            if isinstance(stage, str):
                self.baselines[stage] = payload
        elif kind == "event":
            self.events.append(payload)
            self.event_count += 1

    def sample(self, agent: Any, sim_ts: float) -> None:
        """Read device health, MQTT state and the current stage from the running agent."""
        self.sim_ts = sim_ts
        poller = getattr(agent, "poller", None)
        if poller is not None:
            for name, h in poller.health_dict().items():
                interval_s = float(h.get("interval_s") or 0)
                self.devices[name] = DeviceRow(name, bool(h["ok"]), int(h["polls"]), h.get("elapsed_ms"),
                                               h.get("error"), h.get("profile"), interval_s)
        now = getattr(agent, "stage_now", None)
        if now is not None and now.stage and now.source not in ("expired", "none"):
            self.stage, self.stage_source, self.job = now.stage, f"hint via {now.source}", now.job or None
        elif self.summary is not None:  # no fresh hint: the stage the engine inferred
            self.stage, self.stage_source = self.summary.get("stage"), self.summary.get("stage_source")
            self.job = self.summary.get("job")
        publisher = getattr(agent, "publisher", None)
        if publisher is not None:
            self.mqtt_connected = bool(publisher.connected)
            self.mqtt_endpoint = str(publisher.endpoint)
        store = getattr(agent, "store", None)
        self.spooled = len(store) if store is not None and agent.config.mqtt.enabled else 0

    # ---- derived numbers -------------------------------------------------------------------
    def facility_w(self) -> tuple[float | None, float | None]:
        """(measured, expected) facility power = IT (PDUs) + the rack's cooling share, W."""
        if self.summary is None:
            return None, None
        p = section(self.summary, "power_w")
        measured = total(p.get("it"), p.get("cooling"))
        if not self.summary.get("warm"):
            return measured, None  # no predictions while warming up
        return measured, total(p.get("it_expected"), p.get("cooling_expected"))


def fmt_w(value: Any) -> str:
    watts = number(value)
    if watts is None:
        return "—"
    return f"{watts / 1000:.2f} kW" if abs(watts) >= 1000 else f"{watts:.0f} W"


def fmt_time(ts: float) -> str:
    if not math.isfinite(ts):
        return "--"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) + "Z"


def stage_text(state: DemoState) -> str:
    if not state.stage:
        return "unknown"
    src = f" ({state.stage_source})" if state.stage_source else ""
    job = f", job {state.job}" if state.job else ""
    return f"{state.stage}{src}{job}"


def lag_text(summary: dict[str, Any] | None) -> str:
    lag = (summary or {}).get("lag") or {}
    if not lag:
        return "—"
    learned = "learned" if lag.get("learned") else "prior, not yet learned"
    return f"time constant {lag.get('tau_s', 0):g} s, dead time {lag.get('dead_s', 0):g} s ({learned})"


def event_line(e: dict[str, Any]) -> str:
    dev = number(e.get("deviation_pct"))
    dev_text = f" {dev:+.1f} %" if dev is not None else ""
    why = section(e, "detail").get("explanation") or ""
    when = fmt_time(float(e.get("ts") or math.nan))
    state = str(e.get("state", "?")).upper()
    return f"{when} {state} cause={e.get('cause')} stage={e.get('stage')}{dev_text}: {why}"


def device_text(d: DeviceRow) -> str:
    state = "ok" if d.ok else ("waiting" if d.polls == 0 else "ERROR")
    ms = "" if d.elapsed_ms is None else f"{d.elapsed_ms:.1f} ms"
    err = f"  {d.error}" if d.error and not d.ok else ""
    polls = f"polls {d.polls:<6} every {d.interval_s:g} s"
    return f"{d.device:<8} {state:<7} {ms:>9}  {polls}  {d.profile or ''}{err}"


def screen_lines(state: DemoState, width: int = 100) -> list[str]:
    """The full terminal view, one string per line (no ANSI codes; the caller adds them)."""
    out = list(state.header)
    real_s = time.monotonic() - state.started_real
    warm = (state.summary or {}).get("warm")
    warm_text = "yes" if warm else ("warming up (no predictions yet)" if state.summary else "—")
    out.append("")
    out.append(
        f"simulated time {fmt_time(state.sim_ts)}   speed {state.speed:g}×   running {real_s:.0f} s real"
    )
    out.append(f"stage          {stage_text(state)}")
    measured, expected = state.facility_w()
    dev = ""
    if measured is not None and expected:
        dev = f"   ({(measured - expected) / expected * 100:+.1f} %)"
    out.append(
        f"facility power measured {fmt_w(measured)}   expected {fmt_w(expected)}{dev}   warm: {warm_text}"
    )
    if state.summary:
        p = state.summary.get("power_w") or {}
        if not warm:
            p = {**p, "it_expected": None, "cooling_expected": None}
        out.append(
            f"  IT (PDUs) {fmt_w(p.get('it'))} vs {fmt_w(p.get('it_expected'))}   cooling share "
            f"{fmt_w(p.get('cooling'))} vs {fmt_w(p.get('cooling_expected'))}   GPUs {fmt_w(p.get('gpu'))}"
            + ("   [settling after a load change]" if state.summary.get("transient") else "")
        )
        held = state.summary.get("held") or []
        if held:
            out.append(f"  not learning while a deviation is open: {', '.join(held)}")
    out.append(f"cooling lag    {lag_text(state.summary)}")
    out.append("")
    out.append(
        f"baselines (facility power per stage)   {len(state.baselines)} stage(s), {state.summaries} summaries"
    )
    if not state.baselines:
        out.append("  (none yet: the first ones appear within a few simulated minutes)")
    for stage, b in sorted(state.baselines.items()):
        band = b.get("band_w") or [None, None]
        out.append(
            f"  {stage:<18} level {fmt_w(b.get('level_w')):>9}   band {fmt_w(band[0])} … {fmt_w(band[1])}"
            f"   samples {b.get('samples', 0)}"
        )
    out.append("")
    out.append("devices")
    for d in state.devices.values():
        out.append("  " + device_text(d)[: width - 2])
    out.append("")
    out.append(f"events ({state.event_count})" + (f"   {state.fault_note}" if state.fault_note else ""))
    if not state.events:
        out.append("  (none)")
    for e in state.events:
        out.append("  " + event_line(e)[: width - 2])
    out.append("")
    if state.mqtt_mode == "broker":
        conn = "connected" if state.mqtt_connected else "NOT connected (spooling to disk)"
        out.append(
            f"mqtt {state.mqtt_endpoint}: {conn}; {state.spooled} message(s) spooled; "
            f"{state.published} published"
        )
    else:
        out.append(f"mqtt: no broker: showing what would be published ({state.published} message(s))")
        for topic, (kind, payload) in sorted(state.last_by_topic.items()):
            out.append(f"  {topic}  seq {payload.get('seq')}  {_brief(kind, payload)}"[:width])
    out.append("")
    out.append("Ctrl-C stops (devices shut down, temporary files removed)")
    return out


def _brief(kind: str, p: dict[str, Any]) -> str:
    if kind == "summary":
        it_w = section(p, "power_w").get("it")
        return f"stage {p.get('stage')}, IT {fmt_w(it_w)}, {len(section(p, 'stages'))} stage baselines"
    if kind == "baseline":
        return f"level {fmt_w(p.get('level_w'))}, samples {p.get('samples')}"
    if kind == "event":
        return f"{p.get('state')} {p.get('cause')}"
    return kind


class AnsiScreen:
    """Redraws the view in place: home, each line cleared to its end, rest of screen cleared."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self._first = True

    def draw(self, lines: list[str]) -> None:
        """Lines cut to the terminal's size: a wrapped line would push the view out of place."""
        size = shutil.get_terminal_size((120, 50))
        lines = [line[: size.columns - 1] for line in lines[: max(1, size.lines - 1)]]
        prefix = "\x1b[?25l\x1b[2J\x1b[H" if self._first else "\x1b[H"
        self._first = False
        self.stream.write(prefix + "".join(f"{line}\x1b[K\n" for line in lines) + "\x1b[J")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\x1b[?25h")
        self.stream.flush()


class PlainLog:
    """One line per summary, event and device change (for pipes, CI and logs)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self._summaries = 0
        self._events = 0
        self._devices: dict[str, str] = {}
        self._mqtt: bool | None = None
        self._stages: set[str] = set()

    def emit(self, line: str, state: DemoState) -> None:
        self.stream.write(f"[{fmt_time(state.sim_ts)}] {line}\n")
        self.stream.flush()

    def header(self, state: DemoState) -> None:
        for line in state.header:
            self.stream.write(f"{line}\n")
        self.stream.flush()

    def update(self, state: DemoState) -> None:
        for d in state.devices.values():
            status = "ok" if d.ok else ("waiting" if d.polls == 0 else "error")
            if status != "waiting" and self._devices.get(d.device) != status:
                self._devices[d.device] = status
                self.emit(f"device {device_text(d)}", state)
        if state.mqtt_mode == "broker" and self._mqtt != state.mqtt_connected:
            self._mqtt = state.mqtt_connected
            self.emit(f"mqtt {state.mqtt_endpoint}: {'connected' if self._mqtt else 'not connected'}", state)
        if state.summaries != self._summaries and state.summary is not None:
            self._summaries = state.summaries
            self.emit(self.summary_line(state), state)
            new = sorted(set(state.baselines) - self._stages)
            if new:
                self._stages.update(new)
                self.emit("baselines now for: " + ", ".join(sorted(self._stages)), state)
        unseen = state.event_count - self._events
        if unseen > 0:  # the newest of them, as many as the state still holds
            for e in list(state.events)[-unseen:]:
                self.emit("event " + event_line(e), state)
            self._events = state.event_count

    def summary_line(self, state: DemoState) -> str:
        measured, expected = state.facility_w()
        s = state.summary or {}
        parts = [
            f"summary seq {s.get('seq')}",
            f"stage {stage_text(state)}",
            f"facility {fmt_w(measured)} expected {fmt_w(expected)}",
            f"warm {str(bool(s.get('warm'))).lower()}",
        ]
        baselines = [f"{name}={fmt_w(b.get('level_w'))}/n{b.get('samples', 0)}"
                     for name, b in sorted(section(s, "stages").items())]
        if baselines:
            parts.append("baselines " + " ".join(baselines))
        lag = section(s, "lag")
        if lag:
            parts.append(f"lag tau {lag.get('tau_s', 0):g} s dead {lag.get('dead_s', 0):g} s")
        if state.mqtt_mode != "broker":
            parts.append(f"would publish {state.published} msg")
        else:
            parts.append(f"mqtt {'connected' if state.mqtt_connected else 'down'} spooled {state.spooled}")
        return "; ".join(parts)
