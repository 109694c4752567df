"""Footprint of the node link: the rack agent receiving 8 nodes × 8 GPUs at 1 Hz, and one node agent.

Both phases run the real processes on loopback, in real time, and sample their CPU time and RSS
from /proc (bench/footprint.py's helpers):

- reference: ``rackwatt run`` on the gateway reading 8 local GPUs over (faked) NVML at 1 Hz,
  plus 2 SNMP PDUs and a Modbus cooling unit at 1 Hz, publishing to a real mosquitto: the
  layout bench/footprint.py measures, measured again here so the ratio is of the same machine
  at the same moment;
- nodes: the same rack agent with ``[nvml]`` off and 8 ``[[node]]`` tables (64 GPUs), fed by 8
  node agents: one measured on its own (``rackwatt run`` with ``role = "node"``, 8 faked GPUs),
  the other 7 in one feeder process (they only load the rack agent).

Bytes per node-hour: what the measured node agent sent (UDP payload; on the wire add 28 bytes
of IPv4 + UDP header per datagram), over the measured time.

Targets (issue 14): rack agent ≤ 3 % of a core and ≤ 100 MB RSS; node agent ≤ 1 % and ≤ 60 MB.

    .venv/bin/python bench/footprint_node.py               # 1 measured minute per phase (~3 min)
    .venv/bin/python bench/footprint_node.py --minutes 0.5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from footprint import free_port, proc_cpu_s, proc_mem_mb, start_broker, stop  # noqa: E402

NODES, GPUS_PER_NODE = 8, 8
WARMUP_S = 20.0  # imports, first polls, engine warm-up allocations: not the steady state measured
UDP_IPV4_HEADER_BYTES = 28
SEND_INTERVAL_S = 1.0  # [uplink] interval_s of every node here


def _fake_values(gpus: int) -> Any:
    import math

    def values() -> dict[int, dict[str, float]]:
        phase = math.sin(time.time() / 40.0)
        return {i: {"power_w": 450.0 + 250.0 * phase + 3 * i, "util_pct": 60 + 30 * phase,
                    "mem_util_pct": 40.0, "temp_c": 60 + 10 * phase, "sm_clock_mhz": 1800.0,
                    "power_limit_w": 700.0}
                for i in range(gpus)}

    return values


def role_node(argv: list[str]) -> int:
    """One node agent (``rackwatt run``'s node path) over 8 faked GPUs; its send counts on exit."""
    from agent.config.loader import load_config
    from agent.live.logsetup import setup_logging
    from agent.live.run_cmd import serve
    from agent.node.sender import NodeAgent
    from agent.sim.devices.fake_nvml import FakeNvml

    config_path, out = Path(argv[0]), Path(argv[1])
    setup_logging()
    fake = FakeNvml(_fake_values(GPUS_PER_NODE))
    with fake.installed():
        agent = NodeAgent(load_config(config_path))

        code = asyncio.run(serve(agent))
    out.write_text(json.dumps({"sent": agent.sent, "bytes_sent": agent.bytes_sent,
                               "send_errors": agent.send_errors}))
    return code


def role_feeders(argv: list[str]) -> int:
    """The other nodes' agents, in one process: each reads its own 8 of 64 faked GPUs."""
    from agent.config.loader import load_config
    from agent.node.sender import NodeAgent
    from agent.sim.devices.fake_nvml import FakeNvml

    fake = FakeNvml(_fake_values(NODES * GPUS_PER_NODE))
    with fake.installed():
        agents = [NodeAgent(load_config(Path(p))) for p in argv]

        async def main() -> None:
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGTERM, lambda: [a.request_stop() for a in agents])
            tasks = [asyncio.create_task(a.run()) for a in agents]
            if tasks:
                await asyncio.wait(tasks)

        asyncio.run(main())
    return 0


ROLES = {"node": role_node, "feeders": role_feeders}


def role(name: str, *args: str, **popen: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--role", name, *args],
                            cwd=str(REPO), **popen)


def footprint_role(name: str, *args: str, **popen: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(REPO / "bench" / "footprint.py"), "--role", name, *args],
                            cwd=str(REPO), **popen)


def rack_config(tmp: Path, name: str, ports: dict[str, int], broker_port: int, node_lines: list[str]) -> Path:
    pdus = "".join(
        f'[[pdu]]\nid = "{p}"\nhost = "127.0.0.1"\nport = {ports[p]}\nversion = "2c"\n'
        f'community_file = "{tmp / "community"}"\nprofile = "apc_rpdu2"\ninterval_s = 1.0\n\n'
        for p in ("a", "b"))
    nvml = "false" if node_lines else "true"
    path = tmp / f"{name}.toml"
    path.write_text(
        f'[agent]\nsite = "bench"\nrack = "{name}"\nstate_dir = "{tmp / ("state-" + name)}"\ntick_s = 1.0\n\n'
        f'[mqtt]\nhost = "127.0.0.1"\nport = {broker_port}\n\n[nvml]\nenabled = {nvml}\ninterval_s = 1.0\n\n'
        f"[stages]\nsocket_path = false\n\n{pdus}"
        f'[[crac]]\nid = "1"\nhost = "127.0.0.1"\nport = {ports["crac"]}\nprofile = "liebert_icom"\n'
        f"interval_s = 1.0\n" + "\n".join(node_lines) + "\n")
    return path


def measure(procs: dict[str, subprocess.Popen[bytes]], minutes: float) -> dict[str, dict[str, float]]:
    """CPU % of one core and RSS of each process over ``minutes``, after the warm-up."""
    time.sleep(WARMUP_S)
    for name, proc in procs.items():
        if proc.poll() is not None:
            sys.exit(f"footprint_node: {name} exited early (code {proc.returncode})")
    cpu0 = {n: proc_cpu_s(p.pid) for n, p in procs.items()}
    t0 = time.monotonic()
    time.sleep(minutes * 60)
    t1 = time.monotonic()
    out: dict[str, dict[str, float]] = {}
    for name, proc in procs.items():
        rss, peak = proc_mem_mb(proc.pid)
        out[name] = {"cpu_pct": 100 * (proc_cpu_s(proc.pid) - cpu0[name]) / (t1 - t0), "rss_mb": rss,
                     "peak_rss_mb": peak, "measured_s": t1 - t0}
    return out


def run(tmp: Path, minutes: float) -> dict[str, Any]:
    from agent.live.demo.nodes import NodePlan

    broker, broker_port = start_broker(tmp)
    ports = {"a": free_port(socket.SOCK_DGRAM), "b": free_port(socket.SOCK_DGRAM), "crac": free_port()}
    devices = footprint_role("devices", json.dumps(ports), stdout=subprocess.PIPE)
    assert devices.stdout is not None
    if devices.stdout.readline().strip() != b"ready":
        sys.exit("footprint_node: demo devices did not start")
    (tmp / "community").write_text("public\n")
    (tmp / "community").chmod(0o600)
    results: dict[str, Any] = {}
    try:
        with open(tmp / "reference.log", "wb") as logs:  # the child keeps its own copy of the fd
            ref = footprint_role("agent", str(rack_config(tmp, "reference", ports, broker_port, [])),
                                 str(tmp / "raw-ref.json"), stdout=logs, stderr=subprocess.STDOUT)
        try:
            results["reference"] = measure({"rack": ref}, minutes)["rack"]
        finally:
            stop(ref)
        plan = NodePlan.make(tmp, NODES, GPUS_PER_NODE, interval_s=SEND_INTERVAL_S)
        node_ids = list(plan.keys)
        rack_toml = rack_config(tmp, "nodes", ports, broker_port, plan.rack_lines())
        with open(tmp / "nodes.log", "wb") as logs:
            rack = footprint_role("agent", str(rack_toml), str(tmp / "raw-nodes.json"), stdout=logs,
                                  stderr=subprocess.STDOUT)
            node = role("node", str(plan.node_config(node_ids[0])), str(tmp / "node.json"), stdout=logs,
                        stderr=subprocess.STDOUT)
            feeders = role("feeders", *(str(plan.node_config(n, plan.gpus_of(n))) for n in node_ids[1:]),
                           stdout=logs, stderr=subprocess.STDOUT)
        started = time.monotonic()
        try:
            measured = measure({"rack": rack, "node": node}, minutes)
        finally:
            stop(node)
            stop(feeders)
            stop(rack)
        node_run_s = time.monotonic() - started
        results.update(measured)
        sent = json.loads((tmp / "node.json").read_text())
        raw = json.loads((tmp / "raw-nodes.json").read_text())
        results["node_bytes"] = sent
        results["node_run_s"] = node_run_s
        results["devices_ok"] = raw.get("devices_ok")
    finally:
        stop(devices)
        stop(broker)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--minutes", type=float, default=1.0, help="measured minutes per phase (default 1)")
    args, rest = parser.parse_known_args(argv)
    if args.role:
        return ROLES[args.role](rest)
    with tempfile.TemporaryDirectory(prefix="rackwatt-footprint-node-") as tmp:
        r = run(Path(tmp), args.minutes)
    ref, rack, node, sent = r["reference"], r["rack"], r["node"], r["node_bytes"]
    per_datagram = sent["bytes_sent"] / max(1, sent["sent"])
    rate_per_s = sent["sent"] / r["node_run_s"]  # over the whole run, start-up and stop included
    payload_per_h = per_datagram * 3600 / SEND_INTERVAL_S  # one datagram per interval, steady state
    wire_per_h = (per_datagram + UDP_IPV4_HEADER_BYTES) * 3600 / SEND_INTERVAL_S
    print(f"command: .venv/bin/python bench/footprint_node.py --minutes {args.minutes:g}")
    print(f"measured {rack['measured_s']:.0f} s per phase after a {WARMUP_S:g} s warm-up; devices ok: "
          f"{sum(bool(v) for v in (r['devices_ok'] or {}).values())}/{len(r['devices_ok'] or {})}")
    print(f"reference rack agent (8 local GPUs, 2 PDUs, 1 CRAC at 1 Hz): CPU {ref['cpu_pct']:.2f} % of a "
          f"core, RSS {ref['rss_mb']:.1f} MB (peak {ref['peak_rss_mb']:.1f})")
    print(f"rack agent, 8 nodes x 8 GPUs over the node link at 1 Hz: CPU {rack['cpu_pct']:.2f} % of a core "
          f"(target <= 3 %; {rack['cpu_pct'] / max(ref['cpu_pct'], 1e-9):.2f}x the reference), "
          f"RSS {rack['rss_mb']:.1f} MB (peak {rack['peak_rss_mb']:.1f}; target <= 100 MB; "
          f"{rack['rss_mb'] / ref['rss_mb']:.2f}x)")
    print(f"node agent (8 GPUs at 1 Hz): CPU {node['cpu_pct']:.2f} % of a core (target <= 1 %), "
          f"RSS {node['rss_mb']:.1f} MB (peak {node['peak_rss_mb']:.1f}; target <= 60 MB)")
    print(f"node link: {sent['sent']} datagrams of {per_datagram:.0f} B ({rate_per_s:.2f}/s over the run "
          f"with its start and stop, {sent['send_errors']} send errors); at 1 per {SEND_INTERVAL_S:g} s: "
          f"{payload_per_h / 1e6:.2f} MB per node-hour of UDP payload, "
          f"{wire_per_h / 1e6:.2f} MB on the wire (IPv4)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
