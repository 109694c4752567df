"""One demo run: twin → loopback devices → the real ``LiveAgent`` → the view; then a clean stop.

Order: a private temp dir with a generated agent.toml (loaded by the real loader); the real engine,
optionally pre-warmed; the devices on free loopback ports; the agent on a ``ScaledClock``; the stage
hinter; the view. Stop: agent first (state saved, MQTT offline), then hints, devices, temp dir.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
import tempfile
import time
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from agent.config.loader import load_config
from agent.config.model import Config
from agent.config.paths import unix_socket_problem
from agent.live.clock import ScaledClock
from agent.live.demo.engine_feed import prewarm
from agent.live.demo.hints import StageHinter
from agent.live.demo.nodes import DemoNodes, NodePlan
from agent.live.demo.rack import PDU_VENDORS, DemoRack, DevicePorts, InletProbeDriver
from agent.live.demo.setup import STAGE_SOCKET, Intervals, MqttTarget, pick_ports, write_config
from agent.live.demo.view import AnsiScreen, DemoState, PlainLog, fmt_time, screen_lines
from agent.live.engine_link import EngineLink
from agent.live.loop import LiveAgent
from agent.sim import FAULT_KINDS, FaultSpec, Scenario, make_scenario
from drivers.base import Driver

log = logging.getLogger("rackwatt.demo")

FAULT_CHOICES = (*FAULT_KINDS, "workload")
FAULT_AFTER_H = 0.1  # the fault starts this long (simulated) after the run goes live
FAULT_RAMP_H = 0.25  # gradual faults reach full strength this fast (a demo, not a realistic ageing)
# Replayed before a fault run: the drift detector calibrates on healthy data, and its cooling-unit
# efficiency model needs about a day of it (with 8 h, cooling faults went unconfirmed for hours).
FAULT_WARMUP_H = 30.0
# Replayed before a run without a fault: the engine predicts ("expected", warm: yes) once it has
# learned ~2.3 simulated hours (measured: 136 s real at 60x from scratch), so a from-scratch run
# of `--duration 120` ended before its first prediction. 3 h, replayed in a few seconds, makes the
# first live summary a prediction; `--warmup 0` still shows the baselines forming from nothing.
HEALTHY_WARMUP_H = 3.0
GPUS = 8  # one 8-GPU node: the footprint target's rack and cheap to poll at 60×
# --nodes N: N node agents of 2 GPUs each (the twin simulates 2·N GPUs): 4 nodes poll as many
# GPUs as the default demo, so the multi-node rack stays light on a 2-core machine.
GPUS_PER_DEMO_NODE = 2
SITE, RACK = "demo", "r07"


@dataclass(frozen=True)
class DemoOptions:
    speed: float = 60.0
    duration_s: float | None = None
    fault: str | None = None
    seed: int = 0
    mqtt: MqttTarget | None = None
    warmup_h: float | None = None  # None: FAULT_WARMUP_H with a fault, else HEALTHY_WARMUP_H
    hints: bool = True
    days: float = 30.0
    interactive: bool = False
    refresh_s: float = 1.0
    fine_polling: bool = False  # poll at a real rack's intervals (more CPU, more sensitive)
    site: str = SITE
    rack: str = RACK  # several demos on one broker need their own rack names (rackwatt watch)
    metrics: MqttTarget | None = None  # serve /metrics there (docs/metrics.md)
    nodes: int = 0  # > 0: GPUs come from this many node agents over the node link (agent/live/demo/nodes.py)

    @property
    def gpus(self) -> int:
        return self.nodes * GPUS_PER_DEMO_NODE if self.nodes else GPUS

    @property
    def effective_warmup_h(self) -> float:
        if self.warmup_h is not None:
            return max(0.0, self.warmup_h)
        return FAULT_WARMUP_H if self.fault else HEALTHY_WARMUP_H


FINE_INTERVALS = Intervals(tick_s=1.0, nvml_s=1.0, pdu_s=5.0, crac_s=10.0, inlet_s=10.0, summary_s=300.0)


def intervals_for(speed: float, fine: bool = False) -> Intervals:
    """Poll periods (simulated s) that keep the real poll rate about the same at any speed.

    At 60× this is nvml 5 s, pdu 10 s, crac 20 s and a 1 s tick: ~12 NVML and ~15 network polls
    per real second, which a 2-core gateway runs at a modest CPU share. ``fine``: a real rack's
    intervals (the twin's own sampling) whatever the speed: at 60×, 60 NVML polls a second.
    """
    if fine:
        return FINE_INTERVALS
    k = max(1.0, speed / 60.0)
    return Intervals(tick_s=round(max(1.0, k), 1), nvml_s=round(5.0 * k, 1), pdu_s=round(10.0 * k, 1),
                     crac_s=round(20.0 * k, 1), inlet_s=round(20.0 * k, 1), summary_s=300.0)


# The demo's cooling unit (the Liebert iCOM map) serves no outdoor air probe, so the warm-up trace
# replayed before going live must not have one either (the detector would wait for it).
OUTDOOR_PROBE = False


def build_scenario(opts: DemoOptions, live_start_ts: float) -> tuple[Scenario, str]:
    """The twin's scenario (steady training, 8 GPUs) with the requested fault; and a note on it."""
    warm_h = opts.effective_warmup_h
    start_ts = live_start_ts - warm_h * 3600.0
    fault_h = warm_h + FAULT_AFTER_H
    injected = opts.fault not in (None, "workload")
    spec = FaultSpec(str(opts.fault), start_h=fault_h, ramp_h=FAULT_RAMP_H) if injected else None
    sc = make_scenario("workload_change" if opts.fault == "workload" else "steady", days=opts.days,
                       seed=opts.seed, gpus=opts.gpus, fault=spec, start_ts=start_ts,
                       outdoor_sensor=OUTDOOR_PROBE)
    when = fmt_time(start_ts + fault_h * 3600.0)
    if opts.fault is None:
        return sc, ""
    if opts.fault == "workload":
        sc = replace(sc, plan=replace(sc.plan, workload_change_h=fault_h))
        return sc, f"injected: workload change (MoE jobs, not a fault) from {when}; expect cause workload"
    return sc, f"injected: {opts.fault} from {when}; expect an onset with cause {FAULT_KINDS[opts.fault][0]}"


def header_lines(opts: DemoOptions, intervals: Intervals, fault_note: str) -> list[str]:
    """The view's header: what runs, how fast, how it is polled, and why (docs/demo.md)."""
    warm_h = opts.effective_warmup_h
    lines = [
        f"rackwatt demo: a simulated {opts.gpus}-GPU training rack served as real devices on 127.0.0.1",
        f"  PDUs a ({PDU_VENDORS['a']}) and b ({PDU_VENDORS['b']}) over SNMP v2c, "
        "cooling unit over Modbus TCP, NVML faked from the twin, inlet probes in process",
        f"  clock {opts.speed:g}× real time; polls {intervals.describe()}"
        + (
            ": a real rack's intervals (--fine-polling)"
            if opts.fine_polling
            else ": coarser than a real rack so the polling stays light at this speed (--fine-polling: finer)"
        ),
    ]
    if opts.nodes:
        lines.append(f"  GPUs: {opts.nodes} node agents ({GPUS_PER_DEMO_NODE} GPUs each, role = \"node\"), "
                     "each sending signed UDP datagrams to the rack agent (the node link, docs/node.md)")
    if warm_h > 0:
        lines.append(
            f"  warm-up: the first {warm_h:g} simulated hours were replayed through the same engine in "
            "seconds (the drift detector calibrates on healthy hours), then the run went live"
        )
    else:
        lines.append(
            f"  no warm-up replay: baselines form live (first within a few simulated minutes; predictions "
            f"after ~2.5 simulated h = {2.5 * 3600 / opts.speed / 60:.1f} min real)"
        )
    if fault_note:
        lines.append(f"  {fault_note}")
    return lines


class _Tail(logging.Handler):
    """Keeps the last warnings for the full-screen view (log lines would tear the screen)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: deque[str] = deque(maxlen=3)

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.lines.append(f"{record.levelname.lower()}: {record.getMessage()}"[:160])


def _configure_logging(interactive: bool) -> _Tail | None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    if interactive:
        tail = _Tail()
        root.addHandler(tail)
        return tail
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    return None


# Ports are picked free before the warm-up and bound after it (tens of seconds later); another
# program may take one in between. Each try picks fresh ports, so a repeat needs the same rare race.
DEVICE_START_ATTEMPTS = 3


def private_workdir() -> Path:
    """A private temp dir for the demo's files, under TMPDIR. The stage socket's path must fit
    sockaddr_un (107 bytes), so under a long TMPDIR (a test runner's, a deep home) it is made in /tmp."""
    workdir = Path(tempfile.mkdtemp(prefix="rackwatt-demo-"))
    if unix_socket_problem(workdir / STAGE_SOCKET) is None:
        return workdir
    workdir.rmdir()
    return Path(tempfile.mkdtemp(prefix="rackwatt-demo-", dir="/tmp"))


async def run_demo(opts: DemoOptions, out: TextIO) -> int:
    tail = _configure_logging(opts.interactive)
    workdir = private_workdir()
    state = DemoState(speed=opts.speed)
    try:
        code = await _run_in(workdir, opts, out, tail, state)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    out.write(f"rackwatt demo: {state.end_note or 'stopped'}; devices stopped, temporary files removed\n")
    out.flush()
    return code


async def _run_in(workdir: Path, opts: DemoOptions, out: TextIO, tail: _Tail | None, state: DemoState) -> int:
    live_start = time.time()
    scenario, fault_note = build_scenario(opts, live_start)
    intervals = intervals_for(opts.speed, opts.fine_polling)
    # The node link's skew limit is in simulated seconds: 2 real seconds of scheduling delay at any speed.
    plan = (NodePlan.make(workdir, opts.nodes, GPUS_PER_DEMO_NODE, intervals.nvml_s, 2.0 * opts.speed)
            if opts.nodes else None)

    def configure(ports: DevicePorts) -> tuple[Path, str, Config]:
        path, community = write_config(workdir, site=opts.site, rack=opts.rack, ports=ports,
                                       crac_id=scenario.rack.cooling.crac_id,
                                       crac_share=scenario.rack.cooling.share, intervals=intervals,
                                       mqtt=opts.mqtt, metrics=opts.metrics, nodes=plan)
        return path, community, load_config(path)  # the real loader: a problem here is a bug in the demo

    ports = pick_ports()
    path, community, config = configure(ports)
    state.header = header_lines(opts, intervals, fault_note)
    state.fault_note = fault_note
    state.mqtt_mode = "broker" if opts.mqtt else "off"
    state.mqtt_endpoint = f"{opts.mqtt.host}:{opts.mqtt.port}" if opts.mqtt else ""
    plain = None if opts.interactive else PlainLog(out)
    if plain is not None:
        plain.header(state)
    link = EngineLink.from_config(config)
    if link is None:
        out.write("rackwatt demo: the engine cannot be set up (see the log above)\n")
        return 1
    warm_h = opts.effective_warmup_h
    if warm_h > 0:
        t0 = time.monotonic()
        out.write(f"warm-up: replaying {warm_h:g} healthy simulated hours through the engine …\n")
        out.flush()
        events = prewarm(link, scenario, warm_h, intervals.by_signal_prefix())
        out.write(
            f"warm-up: replayed {warm_h:g} simulated hours in {time.monotonic() - t0:.1f} s "
            f"({len(events)} event(s) on healthy data)\n"
        )
        out.flush()
    clock = ScaledClock(opts.speed, start=live_start)
    rack = DemoRack(scenario, clock.time)
    for attempt in range(1, DEVICE_START_ATTEMPTS + 1):
        try:
            await rack.start(ports, community)
            break
        except Exception as err:  # a port taken since it was picked, or no loopback
            if attempt == DEVICE_START_ATTEMPTS:
                out.write(f"rackwatt demo: cannot serve the simulated devices on 127.0.0.1: {err}\n")
                return 1
            ports = pick_ports()  # another program took a port during the warm-up: pick again
            path, community, config = configure(ports)
    nodes = DemoNodes(plan, clock) if plan is not None else None
    if nodes is not None:
        nodes.start()
    try:
        agent = LiveAgent(config, config_path=path, clock=clock, engine=link, on_message=state.observe,
                          driver_factory=_driver_factory(rack, intervals, clock), save_interval_s=3600.0,
                          engine_batch_s=max(15.0, opts.speed * 0.5))  # the agent batches engine calls itself
        return await _serve(agent, clock, rack, opts, state, out, plain, tail)
    finally:
        if nodes is not None:
            await nodes.stop()
        await rack.stop()


def _driver_factory(rack: DemoRack, intervals: Intervals, clock: ScaledClock) -> Any:
    def build(config: Config) -> list[Driver]:
        from drivers.registry import build_drivers

        # on the demo's (accelerated) clock, which the node link measures skew on
        devices = build_drivers(config, clock=clock.time)
        return [*devices, InletProbeDriver(rack, interval_s=intervals.inlet_s)]

    return build


async def _serve(agent: LiveAgent, clock: ScaledClock, rack: DemoRack, opts: DemoOptions, state: DemoState,
                 out: TextIO, plain: PlainLog | None, tail: _Tail | None) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    agent_task = asyncio.create_task(agent.run(), name="agent")
    socket_path = Path(str(agent.config.stages.socket_path))
    hinter = StageHinter(socket_path, rack.stage, clock.time) if opts.hints else None
    hint_task = asyncio.create_task(hinter.run(), name="hints") if hinter else None
    screen = AnsiScreen(out) if opts.interactive else None
    started = time.monotonic()
    state.started_real = started
    reason = "stopped"
    try:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=opts.refresh_s)
            state.sample(agent, clock.time())
            rack.trim_request_logs()
            if screen is not None:
                lines = screen_lines(state)
                if tail is not None and tail.lines:
                    lines += ["", "recent warnings:", *("  " + t for t in tail.lines)]
                screen.draw(lines)
            elif plain is not None:
                plain.update(state)
            if stop.is_set():
                reason = "interrupted"
                break
            if agent_task.done():
                reason = "the agent stopped"
                break
            if opts.duration_s is not None and time.monotonic() - started >= opts.duration_s:
                reason = f"duration of {opts.duration_s:g} s reached"
                break
            if rack.ended:
                reason = "the simulated scenario ended"
                break
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        if screen is not None:
            screen.close()
        agent.request_stop()
        code = 0
        try:
            code = await asyncio.wait_for(agent_task, timeout=30)
        except Exception as exc:
            out.write(f"rackwatt demo: the agent did not stop cleanly: {type(exc).__name__}: {exc}\n")
            code = 1
        if hint_task is not None:
            hint_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await hint_task
        if plain is not None:
            plain.update(state)
    real_s = time.monotonic() - started
    state.end_note = (
        f"{reason}; simulated {real_s * clock.speed / 3600.0:.2f} h in {real_s:.0f} s; "
        f"{state.summaries} summaries, {len(state.baselines)} stage baseline(s), "
        f"{state.event_count} event(s)"
    )
    return code
