"""Footprint of the live agent: CPU share, peak RSS, RSS over 30 simulated days, bytes published.

Phase A (real time, real protocols): ``rackwatt run`` polls demo devices at 1 Hz — 2 SNMP PDUs
with 24 outlets (apc_rpdu2 OIDs, served by agent/sim/devices/snmp_agent.py from the rack twin),
1 Modbus TCP cooling unit (liebert_icom registers, agent/sim/devices/modbus_server.py) and 8
GPUs (NVML faked at the pynvml boundary, agent/sim/devices/fake_nvml.py) — publishing to a real
mosquitto. The agent runs in its own process; this script samples its CPU time and RSS from /proc.

Phase B (accelerated): the same LiveAgent loop (engine, spool, MQTT publisher, stage hints) on a
virtual clock that jumps ahead as soon as the loop is idle, fed by in-process twin devices with
the same kinds of signals (network I/O cannot run thousands of times faster), polled every 10 s,
for ``--days`` simulated days; RSS is sampled every
simulated day, and the bytes received by a subscriber give bytes published per rack-hour, set
against the same telemetry sent raw at 1 Hz as JSON (one message per device per second).

Targets (issue 7): ≤ 3 % of one core, ≤ 70 MB RSS and flat over 30 days, ≥ 100× fewer bytes.

    .venv/bin/python bench/footprint.py                # both phases (about 3 + 5 minutes)
    .venv/bin/python bench/footprint.py --minutes 1 --days 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from footprint_roles import ROLES  # noqa: E402

PAGE_TICKS = os.sysconf("SC_CLK_TCK")


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / PAGE_TICKS  # utime + stime


def proc_mem_mb(pid: int) -> tuple[float, float]:
    """(RSS, peak RSS) in MB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


class ByteCounter:
    """A subscriber to rackwatt/# counting topic + payload bytes of everything the agent publishes."""

    def __init__(self, port: int) -> None:
        import paho.mqtt.client as mqtt
        from paho.mqtt.client import CallbackAPIVersion

        self.bytes = 0
        self.messages: dict[str, int] = {}
        self.bytes_by_kind: dict[str, int] = {}
        self._lock = threading.Lock()
        self.client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, client_id=f"bench-{port}")
        self.client.on_connect = lambda c, u, f, rc, p: c.subscribe("rackwatt/#", qos=1)
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        kind = msg.topic.split("/")[4]
        size = len(msg.topic) + len(msg.payload)
        with self._lock:
            self.bytes += size
            self.messages[kind] = self.messages.get(kind, 0) + 1
            self.bytes_by_kind[kind] = self.bytes_by_kind.get(kind, 0) + size

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def start_broker(tmp: Path) -> tuple[subprocess.Popen[bytes], int]:
    if shutil.which("mosquitto") is None:
        sys.exit("footprint: mosquitto is needed (run .ci/setup)")
    port = free_port()
    conf = tmp / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
    proc = subprocess.Popen(
        ["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, port
        time.sleep(0.05)
    proc.kill()
    sys.exit("footprint: mosquitto did not start")


def stop(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout_s: float = 20) -> int | None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    return proc.returncode


def role(name: str, *args: str, **popen: Any) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--role", name, *args]
    return subprocess.Popen(cmd, cwd=str(REPO), **popen)


def phase_live(tmp: Path, minutes: float, broker_port: int) -> dict[str, Any]:
    ports = {"a": free_port(socket.SOCK_DGRAM), "b": free_port(socket.SOCK_DGRAM), "crac": free_port()}
    devices = role("devices", json.dumps(ports), stdout=subprocess.PIPE)
    assert devices.stdout is not None
    if devices.stdout.readline().strip() != b"ready":
        stop(devices)
        sys.exit("footprint: demo devices did not start")
    (tmp / "community").write_text("public\n")
    os.chmod(tmp / "community", 0o600)
    config = tmp / "agent.toml"
    pdus = "".join(
        f'[[pdu]]\nid = "{p}"\nhost = "127.0.0.1"\nport = {ports[p]}\nversion = "2c"\n'
        f'community_file = "{tmp / "community"}"\nprofile = "apc_rpdu2"\ninterval_s = 1.0\n\n'
        for p in ("a", "b")
    )
    config.write_text(
        f'[agent]\nsite = "bench"\nrack = "r1"\nstate_dir = "{tmp / "state-live"}"\ntick_s = 1.0\n\n'
        f'[mqtt]\nhost = "127.0.0.1"\nport = {broker_port}\n\n[nvml]\nenabled = true\ninterval_s = 1.0\n\n'
        f"[stages]\nsocket_path = false\n\n{pdus}"
        f'[[crac]]\nid = "1"\nhost = "127.0.0.1"\nport = {ports["crac"]}\nprofile = "liebert_icom"\n'
        f"interval_s = 1.0\n"
    )
    raw_out = tmp / "raw-live.json"
    log_path = tmp / "agent-live.log"
    with open(log_path, "wb") as log_file:
        agent = role("agent", str(config), str(raw_out), stdout=log_file, stderr=subprocess.STDOUT)
    warmup_s = 20.0
    rss_samples: list[float] = []
    try:
        time.sleep(warmup_s)
        if agent.poll() is not None:
            sys.exit(f"footprint: the agent exited early:\n{log_path.read_text()[-3000:]}")
        cpu0, t0 = proc_cpu_s(agent.pid), time.monotonic()
        end = t0 + minutes * 60
        while time.monotonic() < end:
            time.sleep(min(10.0, max(0.0, end - time.monotonic())))
            rss_samples.append(proc_mem_mb(agent.pid)[0])
        cpu1, t1 = proc_cpu_s(agent.pid), time.monotonic()
        rss_mb, peak_mb = proc_mem_mb(agent.pid)
    finally:
        stop(agent)
        stop(devices)
    raw = json.loads(raw_out.read_text()) if raw_out.exists() else {}
    return {
        "cpu_pct": 100 * (cpu1 - cpu0) / (t1 - t0),
        "rss_mb": rss_mb,
        "peak_rss_mb": peak_mb,
        "rss_first_mb": rss_samples[0] if rss_samples else rss_mb,
        "measured_s": t1 - t0,
        "signals": raw.get("signals"),
        "devices_ok": raw.get("devices_ok"),
        "log": str(log_path),
    }


def phase_accelerated(tmp: Path, days: float, broker_port: int) -> dict[str, Any]:
    counter = ByteCounter(broker_port)
    raw_out = tmp / "raw-accel.json"
    log_path = tmp / "agent-accel.log"
    started = time.monotonic()
    with open(log_path, "wb") as log_file:
        agent = role(
            "accelerated",
            str(tmp / "state-accel"),
            str(broker_port),
            str(days),
            str(raw_out),
            stdout=subprocess.PIPE,
            stderr=log_file,
        )
    samples: list[dict[str, float]] = []
    assert agent.stdout is not None
    for line in agent.stdout:
        sample = json.loads(line)
        samples.append(sample)
        print(
            f"  day {sample['day']:5.1f}: RSS {sample['rss_mb']:.1f} MB, peak {sample['peak_mb']:.1f} MB",
            file=sys.stderr,
            flush=True,
        )
    code = agent.wait(timeout=60)
    elapsed = time.monotonic() - started
    time.sleep(1.0)
    counter.stop()
    if code != 0 or not samples:
        sys.exit(f"footprint: the accelerated agent failed ({code}):\n{log_path.read_text()[-3000:]}")
    raw = json.loads(raw_out.read_text())
    sim_hours = raw["sim_s"] / 3600
    return {
        "samples": samples,
        "sim_hours": sim_hours,
        "real_s": elapsed,
        "bytes": counter.bytes,
        "messages": counter.messages,
        "bytes_by_kind": counter.bytes_by_kind,
        "published_per_hour": counter.bytes / sim_hours,
        "raw_per_hour": raw["raw_bytes_per_s"] * 3600,
        "rows": raw["rows"],
        "signals": raw["signals"],
        "log": str(log_path),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--minutes", type=float, default=3.0, help="phase A measuring time (after 20 s warm-up)"
    )
    parser.add_argument("--days", type=float, default=30.0, help="phase B simulated days")
    parser.add_argument("--skip-live", action="store_true")
    parser.add_argument("--skip-accelerated", action="store_true")
    parser.add_argument("--role", choices=sorted(ROLES), help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args(argv)
    if args.role:
        return ROLES[args.role](rest)
    tmp = Path(tempfile.mkdtemp(prefix="rackwatt-footprint-"))
    broker, port = start_broker(tmp)
    try:
        if not args.skip_live:
            print(
                f"phase A: rackwatt run, 2 PDUs × 24 outlets + 1 cooling unit + 8 GPUs at 1 Hz, "
                f"{args.minutes:g} min",
                file=sys.stderr,
                flush=True,
            )
            a = phase_live(tmp, args.minutes, port)
            print(
                f"live: CPU {a['cpu_pct']:.2f} % of one core over {a['measured_s']:.0f} s "
                f"(target ≤ 3 %); RSS {a['rss_mb']:.1f} MB, peak {a['peak_rss_mb']:.1f} MB (target ≤ 70 MB); "
                f"RSS first/last sample {a['rss_first_mb']:.1f}/{a['rss_mb']:.1f} MB; "
                f"{a['signals']} signals per tick; devices ok: {a['devices_ok']}"
            )
        if not args.skip_accelerated:
            print(
                f"phase B: {args.days:g} simulated days, as fast as the CPU allows",
                file=sys.stderr,
                flush=True,
            )
            b = phase_accelerated(tmp, args.days, port)
            rss = [s["rss_mb"] for s in b["samples"]]
            day1 = next((s["rss_mb"] for s in b["samples"] if s["day"] >= 1), rss[0])
            ratio = b["raw_per_hour"] / b["published_per_hour"]
            print(
                f"accelerated: {b['sim_hours'] / 24:.1f} days in {b['real_s']:.0f} s, {b['rows']} rows; "
                f"RSS (agent + in-process twin) after day 1 {day1:.1f} MB, last {rss[-1]:.1f} MB, "
                f"max {max(rss):.1f} MB, "
                f"peak {b['samples'][-1]['peak_mb']:.1f} MB (flat: last − day 1 = {rss[-1] - day1:+.1f} MB)"
            )
            per_kind = ", ".join(
                f"{k} {v / b['sim_hours'] / 1024:.1f}" for k, v in sorted(b["bytes_by_kind"].items())
            )
            print(
                f"bytes per rack-hour: published {b['published_per_hour'] / 1024:.1f} KiB ({per_kind} KiB); "
                f"raw 1 Hz JSON of the same {b['signals']} signals {b['raw_per_hour'] / 1024:.0f} KiB; "
                f"ratio {ratio:.0f}× (target ≥ 100×)"
            )
    finally:
        stop(broker)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
