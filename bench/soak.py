"""Soak: the live agent for ≥ 30 simulated days, a broker that restarts, a device that flaps.

The real ``LiveAgent`` loop (real engine, durable store, MQTT publisher, stage hints) runs in its
own process on an accelerated clock (``ScaledClock``: ``--speed`` simulated seconds per real
second), fed by in-process twin devices (network I/O cannot run thousands of times faster; the
drivers' own recovery is tested against real devices in tests/drivers). Meanwhile this script:

* restarts a real Mosquitto (SIGTERM, persistence on, so a QoS 1 subscriber's session survives)
  every ``--restart-hours`` simulated hours;
* has the cooling unit fail for ``--flap-minutes`` of every ``--flap-hours`` simulated hours;
* samples the agent's RSS and CPU time from /proc, and subscribes (QoS 1, persistent session)
  to everything the agent publishes.

At the end the agent stops cleanly and the table shows RSS per simulated day range, CPU, and
messages assigned a ``seq`` / acknowledged by the broker / received / left in the store /
dropped by the store's bound or a full disk / **lost** (assigned − received − left − dropped;
0 expected) and
duplicates (QoS 1 is at-least-once).

Timing is real for the broker and paho (reconnect delays are real seconds), simulated for the
agent's schedule: at ``--speed`` 4000 an 8-hour restart period is 7.2 s of real time and each
restart costs about 1–2 real seconds of outage (≈ 1–2 simulated hours spooled to disk). At that
speed the loop keeps up with about a third of the 10 s poll slots (it skips the rest; the counts
are printed), which is still ~90 000 polls per device over 30 days.

Loss has two possible owners, so a bare paho QoS 1 client (the reference) publishes at about the
agent's rate through the same broker and restarts: a message acknowledged by the broker (PUBACK)
and never received is lost by the broker or the receiver, not by the publisher.

    .venv/bin/python bench/soak.py --days 30            # ≈ 11 min at the default speed 4000
    .venv/bin/python bench/soak.py --days 2 --speed 4000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

TICKS = os.sysconf("SC_CLK_TCK")
INTERVAL_S = 10.0  # device poll interval (simulated)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def proc_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


# ---- the broker -------------------------------------------------------------------------------
class Broker:
    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        (tmp / "db").mkdir()
        self.conf = tmp / "mosquitto.conf"
        self.conf.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\n"
            f"persistence true\npersistence_location {tmp / 'db'}/\nautosave_interval 0\n"
        )
        if os.geteuid() == 0:  # mosquitto drops to user mosquitto: let it write its database
            shutil.chown(tmp / "db", user="mosquitto")
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["mosquitto", "-c", str(self.conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.02)
        raise SystemExit("soak: mosquitto did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()  # SIGTERM: mosquitto saves its sessions and queued messages
            self.proc.wait(timeout=20)
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()
        self.restarts += 1


class Receiver:
    """QoS 1, persistent session: what the broker queued for it survives broker restarts."""

    def __init__(self, port: int) -> None:
        import paho.mqtt.client as mqtt
        from paho.mqtt.client import CallbackAPIVersion

        self.seqs: dict[int, int] = {}  # seq → times received
        self.received = 0
        self.messages = 0
        self._lock = threading.Lock()
        self.client = mqtt.Client(
            callback_api_version=CallbackAPIVersion.VERSION2, client_id="soak-receiver", clean_session=False
        )
        self.client.reconnect_delay_set(1, 1)
        self.control: dict[int, int] = {}  # the reference publisher's seqs → times received
        topics = [("rackwatt/#", 1), ("soak-control/#", 1)]
        self.client.on_connect = lambda c, u, f, rc, p: c.subscribe(topics)
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port, keepalive=30)
        self.client.loop_start()

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        self.messages += 1
        try:
            payload = json.loads(msg.payload)
        except ValueError:
            return
        if msg.topic.startswith("soak-control/"):
            with self._lock:
                self.control[payload["seq"]] = self.control.get(payload["seq"], 0) + 1
            return
        if payload.get("type") == "status":
            return
        seq = payload.get("seq")
        if isinstance(seq, int):
            with self._lock:
                self.received += 1
                self.seqs[seq] = self.seqs.get(seq, 0) + 1

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


class ControlPublisher:
    """The reference: a bare paho client publishing QoS 1 at the agent's rate through the same
    restarts. What it loses after PUBACK is the broker's (or the receiver's) loss, not the agent's."""

    def __init__(self, port: int, period_s: float) -> None:
        import paho.mqtt.client as mqtt
        from paho.mqtt.client import CallbackAPIVersion

        self.period_s = period_s
        self.acked: set[int] = set()
        self.sent = 0
        self._mids: dict[int, int] = {}
        self._early: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.client = mqtt.Client(
            callback_api_version=CallbackAPIVersion.VERSION2, client_id="soak-control", clean_session=False
        )
        self.client.reconnect_delay_set(1, 2)
        self.client.on_publish = self._on_publish
        self.client.connect_async("127.0.0.1", port, keepalive=10)
        self.client.loop_start()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _on_publish(self, client: Any, userdata: Any, mid: int, rc: Any, props: Any) -> None:
        with self._lock:
            seq = self._mids.pop(mid, None)
            if seq is None:
                self._early.add(mid)  # PUBACK before publish() returned its mid to us
            else:
                self.acked.add(seq)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.sent += 1
            # never hold our lock across publish(): paho calls on_publish holding its own
            info = self.client.publish("soak-control/x", json.dumps({"seq": self.sent}), qos=1)
            with self._lock:
                if info.mid in self._early:
                    self._early.discard(info.mid)
                    self.acked.add(self.sent)
                else:
                    self._mids[info.mid] = self.sent

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=5)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


# ---- the agent process ------------------------------------------------------------------------
class FlappingDriver:
    """Wraps a driver: fails ``down_s`` of every ``period_s`` simulated seconds."""

    def __init__(self, inner: Any, period_s: float, down_s: float, clock: Callable[[], float], start: float):
        self.inner, self.period_s, self.down_s = inner, period_s, down_s
        self._clock, self._start = clock, start
        self.device, self.interval_s = inner.device, inner.interval_s
        self.failures = 0

    async def poll(self) -> Any:
        from drivers.base import PollResult

        now = self._clock()
        if (now - self._start) % self.period_s < self.down_s:
            self.failures += 1
            error = f"{self.device} (127.0.0.1:502): no answer"
            return PollResult(self.device, now, {}, False, 1.0, error=error)
        return await self.inner.poll()

    async def close(self) -> None:
        await self.inner.close()


def role_agent(argv: list[str]) -> int:
    from footprint_roles import TwinDriver, twin_reader

    from agent.config.model import (
        AgentSection,
        Config,
        CracConfig,
        MqttSection,
        NvmlSection,
        PduConfig,
        StagesSection,
    )
    from agent.live.clock import ScaledClock
    from agent.live.logsetup import setup_logging
    from agent.live.loop import LiveAgent
    from agent.sim.scenarios import make_scenario
    from agent.sim.twin import RackTwin

    opts = json.loads(argv[0])
    setup_logging()
    clock = ScaledClock(opts["speed"])
    start = clock.time()
    days = opts["days"]
    scenario = make_scenario("steady", days=days + 0.5, gpus=8, start_ts=start, seed=opts["seed"])
    twin = RackTwin(scenario)
    crac_id = scenario.rack.cooling.crac_id
    reader = twin_reader(twin, clock.time)

    pdu_ids = scenario.rack.pdu_ids
    drivers: list[Any] = [
        TwinDriver(f"pdu.{p}", INTERVAL_S, reader(f"pdu.{p}.", *(("inlet.",) if p == pdu_ids[0] else ())),
                   clock.time)
        for p in pdu_ids
    ]
    crac = FlappingDriver(
        TwinDriver(f"crac.{crac_id}", INTERVAL_S, reader(f"crac.{crac_id}."), clock.time),
        opts["flap_hours"] * 3600, opts["flap_minutes"] * 60, clock.time, start,
    )
    drivers += [crac, TwinDriver("nvml", INTERVAL_S, reader("gpu."), clock.time)]
    config = Config(
        agent=AgentSection(site="soak", rack="r1", state_dir=Path(opts["state_dir"]), tick_s=INTERVAL_S),
        mqtt=MqttSection(host="127.0.0.1", port=opts["port"], keepalive_s=10),
        pdus=tuple(PduConfig(id=p, host="127.0.0.1", interval_s=INTERVAL_S) for p in pdu_ids),
        cracs=(
            CracConfig(
                id=crac_id, host="127.0.0.1", interval_s=INTERVAL_S, share=scenario.rack.cooling.share
            ),
        ),
        nvml=NvmlSection(interval_s=INTERVAL_S),
        stages=StagesSection(socket_path=None, udp_port=None, mqtt_hints=False),
    )
    agent = LiveAgent(
        config, clock=clock, driver_factory=lambda c: drivers, engine_batch_s=300.0,
        # paho's delays are real seconds; the will is renewed every few real seconds to exercise it
        publisher_options={"reconnect_min_s": 1, "reconnect_max_s": 2, "will_refresh_s": 5.0},
    )

    async def hints_until_done() -> None:
        last: tuple[str, str] | None = None
        last_sent = -math.inf
        while clock.time() - start < days * 86400:
            t = clock.time()
            if agent.intake is not None:
                twin.advance_to(max(twin.ts, clock.time()))  # moves the twin to now
                stage_job = twin.stage()
                if stage_job != last or t - last_sent > 300:
                    hint = {"stage": stage_job[0], "ts": t} | ({"job": stage_job[1]} if stage_job[1] else {})
                    agent.intake.receive(json.dumps(hint).encode(), "unix", "soak")
                    last, last_sent = stage_job, t
            print(json.dumps({"sim_day": (t - start) / 86400}), flush=True)
            await clock.sleep(3600.0)
        agent.request_stop()

    async def main() -> int:
        task = asyncio.create_task(hints_until_done())
        code = await agent.run()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return code

    code = asyncio.run(main())
    store = agent.store
    publisher_stats = agent.publisher.stats() if agent.publisher else {}
    print(json.dumps({
        "final": True,
        "code": code,
        "sim_days": (clock.time() - start) / 86400,
        "first_seq": store.opened_seq if store is not None else 1,
        "last_seq": store.last_seq if store is not None else 0,
        "left_in_spool": len(store) if store is not None else 0,
        "dropped": sum(store.dropped.values()) + store.dropped_disk_full if store is not None else 0,
        "published": publisher_stats.get("published", 0),
        "connects": publisher_stats.get("connects", 0),
        "flap_failures": crac.failures,
        "polls": {d: h["polls"] for d, h in (agent.poller.health_dict() if agent.poller else {}).items()},
    }), flush=True)
    return code


# ---- the conductor ----------------------------------------------------------------------------
def run_soak(args: argparse.Namespace) -> int:
    if shutil.which("mosquitto") is None:
        raise SystemExit("soak: mosquitto is needed (run .ci/setup)")
    tmp = Path(tempfile.mkdtemp(prefix="rackwatt-soak-"))
    broker = Broker(tmp)
    broker.start()
    receiver = Receiver(broker.port)
    control = ControlPublisher(broker.port, args.control_period_s)
    opts = {
        "speed": args.speed, "days": args.days, "seed": args.seed, "port": broker.port,
        "state_dir": str(tmp / "state"), "flap_hours": args.flap_hours, "flap_minutes": args.flap_minutes,
    }
    cmd = [sys.executable, str(Path(__file__).resolve()), "--role", "agent", json.dumps(opts)]
    log_path = tmp / "agent.log"
    started = time.monotonic()
    with open(log_path, "wb") as log_file:
        agent = subprocess.Popen(cmd, cwd=str(REPO), stdout=subprocess.PIPE, stderr=log_file, text=True)
    lines: list[dict[str, Any]] = []

    def read_stdout() -> None:
        assert agent.stdout is not None
        for line in agent.stdout:
            with contextlib.suppress(ValueError):
                lines.append(json.loads(line))

    reader = threading.Thread(target=read_stdout, daemon=True)
    reader.start()
    samples: list[tuple[float, float, float]] = []  # (sim day, RSS MB, CPU s)
    restart_real_s = args.restart_hours * 3600 / args.speed
    next_restart = started + restart_real_s
    try:
        while agent.poll() is None:
            time.sleep(0.5)
            now = time.monotonic()
            with contextlib.suppress(OSError):
                sim_day = (now - started) * args.speed / 86400
                samples.append((sim_day, proc_rss_mb(agent.pid), proc_cpu_s(agent.pid)))
            if now >= next_restart and agent.poll() is None:
                broker.restart()
                next_restart = time.monotonic() + restart_real_s
        wall_s = time.monotonic() - started
        control.stop()
        reader.join(timeout=10)
        final = next((line for line in lines if line.get("final")), None)
        if final is None or agent.returncode != 0:
            print(log_path.read_text()[-3000:], file=sys.stderr)
            raise SystemExit(f"soak: the agent failed (exit {agent.returncode})")
        deadline = time.monotonic() + 30
        expected = final["last_seq"] - final["first_seq"] + 1 - final["left_in_spool"] - final["dropped"]
        while (len(receiver.seqs) < expected or len(receiver.control) < len(control.acked)) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.2)
    finally:
        if agent.poll() is None:
            agent.kill()
        control.stop()
        control.close()
        receiver.stop()
        broker.stop()
    report(args, final, samples, receiver, broker.restarts, wall_s, log_path)
    acked = control.acked
    got = set(receiver.control)
    print(f"\nreference (bare paho QoS 1 client, same broker, same restarts): {control.sent} sent, "
          f"{len(acked)} acknowledged, {len(acked & got)} of those received, "
          f"**{len(acked - got)} lost after the broker's PUBACK**")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


def report(
    args: argparse.Namespace, final: dict[str, Any], samples: list[tuple[float, float, float]],
    receiver: Receiver, restarts: int, wall_s: float, log_path: Path,
) -> None:
    first, last = final["first_seq"], final["last_seq"]
    assigned = last - first + 1
    unique = sum(1 for seq in receiver.seqs if first <= seq <= last)
    dups = sum(n - 1 for n in receiver.seqs.values())
    lost = assigned - unique - final["left_in_spool"] - final["dropped"]
    cpu_s = samples[-1][2] if samples else math.nan
    sim_s = final["sim_days"] * 86400
    log_text = log_path.read_text(errors="replace")
    tracebacks = log_text.count("Traceback")
    errors = sum(1 for line in log_text.splitlines() if " ERROR " in line)
    print(f"soak: {final['sim_days']:.1f} simulated days in {wall_s:.0f} s wall (speed {args.speed:g}×, "
          f"seed {args.seed}); broker restarted {restarts}× (every {args.restart_hours:g} sim h); "
          f"cooling unit down {args.flap_minutes:g} min every {args.flap_hours:g} sim h "
          f"({final['flap_failures']} failed polls); {final['connects']} MQTT connects")
    polls = final.get("polls", {})
    if polls:
        sim_polls = final["sim_days"] * 86400 / INTERVAL_S
        done = ", ".join(f"{d} {n}" for d, n in polls.items())
        print(f"polls done per device (of {sim_polls:.0f} at the {INTERVAL_S:g} s interval; the loop "
              f"skips slots it cannot keep up with at this speed): {done}")
    print()
    print("| simulated days | RSS min MB | RSS max MB | RSS last MB |")
    print("|---|---|---|---|")
    days = max(1, math.ceil(final["sim_days"]))
    step = max(1, days // 6)
    for lo in range(0, days, step):
        window = [rss for day, rss, _ in samples if lo <= day < lo + step and not math.isnan(rss)]
        if window:
            span = f"{lo}–{min(days, lo + step)}"
            print(f"| {span} | {min(window):.1f} | {max(window):.1f} | {window[-1]:.1f} |")
    after_day1 = [(day, rss) for day, rss, _ in samples if day >= 1 and not math.isnan(rss)]
    if len(after_day1) >= 2:
        slope = slope_mb_per_day(after_day1)
        print(f"\nRSS trend after day 1: {slope:+.3f} MB per simulated day (least squares)")
    print(f"CPU: {cpu_s:.0f} s over {wall_s:.0f} s wall = {100 * cpu_s / wall_s:.0f} % of a core at "
          f"{args.speed:g}×, i.e. {100 * cpu_s / sim_s:.3f} % of a core at real time")
    print()
    print("| messages | count |")
    print("|---|---|")
    for name, value in (
        ("assigned a seq", assigned), ("acknowledged by the broker", final["published"]),
        ("received (unique seq)", unique), ("received twice or more (QoS 1 duplicates)", dups),
        ("left in the store at stop", final["left_in_spool"]),
        ("dropped by the store (bound or full disk)", final["dropped"]),
        ("**lost**", lost),
    ):
        print(f"| {name} | {value} |")
    print(f"\nagent log: {errors} error line(s), {tracebacks} traceback(s)")
    missing = sorted(set(range(first, last + 1)) - set(receiver.seqs))
    if missing:
        print(f"missing seqs: {missing[:20]}")
    for line in [line for line in log_text.splitlines() if " ERROR " in line][:5]:
        print(f"  {line[:300]}")


def slope_mb_per_day(points: list[tuple[float, float]]) -> float:
    n = len(points)
    mx = sum(d for d, _ in points) / n
    my = sum(r for _, r in points) / n
    var = sum((d - mx) ** 2 for d, _ in points)
    return sum((d - mx) * (r - my) for d, r in points) / var if var else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=float, default=30.0, help="simulated days (default 30)")
    parser.add_argument("--speed", type=float, default=4000.0, help="simulated seconds per real second")
    parser.add_argument("--restart-hours", type=float, default=8.0, help="broker restart period, sim h")
    parser.add_argument("--flap-hours", type=float, default=5.0, help="cooling unit failure period, sim h")
    parser.add_argument("--flap-minutes", type=float, default=20.0, help="how long it stays down, sim min")
    parser.add_argument("--seed", type=int, default=0, help="the twin's seed")
    parser.add_argument("--control-period-s", type=float, default=0.03,
                        help="real seconds between the reference publisher's messages (≈ the agent's rate)")
    parser.add_argument("--role", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args(argv)
    if args.role == "agent":
        return role_agent(rest)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return run_soak(args)


if __name__ == "__main__":
    raise SystemExit(main())
