"""The processes bench/footprint.py starts: demo devices, the live agent, the accelerated agent.

Each role is ``fn(argv) -> exit status``, run as ``footprint.py --role NAME ARGS…`` so that the
agent's CPU and memory can be measured alone, from outside its process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import resource
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.trace.model import TraceChunk


def raw_json_bytes(chunk: TraceChunk, topic_prefix: str = "rackwatt/v1/bench/r1/raw/") -> int:
    """Bytes of the raw alternative for one tick: one JSON message per device with its readings."""
    by_device: dict[str, dict[str, float]] = {}
    for name, values in chunk.numeric.items():
        value = float(values[0])
        if name == "work_rate" or not math.isfinite(value):
            continue
        parts = name.split(".")
        device = ".".join(parts[:2]) if len(parts) > 2 else parts[0]
        by_device.setdefault(device, {})[name[len(device) + 1 :]] = value
    ts = float(chunk.ts[0])
    return sum(
        len(topic_prefix) + len(device) + len(json.dumps({"ts": ts, **signals}, separators=(",", ":")))
        for device, signals in by_device.items()
    )


class RawMeter:
    """Frame sink: average raw JSON bytes per second of telemetry, and the signal count."""

    def __init__(self) -> None:
        self.bytes = 0
        self.seen = 0  # ticks seen
        self.rows = 0  # ticks measured
        self.signals = 0

    def __call__(self, chunk: TraceChunk) -> None:
        self.seen += 1
        if self.seen % 10 != 1:  # a sample of the ticks is enough for an average
            return
        self.bytes += raw_json_bytes(chunk)
        self.rows += 1
        self.signals = max(
            self.signals,
            sum(1 for k, v in chunk.numeric.items() if k != "work_rate" and math.isfinite(float(v[0]))),
        )


def _gpu_values(gpus: int) -> Callable[[], dict[int, dict[str, float]]]:
    """Cheap GPU readings that swing like a training job (the agent process pays for these calls)."""

    def values() -> dict[int, dict[str, float]]:
        phase = math.sin(time.time() / 40.0)
        power = 450.0 + 250.0 * phase
        return {
            i: {
                "power_w": power + 3 * i,
                "util_pct": 60 + 30 * phase,
                "mem_util_pct": 40.0,
                "temp_c": 60 + 10 * phase,
                "sm_clock_mhz": 1800.0,
                "power_limit_w": 700.0,
            }
            for i in range(gpus)
        }

    return values


def twin_reader(twin: Any, now: Callable[[], float]) -> Callable[..., Callable[[], dict[str, float]]]:
    """``reader(*prefixes)`` → a poll function giving the twin's signals under those prefixes at
    ``now()``; the twin is advanced and flattened once per second for all devices."""
    memo: dict[str, Any] = {"ts": None, "flat": {}}

    def flat() -> dict[str, float]:
        twin.advance_to(max(twin.ts, now()))
        if memo["ts"] != twin.ts:
            out: dict[str, float] = {}
            for device, fields in twin.device_values().items():
                if device != "job":
                    prefix = "inlet" if device == "inlet" else device
                    out.update({f"{prefix}.{k}": float(v) for k, v in fields.items() if math.isfinite(v)})
            memo["ts"], memo["flat"] = twin.ts, out
        return dict(memo["flat"])

    def reader(*prefixes: str) -> Callable[[], dict[str, float]]:
        return lambda: {k: v for k, v in flat().items() if k.startswith(prefixes)}

    return reader


def role_devices(argv: list[str]) -> int:
    """2 SNMP PDUs (apc_rpdu2, 24 outlets) and 1 Modbus cooling unit (liebert_icom) from the twin."""
    from agent.sim.devices.modbus_server import CoolingUnitServer
    from agent.sim.devices.snmp_agent import SimSnmpPdu
    from agent.sim.scenarios import make_scenario
    from agent.sim.twin import RackTwin

    ports = json.loads(argv[0])
    t0 = time.time()
    scenario = make_scenario("steady", days=2, gpus=8, start_ts=t0)
    twin = RackTwin(scenario)

    def now() -> RackTwin:
        twin.advance_to(max(twin.ts, time.time()))
        return twin

    def pdu(pdu_id: str) -> Callable[[], dict[str, float | None]]:
        return lambda: dict(now().pdu_values(pdu_id))

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        servers: list[Any] = [
            SimSnmpPdu(pdu(p), ports[p], vendor="apc_rpdu2", outlets=24) for p in ("a", "b")
        ]
        servers.append(CoolingUnitServer("liebert_icom", lambda: dict(now().crac_values()), ports["crac"]))
        for server in servers:
            await server.start()
        print("ready", flush=True)
        await stop.wait()
        for server in servers:
            with contextlib.suppress(Exception):
                await server.stop()

    asyncio.run(serve())
    return 0


def role_agent(argv: list[str]) -> int:
    """``rackwatt run --config FILE`` with 8 fake GPUs installed and a raw-bytes meter as frame sink."""
    from agent.config.loader import load_config
    from agent.live.logsetup import setup_logging
    from agent.live.loop import LiveAgent
    from agent.live.run_cmd import serve, skip_unused_imports

    skip_unused_imports()  # as `rackwatt run` does, before any driver is imported
    from agent.sim.devices.fake_nvml import FakeNvml

    config_path, raw_out = Path(argv[0]), Path(argv[1])
    setup_logging()
    fake = FakeNvml(_gpu_values(8))
    meter = RawMeter()
    with fake.installed():
        config = load_config(config_path)
        agent = LiveAgent(config, config_path=config_path, frame_sinks=[meter])

        code = asyncio.run(serve(agent))
    health = agent.poller.health_dict() if agent.poller else {}
    raw_out.write_text(
        json.dumps(
            {
                "raw_bytes_per_s": meter.bytes / max(1, meter.rows),
                "signals": meter.signals,
                "devices_ok": {d: h["ok"] for d, h in health.items()},
            }
        )
    )
    return code


class TwinDriver:
    """An in-process device reading the twin: the same signals as the real drivers, no network."""

    def __init__(
        self, device: str, interval_s: float, read: Callable[[], dict[str, float]], clock: Callable[[], float]
    ) -> None:
        self.device, self.interval_s, self._read, self._clock = device, interval_s, read, clock

    async def poll(self) -> Any:
        from drivers.base import PollResult

        return PollResult(self.device, self._clock(), self._read(), True, 0.0, profile="twin")

    async def close(self) -> None:
        return None


def role_accelerated(argv: list[str]) -> int:
    """The LiveAgent loop on a virtual clock for ``days``: prints RSS per simulated day as JSON lines."""
    from agent.config.model import (
        AgentSection,
        Config,
        CracConfig,
        MqttSection,
        NvmlSection,
        PduConfig,
        StagesSection,
    )
    from agent.live.clock import VirtualClock
    from agent.live.logsetup import setup_logging
    from agent.live.loop import LiveAgent
    from agent.sim.scenarios import make_scenario
    from agent.sim.twin import RackTwin

    state_dir, port, days, raw_out = Path(argv[0]), int(argv[1]), float(argv[2]), Path(argv[3])
    setup_logging()
    interval_s = 10.0
    clock = VirtualClock()
    start = clock.time()
    scenario = make_scenario("steady", days=days + 0.5, gpus=8, start_ts=start)
    twin = RackTwin(scenario)
    crac_id = scenario.rack.cooling.crac_id

    reader = twin_reader(twin, clock.time)

    pdu_ids = scenario.rack.pdu_ids
    drivers: list[Any] = [
        TwinDriver(
            f"pdu.{p}", interval_s, reader(f"pdu.{p}.", *(("inlet.",) if p == pdu_ids[0] else ())), clock.time
        )
        for p in pdu_ids
    ]
    drivers.append(TwinDriver(f"crac.{crac_id}", interval_s, reader(f"crac.{crac_id}."), clock.time))
    drivers.append(TwinDriver("nvml", interval_s, reader("gpu."), clock.time))
    config = Config(
        agent=AgentSection(site="bench", rack="r1", state_dir=state_dir, tick_s=interval_s),
        mqtt=MqttSection(host="127.0.0.1", port=port),
        pdus=tuple(PduConfig(id=p, host="127.0.0.1", interval_s=interval_s) for p in scenario.rack.pdu_ids),
        cracs=(
            CracConfig(
                id=crac_id, host="127.0.0.1", interval_s=interval_s, share=scenario.rack.cooling.share
            ),
        ),
        nvml=NvmlSection(interval_s=interval_s),
        stages=StagesSection(socket_path=None, udp_port=None, mqtt_hints=False),
    )
    meter = RawMeter()
    agent = LiveAgent(
        config, clock=clock, driver_factory=lambda c: drivers, frame_sinks=[meter], engine_batch_s=300.0
    )

    last: tuple[str, str] | None = None
    last_sent = -math.inf

    async def feed_hints_and_sample() -> None:
        next_sample = start
        while True:
            t = clock.time()
            if t - start >= days * 86400:
                agent.request_stop()
                return
            with contextlib.suppress(ValueError):  # the twin ends half a day after the run
                feed(t, twin.stage)
            if t >= next_sample:
                rss_mb, peak_mb = _mem_mb()
                print(
                    json.dumps({"day": (t - start) / 86400, "rss_mb": rss_mb, "peak_mb": peak_mb}), flush=True
                )
                next_sample += 86400
            await clock.sleep(30.0)

    def feed(t: float, stage_fn: Callable[[], tuple[str, str]]) -> None:
        nonlocal last, last_sent
        if agent.intake is None:
            return
        twin.advance_to(max(twin.ts, clock.time()))  # moves the twin to now
        stage_job = stage_fn()
        if stage_job != last or t - last_sent > 300:
            hint = {"stage": stage_job[0], "ts": t} | ({"job": stage_job[1]} if stage_job[1] else {})
            agent.intake.receive(json.dumps(hint).encode(), "udp", "bench")
            last, last_sent = stage_job, t

    async def main() -> int:
        keeper = asyncio.create_task(clock.run())
        task = asyncio.create_task(feed_hints_and_sample())
        code = await agent.run()
        task.cancel()
        keeper.cancel()
        rss_mb, peak_mb = _mem_mb()
        print(
            json.dumps({"day": (clock.time() - start) / 86400, "rss_mb": rss_mb, "peak_mb": peak_mb}),
            flush=True,
        )
        return code

    code = asyncio.run(main())
    raw_out.write_text(
        json.dumps(
            {
                "raw_bytes_per_s": meter.bytes / max(1, meter.rows),
                "signals": meter.signals,
                "rows": meter.seen,
                "sim_s": clock.time() - start,
            }
        )
    )
    return code


def _mem_mb() -> tuple[float, float]:
    rss = 0.0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
    return rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


ROLES: dict[str, Callable[[list[str]], int]] = {
    "devices": role_devices,
    "agent": role_agent,
    "accelerated": role_accelerated,
}

if __name__ == "__main__":
    sys.exit(f"run bench/footprint.py, not {Path(__file__).name}")
